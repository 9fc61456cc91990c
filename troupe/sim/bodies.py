"""What the sim server's JSON routes share: OpenAI's 400 body, and reading a request's JSON
object and its ``input`` texts (``/v1/embeddings``, ``/v1/moderations``)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

__all__ = ["bad_request", "json_object", "texts"]


def bad_request(message: str, param: str) -> JSONResponse:
    """A 400 with OpenAI's error body naming ``param``."""
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}
    return JSONResponse(body, status_code=400)


async def json_object(request: Request) -> dict[str, Any] | JSONResponse:
    """The request's body as a JSON object, or the 400 that says why it is not one."""
    try:
        body = await request.json()
    except ValueError:
        return bad_request("The request body is not valid JSON.", "body")
    if not isinstance(body, dict):
        return bad_request("The request body must be a JSON object.", "body")
    return body


def texts(body: dict[str, Any]) -> list[Any] | None:
    """``body["input"]`` as a list (a string is one); None when it is neither."""
    inputs = body.get("input")
    return [inputs] if isinstance(inputs, str) else inputs if isinstance(inputs, list) else None
