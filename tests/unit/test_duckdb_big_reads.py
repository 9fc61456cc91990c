"""Reads of big stored values stay within DuckDB's memory limit (issue 26, item 5).

A JSON value over 8,192 characters is stored in ``value_parts`` rows. A read that joins a
whole page of them in DuckDB needs memory in proportion to the page: ten responses of 20 MB
made ``GET /v1/responses?limit=100`` fail with DuckDB's "Out of Memory Error" under its
128MB limit. These tests store such values in a real DuckDB file, under the runtime's default
limit (or a lower one), and read them back every way the API and the runtime do.

On a quiet 2-core machine the ten 20 MB responses take about 13 s, half of it writing them
(520 MB of JSON in parts, with their inputs), and the process peaks at about 1.1 GB. The
text repeats, so that DuckDB compresses it, with a marker every 64 KB so that each value,
and where its parts go, is its own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from troupe.storage import DuckDBStore, ResponseRecord, RunRecord, RunStep, event_log, schema
from troupe.storage.duckdb_store import _PARTS_PER_READ

from .test_store_contract import T0, conversation, make_record, message

MB = 1 << 20


@pytest.fixture
def path(tmp_path):
    return tmp_path / "troupe.duckdb"


def _big_text(tag: str, chars: int) -> str:
    """``chars`` characters, the same for the same ``tag``: a marker every 64 KB, ``x`` between."""
    step = 1 << 16
    return "".join(f"<{tag}:{k:06d}>" + "x" * (step - len(tag) - 9) for k in range(chars // step + 1))[:chars]


def _events(response: dict[str, Any], delta_chars: int) -> dict[str, Any]:
    """A packed event log of ``response`` (one message, streamed in ``delta_chars`` deltas), as
    the writer's would be: the Response's snapshots, the item and its part, then the deltas."""
    item = response["output"][0]
    text = item["content"][0]["text"]
    types = [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed",
    ]  # fmt: skip
    started = {**item, "status": "in_progress", "content": []}
    empty = {**item["content"][0], "text": ""}
    lengths = [min(delta_chars, len(text) - at) for at in range(0, len(text), delta_chars)]
    rows = [[0, ["in_progress"]], [1, ["in_progress"]], [2, 0, started], [3, 0, empty], [4, 0, lengths]]
    rows += [[5, 0, 0], [6, 0, 0], [7, 0, 0], [8, 0]]
    return {"v": event_log.PACKED_VERSION, "first": 0, "types": types, "rows": rows}


def big_record(i: int, *, mb: int = 20, inputs: int = 1, tenant: str = "acme") -> ResponseRecord:
    """The ``i``-th of a chain of responses (``resp_00`` first), each with an ``mb`` MB answer
    and its event log (deltas of 1 KB: for 20 MB, about 100 KB packed, in parts too), and
    ``inputs`` input items of ``mb`` MB. (Also what the OpenAPI fuzz suite's server stores first.)"""
    rid = f"resp_{i:02d}"
    output = [message(f"msg_{i:02d}_out", "assistant", _big_text(f"out{i}", mb * MB))]
    given = [message(f"msg_{i:02d}_in{k}", "user", _big_text(f"in{i}.{k}", mb * MB)) for k in range(inputs)]
    previous = f"resp_{i - 1:02d}" if i else None
    record = make_record(
        rid, tenant=tenant, inputs=given, output=output, previous=previous, thread_id="resp_00", created_at=T0 + i
    )
    return dataclasses.replace(record, events=_events(record.response, 1024))


_INPUTS = {0: 6}  # resp_00 has six 20 MB input items: a page of them is 120 MB


def test_ten_20_mb_responses_are_listed_retrieved_and_replayed_within_128mb(path) -> None:
    store = DuckDBStore(path, memory_limit="128MB")  # the runtime's default storage_memory_limit
    try:
        expected = [big_record(i, inputs=_INPUTS.get(i, 1)) for i in range(10)]
        for record in expected:
            store.write_responses([record])

        for order in ("asc", "desc"):
            page = store.list_responses("acme", limit=100, order=order)
            want = expected if order == "asc" else expected[::-1]
            assert not page.has_more
            assert [r["id"] for r in page.data] == [r.id for r in want]
            assert page.data == [r.response for r in want]
            del page
        page = store.list_responses("acme", limit=3, order="asc", after="resp_02")  # a cursor mid-way
        assert page.data == [r.response for r in expected[3:6]] and page.has_more
        del page

        for record in expected:
            assert store.get_response("acme", record.id) == record.response
            for order in ("asc", "desc"):
                items = store.list_input_items("acme", record.id, limit=100, order=order)
                assert items.data == (record.input_items if order == "asc" else record.input_items[::-1])
            replayed = store.response_events("acme", record.id)
            assert replayed == event_log.unpack(record.events, record.response)
            assert replayed[-1]["type"] == "response.completed" and len(replayed) == 20 * 1024 + 8
            del replayed

        # previous_response_id: the chain's items, oldest first (what the loop is given); 180 MB.
        chain = store.chain_items("acme", "resp_02")
        assert chain == [item for r in expected[:3] for item in (*r.input_items, *r.response["output"])]
        del chain
        # The console's thread view: its first turns with their items.
        turns = store.thread_turns("acme", "resp_00", limit=3)
        assert [t.summary.id for t in turns] == [r.id for r in expected[:3]]
        assert [t.input_items for t in turns] == [r.input_items for r in expected[:3]]
        assert [t.output_items for t in turns] == [r.response["output"] for r in expected[:3]]
        del turns
        assert store.memory()["used_bytes"] <= 128 * 10**6
    finally:
        store.close()


def test_conversation_items_and_run_steps_of_long_values_are_read_within_64mb(path) -> None:
    """The other reads of long values: a conversation's items (a page of them, one, all of them,
    as the API and a conversation's host read them) and a durable run's checkpoints."""
    store = DuckDBStore(path, memory_limit="64MB")
    try:
        items = [message(f"msg_{k}", "user", _big_text(f"c{k}", 16 * MB)) for k in range(5)]
        store.create_conversation("acme", conversation("conv_1"), items[:2])
        store.add_conversation_items("acme", "conv_1", items[2:])
        for order in ("asc", "desc"):
            page = store.list_conversation_items("acme", "conv_1", limit=100, order=order)
            assert page.data == (items if order == "asc" else items[::-1])
        assert store.list_conversation_items("acme", "conv_1", limit=2, after="msg_1", order="asc").data == items[2:4]
        assert store.conversation_items("acme", "conv_1") == items
        assert [store.get_conversation_item("acme", "conv_1", f"msg_{k}") for k in range(5)] == items

        request = {"model": "gpt-test", "input": _big_text("request", 16 * MB)}
        run = RunRecord(tenant="acme", response_id="resp_run", thread_id="thread_1", created_at=T0, request=request)
        steps = [
            RunStep(tenant="acme", response_id="resp_run", seq=s, data={"items": [_big_text(f"step{s}", 16 * MB)]})
            for s in range(4)
        ]
        store.write_run_progress([run, *steps])
        assert store.run_steps("acme", "resp_run") == steps
        assert store.unfinished_runs() == [run]
        assert store.get_run("acme", "resp_run") == run
        assert store.memory()["used_bytes"] <= 64 * 10**6
    finally:
        store.close()


def _item_of_parts(item_id: str, parts: int) -> dict[str, Any]:
    """A message whose JSON is exactly ``parts`` value_parts rows long."""
    overhead = len(schema.dump_json(message(item_id, "user", "")))
    return message(item_id, "user", _big_text(item_id, parts * schema.PART_CHARS - overhead))


def test_values_whose_parts_end_on_a_read_boundary_are_read_whole(path) -> None:
    """A page reads the first parts of its values together, each its share of the bound, then
    the rest of each value in ranges of the bound: values that end exactly on a share or a
    range, and one part past it, come back whole and in order."""
    n = 5
    share = _PARTS_PER_READ // n
    sizes = [share, share + 1, share + _PARTS_PER_READ, 2 * _PARTS_PER_READ, 2]  # in parts (1: inline)
    items = [_item_of_parts(f"msg_{k}", parts) for k, parts in enumerate(sizes)]
    store = DuckDBStore(path, memory_limit="64MB")
    try:
        store.create_conversation("acme", conversation("conv_1"), items)
        _, rows = store.query("SELECT count(*) FROM value_parts GROUP BY id ORDER BY id")
        assert [count for (count,) in rows] == sizes
        assert store.list_conversation_items("acme", "conv_1", limit=n, order="asc").data == items
        assert store.conversation_items("acme", "conv_1") == items
        for item in items:  # one value: its share is the whole bound
            assert store.get_conversation_item("acme", "conv_1", item["id"]) == item
    finally:
        store.close()
