"""What every route shares: the caller's identity, its JSON body, the runtime, the strict parameters.

One :class:`AppContext` per app (built by :func:`troupe.serve.app.create_app`, kept as the
:class:`TroupeApp`'s ``context``) holds what the routes of :mod:`.routes` need beyond the
request: the runtime, the server's settings, the keys, the per-tenant limits, the replica's
stopping state. The routes are plain module functions on an ``APIRouter`` each; they reach it
through the request (:func:`context`).

FastAPI dependencies (``Depends``), run before the route's parameters are validated:

- :data:`Tenant` (:func:`tenant`): authenticates the caller (401) and gives its tenant
  (``""`` with auth off); it also refuses a declared query parameter sent twice (400), so
  that a 401 comes before any 400;
- :func:`admin`: lets an admin key through (404 while none is configured, 403 for a tenant's key);
- :func:`viewer`: the console's caller (:class:`~troupe.console.Viewer`).

Plain calls, made by the route where it needs them (no per-request dependency resolution on
the hot path, and the answers keep their order: 401, then a bad parameter's 400, then the
body's 413/400):

- :func:`runtime`: the :class:`Runtime` that serves the request;
- :func:`json_body`: the request's JSON body, within ``max_body_bytes`` and ``max_json_depth``;
- :func:`object_body`, :func:`missing`: a JSON object body with known keys only.

Example::

    router = APIRouter()

    @router.get("/v1/conversations/{conversation_id}")
    async def get_conversation(request: Request, conversation_id: str, who: Tenant) -> dict[str, Any]:
        return await runtime(request).get_conversation(who, conversation_id)
"""

from __future__ import annotations

import dataclasses
import hmac
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from starlette.requests import HTTPConnection

from troupe.console import Viewer
from troupe.protocol import (
    AuthenticationFailed,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    ProtocolError,
    decode_json_body,
)
from troupe.protocol.query_params import QueryInt
from troupe.runtime.facade import Runtime

from .bodies import read_within
from .config import ServerSettings
from .limits import TenantLimits
from .stopping import Stopping

__all__ = [
    "AppContext",
    "Order",
    "PageSize",
    "Tenant",
    "TroupeApp",
    "admin",
    "authenticate",
    "context",
    "json_body",
    "missing",
    "object_body",
    "runtime",
    "tenant",
    "viewer",
]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AppContext:
    """What the routes of one app share (module docstring)."""

    get_runtime: Callable[[], Runtime]
    """Returns the runtime; called on every request (Serve builds the runtime after the app)."""
    settings: ServerSettings
    keys: Mapping[str, str]
    """Tenants' API keys → their tenant; empty: authentication is off."""
    admin_keys: tuple[str, ...]
    tenant_limits: TenantLimits
    stopping: Stopping
    created: int
    """When the app was built (Unix seconds): the ``created`` of ``/v1/models``."""


class TroupeApp(FastAPI):
    """The app :func:`troupe.serve.app.create_app` builds: a FastAPI app with its :class:`AppContext`.

    A plain attribute, not ``app.state.context``: a look-up in Starlette's ``State`` costs about
    half a microsecond (measured), and the create path makes three per request.
    """

    context: AppContext


def context(request: HTTPConnection) -> AppContext:
    """The :class:`AppContext` of the app serving ``request`` (or socket)."""
    return request.app.context


def runtime(request: Request) -> Runtime:
    """The :class:`Runtime` that serves ``request``."""
    return request.app.context.get_runtime()


# -- dependencies ------------------------------------------------------------------------


async def tenant(request: Request) -> str:
    """The caller's tenant (a dependency, so that it runs, and may answer 401, before the
    parameters are validated; a parameter sent twice is refused here, once the caller is known)."""
    who = _authenticate(request, context(request).keys)
    _reject_repeated(request)
    return who


def authenticate(connection: HTTPConnection) -> str:
    """The tenant of a connection that no dependency runs for (a WebSocket's upgrade request)."""
    return _authenticate(connection, context(connection).keys)


Tenant = Annotated[str, Depends(tenant)]
"""A route's ``who``: the caller's tenant (:func:`tenant`)."""


async def admin(request: Request) -> None:
    """Let an admin key through (a dependency too: a refusal comes before the body is read)."""
    found = context(request)
    _authenticate_admin(request, found.admin_keys, found.keys)


async def viewer(request: Request) -> Viewer:
    """Who looks at the console: an admin key sees every tenant; any other caller is its
    tenant, authenticated as by the API (so with no keys, anyone is tenant ``""``)."""
    found = context(request)
    keys, admin_keys = found.keys, found.admin_keys
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if admin_keys and scheme.lower() == "bearer" and _matching(token.strip(), admin_keys):
        seen = Viewer(tenant="", admin=True, keys=bool(keys))
    else:
        seen = Viewer(tenant=_authenticate(request, keys), admin=False, keys=bool(keys))
    _reject_repeated(request)
    return seen


