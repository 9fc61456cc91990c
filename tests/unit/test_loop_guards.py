"""Loop guards: the guards alone on rounds of calls, the loop they stop (the sim's scripted loops,
in process), and a runtime whose model is the sim over loopback HTTP with every body it was sent
recorded: what the model is told on its last turn, what is stored, and who may set the guards."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.fakes import RecordingModel
from tests.servers import RecordingUpstream, recorded_sim
from troupe.agentloop.driver import prepare, run_loop
from troupe.agentloop.loop_guards import LoopGuards, Tripped, round_of, tripped
from troupe.agentloop.model import ToolCall
from troupe.agentloop.tools import LocalFunctionExecutor
from troupe.agentloop.writer import WireWriter
from troupe.protocol import InvalidRequest, parse_create_request
from troupe.runtime import Runtime, RuntimeSettings
from troupe.runtime.settings import LoopGuardSpec, ModelSpec


def _round(*calls: tuple[str, str]) -> Any:
    return round_of([ToolCall(call_id=f"c{i}", name=n, arguments=a) for i, (n, a) in enumerate(calls)])


A, B = _round(("a", "{}")), _round(("b", "{}"))


def test_each_guard_trips_on_its_own_pattern_and_only_on_it() -> None:
    same = _round(("status", '{"job": 1, "verbose": true}'))
    reordered = _round(("status", '{ "verbose": true,"job": 1 }'))  # the same call, written otherwise
    assert same == reordered
    assert tripped((same, reordered, same), LoopGuards(repeat=3)) == Tripped("repeat", ("status",), 3)
    assert tripped((same, same), LoopGuards(repeat=3)) is None  # not yet
    assert tripped((same, A, same), LoopGuards(repeat=2)) is None  # in a row, or not at all
    # Parallel calls: the same set, whatever its order, is the same round.
    assert _round(("a", "{}"), ("b", "{}")) == _round(("b", "{}"), ("a", "{}"))

    assert tripped((A, B, A, B), LoopGuards(alternate=2)) == Tripped("alternate", ("a", "b"), 2)
    assert tripped((B, A, B, A, B), LoopGuards(alternate=2)).tools == ("a", "b")  # type: ignore[union-attr]
    assert tripped((A, B, A), LoopGuards(alternate=2)) is None
    assert tripped((A, A, A, A), LoopGuards(alternate=2)) is None  # that is a repeat, not an alternation
    assert tripped((A, B, B, A), LoopGuards(alternate=2)) is None

    polls = tuple(_round(("status", f'{{"n": {n}}}')) for n in range(4))
    assert tripped(polls, LoopGuards(poll=4)) == Tripped("poll", ("status",), 4)
    assert tripped(polls, LoopGuards(repeat=2)) is None  # other arguments each time: no repeat
    assert tripped((*polls[:3], _round(("status", "{}"), ("a", "{}"))), LoopGuards(poll=3)) is None
    assert tripped(polls, LoopGuards()) is None and not LoopGuards()


def test_a_request_may_turn_guards_on_or_tighten_them_never_loosen_them() -> None:
    model = LoopGuards(repeat=3, poll=10)
    assert model.tighter(LoopGuards(repeat=5, alternate=2)) == LoopGuards(repeat=3, alternate=2, poll=10)
    assert model.tighter(LoopGuards(poll=4)) == LoopGuards(repeat=3, poll=4)
    assert model.tighter(None) is model


def test_the_note_says_which_guard_and_which_tools() -> None:
    note = Tripped("alternate", ("a", "b"), 2).note()
    assert "loop guard 'alternate'" in note and "'a' and 'b'" in note and "No more tools" in note
    assert "3 times in a row" in Tripped("poll", ("status",), 3).note()


TOOLS = LocalFunctionExecutor({"status": lambda job=0, n=0: "running", "a": lambda: "A", "b": lambda: "B"})


async def _run(body: dict[str, Any], guards: LoopGuards | None = None) -> tuple[dict[str, Any], RecordingModel]:
    """The sim's answer to ``body``, in process; the response and every call the model got."""
    from troupe.sim.model import SimModel

    request = parse_create_request(body)
    writer, model, events = WireWriter(request, response_id="resp_1", created_at=1), RecordingModel(SimModel()), []
    async for event in run_loop(prepare(request, [], [TOOLS]), model=model, executors=[TOOLS], loop_guards=guards):
        events.extend(writer.write(event))
    return events[-1]["response"], model


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("script", "guards", "calls", "guard"),
    [
        ('[[cycle status {"job": 1}]]', LoopGuards(repeat=3), 3, "repeat"),
        ("[[cycle a b]]", LoopGuards(alternate=2), 4, "alternate"),
        ('[[cycle status {"n": 1} status {"n": 2} status {"n": 3}]]', LoopGuards(repeat=2, poll=3), 3, "poll"),
    ],
)
async def test_a_tripped_guard_gets_the_model_one_last_turn_without_tools_told_why(
    script: str, guards: LoopGuards, calls: int, guard: str
) -> None:
    response, model = await _run({"model": "sim", "input": script}, guards)
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_messages", "loop_guard": guard}
    assert len(model.calls) == calls + 1  # the rounds it saw, then the last turn
    assert [c.tool_choice for c in model.calls] == ["auto"] * calls + ["none"]
    last = model.calls[-1].messages[-1]
    assert last["role"] == "system" and f"loop guard '{guard}'" in last["content"]
    assert all("loop guard" not in str(c.messages) for c in model.calls[:-1])  # told on the last turn only
    kinds = [o["type"] for o in response["output"]]
    assert kinds == ["function_call", "function_call_output"] * calls + ["message"]


