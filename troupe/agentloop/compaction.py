"""Compaction: a thread's context as a summary the model wrote, made on request
(``POST /v1/responses/compact``) or automatically (``context_management`` on ``POST /v1/responses``).

Internal to the loop and Troupe's runtime: not part of :mod:`troupe.agentloop`'s public surface.

OpenAI's contract for the compact endpoint: the answer's ``output`` is every user message of
the thread, followed by one ``compaction`` item; a later request sends those items (plus what
comes next) as its input instead of the whole thread. OpenAI's ``encrypted_content`` is
opaque. Troupe's is the summary itself, marked and base64-encoded (:func:`encode_summary`),
**not encrypted**: a client can read it. A ``compaction`` item goes upstream as a system
message carrying the summary (:func:`summary_message`); one Troupe did not make is refused,
naming it. What a compaction item replaces of the thread before it is
:meth:`~troupe.agentloop.transcript.Transcript.compact`'s rule, the same for an item a client
sends and for one in the thread's history.

Automatic compaction (``context_management: [{"type": "compaction", "compact_threshold": N}]``):
before each model call of the loop, if the call's estimated input (:mod:`.context`, tools and
instructions included) passes ``N`` and the thread holds something to compact, the loop first
has the model write the summary (the thread, then :data:`SUMMARY_PROMPT`: :func:`summary_messages`),
emits the ``compaction`` item as part of the response's output, and then calls the model with
the compacted context. Without ``compact_threshold`` the threshold is :data:`DEFAULT_THRESHOLD_SHARE`
of what the model's configured ``context_window`` leaves for input; with no window configured that
is a 400 (:func:`compact_threshold`).

Example::

    text = decode_summary(encode_summary("The user is Ada; she asked about tides."))
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Sequence
from typing import Any

from troupe.protocol import (
    CreateResponseRequest,
    InvalidRequest,
    content_text,
    new_id,
    parse_create_request,
    show_value,
)

__all__ = [
    "SUMMARY_PROMPT",
    "SUMMARY_HEADING",
    "DEFAULT_THRESHOLD_SHARE",
    "compact_threshold",
    "summary_messages",
    "encode_summary",
    "decode_summary",
    "summary_message",
    "compacted_output",
    "compacted_response",
    "parse_compact_request",
    "summary_request",
]

_COMPACT_PARAMS = frozenset({"model", "input", "instructions", "previous_response_id", "prompt_cache_key",
                             "prompt_cache_retention", "image", "prompt_cache_options"})  # fmt: skip
"""What a compact request may carry (``image`` and ``prompt_cache_options`` are then refused
when set, as on a create request)."""

SUMMARY_PROMPT = (
    "Summarize the conversation above for your own later use, in place of it: who the user is, what they asked, "
    "what you answered and which tools you called with what results, decisions made, and anything still open. "
    "Keep names, numbers and identifiers exactly. Write only the summary."
)
"""The request the model answers with the summary (after the thread, as a user message)."""

SUMMARY_HEADING = "Summary of the conversation so far:"
"""How the summary's system message begins upstream (the summary follows on the next line)."""

DEFAULT_THRESHOLD_SHARE = 0.8
"""A ``compaction`` entry without ``compact_threshold`` compacts past this share of the input the
model's ``context_window`` allows (the window less ``max_output_tokens``)."""

_MARK = "troupe-summary-v1:"


def encode_summary(summary: str) -> str:
    """A ``compaction`` item's ``encrypted_content`` for ``summary`` (marked, base64; not encrypted)."""
    return _MARK + base64.b64encode(summary.encode()).decode()


