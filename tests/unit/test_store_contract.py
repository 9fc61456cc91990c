"""The store contract (troupe.storage.contract): one conformance suite, run on DuckDB in memory and on a file.

The builders at the top (:func:`make_record` and friends) are shared with the
DuckDB and group-commit tests.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from troupe.protocol.agents import agent_object, parse_agent_create, parse_agent_update
from troupe.protocol.environments import environment_object, parse_template_body, template_object
from troupe.protocol.ids import RESPONSE, new_id
from troupe.storage import (
    DuckDBStore,
    EvalResultRecord,
    EvalRunRecord,
    GroupCommitWriter,
    Page,
    PromptConflict,
    ResponseFilter,
    ResponseRecord,
    RunRecord,
    RunStep,
    StepTrace,
    StorageError,
    Store,
    event_log,
)
from troupe.storage.contract import NewTurn

T0 = 1_760_000_000


def message(item_id: str, role: str, text: str) -> dict[str, Any]:
    """A message item as the API stores it."""
    if role == "assistant":
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        return {"type": "message", "id": item_id, "role": role, "status": "completed", "content": [part]}
    return {"type": "message", "id": item_id, "role": role, "content": [{"type": "input_text", "text": text}]}


def function_call(item_id: str, call_id: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
        "status": "completed",
    }


def make_response(
    rid: str,
    *,
    created_at: int = T0,
    model: str = "gpt-test",
    status: str = "completed",
    output: list[dict[str, Any]] | None = None,
    conversation: str | None = None,
    previous: str | None = None,
    input_tokens: int = 12,
    output_tokens: int = 5,
) -> dict[str, Any]:
    """A realistic Response object."""
    return {
        "id": rid,
        "object": "response",
        "created_at": created_at,
        "completed_at": created_at + 1 if status == "completed" else None,
        "model": model,
        "status": status,
        "error": None if status != "failed" else {"code": "server_error", "message": "upstream died"},
        "incomplete_details": None,
        "instructions": None,
        "output": output if output is not None else [message(f"msg_{rid}_out", "assistant", f"answer {rid}")],
        "previous_response_id": previous,
        "conversation": {"id": conversation} if conversation else None,
        "tools": [],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "text": {"format": {"type": "text"}},
        "temperature": 1.0,
        "top_p": 1.0,
        "truncation": "disabled",
        "store": True,
        "background": False,
        "metadata": {},
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 1},
            "total_tokens": input_tokens + output_tokens,
        },
    }


def make_record(
    rid: str,
    *,
    tenant: str = "acme",
    inputs: list[dict[str, Any]] | None = None,
    traces: Sequence[StepTrace] = (),
    thread_id: str | None = None,
    append: bool = True,
    **response: Any,
) -> ResponseRecord:
    """A finished response with one user input item (unless ``inputs``) and one assistant output."""
    if inputs is None:
        inputs = [message(f"msg_{rid}_in", "user", f"question {rid}")]
    return ResponseRecord(
        tenant=tenant,
        response=make_response(rid, **response),
        input_items=inputs,
        thread_id=thread_id or response.get("conversation") or rid,
        started_at=T0 + 0.25,
        ended_at=T0 + 1.75,
        ttft_s=0.5,
        traces=list(traces),
        append_to_conversation=append,
    )


def ids(items: Sequence[dict[str, Any]]) -> list[str]:
    return [item["id"] for item in items]


def conversation(cid: str) -> dict[str, Any]:
    return {"id": cid, "object": "conversation", "created_at": T0, "metadata": {"topic": "weather"}}


@pytest.fixture(params=["memory", "file"])
def store(request: pytest.FixtureRequest, tmp_path) -> Iterator[Store]:
    """DuckDB in memory (what ``storage_path = ":memory:"`` opens) and on a file."""
    s: Store = DuckDBStore() if request.param == "memory" else DuckDBStore(tmp_path / "t.duckdb")
    yield s
    s.close()


# -- responses -------------------------------------------------------------------


def test_write_and_get_response(store: Store) -> None:
    record = make_record("resp_1", thread_id="thr_1")
    store.write_responses([record])
    assert store.get_response("acme", "resp_1") == record.response
    assert store.get_thread_id("acme", "resp_1") == "thr_1"
    assert store.get_response("acme", "resp_missing") is None
    assert store.get_thread_id("acme", "resp_missing") is None
    store.write_responses([])  # an empty batch is a no-op


def test_responses_are_listed_in_creation_order_not_the_order_they_were_stored(store: Store) -> None:
    """Made in one second, stored the other way round (two ingress replicas, each shipping its
    own journal): the list is in creation order, as the ids sort, both ways and across pages."""
    made = [new_id(RESPONSE) for _ in range(4)]
    for rid in reversed(made):
        store.write_responses([make_record(rid)])
    assert [r["id"] for r in store.list_responses("acme").data] == made[::-1]
    assert [r["id"] for r in store.list_responses("acme", order="asc").data] == made
    page = store.list_responses("acme", order="asc", limit=2, after=made[0])
    assert [r["id"] for r in page.data] == made[1:3] and page.has_more
    assert [s.id for s in store.find_responses(ResponseFilter(tenant="acme")).data] == made[::-1]  # the console's
    assert [s.id for s in store.find_responses(ResponseFilter(tenant="acme"), after=made[2]).data] == made[1::-1]


def test_tenants_are_isolated(store: Store) -> None:
    store.write_responses([make_record("resp_1", tenant="acme", traces=[_trace("resp_1", 0)])])
    store.create_conversation("acme", conversation("conv_1"), [message("msg_c", "user", "hi")])
    assert store.get_response("other", "resp_1") is None
    assert store.get_thread_id("other", "resp_1") is None
    assert store.list_input_items("other", "resp_1") is None
    assert store.chain_items("other", "resp_1") is None
    assert store.step_traces("other", "resp_1") == []
    assert store.list_responses("other") == Page(data=[], has_more=False)
    assert store.delete_response("other", "resp_1") is False
    assert store.get_conversation("other", "conv_1") is None
    assert store.update_conversation("other", "conv_1", {"x": "y"}) is None
    assert store.add_conversation_items("other", "conv_1", [message("msg_x", "user", "x")]) is False
    assert store.list_conversation_items("other", "conv_1") is None
    assert store.get_conversation_item("other", "conv_1", "msg_c") is None
    assert store.delete_conversation_item("other", "conv_1", "msg_c") is False
    assert store.conversation_items("other", "conv_1") is None
    assert store.delete_conversation("other", "conv_1") is False
    # Nothing above touched acme's objects, and the same ids are free for another tenant.
    assert store.get_response("acme", "resp_1") is not None
    assert ids(store.conversation_items("acme", "conv_1")) == ["msg_c"]
    store.write_responses([make_record("resp_1", tenant="other", model="other-model")])
    store.create_conversation("other", conversation("conv_1"), [])
    assert store.get_response("other", "resp_1")["model"] == "other-model"
    assert store.get_response("acme", "resp_1")["model"] == "gpt-test"
    assert store.conversation_items("other", "conv_1") == []


def test_delete_response(store: Store) -> None:
    store.create_conversation("acme", conversation("conv_1"), [])
    store.write_responses([make_record("resp_1", conversation="conv_1", traces=[_trace("resp_1", 0)])])
    assert store.delete_response("acme", "resp_1") is True
    assert store.get_response("acme", "resp_1") is None
    assert store.get_thread_id("acme", "resp_1") is None
    assert store.list_input_items("acme", "resp_1") is None
    assert store.chain_items("acme", "resp_1") is None
    assert store.step_traces("acme", "resp_1") == []
    assert store.list_responses("acme").data == []
    assert store.delete_response("acme", "resp_1") is False
    # What it appended to the conversation stays there.
    assert ids(store.conversation_items("acme", "conv_1")) == ["msg_resp_1_in", "msg_resp_1_out"]


def _seven(store: Store) -> list[str]:
    # Two per second: created_at ties must keep write order.
    rids = [f"resp_{i}" for i in range(7)]
    records = [
        make_record(rid, created_at=T0 + i // 2, model="m-even" if i % 2 == 0 else "m-odd")
        for i, rid in enumerate(rids)
    ]
    store.write_responses(records[:3])
    store.write_responses(records[3:])
    return rids


def _walk(pager, limit: int) -> list[list[str]]:
    """Every page's ids, following ``after = last_id`` while ``has_more``."""
    pages, after = [], None
    while True:
        page = pager(after=after, limit=limit)
        pages.append(ids(page.data))
        assert page.first_id == (page.data[0]["id"] if page.data else None)
        assert page.last_id == (page.data[-1]["id"] if page.data else None)
        if not page.has_more:
            return pages
        after = page.last_id


