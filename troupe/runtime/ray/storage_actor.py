"""The storage actor: the single owner of the DuckDB file, and the clients that reach it.

DuckDB allows one writing process, so exactly one named actor opens the file,
pinned to the head node; the runtime, the hosts and evaluation reach it through
:class:`RayStoreClient` (the :class:`~troupe.runtime.store_client.StoreClient` interface), which
sends every store contract call to the actor's one ``call(method, args, kwargs)``. A finished response is
durable once it is in the response journal beside the file (``troupe.storage.journal``);
DuckDB gets it behind, many per transaction. Reads run on the store's thread once what was
written before them is in DuckDB.

:class:`JournalingStoreClient` saves the round trip to the actor on the way to the durable
point, for a process on the actor's own node that is the only one to read what it writes
(the ingress replica, which hosts the conversations under ``placement = "replica"``): it
journals each finished response in a writer journal of its own, on the same disk, and ships
the records to the actor in batches behind. Its other calls first wait until what it
journaled is shipped, so it reads its own writes; those of the areas apart from the responses
(:data:`~troupe.storage.contract.APART_FROM_RESPONSES`: sessions, agents, files…) do not wait.
A writer that dies leaves its journal to
:func:`troupe.storage.journal.adopt_orphans`, which the actor runs when it opens the file and
whenever a new writer connects.

The actor leaves an owner file beside the DuckDB file (``<path>.owner.json``: its Ray
cluster's address, its namespace, its process id), so that ``troupe sql`` can reach it while
it holds the file (:mod:`troupe.runtime.ray.live_sql`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import psutil
import ray
from pydantic import SecretStr
from ray.exceptions import ActorUnavailableError, RayActorError

from troupe.runtime.ray.actors import STORAGE_ACTOR_NAME, start_actor
from troupe.runtime.ray.calls import ray_result, ray_result_sync
from troupe.runtime.ray.live_sql import Owner, owner_path, write_owner
from troupe.runtime.settings import RuntimeSettings, WebhookSettings
from troupe.runtime.store_client import ROUTES, AsyncStore, Forwarding, NotAStoreMethod, journal_of, open_store
from troupe.storage import ResponseRecord, RunRecord, RunStep, StorageError, StorageUnavailable
from troupe.storage.contract import APART_FROM_RESPONSES
from troupe.storage.credentials import CredentialKeys
from troupe.storage.duckdb_store import DuckDBStore
from troupe.storage.group_commit import WriterStopped
from troupe.storage.journal import JournaledWriter, adopt_orphans

__all__ = ["StorageService", "RayStoreClient", "JournalingStoreClient", "storage_actor", "STORAGE_ACTOR_NAME"]


logger = logging.getLogger(__name__)

RESTART_WAIT_S = 60.0
"""How long a finished response waits for a restarting storage actor (it reopens the DuckDB
file and adopts the journals) before the turn fails."""


class StorageService(AsyncStore):
    """The storage actor's body: an :class:`AsyncStore` over the DuckDB file at ``path``.

    ``namespace``: the Ray namespace the actor is named in, for its owner file (an actor's
    runtime context names its creator's job's namespace, which may be another). ``metrics``:
    record the store's commits in this process's metrics registry (``troupe.observe``).
    """

    def __init__(
        self, path: str, memory_limit: str = "", namespace: str | None = None, metrics: bool = False,
        containers_directory: str = "", webhooks: WebhookSettings | None = None, keys: Sequence[SecretStr] = (),
    ) -> None:  # fmt: skip
        journal = journal_of(path)
        self._journal_dir = None if journal is None else os.path.abspath(journal)
        self._positions: dict[str, int] = {}
        """Writer journals' positions as last stored here (a cache of ``journal_positions``)."""
        self._on_commit = None
        if metrics:
            from troupe.observe.metrics import RayExport, commit_recorder, process_registry

            self._on_commit = commit_recorder(process_registry())
            RayExport.start_once(process_registry())
        # The outbox's deliverer lives here, beside the one store (troupe.runtime.webhook_delivery).
        deliver = None if webhooks is None else (webhooks, CredentialKeys([k.get_secret_value() for k in keys]))
        super().__init__(open_store(path, memory_limit), journal=journal, on_commit=self._on_commit,
                         containers_directory=containers_directory, webhooks=deliver)  # fmt: skip
        if journal is not None and ray.is_initialized():
            self._leave_owner_file(path, namespace or ray.get_runtime_context().namespace)

    @staticmethod
    def _leave_owner_file(path: str, namespace: str) -> None:
        """Say beside the file how to reach this actor: ``troupe sql`` asks it while the file is
        locked (:mod:`troupe.runtime.ray.live_sql`)."""
        context = ray.get_runtime_context()
        owner = Owner(
            address=context.gcs_address,
            namespace=namespace,
            pid=os.getpid(),
            auth_mode=os.environ.get("RAY_AUTH_MODE"),  # Ray's workers inherit the cluster's
        )
        try:
            write_owner(path, owner)
        except OSError as exc:  # the store works without it; only `troupe sql` cannot find it
            logger.warning("cannot write %s (troupe sql will not find this server): %s", owner_path(path), exc)

    async def ping(self) -> bool:
        return True

    async def node_id(self) -> str:
        """The Ray node this actor runs on: where the containers' directories are, unless
        ``[containers] directory`` names a filesystem every node shares."""
        return str(ray.get_runtime_context().get_node_id())

    async def metrics_snapshot(self) -> dict[str, Any]:
        """This process's metrics: its group commits (``troupe.observe.metrics.Registry.snapshot``)."""
        from troupe.observe.metrics import process_registry

        return process_registry().snapshot()

    async def memory(self) -> dict[str, Any]:
        """DuckDB's memory limit and use in this actor (:meth:`DuckDBStore.memory`), and the
        process's resident memory (``rss_bytes``)."""
        usage = await self._run(self._duckdb.memory)
        return {**usage, "rss_bytes": psutil.Process().memory_info().rss}

    async def journal_home(self) -> tuple[str, str] | None:
        """Where writer journals go: ``(node id, journal directory)``; None for a store in memory."""
        if self._journal_dir is None:
            return None
        return ray.get_runtime_context().get_node_id(), self._journal_dir

    async def adopt_orphans(self) -> int:
        """Store what the journals of writers that are gone hold; how many records that was."""
        if self._journal_dir is None:
            return 0
        adopted = await self._run(adopt_orphans, self._duckdb, self._journal_dir)
        self._positions.clear()  # the adopted journals' positions are forgotten
        return adopted

    async def apply_journal(self, journal: str, records: list[ResponseRecord], last_lsn: int) -> None:
        """Store a batch of the writer journal ``journal`` ending at ``last_lsn``, once.

        A batch is stored whole or not at all, with its position; a batch sent again (its
        reply was lost) is recognised by the position and not stored twice.
        """
        begun = time.perf_counter()
        await self._run(self._apply_journal, journal, records, last_lsn)
        if self._on_commit is not None:
            self._on_commit("duckdb", len(records), time.perf_counter() - begun)

    def _apply_journal(self, journal: str, records: list[ResponseRecord], last_lsn: int) -> None:
        applied = self._positions.get(journal)
        if applied is None:  # a statement costs ~0.7 ms: read the position once per writer
            applied = self._duckdb.journal_lsn(journal)
        if applied < last_lsn:
            self._duckdb.write_responses(records, journal_lsn=last_lsn, journal=journal)
            applied = last_lsn
        self._positions[journal] = applied

    @property
    def _duckdb(self) -> DuckDBStore:
        assert isinstance(self.store, DuckDBStore)
        return self.store


