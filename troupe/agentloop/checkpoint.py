"""Checkpoints: what a durable run keeps at each step boundary, and what a resumed loop reads.

Internal to the loop and Troupe's runtime: not part of :mod:`troupe.agentloop`'s public surface.

The driver yields a :class:`~troupe.agentloop.events.Checkpoint` at every step boundary when
asked (``run_loop(..., checkpoints=True)``); a durable run (a background response, or a
stored foreground one) stores each one in order, with the wire events and step traces since
the previous one; one that ``gates`` (below), before it takes the loop's next event. The
steps, in order:

=========================  ==========  ====================================  ===================================
class                      ``kind``    when                                  holds
=========================  ==========  ====================================  ===================================
:class:`TurnStep`          model       a model call ended with a turn that   the turn, whether tools were
                                       has more to do (not the response's    callable, the ``mcp_call`` and
                                       last turn: its response is stored     ``file_search_call`` and
                                       next)                                 ``code_interpreter_call`` items
                                                                             it opened (call id → item id)
:class:`ApprovedCallsStep` approved    approved MCP calls' items were opened those items (call id → item id)
:class:`ToolResultStep`    tool        one server-side tool call ended       its call id, output and error,
                                                                             times, and what its item needs
                                                                             (a code run's logs, images, files;
                                                                             a shell call's command results)
:class:`ToolOutputsStep`   tools       the turn's tool outputs were emitted  nothing more
:class:`CompactionStep`    compaction  the loop compacted the thread before  the summary the model wrote, and
                                       a model call (``context_management``) the usage of the call that wrote it
=========================  ==========  ====================================  ===================================

They are stored as JSON: :meth:`to_data` gives each one's dict (``{"kind": …, …}``, the shape
durable runs have always been stored in, so runs stored by an earlier Troupe still resume) and
:func:`step_from_data` reads one back; tests/unit/test_checkpoint.py pins the shapes.

A loop resumed from them (``run_loop(..., resume=ResumePoint.from_stored(...))``) folds the steps into
its state the way it folded them live, and goes on from the last one. What that means for
tools:

* a call whose result is checkpointed (``tool``) is never run again: its stored result is used;
* a call of the last turn with no result checkpointed may have been running when the host
  died. It runs again only if its tool is idempotent (``idempotent = true`` in ``[[tools]]``,
  or an MCP tool whose annotations say ``idempotentHint``; a ``code_interpreter`` or ``shell``
  call never is, for code and commands change their container); otherwise the model is told, in the call's output,
  that the call was interrupted (:data:`INTERRUPTED`).

A ``model`` step (or an ``approved`` one) gates when one of the calls it starts is not
idempotent: it is stored before the loop starts them, so such a call that ran always has its
turn stored, and the model is never asked again for a turn whose such tools ran. When every
call is idempotent, the tools start while the step is being written; a host that dies before
it is stored leaves a run that asks the model for that turn again (or, for a foreground
run's first step, no run: its request fails), and calls that ran twice do no harm.
A step that is not stored yet when the response is (its tools ended just before the last
model turn did) is dropped: storing the response ends the run.

A compaction is checkpointed, not done again: a resumed loop compacts its transcript with the
stored summary and counts the stored usage, so the response keeps the one ``compaction`` item
its client may have seen, and its usage counts the summary once. A host that dies while the
summary is being written leaves no step: the resumed loop, at the same point, compacts again
(the item it streamed before is gone with the events after the last checkpoint).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .model import TokenUsage, ToolCall, TurnEnd

__all__ = [
    "TurnStep",
    "ApprovedCallsStep",
    "ToolResultStep",
    "ToolOutputsStep",
    "CompactionStep",
    "StoredStep",
    "step_from_data",
    "ResumePoint",
    "INTERRUPTED",
    "turn_data",
    "turn_from_data",
    "usage_data",
    "usage_from_data",
    "is_idempotent",
]

INTERRUPTED = (
    "Error: this call was interrupted: the server running it stopped before it returned. It was not "
    "run again because the tool is not idempotent; whether it took effect is unknown."
)
"""The output the model is shown for a non-idempotent call a host died during."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnStep:
    """A model turn with more to do: its tools run next (``kind`` ``model``)."""

    kind: ClassVar[str] = "model"
    turn: TurnEnd
    had_tools: bool
    """Whether the call could call tools (``CallModel.tools_enabled``)."""
    mcp_items: dict[str, str] = field(default_factory=dict)
    """The ``mcp_call`` items the turn opened: call id → item id."""
    fs_items: dict[str, str] = field(default_factory=dict)
    """The ``file_search_call`` items the turn opened: call id → item id (absent from steps
    stored before file_search existed)."""
    ci_items: dict[str, str] = field(default_factory=dict)
    """The ``code_interpreter_call`` items the turn opened: call id → item id (stored only when
    there are some)."""
    ws_items: dict[str, str] = field(default_factory=dict)
    """The ``web_search_call`` items the turn opened: call id → item id (stored only when there are some)."""

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": "model", "turn": turn_data(self.turn), "had_tools": self.had_tools,
                "mcp_items": self.mcp_items, "fs_items": self.fs_items}  # fmt: skip
        if self.ci_items:
            data["ci_items"] = self.ci_items
        if self.ws_items:
            data["ws_items"] = self.ws_items
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> TurnStep:
        return cls(turn=turn_from_data(data["turn"]), had_tools=data["had_tools"], mcp_items=dict(data["mcp_items"]),
                   fs_items=dict(data.get("fs_items") or {}), ci_items=dict(data.get("ci_items") or {}),
                   ws_items=dict(data.get("ws_items") or {}))  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovedCallsStep:
    """The items of the MCP calls the client approved were opened; the calls run next
    (``kind`` ``approved``)."""

    kind: ClassVar[str] = "approved"
    mcp_items: dict[str, str]
    """call id → ``mcp_call`` item id."""

    def to_data(self) -> dict[str, Any]:
        return {"kind": "approved", "mcp_items": self.mcp_items}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> ApprovedCallsStep:
        return cls(mcp_items=dict(data["mcp_items"]))


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultStep:
    """One server-side tool call ended; it is never run again (``kind`` ``tool``)."""

    kind: ClassVar[str] = "tool"
    call_id: str
    output: str
    """What the model is shown."""
    error: str | None
    """The failure, described; None when the call succeeded."""
    started: float
    ended: float
    """Seconds on the loop's clock."""
    detail: dict[str, Any] | None = None
    """What the call's item needs beyond its output, as JSON (a ``code_interpreter`` run: its
    container and :meth:`~troupe.agentloop.code_interpreter.CodeRun.to_data`; a ``shell`` call:
    ``{"container_id", "commands": [CommandRun.to_data()…]}``); stored only when set."""

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": "tool", "call_id": self.call_id, "output": self.output, "error": self.error,
                "started": self.started, "ended": self.ended}  # fmt: skip
        if self.detail is not None:
            data["detail"] = self.detail
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> ToolResultStep:
        return cls(call_id=data["call_id"], output=data["output"], error=data["error"], started=data["started"],
                   ended=data["ended"], detail=data.get("detail"))  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutputsStep:
    """The tool step's outputs were emitted, in the model's call order (``kind`` ``tools``)."""

    kind: ClassVar[str] = "tools"

    def to_data(self) -> dict[str, Any]:
        return {"kind": "tools"}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> ToolOutputsStep:
        return cls()


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionStep:
    """The thread was compacted before a model call (``kind`` ``compaction``)."""

    kind: ClassVar[str] = "compaction"
    summary: str
    """The summary the model wrote."""
    usage: TokenUsage
    """The usage of the call that wrote it."""

    def to_data(self) -> dict[str, Any]:
        return {"kind": "compaction", "summary": self.summary, "usage": usage_data(self.usage)}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> CompactionStep:
        return cls(summary=data["summary"], usage=usage_from_data(data["usage"]))


