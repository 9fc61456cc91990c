"""The responses a host is running now: their live state, cancel, and background runs.

Every turn a :class:`~troupe.runtime.host.ConversationHost` runs is a :class:`LiveRun` in
its :class:`LiveRuns` from the moment it is accepted until it is stored. That is what lets
another connection

* read a response that is not stored yet (``GET /v1/responses/{id}`` of a background
  run: ``queued`` while it waits for its conversation's turn, then ``in_progress`` with the
  output so far);
* cancel it (``POST /v1/responses/{id}/cancel``): the loop stops at its next chunk or tool
  boundary, a tool call in flight is cancelled, and the response is stored ``cancelled``
  with the output it had;
* follow its events (a background stream: the events are kept while it runs, so a client
  that dropped may come back with ``starting_after``), and for :data:`ENDED_KEPT_S` after
  it is stored: a follower that comes just after the end (a session driving on its turn's
  response) reads them here, not from the store, where the response may still be on its way
  to DuckDB (a read would wait for it).

A background run is driven by a task of the host itself (:meth:`LiveRuns.drive`), not by
the request that started it: the HTTP answer returns at once and the run goes on.

Example::

    run = runs.add(job, writer)           # queued
    run.started()                          # it has its conversation's turn
    runs.get(tenant, response_id).snapshot()
    await runs.cancel(tenant, response_id)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from troupe.agentloop.checkpoint import ResumePoint
from troupe.agentloop.events import ResponseStarted
from troupe.agentloop.writer import WireWriter
from troupe.protocol import InvalidRequest, NotFound, parse_create_request
from troupe.storage import ResponseRecord, RunRecord, RunStep, StepTrace, event_log

if TYPE_CHECKING:
    from troupe.protocol.job import TurnJob

__all__ = [
    "LiveRun",
    "LiveRuns",
    "NoLiveRun",
    "CANCEL_WAIT_S",
    "LOST_RUN_MESSAGE",
    "MAX_RESUMES",
    "TOO_MANY_RESUMES",
    "failed_record",
    "lost_run_record",
    "run_snapshot",
]

log = logging.getLogger(__name__)

CANCEL_WAIT_S = 10.0
"""How long a cancel waits for a running loop to stop and store itself before answering
with the run's state as it stands (``cancelled``, the store catching up)."""


class NoLiveRun(NotFound):
    """The host runs no response of that id (it may be stored, or it never was)."""


