"""The runtime facade in-process (no Ray): threads, caches, storage, errors."""

from __future__ import annotations

import asyncio

import pytest

from tests.loop_harness import sim_request as req
from troupe.protocol import InvalidRequest, NotFound
from troupe.runtime import Runtime, RuntimeSettings
from troupe.runtime.ray.placement import LocalPlacement
from troupe.runtime.store_client import AsyncStore


async def test_respond_and_retrieve(runtime):
    response = await runtime.respond("", req(input="[[say hello there]]"))
    assert response["status"] == "completed"
    assert response["output"][-1]["content"][0]["text"] == "hello there"
    assert await runtime.get_response("", response["id"]) == response


async def test_stream_batches_end_with_completed_and_the_response_is_durable_by_then(runtime):
    events = []
    async for batch in await runtime.stream("", req(input="[[tokens 40]]")):
        events.extend(batch)
        if batch[-1]["type"] == "response.completed":
            # The terminal event is only released once the response is stored.
            assert await runtime.get_response("", batch[-1]["response"]["id"]) is not None
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed"


async def test_previous_response_chain_three_deep(runtime):
    first = await runtime.respond("", req(input="one"))
    second = await runtime.respond("", req(input="two", previous_response_id=first["id"]))
    third = await runtime.respond("", req(input="[[history]]", previous_response_id=second["id"]))
    assert third["output"][-1]["content"][0]["text"] == "one | two | [[history]]"
    assert third["previous_response_id"] == second["id"]


async def test_forking_a_chain_uses_the_right_history(runtime):
    root = await runtime.respond("", req(input="root"))
    await runtime.respond("", req(input="branch a", previous_response_id=root["id"]))
    fork = await runtime.respond("", req(input="[[history]]", previous_response_id=root["id"]))
    assert fork["output"][-1]["content"][0]["text"] == "root | [[history]]"


async def test_conversation_turns_append_items_in_order(runtime):
    conv = await runtime.create_conversation("", items=[{"role": "user", "content": "uno"}])
    await runtime.respond("", req(input="dos", conversation=conv["id"]))
    third = await runtime.respond("", req(input="[[history]]", conversation=conv["id"]))
    assert third["output"][-1]["content"][0]["text"] == "uno | dos | [[history]]"
    assert third["conversation"] == {"id": conv["id"]}
    items = (await runtime.list_conversation_items("", conv["id"], order="asc", limit=100)).data
    assert [i["type"] for i in items] == ["message"] * 5
    assert [i["role"] for i in items] == ["user", "user", "assistant", "user", "assistant"]


async def test_items_added_through_the_api_reach_the_next_turn(runtime):
    conv = await runtime.create_conversation("")
    await runtime.respond("", req(input="a", conversation=conv["id"]))  # warms the host's cache
    await runtime.add_conversation_items("", conv["id"], [{"role": "user", "content": "added"}])
    out = await runtime.respond("", req(input="[[history]]", conversation=conv["id"]))
    assert out["output"][-1]["content"][0]["text"] == "a | added | [[history]]"


async def test_deleted_item_leaves_the_next_turns_history(runtime):
    conv = await runtime.create_conversation("", items=[{"role": "user", "content": "secret"}])
    await runtime.respond("", req(input="b", conversation=conv["id"]))
    items = (await runtime.list_conversation_items("", conv["id"], order="asc")).data
    await runtime.delete_conversation_item("", conv["id"], items[0]["id"])
    out = await runtime.respond("", req(input="[[history]]", conversation=conv["id"]))
    assert out["output"][-1]["content"][0]["text"] == "b | [[history]]"


async def test_two_concurrent_turns_on_one_conversation_never_interleave(runtime):
    conv = await runtime.create_conversation("")
    slow = req(input="[[latency ttft=50 itl=5]] [[tokens 20]]", conversation=conv["id"])
    quick = req(input="[[say quick]]", conversation=conv["id"])
    first, second = await asyncio.gather(runtime.respond("", slow), runtime.respond("", quick))
    items = (await runtime.list_conversation_items("", conv["id"], order="asc", limit=100)).data
    texts = [i["content"][0]["text"] for i in items]
    pairs = {(texts[0], texts[1]), (texts[2], texts[3])}
    # Each turn's input is followed by its own answer: the turns did not interleave.
    assert pairs == {
        (slow.input, first["output"][-1]["content"][0]["text"]),
        ("[[say quick]]", "quick"),
    }
    assert second["output"][-1]["content"][0]["text"] == "quick"


async def test_store_false_writes_nothing(runtime):
    response = await runtime.respond("", req(input="hi", store=False))
    with pytest.raises(NotFound):
        await runtime.get_response("", response["id"])


