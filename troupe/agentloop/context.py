"""The model's context window: how much of a thread fits, and ``truncation: "auto"``.

Internal to the loop and Troupe's runtime: not part of :mod:`troupe.agentloop`'s public surface.

Troupe has no tokenizer for an arbitrary upstream model, so it *estimates* tokens, about
four characters each (:func:`estimate_tokens`, the rule of thumb for English text with
OpenAI's tokenizers), plus a few per message. A model's window is configured
(``ModelSpec.context_window``); with none, nothing is checked and the upstream decides.

* ``truncation: "disabled"`` (the default): a request whose thread does not fit is refused
  before it runs, with OpenAI's 400 ``context_length_exceeded`` (:func:`check_fits`); a
  thread that outgrows the window during the loop (tool outputs) fails the response.
* ``truncation: "auto"``: the oldest turns are dropped until the rest fits
  (:func:`fit_messages`): whole turns, a question with its answers, tool calls and results,
  and the system message stays.

Example::

    fit_messages([system, old_user, old_answer, user], budget=100)   # [system, user] if that fits
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from troupe.protocol import InvalidRequest

from .model import ModelError

__all__ = ["CHARS_PER_TOKEN", "estimate_tokens", "fit_messages", "check_fits", "too_long", "ContextOverflow"]

CHARS_PER_TOKEN = 4
"""The estimate's characters per token."""
_PER_MESSAGE = 4
"""Tokens a message costs beyond its text (role and separators), as OpenAI counts them."""


def estimate_tokens(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] = ()) -> int:
    """Estimated input tokens of Chat Completions ``messages`` and ``tools``."""
    chars = sum(len(_text(m)) for m in messages) + sum(len(json.dumps(t)) for t in tools)
    return -(-chars // CHARS_PER_TOKEN) + _PER_MESSAGE * len(messages)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content) if content else ""
    if message.get("tool_calls"):
        text += json.dumps(message["tool_calls"])
    return text


def _turns(messages: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Messages grouped into turns, each dropped whole: a user message and everything after it
    up to the next one (the answers, tool calls and their results), so what is kept starts
    with a question and never with a tool result whose call is gone."""
    turns: list[list[dict[str, Any]]] = []
    for message in messages:
        if message["role"] == "user" or not turns:
            turns.append([message])
        else:
            turns[-1].append(message)
    return turns


def fit_messages(
    messages: Sequence[dict[str, Any]], budget: int, tools: Sequence[dict[str, Any]] = (), *, keep: int | None = None
) -> list[dict[str, Any]] | None:
    """``messages`` with the oldest turns dropped until the estimate is within ``budget``;
    None if even the last turn (with the system messages) does not fit.

    ``keep``: how many leading messages always stay (a prompt's, before the thread); None:
    the first, if it is a system message (the instructions).
    """
    if keep is None:
        keep = 1 if messages and messages[0]["role"] in ("system", "developer") else 0
    head = list(messages[:keep])
    turns = _turns(messages[len(head) :])
    while turns:
        kept = head + [m for turn in turns for m in turn]
        if estimate_tokens(kept, tools) <= budget:
            return kept
        turns.pop(0)
    return None


def overflow_message(estimate: int, window: int, model: str) -> str:
    return (
        f"Your input exceeds the context window of model '{model}': about {estimate} tokens, and the window is "
        f"{window}. Shorten the input or its thread, or set 'truncation' to 'auto' to drop the oldest items."
    )


def check_fits(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], budget: int, model: str) -> None:
    """Refuse a request whose thread does not fit (OpenAI's 400 ``context_length_exceeded``)."""
    estimate = estimate_tokens(messages, tools)
    if estimate > budget:
        raise InvalidRequest(overflow_message(estimate, budget, model), param="input", code="context_length_exceeded")


class ContextOverflow(ModelError):
    """A model call not made: its thread outgrew the context window during the loop."""


def too_long(estimate: int, budget: int, model: str) -> ContextOverflow:
    return ContextOverflow(overflow_message(estimate, budget, model), status=400, code="context_length_exceeded")
