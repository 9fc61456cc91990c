"""The runtime facade: everything the HTTP layer asks of Troupe.

:class:`Runtime` resolves a request's *thread* (its conversation, the chain its
``previous_response_id`` continues, or a new one), sends the turn to the
conversation host that owns the thread, and serves the read-side calls from
storage. It is transport-agnostic: the same class runs

* on Ray (:meth:`Runtime.on_ray`): conversation hosts live in the ingress replica
  (``replica``, the default) or are Ray actors (``pooled``, ``dedicated``), storage is the
  single ``StorageActor``, tools run in each node's tool runner actor or as Ray tasks;
* in-process (:meth:`Runtime.local`): the same host class without Ray, for
  tests of the HTTP layer and for development.

Example::

    runtime = Runtime.local(RuntimeSettings(storage_path=":memory:"))
    request = parse_create_request({"model": "sim", "input": "[[say hi]]"})
    response = await runtime.respond("", request)       # non-streaming
    async for batch in await runtime.stream("", request):  # streaming
        for event in batch: ...
    await runtime.close()

Every call of the API enters here; most only route to a host or to storage.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from troupe.agentloop.compaction import compacted_response, summary_request
from troupe.agentloop.writer import WireWriter
from troupe.protocol import (
    CreateResponseRequest,
    InvalidRequest,
    ProtocolError,
    ServerError,
    conversation_not_found,
    failed_response_error,
    model_not_found,
    new_response_id,
    normalize_input,
    parse_create_request,
    previous_response_not_found,
    thread_of_response,
)
from troupe.protocol.job import TurnJob
from troupe.runtime.agents import AgentService
from troupe.runtime.artifacts import ArtifactService
from troupe.runtime.automations import AutomationService
from troupe.runtime.console_calls import ConsoleCalls
from troupe.runtime.containers import ContainerService
from troupe.runtime.conversations import ConversationCalls, not_found
from troupe.runtime.environments import EnvironmentService
from troupe.runtime.guardrails import GuardrailRegistry
from troupe.runtime.host import HostClient
from troupe.runtime.hosting import HostFailed, Placement
from troupe.runtime.prompts import PromptCalls
from troupe.runtime.rag import StartIngest, VectorStores
from troupe.runtime.ray.placement import LocalPlacement
from troupe.runtime.runs import (
    LOST_RUN_MESSAGE,
    MAX_RESUMES,
    TOO_MANY_RESUMES,
    NoLiveRun,
    lost_run_record,
    run_snapshot,
)
from troupe.runtime.sessions import SessionService
from troupe.runtime.settings import RuntimeSettings
from troupe.runtime.store_client import StoreClient
from troupe.runtime.vaults import VaultService
from troupe.runtime.webhooks import WebhookService
from troupe.storage import Order, Page, QueryResult, RunRecord, StorageError
from troupe.storage.credentials import CREDENTIALS_NOT_KEPT, CredentialKeys, CredentialsUnavailable, restore

if TYPE_CHECKING:
    from troupe.observe.metrics import ScrapeView

__all__ = ["Runtime", "EventBatches", "TraceContext", "SharedActors", "start_shared_actors"]

log = logging.getLogger(__name__)

_START_WAIT_S = 10.0
"""How long a turn waits for its host to come back (a pooled host restarting after a crash,
a dedicated actor being recreated) before the request fails with HostFailed."""
_CONTAINER_SWEEP_S = 60.0
"""How often a runtime on Ray expires the containers idle past their time (each is also expired
the moment anything looks at it: the sweep frees their disk)."""
_RESUME_WAIT_S = 120.0
"""How long a follower of a run whose host died waits for the run to be live again (a host
process restarting on a loaded machine takes seconds); meanwhile the run is not stored."""

EventBatches = AsyncGenerator[list[dict[str, Any]], None]
TraceContext = Mapping[str, str] | None
"""The request's W3C trace context headers (``traceparent``, ``tracestate``), when traces are on."""
T = TypeVar("T")


def _uses_tool_runners(settings: RuntimeSettings) -> bool:
    return settings.tool_runner == "actor" and any(t.num_cpus is None for t in settings.tools)


async def _start_tool_runners(settings: RuntimeSettings) -> list[Any]:
    """One tool runner per live node, if any tool runs in one; their handles, once they are up.

    Ray ends an actor that is not detached when the last handle to it goes away: the runtime
    keeps these for as long as it lives.
    """
    if not _uses_tool_runners(settings):
        return []
    import ray

    from troupe.runtime.ray.tool_tasks import tool_runner

    runners = [tool_runner(settings.namespace, n["NodeID"]) for n in ray.nodes() if n["Alive"]]
    targets = tuple(t.target for t in settings.tools if t.num_cpus is None)
    await asyncio.gather(*(runner.ready.remote(targets) for runner in runners))
    return runners


