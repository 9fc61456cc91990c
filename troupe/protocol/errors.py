"""Protocol errors: what a client sees when a request is refused or a run fails.

Every error renders as the OpenAI error body::

    {"error": {"message": str, "type": str, "param": str | None, "code": str | None}}

and carries the HTTP ``status`` the server answers with.

Tree::

    ProtocolError              root; ``status`` 500 unless a subclass says otherwise
    ├── InvalidRequest         400  invalid_request_error   (bad body, bad parameter)
    ├── AuthenticationFailed   401  invalid_request_error   code "invalid_api_key"
    ├── PermissionDenied       403  invalid_request_error   code "permission_denied"
    ├── NotFound               404  invalid_request_error   code "not_found" unless given
    ├── ExternalConnectorError 424  external_connector_error (an MCP server could not be listed)
    └── ServerError            500  server_error

The errors pickle (they cross Ray actor boundaries), keeping every attribute.

This module is also the boundary where pydantic's ``ValidationError`` becomes an
:class:`InvalidRequest` naming the offending field in OpenAI's style
(``input[2].call_id``): see :func:`invalid_request_from_errors` and
:func:`validate_as`.

Every error a client can see is shaped here: the tree, the failed-response mapping and the
rendering of pydantic's errors in OpenAI's words.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar
from urllib.parse import urlsplit

from pydantic import TypeAdapter, ValidationError

__all__ = [
    "ProtocolError",
    "InvalidRequest",
    "AuthenticationFailed",
    "PermissionDenied",
    "NotFound",
    "ExternalConnectorError",
    "ServerError",
    "previous_response_not_found",
    "conversation_not_found",
    "model_not_found",
    "check_id_format",
    "failed_response_error",
    "format_param",
    "invalid_request_from_errors",
    "validate_as",
    "describe_type",
    "show_value",
    "object_body",
    "wrong_type",
]

Loc = tuple[str | int, ...]


class ProtocolError(Exception):
    """Root of the protocol errors; renders as the OpenAI error body.

    Example::

        err = NotFound("Response 'resp_1' not found.", param="response_id")
        err.status, err.to_body()["error"]["code"]   # (404, "not_found")
    """

    default_status: ClassVar[int] = 500
    default_type: ClassVar[str] = "server_error"
    default_code: ClassVar[str | None] = None

    def __init__(
        self,
        message: str,
        *,
        type: str | None = None,  # noqa: A002 - the wire name
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        """Human-readable explanation, shown to the client as-is."""
        self.type = type or self.default_type
        """OpenAI error ``type`` (``invalid_request_error``, ``server_error``…)."""
        self.param = param
        """The offending parameter in dotted/bracket form (``input[2].call_id``), or None."""
        self.code = code if code is not None else self.default_code
        """Machine-readable code (``invalid_value``, ``not_found``…), or None."""
        self.status = status or self.default_status
        """The HTTP status to answer with."""

    def to_body(self) -> dict[str, Any]:
        """The JSON error body: ``{"error": {"message", "type", "param", "code"}}``."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception pickles as cls(*self.args), which would drop the keyword-only
        # attributes; rebuild from the message and restore the rest as state.
        return (self.__class__, (self.message,), dict(self.__dict__))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.message!r}, type={self.type!r}, "
            f"param={self.param!r}, code={self.code!r}, status={self.status})"
        )


class InvalidRequest(ProtocolError):
    """The request is malformed or names an invalid parameter value (400)."""

    default_status = 400
    default_type = "invalid_request_error"


class AuthenticationFailed(ProtocolError):
    """Missing or wrong API key (401)."""

    default_status = 401
    default_type = "invalid_request_error"
    default_code = "invalid_api_key"


class PermissionDenied(ProtocolError):
    """A known API key that may not do this (403), e.g. a tenant's key on an operator endpoint."""

    default_status = 403
    default_type = "invalid_request_error"
    default_code = "permission_denied"


class NotFound(ProtocolError):
    """An addressed object (response, conversation, item) does not exist (404)."""

    default_status = 404
    default_type = "invalid_request_error"
    default_code = "not_found"


def previous_response_not_found(response_id: str) -> InvalidRequest:
    """The 400 for a ``previous_response_id`` that names no stored response (OpenAI answers 400, not 404)."""
    return InvalidRequest(
        f"Previous response with id '{response_id}' not found.",
        param="previous_response_id",
        code="previous_response_not_found",
    )


