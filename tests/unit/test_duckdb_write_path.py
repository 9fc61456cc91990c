"""DuckDBStore's write path: the in-memory counters (responses.seq, conversation positions) and its appenders."""

from __future__ import annotations

import asyncio

import pytest

from troupe.storage import DuckDBStore, GroupCommitWriter, ResponseRecord, StepTrace, StorageError
from troupe.storage.duckdb_store import connection

from .test_store_contract import T0, conversation, make_record, message


@pytest.fixture
def path(tmp_path):
    return tmp_path / "troupe.duckdb"


def _ids(items) -> list[str]:
    return [item["id"] for item in items]


def _listed(store: DuckDBStore, tenant: str = "acme") -> list[str]:
    return _ids(store.list_responses(tenant, order="asc", limit=100).data)


def _seqs(store: DuckDBStore) -> list[str]:
    """Response ids in seq order, checking seq is unique."""
    rows = store.query("SELECT id, seq FROM responses ORDER BY seq")[1]
    assert len({seq for _, seq in rows}) == len(rows)
    return [rid for rid, _ in rows]


def _conversation_ids_by_seq(store: DuckDBStore, tenant: str, conversation_id: str) -> list[str]:
    """Item ids in position order, checking positions are unique (ties would make the order arbitrary)."""
    rows = store.query(
        "SELECT item_id, seq FROM conversation_items WHERE tenant = ? AND conversation_id = ? ORDER BY seq",
        [tenant, conversation_id],
    )[1]
    assert len({seq for _, seq in rows}) == len(rows)
    return [item_id for item_id, _ in rows]


def test_the_write_order_continues_after_reopening(path) -> None:
    # Equal created_at everywhere: only seq orders the list.
    store = DuckDBStore(path)
    store.write_responses([make_record("resp_1"), make_record("resp_2")])
    store.write_responses([make_record("resp_3")])
    store.close()

    store = DuckDBStore(path)
    try:
        store.write_responses([make_record("resp_4")])
        store.write_responses([make_record("resp_5"), make_record("resp_6")])
        expected = [f"resp_{i}" for i in range(1, 7)]
        assert _listed(store) == expected
        assert _seqs(store) == expected
    finally:
        store.close()

    store = DuckDBStore(path)  # and once more, after writes by a reopened store
    try:
        store.write_responses([make_record("resp_7")])
        assert _listed(store)[-2:] == ["resp_6", "resp_7"]
    finally:
        store.close()


def test_the_write_order_continues_after_deleting_the_newest(path) -> None:
    store = DuckDBStore(path)
    try:
        store.write_responses([make_record("resp_1"), make_record("resp_2")])
        assert store.delete_response("acme", "resp_2")
        store.write_responses([make_record("resp_3")])
        assert _listed(store) == ["resp_1", "resp_3"]
    finally:
        store.close()


def test_failed_batches_keep_the_write_order(path) -> None:
    store = DuckDBStore(path)
    try:
        store.write_responses([make_record("resp_1")])
        for bad in ([make_record("resp_x"), make_record("resp_1")], [make_record("resp_y"), make_record("resp_y")]):
            with pytest.raises(StorageError):
                store.write_responses(bad)
        store.write_responses([make_record("resp_2")])
        store.write_responses([make_record("resp_3"), make_record("resp_4")])
        assert _listed(store) == ["resp_1", "resp_2", "resp_3", "resp_4"]
        assert _seqs(store) == ["resp_1", "resp_2", "resp_3", "resp_4"]
    finally:
        store.close()


def test_a_row_the_appender_refuses_leaves_nothing_behind(path) -> None:
    """A bad value met while buffering rows: the rows buffered before it must not reach the next batch."""
    store = DuckDBStore(path)

    def trace(rid: str, **kw) -> StepTrace:
        return StepTrace(response_id=rid, seq=0, kind="model", name="gpt-test", started_at=T0, duration_s=0.5, **kw)

    try:
        with pytest.raises(StorageError):
            store.write_responses(
                [
                    make_record("resp_1", traces=[trace("resp_1")]),
                    make_record("resp_2", traces=[trace("resp_2", call_id=object())]),
                ]
            )
        store.write_responses([make_record("resp_3", traces=[trace("resp_3")])])
        assert store.get_response("acme", "resp_1") is None
        assert store.step_traces("acme", "resp_1") == []
        assert store.query("SELECT response_id FROM step_traces")[1] == [("resp_3",)]
        assert store.query("SELECT response_id FROM response_items ORDER BY role")[1] == [("resp_3",), ("resp_3",)]
        assert _listed(store) == ["resp_3"]
    finally:
        store.close()


