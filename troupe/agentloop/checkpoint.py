"""Checkpoints: what a durable run keeps at each step boundary, and what a resumed loop reads.

The driver yields a :class:`~troupe.agentloop.events.Checkpoint` at every step boundary when
asked (``run_loop(..., checkpoints=True)``); a durable run (a background response, or a
stored foreground one) stores each one, with the wire events and step traces since the
previous one, before it takes the loop's next event. The steps, in order:

==========  ===========================================  ==========================================
kind        when                                         data
==========  ===========================================  ==========================================
model       a model call ended with a turn that has      the turn (:func:`turn_data`), whether tools
            more to do (not the response's last turn:    were callable, the ``mcp_call`` items it
            its response is stored next)                 opened (call id → item id)
approved    approved MCP calls' items were opened        those items (call id → item id)
tool        one server-side tool call ended              its call id, output and error, and times
tools       the turn's tool outputs were emitted         nothing more
compaction  the loop compacted the thread before a       the summary the model wrote, and the
            model call (``context_management``)          usage of the call that wrote it
==========  ===========================================  ==========================================

A loop resumed from them (``run_loop(..., resume=ResumePoint(...))``) folds the steps into
its state the way it folded them live, and goes on from the last one. What that means for
tools:

* a call whose result is checkpointed (``tool``) is never run again: its stored result is used;
* a call of the last turn with no result checkpointed may have been running when the host
  died. It runs again only if its tool is idempotent (``idempotent = true`` in ``[[tools]]``,
  or an MCP tool whose annotations say ``idempotentHint``); otherwise the model is told,
  in the call's output, that the call was interrupted (:data:`INTERRUPTED`).

Because a ``model`` step is stored before the loop starts the turn's tools, a call that ran
always has its turn stored: the model is never asked again for a turn whose tools ran.

A compaction is checkpointed, not done again: a resumed loop compacts its transcript with the
stored summary and counts the stored usage, so the response keeps the one ``compaction`` item
its client may have seen, and its usage counts the summary once. A host that dies while the
summary is being written leaves no step: the resumed loop, at the same point, compacts again
(the item it streamed before is gone with the events after the last checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .model import TokenUsage, ToolCall, TurnEnd

__all__ = ["ResumePoint", "INTERRUPTED", "turn_data", "turn_from_data", "usage_data", "usage_from_data", "is_idempotent"]

INTERRUPTED = (
    "Error: this call was interrupted: the server running it stopped before it returned. It was not "
    "run again because the tool is not idempotent; whether it took effect is unknown."
)
"""The output the model is shown for a non-idempotent call a host died during."""


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """Where a resumed loop starts: the run's stored steps and its output so far."""

    steps: tuple[dict[str, Any], ...]
    """The steps' data, oldest first (the table in the module docstring)."""
    output: tuple[dict[str, Any], ...]
    """The response's output items as the steps' wire events built them."""


def turn_data(turn: TurnEnd) -> dict[str, Any]:
    """A model turn as JSON."""
    return {
        "text": turn.text,
        "reasoning": turn.reasoning,
        "tool_calls": [[c.call_id, c.name, c.arguments] for c in turn.tool_calls],
        "finish_reason": turn.finish_reason,
        "usage": usage_data(turn.usage),
    }


def turn_from_data(data: dict[str, Any]) -> TurnEnd:
    """The inverse of :func:`turn_data`."""
    return TurnEnd(
        text=data["text"],
        reasoning=data["reasoning"],
        tool_calls=tuple(ToolCall(call_id=c, name=n, arguments=a) for c, n, a in data["tool_calls"]),
        finish_reason=data["finish_reason"],
        usage=usage_from_data(data["usage"]),
    )


def usage_data(usage: TokenUsage) -> list[int]:
    """A model call's usage as JSON."""
    return [usage.input_tokens, usage.output_tokens, usage.cached_tokens, usage.reasoning_tokens]


def usage_from_data(data: list[int]) -> TokenUsage:
    """The inverse of :func:`usage_data`."""
    input_tokens, output_tokens, cached_tokens, reasoning_tokens = data
    return TokenUsage(input_tokens=input_tokens, output_tokens=output_tokens, cached_tokens=cached_tokens,
                      reasoning_tokens=reasoning_tokens)  # fmt: skip


def is_idempotent(executor: Any, call: ToolCall) -> bool:
    """Whether ``executor`` declares ``call`` safe to run twice (its optional ``is_idempotent``)."""
    check = getattr(executor, "is_idempotent", None)
    return bool(check(call)) if check is not None else False