def model_not_found(model: str) -> NotFound:
    """The 404 for a request's ``model`` that this server does not serve."""
    return NotFound(f"The model '{model}' does not exist.", param="model", code="model_not_found")


def conversation_not_found(conversation_id: str) -> NotFound:
    """The 404 for a request's ``conversation`` that names no conversation."""
    return NotFound(f"Conversation '{conversation_id}' not found.", param="conversation")


def check_id_format(value: str, prefix: str, param: str) -> str:
    """``value`` if it begins with ``prefix``; else OpenAI's 400 ``invalid_value`` naming ``param``.

    OpenAI checks an id's shape before looking it up: ``"conversation": "invalid-format"``
    is a 400 ("Expected an ID that begins with 'conv'"), not a 404.
    """
    if not value.startswith(prefix):
        raise InvalidRequest(
            f"Invalid '{param}': {show_value(value)}. Expected an ID that begins with '{prefix}'.",
            param=param,
            code="invalid_value",
        )
    return value


class ExternalConnectorError(ProtocolError):
    """A server the request names (an MCP server's ``server_url``) could not be used (424).

    OpenAI's answer when a request's MCP server cannot be listed, e.g. ``"Error retrieving
    tool list from MCP server: 'deepwiki'. Http status code: 401 (Unauthorized)"``.
    """

    default_status = 424
    default_type = "external_connector_error"
    default_code = "external_connector_error"


class ServerError(ProtocolError):
    """Something failed on our side (500)."""

    default_status = 500
    default_type = "server_error"


def failed_response_error(error: dict[str, Any] | None) -> ProtocolError:
    """The HTTP error for a non-streaming response that ended ``failed`` with ``error``
    (a stream reports the same failure in-band: ``error`` and ``response.failed``).

    429 for an upstream rate limit (worth a retry); 500 for ``server_error``; 424 for an MCP
    server that could not be used; any other code is the upstream refusing the request
    itself (a malformed image, a prompt too long): 400 with that code.

    Example::

        failed_response_error({"code": "invalid_base64", "message": "bad image"}).status   # 400
    """
    error = error or {}
    code = error.get("code") or "server_error"
    message = error.get("message") or "The response failed."
    if code == "rate_limit_exceeded":
        return ProtocolError(message, type="rate_limit_error", code=code, status=429)
    if code == "server_error":
        return ServerError(message, code=code)
    if code == "external_connector_error":
        return ExternalConnectorError(message)
    return InvalidRequest(message, code=code, param=error.get("param"))


# --- The pydantic boundary -------------------------------------------------

_IDENT = re.compile(r"[a-z_][a-z0-9_]*\Z")
# pydantic names union members in error locations: by class name for TypedDicts,
# by a schema repr ("list[str]", "literal['a','b']") otherwise, or by these bare words.
_BARE_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none", "bytes"})

_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "bool_type": "a boolean",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "an array",
    "tuple_type": "an array",
    "set_type": "an array",
    "iterable_type": "an array",
    "is_instance_of": "an array",
    "sequence_str": "an array of strings",
    "none_required": "null",
    "literal_error": "a string",
    "union_type": "a valid value",
}
_VALUE_ERRORS = frozenset({"literal_error", "enum"})
# pydantic's bound errors → OpenAI's "integer_below_min_value" family: (side, relation, ctx key).
_BOUNDS = {
    "greater_than_equal": ("below", ">=", "ge"),
    "greater_than": ("below", ">", "gt"),
    "less_than_equal": ("above", "<=", "le"),
    "less_than": ("above", "<", "lt"),
}


def format_param(loc: Sequence[str | int]) -> str | None:
    """Render a location as OpenAI does: ``("input", 2, "call_id")`` → ``input[2].call_id``."""
    out = ""
    for seg in loc:
        out += f"[{seg}]" if isinstance(seg, int) else (f".{seg}" if out else str(seg))
    return out or None


