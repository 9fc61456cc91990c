"""The response journal: finished responses are durable once appended to a file, DuckDB follows.

Storing a finished response in DuckDB costs about 4–5 ms of CPU per transaction, however few
rows it holds (a statement costs ~0.7 ms in DuckDB's Python API, and a batch is five of them),
where appending a line to a file and ``fdatasync``-ing it costs ~0.2 ms. So a response is made
durable in the journal, and the client hears it is done; the journal's records reach DuckDB
in the background, many per transaction.

* :class:`Journal` is the files: a directory of segments, ``<first lsn>.jsonl``, each line
  ``<lsn> <record JSON>``. ``lsn`` (log sequence number) counts records, 1, 2, … across the
  life of the database. Appends go to the newest segment, which is replaced by a new one past
  :data:`SEGMENT_BYTES`; a segment is deleted once every record in it is in DuckDB.
* DuckDB keeps, in the same transaction as each batch of records, the highest lsn it holds
  (``journal_positions``). So after a crash, :func:`replay` stores exactly the records after
  it, no record twice and none deleted since; ``DuckDBStore`` runs it whenever it opens a
  file, so every reader of the file (``troupe sql`` too) sees every durable response.
* :class:`JournaledWriter` is the async front: ``submit`` appends (group-committed: many
  records per ``fdatasync``) and returns; batches go on to DuckDB through a
  :class:`~troupe.storage.group_commit.GroupCommitWriter` that waits up to ``apply_delay_s``
  for company. Any other store call (a read, a delete) first waits for every journaled record
  to be in DuckDB, so it sees them all, in order.
* **Writer journals.** A process on the same machine as the store's owner can keep a journal
  of its own, ``w-<name>/`` inside the journal directory, with its own lsns and its own
  position in DuckDB: its responses are durable without a round trip to the owner, and
  reach it in batches (``troupe.runtime.ray.storage_actor.JournalingStoreClient``). The writer
  holds an ``flock`` on the journal's lock file while it lives; :func:`adopt_orphans` stores
  and deletes the journals whose lock is free, whether their writer exited or was killed.

A record that cannot be encoded (not JSON, or a string that is not UTF-8) fails its own ``submit``. One that DuckDB refuses
after it was journaled (the client was told it is stored) cannot fail its client any more: it
is written to ``rejected.jsonl`` in the journal's directory and logged as an error, and the
records beside it are stored as usual.

A crash in the middle of an append leaves a torn last line, which :func:`read` ignores: its
record's ``submit`` had not returned.

The journal's file format, its replay and the writer that fills it change together.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import functools
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import fields
from typing import Any, Protocol, TypeVar

from .base import ResponseRecord, StepTrace, StorageError
from .group_commit import FlusherTask, GroupCommitWriter, WriterStopped

__all__ = [
    "Journal",
    "JournaledWriter",
    "JournalStore",
    "ReplayStore",
    "adopt_orphans",
    "decode_record",
    "encode_record",
    "journal_dir",
    "read",
    "replay",
    "replay_all",
    "writer_dir",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

SEGMENT_BYTES = 4 << 20
"""A segment grows to about this size before the next append starts a new one."""
REPLAY_BATCH = 256
"""Records per DuckDB transaction when a journal is replayed."""
REJECTED = "rejected.jsonl"
"""Records DuckDB refused after they were journaled, one ``<lsn> <record JSON>`` per line."""
WRITER_PREFIX = "w-"
"""A writer journal's directory, inside the journal directory: ``w-<name>``."""
STAGING_PREFIX = ".new-"
"""A writer journal's directory while it is being made (not yet locked); never holds a record."""
LOCK_FILE = "lock"
"""In a writer journal's directory: locked (``flock``) by its writer while it lives."""

_TRACE_FIELDS = tuple(f.name for f in fields(StepTrace))


def journal_dir(database_path: str) -> str:
    """Where the journal of the DuckDB file at ``database_path`` lives: beside it."""
    return database_path + ".journal"


def encode_record(record: ResponseRecord) -> bytes:
    """``record`` as one line of JSON (no newline); StorageError if JSON cannot hold it."""
    value = {
        "tenant": record.tenant,
        "response": record.response,
        "input_items": record.input_items,
        "thread_id": record.thread_id,
        "started_at": record.started_at,
        "ended_at": record.ended_at,
        "ttft_s": record.ttft_s,
        "traces": [[getattr(t, name) for name in _TRACE_FIELDS] for t in record.traces],
        "append_to_conversation": record.append_to_conversation,
        "events": record.events,
    }
    try:
        # Not ASCII-escaped: encoding to UTF-8 refuses a lone surrogate here, before the record
        # is acknowledged, as DuckDB would refuse it later.
        return json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise StorageError(f"not storable as JSON: {exc}") from exc


