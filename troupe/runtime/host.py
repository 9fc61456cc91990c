"""The conversation host: the I/O shell around the pure agent loop.

A :class:`ConversationHost` hosts one conversation (dedicated placement) or
many (pooled placement). Per conversation it owns the *message cache* (the
thread's client transcript, from which the loop's canonical transcript and the
upstream messages are rebuilt) and runs that conversation's turns one after
another: a second request to a busy conversation waits for the first. Different
conversations run concurrently.

It is a plain class: ``troupe.runtime.ray.placement`` wraps it with ``ray.remote`` in
one place, and the in-process runtime uses it as it is.

On a cache miss (a new host, a restart, an evicted thread) it rebuilds the
thread from storage: the conversation's items, or the ``previous_response_id``
chain. A finished response is made durable in storage (its journal) *before* its
terminal event is released, so a client that saw ``response.completed`` can
always retrieve the response.

A turn's life on its host (accepted, queued on its thread's lock, run, stored, cancelled or
driven in the background) is one sequence over the host's state, read top to bottom here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from troupe.agentloop.chat import plain
from troupe.agentloop.checkpoint import ResumePoint
from troupe.agentloop.driver import LoopSettings, prepare, run_loop
from troupe.agentloop.events import Checkpoint, StepStarted, StepTraced
from troupe.agentloop.loop_guards import LoopGuards
from troupe.agentloop.mcp import McpClient, McpServer
from troupe.agentloop.tools import ToolExecutor
from troupe.agentloop.web_search import WEB_SEARCH_TYPES, WebSearcher
from troupe.agentloop.writer import WireWriter
from troupe.observe import Observer, TurnObserver
from troupe.protocol import (
    CreateResponseRequest,
    InvalidRequest,
    conversation_not_found,
    model_not_found,
    previous_response_not_found,
)
from troupe.protocol.job import TurnJob
from troupe.runtime.artifacts import ArtifactService
from troupe.runtime.batching import coalesce
from troupe.runtime.container_runs import ContainerFleet, ContainerRunner, check_code_tool
from troupe.runtime.containers import ContainerService
from troupe.runtime.guardrails import GuardrailRegistry
from troupe.runtime.mcp_policy import resolve_mcp_tool
from troupe.runtime.models import ModelRegistry
from troupe.runtime.rag import VectorStores
from troupe.runtime.runs import LiveRun, LiveRuns, failed_record
from troupe.runtime.settings import RuntimeSettings
from troupe.runtime.store_client import StoreClient
from troupe.storage import ResponseRecord, RunRecord, RunStep, StepTrace, event_log
from troupe.storage.credentials import CredentialKeys, withhold

__all__ = ["ConversationHost", "HostClient", "DELTA_TYPES"]

log = logging.getLogger(__name__)


DELTA_TYPES = frozenset(
    {"response.output_text.delta", "response.reasoning_text.delta", "response.function_call_arguments.delta"}
)
"""The wire events whose first one marks a response's time to first token."""

_NOT_WIRE = frozenset({StepStarted, StepTraced, Checkpoint})
"""Loop events the writer has nothing to say about: one type check tells them from the rest."""


class HostClient(Protocol):
    """How the runtime talks to a host, in-process or through a Ray actor handle."""

    def respond(self, job: TurnJob, *, stream: bool = True) -> AsyncGenerator[list[dict[str, Any]], None]: ...

    async def start_background(self, job: TurnJob) -> dict[str, Any]: ...

    async def resume_background(self, job: TurnJob) -> dict[str, Any]: ...

    async def run_ended(self, tenant: str, response_id: str) -> None: ...

    async def live_response(self, tenant: str, response_id: str) -> dict[str, Any] | None: ...

    async def cancel(self, tenant: str, response_id: str) -> dict[str, Any] | None: ...

    async def steer(self, tenant: str, response_id: str) -> bool: ...

    def follow(self, tenant: str, response_id: str, starting_after: int) -> AsyncGenerator[list[dict[str, Any]], None]: ...

    async def add_conversation_items(
        self, tenant: str, conversation_id: str, items: list[dict[str, Any]]
    ) -> list[dict[str, Any]] | None: ...

    async def delete_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> bool: ...

    async def delete_conversation(self, tenant: str, conversation_id: str) -> bool: ...