def describe_type(value: Any) -> str:
    """The JSON type of ``value`` as an error message names it (``null``, ``a boolean``, …)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list | tuple):
        return "an array"
    return type(value).__name__


def show_value(value: Any) -> str:
    """``value`` quoted for an error message (strings in single quotes, the rest as JSON), shortened."""
    try:
        text = f"'{value}'" if isinstance(value, str) else json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_http_url(value: Any, param: str) -> str:
    """``value`` if it is an http(s) URL with a host and no credentials in it; else a 400 naming
    ``param`` (whether it may be reached is the runtime's URL policy, not this)."""
    if not isinstance(value, str):
        raise wrong_type(param, "a URL", value)
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        parts = None
    if parts is None or parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise InvalidRequest(f"Invalid '{param}': {show_value(value)} is not an http(s) URL.", param=param,
                             code="invalid_value")  # fmt: skip
    if parts.username is not None or parts.password is not None:
        raise InvalidRequest(f"Invalid '{param}': a URL may not hold credentials.", param=param, code="invalid_value")
    return value


def object_body(body: Any, where: str, allowed: Sequence[str]) -> dict[str, Any]:
    """``body`` as a JSON object whose keys are all ``allowed`` (a hand-checked body: the
    Containers and Agents APIs'); ``where`` is its place (``""``: the request body itself).

    Raises:
        InvalidRequest: not an object (``invalid_type``), or an unknown key
            (``unknown_parameter``, naming ``where.key``).
    """
    if not isinstance(body, dict):
        if not where:
            raise InvalidRequest(f"The request body must be a JSON object, got {describe_type(body)}.",
                                 code="invalid_type")  # fmt: skip
        raise wrong_type(where, "an object", body)
    for key in body:
        if key not in allowed:
            param = f"{where}.{key}" if where else key
            raise InvalidRequest(f"Unknown parameter: {show_value(param)}.", param=param, code="unknown_parameter")
    return body


def wrong_type(param: str, expected: str, value: Any) -> InvalidRequest:
    """The 400 ``invalid_type`` for ``param``, saying what was expected and what came."""
    return InvalidRequest(f"Invalid type for '{param}': expected {expected}, got {describe_type(value)}.",
                          param=param, code="invalid_type")  # fmt: skip


def _is_tag(seg: str | int) -> bool:
    return isinstance(seg, str) and (seg in _BARE_TAGS or not _IDENT.match(seg))


def _choose_branch(branches: dict[str, list[dict]], depth: int) -> list[dict]:
    """Keep the errors of the union member the client evidently meant."""
    shallow = {t for t, errs in branches.items() if all(len(e["loc"]) == depth + 1 for e in errs)}

    def type_mismatch(errs: list[dict]) -> bool:
        return any(e["loc"][depth + 1 :] == ("type",) and e["type"] in _VALUE_ERRORS for e in errs)

    def strip(errs: list[dict]) -> list[dict]:
        return [{**e, "loc": e["loc"][:depth] + e["loc"][depth + 1 :]} for e in errs]

    deep = [t for t in branches if t not in shallow]
    if deep:
        matched = [t for t in deep if not type_mismatch(branches[t])]
        if matched:
            return strip(branches[min(matched, key=lambda t: len(branches[t]))])
        # Every member rejected the ``type`` discriminator: that is the one error.
        mismatches = [e for t in deep for e in branches[t] if e["loc"][depth + 1 :] == ("type",)]
        expected = " or ".join(e.get("ctx", {}).get("expected", "") for e in mismatches)
        first = strip(mismatches[:1])[0]
        return [{**first, "type": "literal_error", "ctx": {"expected": expected}}]
    errs = [e for t in branches for e in branches[t]]
    literal = [e for e in errs if e["type"] in _VALUE_ERRORS]
    if literal and isinstance(literal[0]["input"], str):
        return strip(literal[:1])
    descs: list[str] = []
    for e in errs:
        desc = _EXPECTED.get(e["type"], "a valid value")
        if desc not in descs:
            descs.append(desc)
    loc = errs[0]["loc"][:depth]
    return [{"type": "union_type", "loc": loc, "input": errs[0]["input"], "ctx": {"expected": descs}}]


def _prune(errors: list[dict], depth: int = 0) -> list[dict]:
    """Collapse pydantic's per-member union errors into the meaningful ones."""
    out = [e for e in errors if len(e["loc"]) <= depth]
    groups: dict[str | int, list[dict]] = {}
    for e in errors:
        if len(e["loc"]) > depth:
            groups.setdefault(e["loc"][depth], []).append(e)
    tags = [k for k in groups if _is_tag(k)]
    if len(tags) >= 2:  # one "tag" alone is a dict key that merely looks odd
        chosen = _choose_branch({t: groups.pop(t) for t in tags}, depth)  # type: ignore[misc]
        out.extend(_prune(chosen, depth))
    for errs in groups.values():
        out.extend(_prune(errs, depth + 1))
    return out


def _render(error: dict) -> tuple[str, str]:
    """Message and code for one (pruned) pydantic error."""
    kind, value = error["type"], error.get("input")
    param = format_param(error["loc"]) or "body"
    if kind == "missing":
        return f"Missing required parameter: '{param}'.", "missing_required_parameter"
    if kind == "extra_forbidden":
        return f"Unknown parameter: '{param}'.", "unknown_parameter"
    if kind in _VALUE_ERRORS:
        expected = error.get("ctx", {}).get("expected", "a supported value")
        return f"Invalid value for '{param}': expected {expected}, got {show_value(value)}.", "invalid_value"
    if kind == "union_type":
        expected = " or ".join(error["ctx"]["expected"])
        return f"Invalid type for '{param}': expected {expected}, got {describe_type(value)}.", "invalid_type"
    if kind in _BOUNDS:
        word = "integer" if isinstance(value, int) else "decimal"
        side, relation, limit = _BOUNDS[kind]
        limit = error.get("ctx", {}).get(limit)
        return (
            f"Invalid '{param}': {word} {side} {'minimum' if side == 'below' else 'maximum'} value. "
            f"Expected a value {relation} {limit}, but got {show_value(value)} instead.",
            f"{word}_{side}_{'min' if side == 'below' else 'max'}_value",
        )
    if kind in _EXPECTED:
        got = "a string" if kind == "sequence_str" else describe_type(value)
        return f"Invalid type for '{param}': expected {_EXPECTED[kind]}, got {got}.", "invalid_type"
    msg = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    msg = msg[:1].lower() + msg[1:]
    return f"Invalid value for '{param}': {msg} (got {show_value(value)}).", "invalid_value"


def invalid_request_from_errors(errors: Sequence[Any], *, prefix: Loc = ()) -> InvalidRequest:
    """Translate pydantic error details into one :class:`InvalidRequest`.

    Args:
        errors: ``ValidationError.errors()`` (or equivalent dicts).
        prefix: location of the validated value inside the request body.

    Returns:
        The error for the most useful detail: unknown parameters first, then the
        first remaining one in declaration order.
    """
    found = _prune([{**e, "loc": tuple(prefix) + tuple(e["loc"])} for e in errors])
    found.sort(key=lambda e: e["type"] != "extra_forbidden")  # stable: keeps order otherwise
    first: dict[str, Any] = found[0] if found else {"type": "value_error", "loc": tuple(prefix), "input": None}
    message, code = _render(first)
    return InvalidRequest(message, param=format_param(first["loc"]), code=code)


def _drain(value: Any, loc: Loc, errors: list[dict]) -> Any:
    # pydantic validates ``Iterable[X]`` fields (common in the SDK's TypedDicts)
    # lazily; consume them here so nested errors surface now, with full locations.
    if isinstance(value, Iterator):
        try:
            items = list(value)
        except ValidationError as exc:
            errors.extend({**e, "loc": loc + tuple(e["loc"])} for e in exc.errors())
            return []
        return [_drain(v, loc + (i,), errors) for i, v in enumerate(items)]
    if isinstance(value, dict):
        return {k: _drain(v, loc + (k,), errors) for k, v in value.items()}
    if isinstance(value, list):
        return [_drain(v, loc + (i,), errors) for i, v in enumerate(value)]
    return value


def validate_as(adapter: TypeAdapter[Any], value: Any, *, loc: Loc = ()) -> Any:
    """Strictly validate ``value`` (JSON data) with ``adapter``, or raise.

    Args:
        adapter: usually a ``TypeAdapter`` over one of the SDK's TypedDicts.
        value: the decoded JSON value.
        loc: where ``value`` sits in the request body, for the error's ``param``.

    Returns:
        The validated value, with lazily validated iterables turned into lists.

    Raises:
        InvalidRequest: naming the offending field, e.g. ``input[2].call_id``.
    """
    try:
        validated = adapter.validate_python(value, strict=True)
    except ValidationError as exc:
        raise invalid_request_from_errors(exc.errors(), prefix=loc) from exc
    errors: list[dict] = []
    validated = _drain(validated, (), errors)
    if errors:
        raise invalid_request_from_errors(errors, prefix=loc)
    return validated
