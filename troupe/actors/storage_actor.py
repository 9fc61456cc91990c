"""The storage actor: the single owner of the DuckDB file, and the clients that reach it.

DuckDB allows one writing process, so exactly one named actor opens the file,
pinned to the head node; the runtime, the hosts and evaluation reach it through
:class:`RayStoreClient`, which has the same typed methods as the actor (the
:class:`~troupe.actors.store_client.StoreClient` interface). A finished response is
durable once it is in the response journal beside the file (``troupe.storage.journal``);
DuckDB gets it behind, many per transaction. Reads run on the store's thread once what was
written before them is in DuckDB.

:class:`JournalingStoreClient` saves the round trip to the actor on the way to the durable
point, for a process on the actor's own node that is the only one to read what it writes
(the ingress replica, which hosts the conversations under ``placement = "replica"``): it
journals each finished response in a writer journal of its own, on the same disk, and ships
the records to the actor in batches behind. Its other calls first wait until what it
journaled is shipped, so it reads its own writes. A writer that dies leaves its journal to
:func:`troupe.storage.journal.adopt_orphans`, which the actor runs when it opens the file and
whenever a new writer connects.

The actor leaves an owner file beside the DuckDB file (``<path>.owner.json``: its Ray
cluster's address, its namespace, its process id), so that ``troupe sql`` can reach it while
it holds the file (:mod:`troupe.actors.live_sql`).
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil
import ray
from ray.exceptions import RayActorError

from troupe.storage import (
    EvalResultRecord,
    EvalRunRecord,
    Order,
    Page,
    ResponseFilter,
    ResponseList,
    ResponseRecord,
    ResponseStats,
    RunRecord,
    RunStep,
    StepTrace,
    StorageError,
    Turn,
)
from troupe.storage.base import DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT_S, QueryResult
from troupe.storage.duckdb_store import DuckDBStore
from troupe.storage.group_commit import WriterStopped
from troupe.storage.journal import JournaledWriter, adopt_orphans

from .live_sql import Owner, owner_path, write_owner
from .ray_actors import start_actor
from .raycall import ray_result, ray_result_sync
from .settings import RuntimeSettings
from .store_client import AsyncStore, journal_of, open_store

__all__ = ["StorageService", "RayStoreClient", "JournalingStoreClient", "storage_actor", "STORAGE_ACTOR_NAME"]

STORAGE_ACTOR_NAME = "troupe-storage"

logger = logging.getLogger(__name__)


class StorageService(AsyncStore):
    """The storage actor's body: an :class:`AsyncStore` over the DuckDB file at ``path``.

    ``namespace``: the Ray namespace the actor is named in, for its owner file (an actor's
    runtime context names its creator's job's namespace, which may be another). ``metrics``:
    record the store's commits in this process's metrics registry (``troupe.observe``).
    """

    def __init__(self, path: str, memory_limit: str = "", namespace: str | None = None, metrics: bool = False) -> None:
        journal = journal_of(path)
        self._journal_dir = None if journal is None else os.path.abspath(journal)
        self._positions: dict[str, int] = {}
        """Writer journals' positions as last stored here (a cache of ``journal_positions``)."""
        self._on_commit = None
        if metrics:
            from troupe.observe.metrics import RayExport, commit_recorder, process_registry

            self._on_commit = commit_recorder(process_registry())
            RayExport.start_once(process_registry())
        super().__init__(open_store(path, memory_limit), journal=journal, on_commit=self._on_commit)
        if journal is not None and ray.is_initialized():
            self._leave_owner_file(path, namespace or ray.get_runtime_context().namespace)

    @staticmethod
    def _leave_owner_file(path: str, namespace: str) -> None:
        """Say beside the file how to reach this actor: ``troupe sql`` asks it while the file is
        locked (:mod:`troupe.actors.live_sql`)."""
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
        name=STORAGE_ACTOR_NAME,
        namespace=settings.namespace,
        resources={"node:__internal_head__": 0.001},  # the DuckDB file lives on the head node's disk
    )