def test_list_responses_pages_in_both_orders(store: Store) -> None:
    rids = _seven(store)
    default = store.list_responses("acme")
    assert ids(default.data) == rids[::-1] and default.has_more is False
    assert default.data[0] == store.get_response("acme", "resp_6")

    def asc(**kw):
        return store.list_responses("acme", order="asc", **kw)

    def desc(**kw):
        return store.list_responses("acme", order="desc", **kw)

    assert _walk(asc, 3) == [rids[0:3], rids[3:6], rids[6:]]
    assert _walk(desc, 3) == [rids[6:3:-1], rids[3:0:-1], rids[0:1]]
    page = store.list_responses("acme", limit=7, order="asc")
    assert ids(page.data) == rids and page.has_more is False
    wire = store.list_responses("acme", limit=2).to_list_object()
    assert (wire["object"], wire["first_id"], wire["last_id"], wire["has_more"]) == ("list", "resp_6", "resp_5", True)


def test_list_responses_filters_by_model(store: Store) -> None:
    _seven(store)
    even = store.list_responses("acme", model="m-even")
    assert ids(even.data) == ["resp_6", "resp_4", "resp_2", "resp_0"]
    assert ids(store.list_responses("acme", model="m-odd", order="asc", limit=2).data) == ["resp_1", "resp_3"]
    # The cursor is a position: it need not match the filter.
    assert ids(store.list_responses("acme", model="m-even", after="resp_3", order="asc").data) == ["resp_4", "resp_6"]
    assert store.list_responses("acme", model="nope").data == []


def test_list_responses_orders_by_created_at_not_write_order(store: Store) -> None:
    store.write_responses([make_record("resp_late", created_at=T0 + 10)])
    store.write_responses([make_record("resp_early", created_at=T0)])  # e.g. a long-running background response
    assert ids(store.list_responses("acme", order="asc").data) == ["resp_early", "resp_late"]


def test_list_responses_unknown_cursor_gives_empty_page(store: Store) -> None:
    _seven(store)
    assert store.list_responses("acme", after="resp_unknown") == Page(data=[], has_more=False)


def test_page_arguments_are_checked(store: Store) -> None:
    with pytest.raises(ValueError):
        store.list_responses("acme", limit=0)
    with pytest.raises(ValueError):
        store.list_responses("acme", order="sideways")  # type: ignore[arg-type]


def test_list_input_items_pages_in_both_orders(store: Store) -> None:
    inputs = [message(f"msg_{i}", "user", f"part {i}") for i in range(5)]
    store.write_responses([make_record("resp_1", inputs=inputs)])
    in_ids = ids(inputs)
    page = store.list_input_items("acme", "resp_1")
    assert ids(page.data) == in_ids[::-1] and page.has_more is False and page.data[0] == inputs[-1]

    def asc(**kw):
        return store.list_input_items("acme", "resp_1", order="asc", **kw)

    def desc(**kw):
        return store.list_input_items("acme", "resp_1", **kw)

    assert _walk(asc, 2) == [in_ids[0:2], in_ids[2:4], in_ids[4:]]
    assert _walk(desc, 2) == [in_ids[4:2:-1], in_ids[2:0:-1], in_ids[0:1]]
    assert store.list_input_items("acme", "resp_missing") is None
    assert store.list_input_items("acme", "resp_1", after="msg_unknown").data == []
    store.write_responses([make_record("resp_2", inputs=[])])
    assert store.list_input_items("acme", "resp_2") == Page(data=[], has_more=False)


def _chain(store: Store) -> None:
    store.write_responses([make_record("resp_1")])
    store.write_responses(
        [
            make_record("resp_2", previous="resp_1", thread_id="resp_1", output=[function_call("fc_2", "call_2")]),
            make_record("resp_3", previous="resp_2", thread_id="resp_1"),
        ]
    )


def test_chain_items_follow_previous_response_id(store: Store) -> None:
    _chain(store)
    assert ids(store.chain_items("acme", "resp_3")) == [
        "msg_resp_1_in",
        "msg_resp_1_out",
        "msg_resp_2_in",
        "fc_2",
        "msg_resp_3_in",
        "msg_resp_3_out",
    ]
    assert store.chain_items("acme", "resp_2")[-1] == function_call("fc_2", "call_2")
    assert ids(store.chain_items("acme", "resp_1")) == ["msg_resp_1_in", "msg_resp_1_out"]
    assert store.chain_items("acme", "resp_missing") is None
    assert store.get_thread_id("acme", "resp_3") == "resp_1"


def test_chain_items_stop_at_a_deleted_link(store: Store) -> None:
    _chain(store)
    assert store.delete_response("acme", "resp_2")
    assert ids(store.chain_items("acme", "resp_3")) == ["msg_resp_3_in", "msg_resp_3_out"]


def test_chain_items_end_on_a_corrupt_cycle(store: Store) -> None:
    # The API cannot make one (a previous response exists before its successor); a damaged
    # file could. Each response is taken once, oldest first from where the walk stopped.
    store.write_responses([make_record("resp_a", previous="resp_b"), make_record("resp_b", previous="resp_a")])
    assert ids(store.chain_items("acme", "resp_a")) == ["msg_resp_b_in", "msg_resp_b_out", "msg_resp_a_in", "msg_resp_a_out"]


def test_chain_items_do_not_cross_tenants(store: Store) -> None:
    store.write_responses([make_record("resp_1", tenant="other")])
    store.write_responses([make_record("resp_2", previous="resp_1")])
    assert ids(store.chain_items("acme", "resp_2")) == ["msg_resp_2_in", "msg_resp_2_out"]


# -- conversations -----------------------------------------------------------------


def test_conversation_create_get_update_delete(store: Store) -> None:
    conv = conversation("conv_1")
    store.create_conversation("acme", conv, [])
    assert store.get_conversation("acme", "conv_1") == conv
    updated = store.update_conversation("acme", "conv_1", {"topic": "rain", "n": "2"})
    assert updated == {**conv, "metadata": {"topic": "rain", "n": "2"}}
    assert store.get_conversation("acme", "conv_1") == updated
    assert store.update_conversation("acme", "conv_missing", {}) is None
    assert store.get_conversation("acme", "conv_missing") is None
    assert store.delete_conversation("acme", "conv_1") is True
    assert store.get_conversation("acme", "conv_1") is None
    assert store.conversation_items("acme", "conv_1") is None
    assert store.delete_conversation("acme", "conv_1") is False


