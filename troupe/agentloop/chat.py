"""Responses ↔ Chat Completions: what a Responses request becomes upstream, and what an
upstream failure becomes in ``Response.error``.

Internal to the loop and Troupe's runtime: not part of :mod:`troupe.agentloop`'s public surface.

The loop speaks Responses to the client and Chat Completions to the model server. The
messages come from the transcript (:meth:`~troupe.agentloop.transcript.Transcript.to_chat_messages`);
this module translates the rest of a request (tools, ``tool_choice``, ``text.format``) and,
the other way, a :class:`~troupe.agentloop.model.ModelError` into the error a response
fails with.

Example::

    >>> chat_response_format({"format": {"type": "json_object"}})
    {'type': 'json_object'}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .context import ContextOverflow
from .decide import CallModel
from .model import ModelError

__all__ = ["plain", "chat_tools", "chat_tool_choice", "chat_response_format", "response_error"]


def plain(value: Any) -> Any:
    """Request fields may be pydantic models or plain values; the loop reads plain ones."""
    dump = getattr(value, "model_dump", None)
    return dump(exclude_none=True) if dump else value


def chat_tools(definitions: Sequence[dict[str, Any]], allowed: frozenset[str] | None) -> list[dict[str, Any]]:
    """Responses function tools (and server tools' definitions) as Chat Completions tools."""
    out = []
    for d in definitions:
        if allowed is not None and d["name"] not in allowed:
            continue  # allowed_tools: the model is only offered what it may call
        function = {"name": d["name"], "parameters": d.get("parameters") or {"type": "object", "properties": {}}}
        if d.get("description"):
            function["description"] = d["description"]
        if d.get("strict") is not None:
            function["strict"] = d["strict"]
        out.append({"type": "function", "function": function})
    return out


def chat_tool_choice(choice: Any, action: CallModel) -> str | dict[str, Any]:
    """The request's ``tool_choice`` as Chat Completions says it, for this model call."""
    if not action.tools_enabled or choice == "none":
        return "none"
    if not action.use_request_tool_choice or choice is None:
        return "auto"
    if isinstance(choice, str):
        return choice
    if choice["type"] == "function" or (choice["type"] == "mcp" and choice.get("name")):
        return {"type": "function", "function": {"name": choice["name"]}}
    if choice["type"] == "file_search":
        return {"type": "function", "function": {"name": "file_search"}}  # module file_search's tool
    if choice["type"] == "code_interpreter":
        return {"type": "function", "function": {"name": "python"}}  # module code_interpreter's tool
    if choice["type"] == "shell":
        return {"type": "function", "function": {"name": "shell"}}  # module shell's tool
    if choice["type"].startswith("web_search"):
        return {"type": "function", "function": {"name": "web_search"}}  # module web_search's search tool
    if choice["type"] == "mcp":
        return "required"  # any tool of that server: the closest a chat model can be told
    return choice.get("mode", "auto")  # allowed_tools: the tool list is already filtered


def chat_response_format(text: Any) -> dict[str, Any] | None:
    """The request's ``text.format`` as a Chat Completions ``response_format`` (None: plain text)."""
    fmt = (plain(text) or {}).get("format") or {}
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    return None


# Upstream statuses that mean the *request* was refused (a malformed image, a prompt too
# long): the client's fault. Every other failure (401/403/404: Troupe's upstream
# configuration; 5xx; timeouts) is the server's.
_CLIENT_FAULTS = frozenset({400, 413, 422})
# ``Response.error.code`` is a closed enum in the SDK's types (strict clients reject other
# values), so an upstream's own code is kept when the enum has it, mapped when it means
# the same, and otherwise named in the message beside ``invalid_prompt``.
_UPSTREAM_CODES = {"invalid_base64": "invalid_base64_image", "context_length_exceeded": "invalid_prompt"}
# Chat Completions fields an upstream may name, and the Responses parameter each came from.
_UPSTREAM_PARAMS = {"response_format.json_schema.schema": "text.format.schema"}


def response_error(exc: Exception) -> dict[str, Any]:
    """``Response.error`` for a failed model call: ``rate_limit_exceeded`` for an upstream
    429, the upstream's code (or its enum twin, or ``invalid_prompt``) for an upstream
    400/413/422, else ``server_error``."""
    if isinstance(exc, ContextOverflow):  # found here, before any upstream call
        return {"code": "invalid_prompt", "message": exc.message}
    if not isinstance(exc, ModelError):
        return {"code": "server_error", "message": f"The model call failed: {exc}"}
    upstream = f"upstream status {exc.status}"
    if exc.status == 429:
        code = "rate_limit_exceeded"
    elif exc.status in _CLIENT_FAULTS:
        from troupe.protocol import sdk  # the SDK's enum of codes (imported on first use: sdk.py says why)

        code = _UPSTREAM_CODES.get(exc.code or "", exc.code or "")
        if code not in sdk.ERROR_CODES:
            code = "invalid_prompt"
        if exc.code:
            upstream += f", code {exc.code}"
    else:
        code = "server_error"
    error = {"code": code, "message": f"The model call failed ({upstream}): {exc.message}"}
    if code != "server_error" and (param := _UPSTREAM_PARAMS.get(exc.param or "")):
        error["param"] = param  # Response.error's optional param
    return error
