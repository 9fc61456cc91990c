"""The step timeline: bars in seq order from the first start, and the critical path."""

from __future__ import annotations

import pytest

from troupe.console.timeline import critical_path, timeline, traces_from_json
from troupe.storage import StepTrace

T0 = 1_760_000_000.0


def step(seq: int, kind: str, start: float, duration: float, name: str = "", **more) -> StepTrace:
    return StepTrace(
        response_id="resp_1", seq=seq, kind=kind, name=name or ("sim" if kind == "model" else "sleep"),
        started_at=T0 + start, duration_s=duration, **more,
    )  # fmt: skip


def four_parallel_tools() -> list[StepTrace]:
    """A model call, four parallel tools (the third is the longest), the answering model call."""
    return [
        step(0, "model", 0.0, 0.05, ttft_s=0.02, input_tokens=10, output_tokens=4),
        step(1, "tool", 0.06, 0.30, call_id="call_1"),
        step(2, "tool", 0.06, 0.20, call_id="call_2"),
        step(3, "tool", 0.06, 0.35, call_id="call_3"),
        step(4, "tool", 0.06, 0.25, call_id="call_4", error="boom"),
        step(5, "model", 0.42, 0.05),
    ]


def test_the_critical_path_is_the_model_calls_and_the_longest_tool_of_each_round() -> None:
    assert critical_path(four_parallel_tools()) == {0, 3, 5}


def test_a_sequential_loop_is_all_critical() -> None:
    steps = [step(0, "model", 0, 0.1), step(1, "tool", 0.1, 0.2), step(2, "model", 0.3, 0.1)]
    assert critical_path(steps) == {0, 1, 2}


def test_a_predecessor_may_end_a_clock_reading_after_its_successor_starts() -> None:
    # The tool's end was read in its Ray task, the next call's start in the host.
    steps = [step(0, "tool", 0.0, 0.3005), step(1, "model", 0.3, 0.1), step(2, "tool", 0.0, 0.1)]
    assert critical_path(steps) == {0, 1}


def test_equal_ends_choose_the_later_step() -> None:
    steps = [step(0, "model", 0, 0.1), step(1, "tool", 0.1, 0.2), step(2, "tool", 0.1, 0.2)]
    assert critical_path(steps) == {0, 2}


def test_no_steps() -> None:
    assert critical_path([]) == set() and timeline([]) == []


def test_bars_are_in_seq_order_timed_from_the_first_start() -> None:
    bars = timeline(list(reversed(four_parallel_tools())))
    assert [b.seq for b in bars] == [0, 1, 2, 3, 4, 5]
    assert [(b.kind, b.name) for b in bars][:2] == [("model", "sim"), ("tool", "sleep")]
    # Unix seconds near 1.76e9 keep about 0.2 µs of precision.
    assert bars[0].start_s == 0.0 and bars[0].end_s == pytest.approx(0.05, abs=1e-6)
    assert (bars[3].start_s, bars[3].end_s) == (pytest.approx(0.06, abs=1e-6), pytest.approx(0.41, abs=1e-6))
    assert [b.critical for b in bars] == [True, False, False, True, False, True]
    assert bars[4].error == "boom" and bars[1].call_id == "call_1"
    assert (bars[0].ttft_s, bars[0].input_tokens, bars[0].output_tokens) == (0.02, 10, 4)
    # The four tools overlap: each starts before every other ends.
    tools = [b for b in bars if b.kind == "tool"]
    assert max(b.start_s for b in tools) < min(b.end_s for b in tools)
    assert set(bars[0].to_json()) >= {"seq", "kind", "name", "start_s", "end_s", "critical", "error"}


def test_traces_from_json_reads_the_step_traces_endpoint() -> None:
    rows = [{**{f: getattr(t, f) for f in t.__slots__}, "extra": 1} for t in four_parallel_tools()]
    assert traces_from_json(rows) == four_parallel_tools()
