"""The response journal: durable at submit, in DuckDB behind, replayed after a crash, nothing twice."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from troupe.runtime.store_client import AsyncStore
from troupe.storage import DuckDBStore, StepTrace, StorageError
from troupe.storage.group_commit import WriterStopped
from troupe.storage.journal import (
    REJECTED,
    WRITER_PREFIX,
    Journal,
    JournaledWriter,
    adopt_orphans,
    decode_record,
    encode_record,
    journal_dir,
    read,
    writer_dir,
)

from .test_store_contract import T0, make_record, message


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "troupe.duckdb")


def _segments(path: str) -> list[str]:
    return sorted(name for name in os.listdir(journal_dir(path)) if name.endswith(".jsonl") and name != REJECTED)


def _ids(store: DuckDBStore) -> list[str]:
    return [row[0] for row in store.query("SELECT id FROM responses ORDER BY seq")[1]]


def test_a_record_survives_the_round_trip_through_its_journal_line() -> None:
    trace = StepTrace(
        response_id="resp_1", seq=0, kind="tool", name="sleep", started_at=T0, duration_s=0.4, call_id="call_1",
        error="boom",
    )
    guard = StepTrace(
        response_id="resp_1", seq=1, kind="guardrail", name="pii", started_at=T0, duration_s=0.001,
        detail={"stage": "output", "verdict": "redacted", "categories": ["email"]},
    )
    record = make_record("resp_1", conversation="conv_1", traces=[trace, guard], append=False)
    assert decode_record(encode_record(record)) == record


def test_a_journal_line_written_before_step_traces_had_a_detail_still_reads() -> None:
    trace = StepTrace(response_id="resp_1", seq=0, kind="model", name="sim", started_at=T0, duration_s=0.1)
    line = json.loads(encode_record(make_record("resp_1", traces=[trace])))
    line["traces"] = [fields[:-1] for fields in line["traces"]]  # as an older Troupe wrote it: no detail
    assert decode_record(json.dumps(line).encode()).traces == [trace]


@pytest.mark.parametrize(
    "field, value",
    [("temperature", float("nan")), ("model", "gpt-\udfff"), ("metadata", {"k": object()})],
    ids=["nan", "lone-surrogate", "not-json"],
)
def test_what_the_store_would_refuse_fails_before_it_is_journaled(field, value) -> None:
    record = make_record("resp_bad")
    record.response[field] = value
    with pytest.raises(StorageError, match="not storable"):
        encode_record(record)


async def test_a_submitted_record_is_journaled_and_reaches_the_store_in_batches(path) -> None:
    store = DuckDBStore(path)
    writes: list[int] = []
    original = store.write_responses

    def counted(records, **kw):
        writes.append(len(records))
        original(records, **kw)

    store.write_responses = counted  # type: ignore[method-assign]
    writer = JournaledWriter(store, journal_dir(path), apply_delay_s=3600)
    try:
        async with asyncio.timeout(30):
            await asyncio.gather(*(writer.submit(make_record(f"resp_{i:02d}")) for i in range(20)))
        assert [lsn for lsn, _ in read(journal_dir(path))] == list(range(1, 21))  # durable: in the journal
        assert writes == [] and _ids(store) == []  # and not yet in DuckDB (the applier lingers)

        # A read waits for every record journaled before it: one batch, at once.
        async with asyncio.timeout(30):
            got = await writer.run_sync(store.get_response, "acme", "resp_07")
        assert got is not None and got["id"] == "resp_07"
        assert writes == [20]
        assert _ids(store) == [f"resp_{i:02d}" for i in range(20)]
        assert store.journal_lsn() == 20
    finally:
        await writer.close()
    assert _segments(path) == []  # everything is stored: the journal is empty
    store.close()


async def test_a_stopping_servers_flush_returns_once_what_was_written_is_in_duckdb(path) -> None:
    store = AsyncStore.open(path)  # its applier lingers 100 ms for company
    try:
        async with asyncio.timeout(30):
            await asyncio.gather(*(store.write_response(make_record(f"resp_{i}")) for i in range(3)))
            await store.flush()
        assert _ids(store.store) == ["resp_0", "resp_1", "resp_2"]
    finally:
        await store.close()


async def test_segments_are_deleted_once_their_records_are_stored(path) -> None:
    store = DuckDBStore(path)
    writer = JournaledWriter(store, journal_dir(path), apply_delay_s=3600, segment_bytes=1)  # a segment per append
    try:
        for i in range(3):
            await writer.submit(make_record(f"resp_{i}"))
        assert len(_segments(path)) == 3
        await writer.drain()
        assert _segments(path) == ["00000000000000000003.jsonl"]  # only the one being appended to is kept
        await writer.submit(make_record("resp_3"))
        await writer.drain()
        assert _segments(path) == ["00000000000000000004.jsonl"]
    finally:
        await writer.close()
        store.close()


async def test_a_record_the_store_refuses_after_journaling_is_kept_apart_and_fails_no_other(path) -> None:
    store = DuckDBStore(path)
    store.write_responses([make_record("resp_old")])
    writer = JournaledWriter(store, journal_dir(path), apply_delay_s=3600)
    try:
        records = [make_record("resp_a"), make_record("resp_old"), make_record("resp_b")]  # resp_old: a duplicate key
        async with asyncio.timeout(30):
            await asyncio.gather(*(writer.submit(r) for r in records))  # each is durable: none fails
            await writer.drain()
    finally:
        await writer.close()
    assert _ids(store) == ["resp_old", "resp_a", "resp_b"]
    rejected = read_rejected(path)
    assert [(lsn, decode_record(data).id) for lsn, data in rejected] == [(2, "resp_old")]
    store.close()


def read_rejected(path: str) -> list[tuple[int, bytes]]:
    with open(os.path.join(journal_dir(path), REJECTED), "rb") as f:
        return [(int(lsn), data.rstrip(b"\n")) for lsn, _, data in (line.partition(b" ") for line in f)]


def test_a_killed_writer_loses_no_acknowledged_record_and_replays_none_twice(path, tmp_path) -> None:
    """kill -9 after the submits returned and before DuckDB got them: the next open stores them, once."""
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        sys.path[:0] = {sys.path!r}
        from troupe.storage import DuckDBStore
        from troupe.storage.journal import JournaledWriter, journal_dir
        from tests.unit.test_store_contract import make_record

        async def main():
            store = DuckDBStore({path!r})
            store.write_responses([make_record("resp_before")])
            writer = JournaledWriter(store, journal_dir({path!r}), apply_delay_s=3600)
            await asyncio.gather(*(writer.submit(make_record(f"resp_{{i:02d}}")) for i in range(10)))
            print("ACKED", flush=True)
            await asyncio.sleep(3600)

        asyncio.run(main())
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=os.getcwd())
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ACKED"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    # A crash in the middle of the next append: a torn line after the acknowledged records.
    segment = os.path.join(journal_dir(path), _segments(path)[-1])
    with open(segment, "ab") as f:
        f.write(b'11 {"tenant": "acme", "respo')

    store = DuckDBStore(path)  # opening replays the journal
    expected = ["resp_before", *(f"resp_{i:02d}" for i in range(10))]
    assert sorted(_ids(store)) == sorted(expected)
    assert store.journal_lsn() == 10
    assert _segments(path) == []
    store.close()
    store = DuckDBStore(path)  # nothing is replayed twice
    assert sorted(_ids(store)) == sorted(expected)
    store.close()


def test_a_response_deleted_after_it_was_stored_is_not_replayed(path) -> None:
    """The store's position, not the records' presence, decides what a replay stores."""
    store = DuckDBStore(path)
    journal = Journal(journal_dir(path), next_lsn=1)
    journal.append([encode_record(make_record("resp_1")), encode_record(make_record("resp_2"))])
    store.write_responses([make_record("resp_1"), make_record("resp_2")], journal_lsn=2)
    assert store.delete_response("acme", "resp_1")
    store.close()  # a crash before the segment was retired

    store = DuckDBStore(path)
    assert _ids(store) == ["resp_2"]
    store.close()


def test_the_log_sequence_continues_across_reopening(path) -> None:
    store = DuckDBStore(path)
    store.write_responses([make_record("resp_1")], journal_lsn=7)
    store.write_responses([make_record("resp_2")], journal_lsn=5)  # never moves back
    store.close()
    store = DuckDBStore(path)
    assert store.journal_lsn() == 7
    store.close()


def test_a_journal_with_unstored_records_must_be_replayed_before_appending(path) -> None:
    Journal(journal_dir(path), next_lsn=1).append([encode_record(make_record("resp_1"))])
    with pytest.raises(StorageError, match="replay it first"):
        Journal(journal_dir(path), next_lsn=2)


def test_a_conversation_append_is_replayed_in_order(path) -> None:
    from .test_store_contract import conversation

    store = DuckDBStore(path)
    store.create_conversation("acme", conversation("conv_1"), [message("msg_seed", "user", "seed")])
    journal = Journal(journal_dir(path), next_lsn=1)
    journal.append([encode_record(make_record(f"resp_{i}", conversation="conv_1")) for i in range(3)])
    store.close()

    store = DuckDBStore(path)
    items = store.conversation_items("acme", "conv_1")
    assert items is not None
    assert [item["id"] for item in items] == [
        "msg_seed",
        *(iid for i in range(3) for iid in (f"msg_resp_{i}_in", f"msg_resp_{i}_out")),
    ]
    store.close()


# -- writer journals: a process beside the store's owner journals its own responses ----------


class _Unreachable:
    """The store behind a writer journal while it cannot be reached: nothing is ever stored."""

    def journal_lsn(self, journal: str = "") -> int:
        return 0

    def write_responses(self, records, *, journal_lsn=None, journal=""):
        raise AssertionError("not reached: the writer lingers")


def _writer_dirs(path: str) -> list[str]:
    return sorted(name for name in os.listdir(journal_dir(path)) if name.startswith(WRITER_PREFIX))


async def test_a_writer_journal_reaches_the_store_under_its_own_position(path) -> None:
    store = DuckDBStore(path)
    own = JournaledWriter(store, journal_dir(path), apply_delay_s=0)
    await own.submit(make_record("resp_own"))
    await own.drain()
    writer = JournaledWriter(store, journal_dir(path), name="w1", apply_delay_s=0)
    await asyncio.gather(*(writer.submit(make_record(f"resp_{i}")) for i in range(5)))
    await writer.drain()
    assert sorted(_ids(store)) == ["resp_0", "resp_1", "resp_2", "resp_3", "resp_4", "resp_own"]
    assert (store.journal_lsn(), store.journal_lsn("w1")) == (1, 5)  # each journal counts its own
    assert _writer_dirs(path) == ["w-w1"]
    assert adopt_orphans(store, journal_dir(path)) == 0  # its writer lives: left alone
    assert _writer_dirs(path) == ["w-w1"]
    await writer.close()  # stored everything: an empty journal, no longer locked
    assert adopt_orphans(store, journal_dir(path)) == 0
    assert _writer_dirs(path) == []
    assert store.journal_lsn("w1") == 0  # forgotten
    await own.close()
    store.close()


def test_a_killed_writers_journal_is_adopted_once_and_only_after_it_died(path) -> None:
    """kill -9 of a process whose acknowledged responses never reached the store's owner."""
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        sys.path[:0] = {sys.path!r}
        from troupe.storage.journal import JournaledWriter, journal_dir
        from tests.unit.test_store_contract import make_record
        from tests.unit.test_journal import _Unreachable

        async def main():
            writer = JournaledWriter(_Unreachable(), journal_dir({path!r}), name="crash", apply_delay_s=3600)
            await asyncio.gather(*(writer.submit(make_record(f"resp_{{i:02d}}")) for i in range(10)))
            print("ACKED", flush=True)
            await asyncio.sleep(3600)

        asyncio.run(main())
        """
    )
    store = DuckDBStore(path)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=os.getcwd())
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ACKED"
        assert adopt_orphans(store, journal_dir(path)) == 0  # alive: its lock is held
        assert _ids(store) == []
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert adopt_orphans(store, journal_dir(path)) == 10
    assert sorted(_ids(store)) == [f"resp_{i:02d}" for i in range(10)]
    assert _writer_dirs(path) == []
    assert adopt_orphans(store, journal_dir(path)) == 0  # nothing twice
    assert len(_ids(store)) == 10
    store.close()


def test_opening_the_file_adopts_the_journals_of_writers_that_are_gone(path) -> None:
    DuckDBStore(path).close()
    directory = writer_dir(journal_dir(path), "gone")
    journal = Journal(directory, next_lsn=1)
    journal.append([encode_record(make_record("resp_a")), encode_record(make_record("resp_b"))])
    journal.close(delete=False)  # no lock held: its writer is gone
    store = DuckDBStore(path)
    assert sorted(_ids(store)) == ["resp_a", "resp_b"]
    assert _writer_dirs(path) == []
    store.close()


class _GoneAway:
    """The store behind a writer journal, gone for good (the server is going down)."""

    def journal_lsn(self, journal: str = "") -> int:
        return 0

    def write_responses(self, records, *, journal_lsn=None, journal=""):
        raise WriterStopped("the storage actor is gone")


async def test_a_writer_that_cannot_ship_keeps_its_journal_for_the_next_open(path) -> None:
    writer = JournaledWriter(_GoneAway(), journal_dir(path), name="late", apply_delay_s=0)
    await asyncio.gather(*(writer.submit(make_record(f"resp_{i}")) for i in range(3)))
    await writer.close()  # returns: nothing waits for a store that is gone
    store = DuckDBStore(path)  # the next open adopts the journal
    assert sorted(_ids(store)) == ["resp_0", "resp_1", "resp_2"]
    assert _writer_dirs(path) == []
    store.close()
