"""A response's step timeline: one bar per model call or tool call, and its critical path.

Pure functions over :class:`~troupe.storage.StepTrace` values: the console's Gantt chart
(``troupe/console/static/console.js``) and ``troupe trace --png`` draw the same bars.

The critical path is the chain of steps that set the response's length: start from the step
that ended last, then, again and again, from the step that ended last before the current one
started (its predecessor), until none is left. In Troupe's loop a tool round starts after
its model call and the next model call after the round's last tool, so the path is every
model call and, in each round of parallel tools, the one that finished last.

Example::

    bars = timeline(store.step_traces("", "resp_…"))
    [(b.name, b.start_s, b.end_s, b.critical) for b in bars]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from troupe.storage import StepTrace

__all__ = ["Bar", "CLOCK_SLACK_S", "critical_path", "timeline", "traces_from_json"]

CLOCK_SLACK_S = 0.001
"""A predecessor may end this much after its successor's start: a step's start and end are
read from the clock in different places (a tool's in its Ray task), not at one instant."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Bar:
    """One step of the timeline; times are seconds from the first step's start."""

    seq: int
    """The step's position within the response (its ``step_traces.seq``)."""
    kind: Literal["model", "tool", "guardrail"]
    name: str
    """The model name, the tool name, or the guardrail's name."""
    call_id: str | None
    start_s: float
    end_s: float
    critical: bool
    """On the critical path (module docstring)."""
    error: str | None = None
    ttft_s: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    detail: dict[str, Any] | None = None
    """A guardrail check's stage, verdict and categories."""

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


def critical_path(traces: Sequence[StepTrace]) -> set[int]:
    """The ``seq`` of every step on the critical path (module docstring); empty for no steps."""
    if not traces:
        return set()

    def end(t: StepTrace) -> float:
        return t.started_at + t.duration_s

    # Ties go to the later step (higher seq): a deterministic choice among equals.
    current = max(traces, key=lambda t: (end(t), t.seq))
    path = {current.seq}
    while True:
        before = [t for t in traces if t.seq not in path and end(t) <= current.started_at + CLOCK_SLACK_S]
        if not before:
            return path
        current = max(before, key=lambda t: (end(t), t.seq))
        path.add(current.seq)


def timeline(traces: Sequence[StepTrace]) -> list[Bar]:
    """One bar per step, in ``seq`` order, timed from the earliest start, critical path marked."""
    if not traces:
        return []
    origin = min(t.started_at for t in traces)
    critical = critical_path(traces)
    return [
        Bar(
            seq=t.seq, kind=t.kind, name=t.name, call_id=t.call_id,
            start_s=t.started_at - origin, end_s=t.started_at - origin + t.duration_s,
            critical=t.seq in critical, error=t.error, ttft_s=t.ttft_s,
            input_tokens=t.input_tokens, output_tokens=t.output_tokens, detail=t.detail,
        )  # fmt: skip
        for t in sorted(traces, key=lambda t: t.seq)
    ]


def traces_from_json(rows: Sequence[Mapping[str, Any]]) -> list[StepTrace]:
    """Step traces from their JSON (``GET /v1/responses/{id}/step_traces``); unknown keys are ignored."""
    fields = StepTrace.__dataclass_fields__
    return [StepTrace(**{k: v for k, v in row.items() if k in fields}) for row in rows]
