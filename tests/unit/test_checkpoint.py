"""Checkpoint steps are typed (troupe.agentloop.checkpoint) but stored as the JSON dicts durable
runs have always been stored in: a run stored by an earlier Troupe, in a DuckDB file of today,
resumes. The dicts below are those shapes, written out by hand as the driver wrote them before
the steps were dataclasses; do not change them to follow the code."""

from __future__ import annotations

import json

import pytest

from troupe.agentloop.checkpoint import (
    ApprovedCallsStep,
    CompactionStep,
    ResumePoint,
    ToolOutputsStep,
    ToolResultStep,
    TurnStep,
    step_from_data,
)
from troupe.agentloop.code_interpreter import CodeRun, ContainerFile
from troupe.agentloop.driver import prepare, run_loop
from troupe.agentloop.events import Checkpoint, StepStarted
from troupe.agentloop.model import TokenUsage, ToolCall, TurnEnd
from troupe.agentloop.tools import LocalFunctionExecutor
from troupe.protocol import parse_create_request
from troupe.sim.model import SimModel

STORED = {
    "model": {
        "kind": "model",
        "turn": {
            "text": "Let me add.",
            "reasoning": "two numbers",
            "tool_calls": [["call_1", "add", '{"a": 2, "b": 40}'], ["call_2", "lookup", "{}"]],
            "finish_reason": "tool_calls",
            "usage": [120, 14, 64, 3],
        },
        "had_tools": True,
        "mcp_items": {"call_2": "mcp_01"},
        "fs_items": {},
    },
    "approved": {"kind": "approved", "mcp_items": {"mcpr_01": "mcp_02", "mcpr_02": "mcp_03"}},
    "tool": {"kind": "tool", "call_id": "call_1", "output": "42", "error": None, "started": 1.7e9 + 0.25,
             "ended": 1.7e9 + 0.5},  # fmt: skip
    "tool failed": {"kind": "tool", "call_id": "call_2", "output": "Error: ValueError: no", "error": "ValueError: no",
                    "started": 1.7e9, "ended": 1.7e9 + 1},  # fmt: skip
    "tools": {"kind": "tools"},
    "compaction": {"kind": "compaction", "summary": "Summary of 5 messages: 1 system, 3 user, 1 assistant.",
                   "usage": [900, 40, 0, 0]},  # fmt: skip
    # code_interpreter (the keys are only there when a turn opened, or a call ran, code)
    "model with code": {
        "kind": "model",
        "turn": {"text": "", "reasoning": "", "tool_calls": [["call_3", "python", '{"code": "print(1)"}']],
                 "finish_reason": "tool_calls", "usage": [50, 6, 0, 0]},  # fmt: skip
        "had_tools": True,
        "mcp_items": {},
        "fs_items": {},
        "ci_items": {"call_3": "ci_01"},
    },
    "tool with a run": {"kind": "tool", "call_id": "call_3", "output": "1", "error": None, "started": 1.7e9,
                        "ended": 1.7e9 + 2, "detail": {"container_id": "cntr_1", "run": {
                            "logs": "1\n", "images": [], "failed": False, "limit": None,
                            "files": [["cfile_1", "a.csv", "/mnt/data/a.csv"]]}}},  # fmt: skip
}

TYPED = {
    "model": TurnStep(
        turn=TurnEnd(
            text="Let me add.",
            reasoning="two numbers",
            tool_calls=(ToolCall(call_id="call_1", name="add", arguments='{"a": 2, "b": 40}'),
                        ToolCall(call_id="call_2", name="lookup", arguments="{}")),  # fmt: skip
            finish_reason="tool_calls",
            usage=TokenUsage(input_tokens=120, output_tokens=14, cached_tokens=64, reasoning_tokens=3),
        ),
        had_tools=True,
        mcp_items={"call_2": "mcp_01"},
    ),
    "approved": ApprovedCallsStep(mcp_items={"mcpr_01": "mcp_02", "mcpr_02": "mcp_03"}),
    "tool": ToolResultStep(call_id="call_1", output="42", error=None, started=1.7e9 + 0.25, ended=1.7e9 + 0.5),
    "tool failed": ToolResultStep(
        call_id="call_2", output="Error: ValueError: no", error="ValueError: no", started=1.7e9, ended=1.7e9 + 1
    ),
    "tools": ToolOutputsStep(),
    "compaction": CompactionStep(
        summary="Summary of 5 messages: 1 system, 3 user, 1 assistant.",
        usage=TokenUsage(input_tokens=900, output_tokens=40),
    ),
    "model with code": TurnStep(
        turn=TurnEnd(tool_calls=(ToolCall(call_id="call_3", name="python", arguments='{"code": "print(1)"}'),),
                     finish_reason="tool_calls", usage=TokenUsage(input_tokens=50, output_tokens=6)),  # fmt: skip
        had_tools=True,
        ci_items={"call_3": "ci_01"},
    ),
    "tool with a run": ToolResultStep(
        call_id="call_3", output="1", error=None, started=1.7e9, ended=1.7e9 + 2,
        detail={"container_id": "cntr_1", "run": CodeRun(
            logs="1\n", files=(ContainerFile(file_id="cfile_1", filename="a.csv", path="/mnt/data/a.csv"),)).to_data()},
    ),  # fmt: skip
}


