"""Background responses and cancel, in-process (no Ray): the runtime facade and its hosts."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.loop_harness import sim_request as req
from tests.servers import wait_until
from tests.side_effects import COUNTED_TOOLS, executions
from troupe.protocol import InvalidRequest, NotFound
from troupe.runtime import Runtime, RuntimeSettings

SLEEP_30_S = '[[call sleep {"ms": 30000}]]'




async def status_is(runtime: Runtime, response_id: str, *statuses: str) -> bool:
    return (await runtime.get_response("", response_id))["status"] in statuses


async def test_a_background_response_answers_queued_then_reads_in_progress_then_completed(runtime):
    started = await runtime.background("", req(input="[[latency ttft=300 itl=10]] [[tokens 20]]", background=True))
    assert started["status"] == "queued" and started["background"] is True, "always queued, as OpenAI's"
    assert started["output"] == [] and started["completed_at"] is None and started["usage"] is None
    await wait_until(lambda: status_is(runtime, started["id"], "in_progress"), what="the run to be in progress")
    await wait_until(lambda: status_is(runtime, started["id"], "completed"), what="the background run")
    done = await runtime.get_response("", started["id"])
    foreground = await runtime.respond("", req(input="[[tokens 20]]"))
    assert done["output"][-1]["content"] == foreground["output"][-1]["content"]
    assert done["background"] is True and done["usage"] is not None


def test_background_requires_store():
    with pytest.raises(InvalidRequest) as info:
        req(input="x", background=True, store=False)
    assert info.value.param == "background" and "'store' must be true" in info.value.message


async def test_a_bad_background_request_is_refused_before_it_runs(runtime):
    with pytest.raises(InvalidRequest) as info:
        await runtime.background("", req(input="x", background=True, previous_response_id="resp_nope"))
    assert info.value.code == "previous_response_not_found"
    with pytest.raises(NotFound):
        await runtime.background("", req(model="nope", input="x", background=True))
    assert await runtime.recover() == 0, "a refused request leaves no run behind to fail"


async def test_a_background_turn_waits_queued_behind_its_conversations_turn(runtime):
    conv = (await runtime.create_conversation(""))["id"]
    first = await runtime.background("", req(input=SLEEP_30_S, conversation=conv, background=True))
    second = await runtime.background("", req(input="[[say second]]", conversation=conv, background=True))
    assert second["status"] == "queued"
    assert (await runtime.get_response("", second["id"]))["status"] == "queued"
    await runtime.cancel_response("", first["id"])
    await wait_until(lambda: status_is(runtime, second["id"], "completed"), what="the queued run")
    items = (await runtime.list_conversation_items("", conv, order="asc")).data
    texts = [part["text"] for item in items if item["type"] == "message" for part in item["content"]]
    assert texts == ["[[say second]]", "second"], "the cancelled turn is not conversation history"


async def test_cancelling_a_running_response_cancels_its_tool_call(tmp_path):
    runtime = Runtime.local(RuntimeSettings(storage_path=str(tmp_path / "t.duckdb"), tools=COUNTED_TOOLS))
    try:
        await _cancel_a_running_tool(runtime, tmp_path)
    finally:
        await runtime.close()


async def _cancel_a_running_tool(runtime: Runtime, tmp_path) -> None:
    db, gate = str(tmp_path / "side.sqlite"), str(tmp_path / "never-opened")
    script = f'[[call gate {{"db": "{db}", "key": "g", "path": "{gate}"}}]]'
    started = await runtime.background("", req(input=script, background=True))

    async def tool_running() -> bool:
        return executions(db, "g") == 1

    await wait_until(tool_running, what="the gate tool call")
    before = time.monotonic()
    cancelled = await runtime.cancel_response("", started["id"])
    assert cancelled["status"] == "cancelled"
    assert time.monotonic() - before < 10, "the cancel did not wait for the 30 s tool"
    stored = await runtime.get_response("", started["id"])
    assert stored["status"] == "cancelled"
    assert [item["type"] for item in stored["output"]][0] == "function_call"
    traces = await runtime.step_traces("", started["id"])
    tool = [t for t in traces if t["kind"] == "tool"]
    assert len(tool) == 1 and tool[0]["duration_s"] < 10 and tool[0]["error"] == "cancelled", "its step ended early"
    # Again: the same answer.
    assert (await runtime.cancel_response("", started["id"]))["status"] == "cancelled"


async def test_cancelling_a_queued_response_answers_at_once(runtime):
    conv = (await runtime.create_conversation(""))["id"]
    first = await runtime.background("", req(input=SLEEP_30_S, conversation=conv, background=True))
    queued = await runtime.background("", req(input="[[say never]]", conversation=conv, background=True))
    before = time.monotonic()
    assert (await runtime.cancel_response("", queued["id"]))["status"] == "cancelled"
    assert time.monotonic() - before < 10, "the cancel waited for the turn before it"
    assert (await runtime.get_response("", queued["id"]))["status"] == "cancelled"
    await runtime.cancel_response("", first["id"])
    await wait_until(lambda: status_is(runtime, queued["id"], "cancelled"), what="the queued run to be stored")
    stored = await runtime.get_response("", queued["id"])
    assert stored["output"] == [], "a run cancelled before its turn made nothing"


async def test_a_finished_response_cannot_be_cancelled(runtime):
    done = await runtime.respond("", req(input="[[say hi]]"))
    with pytest.raises(InvalidRequest) as info:
        await runtime.cancel_response("", done["id"])
    assert "'completed'" in info.value.message and info.value.param == "response_id"
    with pytest.raises(NotFound):
        await runtime.cancel_response("", "resp_nope")
    with pytest.raises(NotFound):
        await runtime.cancel_response("other-tenant", done["id"])


async def test_another_tenant_neither_sees_nor_cancels_a_running_response(runtime):
    started = await runtime.background("", req(input=SLEEP_30_S, background=True))
    with pytest.raises(NotFound):
        await runtime.get_response("other-tenant", started["id"])
    with pytest.raises(NotFound):
        await runtime.cancel_response("other-tenant", started["id"])
    assert (await runtime.cancel_response("", started["id"]))["status"] == "cancelled"


async def test_a_foreground_stream_is_cancelled_from_another_caller(runtime):
    events: list[dict] = []
    batches = await runtime.stream("", req(input=SLEEP_30_S, stream=True))

    async def read() -> None:
        async for batch in batches:
            events.extend(batch)

    reader = asyncio.create_task(read())
    await wait_until(lambda: asyncio.sleep(0, any(e["type"] == "response.output_item.added" for e in events)),
                     what="the tool call's event")  # fmt: skip
    response_id = events[0]["response"]["id"]
    assert (await runtime.cancel_response("", response_id))["status"] == "cancelled"
    await asyncio.wait_for(reader, 10)
    assert not any(e["type"] in ("response.completed", "response.failed") for e in events)
    assert (await runtime.get_response("", response_id))["status"] == "cancelled"


async def test_a_queued_run_that_does_not_fit_its_thread_is_stored_failed(runtime):
    conv = (await runtime.create_conversation(""))["id"]
    first = await runtime.background("", req(input=SLEEP_30_S, conversation=conv, background=True))
    orphan = [{"type": "function_call_output", "call_id": "call_nope", "output": "x"}]
    queued = await runtime.background("", req(input=orphan, conversation=conv, background=True))
    assert queued["status"] == "queued"
    await runtime.cancel_response("", first["id"])
    await wait_until(lambda: status_is(runtime, queued["id"], "failed"), what="the queued run to fail")
    failed = await runtime.get_response("", queued["id"])
    assert "call_nope" in failed["error"]["message"]


async def collect(batches) -> list[dict]:
    return [event async for batch in batches for event in batch]


async def test_a_background_stream_followed_live_equals_its_replay(runtime):
    started = await runtime.background("", req(input="[[latency itl=5]] [[tokens 30]]", background=True))
    live = await collect(await runtime.follow_response("", started["id"]))
    assert [e["sequence_number"] for e in live] == list(range(len(live)))
    assert live[0]["type"] == "response.created" and live[-1]["type"] == "response.completed"
    assert live[-1]["response"] == await runtime.get_response("", started["id"])
    assert await collect(await runtime.follow_response("", started["id"])) == live, "the stored log replays it"
    tail = await collect(await runtime.follow_response("", started["id"], starting_after=9))
    assert tail == live[10:]


async def test_a_background_stream_opens_queued_then_in_progress(runtime):
    started = await runtime.background("", req(input="[[tokens 5]]", background=True))
    live = await collect(await runtime.follow_response("", started["id"]))
    opening = [(e["type"], e["sequence_number"], e["response"]["status"]) for e in live[:3]]
    assert opening == [("response.created", 0, "queued"), ("response.queued", 1, "queued"),
                       ("response.in_progress", 2, "in_progress")]  # fmt: skip
    assert live[0]["response"] == started, "create answered the response.created snapshot"
    assert [e["type"] for e in live].count("response.in_progress") == 1
    assert [e["sequence_number"] for e in live] == list(range(len(live))) and live[-1]["type"] == "response.completed"


async def test_a_run_queued_behind_its_conversations_turn_streams_its_opening_at_once(runtime):
    conv = (await runtime.create_conversation(""))["id"]
    first = await runtime.background("", req(input=SLEEP_30_S, conversation=conv, background=True))
    second = await runtime.background("", req(input="[[say second]]", conversation=conv, background=True))
    followed = await runtime.follow_response("", second["id"])
    seen: list[dict] = []
    while len(seen) < 2:  # while the first turn still runs
        seen += await anext(followed)
    assert [(e["type"], e["response"]["status"]) for e in seen] == [("response.created", "queued"),
                                                                    ("response.queued", "queued")]  # fmt: skip
    assert (await runtime.get_response("", first["id"]))["status"] == "in_progress"
    await runtime.cancel_response("", first["id"])
    seen += await collect(followed)
    assert seen[2]["type"] == "response.in_progress" and seen[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in seen] == list(range(len(seen)))


async def test_a_cancelled_queued_run_never_completes(runtime):
    conv = (await runtime.create_conversation(""))["id"]
    first = await runtime.background("", req(input=SLEEP_30_S, conversation=conv, background=True))
    queued = await runtime.background("", req(input="[[say never]]", conversation=conv, background=True))
    assert (await runtime.cancel_response("", queued["id"]))["status"] == "cancelled"
    await runtime.cancel_response("", first["id"])
    await wait_until(lambda: status_is(runtime, queued["id"], "cancelled"), what="the queued run stored")
    assert (await runtime.store.get_response("", queued["id"]))["status"] == "cancelled", "stored so"
    log = await collect(await runtime.follow_response("", queued["id"]))
    assert [e["type"] for e in log][:2] == ["response.created", "response.queued"]
    assert not any(e["type"] in ("response.completed", "response.failed") for e in log), "no terminal event"
    assert [e["sequence_number"] for e in log] == list(range(len(log)))


async def test_a_background_stream_resumed_after_a_drop_misses_nothing(runtime):
    started = await runtime.background("", req(input="[[latency itl=20]] [[tokens 40]]", background=True))
    first: list[dict] = []
    batches = await runtime.follow_response("", started["id"])
    async for batch in batches:
        first.extend(batch)
        if len(first) >= 8:
            break
    await batches.aclose()  # the client dropped; the run goes on
    rest = await collect(await runtime.follow_response("", started["id"], starting_after=first[-1]["sequence_number"]))
    whole = await collect(await runtime.follow_response("", started["id"]))
    assert first + rest == whole and whole[-1]["type"] == "response.completed"


async def test_a_response_streams_again_only_while_it_keeps_its_log(runtime):
    done = await runtime.respond("", req(input="[[say hi]]"))
    replayed = [e async for batch in await runtime.follow_response("", done["id"]) for e in batch]
    assert replayed[-1]["response"] == done
    assert await runtime.store.prune_event_logs(time.time() + 1) >= 1
    with pytest.raises(InvalidRequest) as info:
        await runtime.follow_response("", done["id"])
    assert info.value.param == "stream"
    with pytest.raises(NotFound):
        await runtime.follow_response("", "resp_nope")
    started = await runtime.background("", req(input="[[say hi]]", background=True))
    with pytest.raises(NotFound):
        await runtime.follow_response("other-tenant", started["id"])


async def test_many_followers_of_one_run_each_get_every_event(runtime):
    started = await runtime.background("", req(input="[[latency itl=5]] [[tokens 40]]", background=True))
    followers = [await runtime.follow_response("", started["id"]) for _ in range(4)]
    streams = await asyncio.gather(*(collect(f) for f in followers))
    whole = await collect(await runtime.follow_response("", started["id"]))
    assert whole[-1]["type"] == "response.completed"
    assert all(s == whole for s in streams)