def test_conversation_positions_follow_every_write_path(path) -> None:
    store = DuckDBStore(path)
    try:
        store.create_conversation("acme", conversation("conv_1"), [message("msg_seed", "user", "seed")])
        store.create_conversation("other", conversation("conv_1"), [])  # same id, another tenant
        store.write_responses([make_record("resp_1", conversation="conv_1")])
        store.add_conversation_items("acme", "conv_1", [message("msg_a", "user", "a"), message("msg_b", "user", "b")])
        assert store.delete_conversation_item("acme", "conv_1", "msg_b")  # the newest: positions are not reused
        store.write_responses([make_record("resp_2", conversation="conv_1")])
        with pytest.raises(StorageError):  # a failed batch appends nothing and moves nothing
            store.write_responses([make_record("resp_3", conversation="conv_1"), make_record("resp_1")])
        store.add_conversation_items("acme", "conv_1", [message("msg_c", "user", "c")])
        store.write_responses([make_record("resp_o", tenant="other", conversation="conv_1")])
        expected = ["msg_seed", "msg_resp_1_in", "msg_resp_1_out", "msg_a", "msg_resp_2_in", "msg_resp_2_out", "msg_c"]
        assert _ids(store.conversation_items("acme", "conv_1")) == expected
        assert _conversation_ids_by_seq(store, "acme", "conv_1") == expected
        assert _ids(store.conversation_items("other", "conv_1")) == ["msg_resp_o_in", "msg_resp_o_out"]
        assert _ids(store.list_conversation_items("acme", "conv_1", limit=2).data) == ["msg_c", "msg_resp_2_out"]

        # Deleted: responses are still stored, nothing is appended; recreated: a fresh start.
        assert store.delete_conversation("acme", "conv_1")
        store.write_responses([make_record("resp_4", conversation="conv_1")])
        assert store.add_conversation_items("acme", "conv_1", [message("msg_d", "user", "d")]) is False
        assert store.conversation_items("acme", "conv_1") is None
        assert store.get_response("acme", "resp_4") is not None
        store.create_conversation("acme", conversation("conv_1"), [message("msg_new", "user", "new")])
        store.write_responses([make_record("resp_5", conversation="conv_1")])
        assert _conversation_ids_by_seq(store, "acme", "conv_1") == ["msg_new", "msg_resp_5_in", "msg_resp_5_out"]
        assert _ids(store.conversation_items("other", "conv_1")) == ["msg_resp_o_in", "msg_resp_o_out"]
    finally:
        store.close()

    store = DuckDBStore(path)  # positions are read back from the file
    try:
        store.write_responses([make_record("resp_6", conversation="conv_1")])
        store.add_conversation_items("acme", "conv_1", [message("msg_e", "user", "e")])
        assert _conversation_ids_by_seq(store, "acme", "conv_1") == [
            "msg_new", "msg_resp_5_in", "msg_resp_5_out", "msg_resp_6_in", "msg_resp_6_out", "msg_e",
        ]  # fmt: skip
    finally:
        store.close()


def test_conversations_dropped_from_the_position_cache_are_read_again(path, monkeypatch) -> None:
    monkeypatch.setattr(connection, "_CONVERSATION_SEQ_CACHE", 2)
    store = DuckDBStore(path)
    try:
        for cid in ("conv_1", "conv_2", "conv_3"):
            store.create_conversation("acme", conversation(cid), [])
        for round_ in range(2):
            store.write_responses(
                [make_record(f"resp_{round_}_{cid}", conversation=cid) for cid in ("conv_1", "conv_2", "conv_3")]
            )
        store.add_conversation_items("acme", "conv_1", [message("msg_last", "user", "last")])
        assert _conversation_ids_by_seq(store, "acme", "conv_1") == [
            "msg_resp_0_conv_1_in", "msg_resp_0_conv_1_out", "msg_resp_1_conv_1_in", "msg_resp_1_conv_1_out",
            "msg_last",
        ]  # fmt: skip
        assert len(store._conversation_seqs) <= 2
    finally:
        store.close()


def test_large_batches_write_every_table_in_one_transaction(path) -> None:
    store = DuckDBStore(path)
    try:
        store.create_conversation("acme", conversation("conv_1"), [])
        traces = [StepTrace(response_id="r", seq=0, kind="model", name="m", started_at=T0, duration_s=0.1)]
        records = [
            make_record(f"resp_{i:04d}", conversation="conv_1" if i % 2 else None, traces=traces) for i in range(1000)
        ]
        store.write_responses(records)
        counts = store.query(
            "SELECT (SELECT count(*) FROM responses), (SELECT count(*) FROM response_items),"
            " (SELECT count(*) FROM step_traces), (SELECT count(*) FROM conversation_items)"
        )[1]
        assert counts == [(1000, 2000, 1000, 1000)]
        items = store.conversation_items("acme", "conv_1")
        assert _ids(items[:4]) == ["msg_resp_0001_in", "msg_resp_0001_out", "msg_resp_0003_in", "msg_resp_0003_out"]
        assert _seqs(store) == [r.id for r in records]
    finally:
        store.close()