async def test_tool_loop_with_the_example_tools(runtime):
    out = await runtime.respond("", req(input='[[call calculator {"expression": "6 * 7"}]]'))
    assert out["output"][-1]["content"][0]["text"] == "calculator -> 42"
    traces = await runtime.step_traces("", out["id"])
    assert [t["kind"] for t in traces] == ["model", "tool", "model"]


async def test_errors_before_streaming(runtime):
    with pytest.raises(InvalidRequest) as info:
        await runtime.stream("", req(input="x", previous_response_id="resp_nope"))
    assert (info.value.param, info.value.code) == ("previous_response_id", "previous_response_not_found")
    with pytest.raises(NotFound) as info:
        await runtime.stream("", req(input="x", conversation="conv_nope"))
    assert info.value.param == "conversation"
    with pytest.raises(NotFound) as info:
        await runtime.stream("", req(model="gpt-nope", input="x"))
    assert info.value.code == "model_not_found"
    with pytest.raises(InvalidRequest) as info:
        await runtime.stream("", req(input=[{"type": "function_call_output", "call_id": "call_x", "output": "1"}]))
    assert info.value.param == "input[0].call_id"


async def test_tenants_are_isolated(runtime):
    mine = await runtime.respond("tenant-a", req(input="hi"))
    with pytest.raises(NotFound):
        await runtime.get_response("tenant-b", mine["id"])
    with pytest.raises(InvalidRequest):
        await runtime.stream("tenant-b", req(input="x", previous_response_id=mine["id"]))


async def test_restart_on_the_same_file_serves_old_responses(tmp_path):
    path = str(tmp_path / "keep.duckdb")
    first = Runtime.local(RuntimeSettings(storage_path=path))
    old = await first.respond("", req(input="remember"))
    await first.close()
    second = Runtime.local(RuntimeSettings(storage_path=path))
    try:
        assert (await second.get_response("", old["id"]))["id"] == old["id"]
        follow = await second.respond("", req(input="[[history]]", previous_response_id=old["id"]))
        assert follow["output"][-1]["content"][0]["text"] == "remember | [[history]]"
    finally:
        await second.close()


READS = {"get_thread_id", "get_conversation", "chain_items", "conversation_items"}


class RecordingStore(AsyncStore):
    """The in-process store, noting the name of each store call it runs."""

    calls: list[str] = []

    async def _run(self, fn, *args, **kwargs):
        self.calls.append(fn.__name__)
        return await super()._run(fn, *args, **kwargs)


def recording_runtime(settings: RuntimeSettings) -> Runtime:
    store = RecordingStore.open(settings.storage_path)
    return Runtime(settings, store=store, placement=LocalPlacement(settings, store))


async def test_a_warm_thread_continues_without_reading_storage(tmp_path):
    """The thread is resolved where the turn runs, from the message cache when it is warm."""
    settings = RuntimeSettings(storage_path=str(tmp_path / "t.duckdb"))
    calls = RecordingStore.calls
    calls.clear()
    runtime = recording_runtime(settings)
    try:
        first = await runtime.respond("", req(input="uno"))
        second = await runtime.respond("", req(input="[[history]]", previous_response_id=first["id"]))
        assert second["output"][-1]["content"][0]["text"] == "uno | [[history]]"
        conversation = await runtime.create_conversation("")
        await runtime.respond("", req(input="a", conversation=conversation["id"]))
        assert [c for c in calls if c in READS] == ["conversation_items"], "only the cold conversation is read"
        calls.clear()
        await runtime.respond("", req(input="b", conversation=conversation["id"]))
        await runtime.respond("", req(input="[[history]]", previous_response_id=second["id"]))
        assert [c for c in calls if c in READS] == []
    finally:
        await runtime.close()
    # A fresh runtime (a restart): the chain is read once, by the host; no lookup routes it.
    calls.clear()
    runtime = recording_runtime(settings)
    try:
        third = await runtime.respond("", req(input="[[history]]", previous_response_id=second["id"]))
        assert third["output"][-1]["content"][0]["text"] == "uno | [[history]] | [[history]]"
        assert [c for c in calls if c in READS] == ["chain_items"]
        with pytest.raises(NotFound) as missing:  # another tenant's (or an unknown) conversation
            await runtime.respond("other", req(input="x", conversation=conversation["id"]))
        assert missing.value.param == "conversation"
        with pytest.raises(InvalidRequest) as unknown:
            await runtime.respond("other", req(input="x", previous_response_id=second["id"]))
        assert unknown.value.code == "previous_response_not_found"
    finally:
        await runtime.close()