@dataclass(frozen=True, kw_only=True)
class SharedActors:
    """Handles to the actors every ingress replica shares (:func:`start_shared_actors`)."""

    storage: Any
    """The storage actor."""
    tool_runners: tuple[Any, ...] = ()
    """A tool runner per node, if a tool runs in one."""
    hosts: tuple[Any, ...] = ()
    """The pooled hosts (``placement = "pooled"``)."""


def start_shared_actors(settings: RuntimeSettings) -> SharedActors:
    """Start, from this process, the actors every ingress replica shares: the storage actor, a
    tool runner per node (if a tool runs in one), the pooled hosts. Returns without waiting for
    them (the replicas' :meth:`Runtime.on_ray` does); hold the handles while the server runs.

    Ray ends an actor that is not detached with the process that started it. Started by the
    first ingress replica (as when Serve runs the application by itself), they die with that
    replica's process: Serve restarts the replica, which starts them again (the storage actor
    reopens the DuckDB file, seconds), and another replica's handles to them stay dead.
    ``troupe serve``'s own process lives exactly as long as the server, so it starts them
    (and, when it stops, ends the replicas and hosts before them: nothing is left running
    to find them gone).
    """
    import ray

    from troupe.runtime.ray.placement import PooledPlacement
    from troupe.runtime.ray.storage_actor import storage_actor
    from troupe.runtime.ray.tool_tasks import tool_runner

    runners = ()
    if _uses_tool_runners(settings):
        runners = tuple(tool_runner(settings.namespace, n["NodeID"]) for n in ray.nodes() if n["Alive"])
    hosts = tuple(PooledPlacement(settings).handles) if settings.placement == "pooled" else ()
    return SharedActors(storage=storage_actor(settings), tool_runners=runners, hosts=hosts)


