"""Durable background runs, in-process (no Ray): a run lost with its server resumes from its
last checkpoint when the next server starts on the same DuckDB file.

"The server stops" is ``Runtime.close()``: the run's task is cancelled mid-step and nothing
of it is stored but its checkpoints, as when the process is killed (the Ray tests kill
processes for real). Tools count their executions in a side table of their own
(:mod:`tests.side_effects`), so "never run twice" is checked from outside the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.loop_harness import sim_request as req
from tests.servers import wait_until
from tests.side_effects import COUNTED_TOOLS, executions
from troupe.agentloop.checkpoint import INTERRUPTED
from troupe.protocol import InvalidRequest
from troupe.protocol.job import TurnJob
from troupe.runtime import Runtime, RuntimeSettings
from troupe.runtime.runs import MAX_RESUMES


def settings(tmp_path: Path, **options: Any) -> RuntimeSettings:
    return RuntimeSettings(storage_path=str(tmp_path / "t.duckdb"), tools=COUNTED_TOOLS, **options)


def call(name: str, **arguments: Any) -> str:
    return f"[[call {name} {json.dumps(arguments)}]]"


async def step_kinds(runtime: Runtime, response_id: str) -> list[str]:
    return [step.data["kind"] for step in await runtime.store.run_steps("", response_id)]


async def finished(runtime: Runtime, response_id: str) -> dict[str, Any]:
    async def done() -> bool:
        return (await runtime.get_response("", response_id))["status"] not in ("queued", "in_progress")

    await wait_until(done, what="the resumed run to finish")
    return await runtime.get_response("", response_id)


def shape(output: list[dict[str, Any]]) -> list[tuple]:
    """An output without its ids (every run makes its own): what a crash must not change."""
    return [
        (item["type"], item.get("name"), item.get("arguments"), item.get("output"),
         [part["text"] for part in item.get("content") or []])
        for item in output
    ]  # fmt: skip


async def events_of(runtime: Runtime, response_id: str) -> list[dict[str, Any]]:
    return [event async for batch in await runtime.follow_response("", response_id) for event in batch]


def assert_one_unbroken_log(events: list[dict[str, Any]]) -> None:
    assert [e["sequence_number"] for e in events] == list(range(len(events))), "no gap, no duplicate"
    added = [e["item"]["id"] for e in events if e["type"] == "response.output_item.added"]
    assert len(added) == len(set(added)), "no item is announced twice"
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    opening = [(e["type"], e["response"]["status"]) for e in events if e["type"] in OPENING_TYPES]
    if events[0]["response"]["background"]:  # queued, then in progress, once each
        assert opening == [("response.created", "queued"), ("response.queued", "queued"),
                           ("response.in_progress", "in_progress")]  # fmt: skip
    else:
        assert opening == [("response.created", "in_progress"), ("response.in_progress", "in_progress")]
    assert [e["type"] for e in events[: len(opening)]] == [t for t, _ in opening], "the opening comes first"


OPENING_TYPES = ("response.created", "response.queued", "response.in_progress")


async def test_a_restart_during_a_tool_step_reruns_only_the_idempotent_call_in_flight(tmp_path):
    db, gate = str(tmp_path / "side.sqlite"), tmp_path / "gate"
    script = call("record", db=db, key="r") + " " + call("gate_again", db=db, key="g", path=str(gate))
    first = Runtime.local(settings(tmp_path))
    started = await first.background("", req(input=script, background=True))

    async def record_settled() -> bool:
        return "tool" in await step_kinds(first, started["id"]) and executions(db, "g") == 1

    await wait_until(record_settled, what="record's result stored while gate_again runs")
    await first.close()  # the server stops mid-step
    gate.touch()
    second = Runtime.local(settings(tmp_path))
    try:
        assert await second.recover() == 1
        resumed = await finished(second, started["id"])
        assert resumed["status"] == "completed"
        assert executions(db, "r") == 1, "a call whose result was stored never runs again"
        assert executions(db, "g") == 2, "the idempotent call in flight ran again"
        assert resumed["output"][-1]["content"][0]["text"] == "record -> recorded r\ngate_again -> g passed"
        assert_one_unbroken_log(await events_of(second, started["id"]))
        uncrashed = await second.respond("", req(input=script))
        assert shape(resumed["output"]) == shape(uncrashed["output"])
        assert await second.store.run_steps("", started["id"]) == [], "the checkpoints went with the run"
    finally:
        await second.close()


async def test_a_call_in_flight_of_a_tool_not_idempotent_is_not_run_again(tmp_path):
    db, gate = str(tmp_path / "side.sqlite"), tmp_path / "gate"
    first = Runtime.local(settings(tmp_path))
    started = await first.background("", req(input=call("gate", db=db, key="g", path=str(gate)), background=True))
    async def gate_running() -> bool:
        return executions(db, "g") == 1

    await wait_until(gate_running, what="the gate call running")
    await first.close()
    gate.touch()
    second = Runtime.local(settings(tmp_path))
    try:
        resumed = await second.get_response("", started["id"])  # reading a lost run resumes it
        assert resumed["status"] in ("queued", "in_progress")
        resumed = await finished(second, started["id"])
        assert resumed["status"] == "completed"
        assert executions(db, "g") == 1
        outputs = [item["output"] for item in resumed["output"] if item["type"] == "function_call_output"]
        assert outputs == [INTERRUPTED], "the model is told the call was interrupted"
        assert resumed["output"][-1]["content"][0]["text"] == f"gate -> {INTERRUPTED}"
        tool_traces = [t for t in await second.step_traces("", started["id"]) if t["kind"] == "tool"]
        assert [t["error"] for t in tool_traces] == ["interrupted by a host failure; not run again (the tool is not idempotent)"]
        assert_one_unbroken_log(await events_of(second, started["id"]))
    finally:
        await second.close()


async def test_a_restart_during_the_second_model_call_asks_the_model_again_and_runs_no_tool_twice(tmp_path):
    db = str(tmp_path / "side.sqlite")
    script = "[[latency ttft=3000]] " + call("record", db=db, key="r")
    first = Runtime.local(settings(tmp_path))
    started = await first.background("", req(input=script, background=True))

    async def tools_done() -> bool:
        return "tools" in await step_kinds(first, started["id"])

    await wait_until(tools_done, timeout_s=30, what="the tool step stored")
    # Written behind the loop (only a model turn holds it up), the steps still reach the store
    # whole and in order: no gap in their numbers.
    steps = await first.store.run_steps("", started["id"])
    assert [(s.seq, s.data["kind"]) for s in steps] == [(0, "model"), (1, "tool"), (2, "tools")]
    await first.close()  # during the second model call (3 s to its first token)
    second = Runtime.local(settings(tmp_path))
    try:
        assert await second.recover() == 1
        resumed = await finished(second, started["id"])
        assert resumed["status"] == "completed" and executions(db, "r") == 1
        model_traces = [t for t in await second.step_traces("", started["id"]) if t["kind"] == "model"]
        assert len(model_traces) == 2, "the first model call is not made again"
        events = await events_of(second, started["id"])
        assert_one_unbroken_log(events)
        assert events[-1]["response"]["usage"]["output_tokens"] > 0
        assert shape(resumed["output"]) == shape((await second.respond("", req(input=call("record", db=db, key="r"))))["output"])
    finally:
        await second.close()


async def test_a_run_lost_before_its_first_checkpoint_opens_once_and_goes_on(tmp_path):
    first = Runtime.local(settings(tmp_path))
    started = await first.background("", req(input="[[latency ttft=3000]] [[say after the restart]]", background=True))
    assert started["status"] == "queued"

    async def in_progress() -> bool:
        return (await first.get_response("", started["id"]))["status"] == "in_progress"

    await wait_until(in_progress, what="the model call under way")
    assert await first.store.run_steps("", started["id"]) == [], "no step stored: nothing to go on from"
    await first.close()  # the server stops during the model call
    second = Runtime.local(settings(tmp_path))
    try:
        assert await second.recover() == 1
        resumed = await finished(second, started["id"])
        assert resumed["status"] == "completed" and resumed["output"][-1]["content"][0]["text"] == "after the restart"
        assert_one_unbroken_log(await events_of(second, started["id"]))
    finally:
        await second.close()


async def test_a_restart_after_a_compaction_keeps_its_item_and_does_not_summarise_again(tmp_path):
    thread = [{"role": "user", "content": "x" * 400}, {"role": "assistant", "content": "y" * 400},
              {"role": "user", "content": "[[latency ttft=1500]] [[say done]]"}]  # fmt: skip
    compacting = [{"type": "compaction", "compact_threshold": 50}]
    first = Runtime.local(settings(tmp_path))
    started = await first.background("", req(input=thread, background=True, context_management=compacting))

    async def compacted() -> bool:
        return await step_kinds(first, started["id"]) == ["compaction"]

    await wait_until(compacted, timeout_s=30, what="the compaction stored")
    await first.close()  # during the answer's model call (1.5 s to its first token)
    second = Runtime.local(settings(tmp_path))
    try:
        assert await second.recover() == 1
        resumed = await finished(second, started["id"])
        assert resumed["status"] == "completed"
        assert [item["type"] for item in resumed["output"]] == ["compaction", "message"]
        assert resumed["output"][1]["content"][0]["text"] == "done"
        model_traces = [t for t in await second.step_traces("", started["id"]) if t["kind"] == "model"]
        assert len(model_traces) == 2, "the summary is not written again"
        # 8 words of summary ("Summary of 3 messages: 2 user, 1 assistant.") and 1 of answer, once each.
        assert resumed["usage"]["output_tokens"] == 9
        assert_one_unbroken_log(await events_of(second, started["id"]))
    finally:
        await second.close()


@contextlib.asynccontextmanager
async def lost_then_restarted(tmp_path: Path, **options: Any) -> AsyncIterator[tuple[Runtime, str]]:
    """A background run lost with its server during a 30 s tool call, and the next server on its file."""
    first = Runtime.local(settings(tmp_path))
    started = await first.background("", req(input='[[call sleep {"ms": 30000}]]', background=True))

    async def calling() -> bool:
        return await step_kinds(first, started["id"]) == ["model"]

    await wait_until(calling, what="the model turn that calls sleep stored")
    await first.close()
    second = Runtime.local(settings(tmp_path, **options))
    try:
        yield second, started["id"]
    finally:
        await second.close()


async def test_a_lost_run_older_than_resume_within_s_is_failed(tmp_path):
    async with lost_then_restarted(tmp_path, resume_within_s=0) as (second, response_id):
        assert await second.recover() == 1
        failed = await second.get_response("", response_id)
        assert failed["status"] == "failed" and "not resumed" in failed["error"]["message"]
        assert failed["background"] is True and failed["id"] == response_id
        assert await second.recover() == 0, "failed once"
        events = await events_of(second, response_id)  # a finished response replays to its end
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert events[0]["type"] == "response.created" and events[-1]["response"] == failed
        assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
        assert [i["type"] for i in failed["output"]] == ["function_call"], "the output it had"
        assert events[-2]["message"] == failed["error"]["message"]


async def test_a_run_whose_hosts_keep_failing_is_failed_after_max_resumes(tmp_path):
    async with lost_then_restarted(tmp_path) as (second, response_id):
        for attempt in range(MAX_RESUMES):  # as if resumed that often, each time lost again
            assert await second.store.claim_run("", response_id, attempt) is not None
        failed = await second.get_response("", response_id)
        assert failed["status"] == "failed"
        assert f"failed {MAX_RESUMES + 1} times" in failed["error"]["message"]


async def test_a_foreground_turn_is_durable_from_its_first_step_until_its_client_leaves(tmp_path):
    db, gate = str(tmp_path / "side.sqlite"), tmp_path / "gate"
    runtime = Runtime.local(settings(tmp_path))
    try:
        batches = await runtime.stream("", req(input=call("gate", db=db, key="g", path=str(gate)), stream=True))
        first = await anext(batches)
        response_id = first[0]["response"]["id"]
        reading = asyncio.ensure_future(anext(batches))

        async def running() -> bool:
            return executions(db, "g") == 1

        await wait_until(running, what="the gate tool started")
        # gate is not idempotent: its turn was stored before it started, with the run's row
        assert await runtime.store.get_run("", response_id) is not None
        assert await step_kinds(runtime, response_id) == ["model"]
        followed = await runtime.follow_response("", response_id)  # a running stored response streams again
        assert (await anext(followed)) == [] and (await anext(followed))[0]["type"] == "response.created"
        await followed.aclose()
        reading.cancel()  # the client went away: its turn is cancelled, as before
        with contextlib.suppress(asyncio.CancelledError):
            await reading
        await batches.aclose()
        assert await runtime.store.get_run("", response_id) is None, "nothing is left to resume"
        assert await runtime.recover() == 0
    finally:
        await runtime.close()


CALCULATOR = '[[call calculator {"expression": "6*7"}]]'


async def test_a_durable_run_whose_last_steps_are_unwritten_at_its_end_leaves_nothing_behind(tmp_path):
    """Idempotent tools end and the last model turn follows at once: the response is stored
    while their steps may still wait to be written. Those are dropped: the response and its
    event log are whole, and no run or step is left to resume."""
    runtime = Runtime.local(settings(tmp_path))
    try:
        for _ in range(5):
            done = await runtime.respond("", req(input=" ".join(['[[call sleep {"ms": 0}]]'] * 4)))
            assert done["status"] == "completed"
            assert [i["type"] for i in done["output"]].count("function_call_output") == 4
            assert await runtime.store.get_run("", done["id"]) is None
            assert await runtime.store.run_steps("", done["id"]) == [], "no step is stored after the response"
            assert_one_unbroken_log(await events_of(runtime, done["id"]))
        assert await runtime.recover() == 0
    finally:
        await runtime.close()


@pytest.mark.parametrize(
    ("options", "script", "keeps_log"),
    [
        ({}, CALCULATOR, True),  # durable from its first tool step
        ({}, "[[say hi]]", True),  # every stored response, by default
        ({"event_logs": "durable"}, "[[say hi]]", False),  # no tool step: not durable
        ({"event_logs": "durable"}, CALCULATOR, True),
        ({"event_logs": "durable", "durable_foreground": False}, CALCULATOR, False),
    ],
)
async def test_which_foreground_responses_keep_their_event_log(tmp_path, options, script, keeps_log):
    runtime = Runtime.local(settings(tmp_path, **options))
    try:
        done = await runtime.respond("", req(input=script))
        assert done["status"] == "completed"
        if not keeps_log:
            with pytest.raises(InvalidRequest):
                await runtime.follow_response("", done["id"])
            return
        events = [event async for batch in await runtime.follow_response("", done["id"]) for event in batch]
        assert_one_unbroken_log(events)
        assert events[-1]["response"] == done
    finally:
        await runtime.close()


async def test_a_resume_call_that_arrives_twice_runs_the_run_once(tmp_path):
    """Ray's ActorUnavailableError leaves unknown whether a call ran, so the runtime may send
    ``resume_background`` again while the host still reads the first one's checkpoints."""
    db, gate = str(tmp_path / "side.sqlite"), tmp_path / "gate"
    first = Runtime.local(settings(tmp_path))
    started = await first.background("", req(input=call("gate_again", db=db, key="g", path=str(gate)), background=True))

    async def gate_running() -> bool:
        return executions(db, "g") == 1

    await wait_until(gate_running, what="the gate call running")
    await first.close()
    second = Runtime.local(settings(tmp_path))
    try:
        run = await second.store.get_run("", started["id"])
        assert run is not None
        job = TurnJob(tenant="", request=req(input=call("gate_again", db=db, key="g", path=str(gate)), background=True),
                      response_id=run.response_id, created_at=run.created_at, thread_id=run.thread_id)  # fmt: skip
        host = await second.placement.host_for(run.thread_id)
        answers = await asyncio.gather(host.resume_background(job), host.resume_background(job))
        assert [a["id"] for a in answers] == [started["id"]] * 2

        async def ran_again() -> bool:
            return executions(db, "g") >= 2

        await wait_until(ran_again, what="the idempotent call run again")
        gate.touch()
        resumed = await finished(second, started["id"])
        assert resumed["status"] == "completed"
        assert executions(db, "g") == 2, "resumed once: the call in flight ran again once"
        assert_one_unbroken_log(await events_of(second, started["id"]))
    finally:
        await second.close()