def test_conversation_id_is_unique_per_tenant(store: Store) -> None:
    store.create_conversation("acme", conversation("conv_1"), [message("msg_1", "user", "hi")])
    with pytest.raises(StorageError):
        store.create_conversation("acme", conversation("conv_1"), [message("msg_2", "user", "again")])
    assert ids(store.conversation_items("acme", "conv_1")) == ["msg_1"]


def test_conversation_items_add_list_get_delete(store: Store) -> None:
    first = [message(f"msg_{i}", "user", f"m{i}") for i in range(3)]
    store.create_conversation("acme", conversation("conv_1"), first)
    assert store.add_conversation_items("acme", "conv_1", [message(f"msg_{i}", "user", f"m{i}") for i in range(3, 6)])
    all_ids = [f"msg_{i}" for i in range(6)]
    assert ids(store.conversation_items("acme", "conv_1")) == all_ids
    page = store.list_conversation_items("acme", "conv_1")  # default: newest first
    assert ids(page.data) == all_ids[::-1] and page.has_more is False

    def asc(**kw):
        return store.list_conversation_items("acme", "conv_1", order="asc", **kw)

    def desc(**kw):
        return store.list_conversation_items("acme", "conv_1", order="desc", **kw)

    assert _walk(asc, 4) == [all_ids[:4], all_ids[4:]]
    assert _walk(desc, 4) == [all_ids[:1:-1], all_ids[1::-1]]
    assert store.get_conversation_item("acme", "conv_1", "msg_1") == first[1]
    assert store.get_conversation_item("acme", "conv_1", "msg_missing") is None
    assert store.delete_conversation_item("acme", "conv_1", "msg_1") is True
    assert store.delete_conversation_item("acme", "conv_1", "msg_1") is False
    assert store.get_conversation_item("acme", "conv_1", "msg_1") is None
    # Appending after a delete keeps the order stable (positions, not timestamps).
    store.add_conversation_items("acme", "conv_1", [message("msg_6", "user", "m6")])
    assert ids(store.conversation_items("acme", "conv_1")) == ["msg_0", "msg_2", "msg_3", "msg_4", "msg_5", "msg_6"]
    assert ids(asc(after="msg_3").data) == ["msg_4", "msg_5", "msg_6"]
    # Unknown conversation / cursor.
    assert store.add_conversation_items("acme", "conv_missing", first) is False
    assert store.list_conversation_items("acme", "conv_missing") is None
    assert store.get_conversation_item("acme", "conv_missing", "msg_0") is None
    assert store.delete_conversation_item("acme", "conv_missing", "msg_0") is False
    assert store.list_conversation_items("acme", "conv_1", after="msg_1") == Page(data=[], has_more=False)


def test_conversation_responses_append_input_then_output(store: Store) -> None:
    store.create_conversation("acme", conversation("conv_1"), [message("msg_seed", "user", "seed")])
    store.write_responses(
        [
            make_record(
                "resp_1",
                conversation="conv_1",
                output=[function_call("fc_1", "c1"), message("msg_o1", "assistant", "ok")],
            )
        ]
    )
    # Two responses of one conversation in one batch append in batch order.
    store.write_responses([make_record("resp_2", conversation="conv_1"), make_record("resp_3", conversation="conv_1")])
    store.write_responses([make_record("resp_4", conversation="conv_1", append=False)])
    assert ids(store.conversation_items("acme", "conv_1")) == [
        "msg_seed",
        "msg_resp_1_in",
        "fc_1",
        "msg_o1",
        "msg_resp_2_in",
        "msg_resp_2_out",
        "msg_resp_3_in",
        "msg_resp_3_out",
    ]
    assert store.get_thread_id("acme", "resp_2") == "conv_1"
    store.add_conversation_items("acme", "conv_1", [message("msg_after", "user", "later")])
    assert ids(store.list_conversation_items("acme", "conv_1", limit=2).data) == ["msg_after", "msg_resp_3_out"]


def test_response_of_a_deleted_conversation_is_still_stored(store: Store) -> None:
    store.write_responses([make_record("resp_1", conversation="conv_gone")])
    assert store.get_response("acme", "resp_1")["conversation"] == {"id": "conv_gone"}
    assert store.conversation_items("acme", "conv_gone") is None


# -- traces --------------------------------------------------------------------------


def _trace(rid: str, seq: int, **kw: Any) -> StepTrace:
    fields: dict[str, Any] = {"kind": "model", "name": "gpt-test", "started_at": T0 + seq, "duration_s": 0.5}
    return StepTrace(response_id=rid, seq=seq, **{**fields, **kw})


def test_step_traces_round_trip(store: Store) -> None:
    traces = [
        _trace("resp_1", 0, ttft_s=0.125, input_tokens=100, output_tokens=20),
        _trace("resp_1", 1, kind="tool", name="get_weather", call_id="call_1", error="timeout"),
        _trace("resp_1", 2, input_tokens=130, output_tokens=7),
    ]
    store.write_responses([make_record("resp_1", traces=[traces[2], traces[0], traces[1]])])
    assert store.step_traces("acme", "resp_1") == traces
    assert store.step_traces("acme", "resp_missing") == []


def test_event_logs_round_trip_and_go_with_their_response(store: Store) -> None:
    events = [{"type": "response.created", "sequence_number": 0}]
    events += [{"type": "response.output_text.delta", "sequence_number": i, "delta": "x" * 300} for i in range(1, 60)]
    logged = dataclasses.replace(make_record("resp_1"), events=events)  # long: stored in parts in DuckDB
    store.write_responses([logged, make_record("resp_2")])
    assert store.response_events("acme", "resp_1") == events
    assert store.response_events("acme", "resp_2") is None, "a response that kept no log has none"
    assert store.response_events("other", "resp_1") is None, "tenants see only their own"
    assert store.delete_response("acme", "resp_1")
    assert store.response_events("acme", "resp_1") is None


def test_a_packed_event_log_comes_back_as_its_events(store: Store) -> None:
    record = make_record("resp_1")
    message = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "Hi there", "annotations": [], "logprobs": []}]}  # fmt: skip
    response = {**record.response, "output": [message]}
    events = [
        {"content_index": 0, "delta": delta, "item_id": "msg_1", "logprobs": [], "output_index": 0,
         "sequence_number": seq, "type": "response.output_text.delta"}
        for seq, delta in enumerate(["Hi", " there"])
    ] + [{"item": message, "output_index": 0, "sequence_number": 2, "type": "response.output_item.done"}]  # fmt: skip
    packed = event_log.pack(events, response)
    assert "Hi" not in str(packed["rows"]), "the deltas are slices of the stored message's text"
    store.write_responses([dataclasses.replace(record, response=response, events=packed)])
    assert store.response_events("acme", "resp_1") == events


def test_old_event_logs_are_pruned(store: Store) -> None:
    events = [{"type": "response.created", "sequence_number": 0}]
    store.write_responses([dataclasses.replace(make_record("resp_1"), events=events)])
    assert store.prune_event_logs(T0) == 0, "it ended after T0"
    assert store.prune_event_logs(T0 + 3600) == 1
    assert store.response_events("acme", "resp_1") is None
    assert store.get_response("acme", "resp_1") is not None, "the response stays"