StoredStep = TurnStep | ApprovedCallsStep | ToolResultStep | ToolOutputsStep | CompactionStep
"""What a :class:`~troupe.agentloop.events.Checkpoint` carries, and a :class:`ResumePoint` holds."""

_BY_KIND: dict[str, type[StoredStep]] = {
    cls.kind: cls for cls in (TurnStep, ApprovedCallsStep, ToolResultStep, ToolOutputsStep, CompactionStep)
}


def step_from_data(data: Mapping[str, Any]) -> StoredStep:
    """A step from its stored JSON (:meth:`to_data`'s dict); keys the caller stored beside the
    step's own (a host's events and traces) are ignored.

    Raises:
        ValueError: an unknown ``kind``.
    """
    cls = _BY_KIND.get(data.get("kind"))  # type: ignore[arg-type]
    if cls is None:
        raise ValueError(f"not a stored loop step: kind {data.get('kind')!r}")
    return cls.from_data(data)


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """Where a resumed loop starts: the run's stored steps and its output so far."""

    steps: tuple[StoredStep, ...]
    """The steps, oldest first (the table in the module docstring)."""
    output: tuple[dict[str, Any], ...]
    """The response's output items as the steps' wire events built them."""

    @classmethod
    def from_stored(cls, steps: Iterable[Mapping[str, Any]], output: Iterable[dict[str, Any]]) -> ResumePoint:
        """The resume point of steps stored as JSON (:func:`step_from_data`)."""
        return cls(steps=tuple(step_from_data(data) for data in steps), output=tuple(output))


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
