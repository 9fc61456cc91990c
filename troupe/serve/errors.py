"""OpenAI's error answers: every error the app gives is ``{"error": {message, type, param, code}}``.

:func:`error_response` renders one :class:`~troupe.protocol.ProtocolError` (the middlewares
of :mod:`.limits` and :mod:`.stopping` render their refusals with it too);
:func:`install_error_handlers` makes the app answer with it whatever went wrong: a
``ProtocolError`` a route raised, FastAPI's 422 for a bad query or path parameter (OpenAI's
400 naming it), Starlette's 404/405 for an unknown route or method, the store out of reach for
a moment (503 ``storage_unavailable``: the storage actor restarting), and any other exception
(500).

Every answer but a 429 or 503 carries ``x-should-retry: false``: the ``openai`` SDK retries
5xx by default, which would re-run a non-idempotent agent loop.
"""

from __future__ import annotations

import contextlib
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from troupe.protocol import ProtocolError, invalid_request_from_errors
from troupe.storage.base import StorageUnavailable

from .limits import RetryLater

__all__ = ["StorageRestarting", "error_response", "install_error_handlers"]

_RETRYABLE = frozenset({429, 503})


_SAFE_METHODS = frozenset({"GET", "HEAD"})


class StorageRestarting(RetryLater):
    """503 ``storage_unavailable``: a store call met the storage actor restarting (Ray restarts
    it at once; it is back within seconds)."""

    default_status = 503
    default_type = "server_error"
    default_code = "storage_unavailable"


def error_response(error: ProtocolError) -> JSONResponse:
    """The JSON answer for ``error``: ``x-should-retry: false`` unless it is 429/503, and
    ``Retry-After`` when what refused it (a limit, a replica stopping) says when to come back."""
    headers = {} if error.status in _RETRYABLE else {"x-should-retry": "false"}
    if isinstance(error, RetryLater):  # RateLimited, ShuttingDown
        headers["retry-after"] = error.retry_after_header
    return JSONResponse(error.to_body(), status_code=error.status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    """Make every error ``app`` answers OpenAI's error body (module docstring)."""

    @app.exception_handler(ProtocolError)
    async def _protocol_error(_: Request, exc: ProtocolError) -> Response:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> Response:
        # FastAPI's 422 for a bad query/path parameter becomes OpenAI's 400 naming it;
        # the leading "query"/"path" segment of the location is dropped.
        errors = [{**e, "loc": tuple(e["loc"][1:]), "input": _as_number(e)} for e in exc.errors()]
        return error_response(invalid_request_from_errors(errors))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> Response:
        # Unknown routes (404) and wrong methods (405) keep OpenAI's error shape.
        kind = "server_error" if exc.status_code >= 500 else "invalid_request_error"
        message = "Unknown request URL or method." if exc.status_code in (404, 405) else str(exc.detail)
        response = error_response(ProtocolError(message, type=kind, status=exc.status_code))
        for name, value in (exc.headers or {}).items():  # e.g. Allow on a 405
            response.headers[name] = value
        return response

    @app.exception_handler(StorageUnavailable)
    async def _storage_unavailable(request: Request, _: StorageUnavailable) -> Response:
        # A read may simply be made again: the SDK does it by itself, after Retry-After. Another
        # method may have taken effect before the store went away: it is not retried blindly.
        if request.method in _SAFE_METHODS:
            return error_response(StorageRestarting("The server's storage is restarting; try again in a moment."))
        response = error_response(StorageRestarting(
            "The server's storage restarted during this request, which may or may not have taken effect: "
            "read the object it made or changed before you send it again."
        ))  # fmt: skip
        response.headers["x-should-retry"] = "false"
        return response

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> Response:
        # Starlette still re-raises after answering, so the server logs the traceback.
        return error_response(ProtocolError("The server had an error while processing your request."))


_BOUND_ERRORS = frozenset({"greater_than_equal", "greater_than", "less_than_equal", "less_than"})


def _as_number(error: dict[str, Any]) -> Any:
    """The input of a query parameter out of its bounds as the number it was read as (pydantic
    reports the query string, which the message would call a ``decimal``); other inputs as given."""
    value = error.get("input")
    if error["type"] in _BOUND_ERRORS and isinstance(value, str):
        with contextlib.suppress(ValueError):
            return int(value) if value.lstrip("-").isdigit() else float(value)
    return value