def test_a_run_lasts_until_its_response_is_stored(store: Store) -> None:
    request = {"model": "sim", "input": "x" * 10_000, "background": True}  # long: in parts in DuckDB
    run = RunRecord(tenant="acme", response_id="resp_1", thread_id="thread_1", created_at=int(T0), request=request)
    other = RunRecord(tenant="acme", response_id="resp_2", thread_id="thread_2", created_at=int(T0) + 1, request={},
                      credentials="fernet:sealed")  # fmt: skip
    store.start_run(run)
    store.start_run(other)
    assert store.get_run("acme", "resp_2").credentials == "fernet:sealed"
    assert store.get_run("acme", "resp_1") == run
    assert store.get_run("other", "resp_1") is None
    assert store.unfinished_runs() == [run, other]
    store.write_responses([make_record("resp_1")])
    assert store.get_run("acme", "resp_1") is None
    assert store.unfinished_runs() == [other]
    store.end_run("acme", "resp_2")  # refused: never stored
    assert store.unfinished_runs() == []


def test_run_starts_and_steps_are_written_together_or_not_at_all(store: Store) -> None:
    run = RunRecord(tenant="acme", response_id="resp_1", thread_id="t", created_at=int(T0), request={"x": 1})
    step = RunStep(tenant="acme", response_id="resp_1", seq=0, data={"kind": "model"})
    store.write_run_progress([run, step])
    assert store.unfinished_runs() == [run] and store.run_steps("acme", "resp_1") == [step]
    other = RunRecord(tenant="acme", response_id="resp_2", thread_id="t", created_at=int(T0), request={})
    bad = RunStep(tenant="acme", response_id="resp_2", seq=0, data={"not json": object()})
    with pytest.raises(StorageError):
        store.write_run_progress([other, bad])
    assert store.unfinished_runs() == [run], "a batch that fails writes nothing"
    assert store.run_steps("acme", "resp_2") == []


def test_a_run_is_claimed_once_per_attempt(store: Store) -> None:
    run = RunRecord(tenant="acme", response_id="resp_1", thread_id="thread_1", created_at=int(T0), request={})
    store.start_run(run)
    claimed = store.claim_run("acme", "resp_1", 0)
    assert claimed == dataclasses.replace(run, attempt=1)
    assert store.claim_run("acme", "resp_1", 0) is None, "a second resumer of the same attempt loses"
    assert store.claim_run("other", "resp_1", 1) is None
    assert store.get_run("acme", "resp_1") == claimed
    assert store.claim_run("acme", "resp_1", 1) == dataclasses.replace(run, attempt=2)
    assert store.claim_run("acme", "resp_9", 0) is None


def test_run_steps_are_kept_in_order_until_the_run_ends(store: Store) -> None:
    for rid in ("resp_1", "resp_2"):
        store.start_run(RunRecord(tenant="acme", response_id=rid, thread_id="t", created_at=int(T0), request={}))
    long = {"kind": "model", "events": [{"type": "response.output_text.delta", "delta": "x" * 20_000}]}
    steps = [RunStep(tenant="acme", response_id="resp_1", seq=i, data=d) for i, d in enumerate([{"kind": "a"}, long])]
    for step in reversed(steps):
        store.checkpoint_run(step)
    store.checkpoint_run(RunStep(tenant="acme", response_id="resp_2", seq=0, data={"kind": "other"}))
    assert store.run_steps("acme", "resp_1") == steps
    assert store.run_steps("other", "resp_1") == []
    store.write_responses([make_record("resp_1")])
    assert store.run_steps("acme", "resp_1") == []
    store.end_run("acme", "resp_2")
    assert store.run_steps("acme", "resp_2") == []


# -- atomicity and copies ------------------------------------------------------------


def test_a_failing_batch_writes_nothing(store: Store) -> None:
    store.create_conversation("acme", conversation("conv_1"), [])
    store.write_responses([make_record("resp_1")])
    across = [make_record("resp_2", conversation="conv_1", traces=[_trace("resp_2", 0)]), make_record("resp_1")]
    within = [make_record("resp_3", conversation="conv_1"), make_record("resp_3")]
    for batch in (across, within):
        with pytest.raises(StorageError):
            store.write_responses(batch)
    assert ids(store.list_responses("acme").data) == ["resp_1"]
    for rid in ("resp_2", "resp_3"):
        assert store.get_response("acme", rid) is None
        assert store.list_input_items("acme", rid) is None
        assert store.step_traces("acme", rid) == []
    assert store.conversation_items("acme", "conv_1") == []
    store.write_responses([make_record("resp_2")])  # the store still works
    assert store.get_response("acme", "resp_2") is not None


async def test_group_commit_fails_only_the_bad_records_of_a_batch(store: Store) -> None:
    """One bad write in a batch of many good ones: the good ones all commit, the bad one alone fails, nothing is dropped."""
    store.create_conversation("acme", conversation("conv_1"), [message("msg_seed", "user", "seed")])
    store.write_responses([make_record("resp_old")])
    nan = make_record("resp_nan", conversation="conv_1")
    nan.response["temperature"] = float("nan")
    not_json = make_record("resp_obj", conversation="conv_1", inputs=[{"type": "message", "id": "m", "content": object()}])
    duplicate = make_record("resp_old", conversation="conv_1")
    records = [make_record(f"resp_{i:02d}", conversation="conv_1" if i % 3 else None) for i in range(60)]
    for position, bad in ((0, nan), (31, duplicate), (62, not_json)):
        records.insert(position, bad)
    batches: list[list[str]] = []

    def write(batch: list[ResponseRecord]) -> None:
        batches.append([r.id for r in batch])
        store.write_responses(batch)

    # A batch fills up to max_batch before it is written: all 63 records go in one.
    writer = GroupCommitWriter(write, max_batch=len(records), max_delay_s=3600)
    async with asyncio.timeout(30):
        results = await asyncio.gather(*(writer.submit(r) for r in records), return_exceptions=True)
    await writer.close()
    assert batches[0] == [r.id for r in records]
    outcome = {id(r): result for r, result in zip(records, results, strict=True)}
    for bad in (nan, duplicate, not_json):
        assert isinstance(outcome.pop(id(bad)), StorageError)
    assert list(outcome.values()) == [None] * 60
    good = [r for r in records if r not in (nan, duplicate, not_json)]
    # Every good record is stored, with its items appended in submission order; the bad ones are
    # not. (The list is in creation order, which for these made-up ids of one second is id order.)
    assert ids(store.list_responses("acme", order="asc", limit=100).data) == sorted(["resp_old", *(r.id for r in good)])
    assert store.get_response("acme", "resp_old")["conversation"] is None  # the first one, not the duplicate
    for rid in ("resp_nan", "resp_obj"):
        assert store.get_response("acme", rid) is None
    appended = [f"msg_{r.id}_{role}" for r in good if r.response["conversation"] for role in ("in", "out")]
    assert ids(store.conversation_items("acme", "conv_1")) == ["msg_seed", *appended]
    # And the store goes on from there.
    store.write_responses([make_record("resp_after", conversation="conv_1")])
    assert ids(store.conversation_items("acme", "conv_1"))[-3:] == [appended[-1], "msg_resp_after_in", "msg_resp_after_out"]
    assert "resp_after" in ids(store.list_responses("acme", limit=100).data)


def test_values_that_are_not_json_are_refused(store: Store) -> None:
    bad = make_record("resp_1", inputs=[{"type": "message", "id": "msg_1", "role": "user", "content": object()}])
    with pytest.raises(StorageError):
        store.write_responses([bad])
    assert store.get_response("acme", "resp_1") is None
    nan = make_record("resp_2")
    nan.response["temperature"] = float("nan")
    with pytest.raises(StorageError):
        store.write_responses([nan])