@pytest.mark.asyncio
async def test_without_guards_the_same_loop_runs_to_the_cap_and_a_loop_that_varies_is_not_stopped() -> None:
    response, model = await _run({"model": "sim", "input": "[[cycle a b]]"})
    assert response["incomplete_details"] == {"reason": "max_messages"} and len(model.calls) == 10
    varied = "[[cycle a status b]]"  # three calls taking turns: no guard's pattern
    response, model = await _run({"model": "sim", "input": varied}, LoopGuards(repeat=2, alternate=2, poll=2))
    assert response["incomplete_details"] == {"reason": "max_messages"} and len(model.calls) == 10
    done, _ = await _run({"model": "sim", "input": '[[call status {"job": 1}]]'}, LoopGuards(repeat=2))
    assert done["status"] == "completed" and done["incomplete_details"] is None


@pytest.mark.asyncio
async def test_a_model_that_calls_tools_on_its_last_turn_anyway_ends_incomplete_and_nothing_more_runs() -> None:
    response, model = await _run({"model": "sim", "input": "[[loop status]]", "loop_guards": {"repeat": 2}})
    assert response["incomplete_details"] == {"reason": "max_messages", "loop_guard": "repeat"}
    assert len(model.calls) == 3
    outputs = [o for o in response["output"] if o["type"] == "function_call_output"]
    assert len(outputs) == 2  # the last turn's call is shown, never run


def test_the_requests_loop_guards_are_validated_naming_the_field() -> None:
    for value, param in [({"repeat": 1}, "loop_guards.repeat"), ({"loops": 3}, "loop_guards.loops"),
                         ({"poll": "3"}, "loop_guards.poll"), ([3], "loop_guards")]:  # fmt: skip
        with pytest.raises(InvalidRequest) as caught:
            parse_create_request({"model": "sim", "input": "x", "loop_guards": value})
        assert caught.value.param == param


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[str, RecordingUpstream]]:
    with recorded_sim() as recorded:
        yield recorded


@contextlib.asynccontextmanager
async def _runtime(tmp_path: Any, url: str, guards: LoopGuardSpec | None) -> AsyncIterator[Runtime]:
    models = (ModelSpec(name="m", base_url=url, upstream_model="sim", loop_guards=guards),)
    runtime = Runtime.local(RuntimeSettings(storage_path=str(tmp_path / "t.duckdb"), models=models))
    try:
        yield runtime
    finally:
        await runtime.close()


@pytest.mark.asyncio
async def test_a_models_guards_hold_for_every_request_and_the_last_turn_is_what_went_upstream(
    tmp_path, upstream
) -> None:
    url, recording = upstream
    async with _runtime(tmp_path, url, LoopGuardSpec(repeat=2)) as runtime:
        since = len(recording.bodies)
        body = {"model": "m", "input": "[[cycle calculator]]", "loop_guards": {"repeat": 5}}  # cannot loosen it
        stopped = await runtime.respond("", parse_create_request(body))
        assert stopped["incomplete_details"] == {"reason": "max_messages", "loop_guard": "repeat"}
        sent = recording.bodies[since:]
        assert [b.get("tool_choice") for b in sent] == ["auto", "auto", "none"]
        assert (
            sent[-1]["messages"][-1]["role"] == "system"
            and "loop guard 'repeat'" in sent[-1]["messages"][-1]["content"]
        )
        stored = await runtime.get_response("", stopped["id"])
        assert stored["incomplete_details"] == stopped["incomplete_details"]
        traces = await runtime.step_traces("", stopped["id"])
        models = [t for t in traces if t["kind"] == "model"]
        assert [t["detail"] for t in models] == [None, None, {
            "loop_guard": {"guard": "repeat", "tools": ["calculator"], "rounds": 2}}]  # fmt: skip

        # A request may turn on a guard its model does not have.
        alternated = await runtime.respond("", parse_create_request(
            {"model": "m", "input": "[[cycle calculator sleep]]", "loop_guards": {"alternate": 2}}))  # fmt: skip
        assert alternated["incomplete_details"] == {"reason": "max_messages", "loop_guard": "alternate"}
