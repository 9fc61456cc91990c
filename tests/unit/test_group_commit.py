"""GroupCommitWriter: batching, durability before return, failures per record, flush on close.

Deterministic: the recording ``write`` blocks on a threading.Event the test
releases, and the test waits for "a write has started" on a semaphore, never on
the clock.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from troupe.storage import DuckDBStore, GroupCommitWriter, ResponseRecord, StorageError
from troupe.storage.group_commit import WriterStopped

from .test_store_contract import make_record

WAIT_S = 10  # a generous bound for "this happens", never a pause


class RecordingWrite:
    """A ``write`` that records its batches and blocks until released.

    Like a store, it is all or nothing: a batch holding one of the ``bad`` ids
    (records the store refuses) fails whole, as does every call while ``broken``
    is set (a store that refuses everything) and the calls numbered in ``fail_calls``.
    """

    def __init__(self, *, fail_calls: dict[int, Exception] | None = None, bad: set[str] = frozenset()) -> None:
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)
        self.calls: list[list[str]] = []
        self.committed: list[str] = []
        self.threads: set[int] = set()
        self.fail_calls = fail_calls or {}
        self.bad = bad
        self.broken: StorageError | None = None

    def __call__(self, records: list[ResponseRecord]) -> None:
        index = len(self.calls)
        self.calls.append([r.id for r in records])
        self.threads.add(threading.get_ident())
        self.entered.release()
        assert self.release.wait(WAIT_S), "the test never released the write"
        if index in self.fail_calls:
            raise self.fail_calls[index]
        if self.broken is not None:
            raise self.broken
        refused = [r.id for r in records if r.id in self.bad]
        if refused:
            raise StorageError(f"cannot store {refused[0]}")
        self.committed.extend(r.id for r in records)

    async def started(self) -> None:
        """Wait until one more call has entered ``write``."""
        assert await asyncio.to_thread(self.entered.acquire, True, WAIT_S)


async def until(predicate) -> None:
    """Let other tasks run until ``predicate()`` holds (bounded by steps, not by time)."""
    for _ in range(1000):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never became true")


async def submit_and_check(writer: GroupCommitWriter, write: RecordingWrite, rid: str) -> str:
    await writer.submit(make_record(rid))
    # Durable before return: its batch's write has finished.
    assert rid in write.committed
    return rid


async def test_concurrent_submits_are_batched() -> None:
    write = RecordingWrite()
    writer = GroupCommitWriter(write, max_delay_s=0)
    first = asyncio.create_task(submit_and_check(writer, write, "resp_0"))
    await write.started()  # the first record is being written alone
    rest = [asyncio.create_task(submit_and_check(writer, write, f"resp_{i}")) for i in range(1, 11)]
    await until(lambda: writer.pending == 10)
    assert not first.done() and not any(t.done() for t in rest)  # nothing returns before its commit
    write.release.set()
    assert await asyncio.gather(first, *rest) == [f"resp_{i}" for i in range(11)]
    assert write.calls == [["resp_0"], [f"resp_{i}" for i in range(1, 11)]]
    assert writer.write_calls == 2 < 11
    await writer.close()


async def test_batches_are_capped_at_max_batch() -> None:
    write = RecordingWrite()
    writer = GroupCommitWriter(write, max_batch=4, max_delay_s=0)
    first = asyncio.create_task(writer.submit(make_record("resp_0")))
    await write.started()
    rest = [asyncio.create_task(writer.submit(make_record(f"resp_{i}"))) for i in range(1, 11)]
    await until(lambda: writer.pending == 10)
    write.release.set()
    await asyncio.gather(first, *rest)
    assert [len(call) for call in write.calls] == [1, 4, 4, 2]
    assert write.committed == [f"resp_{i}" for i in range(11)]  # submission order is kept
    await writer.close()


async def _one_batch_of(writer: GroupCommitWriter, write: RecordingWrite, ids: list[str]) -> list[object]:
    """Submit ``ids`` so that they form one batch (behind a first record being written); the outcomes."""
    first = asyncio.create_task(writer.submit(make_record("resp_first")))
    await write.started()
    tasks = [asyncio.create_task(writer.submit(make_record(rid))) for rid in ids]
    await until(lambda: writer.pending == len(ids))
    write.release.set()
    await first
    async with asyncio.timeout(WAIT_S):
        return await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.parametrize("bad", [{"resp_037"}, {"resp_000", "resp_099"}, {"resp_010", "resp_011", "resp_012"}])
async def test_a_bad_record_fails_alone_and_every_good_one_of_its_batch_commits(bad: set[str]) -> None:
    ids = [f"resp_{i:03d}" for i in range(100)]
    write = RecordingWrite(bad=bad)
    writer = GroupCommitWriter(write, max_delay_s=0)
    results = await _one_batch_of(writer, write, ids)
    assert write.calls[1] == ids  # they were one batch, and that batch failed whole
    for rid, result in zip(ids, results, strict=True):
        if rid in bad:
            assert isinstance(result, StorageError) and rid in str(result)
        else:
            assert result is None, f"{rid} failed: {result}"
    # Every good record committed, once, in submission order: nothing dropped, nothing doubled.
    assert write.committed == ["resp_first", *(rid for rid in ids if rid not in bad)]
    # Found by halving: far fewer writes than one per record.
    assert writer.write_calls <= 2 + len(bad) * 2 * 7
    await submit_and_check(writer, write, "resp_next")  # and the writer goes on
    await writer.close()


async def test_a_store_that_refuses_everything_fails_every_submitter_then_recovers() -> None:
    write = RecordingWrite()
    write.broken = StorageError("disk full")
    writer = GroupCommitWriter(write, max_delay_s=0)
    ids = [f"resp_{i}" for i in range(1, 9)]
    first = asyncio.create_task(writer.submit(make_record("resp_0")))
    await write.started()
    tasks = [asyncio.create_task(writer.submit(make_record(rid))) for rid in ids]
    await until(lambda: writer.pending == len(ids))
    write.release.set()
    results = await asyncio.gather(first, *tasks, return_exceptions=True)
    assert all(r is write.broken for r in results)
    assert write.committed == []
    assert writer.write_calls == 1 + (2 * len(ids) - 1)  # every part tried once, down to single records
    write.broken = None
    await submit_and_check(writer, write, "resp_9")
    assert write.committed == ["resp_9"]
    await writer.close()


async def test_a_cancelled_submitter_of_a_split_batch_still_gets_its_record_written() -> None:
    write = RecordingWrite(bad={"resp_2"})
    writer = GroupCommitWriter(write, max_delay_s=0)
    first = asyncio.create_task(writer.submit(make_record("resp_0")))
    await write.started()
    tasks = [asyncio.create_task(writer.submit(make_record(f"resp_{i}"))) for i in (1, 2, 3)]
    await until(lambda: writer.pending == 3)
    tasks[0].cancel()
    write.release.set()
    results = await asyncio.gather(first, *tasks, return_exceptions=True)
    assert isinstance(results[1], asyncio.CancelledError) and isinstance(results[2], StorageError)
    assert results[3] is None
    assert write.committed == ["resp_0", "resp_1", "resp_3"]
    await writer.close()


async def test_an_unexpected_write_error_becomes_a_storage_error() -> None:
    write = RecordingWrite(fail_calls={0: RuntimeError("bug")})
    write.release.set()
    writer = GroupCommitWriter(write, max_delay_s=0)
    with pytest.raises(StorageError) as info:
        await writer.submit(make_record("resp_0"))
    assert isinstance(info.value.__cause__, RuntimeError)
    await writer.close()


async def test_close_flushes_without_waiting_for_company() -> None:
    write = RecordingWrite()
    write.release.set()
    # A lone record would wait up to an hour for company; close must not.
    writer = GroupCommitWriter(write, max_delay_s=3600)
    tasks = [asyncio.create_task(writer.submit(make_record(f"resp_{i}"))) for i in range(3)]
    await until(lambda: writer.pending == 3)
    async with asyncio.timeout(WAIT_S):
        await writer.close()
    assert all(t.done() and t.exception() is None for t in tasks)
    assert write.calls == [["resp_0", "resp_1", "resp_2"]]
    with pytest.raises(StorageError, match="closed"):
        await writer.submit(make_record("resp_late"))
    await writer.close()  # idempotent


async def test_a_full_batch_does_not_wait_for_the_delay() -> None:
    write = RecordingWrite()
    write.release.set()
    writer = GroupCommitWriter(write, max_batch=3, max_delay_s=3600)
    async with asyncio.timeout(WAIT_S):
        await asyncio.gather(*(writer.submit(make_record(f"resp_{i}")) for i in range(3)))
    assert write.calls == [["resp_0", "resp_1", "resp_2"]]
    await writer.close()


async def test_a_lingering_writer_waits_for_company_before_every_batch_until_hurried() -> None:
    """``linger``: records that queued during a write wait for more, in one batch; ``hurry`` ends the wait."""
    write = RecordingWrite()
    writer = GroupCommitWriter(write, max_batch=3, linger=True, max_delay_s=3600)
    first = [asyncio.create_task(writer.submit(make_record(f"resp_{i}"))) for i in range(3)]  # a full batch
    await write.started()
    later = [asyncio.create_task(writer.submit(make_record(f"resp_{i}"))) for i in (3, 4)]
    await until(lambda: writer.pending == 2)
    write.release.set()
    await asyncio.gather(*first)
    for _ in range(100):
        await asyncio.sleep(0)
    assert writer.pending == 2 and write.calls == [["resp_0", "resp_1", "resp_2"]]  # not written on their own
    writer.hurry()
    async with asyncio.timeout(WAIT_S):
        await asyncio.gather(*later)
    assert write.calls[1] == ["resp_3", "resp_4"]
    await writer.close()


async def test_a_stopped_writer_fails_with_writer_stopped() -> None:
    write = RecordingWrite()
    writer = GroupCommitWriter(write)
    await writer.close()
    with pytest.raises(WriterStopped):
        await writer.submit(make_record("resp_late"))


async def test_a_lone_record_waits_at_most_max_delay() -> None:
    write = RecordingWrite()
    write.release.set()
    writer = GroupCommitWriter(write, max_delay_s=0.001)
    async with asyncio.timeout(WAIT_S):
        await submit_and_check(writer, write, "resp_0")
    await writer.close()


async def test_a_cancelled_submitter_still_gets_its_record_written() -> None:
    write = RecordingWrite()
    writer = GroupCommitWriter(write, max_delay_s=0)
    task = asyncio.create_task(writer.submit(make_record("resp_0")))
    await write.started()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    write.release.set()
    await submit_and_check(writer, write, "resp_1")
    assert write.committed == ["resp_0", "resp_1"]
    await writer.close()


async def test_run_sync_uses_the_writer_thread() -> None:
    write = RecordingWrite()
    write.release.set()
    writer = GroupCommitWriter(write, max_delay_s=0)
    await writer.submit(make_record("resp_0"))
    assert await writer.run_sync(threading.get_ident) in write.threads
    assert await writer.run_sync(divmod, 7, 2) == (3, 1)
    with pytest.raises(ZeroDivisionError):
        await writer.run_sync(divmod, 1, 0)
    await writer.close()


async def test_with_a_real_store(tmp_path) -> None:
    store = DuckDBStore(tmp_path / "t.duckdb")
    writer = GroupCommitWriter(store.write_responses)
    records = [make_record(f"resp_{i:02d}", created_at=1_760_000_000 + i) for i in range(50)]
    await asyncio.gather(*(writer.submit(r) for r in records))
    assert writer.write_calls < len(records)
    page = await writer.run_sync(lambda: store.list_responses("acme", limit=100, order="asc"))
    assert [r["id"] for r in page.data] == [r.id for r in records]
    # A duplicate fails alone; the record batched with it is stored.
    results = await asyncio.gather(
        writer.submit(make_record("resp_new")), writer.submit(make_record("resp_00")), return_exceptions=True
    )
    assert results[0] is None and isinstance(results[1], StorageError)
    assert await writer.run_sync(store.get_response, "acme", "resp_new") is not None
    await writer.close()
    store.close()


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError):
        GroupCommitWriter(RecordingWrite(), max_batch=0)
    with pytest.raises(ValueError):
        GroupCommitWriter(RecordingWrite(), max_delay_s=-1)