def test_returned_objects_are_copies(store: Store) -> None:
    record = make_record("resp_1", conversation="conv_1")
    conv = conversation("conv_1")
    items = [message("msg_1", "user", "hi")]
    store.create_conversation("acme", conv, items)
    store.write_responses([record])
    # Mutating what was passed in changes nothing stored...
    record.response["status"] = "mutated"
    record.input_items[0]["id"] = "mutated"
    conv["metadata"]["topic"] = "mutated"
    items[0]["content"] = "mutated"
    # ...nor does mutating what comes out.
    for got in (
        store.get_response("acme", "resp_1"),
        store.list_responses("acme").data[0],
        store.get_conversation("acme", "conv_1"),
        store.update_conversation("acme", "conv_1", {"topic": "weather"}),
    ):
        got.clear()
    for got_items in (
        store.list_input_items("acme", "resp_1").data,
        store.chain_items("acme", "resp_1"),
        store.conversation_items("acme", "conv_1"),
        store.list_conversation_items("acme", "conv_1").data,
    ):
        got_items[0].clear()
    store.get_conversation_item("acme", "conv_1", "msg_1").clear()
    assert store.get_response("acme", "resp_1") == make_record("resp_1", conversation="conv_1").response
    assert store.get_conversation("acme", "conv_1") == conversation("conv_1")
    assert ids(store.list_input_items("acme", "resp_1").data) == ["msg_resp_1_in"]
    assert store.conversation_items("acme", "conv_1") == [
        message("msg_1", "user", "hi"),
        *make_record("resp_1").input_items,
        *make_record("resp_1").response["output"],
    ]


# -- prompts ---------------------------------------------------------------------------


def prompt_content(text: str, *variables: str) -> dict[str, Any]:
    return {"prompt": text, "messages": [], "variables": list(variables)}


def test_a_prompt_is_created_read_and_deleted_with_its_versions(store: Store) -> None:
    content = {"prompt": "Help {{who}}.", "variables": ["who"],
               "messages": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}  # fmt: skip
    created = store.create_prompt("acme", "pmpt_1", content, T0 + 0.5)
    assert created == {"id": "pmpt_1", "object": "prompt", "version": 1, "created_at": T0, **content, "is_default": True}
    assert store.get_prompt("acme", "pmpt_1") == created
    assert store.get_prompt("acme", "pmpt_1", 1) == created
    assert store.get_prompt("acme", "pmpt_1", 2) is None
    assert store.get_prompt("acme", "pmpt_missing") is None
    assert store.list_prompt_versions("acme", "pmpt_1") == [created]
    assert store.delete_prompt("acme", "pmpt_1") is True
    assert store.get_prompt("acme", "pmpt_1") is None
    assert store.list_prompt_versions("acme", "pmpt_1") is None
    assert store.delete_prompt("acme", "pmpt_1") is False


def test_a_prompt_id_is_unique_per_tenant_and_invisible_to_others(store: Store) -> None:
    store.create_prompt("acme", "pmpt_1", prompt_content("a"), T0)
    with pytest.raises(StorageError):
        store.create_prompt("acme", "pmpt_1", prompt_content("b"), T0)
    store.create_prompt("other", "pmpt_1", prompt_content("theirs"), T0)  # the same id, another tenant
    assert store.get_prompt("acme", "pmpt_1")["prompt"] == "a"
    assert store.update_prompt("nobody", "pmpt_1", prompt_content("x"), from_version=1, set_default=True,
                               created_at=T0) is None  # fmt: skip
    assert store.set_default_prompt_version("nobody", "pmpt_1", 1) is None
    assert store.delete_prompt("nobody", "pmpt_1") is False
    assert store.list_prompts("nobody").data == []
    assert [p["prompt"] for p in store.list_prompts("other").data] == ["theirs"]


def test_updates_add_versions_from_the_latest_only(store: Store) -> None:
    store.create_prompt("acme", "pmpt_1", prompt_content("v1"), T0)
    v2 = store.update_prompt("acme", "pmpt_1", prompt_content("v2 {{x}}", "x"), from_version=1, set_default=True,
                             created_at=T0 + 5)  # fmt: skip
    assert v2 == {"id": "pmpt_1", "object": "prompt", "version": 2, "created_at": T0 + 5, "prompt": "v2 {{x}}",
                  "messages": [], "variables": ["x"], "is_default": True}  # fmt: skip
    # A second update from version 1 lost the race: nothing is written, and it says what is latest.
    with pytest.raises(PromptConflict) as conflict:
        store.update_prompt("acme", "pmpt_1", prompt_content("late"), from_version=1, set_default=True, created_at=T0)
    assert conflict.value.latest == 2
    v3 = store.update_prompt("acme", "pmpt_1", prompt_content("v3"), from_version=2, set_default=False, created_at=T0)
    assert v3["version"] == 3 and v3["is_default"] is False
    assert store.get_prompt("acme", "pmpt_1")["version"] == 2, "not made the default"
    versions = store.list_prompt_versions("acme", "pmpt_1")
    assert [(v["version"], v["prompt"], v["is_default"]) for v in versions] == [
        (1, "v1", False), (2, "v2 {{x}}", True), (3, "v3", False)]  # fmt: skip
    assert store.set_default_prompt_version("acme", "pmpt_1", 1)["is_default"] is True
    assert store.get_prompt("acme", "pmpt_1")["prompt"] == "v1"
    assert store.set_default_prompt_version("acme", "pmpt_1", 4) is None
    assert store.get_prompt("acme", "pmpt_1")["version"] == 1


def test_prompts_list_as_their_default_versions_in_pages(store: Store) -> None:
    for i in range(5):
        store.create_prompt("acme", f"pmpt_{i}", prompt_content(f"p{i}"), T0 + i)
    store.update_prompt("acme", "pmpt_2", prompt_content("p2, v2"), from_version=1, set_default=True, created_at=T0)
    first = store.list_prompts("acme", limit=2, order="asc")
    assert [p["id"] for p in first.data] == ["pmpt_0", "pmpt_1"] and first.has_more
    rest = store.list_prompts("acme", after="pmpt_1", limit=10, order="asc")
    assert [p["prompt"] for p in rest.data] == ["p2, v2", "p3", "p4"] and not rest.has_more
    assert [p["id"] for p in store.list_prompts("acme", after="pmpt_3").data] == ["pmpt_2", "pmpt_1", "pmpt_0"]
    assert store.list_prompts("acme", after="pmpt_missing").data == []
    with pytest.raises(ValueError):
        store.list_prompts("acme", limit=0)


def test_a_long_prompt_round_trips_and_is_deleted_whole(store: Store) -> None:
    text = "Be thorough. " * 2000 + "{{topic}}"  # longer than a value kept inline (schema.LONG_VALUE_CHARS)
    store.create_prompt("acme", "pmpt_long", prompt_content(text, "topic"), T0)
    store.update_prompt("acme", "pmpt_long", prompt_content(text + "!", "topic"), from_version=1, set_default=True,
                        created_at=T0)  # fmt: skip
    assert store.get_prompt("acme", "pmpt_long", 1)["prompt"] == text
    assert store.get_prompt("acme", "pmpt_long")["prompt"] == text + "!"
    assert store.delete_prompt("acme", "pmpt_long")
    if isinstance(store, DuckDBStore):
        assert store.query("SELECT count(*) FROM value_parts")[1] == [(0,)], "its parts went with it"


def test_prompt_objects_returned_are_copies(store: Store) -> None:
    content = prompt_content("keep {{me}}", "me")
    created = store.create_prompt("acme", "pmpt_1", content, T0)
    content["variables"].append("mutated")
    created["variables"].append("mutated")
    store.get_prompt("acme", "pmpt_1")["variables"].append("mutated")
    assert store.get_prompt("acme", "pmpt_1")["variables"] == ["me"]