class RayStoreClient:
    """The :class:`~troupe.actors.store_client.StoreClient` interface, through the storage actor.

    Each method calls the actor's method of the same name; the store's own errors
    (StorageError) arrive as themselves.
    """

    def __init__(self, handle: ray.actor.ActorHandle) -> None:
        self.handle = handle

    async def _call(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        """``method`` of the actor (``self.handle.<name>``), called with these arguments."""
        return await ray_result(method.remote(*args, **kwargs))

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

    async def write_response(self, record: ResponseRecord) -> None:
        await self._call(self.handle.write_response, record)

    async def get_response(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        return await self._call(self.handle.get_response, tenant, response_id)

    async def get_thread_id(self, tenant: str, response_id: str) -> str | None:
        return await self._call(self.handle.get_thread_id, tenant, response_id)

    async def delete_response(self, tenant: str, response_id: str) -> bool:
        return await self._call(self.handle.delete_response, tenant, response_id)

    async def list_responses(
        self, tenant: str, *, model: str | None = None, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        return await self._call(self.handle.list_responses, tenant, model=model, after=after, limit=limit, order=order)

    async def find_responses(self, where: ResponseFilter, *, after: str | None = None, limit: int = 50) -> ResponseList:
        return await self._call(self.handle.find_responses, where, after=after, limit=limit)

    async def response_stats(self, tenant: str | None, since: float, until: float) -> ResponseStats:
        return await self._call(self.handle.response_stats, tenant, since, until)

    async def thread_turns(self, tenant: str, thread_id: str, *, limit: int = 100) -> list[Turn]:
        return await self._call(self.handle.thread_turns, tenant, thread_id, limit=limit)

    async def list_input_items(
        self, tenant: str, response_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None:
        return await self._call(
            self.handle.list_input_items, tenant, response_id, after=after, limit=limit, order=order
        )

    async def chain_items(self, tenant: str, response_id: str) -> list[dict[str, Any]] | None:
        return await self._call(self.handle.chain_items, tenant, response_id)

    async def response_events(self, tenant: str, response_id: str) -> list[dict[str, Any]] | None:
        return await self._call(self.handle.response_events, tenant, response_id)

    async def prune_event_logs(self, ended_before: float) -> int:
        return await self._call(self.handle.prune_event_logs, ended_before)

    async def start_run(self, run: RunRecord) -> None:
        await self._call(self.handle.start_run, run)

    async def end_run(self, tenant: str, response_id: str) -> None:
        await self._call(self.handle.end_run, tenant, response_id)

    async def get_run(self, tenant: str, response_id: str) -> RunRecord | None:
        return await self._call(self.handle.get_run, tenant, response_id)

    async def unfinished_runs(self) -> list[RunRecord]:
        return await self._call(self.handle.unfinished_runs)

    async def claim_run(self, tenant: str, response_id: str, attempt: int) -> RunRecord | None:
        return await self._call(self.handle.claim_run, tenant, response_id, attempt)

    async def checkpoint_run(self, step: RunStep, start: RunRecord | None = None) -> None:
        await self._call(self.handle.checkpoint_run, step, start)

    async def run_steps(self, tenant: str, response_id: str) -> list[RunStep]:
        return await self._call(self.handle.run_steps, tenant, response_id)

    async def step_traces(self, tenant: str, response_id: str) -> list[StepTrace]:
        return await self._call(self.handle.step_traces, tenant, response_id)

    async def create_conversation(
        self, tenant: str, conversation: dict[str, Any], items: Sequence[dict[str, Any]]
    ) -> None:
        await self._call(self.handle.create_conversation, tenant, conversation, items)

    async def get_conversation(self, tenant: str, conversation_id: str) -> dict[str, Any] | None:
        return await self._call(self.handle.get_conversation, tenant, conversation_id)

    async def update_conversation(
        self, tenant: str, conversation_id: str, metadata: dict[str, Any]
    ) -> dict[str, Any] | None:
        return await self._call(self.handle.update_conversation, tenant, conversation_id, metadata)

    async def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        return await self._call(self.handle.delete_conversation, tenant, conversation_id)

    async def add_conversation_items(self, tenant: str, conversation_id: str, items: Sequence[dict[str, Any]]) -> bool:
        return await self._call(self.handle.add_conversation_items, tenant, conversation_id, items)

    async def list_conversation_items(
        self, tenant: str, conversation_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None:
        return await self._call(
            self.handle.list_conversation_items, tenant, conversation_id, after=after, limit=limit, order=order
        )

    async def get_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> dict[str, Any] | None:
        return await self._call(self.handle.get_conversation_item, tenant, conversation_id, item_id)

    async def delete_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> bool:
        return await self._call(self.handle.delete_conversation_item, tenant, conversation_id, item_id)

    async def conversation_items(self, tenant: str, conversation_id: str) -> list[dict[str, Any]] | None:
        return await self._call(self.handle.conversation_items, tenant, conversation_id)

    async def create_prompt(
        self, tenant: str, prompt_id: str, content: dict[str, Any], created_at: float
    ) -> dict[str, Any]:
        return await self._call(self.handle.create_prompt, tenant, prompt_id, content, created_at)

    async def get_prompt(self, tenant: str, prompt_id: str, version: int | None = None) -> dict[str, Any] | None:
        return await self._call(self.handle.get_prompt, tenant, prompt_id, version)

    async def list_prompts(
        self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        return await self._call(self.handle.list_prompts, tenant, after=after, limit=limit, order=order)

    async def update_prompt(
        self, tenant: str, prompt_id: str, content: dict[str, Any], *, from_version: int, set_default: bool,
        created_at: float,
    ) -> dict[str, Any] | None:  # fmt: skip
        return await self._call(self.handle.update_prompt, tenant, prompt_id, content, from_version=from_version,
                                set_default=set_default, created_at=created_at)  # fmt: skip

    async def set_default_prompt_version(self, tenant: str, prompt_id: str, version: int) -> dict[str, Any] | None:
        return await self._call(self.handle.set_default_prompt_version, tenant, prompt_id, version)

    async def delete_prompt(self, tenant: str, prompt_id: str) -> bool:
        return await self._call(self.handle.delete_prompt, tenant, prompt_id)

    async def list_prompt_versions(self, tenant: str, prompt_id: str) -> list[dict[str, Any]] | None:
        return await self._call(self.handle.list_prompt_versions, tenant, prompt_id)

    async def put_eval_run(self, run: EvalRunRecord) -> None:
        await self._call(self.handle.put_eval_run, run)

    async def get_eval_run(self, run_id: str) -> EvalRunRecord | None:
        return await self._call(self.handle.get_eval_run, run_id)

    async def list_eval_runs(self) -> list[EvalRunRecord]:
        return await self._call(self.handle.list_eval_runs)

    async def write_eval_results(self, results: Sequence[EvalResultRecord]) -> None:
        await self._call(self.handle.write_eval_results, results)

    async def eval_results(self, run_id: str) -> list[EvalResultRecord]:
        return await self._call(self.handle.eval_results, run_id)

    async def run_sql(
        self, sql: str, *, max_rows: int = DEFAULT_MAX_ROWS, timeout_s: float | None = DEFAULT_TIMEOUT_S
    ) -> QueryResult:
        return await self._call(self.handle.run_sql, sql, max_rows=max_rows, timeout_s=timeout_s)

    async def metrics_snapshot(self) -> dict[str, Any] | None:
        return await RayStoreClient._call(self, self.handle.metrics_snapshot)

    async def rag(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await self._call(self.handle.rag, method, *args, **kwargs)

    async def flush(self) -> None:
        # A JournalingStoreClient's _call ships its own journal to the actor first.
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
    process (see the module docstring); every other call first waits for what was journaled
    before it to reach the actor. Only for the one process that reads what it writes.

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

    async def _call(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        await self._writer.drain()
        return await super()._call(method, *args, **kwargs)

    async def write_response(self, record: ResponseRecord) -> None:
        await self._writer.submit(record)

    # A run's start and checkpoints need not wait for the journal: its own response follows them.

    async def start_run(self, run: RunRecord) -> None:
        await RayStoreClient._call(self, self.handle.start_run, run)

    async def checkpoint_run(self, step: RunStep, start: RunRecord | None = None) -> None:
        await RayStoreClient._call(self, self.handle.checkpoint_run, step, start)

    async def close(self) -> None:
        """Ship what is journaled, then release the journal (the actor deletes it later).

        If the actor is gone (the whole server is going down), what was not shipped stays in
        the journal, stored when the file is next opened."""
        self._target.closing = True
        await self._writer.close()