@dataclass(eq=False)
class LiveRun:
    """One response a host has accepted and not yet stored."""

    job: TurnJob
    writer: WireWriter
    """The run's wire writer: its ``response`` is the Response as it stands."""
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    """Set to stop the loop (the driver checks it at every chunk and tool boundary)."""
    steer: asyncio.Event = field(default_factory=asyncio.Event)
    """Set to end the loop at its next safe boundary, ``incomplete`` (``steered``): once its
    tool calls have their results, before it would call the model again (WebSocket steering)."""
    running: bool = False
    """False while the run waits for its conversation's turn (``queued``)."""
    events: list[dict[str, Any]] | None = None
    """Every wire event so far, for followers and checkpoints; kept for stored responses."""
    durable: bool = False
    """It has a ``runs`` row: a background run from its start, a foreground one from its first
    checkpoint (handed to the store with the row). A durable run that no host runs and none stored is resumed."""
    stored: bool = False
    """Its response is stored (the run is over)."""
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the run is stored (or ended without being stored)."""
    resume: ResumePoint | None = None
    """For a run resumed after its host died: its stored steps (the loop goes on from them)."""
    stored_steps: tuple[dict[str, Any], ...] = ()
    """For a resumed run: its steps as stored (with the host's own fields: ``started_at``, ``ttft_s``)."""
    steps: int = 0
    """Steps checkpointed so far (a durable run's next step is number ``steps``)."""
    logged: int = 0
    """How many of :attr:`events` the checkpoints hold."""
    traces: list[StepTrace] = field(default_factory=list)
    """The run's step traces so far."""
    traced: int = 0
    """How many of :attr:`traces` the checkpoints hold."""
    started_at: float = 0.0
    """When its loop first started (Unix seconds; a resumed run keeps its first start)."""
    unwritten: list[RunStep] = field(default_factory=list)
    """Checkpointed steps not yet handed to the store, in order (``ConversationHost._checkpoint``)."""
    unwritten_start: RunRecord | None = None
    """The run's ``runs`` row, to be written with the first of :attr:`unwritten`."""
    writing: asyncio.Task[None] | None = None
    """The task writing :attr:`unwritten`, batch after batch; None when nothing is left."""
    write_error: BaseException | None = None
    """Why a write failed: the run writes no step after it (its steps stay a prefix) and fails."""
    _waiters: list[asyncio.Future[None]] = field(default_factory=list)
    """Followers waiting for the next events (each its own future: none misses a wake-up)."""

    def started(self) -> None:
        self.running = True

    def add_events(self, events: list[dict[str, Any]]) -> None:
        if self.events is not None:
            self.events.extend(events)
            self.wake()

    def wake(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    async def changed(self) -> None:
        """Return once events are added or the run ends."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter

    def snapshot(self) -> dict[str, Any]:
        """The Response as it stands: ``queued`` before its turn (a background one until its
        ``response.in_progress`` event), ``cancelled`` once asked to, and ``in_progress`` until
        it is stored (a reader told it is done must find it stored: its input items, its step
        traces)."""
        response = self.writer.response
        if response["status"] in ("queued", "in_progress"):
            if self.cancel.is_set():
                response["status"] = "cancelled"
            elif not self.running:
                response["status"] = "queued"
        elif response["status"] != "cancelled" and not self.stored:
            response["status"] = "in_progress"
        return response


ENDED_KEPT_S = 2.0
"""How long a stored background run's events stay followable after it ended (module docstring)."""


class LiveRuns:
    """A host's live runs by response id, and the tasks that drive its background runs."""

    def __init__(self) -> None:
        self._runs: dict[str, LiveRun] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._ended: dict[str, LiveRun] = {}
        """Runs stored in the last :data:`ENDED_KEPT_S`, by response id (each leaves on a timer)."""

    def __len__(self) -> int:
        return len(self._runs)

    def add(self, job: TurnJob, writer: WireWriter) -> LiveRun:
        run = LiveRun(job, writer, events=[] if job.request.store else None, durable=job.request.background)
        self._runs[job.response_id] = run
        return run


    def remove(self, run: LiveRun) -> None:
        if self._runs.get(run.job.response_id) is run:
            del self._runs[run.job.response_id]
        run.ended.set()
        run.wake()
        if run.stored and run.durable and run.events is not None:
            response_id = run.job.response_id
            self._ended[response_id] = run
            asyncio.get_running_loop().call_later(ENDED_KEPT_S, self._forget_ended, response_id, run)

    def _forget_ended(self, response_id: str, run: LiveRun) -> None:
        if self._ended.get(response_id) is run:
            del self._ended[response_id]

    def get(self, tenant: str, response_id: str) -> LiveRun | None:
        """The live run of this id, if it is the caller's (another tenant's is not there)."""
        run = self._runs.get(response_id)
        return run if run is not None and run.job.tenant == tenant else None

    def _just_ended(self, tenant: str, response_id: str) -> LiveRun | None:
        """The run of this id stored in the last :data:`ENDED_KEPT_S`, if it is the caller's."""
        run = self._ended.get(response_id)
        return run if run is not None and run.job.tenant == tenant else None

    def steer(self, tenant: str, response_id: str) -> bool:
        """Ask a live run to end at its next safe boundary (:attr:`LiveRun.steer`); False: no
        such live run (it may have ended)."""
        run = self.get(tenant, response_id)
        if run is None:
            return False
        run.steer.set()
        return True

    async def cancel(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        """Stop a live run; its Response once stored (or, after :data:`CANCEL_WAIT_S`, as it
        stands). None: no such live run (it may be stored already)."""
        run = self.get(tenant, response_id)
        if run is None:
            return None
        run.cancel.set()
        if not run.running:
            return run.snapshot()  # it stops as soon as it has its turn, before calling the model
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CANCEL_WAIT_S):
                await run.ended.wait()
        return run.snapshot()

    def drive(self, batches: AsyncGenerator[list[dict[str, Any]], None], *, on_error: Callable[[BaseException], Any]) -> None:
        """Consume a background run's batches in a task of this host (the run goes on after
        the request that started it has been answered)."""

        async def consume() -> None:
            try:
                async with contextlib.aclosing(batches):
                    async for _ in batches:
                        pass
            except Exception as exc:  # the run failed before the loop could report it
                await on_error(exc)

        task = asyncio.create_task(consume())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def follow(self, tenant: str, response_id: str, starting_after: int) -> AsyncGenerator[list[dict[str, Any]], None]:
        """A background run's events after sequence number ``starting_after``, as they come,
        until it ends (one stored in the last :data:`ENDED_KEPT_S`: those it had). The first
        batch is empty: it says the run is live, or just ended.

        Raises (before the first batch): NoLiveRun; InvalidRequest for a run that keeps no
        events (not a background one).
        """
        run = self.get(tenant, response_id) or self._just_ended(tenant, response_id)
        if run is None:
            raise NoLiveRun(f"No running response with id '{response_id}'.", param="response_id")
        if run.events is None:
            raise InvalidRequest(
                "Only a stored response can be streamed again; this one (store=false) streams to the request "
                "that made it.",
                param="stream",
            )
        yield []
        sent = 0
        while True:
            fresh = [e for e in run.events[sent:] if e["sequence_number"] > starting_after]
            sent = len(run.events)
            if fresh:
                yield fresh  # (events may be added while the follower takes these)
            if len(run.events) > sent:
                continue
            if run.ended.is_set():
                return
            await run.changed()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


LOST_RUN_MESSAGE = (
    "The server stopped, or the host running this response failed, before it finished; "
    "it was not resumed because it is older than the server's resume_within_s. Its conversation's "
    "history is intact."
)
MAX_RESUMES = 3
"""A durable run whose host fails this many times is not resumed again (it may be what
kills its hosts)."""
TOO_MANY_RESUMES = (
    "The host running this response failed {attempts} times; it was not resumed again. "
    "Its conversation's history is intact."
)


def _writer_of(run: RunRecord) -> WireWriter:
    """A fresh writer of the run's response (its request, id and creation time)."""
    request = parse_create_request(run.request)
    return WireWriter(
        request, response_id=run.response_id, created_at=run.created_at, conversation_id=request.conversation_id
    )


def run_snapshot(run: RunRecord, events: list[dict[str, Any]]) -> dict[str, Any]:
    """The Response of a run known by its record and the wire events its checkpoints hold
    (``in_progress``: it is being resumed)."""
    writer = _writer_of(run)
    writer.restore(events)
    return writer.response


def lost_run_record(run: RunRecord, message: str, events: list[dict[str, Any]]) -> ResponseRecord:
    """The record that ends a durable run that will not be resumed: the response ``failed``
    with the output its checkpoints hold (``events``: their wire events)."""
    error = {"code": "server_error", "message": message}
    writer = _writer_of(run)
    writer.restore(events)
    return failed_record(run.tenant, run.thread_id, writer, error, started_at=run.created_at, events=events)


def failed_record(
    tenant: str,
    thread_id: str,
    writer: WireWriter,
    error: dict[str, Any],
    *,
    started_at: float,
    events: list[dict[str, Any]],
) -> ResponseRecord:
    """A response that failed before its loop could say so: ``writer``'s Response (its output
    as the writer holds it), ``failed`` with ``error``; no input items stored, nothing added to
    its conversation. Its event log, so that it replays to its end: ``events`` (what
    ``writer`` wrote; the response's opening if nothing), then ``error`` and ``response.failed``."""
    if not events:
        events = writer.write(ResponseStarted())
    ended = time.time()
    response = dict(writer.response, status="failed", error=error, completed_at=int(ended))
    ending = WireWriter.failure_after(writer.response, events[-1]["sequence_number"], error, int(ended))
    return ResponseRecord(
        tenant=tenant, response=response, input_items=[], thread_id=thread_id, started_at=started_at, ended_at=ended,
        append_to_conversation=False, events=event_log.pack(events + ending, response),
    )