def storage_actor(settings: RuntimeSettings) -> ray.actor.ActorHandle:
    """The storage actor of this Ray namespace, created on the head node if it is not running."""
    return start_actor(
        StorageService,
        settings.storage_path,
        settings.storage_memory_limit,
        settings.namespace,
        settings.telemetry.metrics,
        settings.containers.directory,
        settings.webhooks,
        settings.credentials_keys,
        name=STORAGE_ACTOR_NAME,
        namespace=settings.namespace,
        resources={"node:__internal_head__": 0.001},  # the DuckDB file lives on the head node's disk
    )


class RayStoreClient(Forwarding):
    """The :class:`~troupe.runtime.store_client.StoreClient` interface, through the storage actor.

    Every contract method goes through the actor's one ``call`` (:meth:`AsyncStore.call`):
    one Ray call per store call; a name the contract does not declare is refused here, before
    anything is sent. The store's own errors (StorageError, NotFound) arrive as themselves.
    """

    def __init__(self, handle: ray.actor.ActorHandle) -> None:
        self.handle = handle
        self._drain_peers: Callable[[], Awaitable[None]] | None = None

    async def _call(self, method: Any, *args: Any) -> Any:
        """``method`` of the actor (``self.handle.<name>``), called with these arguments.

        A call that reached the actor's old process while it restarts (Ray's
        ``ActorUnavailableError``) raises :class:`StorageUnavailable`: the caller decides
        whether to try again (:meth:`write_response` does; the HTTP layer answers 503)."""
        try:
            return await ray_result(method.remote(*args))
        except ActorUnavailableError as exc:
            raise StorageUnavailable(f"the storage actor is restarting: {exc}") from exc

    @classmethod
    async def connect(cls, settings: RuntimeSettings) -> RayStoreClient:
        """The storage actor of ``settings.namespace`` (started if need be), once it answers."""
        handle = storage_actor(settings)
        await ray_result(handle.ping.remote())
        return cls(handle)

    @classmethod
    def by_name(cls, settings: RuntimeSettings) -> RayStoreClient:
        """From inside another actor: the running storage actor (created by the runtime)."""
        return cls(ray.get_actor(STORAGE_ACTOR_NAME, namespace=settings.namespace))

    async def call(self, method: str, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        if method not in ROUTES:
            raise NotAStoreMethod(method)
        if method not in APART_FROM_RESPONSES:  # it may read what some writer acknowledged
            await self._reads_ready()
        return await self._call(self.handle.call, method, args, kwargs)

    def drain_peers_first(self, drain: Callable[[], Awaitable[None]]) -> None:
        """With several ingress replicas: ``drain`` ships the other replicas' journals, and every
        store call that may read responses waits for it first, so that it sees every response
        any replica acknowledged (:meth:`troupe.runtime.ray.replicas.Peers.drain`). A replica
        whose storage actor is on another node has no journal of its own, and needs this all
        the same: the others' journals are theirs."""
        self._drain_peers = drain

    async def _reads_ready(self) -> None:
        """Return once what other writers acknowledged is in the storage actor."""
        if self._drain_peers is not None:
            await self._drain_peers()

    async def write_response(self, record: ResponseRecord) -> None:
        """Store a finished response. When the actor was restarting (a call that reached its old
        process fails with ``ActorUnavailableError``), wait until it answers again, and send the
        record again unless the first send was stored before the old process ended."""
        try:
            await self._call(self.handle.write_response, record)
        except StorageUnavailable:
            await self._until_back(RESTART_WAIT_S)
            if await self.call("get_response", (record.tenant, record.response["id"])) is None:
                await self._call(self.handle.write_response, record)

    async def _until_back(self, timeout_s: float) -> None:
        """Wait until the storage actor answers a ping; give up (raise) after ``timeout_s``."""
        deadline, delay = time.monotonic() + timeout_s, 0.05
        while True:
            try:
                await ray_result(self.handle.ping.remote())
                return
            except ActorUnavailableError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def start_run(self, run: RunRecord) -> None:
        await self._call(self.handle.start_run, run)

    async def checkpoint_steps(self, steps: Sequence[RunStep], start: RunRecord | None = None) -> None:
        await self._call(self.handle.checkpoint_steps, list(steps), start)

    async def metrics_snapshot(self) -> dict[str, Any] | None:
        return await self._call(self.handle.metrics_snapshot)

    async def flush(self) -> None:
        await self._call(self.handle.flush)

    async def close(self) -> None:
        """The actor outlives any one client; nothing to release here."""


class _ActorJournalStore:
    """The storage actor as the store behind a writer journal; called on the journal's thread."""

    def __init__(self, handle: ray.actor.ActorHandle) -> None:
        self.handle = handle
        self.closing = False
        """Set when the writer closes: the actor being away then strands the records instead
        of waiting for it (they stay in the journal, adopted later)."""

    def journal_lsn(self, journal: str = "") -> int:
        return 0  # a writer journal is new: nothing of it is stored yet

    def write_responses(
        self, records: Sequence[ResponseRecord], *, journal_lsn: int | None = None, journal: str = ""
    ) -> None:
        """Ship a batch; while the actor is away (restarting), wait and send it again.

        The records are durable in the journal meanwhile, and a resent batch that the actor
        had stored is not stored twice (:meth:`StorageService.apply_journal`).
        """
        delay = 0.05
        while True:
            try:
                ray_result_sync(self.handle.apply_journal.remote(journal, list(records), journal_lsn), own=StorageError)
                return
            except RayActorError as exc:  # ActorDiedError, ActorUnavailableError
                if self.closing:
                    raise WriterStopped(f"the storage actor is unavailable ({exc})") from exc
                logger.warning("the storage actor is unavailable (%s); journaled responses wait", exc)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)