def decode_record(data: bytes) -> ResponseRecord:
    """The inverse of :func:`encode_record`."""
    value = json.loads(data)
    # Not strict: a journal written before ``detail`` was added has a field fewer (the last).
    value["traces"] = [StepTrace(**dict(zip(_TRACE_FIELDS, t, strict=False))) for t in value["traces"]]
    return ResponseRecord(**value)


def _segments(directory: str) -> list[tuple[int, str]]:
    """The segment files of ``directory`` as ``(first lsn, path)``, oldest first."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(
        (int(name.removesuffix(".jsonl")), os.path.join(directory, name))
        for name in names
        if name.endswith(".jsonl") and name.removesuffix(".jsonl").isdigit()
    )


def read(directory: str, after: int = 0) -> Iterator[tuple[int, bytes]]:
    """The journal's records with an lsn above ``after``, in order, as ``(lsn, record JSON)``.

    A last line without its newline (an append cut short by a crash) is not a record. A line
    that cannot be parsed anywhere else is skipped with a warning.
    """
    for _, path in _segments(directory):
        with open(path, "rb") as f:
            for line in f:
                if not line.endswith(b"\n"):
                    logger.warning("journal %s ends in a torn record (%d bytes): ignored", path, len(line))
                    break
                head, _, data = line.partition(b" ")
                if not head.isdigit() or not data.strip():
                    logger.warning("journal %s holds a malformed line: skipped", path)
                    continue
                lsn = int(head)
                if lsn > after:
                    yield lsn, data.rstrip(b"\n")


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class JournalStore(Protocol):
    """What the journal needs of the store behind it (``DuckDBStore``, or the storage actor)."""

    def write_responses(
        self, records: Sequence[ResponseRecord], *, journal_lsn: int | None = None, journal: str = ""
    ) -> None: ...
    def journal_lsn(self, journal: str = "") -> int: ...


class ReplayStore(JournalStore, Protocol):
    """What :func:`replay_all` needs besides: forgetting a writer journal it deleted."""

    def forget_journal(self, journal: str) -> None: ...


def reject(directory: str, lsn: int, data: bytes, error: BaseException) -> None:
    """Keep a record that DuckDB refused after it was journaled, and say so loudly."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, REJECTED), "ab") as f:
        f.write(b"%d %s\n" % (lsn, data))
        f.flush()
        os.fsync(f.fileno())
    logger.error("journaled record %d was refused by the store (%s); kept in %s", lsn, error, REJECTED)


def replay(store: JournalStore, directory: str, *, name: str = "", rejected_dir: str | None = None) -> int:
    """Store the records of the journal ``name`` at ``directory`` that ``store`` does not hold
    yet, then delete its segments. Returns how many records were replayed (refused ones included).

    A batch that fails is stored one record at a time; a record that still fails goes to
    :data:`REJECTED` in ``rejected_dir`` (default: ``directory``).
    """
    applied = store.journal_lsn(name)
    pending = list(read(directory, after=applied))
    for start in range(0, len(pending), REPLAY_BATCH):
        batch = pending[start : start + REPLAY_BATCH]
        records = [decode_record(data) for _, data in batch]
        try:
            store.write_responses(records, journal_lsn=batch[-1][0], journal=name)
        except StorageError:
            for (lsn, data), record in zip(batch, records, strict=True):
                try:
                    store.write_responses([record], journal_lsn=lsn, journal=name)
                except StorageError as exc:
                    reject(rejected_dir or directory, lsn, data, exc)
    if pending:
        logger.warning("replayed %d journaled responses into the store", len(pending))
    for _, path in _segments(directory):
        os.unlink(path)
    return len(pending)


def writer_dir(directory: str, name: str) -> str:
    """The directory of the writer journal ``name`` inside the journal directory ``directory``."""
    return os.path.join(directory, WRITER_PREFIX + name)