class Runtime(ConversationCalls, PromptCalls, ConsoleCalls):
    """What the HTTP layer talks to. Build it with :meth:`local` or :meth:`on_ray`."""

    def __init__(
        self, settings: RuntimeSettings, *, store: StoreClient, placement: Placement, start_ingest: StartIngest | None = None
    ) -> None:
        self.settings = settings
        self.store = store
        self.placement = placement
        self._tool_runners: list[Any] = []
        """On Ray: the tool runner actors, held so that they live as long as the runtime."""
        self._pruner: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._moderation: GuardrailRegistry | None = None  # POST /v1/moderations, made on first use
        """Watchers of the durable runs started here (each resumes its run if the host dies),
        and resumes under way."""
        self._taking_over: set[str] = set()
        """Responses this runtime is resuming now (a poll during a host's restart starts no other)."""
        self._held: dict[str, tuple[CreateResponseRequest, int]] = {}
        """The requests of durable runs started here, credentials and all, while this runtime
        watches them (with how many watchers hold each): what a run resumed here is resumed
        with, as its row keeps no credentials in plain text (:mod:`troupe.storage.credentials`)."""
        self.credential_keys = CredentialKeys([k.get_secret_value() for k in settings.credentials_keys])
        self._scrapes: ScrapeView | None = None
        self.vector_stores = VectorStores(settings, store, start_ingest)
        """Files, vector stores, their ingestion and search (the Files and Vector Stores APIs)."""
        self.containers = ContainerService(settings.containers, store, stop=placement.fleet.stop,
                                           reserve=placement.fleet.reserve)  # fmt: skip
        """Containers and their files (the Containers API), and what container actors ask of them."""
        self.agents = AgentService(settings, store)
        """Saved agent definitions (the Agents API's agents)."""
        self.vaults = VaultService(settings, store, self.credential_keys)
        """Vaults and their credentials (the Agents API's vaults): what sessions' MCP tools are authorized with."""
        self.webhooks = WebhookService(settings, store, self.credential_keys)
        """Webhook endpoints and their delivery log (the deliveries go out beside the store)."""
        self.sessions = SessionService(self)
        """Agent sessions (the Agents API's sessions): turns as background responses on a conversation."""
        self.artifacts = ArtifactService(store, settings.containers)
        """Session artifacts: the files completed session turns published (the hosts publish them)."""
        self.environments = EnvironmentService(settings, store, self.containers, placement.fleet, self.credential_keys)
        """The Agents API's execution environments (on containers) and their templates."""
        self.automations = AutomationService(store, self.credential_keys, agents=self.agents,
                                             environments=self.environments, sessions=lambda: self.sessions,
                                             vaults=self.vaults)  # fmt: skip
        """Scheduled agents (the Agents API's automations) and their scheduler: started here on Ray,
        in process by the first automations call (:meth:`AutomationService.start`)."""

    # -- construction ------------------------------------------------------------

    @classmethod
    def local(cls, settings: RuntimeSettings = RuntimeSettings()) -> Runtime:
        """An in-process runtime: one host, tools run in-process, the store in a thread."""
        from troupe.runtime.store_client import AsyncStore

        on_commit = None
        if settings.telemetry.metrics:
            from troupe.observe.metrics import commit_recorder, process_registry

            on_commit = commit_recorder(process_registry())
        keys = CredentialKeys([k.get_secret_value() for k in settings.credentials_keys])
        store = AsyncStore.open(settings.storage_path, settings.storage_memory_limit, on_commit=on_commit,
                                containers_directory=settings.containers.directory,
                                webhooks=(settings.webhooks, keys))  # fmt: skip
        return cls(settings, store=store, placement=LocalPlacement(settings, store))

    @classmethod
    async def on_ray(cls, settings: RuntimeSettings = RuntimeSettings()) -> Runtime:
        """The Ray runtime; Ray must be initialized (``ray.init`` or inside Serve).

        Returns once every process the first request would otherwise wait for is up: the
        storage actor, the pooled hosts, and a tool runner on every node.
        """
        from troupe.runtime.ray.ingest import ray_ingestion
        from troupe.runtime.ray.placement import ray_placement
        from troupe.runtime.ray.storage_actor import JournalingStoreClient, RayStoreClient

        # Hosts in this process (the replica placement): its responses may be durable in its own
        # journal, without a round trip; its reads wait until the journal is shipped (with several
        # replicas, every replica's: ReplicaPlacement wires that).
        connect = JournalingStoreClient.connect if settings.placement == "replica" else RayStoreClient.connect
        store = await connect(settings)
        placement = ray_placement(settings, store)
        _, runners = await asyncio.gather(placement.warm(), _start_tool_runners(settings))
        ingestion = ray_ingestion(settings.ingest_num_cpus, store.handle)
        runtime = cls(settings, store=store, placement=placement, start_ingest=ingestion)
        runtime._tool_runners = runners
        await runtime.recover()
        runtime._pruner = asyncio.create_task(runtime._prune_event_logs_hourly())
        runtime._sweeper = asyncio.create_task(runtime._sweep_containers())
        runtime.automations.start()
        return runtime

    async def _prune_event_logs_hourly(self) -> None:
        while True:
            await asyncio.sleep(3600)
            with contextlib.suppress(Exception):  # the next hour tries again
                await self.store.prune_event_logs(time.time() - self.settings.event_log_retention_s)

    async def _sweep_containers(self) -> None:
        while True:
            await asyncio.sleep(_CONTAINER_SWEEP_S)
            with contextlib.suppress(Exception):  # the next sweep tries again
                await self.containers.sweep()

    async def close(self) -> None:
        for task in (self._pruner, self._sweeper):
            if task is not None:
                task.cancel()
        for task in self._tasks:
            task.cancel()
        if self._moderation is not None:
            await self._moderation.close()
        await self.automations.close()  # before the sessions, which its deliveries call
        await self.sessions.close()
        await self.vector_stores.close()
        await self.placement.close()
        await self.store.close()

    # -- observation -------------------------------------------------------------

    async def _running_containers(self) -> float | None:
        try:
            return float(await self.store.count_running_containers())
        except Exception:  # noqa: BLE001 - a scrape shows what it can
            return None

    async def metrics_text(self) -> str | None:
        """``GET /metrics``: Troupe's metrics in Prometheus' text format, summed over this process,
        the storage actor's and the hosts' (``troupe.observe.metrics``); None with metrics off."""
        if not self.settings.telemetry.metrics:
            return None
        from troupe.observe.metrics import ScrapeView, process_registry, render

        if self._scrapes is None:
            self._scrapes = ScrapeView()
        store, hosts, running = await asyncio.gather(
            self._store_metrics(), self.placement.metrics_snapshots(), self._running_containers()
        )
        snapshots = {"ingress": process_registry().snapshot(), **hosts}
        if running is not None:  # a gauge of the whole runtime, read from the store now
            snapshots["containers"] = {"token": "containers", "values": {"troupe_containers_running": {(): running}}}
        if store is not ...:
            snapshots["storage"] = store
        return render(self._scrapes.update(snapshots))

    async def _store_metrics(self) -> Any:
        """The storage actor's snapshot; ``...`` for a store in this process; None if it did not answer."""
        try:
            async with asyncio.timeout(5.0):
                snapshot = await self.store.metrics_snapshot()
        except Exception:  # noqa: BLE001 - restarting: its last snapshot stands
            return None
        return ... if snapshot is None else snapshot

    # -- responses ---------------------------------------------------------------

    def model_names(self) -> list[str]:
        return [m.name for m in self.settings.models]

    async def moderations(self, tenant: str, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /v1/moderations``: the texts classified by a configured guardrail
        (:meth:`GuardrailRegistry.moderations`)."""
        return await self._moderator().moderations(body)

    def _moderator(self) -> GuardrailRegistry:
        if self._moderation is None:
            self._moderation = GuardrailRegistry(self.settings)
        return self._moderation

    async def stream(self, tenant: str, request: CreateResponseRequest, *, trace: TraceContext = None) -> EventBatches:
        """Start a response; its wire events in batches, ending with the terminal event.

        A host that dies mid-stream ends the stream with an ``error`` event and
        ``response.failed`` (``server_error``), numbered on from the last event. A turn that
        had reached its first tool step goes on in the background from its last checkpoint
        (the error says so): ``follow_response`` streams it again.

        Raises (before anything is streamed):
            InvalidRequest, NotFound: the request does not fit (unknown model,
                unknown ``previous_response_id`` or ``conversation``, bad input items).
            HostFailed: no host could start the turn.
        """
        batches = await self._start(tenant, request, trace=trace)
        return _failures_as_events(batches, resumed=lambda rid: self._resume_lost(tenant, rid, request))

    async def _resume_lost(
        self, tenant: str, response_id: str, request: CreateResponseRequest | None = None
    ) -> bool:
        """After its host died: resume ``response_id`` in the background if it is durable and
        not stored (:meth:`_take_over`, in a task); whether it goes on. ``request``: the one it
        was made of, when the caller has it (with its credentials)."""
        run = await self.store.get_run(tenant, response_id)
        if run is None or await self.store.get_response(tenant, response_id) is not None:
            return False
        if request is None:
            self._spawn(self._take_over_logged(run))
            return True
        self._hold(response_id, request)

        async def take_over() -> None:
            try:
                await self._take_over_logged(run)
            finally:
                self._release(response_id)

        self._spawn(take_over())
        return True

    async def _take_over_logged(self, run: RunRecord) -> None:
        try:
            await self._take_over(run)
        except Exception:  # the next read of the response (or the next start) tries again
            log.exception("response %s: its host died, and it could not be resumed", run.response_id)

    def _request_of(self, run: RunRecord) -> CreateResponseRequest:
        """The request a lost run is resumed with: as this runtime holds it, or as its row keeps
        it with its credentials put back.

        Raises:
            CredentialsUnavailable: the row keeps none of the credentials the request carried.
        """
        if run.response_id in self._held:
            return self._held[run.response_id][0]
        return parse_create_request(restore(run.request, self.credential_keys.open(run.credentials)))

    async def respond(self, tenant: str, request: CreateResponseRequest, *, trace: TraceContext = None) -> dict[str, Any]:
        """Run a response to the end; the final Response (non-streaming).

        Raises:
            HostFailed: the host died during the turn (a 500 ``server_error``).
        """
        final: dict[str, Any] | None = None
        async for batch in await self._start(tenant, request, stream=False, trace=trace):
            for event in batch:
                if "response" in event:
                    final = event["response"]
        if final is None:  # pragma: no cover - every terminal event carries the response
            raise ServerError("The response ended without a result.")
        return final

    async def background(
        self, tenant: str, request: CreateResponseRequest, *, trace: TraceContext = None, response_id: str | None = None
    ) -> dict[str, Any]:
        """Start a background response (``background: true``); the Response at once, ``queued``
        (always, as OpenAI's: the snapshot of its ``response.created`` event). It runs on its
        conversation's host; ``get_response`` shows its progress (``in_progress``, then how it
        ended) and ``cancel_response`` stops it.

        ``response_id``: the id to give it (:func:`~troupe.protocol.new_response_id` of its
        conversation), when the caller must name it before it starts (a session's turn).

        Raises: as :meth:`stream`, before anything runs.
        """
        job = await self._job(tenant, request, trace, response_id=response_id)

        async def start(host: HostClient) -> dict[str, Any]:
            return await host.start_background(job)

        response = await self._on_host(job, start)
        self._watch(job)
        return response

    def _watch(self, job: TurnJob) -> None:
        """Resume ``job``'s background run if its host dies before the run ends."""

        self._hold(job.response_id, job.request)

        async def watch() -> None:
            try:
                host = await self.placement.running_host(job.thread_id)
                try:
                    if host is not None:
                        await host.run_ended(job.tenant, job.response_id)
                        return
                except HostFailed:
                    pass
                run = await self.store.get_run(job.tenant, job.response_id)
                if run is not None:  # not stored: lost with its host
                    await self._take_over_logged(run)
            finally:
                self._release(job.response_id)

        self._spawn(watch())

    def _hold(self, response_id: str, request: CreateResponseRequest) -> None:
        """Keep ``request`` for a resumption of ``response_id`` until :meth:`_release` (counted:
        a watcher that resumes the run starts the next watcher before it releases its hold)."""
        self._held[response_id] = (request, self._held.get(response_id, (request, 0))[1] + 1)

    def _release(self, response_id: str) -> None:
        request, holds = self._held.pop(response_id)
        if holds > 1:
            self._held[response_id] = (request, holds - 1)

    def _spawn(self, work: Awaitable[Any]) -> None:
        """Run ``work`` in a task this runtime holds (and cancels when it closes)."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _start(
        self, tenant: str, request: CreateResponseRequest, *, stream: bool = True, trace: TraceContext = None
    ) -> EventBatches:
        job = await self._job(tenant, request, trace)

        async def start(host: HostClient) -> EventBatches:
            batches = host.respond(job, stream=stream)
            # Pull the first batch now so a bad request fails as an HTTP error, not mid-stream.
            first = await anext(batches)
            return _prepend(first, batches)

        return await self._on_host(job, start)

    async def _job(
        self, tenant: str, request: CreateResponseRequest, trace: TraceContext = None, *, response_id: str | None = None
    ) -> TurnJob:
        # Before the model is called, and before any host: a prompt that does not resolve is an HTTP error.
        request = await self.resolve_prompt(tenant, request)
        thread_id = await self._thread_of(tenant, request)
        if self.placement.would_start_process(thread_id) and self.settings.model(request.model) is None:
            raise model_not_found(request.model)  # the host checks the model; no process starts for that
        if request.moderation is not None:  # its model must name a guardrail: a 400 before any host
            self._moderator().moderator(request.moderation.get("model"))
        for i, name in enumerate(request.guardrails or ()):
            if self.settings.guardrail(name) is None:
                known = ", ".join(repr(g.name) for g in self.settings.guardrails) or "none is configured"
                raise InvalidRequest(f"Invalid value for 'guardrails[{i}]': unknown guardrail {name!r} ({known}).",
                                     param=f"guardrails[{i}]", code="invalid_value")  # fmt: skip
        if self.settings.telemetry.traces == "off":
            trace = None
        return TurnJob(
            tenant=tenant,
            request=request,
            response_id=response_id or new_response_id(thread_id),
            created_at=int(time.time()),
            thread_id=thread_id,
            traceparent=trace.get("traceparent") if trace else None,
            tracestate=trace.get("tracestate") if trace else None,
        )

    async def _on_host(
        self, job: TurnJob, start: Callable[[HostClient], Awaitable[T]], *, wait_s: float = _START_WAIT_S
    ) -> T:
        """``start(host)`` on the job's host, trying a fresh host while none can take it (for ``wait_s``)."""
        deadline = time.monotonic() + wait_s
        for attempt in itertools.count():
            try:
                host = await self.placement.host_for(job.thread_id)  # may fail too: the thread's replica is down
                return await start(host)
            except HostFailed:
                # A host that just died or exited idle: try a fresh one. Ray releases a dead
                # actor's name asynchronously, hence the short, growing pauses. The call may have
                # reached a host that is only unavailable for a moment (Ray cannot tell): the
                # same host answers the run it took, instead of starting it twice.
                self.placement.forget(job.thread_id)
                pause = min(0.05 * 2**attempt, 0.5)
                if time.monotonic() + pause > deadline:
                    raise
                await asyncio.sleep(pause)
        raise AssertionError("unreachable")

    async def _thread_of(self, tenant: str, request: CreateResponseRequest) -> str:
        """The thread a request continues, for routing it to the thread's host.

        Nothing is read from storage on the way: the conversation id is the thread id, and a
        response id names its thread (:func:`~troupe.protocol.new_response_id`). The host
        checks that the conversation or response exists, from its message cache when the
        thread is warm. Two exceptions read storage here: a response id of the old shape,
        which names no thread; and a thread whose host would be a new process (dedicated
        placement), which an id that exists nowhere must not start.
        """
        if request.conversation_id is not None:
            thread = request.conversation_id
            if self.placement.would_start_process(thread):
                if await self.store.get_conversation(tenant, thread) is None:
                    raise conversation_not_found(thread)
            return thread
        if request.previous_response_id is not None:
            named = thread_of_response(request.previous_response_id)
            if named is None or self.placement.would_start_process(named):
                named = await self.store.get_thread_id(tenant, request.previous_response_id)
                if named is None:
                    raise previous_response_not_found(request.previous_response_id)
            return named
        return self.placement.new_thread_id()

    async def get_response(self, tenant: str, response_id: str) -> dict[str, Any]:
        """A stored response, or one its host runs now (a background run's progress)."""
        found = await self.store.get_response(tenant, response_id)
        if found is None:
            found = await self._live(tenant, response_id, lambda host: host.live_response(tenant, response_id))
        if found is None:  # it may have been stored meanwhile
            found = await self.store.get_response(tenant, response_id)
        if found is None and (run := await self.store.get_run(tenant, response_id)) is not None:
            found = await self._take_over(run, wait=False)  # accepted, neither running nor stored: its host died
        if found is None:
            raise not_found("Response", response_id, "response_id")
        return found

    async def recover(self) -> int:
        """After a start: take over every background response that no host runs and none
        stored (the server stopped, or its host died, while it ran): resume it from its last
        checkpoint, or fail it if it is too old (:meth:`_take_over`). Then ingest again the
        files whose ingestion died with the server, drop event logs past their retention, and
        expire the containers idle past their time.
        How many responses were taken over.

        :meth:`on_ray` calls it; an in-process runtime on a file may.
        """
        taken = 0
        for run in await self.store.unfinished_runs():

            def ask(host: HostClient, run: RunRecord = run) -> Awaitable[dict[str, Any] | None]:
                return host.live_response(run.tenant, run.response_id)

            live = await self._live(run.tenant, run.response_id, ask)
            if live is None and await self.store.get_response(run.tenant, run.response_id) is None:
                await self._take_over(run)
                taken += 1
        await self.vector_stores.resume_ingestion()
        await self.store.prune_event_logs(time.time() - self.settings.event_log_retention_s)
        await self.containers.sweep()
        return taken

    async def _take_over(self, run: RunRecord, *, wait: bool = True) -> dict[str, Any]:
        """A durable run that no host runs and none stored: resume it on its conversation's
        host from its last checkpoint; or store it ``failed`` when it was created more than
        ``resume_within_s`` ago, or its host failed :data:`MAX_RESUMES` times. Its Response.

        ``wait=False`` (a read): answer at once with the run as its checkpoints left it, and
        resume it in a task (a host restarting after a crash takes seconds).

        Callers that find the same lost run at once (a poll, the watcher, another replica)
        resume it once: the run is claimed (``claim_run``) before it is resumed, and a runtime
        resuming it already starts no other resume.
        """
        rid = run.response_id
        live = await self._live(run.tenant, rid, lambda h: h.live_response(run.tenant, rid))
        if live is not None:  # resumed already (another caller saw the same death)
            return live
        if time.time() - run.created_at > self.settings.resume_within_s:
            return await self._fail_lost(run, LOST_RUN_MESSAGE)
        if run.attempt >= MAX_RESUMES:
            return await self._fail_lost(run, TOO_MANY_RESUMES.format(attempts=run.attempt + 1))
        try:
            # Its stored request names its prompt's version; the prelude is made again from it.
            request = await self.resolve_prompt(run.tenant, self._request_of(run))
        except CredentialsUnavailable as exc:
            log.warning("response %s: not resumed, its credentials are unavailable (%s)", rid, exc)
            return await self._fail_lost(run, CREDENTIALS_NOT_KEPT)
        except ProtocolError as exc:  # its prompt was deleted meanwhile
            return await self._fail_lost(run, f"The response could not be resumed: {exc.message}")
        if rid in self._taking_over or not wait:
            if rid not in self._taking_over:
                self._spawn(self._take_over_logged(run))
            return await self._as_checkpointed(run)
        self._taking_over.add(rid)
        try:
            if await self.store.claim_run(run.tenant, rid, run.attempt) is None:  # another caller took it
                return await self._live(run.tenant, rid, lambda h: h.live_response(run.tenant, rid)) \
                    or await self.store.get_response(run.tenant, rid) or await self._as_checkpointed(run)  # fmt: skip
            job = TurnJob(tenant=run.tenant, request=request, response_id=rid,
                          created_at=run.created_at, thread_id=run.thread_id)  # fmt: skip

            async def resume(host: HostClient) -> dict[str, Any]:
                return await host.resume_background(job)

            response = await self._on_host(job, resume, wait_s=_RESUME_WAIT_S)
        finally:
            self._taking_over.discard(rid)
        self._watch(job)
        return response

    async def _as_checkpointed(self, run: RunRecord) -> dict[str, Any]:
        """The Response of a run being resumed, as its last checkpoint left it (``in_progress``)."""
        return run_snapshot(run, await self._checkpointed_events(run))

    async def _checkpointed_events(self, run: RunRecord) -> list[dict[str, Any]]:
        """The wire events a run's checkpoints hold, in order."""
        steps = await self.store.run_steps(run.tenant, run.response_id)
        return [event for step in steps for event in step.data["events"]]

    async def _fail_lost(self, run: RunRecord, message: str) -> dict[str, Any]:
        """Store a durable response whose run was lost as ``failed``, with the output and the
        event log its checkpoints hold; the Response."""
        record = lost_run_record(run, message, await self._checkpointed_events(run))
        try:
            await self.store.write_response(record)
        except StorageError:  # failed by another caller meanwhile
            return await self.store.get_response(run.tenant, run.response_id) or record.response
        return record.response

    async def compact(self, tenant: str, request: CreateResponseRequest) -> dict[str, Any]:
        """``POST /v1/responses/compact``: the thread (``previous_response_id``) and the input,
        compacted (:mod:`troupe.agentloop.compaction`): its user messages and a summary the
        model wrote. Nothing is stored.

        Raises: as :meth:`respond`, before the model is called.
        """
        thread: list[dict[str, Any]] = []
        if request.previous_response_id is not None:
            history = await self.store.chain_items(tenant, request.previous_response_id)
            if history is None:
                raise previous_response_not_found(request.previous_response_id)
            thread += history
        thread += normalize_input(request.input)
        summary = await self.respond(tenant, summary_request(request))
        if summary["status"] != "completed":
            raise failed_response_error(summary.get("error"))
        return compacted_response(thread, summary)

    async def follow_response(self, tenant: str, response_id: str, starting_after: int | None = None) -> EventBatches:
        """A response's events after sequence number ``starting_after`` (all when None): live
        from its host while it runs, then to its terminal event; replayed from its stored event
        log once it has ended. A run whose host dies meanwhile is resumed, and followed on.

        Raises (before anything is streamed):
            NotFound: no such response.
            InvalidRequest: it keeps no event log (it ran with ``store=false``, or its log was
                pruned, or the server keeps only durable responses' logs).
        """
        after = -1 if starting_after is None else starting_after
        live = await self._follow_live(tenant, response_id, after)
        if live is None and await self._resume_lost(tenant, response_id):
            live = await self._follow_live(tenant, response_id, after, wait=True)
        if live is not None:
            return _failures_as_events(self._followed_on(tenant, response_id, after, live))
        events = await self.store.response_events(tenant, response_id)
        if events is None:
            await self.get_response(tenant, response_id)  # 404 when there is no such response
            raise InvalidRequest(
                "This response has no event log to replay: it was pruned after the server's event_log_retention_s, "
                "or the server keeps only durable responses' logs (event_logs = \"durable\").",
                param="stream",
            )
        return _replay([e for e in events if e["sequence_number"] > after])

    async def _follow_live(self, tenant: str, response_id: str, after: int, *, wait: bool = False) -> EventBatches | None:
        """The run's events after ``after`` from the host running it; None if no host runs it
        (``wait``: a run being resumed, until its new host has it)."""
        deadline = time.monotonic() + (_RESUME_WAIT_S if wait else 0)
        while True:
            host = await self._running_host(response_id)
            if host is not None:
                batches = host.follow(tenant, response_id, after)
                try:
                    first = await anext(batches)  # [] while it runs; NoLiveRun when it does not
                except (NoLiveRun, HostFailed, StopAsyncIteration):
                    pass
                else:
                    return _prepend(first, batches)
            if time.monotonic() > deadline or await self.store.get_run(tenant, response_id) is None:
                return None
            await asyncio.sleep(0.05)

    async def _followed_on(self, tenant: str, response_id: str, after: int, batches: EventBatches) -> EventBatches:
        """``batches``, and after a host death the resumed run's, from the last event sent."""
        while True:
            try:
                async with contextlib.aclosing(batches):
                    async for batch in batches:
                        if batch:
                            after = batch[-1]["sequence_number"]
                        yield batch
                return
            except HostFailed:
                resumed = await self._resume_lost(tenant, response_id)
                again = await self._follow_live(tenant, response_id, after, wait=True) if resumed else None
                if again is None:  # it may have ended meanwhile (the follower heard of the death late)
                    stored = await self.store.response_events(tenant, response_id)
                    if stored is None:
                        raise
                    again = _replay([e for e in stored if e["sequence_number"] > after])
                batches = again

    async def cancel_response(self, tenant: str, response_id: str) -> dict[str, Any]:
        """Cancel a running (or queued) response, background or streaming: the Response,
        ``cancelled``. Cancelling a cancelled response answers it again.

        Raises:
            NotFound: no such response.
            InvalidRequest: it has already ended otherwise (``completed``, ``failed``, …).
        """
        found = await self._live(tenant, response_id, lambda host: host.cancel(tenant, response_id))
        if found is None:
            found = await self.store.get_response(tenant, response_id)
        if found is None:
            raise not_found("Response", response_id, "response_id")
        if found["status"] != "cancelled":
            raise InvalidRequest(
                f"Cannot cancel a response with status '{found['status']}': only a queued or in-progress "
                "response can be cancelled.",
                param="response_id",
            )
        return found

    async def steer_response(self, tenant: str, response_id: str) -> bool:
        """Ask a running response to end at its next safe boundary, ``incomplete`` with reason
        ``steered`` (once its tool calls have results, before its next model call); a response
        whose last turn is its answer completes as it would. False: it is not running."""
        host = await self._running_host(response_id)
        if host is None:
            return False
        try:
            return await host.steer(tenant, response_id)
        except HostFailed:
            return False

    async def _live(
        self, tenant: str, response_id: str, ask: Callable[[HostClient], Awaitable[dict[str, Any] | None]]
    ) -> dict[str, Any] | None:
        """``ask`` the host that would run ``response_id`` now; None when no host could."""
        host = await self._running_host(response_id)
        if host is None:
            return None
        try:
            return await ask(host)
        except HostFailed:
            return None

    async def _running_host(self, response_id: str) -> HostClient | None:
        """The host of the thread ``response_id`` names, if one is up (a host is never started
        just to be asked about a response)."""
        thread = thread_of_response(response_id)
        return None if thread is None else await self.placement.running_host(thread)

    async def delete_response(self, tenant: str, response_id: str) -> dict[str, Any]:
        if not await self.store.delete_response(tenant, response_id):
            raise not_found("Response", response_id, "response_id")
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    async def list_responses(
        self, tenant: str, *, model: str | None = None, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        return await self.store.list_responses(tenant, model=model, after=after, limit=limit, order=order)

    async def list_input_items(
        self, tenant: str, response_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        page = await self.store.list_input_items(tenant, response_id, after=after, limit=limit, order=order)
        if page is None:
            raise not_found("Response", response_id, "response_id")
        return page

    async def search_vector_stores(
        self, tenant: str, vector_store_ids: list[str], query: str | list[str], *, max_num_results: int = 10,
        filters: dict[str, Any] | None = None, ranking_options: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Search vector stores (hybrid BM25 and vector ranking): each result ``{"vector_store_id",
        "file_id", "filename", "chunk_index", "text", "score", "attributes"}``, best first.

        The same as a conversation host's ``vector_stores.search`` (what the ``file_search``
        tool calls there); arguments, results and errors: :meth:`VectorStores.search`.
        """
        return await self.vector_stores.search(
            tenant, vector_store_ids, query, max_num_results=max_num_results, filters=filters,
            ranking_options=ranking_options,
        )  # fmt: skip

    async def step_traces(self, tenant: str, response_id: str) -> list[dict[str, Any]]:
        """A stored response's step traces as plain dicts (for analytics and tests)."""
        await self.get_response(tenant, response_id)
        return [
            {f: getattr(t, f) for f in t.__slots__}
            for t in await self.store.step_traces(tenant, response_id)
        ]

    async def run_sql(self, sql: str, *, max_rows: int, timeout_s: float) -> QueryResult:
        """One read-only SQL statement over every tenant's history (an operator's; see
        :meth:`troupe.storage.contract.Console.run_sql`)."""
        return await self.store.run_sql(sql, max_rows=max_rows, timeout_s=timeout_s)


async def _failures_as_events(
    batches: EventBatches, *, resumed: Callable[[str], Awaitable[bool]] | None = None
) -> EventBatches:
    """Turn a host failure mid-stream into ``error`` + ``response.failed`` (Open Responses' rule).

    ``resumed(response_id)``: resume the response in the background if it can be; whether it
    was (the error then tells the client where to find it).
    """
    last_seq, snapshot = -1, None
    async with contextlib.aclosing(batches):
        try:
            async for batch in batches:
                for event in batch:
                    last_seq = event["sequence_number"]
                    snapshot = event.get("response", snapshot)
                yield batch
        except HostFailed as exc:
            message = exc.message
            if resumed is not None and snapshot is not None and await resumed(snapshot["id"]):
                message = (
                    "The conversation host failed during the response. It goes on in the background from its "
                    f"last step: retrieve it, or stream it again with starting_after={last_seq}."
                )
            error = {"code": "server_error", "message": message}
            yield WireWriter.failure_after(snapshot, last_seq, error, int(time.time()))


async def _replay(events: list[dict[str, Any]]) -> EventBatches:
    yield events


async def _prepend(first: list[dict[str, Any]], rest: EventBatches) -> EventBatches:
    # aclosing: when the client goes away and this generator is closed, the turn is closed too.
    async with contextlib.aclosing(rest):
        yield first
        async for batch in rest:
            yield batch