# -- agents ----------------------------------------------------------------------------


def agent(agent_id: str, created_at: float = T0, **fields: Any) -> dict[str, Any]:
    definition = parse_agent_create({"model": "sim", **fields})
    return agent_object(agent_id, definition, created_at=created_at, updated_at=created_at)


def test_an_agent_is_created_read_updated_and_deleted(store: Store) -> None:
    made = agent("agent_1", name="helper", instructions="Be brief.", metadata={"team": "a"})
    assert store.create_agent("acme", made) == made
    assert store.get_agent("acme", "agent_1") == made
    assert store.get_agent("acme", "agent_missing") is None
    changes = parse_agent_update({"name": None, "metadata": {"team": "b"}, "text": {"verbosity": "low"}})
    updated = store.update_agent("acme", "agent_1", changes, T0 + 5)
    assert updated == {**made, "name": None, "metadata": {"team": "b"}, "updated_at": T0 + 5,
                       "text": {"format": {"type": "text"}, "verbosity": "low"}}  # fmt: skip
    assert store.get_agent("acme", "agent_1") == updated
    assert store.update_agent("acme", "agent_missing", changes, T0) is None
    assert store.delete_agent("acme", "agent_1") is True
    assert store.get_agent("acme", "agent_1") is None
    assert store.delete_agent("acme", "agent_1") is False
    assert store.update_agent("acme", "agent_1", changes, T0) is None


def test_an_agent_id_is_unique_per_tenant_and_invisible_to_others(store: Store) -> None:
    store.create_agent("acme", agent("agent_1", name="ours"))
    with pytest.raises(StorageError):
        store.create_agent("acme", agent("agent_1", name="again"))
    store.create_agent("other", agent("agent_1", name="theirs"))  # the same id, another tenant
    assert store.get_agent("acme", "agent_1")["name"] == "ours"
    assert store.get_agent("nobody", "agent_1") is None
    assert store.update_agent("nobody", "agent_1", parse_agent_update({"name": "x"}), T0) is None
    assert store.delete_agent("nobody", "agent_1") is False
    assert store.list_agents("nobody").data == []
    assert [a["name"] for a in store.list_agents("other").data] == ["theirs"]
    assert store.get_agent("acme", "agent_1")["name"] == "ours", "nothing another tenant did reached it"


def test_agents_list_in_pages_in_both_orders(store: Store) -> None:
    for i in range(5):
        store.create_agent("acme", agent(f"agent_{i}", T0 + i, name=f"a{i}"))
    store.update_agent("acme", "agent_0", parse_agent_update({"name": "renamed"}), T0 + 10)  # order stays by creation
    first = store.list_agents("acme", limit=2, order="asc")
    assert [a["id"] for a in first.data] == ["agent_0", "agent_1"] and first.has_more
    assert first.data[0]["name"] == "renamed"
    rest = store.list_agents("acme", after="agent_1", limit=10, order="asc")
    assert [a["id"] for a in rest.data] == ["agent_2", "agent_3", "agent_4"] and not rest.has_more
    newest = store.list_agents("acme", limit=3)
    assert [a["id"] for a in newest.data] == ["agent_4", "agent_3", "agent_2"] and newest.has_more
    assert [a["id"] for a in store.list_agents("acme", after="agent_2").data] == ["agent_1", "agent_0"]
    assert store.list_agents("acme", after="agent_missing").data == []
    with pytest.raises(ValueError):
        store.list_agents("acme", limit=0)