def decode_summary(content: Any, *, param: str | None = None) -> str:
    """The summary in a ``compaction`` item's ``encrypted_content``.

    Raises:
        InvalidRequest: not one this server made (OpenAI's, which only OpenAI can read).
    """
    if isinstance(content, str) and content.startswith(_MARK):
        try:
            return base64.b64decode(content[len(_MARK) :], validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            pass
    raise InvalidRequest(
        "This compaction item was not made by this server (POST /v1/responses/compact): its encrypted_content "
        "cannot be read here.",
        param=param,
        code="invalid_value",
    )


def summary_message(summary: str) -> dict[str, Any]:
    """The transcript message a compaction item becomes (a system message upstream); ``summary``
    marks it as one (a thread holding nothing else but user messages has nothing to compact)."""
    return {"type": "message", "role": "developer", "content": f"{SUMMARY_HEADING}\n{summary}", "summary": True}


def summary_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Chat Completions messages of the call that writes the summary: the thread as it would
    go upstream (``messages``, instructions included), then :data:`SUMMARY_PROMPT` as a user message.
    The call offers no tools and asks for plain text, whatever the response asks for."""
    return [*messages, {"role": "user", "content": SUMMARY_PROMPT}]


def compact_threshold(request: CreateResponseRequest, budget: int | None, model: str) -> int | None:
    """The estimated input tokens past which ``request`` compacts its thread; None: it asked for
    no compaction.

    Args:
        request: the create request (its ``context_management``, validated).
        budget: the input the model's context window leaves (the window less
            ``max_output_tokens``); None when the model has no ``context_window`` configured.
        model: the model's name, for the error.

    Raises:
        InvalidRequest: no ``compact_threshold`` given and no window to derive one from (400
            naming ``context_management[i].compact_threshold``).
    """
    entry = request.compaction()
    if entry is None:
        return None
    index, threshold = entry
    if threshold is not None:
        return threshold
    if budget is None:
        raise InvalidRequest(
            f"Missing 'context_management[{index}].compact_threshold': model '{model}' has no context_window "
            "configured to derive a default from. Give the threshold in tokens.",
            param=f"context_management[{index}].compact_threshold",
            code="missing_required_parameter",
        )
    return max(1, int(budget * DEFAULT_THRESHOLD_SHARE))


def compacted_output(thread: Sequence[dict[str, Any]], summary: str) -> list[dict[str, Any]]:
    """The compacted thread: its user messages in order, then one ``compaction`` item."""
    users = [item for item in thread if item.get("type", "message") == "message" and item.get("role") == "user"]
    return [*users, {"id": new_id("cmp"), "type": "compaction", "encrypted_content": encode_summary(summary)}]


def parse_compact_request(body: object) -> CreateResponseRequest:
    """A compact request's body, checked as a create request of its parameters (``model``,
    ``input``, ``instructions``, ``previous_response_id``, …).

    Raises:
        InvalidRequest: an unknown parameter, or one that does not fit (named).
    """
    if isinstance(body, dict):
        unknown = next((k for k in body if k not in _COMPACT_PARAMS), None)
        if unknown is not None:
            raise InvalidRequest(f"Unknown parameter: {show_value(unknown)}.", param=unknown, code="unknown_parameter")
        if "model" not in body:
            raise InvalidRequest("Missing required parameter: 'model'.", param="model",
                                 code="missing_required_parameter")  # fmt: skip
        body = {k: v for k, v in body.items() if k in _COMPACT_PARAMS}
    return parse_create_request(body)


def summary_request(request: CreateResponseRequest) -> CreateResponseRequest:
    """The one model turn that writes the summary: the thread (``previous_response_id``) and
    the input, then :data:`SUMMARY_PROMPT`; no tools, nothing stored."""
    given = request.input if isinstance(request.input, list) else [{"role": "user", "content": request.input}]
    body: dict[str, Any] = {
        "model": request.model,
        "input": [*(given if request.input else []), {"role": "user", "content": SUMMARY_PROMPT}],
        "tool_choice": "none",
        "store": False,
    }
    if request.previous_response_id is not None:
        body["previous_response_id"] = request.previous_response_id
    if isinstance(request.instructions, str):
        body["instructions"] = request.instructions
    return parse_create_request(body)


def compacted_response(thread: Sequence[dict[str, Any]], summary: dict[str, Any]) -> dict[str, Any]:
    """The ``response.compaction`` object: ``thread`` compacted with the text of the (completed)
    ``summary`` Response, and that call's usage."""
    text = "".join(content_text(item["content"]) for item in summary["output"] if item["type"] == "message")
    return {
        "id": new_id("resp"),
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": compacted_output(thread, text),
        "usage": summary["usage"],
    }
