"""Group commit: many concurrent ``submit``s, few transactions.

Every finished response must be durable before the client hears it is done, but
one transaction per response caps throughput at the commit rate. The writer
queues records and commits them in batches: while one batch is being written
(on the executor thread), new records wait in the queue and form the next batch.
An idle writer holds a lone record back for at most ``max_delay_s``, in case
company arrives.

A record the store refuses (a value it cannot hold, a duplicate id) fails only
its own submitter: a batch whose ``write`` fails wrote nothing (the store's
all-or-none contract), so the writer splits it in two and writes each half on
its own, again and again, until every failing record is alone. The good records
of the batch are all committed, in submission order, and none is dropped. One
bad record in a batch of ``n`` costs about ``2 * log2(n)`` extra writes; a store
that refuses everything (closed, disk full) costs ``2 * n - 1``, each failing fast.

All store access goes through one executor thread (DuckDB takes one writer, and
the store is not built for concurrency); :meth:`GroupCommitWriter.run_sync`
gives reads the same thread, so a read issued after ``submit`` returned sees
the record.

Example::

    store = DuckDBStore("troupe.duckdb")
    writer = GroupCommitWriter(store.write_responses)
    await writer.submit(record)                       # durable from here on
    response = await writer.run_sync(store.get_response, tenant, record.id)
    await writer.close()
    store.close()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from .base import StorageError

__all__ = ["GroupCommitWriter", "WriterStopped"]

T = TypeVar("T")
R = TypeVar("R")


class WriterStopped(StorageError):
    """The writer stopped (closed, or its task cancelled at loop teardown) before writing the record."""


class FlusherTask:
    """The part of a writer's life its flusher task has: started on the first record, woken by
    ``_wakeup``, writing what is queued until ``_closing`` (:class:`GroupCommitWriter`,
    :class:`~troupe.storage.journal.JournaledWriter`)."""

    _wakeup: asyncio.Event
    _closing: bool
    _flusher: asyncio.Task[None] | None

    async def _stop_flusher(self) -> None:
        """Have the flusher write everything queued and end; return once it has (idempotent)."""
        self._closing = True
        self._wakeup.set()
        if self._flusher is not None:
            await self._flusher


class GroupCommitWriter(FlusherTask, Generic[R]):
    """Batches record writes (``ResponseRecord`` s, usually); bound to the event loop of its first ``submit``.

    Args:
        write: stores a batch atomically (all or nothing), raising StorageError
            on failure (e.g. ``store.write_responses``); called on the executor
            thread. A failed batch is written again in parts (see the module
            docstring), so ``write`` must leave nothing behind when it fails.
        max_batch: the most records per ``write`` call.
        max_delay_s: the most an idle writer waits for more records before
            writing (0: write at once; batches still form while a write runs).
        linger: wait up to ``max_delay_s`` before every batch, not only when idle:
            fewer, bigger batches for a writer whose callers do not wait for it
            (the response journal's). :meth:`hurry` skips the wait.
        executor: where ``write`` and :meth:`run_sync` calls run; default a
            dedicated single-thread executor, shut down by :meth:`close`.
        on_commit: told of every ``write`` call that succeeded: its records and its seconds
            (metrics; called on the event loop).
    """

    def __init__(
        self,
        write: Callable[[list[R]], None],
        *,
        max_batch: int = 256,
        max_delay_s: float = 0.002,
        linger: bool = False,
        executor: concurrent.futures.Executor | None = None,
        on_commit: Callable[[int, float], None] | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if max_delay_s < 0:
            raise ValueError(f"max_delay_s must be >= 0, got {max_delay_s}")
        self._write = write
        self._max_batch = max_batch
        self._max_delay_s = max_delay_s
        self._linger = linger
        self._owns_executor = executor is None
        self._executor = executor or concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="troupe-store")
        self._queue: list[tuple[R, asyncio.Future[None]]] = []
        self._inflight: list[tuple[R, asyncio.Future[None]]] = []
        # Set by every submit and by close: wakes an idle flusher, and lets one
        # waiting for company recheck the batch size.
        self._wakeup = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._closing = False
        self._hurry = False
        self._writes = 0
        self._on_commit = on_commit

    @property
    def pending(self) -> int:
        """Records queued and not yet handed to ``write`` (a batch being written, or split, is not counted)."""
        return len(self._queue)

    @property
    def executor(self) -> concurrent.futures.Executor:
        """The thread store calls run on (another writer of the same store may share it)."""
        return self._executor

    @property
    def write_calls(self) -> int:
        """How many times ``write`` has been called (successfully or not; retried parts of a failed batch count)."""
        return self._writes

    async def submit(self, record: R) -> None:
        """Queue ``record`` and return once the batch holding it is committed.

        Cancelling the caller does not withdraw the record: it is written anyway.

        Raises:
            StorageError: this record could not be stored (nothing of it was
                written; the other records of its batch are not affected), or
                the writer is closed.
        """
        if self._closing:
            raise WriterStopped("the group commit writer is closed")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((record, future))
        self._wakeup.set()
        if self._flusher is None or self._flusher.done():  # first use, or a flusher killed by a cancel
            self._flusher = asyncio.create_task(self._run(), name="troupe-group-commit")
        # Awaiting the future itself: cancelling this caller cancels only its own future.
        await future

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the writer's executor thread (for reads and other store calls).

        Returns:
            What ``fn`` returned.

        Raises:
            Whatever ``fn`` raised.
        """
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def hurry(self) -> None:
        """Write what is queued now, without waiting for company (someone waits for it)."""
        self._hurry = True
        self._wakeup.set()

    async def close(self) -> None:
        """Write everything queued, then stop (idempotent); later ``submit`` calls raise StorageError."""
        await self._stop_flusher()
        if self._owns_executor:
            # Off the loop: shutdown waits for run_sync calls still running.
            await asyncio.to_thread(self._executor.shutdown, wait=True)

    async def _run(self) -> None:
        """The flusher: started by a first record, one batch at a time until closed and drained."""
        try:
            while True:
                await self._wait_for_company()
                # What queued while a batch was being written has waited already: no delay
                # (unless lingering).
                wrote = False
                while self._queue and not (wrote and self._linger and not self._hurry):
                    await self._write_batch()
                    wrote = True
                if self._queue:
                    continue  # lingering: wait for company again
                if wrote:
                    self._hurry = False  # a hurry lasts until the queue is written
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
        finally:
            # Only reached with records left if the task was cancelled (loop teardown):
            # fail them rather than leave their submitters waiting forever.
            stranded = self._inflight + self._queue
            self._inflight, self._queue = [], []
            for _, future in stranded:
                if not future.done():
                    future.set_exception(WriterStopped("the group commit writer stopped before writing"))

    async def _wait_for_company(self) -> None:
        """Give a record that found the writer idle (or lingering) up to ``max_delay_s`` to be joined by others."""
        if self._max_delay_s <= 0:
            return
        try:
            async with asyncio.timeout(self._max_delay_s):
                while len(self._queue) < self._max_batch and not (self._closing or self._hurry):
                    self._wakeup.clear()
                    await self._wakeup.wait()
        except TimeoutError:
            pass

    async def _write_batch(self) -> None:
        """Write the next batch; on failure, split it until each failing record is alone."""
        self._inflight, self._queue = self._queue[: self._max_batch], self._queue[self._max_batch :]
        parts = [self._inflight]  # a stack: the next part to write is last
        while parts:
            part = parts.pop()
            error = await self._try_write([record for record, _ in part])
            if error is not None and len(part) > 1:
                # Nothing of the part was written: write each half on its own, the first half first.
                middle = len(part) // 2
                parts += [part[middle:], part[:middle]]
                continue
            for _, future in part:
                if future.done():
                    continue  # its submitter was cancelled; the record was written (or failed) anyway
                if error is None:
                    future.set_result(None)
                else:
                    future.set_exception(error)
        self._inflight = []

    async def _try_write(self, records: list[R]) -> StorageError | None:
        """One ``write`` call on the executor thread; the error it raised, as a StorageError, or None."""
        self._writes += 1
        begun = time.perf_counter()
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._write, records)
            if self._on_commit is not None:
                self._on_commit(len(records), time.perf_counter() - begun)
        except Exception as exc:
            if isinstance(exc, StorageError):
                return exc
            error = StorageError(f"{type(exc).__name__}: {exc}")
            error.__cause__ = exc
            return error
        return None