def test_updates_replace_fields_and_merge_experimental_settings(store: Store) -> None:
    tools = [{"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}}]
    store.create_agent("acme", agent("agent_1", tools=tools, reasoning={"effort": "high"}, service_tier="default"))
    updated = store.update_agent("acme", "agent_1", parse_agent_update({"tools": None, "reasoning": None,
                                                                        "experimental": {}}), T0 + 1)  # fmt: skip
    assert (updated["tools"], updated["reasoning"], updated["service_tier"]) == (
        [], {"effort": None, "summary": None}, "default")
    assert updated["experimental"] == {"time_awareness": False}
    assert updated["model"] == "sim" and updated["created_at"] == T0


def test_a_long_agent_round_trips_and_its_parts_go_with_it(store: Store) -> None:
    text = "Be thorough. " * 2000  # longer than a value kept inline (schema.LONG_VALUE_CHARS)
    store.create_agent("acme", agent("agent_long", instructions=text))
    assert store.get_agent("acme", "agent_long")["instructions"] == text
    updated = store.update_agent("acme", "agent_long", parse_agent_update({"instructions": text + "!"}), T0 + 1)
    assert updated["instructions"] == text + "!"
    assert store.list_agents("acme").data[0]["instructions"] == text + "!"
    if isinstance(store, DuckDBStore):
        assert store.query("SELECT count(DISTINCT id) FROM value_parts")[1] == [(1,)], "the old value's parts went"
    assert store.delete_agent("acme", "agent_long")
    if isinstance(store, DuckDBStore):
        assert store.query("SELECT count(*) FROM value_parts")[1] == [(0,)], "its parts went with it"


def test_agent_objects_returned_are_copies(store: Store) -> None:
    made = agent("agent_1", metadata={"k": "v"})
    created = store.create_agent("acme", made)
    made["metadata"]["k"] = "mutated"
    created["metadata"]["k"] = "mutated"
    store.get_agent("acme", "agent_1")["metadata"]["k"] = "mutated"
    assert store.get_agent("acme", "agent_1")["metadata"] == {"k": "v"}


# -- evaluation runs -------------------------------------------------------------------


def eval_run(run_id: str, **kw: Any) -> EvalRunRecord:
    fields: dict[str, Any] = {"created_at": T0, "dataset": "cases.jsonl", "dataset_sha256": "ab12", "cases": 3}
    return EvalRunRecord(run_id=run_id, **{**fields, "options": {"concurrency": 8, "timeout_s": 60.0}, **kw})


def eval_result(run_id: str, case_id: str, sample: int = 0, **kw: Any) -> EvalResultRecord:
    fields: dict[str, Any] = {
        "passed": True,
        "model": "sim",
        "tags": ["math", "tools"],
        "grades": [{"grader": "contains", "passed": True, "detail": "found '42'"}],
        "response_id": f"resp_{case_id}_{sample}",
        "status": "completed",
        "output_text": "calculator -> 42",
        "ttft_s": 0.125,
        "e2e_s": 0.5,
        "input_tokens": 10,
        "output_tokens": 3,
        "total_tokens": 13,
        "tool_calls": 1,
        "tools_called": ["calculator"],
        "node_id": "node-a",
        "started_at": T0 + 1.5,
        "ended_at": T0 + 2.0,
    }
    return EvalResultRecord(run_id=run_id, case_id=case_id, sample=sample, **{**fields, **kw})


def test_eval_runs_put_get_list_replace(store: Store) -> None:
    assert store.get_eval_run("run_a") is None
    assert store.list_eval_runs() == []
    first, second = eval_run("run_a"), eval_run("run_b", created_at=T0 + 10, model="sim", samples=5)
    store.put_eval_run(first)
    store.put_eval_run(second)
    assert store.get_eval_run("run_a") == first
    assert [r.run_id for r in store.list_eval_runs()] == ["run_b", "run_a"]  # newest first
    finished = dataclasses.replace(first, status="finished", finished_at=T0 + 5.0)
    store.put_eval_run(finished)  # the same run_id replaces the row
    assert store.get_eval_run("run_a") == finished
    assert len(store.list_eval_runs()) == 2


def test_eval_results_round_trip_in_case_and_sample_order(store: Store) -> None:
    store.put_eval_run(eval_run("run_a"))
    rows = [
        eval_result("run_a", "case_b", 1),
        eval_result("run_a", "case_a", 0, passed=False, grades=[], tags=[], tools_called=[], tool_calls=0),
        eval_result("run_a", "case_b", 0),
        eval_result(
            "run_a", "case_c", 0, passed=False, response_id=None, status=None, output_text=None, ttft_s=None,
            e2e_s=None, input_tokens=None, output_tokens=None, total_tokens=None, error_kind="timeout",
            error_message="the case took longer than 1 s",
        ),
        eval_result("run_other", "case_a", 0),
    ]  # fmt: skip
    store.write_eval_results(rows)
    got = store.eval_results("run_a")
    assert [(r.case_id, r.sample) for r in got] == [("case_a", 0), ("case_b", 0), ("case_b", 1), ("case_c", 0)]
    assert got == [rows[1], rows[2], rows[0], rows[3]]
    assert store.eval_results("run_other") == [rows[4]]
    assert store.eval_results("run_missing") == []


def test_eval_results_replace_by_key(store: Store) -> None:
    crashed = eval_result("run_a", "case_a", 0, passed=False, error_kind="crash", error_message="worker died")
    store.write_eval_results([crashed])
    retried = eval_result("run_a", "case_a", 0)
    store.write_eval_results([retried, eval_result("run_a", "case_a", 1)])
    assert store.eval_results("run_a") == [retried, eval_result("run_a", "case_a", 1)]
    # Within one batch, the last result of a key wins.
    last = eval_result("run_a", "case_b", 0, output_text="second")
    store.write_eval_results([eval_result("run_a", "case_b", 0, output_text="first"), last])
    assert store.eval_results("run_a")[-1] == last


def test_a_failing_eval_batch_writes_nothing(store: Store) -> None:
    good = eval_result("run_a", "case_a", 0)
    bad = eval_result("run_a", "case_b", 0, grades=[{"grader": "python", "passed": False, "detail": object()}])
    with pytest.raises(StorageError):
        store.write_eval_results([good, bad])
    assert store.eval_results("run_a") == []
    with pytest.raises(StorageError):
        store.put_eval_run(eval_run("run_a", options={"nan": float("nan")}))
    assert store.get_eval_run("run_a") is None


def test_eval_records_returned_are_copies(store: Store) -> None:
    row = eval_result("run_a", "case_a", 0)
    run = eval_run("run_a")
    store.write_eval_results([row])
    store.put_eval_run(run)
    row.grades[0]["passed"] = False
    row.tags.append("mutated")
    run.options["concurrency"] = -1
    assert store.eval_results("run_a")[0].grades[0]["passed"] is True
    assert store.eval_results("run_a")[0].tags == ["math", "tools"]
    assert store.get_eval_run("run_a").options["concurrency"] == 8
    store.eval_results("run_a")[0].grades.clear()
    assert store.eval_results("run_a")[0].grades != []


# -- agent sessions ------------------------------------------------------------------------


def agent_session(session_id: str, created_at: float = T0, *, agent_id: str = "agent_1", **fields) -> dict:
    return {"id": session_id, "created_at": created_at, "last_active_at": created_at, "conversation_id": "conv_1",
            "agent": {"id": agent_id, "model": "sim", "instructions": fields.pop("instructions", None)},
            "environment": {"type": "none"}, "metadata": fields.pop("metadata", {}), **fields}  # fmt: skip


def test_a_session_is_created_listed_updated_and_deleted_with_its_turns(store: Store) -> None:
    long = "Think. " * 3000  # its agent's instructions go to value_parts
    store.create_sessions("acme", [agent_session("sess_1", metadata={"team": "a"}, instructions=long)])
    store.create_sessions("acme", [agent_session("sess_2", T0 + 1, agent_id="agent_2", metadata={"team": "b"})])
    assert store.get_session("acme", "sess_1")["agent"]["instructions"] == long
    assert store.get_session("other", "sess_1") is None
    assert [s["id"] for s in store.list_sessions("acme").data] == ["sess_2", "sess_1"]
    assert [s["id"] for s in store.list_sessions("acme", agent_id="agent_2").data] == ["sess_2"]
    assert [s["id"] for s in store.list_sessions("acme", metadata={"team": "a"}).data] == ["sess_1"]
    assert store.list_sessions("acme", metadata={"team": "a", "x": "y"}).data == []
    page = store.list_sessions("acme", limit=1, order="asc")
    assert ([s["id"] for s in page.data], page.has_more) == (["sess_1"], True)
    assert [s["id"] for s in store.list_sessions("acme", after="sess_1", order="asc").data] == ["sess_2"]

    updated = store.update_session("acme", "sess_1", {"metadata": {"team": "c"}})
    assert updated["metadata"] == {"team": "c"} and updated["agent"]["instructions"] == long
    assert store.update_session("acme", "sess_9", {"metadata": {}}) is None
    first = store.add_turns("acme", [NewTurn("sess_1", "turn_1", "resp_1", T0 + 5)])[0]
    second = store.add_turns("acme", [NewTurn("sess_1", "turn_2", "resp_2", T0 + 6)])[0]
    assert (first["seq"], second["seq"]) == (0, 1)
    assert store.query("SELECT last_active_at FROM agent_sessions WHERE id = 'sess_1'")[1] == [(T0 + 6,)]
    with pytest.raises(StorageError):
        store.add_turns("acme", [NewTurn("sess_9", "turn_3", "resp_3", T0)])
    assert [t["id"] for t in store.list_turns("acme", "sess_1").data] == ["turn_2", "turn_1"]
    assert [t["id"] for t in store.list_turns("acme", "sess_1", after="turn_1", order="asc").data] == ["turn_2"]
    assert store.list_turns("acme", "sess_2").data == []

    assert store.delete_session("acme", "sess_1") is True
    assert store.get_session("acme", "sess_1") is None and store.get_turn("acme", "sess_1", "turn_1") is None
    assert store.delete_session("acme", "sess_1") is False
    assert [s["id"] for s in store.list_sessions("acme").data] == ["sess_2"]


def test_turns_added_together_are_stored_together_or_not_at_all(store: Store) -> None:
    store.create_sessions("acme", [agent_session("sess_1")])
    store.create_sessions("acme", [agent_session("sess_2")])
    both = store.add_turns("acme", [NewTurn("sess_1", "turn_1", "resp_1", T0), NewTurn("sess_2", "turn_2", "resp_2", T0),
                                    NewTurn("sess_1", "turn_3", "resp_3", T0 + 1)])  # fmt: skip
    assert [(t["id"], t["session_id"], t["seq"]) for t in both] == [
        ("turn_1", "sess_1", 0), ("turn_2", "sess_2", 0), ("turn_3", "sess_1", 1)]  # fmt: skip
    assert both == [store.get_turn("acme", t["session_id"], t["id"]) for t in both]
    with pytest.raises(StorageError):  # one session is unknown: none is added
        store.add_turns("acme", [NewTurn("sess_2", "turn_4", "resp_4", T0), NewTurn("sess_9", "turn_5", "resp_5", T0)])
    assert store.get_turn("acme", "sess_2", "turn_4") is None
    assert store.add_turns("acme", []) == []


def test_sessions_and_their_conversations_are_stored_together_or_not_at_all(store: Store) -> None:
    conversation = {"id": "conv_1", "object": "conversation", "created_at": 1, "metadata": {"agent_session_id": "s"}}
    made = store.create_sessions("acme", [agent_session("sess_a"), agent_session("sess_b")])
    assert [s["id"] for s in made] == ["sess_a", "sess_b"] and made[1] == store.get_session("acme", "sess_b")
    with pytest.raises(StorageError):  # one id is taken: neither is stored
        store.create_sessions("acme", [agent_session("sess_c"), agent_session("sess_a")])
    assert store.get_session("acme", "sess_c") is None
    store.create_sessions("acme", [agent_session("sess_1")], [conversation])
    assert store.get_conversation("acme", "conv_1") == conversation
    assert store.conversation_items("acme", "conv_1") == []
    # The session's id is taken: the new conversation is not stored either.
    with pytest.raises(StorageError):
        store.create_sessions("acme", [agent_session("sess_1")], [{**conversation, "id": "conv_2"}])
    assert store.get_conversation("acme", "conv_2") is None
    # The conversation's id is taken: the session is not stored.
    with pytest.raises(StorageError):
        store.create_sessions("acme", [agent_session("sess_2")], [conversation])
    assert store.get_session("acme", "sess_2") is None


def test_a_turn_goes_on_once_every_call_has_its_result(store: Store) -> None:
    store.create_sessions("acme", [agent_session("sess_1")])
    store.add_turns("acme", [NewTurn("sess_1", "turn_1", "resp_1", T0)])
    ok = {"success": True, "output": "sunny", "error": None}
    assert store.record_tool_results("acme", "sess_1", "turn_1", {"call_a": ok})["results"] == {"call_a": ok}
    assert store.record_tool_results("acme", "sess_1", "turn_9", {"call_a": ok}) is None
    # A result is missing: no claim.
    claim = {"after": "resp_1", "call_ids": ["call_a", "call_b"]}
    assert store.continue_turn("acme", "sess_1", "turn_1", response_id="resp_2", **claim) is None
    store.record_tool_results("acme", "sess_1", "turn_1", {"call_b": {**ok, "output": "rain"}})
    assert store.continue_turn("acme", "sess_1", "turn_1", response_id="resp_2", **claim) == {
        "call_a": ok, "call_b": {**ok, "output": "rain"}}  # fmt: skip
    # The same claim again (a second replica's): the turn has moved on.
    assert store.continue_turn("acme", "sess_1", "turn_1", response_id="resp_3", **claim) is None
    turn = store.get_turn("acme", "sess_1", "turn_1")
    assert (turn["responses"], turn["results"], turn["cancelled"]) == (["resp_1", "resp_2"], {}, False)
    assert turn["taken"] == {"call_a": ok, "call_b": {**ok, "output": "rain"}}, "what resp_2 took, for followers"
    assert store.cancel_turn("acme", "sess_1", "turn_1") is True
    assert store.continue_turn("acme", "sess_1", "turn_1", after="resp_2", response_id="resp_3", call_ids=[]) is None
    assert store.get_turn("acme", "sess_1", "turn_1")["cancelled"] is True
    assert store.cancel_turn("acme", "sess_1", "turn_9") is False


def test_a_claim_keeps_the_results_it_is_given_first(store: Store) -> None:
    store.create_sessions("acme", [agent_session("sess_1")])
    store.add_turns("acme", [NewTurn("sess_1", "turn_1", "resp_1", T0)])
    ok = {"success": True, "output": "sunny", "error": None}
    claim = {"after": "resp_1", "call_ids": ["call_a", "call_b"]}
    # call_b's result is missing: call_a's is kept, nothing is claimed.
    assert store.continue_turn("acme", "sess_1", "turn_1", response_id="resp_2", results={"call_a": ok}, **claim) is None
    assert store.get_turn("acme", "sess_1", "turn_1")["results"] == {"call_a": ok}
    rain = {**ok, "output": "rain"}
    taken = store.continue_turn("acme", "sess_1", "turn_1", response_id="resp_2", results={"call_b": rain}, **claim)
    assert taken == {"call_a": ok, "call_b": rain}
    turn = store.get_turn("acme", "sess_1", "turn_1")
    assert (turn["responses"], turn["results"], turn["taken"]) == (["resp_1", "resp_2"], {}, taken)
    assert store.continue_turn("acme", "sess_9", "turn_1", response_id="resp_3", results={"x": ok}, after="resp_2",
                               call_ids=[]) is None  # fmt: skip


def test_two_claims_at_once_continue_a_turn_once(tmp_path) -> None:
    store = DuckDBStore(tmp_path / "t.duckdb")
    store.create_sessions("acme", [agent_session("sess_1")])
    store.add_turns("acme", [NewTurn("sess_1", "turn_1", "resp_1", T0)])
    store.record_tool_results("acme", "sess_1", "turn_1", {"call_a": {"success": True, "output": "x", "error": None}})
    with ThreadPoolExecutor(8) as pool:
        claims = list(pool.map(lambda i: store.continue_turn("acme", "sess_1", "turn_1", after="resp_1",
                                                             response_id=f"resp_{i + 2}", call_ids=["call_a"]),
                               range(8)))  # fmt: skip
    assert sum(claim is not None for claim in claims) == 1
    assert len(store.get_turn("acme", "sess_1", "turn_1")["responses"]) == 2
    store.close()
# -- environments ----------------------------------------------------------------------


def template(template_id: str, created_at: float = T0, **body: Any) -> dict[str, Any]:
    return template_object(template_id, parse_template_body(body), created_at=created_at, updated_at=created_at)


def test_a_template_is_created_read_updated_and_deleted_with_its_sealed_secrets(store: Store) -> None:
    made = template("envtpl_1", name="t", network={"access": "restricted", "allowed_domains": ["example.com"]})
    assert store.create_environment_template("acme", made, "fernet:sealed") == made
    assert store.get_environment_template("acme", "envtpl_1") == (made, "fernet:sealed")
    assert store.get_environment_template("other", "envtpl_1") is None
    changes = parse_template_body({"name": None, "network": None}, update=True)
    updated = store.update_environment_template("acme", "envtpl_1", changes, T0 + 5, secrets=None, set_secrets=False)
    assert updated == {**made, "name": None, "network": {"access": "disabled", "allowed_domains": []},
                       "updated_at": int(T0 + 5)}  # fmt: skip
    assert store.get_environment_template("acme", "envtpl_1") == (updated, "fernet:sealed")  # secrets kept
    store.update_environment_template("acme", "envtpl_1", {}, T0 + 6, secrets=None, set_secrets=True)
    assert store.get_environment_template("acme", "envtpl_1")[1] is None
    assert store.update_environment_template("other", "envtpl_1", {}, T0, secrets=None, set_secrets=False) is None
    assert [t["id"] for t in store.list_environment_templates("acme").data] == ["envtpl_1"]
    assert store.delete_environment_template("other", "envtpl_1") is False
    assert store.delete_environment_template("acme", "envtpl_1") is True
    assert store.get_environment_template("acme", "envtpl_1") is None


def test_environments_are_stored_per_tenant_and_listed_in_pages(store: Store) -> None:
    for i in range(3):
        made = environment_object(f"env_{i}", container_id=f"cntr_{i}", status="ready", files=[])
        assert store.create_environment("acme", made, T0 + i) == made
    with pytest.raises(StorageError):
        store.create_environment("acme", environment_object("env_0", container_id="c", status="ready", files=[]), T0)
    assert store.get_environment("acme", "env_1")["container_id"] == "cntr_1"
    assert store.get_environment("other", "env_1") is None and store.list_environments("other").data == []
    first = store.list_environments("acme", limit=2)
    assert [e["id"] for e in first.data] == ["env_2", "env_1"] and first.has_more
    assert [e["id"] for e in store.list_environments("acme", after="env_1", order="asc").data] == ["env_2"]