def _create_writer_dir(directory: str, name: str) -> tuple[str, int]:
    """A new writer journal's directory, and the open lock file that marks its writer alive.

    The directory is made under a temporary name and renamed once it is locked, so that
    :func:`adopt_orphans` never sees it unlocked while its writer lives.
    """
    os.makedirs(directory, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=directory)
    fd = os.open(os.path.join(staging, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    path = writer_dir(directory, name)
    os.rename(staging, path)
    _fsync_dir(directory)
    return path, fd


def adopt_orphans(store: ReplayStore, directory: str) -> int:
    """Store what the writer journals in ``directory`` hold whose writers are gone, and delete them.

    A writer holds an exclusive ``flock`` on its journal's lock file while it lives; the
    kernel releases it when the process ends, however it ends. So a journal whose lock can
    be taken belongs to a writer that exited (cleanly, with nothing left to store, or in a
    crash, with records its clients were told are stored). Returns how many records were
    replayed.
    """
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return 0
    replayed = 0
    for entry in sorted(names):
        if not entry.startswith(WRITER_PREFIX):
            continue  # a staging directory holds no record (and may be locked any moment)
        path = os.path.join(directory, entry)
        try:
            fd = os.open(os.path.join(path, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
        except (FileNotFoundError, NotADirectoryError):
            continue  # removed meanwhile, or not ours
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its writer is alive
            name = entry.removeprefix(WRITER_PREFIX)
            replayed += replay(store, path, name=name, rejected_dir=directory)
            store.forget_journal(name)
            shutil.rmtree(path, ignore_errors=True)
        finally:
            os.close(fd)
    return replayed


def replay_all(store: ReplayStore, directory: str) -> int:
    """:func:`replay` the journal at ``directory``, then :func:`adopt_orphans` of its writer journals."""
    return replay(store, directory) + adopt_orphans(store, directory)


class Journal:
    """The segment files of one journal, appended to from one thread at a time.

    Args:
        directory: created if missing; must hold no segment (:func:`replay` empties it).
        next_lsn: the lsn of the first record appended (one past what the store holds).
        segment_bytes: an append to a segment this big or bigger starts a new one.
        lock_fd: a writer journal's locked lock file (see :func:`adopt_orphans`), released by
            :meth:`close`.
    """

    def __init__(
        self, directory: str, next_lsn: int, *, segment_bytes: int = SEGMENT_BYTES, lock_fd: int | None = None
    ) -> None:
        os.makedirs(directory, exist_ok=True)
        if _segments(directory):
            raise StorageError(f"the journal {directory!r} holds records not yet stored: replay it first")
        self.directory = directory
        self._next = next_lsn
        self._segment_bytes = segment_bytes
        self._lock = threading.Lock()
        self._segments: list[tuple[int, str]] = []  # (first lsn, path), oldest first; the last is open
        self._fd = -1
        self._size = 0
        self._lock_fd = lock_fd

    def append(self, payloads: Sequence[bytes]) -> int:
        """Append one record per payload and ``fdatasync``; returns the lsn of the first one."""
        with self._lock:
            if self._fd < 0 or self._size >= self._segment_bytes:
                self._start_segment()
            first = self._next
            data = b"".join(b"%d %s\n" % (first + i, p) for i, p in enumerate(payloads))
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fdatasync(self._fd)
            self._size += len(data)
            self._next += len(payloads)
            return first

    def _start_segment(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        path = os.path.join(self.directory, f"{self._next:020d}.jsonl")
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        _fsync_dir(self.directory)  # the new file's name is durable before a record in it is
        self._segments.append((self._next, path))
        self._size = 0

    def retire(self, applied: int) -> None:
        """Delete the segments, but the one being appended to, whose every record has an lsn ≤ ``applied``."""
        with self._lock:
            while len(self._segments) > 1 and self._segments[1][0] - 1 <= applied:
                os.unlink(self._segments.pop(0)[1])

    def close(self, *, delete: bool = True) -> None:
        """Stop appending; delete every segment (call once every record is stored) unless
        ``delete`` is False; release a writer journal's lock."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            if delete:
                for _, path in self._segments:
                    os.unlink(path)
                self._segments = []
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # releases the flock: the journal is adoptable now
                self._lock_fd = None


class JournaledWriter(FlusherTask):
    """Responses durable in a :class:`Journal`, stored in DuckDB behind; bound to one event loop.

    The same interface as :class:`~troupe.storage.group_commit.GroupCommitWriter` (``submit``,
    ``run_sync``, ``close``), which ``AsyncStore`` holds either of.

    Args:
        store: the store the records go to, e.g. ``DuckDBStore`` (replayed already: see
            :func:`replay`), or the storage actor (for a writer journal).
        directory: the journal's directory (beside the DuckDB file).
        name: ``""`` (the default): the journal at ``directory`` itself, whose store owns the
            DuckDB file. Otherwise a new writer journal of that name (unique per process)
            inside ``directory``, for a process that finishes responses on the storage actor's
            node: its records are durable there, locally, and reach the store behind;
            :func:`adopt_orphans` stores what is left in it once the process is gone.
        apply_delay_s: the most a journaled record waits for company before it goes to the store.
        max_batch: the most records per store transaction.
        segment_bytes: see :class:`Journal`.
        on_commit: told of every batch committed, with its stage (``"journal"``: appended
            and synced; ``"apply"``: written to the store), its records and its seconds
            (metrics; called on the event loop).
    """

    def __init__(
        self,
        store: JournalStore,
        directory: str,
        *,
        name: str = "",
        apply_delay_s: float = 0.1,
        max_batch: int = 256,
        segment_bytes: int = SEGMENT_BYTES,
        on_commit: Callable[[str, int, float], None] | None = None,
    ) -> None:
        self._store = store
        self._on_commit = on_commit
        self._name = name
        self._rejected_dir = directory
        path, lock_fd = _create_writer_dir(directory, name) if name else (directory, None)
        self._journal = Journal(path, store.journal_lsn(name) + 1, segment_bytes=segment_bytes, lock_fd=lock_fd)
        self._applier: GroupCommitWriter[tuple[int, bytes, ResponseRecord]] = GroupCommitWriter(
            self._apply, max_batch=max_batch, max_delay_s=apply_delay_s, linger=True,
            on_commit=None if on_commit is None else functools.partial(on_commit, "apply"),
        )
        self._appends = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="troupe-journal")
        self._queue: list[tuple[bytes, ResponseRecord, asyncio.Future[None]]] = []
        self._wakeup = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._applying: set[asyncio.Task[None]] = set()
        self._closing = False
        self._stranded = False  # a journaled record that never reached the store

    async def submit(self, record: ResponseRecord) -> None:
        """Journal ``record``; returns once it is durable (it reaches the store later).

        Raises:
            StorageError: the record cannot be encoded, the journal cannot be written, or the
                writer is closed.
        """
        if self._closing:
            raise StorageError("the journaled writer is closed")
        payload = encode_record(record)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((payload, record, future))
        self._wakeup.set()
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._run(), name="troupe-journal")
        await future

    @property
    def executor(self) -> concurrent.futures.Executor:
        """The thread the store's calls run on."""
        return self._applier.executor

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the store's thread once every journaled record is in the store."""
        await self.drain()
        return await self._applier.run_sync(fn, *args)

    async def run_apart(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the store's thread without waiting for the journaled records: for
        calls that neither read nor change what they write (``APART_FROM_RESPONSES``)."""
        return await self._applier.run_sync(fn, *args)

    async def drain(self) -> None:
        """Return once every record whose ``submit`` returned before this call is in the store
        (or rejected). Records submitted meanwhile are not waited for: under load, a read
        must not wait for ever."""
        pending = set(self._applying)
        if pending:
            self._applier.hurry()
            await asyncio.wait(pending)

    async def close(self) -> None:
        """Journal and store everything submitted, then stop (idempotent)."""
        await self._stop_flusher()
        while self._applying:
            await self.drain()
        await self._applier.close()
        await asyncio.to_thread(self._appends.shutdown, wait=True)
        # Every record is in the store now, or in REJECTED; unless one was stranded, which
        # stays in the journal for the next replay.
        self._journal.close(delete=not self._stranded)

    async def _run(self) -> None:
        """The flusher: appends what is queued, one ``fdatasync`` per batch."""
        loop = asyncio.get_running_loop()
        while True:
            if not self._queue:
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            batch, self._queue = self._queue, []
            begun = time.perf_counter()
            try:
                first = await loop.run_in_executor(self._appends, self._journal.append, [p for p, _, _ in batch])
                if self._on_commit is not None:
                    self._on_commit("journal", len(batch), time.perf_counter() - begun)
            except OSError as exc:
                error = StorageError(f"cannot write the journal: {exc}")
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                continue
            for offset, (payload, record, future) in enumerate(batch):
                task = asyncio.create_task(self._store_later(first + offset, payload, record))
                self._applying.add(task)
                task.add_done_callback(self._applying.discard)
                if not future.done():
                    future.set_result(None)

    async def _store_later(self, lsn: int, payload: bytes, record: ResponseRecord) -> None:
        try:
            await self._applier.submit((lsn, payload, record))
        except WriterStopped:
            self._stranded = True  # going down: the record stays in the journal, replayed later
        except StorageError as exc:
            await asyncio.to_thread(reject, self._rejected_dir, lsn, payload, exc)

    def _apply(self, entries: list[tuple[int, bytes, ResponseRecord]]) -> None:
        """One store transaction for ``entries`` (on the store's thread), then retire what it covers."""
        last = entries[-1][0]
        try:
            self._store.write_responses([record for _, _, record in entries], journal_lsn=last, journal=self._name)
        except WriterStopped:
            self._stranded = True  # set here, on the store's thread, before any later batch is applied
            raise
        if self._stranded:
            return  # an earlier record is still only in the journal: keep every segment
        # Batches go in lsn order, and a failed record is rejected from memory: every record up
        # to ``last`` is stored or being rejected, so no segment up to it is needed any more.
        self._journal.retire(last)