# -- parameters ---------------------------------------------------------------------------

PageSize = Annotated[QueryInt, Query(ge=1, le=100, description="Page size, 1–100.")]
Order = Annotated[Literal["asc", "desc"], Query(description="`asc` or `desc` (by creation time).")]


# -- bodies -------------------------------------------------------------------------------


async def json_body(request: Request, *, empty_ok: bool = False) -> Any:
    """The request's JSON body: 413 past ``max_body_bytes`` (before all of it is read), 400 when
    it is not JSON or nests deeper than ``max_json_depth``; ``empty_ok``: no body reads as ``{}``."""
    settings = context(request).settings
    limit = settings.max_body_bytes
    raw = await read_within(request, limit, lambda: _too_large(limit))
    if empty_ok and not raw.strip():
        raw = b"{}"
    return decode_json_body(raw, max_depth=settings.max_json_depth)


def object_body(body: Any, *, allowed: tuple[str, ...]) -> dict[str, Any]:
    """``body`` as a JSON object whose keys are all ``allowed`` (400 otherwise)."""
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_type")
    for key in body:
        if key not in allowed:
            raise InvalidRequest(f"Unknown parameter: '{key}'.", param=key, code="unknown_parameter")
    return body


def missing(param: str) -> InvalidRequest:
    """The 400 for a required body parameter that is absent."""
    return InvalidRequest(f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")


def _too_large(limit: int) -> ProtocolError:
    return ProtocolError(
        f"The request body is too large: at most {limit} bytes are allowed.",
        type="invalid_request_error", code="request_too_large", status=413,
    )  # fmt: skip


# -- authentication -------------------------------------------------------------------------


def _authenticate(request: HTTPConnection, keys: Mapping[str, str]) -> str:
    """The caller's tenant: ``""`` with auth off, else the tenant of its bearer key."""
    if not keys:
        return ""
    token = _bearer_token(request)
    found = _matching(token, keys)
    if not found:
        raise _incorrect_key(token)
    return keys[found[0]]


def _authenticate_admin(request: Request, admin_keys: tuple[str, ...], keys: Mapping[str, str]) -> None:
    """Let a caller with an admin key through: 404 while no admin key is configured, 403 for a
    tenant's key, 401 for any other."""
    if not admin_keys:
        raise NotFound(
            "The operator endpoints are off: configure an admin key ([auth] admin_keys, or "
            "TROUPE_ADMIN_KEYS) to turn them on."
        )
    token = _bearer_token(request)
    if _matching(token, admin_keys):
        return
    if _matching(token, keys):
        raise PermissionDenied("This endpoint needs an admin key; the key provided is a tenant's.")
    raise _incorrect_key(token)


def _bearer_token(request: HTTPConnection) -> str:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthenticationFailed(
            "You didn't provide an API key. Provide it in an Authorization header using Bearer auth "
            "(Authorization: Bearer YOUR_KEY)."
        )
    return token


def _matching(token: str, keys: Iterable[str]) -> list[str]:
    """The keys equal to ``token``, compared with every key: the timing tells nothing about
    which (if any) matched."""
    return [key for key in keys if hmac.compare_digest(key.encode(), token.encode())]


def _incorrect_key(token: str) -> AuthenticationFailed:
    hint = token[:3] + "…" + token[-4:] if len(token) > 8 else "…"
    return AuthenticationFailed(f"Incorrect API key provided: {hint}.")


# -- strict query parameters ------------------------------------------------------------------


def _reject_repeated(request: Request) -> None:
    """Refuse a query parameter the route declares, sent more than once (FastAPI would read the
    last value and drop the others unseen). The authenticating dependencies call it, so that a
    401 still comes first and a malformed value's 400 next.

    Raises:
        RequestValidationError: naming the first such parameter (answered 400 naming it).
    """
    if not request.scope.get("query_string"):  # most requests (every create): nothing to look at
        return
    dependant = getattr(request.scope.get("route"), "dependant", None)
    if dependant is None:
        return
    declared = {field.alias for field in _query_fields(dependant)}
    seen: set[str] = set()
    for name, value in request.query_params.multi_items():
        if name in declared:
            if name in seen:
                raise RequestValidationError([{
                    "type": "query_repeated", "loc": ("query", name), "input": value,
                    "msg": "sent more than once; send it once",
                }])  # fmt: skip
            seen.add(name)


def _query_fields(dependant: Any) -> list[Any]:
    """A route's query parameters, its dependencies' included."""
    return [*dependant.query_params, *(f for sub in dependant.dependencies for f in _query_fields(sub))]
