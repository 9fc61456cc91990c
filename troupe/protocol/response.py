"""The Response object, in the SDK's exact shape, as a JSON-ready dict.

:func:`build_response` emits every field of the "always emit" column, in every
status, so that the ``openai`` SDK's typed access and the stricter Open Responses
(Zod) validation both succeed on ``response.created`` snapshots as on final
objects (pitfall 4): nulls where unset, numbers where clients need numbers, the
request's parameters echoed — except MCP ``headers``/``authorization``, which are
secrets and never leave the server.

Example::

    resp = build_response(req, response_id=new_id("resp"), created_at=int(time.time()),
                          status="completed", output=[...],
                          usage=usage_dict(input_tokens=12, output_tokens=3))
"""

from __future__ import annotations

import copy
from typing import Any, Literal, get_args

from .request import CreateResponseRequest

__all__ = [
    "ResponseStatus",
    "RESPONSE_STATUSES",
    "EXTENSION_STATUSES",
    "MCP_SECRET_KEYS",
    "build_response",
    "echo_tool",
    "usage_dict",
]

ResponseStatus = Literal["queued", "in_progress", "completed", "failed", "incomplete", "cancelled"]
"""The status machine: ``queued → in_progress → completed | incomplete | failed | cancelled``."""

RESPONSE_STATUSES: tuple[str, ...] = get_args(ResponseStatus)
"""Every ``Response.status`` the ``openai`` SDK knows."""

EXTENSION_STATUSES: tuple[str, ...] = ("requires_action",)
"""Opt-in statuses outside the SDK's set: ``requires_action`` ends a response on
client function calls, Antwort style (the loop's ``client_tool_status`` setting)."""

MCP_SECRET_KEYS = frozenset({"headers", "authorization"})
"""MCP tool keys that carry credentials: used to call the server, never echoed."""


def echo_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool definition as echoed in ``Response.tools``.

    Function tools always carry ``description``, ``parameters`` and ``strict``
    (Open Responses fails on a missing ``strict``); MCP tools lose their secrets.
    """
    tool = copy.deepcopy(tool)
    if tool.get("type") == "function":
        return {
            "type": "function",
            "name": tool.get("name"),
            "description": tool.get("description"),
            "parameters": tool.get("parameters"),
            "strict": tool.get("strict"),
            **{k: v for k, v in tool.items() if k not in ("type", "name", "description", "parameters", "strict")},
        }
    if tool.get("type") == "mcp":
        return {k: v for k, v in tool.items() if k not in MCP_SECRET_KEYS}
    return tool


def usage_dict(
    *,
    input_tokens: int,
    output_tokens: int,
    cached_tokens: int = 0,
    reasoning_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> dict[str, Any]:
    """``Response.usage`` in the SDK's exact shape (``total_tokens`` computed).

    Example::

        >>> usage_dict(input_tokens=10, output_tokens=5)["total_tokens"]
        15
    """
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": cache_write_tokens},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": input_tokens + output_tokens,
    }


def build_response(
    request: CreateResponseRequest,
    *,
    response_id: str,
    created_at: int,
    status: str,
    output: list[dict[str, Any]] | None = None,
    usage: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    incomplete_details: dict[str, Any] | None = None,
    completed_at: int | None = None,
    conversation_id: str | None = None,
    moderation: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The full Response JSON for ``request`` in its current state.

    Args:
        request: the validated create request whose parameters are echoed.
        response_id: ``resp_…`` id.
        created_at: unix seconds (an int, as Open Responses requires).
        status: one of :data:`RESPONSE_STATUSES` (or :data:`EXTENSION_STATUSES`).
        output: output items so far, in ``output_index`` order (``[]`` if None).
        usage: token usage (see :func:`usage_dict`); None until known.
        error: ``{"code", "message"}`` for a failed response.
        incomplete_details: ``{"reason": ...}`` for an incomplete response.
        completed_at: unix seconds once terminal.
        conversation_id: overrides the request's conversation (e.g. a conversation
            the server resolved); the request's own is used when None.
        moderation: the ``moderation`` results (``{"input", "output"}``) of a request that
            asked for them; the key is absent otherwise.

    Returns:
        A fresh dict; the caller may mutate it.

    Raises:
        ValueError: ``status`` is not a Response status.
    """
    if status not in RESPONSE_STATUSES and status not in EXTENSION_STATUSES:
        raise ValueError(f"invalid response status {status!r}; expected one of {RESPONSE_STATUSES}")
    conversation = conversation_id or request.conversation_id
    # Defaults are what OpenAI reports for an unset parameter; Open Responses
    # rejects null for the numeric ones, service_tier, store and background.
    text = {"format": {"type": "text"}, **copy.deepcopy(request.text or {})}
    if text["format"].get("type") == "json_schema":
        # Strict clients (Open Responses) require these keys on the echoed format.
        text["format"] = {"description": None, "strict": False, **text["format"]}
    reasoning = {"effort": None, "summary": None, **copy.deepcopy(request.reasoning or {})}
    response = {
        "id": response_id,
        "object": "response",
        "created_at": int(created_at),
        "status": status,
        "background": request.background,
        "completed_at": completed_at,
        "conversation": {"id": conversation} if conversation else None,
        "error": copy.deepcopy(error),
        "incomplete_details": copy.deepcopy(incomplete_details),
        # With a prompt, what it put before the thread (input messages, as OpenAI echoes a prompt's).
        "instructions": request.instructions if request.prelude is None else copy.deepcopy(request.prelude),
        "max_output_tokens": request.max_output_tokens,
        "max_tool_calls": request.max_tool_calls,
        "model": request.model,
        "output": copy.deepcopy(output) if output is not None else [],
        "parallel_tool_calls": request.parallel_tool_calls,
        "previous_response_id": request.previous_response_id,
        "prompt": copy.deepcopy(request.prompt),
        "prompt_cache_key": request.prompt_cache_key,
        "prompt_cache_retention": request.prompt_cache_retention,
        "reasoning": reasoning,
        "safety_identifier": request.safety_identifier,
        "service_tier": request.service_tier or "default",
        "store": request.store,
        "temperature": float(request.temperature) if request.temperature is not None else 1.0,
        "text": text,
        "tool_choice": copy.deepcopy(request.tool_choice),
        "tools": [echo_tool(t) for t in request.tools],
        "top_logprobs": request.top_logprobs if request.top_logprobs is not None else 0,
        "top_p": float(request.top_p) if request.top_p is not None else 1.0,
        "truncation": request.truncation or "disabled",
        "usage": copy.deepcopy(usage),
        "user": request.user,
        "metadata": dict(request.metadata or {}),
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    }
    if moderation is not None:
        response["moderation"] = copy.deepcopy(moderation)
    return response