@dataclass(slots=True)
class _Thread:
    """One conversation's message cache and turn lock."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    history: list[dict[str, Any]] | None = None
    """The thread's client items, oldest first; None until loaded."""
    tip: str | None = None
    """For a previous_response_id chain: the response the history ends with."""


class ConversationHost:
    """Runs turns for the conversations placed on it.

    Args:
        settings: the runtime settings (models, limits, batching).
        store: the storage client (group-committing writes).
        executors: the server-side tool executors.
        mcp_client: how MCP servers are reached (None: ``mcp`` tools are refused).
        fleet: where containers' sandboxes run (None: ``code_interpreter`` tools, and ``shell``
            tools in containers, are refused).
        host_label: the host's ``host`` label in metrics (``local``, ``replica``, a pooled
            actor's name, ``dedicated``).
    """

    def __init__(
        self,
        settings: RuntimeSettings,
        *,
        store: StoreClient,
        executors: Sequence[ToolExecutor] = (),
        mcp_client: McpClient | None = None,
        fleet: ContainerFleet | None = None,
        host_label: str = "local",
    ) -> None:
        self.settings = settings
        self.store = store
        self.executors = list(executors)
        self.mcp_client = mcp_client
        self.fleet = fleet
        self.containers = ContainerService(settings.containers, store, stop=fleet.stop if fleet else None,
                                           reserve=fleet.reserve if fleet else None)  # fmt: skip
        """The tenants' containers, for the ``code_interpreter`` and ``shell`` tools run here (on ``fleet``)."""
        self.artifacts = ArtifactService(store, settings.containers)
        """Session turns' artifacts: the files their runs here write, published as a turn completes."""
        self.models = ModelRegistry(settings.models)
        self.vector_stores = VectorStores(settings, store)
        """Search of the tenant's vector stores, for tools run here (``file_search``): ``search(tenant, ids, query, …)``."""
        self.loop_settings = LoopSettings(client_tool_status=settings.client_tool_status)
        self.guardrails = GuardrailRegistry(settings, self.models)
        self.credential_keys = CredentialKeys([k.get_secret_value() for k in settings.credentials_keys])
        """What a run's row keeps of its request's credentials (:mod:`troupe.storage.credentials`)."""
        self._web: dict[str, Any] = {}
        """The ``web_search`` tool's searchers (:mod:`troupe.runtime.web_search`), made on first
        use: a tenant with its own provider -> its own; ``""`` -> the deployment's."""
        self._threads: OrderedDict[tuple[str, str], _Thread] = OrderedDict()
        self.runs = LiveRuns()
        """The responses accepted and not yet stored: read, cancelled and followed by id."""
        self.last_active = time.monotonic()
        self.running = 0
        """Turns in progress (the dedicated placement's idle check reads it)."""
        self.observer = Observer(settings.telemetry, host=host_label, mcp_servers=(s.label for s in settings.mcp.servers))
        self._unwatch = self.observer.watch_host(
            lambda: len(self._threads), lambda: self.running, lambda: max(0, len(self.runs) - self.running)
        )

    # -- the message cache -------------------------------------------------------

    def _thread(self, tenant: str, thread_id: str) -> _Thread:
        key = (tenant, thread_id)
        thread = self._threads.get(key)
        if thread is None:
            thread = self._threads[key] = _Thread()
        self._threads.move_to_end(key)
        excess = len(self._threads) - self.settings.cache_size
        if excess > 0:
            # Drop the least recently used idle threads; a running turn's thread is never dropped.
            idle = (k for k, t in self._threads.items() if k != key and not t.lock.locked())
            for old_key in list(itertools.islice(idle, excess)):
                del self._threads[old_key]
        return thread

    def forget_thread(self, tenant: str, thread_id: str) -> None:
        """Drop a thread's message cache (a thread that will never be continued)."""
        self._threads.pop((tenant, thread_id), None)

    async def _history(self, job: TurnJob, thread: _Thread) -> list[dict[str, Any]]:
        request, tenant = job.request, job.tenant
        if request.conversation_id is not None:
            self.observer.cache(hit=thread.history is not None)
            if thread.history is None:
                items = await self.store.conversation_items(tenant, request.conversation_id)
                if items is None:
                    raise conversation_not_found(request.conversation_id)
                thread.history = items
            return thread.history
        if request.previous_response_id is not None:
            self.observer.cache(hit=thread.history is not None and thread.tip == request.previous_response_id)
            if thread.history is None or thread.tip != request.previous_response_id:
                items = await self.store.chain_items(tenant, request.previous_response_id)
                if items is None:
                    raise previous_response_not_found(request.previous_response_id)
                thread.history, thread.tip = items, request.previous_response_id
            return thread.history
        return []

    def _code_runner(self, job: TurnJob) -> ContainerRunner | None:
        """What runs a turn's code and shell commands in the tenant's containers; None (the tools
        are refused; a ``shell`` the client runs is not): no fleet, or a tenant
        ``[containers] code_tenants`` does not name. A session turn's runs note the files they
        write (:mod:`troupe.runtime.artifacts`)."""
        tenant, allowed = job.tenant, self.settings.containers.code_tenants
        if self.fleet is None or ("*" not in allowed and tenant not in allowed):
            return None
        return ContainerRunner(self.containers, self.fleet, tenant, observer=self.observer,
                               on_files=self.artifacts.recorder(tenant, job.request.metadata))  # fmt: skip

    # -- a turn ------------------------------------------------------------------

    async def respond(self, job: TurnJob, *, stream: bool = True) -> AsyncGenerator[list[dict[str, Any]], None]:
        """Run one response; yields its wire events in batches.

        With ``stream`` each batch holds what the turn produced since the caller took the
        previous one (see :func:`coalesce`); without it only two batches come: the first
        (the turn has started) and the terminal one, which is all a non-streaming caller needs.

        Raises (before the first batch): InvalidRequest / NotFound for input that
        does not fit the thread.
        """
        run = self._accept(job)
        async with contextlib.aclosing(self._turn(run, stream=stream)) as batches:
            async for batch in batches:
                yield batch

    async def start_background(self, job: TurnJob) -> dict[str, Any]:
        """Start a background response (``background: true``) and answer at once: the run goes
        on in a task of this host. The Response it answers is always ``queued``, as OpenAI's
        create does (its ``response.created`` snapshot); a later read shows ``in_progress``,
        then how it ended.

        Raises: InvalidRequest / NotFound for a request that does not fit, when the run could
        start at once (a queued run that turns out not to fit is stored ``failed``).
        """
        if (running := self.runs.get(job.tenant, job.response_id)) is not None and running.events:
            return dict(running.events[0]["response"])  # a retried call (see resume_background)
        if self.settings.model(job.request.model) is None:
            raise model_not_found(job.request.model)
        self._mcp_servers(job.request)  # a server this deployment may not reach: refused now
        run = self._accept(job)
        try:  # recorded before it is answered: a run its host dies with is known to be lost
            await self.store.start_run(_run_record(job, self.credential_keys))
        except BaseException:
            self.runs.remove(run)
            raise
        assert run.events  # response.created and response.queued, written as it was accepted
        opening = run.events[0]["response"]
        await self._drive(run, refusals_answered=True)
        return dict(opening)

    async def resume_background(self, job: TurnJob) -> dict[str, Any]:
        """Go on with a durable response whose host died (a background one, or a foreground one
        past its first tool step), from its last checkpoint (module
        :mod:`troupe.agentloop.checkpoint`), driven by this host; its Response as it stands.
        The caller has claimed the run (``claim_run``), so no other host resumes it too; a
        second call for it (a caller retrying after Ray's ``ActorUnavailableError``, which
        leaves unknown whether the first call ran) answers the run this host already drives."""
        running = self.runs.get(job.tenant, job.response_id)
        if running is not None:
            return running.snapshot()
        steps = await self.store.run_steps(job.tenant, job.response_id)
        running = self.runs.get(job.tenant, job.response_id)  # a second call, while this one read
        if running is not None:
            return running.snapshot()
        events = [event for step in steps for event in step.data["events"]]
        run = self._accept(job, restored=events)
        run.steps = len(steps)
        run.traces = [StepTrace(**trace) for step in steps for trace in step.data["traces"]]
        run.traced = len(run.traces)
        run.stored_steps = tuple(step.data for step in steps)
        run.resume = ResumePoint.from_stored(run.stored_steps, output=run.writer.output)
        return await self._drive(run, refusals_answered=False)

    async def _drive(self, run: LiveRun, *, refusals_answered: bool) -> dict[str, Any]:
        """Drive a background run in a task of this host; its Response as it stands once it has
        started (so that a request that does not fit is refused), or at once when it waits for
        its conversation's turn (``queued``).

        ``refusals_answered``: a request that does not fit, found before the run starts, is
        raised to the caller (a new request); otherwise it is stored as the run's failure.
        """
        job = run.job
        # A queued run is answered at once: waiting for its start could take a whole other turn.
        wait_for_start = refusals_answered and not self._thread(job.tenant, job.thread_id).lock.locked()
        first: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def batches() -> AsyncGenerator[list[dict[str, Any]], None]:
            async with contextlib.aclosing(self._turn(run, stream=False)) as turn:
                async for batch in turn:
                    if not first.done():
                        first.set_result(None)
                    yield batch

        async def failed(exc: BaseException) -> None:
            if wait_for_start and not first.done():
                first.set_exception(exc)  # the request is answered with it
            else:
                await self._store_failure(run, exc)

        self.runs.drive(batches(), on_error=failed)
        if wait_for_start:
            try:
                await first
            except BaseException:  # refused: its response will never be stored
                await self.store.end_run(job.tenant, job.response_id)
                raise
        return run.snapshot()

    async def run_ended(self, tenant: str, response_id: str) -> None:
        """Return once this host no longer runs ``response_id`` (at once if it does not). Its
        caller learns that the host died by the call failing (how a runtime watches a run)."""
        run = self.runs.get(tenant, response_id)
        if run is not None:
            await run.ended.wait()

    async def live_response(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        """A response this host runs now, as it stands; None if it has none of that id."""
        run = self.runs.get(tenant, response_id)
        return None if run is None else run.snapshot()

    async def cancel(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        """Cancel a response this host runs now (:meth:`LiveRuns.cancel`); None if it has none of that id."""
        return await self.runs.cancel(tenant, response_id)

    async def steer(self, tenant: str, response_id: str) -> bool:
        """End a response this host runs at its next safe boundary (:meth:`LiveRuns.steer`);
        False if it has none of that id."""
        return self.runs.steer(tenant, response_id)

    async def follow(self, tenant: str, response_id: str, starting_after: int) -> AsyncGenerator[list[dict[str, Any]], None]:
        """A running stored response's events after ``starting_after`` (:meth:`LiveRuns.follow`)."""
        async with contextlib.aclosing(self.runs.follow(tenant, response_id, starting_after)) as batches:
            async for batch in batches:
                yield batch

    def _accept(self, job: TurnJob, *, restored: list[dict[str, Any]] | None = None) -> LiveRun:
        """The job as a live run. A background one opens at once, ``queued`` (``response.created``
        and ``response.queued``: a follower has them while it waits for its turn), unless it
        goes on from ``restored``, the wire events its checkpoints hold."""
        request = job.request
        writer = WireWriter(
            request, response_id=job.response_id, created_at=job.created_at, conversation_id=request.conversation_id
        )
        run = self.runs.add(job, writer)
        if restored:
            writer.restore(restored)
            run.events, run.logged = restored, len(restored)
        elif request.background:
            run.add_events(writer.queue())
        return run

    async def _turn(self, run: LiveRun, *, stream: bool) -> AsyncGenerator[list[dict[str, Any]], None]:
        """The run, once it has its conversation's turn; it leaves :attr:`runs` when it ends."""
        job = run.job
        try:
            thread = self._thread(job.tenant, job.thread_id)
            async with thread.lock:  # turns of one conversation never interleave
                run.started()
                self.running += 1
                sizes = self.observer.stream_batches if stream else None
                try:
                    async with contextlib.aclosing(coalesce(self._run_turn(run, thread, stream=stream))) as batches:
                        async for batch in batches:
                            if sizes is not None:
                                sizes.observe((), len(batch))
                            yield batch
                finally:
                    self.running -= 1
                    self.last_active = time.monotonic()
        finally:
            self.runs.remove(run)
            with contextlib.suppress(Exception):  # a failed write failed the turn already
                await self._written(run)
            if run.durable and not run.stored and not job.request.background and run.resume is None:
                # A foreground turn its client drove that ended unstored (the client went away, a
                # failure) is over: only a host that dies leaves its run behind, to be resumed.
                with contextlib.suppress(Exception):
                    await self.store.end_run(job.tenant, job.response_id)

    async def _store_failure(self, run: LiveRun, exc: BaseException) -> None:
        """Store a background run that failed before its loop could report it (a queued
        request that turned out not to fit its thread, a storage error)."""
        code, message = getattr(exc, "code", None), getattr(exc, "message", None)
        error = {"code": code or "server_error", "message": message or f"The response failed: {exc}"}
        record = failed_record(
            run.job.tenant, run.job.thread_id, run.writer, error, started_at=run.job.created_at, events=run.events or []
        )
        try:
            await self.store.write_response(record)
        except Exception:  # nothing more to do: it was never stored, and a GET says 404
            log.exception("background response %s: its failure could not be stored", run.job.response_id)

    def _web_searcher(self, tenant: str, tools: list[dict[str, Any]]) -> WebSearcher | None:
        """What a request's ``web_search`` tool searches with: ``tenant``'s search engine
        (``[web_search.tenants]``, else the deployment's), its searcher made the first time one
        of its requests offers the tool (None when none does).

        Raises:
            InvalidRequest: a ``web_search`` tool with no search provider for ``tenant`` (naming it).
        """
        index = next((i for i, t in enumerate(tools) if t.get("type") in WEB_SEARCH_TYPES), None)
        if index is None:
            return None
        web = self.settings.web_search
        own = tenant in web.tenants
        if web.provider_for(tenant).provider == "none":
            where = "for this request's tenant ([web_search.tenants])" if own else "on this server"
            raise InvalidRequest(NO_PROVIDER.format(where=where), param=f"tools[{index}]", code="unsupported_value")
        key = tenant if own else ""  # tenants without their own share the deployment's searcher
        if key not in self._web:
            from troupe.runtime.web_search import RuntimeWebSearcher

            self._web[key] = RuntimeWebSearcher(web, web.provider_for(tenant))
        return self._web[key]

    async def _run_turn(self, run: LiveRun, thread: _Thread, *, stream: bool) -> AsyncGenerator[list[dict[str, Any]], None]:
        resumed = run.stored_steps
        started = run.started_at = resumed[0]["started_at"] if resumed else time.time()
        job, writer = run.job, run.writer
        request = job.request
        spec = self.settings.model(request.model)
        if spec is None:
            raise model_not_found(request.model)
        servers = self._mcp_servers(request)
        history = await self._history(job, thread)
        tools = [plain(t) for t in request.tools or []]
        code_runner = self._code_runner(job)
        web_searcher = self._web_searcher(job.tenant, tools)
        if run.resume is None:  # a resumed run was checked when it started
            await self.vector_stores.check_file_search(job.tenant, tools)
            for i, tool in enumerate(tools):
                if tool.get("type") in ("code_interpreter", "shell") and code_runner is not None:
                    check_code_tool(self.settings.containers, tool, i)
        prepared = prepare(
            request, history, self.executors, mcp_client=self.mcp_client, mcp_servers=servers,
            file_searcher=self.vector_stores.searcher(job.tenant),
            code_runner=code_runner, shell_runner=code_runner, web_searcher=web_searcher,
        )  # fmt: skip
        obs = self.observer.turn(job, started=started)
        if obs is not None:
            obs.accepted(prepared.input_items)
        events = run_loop(
            prepared,
            model=self.models.client(spec),
            executors=self.executors,
            settings=self.loop_settings,
            upstream_model=spec.upstream_model or spec.name,
            cancel=run.cancel,
            steer=run.steer,
            context_window=spec.context_window,
            resume=run.resume,
            # A stored response is durable from its first checkpoint (a background one from its start).
            checkpoints=request.background or (request.store and self.settings.durable_foreground),
            # A background run may be followed; a non-streamed one is seen only at its end.
            live=stream or request.background or spec.streaming == "always",
            guardrails=self.guardrails.for_turn(job.tenant, request),
            loop_guards=None if spec.loop_guards is None else LoopGuards(**spec.loop_guards.model_dump()),
        )
        traces = run.traces
        ttft_s: float | None = next((s["ttft_s"] for s in reversed(resumed) if s["ttft_s"] is not None), None)
        started_sent = False
        try:
            async with contextlib.aclosing(events):
                async for event in events:
                    if type(event) in _NOT_WIRE:
                        if isinstance(event, StepTraced):
                            traces.append(_trace(job.response_id, len(traces), event))
                            if obs is not None:
                                obs.step_ended(event)
                        elif isinstance(event, StepStarted):
                            if obs is not None:
                                obs.step_started(event)
                        else:
                            assert isinstance(event, Checkpoint)  # the rest of _NOT_WIRE
                            await self._checkpoint(run, event, ttft_s, obs)
                        continue
                    wire = writer.write(event)
                    run.add_events(wire)
                    if writer.finished:
                        # Durable before the client hears it is done.
                        response = writer.response
                        await self._written(run, unsent=False)  # the steps being written before its end
                        await self._publish(job, response)
                        await self._finish(
                            job, thread, history, prepared.input_items, response, started, ttft_s, traces,
                            run.events if run.durable or self.settings.event_logs == "all" else None, obs,
                        )
                        run.stored = True
                        if obs is not None:
                            obs.finished(response, ttft_s)
                        yield wire
                        return
                    if ttft_s is None and any(e["type"] in DELTA_TYPES for e in wire):
                        ttft_s = time.time() - started
                    if stream or not started_sent:
                        started_sent = True
                        yield wire
        except BaseException as exc:
            if obs is not None:
                obs.abandoned(writer.response, failed=not isinstance(exc, GeneratorExit | asyncio.CancelledError))
            raise

    async def _checkpoint(
        self, run: LiveRun, checkpoint: Checkpoint, ttft_s: float | None, obs: TurnObserver | None = None
    ) -> None:
        """Store a step of a durable run with the wire events and traces since its last step.

        Steps reach the store in order, one batch at a time: those the loop makes while a batch
        is being written go together in the next call (the steps of tools that end together, and
        the end of their tool step). The loop waits only for a step that gates (a model turn, or
        approved MCP calls, whose tools are not all idempotent: no such tool runs whose call a
        restart would not know of); the others are written behind it, and :meth:`_written`
        waits for them before the run ends. A foreground run becomes durable here, at its first
        step, written with its ``runs`` row: before it, no tool ran but idempotent ones, and a
        host that dies fails the request as a retry would not regret. A write that fails fails
        the run at the next step the loop waits for, or at its end."""
        assert run.events is not None
        if run.write_error is not None:
            raise run.write_error
        start = None if run.durable else _run_record(run.job, self.credential_keys)
        data = {
            **checkpoint.step.to_data(),
            "events": run.events[run.logged :],
            "traces": [dataclasses.asdict(t) for t in run.traces[run.traced :]],
            "ttft_s": ttft_s,
            "started_at": run.started_at,
        }
        step = RunStep(tenant=run.job.tenant, response_id=run.job.response_id, seq=run.steps, data=data)
        run.steps, run.logged, run.traced = run.steps + 1, len(run.events), len(run.traces)
        run.unwritten.append(step)
        if start is not None:
            run.unwritten_start = start
        if run.writing is None:
            run.writing = asyncio.ensure_future(self._write_steps(run, obs))
        run.durable = True
        if checkpoint.gates:
            await self._written(run)

    async def _write_steps(self, run: LiveRun, obs: TurnObserver | None) -> None:
        """Hand the run's unwritten steps to the store, a batch per call, until none is left."""
        try:
            while run.unwritten and run.write_error is None:
                steps, start = run.unwritten, run.unwritten_start
                run.unwritten, run.unwritten_start = [], None
                begun = time.time()
                await self.store.checkpoint_steps(steps, start)
                if obs is not None:
                    obs.wrote("checkpoint", begun, time.time())
        except Exception as exc:  # noqa: BLE001 - kept for the run: raised where it waits for its steps
            run.write_error = exc
        finally:
            run.writing = None

    @staticmethod
    async def _written(run: LiveRun, *, unsent: bool = True) -> None:
        """Wait until the run's steps are all written; raises why a write failed.

        ``unsent=False``, when its response is about to be stored: drop the steps not handed to
        the store yet, and wait only for those being written. The response supersedes them
        (storing it ends the run: a run whose response is stored is never resumed), and a step
        written after it would be left behind, never read."""
        if not unsent:
            run.unwritten, run.unwritten_start = [], None
        while run.writing is not None:
            await asyncio.shield(run.writing)  # a cancelled turn does not cancel its writes
        if run.write_error is not None:
            raise run.write_error

    async def _publish(self, job: TurnJob, response: dict[str, Any]) -> None:
        """Publish the artifacts of the session turn the response completes, if it does one
        (:meth:`ArtifactService.publish`), before it is stored: a client told the turn completed
        finds them. A failure to publish is logged; the response is not failed for it."""
        try:
            await self.artifacts.publish(job.tenant, response)
        except Exception:  # noqa: BLE001 - the turn's answer stands without its artifacts
            log.exception("response %s: its session turn's artifacts could not be published", job.response_id)

    def _mcp_servers(self, request: CreateResponseRequest) -> list[McpServer]:
        """The request's ``mcp`` tools, resolved (configured labels, secrets) and checked (URL policy).

        Raises:
            InvalidRequest: a server this deployment may not reach, or an unknown label.
        """
        if self.mcp_client is None:
            return []
        servers = []
        for index, tool in enumerate(request.tools):
            if tool.get("type") == "mcp":
                server = resolve_mcp_tool(tool, self.settings, index)
                self.mcp_client.check_server(server, index)
                servers.append(server)
        return servers

    async def _finish(
        self,
        job: TurnJob,
        thread: _Thread,
        history: list[dict[str, Any]],
        input_items: list[dict[str, Any]],
        response: dict[str, Any],
        started: float,
        ttft_s: float | None,
        traces: list[StepTrace],
        events: list[dict[str, Any]] | None,
        obs: TurnObserver | None = None,
    ) -> None:
        if not job.request.store:
            return  # nothing written, and the cache still matches storage
        in_conversation = job.request.conversation_id is not None
        # A failed or cancelled turn does not become conversation history.
        appended = response["status"] not in ("failed", "cancelled")
        record = ResponseRecord(
            tenant=job.tenant,
            response=response,
            input_items=input_items,
            thread_id=job.thread_id,
            started_at=started,
            ended_at=time.time(),
            ttft_s=ttft_s,
            traces=traces,
            append_to_conversation=appended,
            events=None if events is None else event_log.pack(events, response),
        )
        begun = time.time()
        await self.store.write_response(record)
        if obs is not None:
            obs.wrote("write_response", begun, time.time())
        if not in_conversation:
            thread.history, thread.tip = history + input_items + response["output"], response["id"]
        elif appended:
            thread.history = history + input_items + response["output"]

    # -- conversation item writes (serialized with the conversation's turns) ------

    async def add_conversation_items(
        self, tenant: str, conversation_id: str, items: list[dict[str, Any]]
    ) -> list[dict[str, Any]] | None:
        thread = self._thread(tenant, conversation_id)
        async with thread.lock:
            if not await self.store.add_conversation_items(tenant, conversation_id, items):
                return None
            if thread.history is not None:
                thread.history = thread.history + items
            return items

    async def delete_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> bool:
        thread = self._thread(tenant, conversation_id)
        async with thread.lock:
            thread.history = None  # reload on the next turn
            return await self.store.delete_conversation_item(tenant, conversation_id, item_id)

    async def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        thread = self._thread(tenant, conversation_id)
        async with thread.lock:
            thread.history = None
            return await self.store.delete_conversation(tenant, conversation_id)

    async def warm(self) -> None:
        """Get ready for the first turn: the model clients and their connections."""
        await self.models.warm()

    async def close(self) -> None:
        self._unwatch()
        await self.runs.close()
        await self.models.close()
        await self.guardrails.close()
        if self.mcp_client is not None:
            await self.mcp_client.close()
        for searcher in self._web.values():
            await searcher.close()


NO_PROVIDER = (
    "The web_search tool needs a search provider, and none is configured {where}. Set [web_search] provider "
    "(\"searxng\" with url, \"brave\" or \"tavily\" with api_key, \"responses\" with url and model) in the "
    "server's configuration (docs/web-search.md)."
)
"""The 400 of a ``web_search`` tool on a server without a provider."""


def _run_record(job: TurnJob, keys: CredentialKeys) -> RunRecord:
    """The ``runs`` row of ``job``: its request without credentials, which the row keeps sealed
    with ``keys``, or not at all (:mod:`troupe.storage.credentials`)."""
    request, secrets = withhold(job.request.model_dump(mode="json", exclude_unset=True))
    return RunRecord(tenant=job.tenant, response_id=job.response_id, thread_id=job.thread_id,
                     created_at=job.created_at, request=request, credentials=keys.keep(secrets))  # fmt: skip


def _trace(response_id: str, seq: int, event: StepTraced) -> StepTrace:
    return StepTrace(
        response_id=response_id,
        seq=seq,
        kind=event.kind,
        name=event.name,
        started_at=event.started_at,
        duration_s=event.ended_at - event.started_at,
        call_id=event.call_id,
        ttft_s=event.ttft_s,
        input_tokens=event.input_tokens,
        output_tokens=event.output_tokens,
        error=event.error,
        detail=event.detail,
    )