class JournalingStoreClient(RayStoreClient):
    """A :class:`RayStoreClient` whose ``write_response`` is durable in a writer journal of this
    process (see the module docstring); every call that may read responses first waits for
    what was journaled before it to reach the actor. Only for the one process that reads what
    it writes.

    Args:
        handle: the storage actor.
        directory: the actor's journal directory (:meth:`StorageService.journal_home`),
            on this node.
        apply_delay_s: the most a journaled record waits for company before it is shipped.
    """

    def __init__(
        self,
        handle: ray.actor.ActorHandle,
        directory: str,
        *,
        apply_delay_s: float = 0.1,
        on_commit: Callable[[str, int, float], None] | None = None,
    ) -> None:
        super().__init__(handle)
        self.name = f"{os.getpid()}-{secrets.token_hex(6)}"
        self._target = _ActorJournalStore(handle)
        stages = {"journal": "journal", "apply": "ship"}  # its batches go on to the actor
        self._writer = JournaledWriter(
            self._target, directory, name=self.name, apply_delay_s=apply_delay_s,
            on_commit=None if on_commit is None else lambda stage, n, s: on_commit(stages[stage], n, s),
        )  # fmt: skip

    @classmethod
    async def connect(cls, settings: RuntimeSettings) -> RayStoreClient:
        """A journaling client if the storage actor's disk is this node's, else a plain one."""
        handle = storage_actor(settings)
        home = await ray_result(handle.journal_home.remote())
        if home is None or home[0] != ray.get_runtime_context().get_node_id():
            return RayStoreClient(handle)
        await ray_result(handle.adopt_orphans.remote())  # an earlier writer of ours that crashed
        on_commit = None
        if settings.telemetry.metrics:
            from troupe.observe.metrics import commit_recorder, process_registry

            on_commit = commit_recorder(process_registry())
        return cls(handle, home[1], on_commit=on_commit)

    async def drain_journal(self) -> None:
        """Return once what this client journaled so far is in the storage actor."""
        await self._writer.drain()

    async def _reads_ready(self) -> None:
        # This client's own journal, and the other replicas' when it has peers.
        if self._drain_peers is None:
            await self._writer.drain()
        else:
            await asyncio.gather(self._writer.drain(), self._drain_peers())

    async def flush(self) -> None:
        # This replica's journal only: another replica's is flushed by its own stop.
        await self._writer.drain()
        await self._call(self.handle.flush)

    async def write_response(self, record: ResponseRecord) -> None:
        await self._writer.submit(record)

    # A run's start and checkpoints (RayStoreClient's) need not wait for the journal: its own
    # response follows them.

    async def close(self) -> None:
        """Ship what is journaled, then release the journal (the actor deletes it later).

        If the actor is gone (the whole server is going down), what was not shipped stays in
        the journal, stored when the file is next opened."""
        self._target.closing = True
        await self._writer.close()