@pytest.mark.parametrize("name", list(STORED))
def test_a_stored_step_reads_as_its_dataclass_and_writes_back_the_same_json(name: str) -> None:
    stored = json.loads(json.dumps(STORED[name]))  # as it comes back from DuckDB
    step = step_from_data(stored)
    assert step == TYPED[name]
    assert json.dumps(step.to_data()) == json.dumps(STORED[name]), "same keys, same order, same values"
    assert json.dumps(TYPED[name].to_data()) == json.dumps(STORED[name])


def test_a_model_step_stored_before_file_search_existed_reads_without_fs_items() -> None:
    old = {k: v for k, v in STORED["model"].items() if k != "fs_items"}
    assert step_from_data(old) == TYPED["model"]


def test_the_hosts_own_fields_beside_a_step_are_ignored_and_an_unknown_kind_is_refused() -> None:
    host_record = {**STORED["tool"], "events": [{"type": "response.created"}], "traces": [], "ttft_s": 0.1,
                   "started_at": 1.7e9}  # fmt: skip
    point = ResumePoint.from_stored([STORED["model"], host_record, STORED["tools"]], output=[])
    assert point.steps == (TYPED["model"], TYPED["tool"], TYPED["tools"])
    with pytest.raises(ValueError, match="kind 'turn'"):
        step_from_data({"kind": "turn"})


async def test_a_live_runs_checkpoints_are_stored_in_the_pinned_shapes() -> None:
    request = parse_create_request({"model": "sim", "input": '[[call add {"a": 2, "b": 40}]]'})
    tools = LocalFunctionExecutor({"add": lambda a, b: a + b})
    prepared = prepare(request, [], [tools])
    steps = [event.step.to_data() async for event in run_loop(prepared, model=SimModel(), executors=[tools],
                                                               checkpoints=True) if isinstance(event, Checkpoint)]  # fmt: skip
    assert [s["kind"] for s in steps] == ["model", "tool", "tools"]
    for data in steps:
        pinned = STORED[data["kind"]]
        assert list(data) == list(pinned), "the keys a stored step has, in order"
        assert json.loads(json.dumps(data)) == data, "plain JSON"
    assert steps[1]["output"] == "42" and steps[1]["error"] is None


async def test_a_live_code_interpreter_runs_checkpoints_are_stored_in_the_pinned_shapes() -> None:
    from tests.fakes import ToyCodeRunner

    request = parse_create_request({"model": "sim", "input": "[[python]]\nprint(1)",
                                    "tools": [{"type": "code_interpreter", "container": "auto"}]})  # fmt: skip
    prepared = prepare(request, [], code_runner=ToyCodeRunner())
    steps = [event.step.to_data() async for event in run_loop(prepared, model=SimModel(), checkpoints=True)
             if isinstance(event, Checkpoint)]  # fmt: skip
    assert [list(s) for s in steps[:2]] == [list(STORED["model with code"]), list(STORED["tool with a run"])]
    assert list(steps[1]["detail"]["run"]) == list(STORED["tool with a run"]["detail"]["run"])


@pytest.mark.parametrize(
    ("idempotent", "gates"),
    [
        (frozenset({"add", "lookup"}), False),  # every call may run twice: its tools start as the turn is written
        (frozenset({"add"}), True),  # one may not: the turn is stored before any starts
        (frozenset(), True),
    ],
)
async def test_a_model_step_gates_its_tools_unless_every_call_is_idempotent(idempotent, gates) -> None:
    script = '[[call add {"a": 2, "b": 40}]] [[call lookup {}]]'
    request = parse_create_request({"model": "sim", "input": script})
    tools = LocalFunctionExecutor({"add": lambda a, b: a + b, "lookup": lambda: "found"}, idempotent=idempotent)
    events = [e async for e in run_loop(prepare(request, [], [tools]), model=SimModel(), executors=[tools],
                                        checkpoints=True)]  # fmt: skip
    checkpoints = [(e.step.to_data()["kind"], e.gates) for e in events if isinstance(e, Checkpoint)]
    assert checkpoints == [("model", gates), ("tool", False), ("tool", False), ("tools", False)]
    model_step = next(i for i, e in enumerate(events) if isinstance(e, Checkpoint))
    first_tool = next(i for i, e in enumerate(events) if isinstance(e, StepStarted) and e.kind == "tool")
    assert model_step < first_tool, "the loop hands the model step over before it starts the tools"