def _trace(rid: str, **kw) -> StepTrace:
    return StepTrace(response_id=rid, seq=0, kind="model", name="gpt-test", started_at=T0, duration_s=0.5, **kw)


async def test_bad_records_of_a_group_commit_fail_alone_and_leave_no_gap(path) -> None:
    """A batch failing at every stage of the write: the good records commit with contiguous seqs and positions.

    Each bad record fails at another point of the transaction, after more or
    fewer of the tables were appended to; every failure rolls back, and neither
    the counters nor the kept appenders may carry anything of it into the
    retries of the rest of the batch.
    """
    store = DuckDBStore(path)
    try:
        for cid in ("conv_1", "conv_2"):
            store.create_conversation("acme", conversation(cid), [message(f"msg_{cid}_seed", "user", "seed")])
        store.write_responses([make_record("resp_old")])
        nan = make_record("resp_nan", conversation="conv_1", traces=[_trace("resp_nan")])  # refused while encoding
        nan.response["temperature"] = float("inf")
        bad = [
            nan,
            make_record("resp_old", conversation="conv_2"),  # the responses append (duplicate key)
            make_record(  # the response_items append: DuckDB's JSON refuses a lone surrogate escape
                "resp_json", conversation="conv_1", inputs=[message("msg_json", "user", "half a pair: \ud800")]
            ),
            make_record("resp_utf8", conversation="conv_2", model="gpt-\udfff"),  # not UTF-8: buffering the row
            make_record("resp_trace", conversation="conv_1", traces=[_trace("resp_trace", call_id=object())]),
        ]
        good = [
            make_record(f"resp_{i:02d}", conversation=("conv_1", "conv_2", None)[i % 3], traces=[_trace(f"resp_{i:02d}")])
            for i in range(40)
        ]
        records = list(good)
        for position, record in zip((0, 9, 18, 27, 44), bad, strict=True):
            records.insert(position, record)
        batches: list[int] = []

        def write(batch: list[ResponseRecord]) -> None:
            batches.append(len(batch))
            store.write_responses(batch)

        writer = GroupCommitWriter(write, max_batch=len(records), max_delay_s=3600)
        async with asyncio.timeout(30):
            results = await asyncio.gather(*(writer.submit(r) for r in records), return_exceptions=True)
        await writer.close()
        assert batches[0] == len(records)  # one batch, which failed whole and was written again in parts
        failed = [r.id for r, result in zip(records, results, strict=True) if result is not None]
        assert failed == [r.id for r in bad]
        assert all(isinstance(result, StorageError) for result in results if result is not None)

        expected = ["resp_old", *(r.id for r in good)]
        assert _seqs(store) == expected
        assert [seq for _, seq in store.query("SELECT id, seq FROM responses ORDER BY seq")[1]] == list(
            range(len(expected))
        ), "a failed write moved the response counter"
        for cid in ("conv_1", "conv_2"):
            appended = [f"msg_{r.id}_{role}" for r in good if r.response["conversation"] == {"id": cid}
                        for role in ("in", "out")]  # fmt: skip
            assert _conversation_ids_by_seq(store, "acme", cid) == [f"msg_{cid}_seed", *appended]
            rows = store.query("SELECT seq FROM conversation_items WHERE conversation_id = ? ORDER BY seq", [cid])[1]
            assert [seq for (seq,) in rows] == list(range(1 + len(appended))), "a failed write moved a position"
        traced = store.query("SELECT response_id FROM step_traces ORDER BY response_id")[1]
        assert [rid for (rid,) in traced] == sorted(r.id for r in good)
        assert store.query("SELECT count(*) FROM response_items")[1] == [(2 * len(expected),)]

        # Later writes continue right after: no appender kept a row of a rolled-back attempt.
        store.write_responses([make_record("resp_next", conversation="conv_1")])
        assert store.query("SELECT seq FROM responses WHERE id = 'resp_next'")[1] == [(len(expected),)]
        assert _conversation_ids_by_seq(store, "acme", "conv_1")[-2:] == ["msg_resp_next_in", "msg_resp_next_out"]
        assert store.query("SELECT count(*) FROM response_items")[1] == [(2 * len(expected) + 2,)]
        assert store.query("SELECT count(*) FROM step_traces")[1] == [(len(good),)]
    finally:
        store.close()
