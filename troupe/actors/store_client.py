"""The store as an explicit, typed async interface: in this process, or through the storage actor.

:class:`StoreClient` is what every caller holds (the runtime, the hosts, evaluation): each
:class:`~troupe.storage.Store` method but ``write_responses`` as a coroutine with the same
arguments and result, plus :meth:`~StoreClient.write_response`, which stores one finished
response and returns once it is durable. Two implementations:

* :class:`AsyncStore` runs a store in this process: every call on one thread, in order;
  responses durable in the response journal first (group-synced), DuckDB behind. The
  in-process runtime uses it directly, and it is the body of the storage actor
  (``troupe.actors.storage_actor``), the one owner of the DuckDB file.
* ``troupe.actors.storage_actor.RayStoreClient`` calls the storage actor's methods of the
  same names; its subclass ``JournalingStoreClient`` (the ingress replica under the replica
  placement) makes ``write_response`` durable in a journal of its own process first.

Example::

    store = AsyncStore.open(":memory:")
    await store.get_response("", "resp_…")   # None
    await store.close()
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

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
    Store,
    Turn,
)
from troupe.storage.base import DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT_S, QueryResult
from troupe.storage.group_commit import GroupCommitWriter
from troupe.storage.journal import JournaledWriter, journal_dir
from troupe.storage.rag_executor import RagExecutor

__all__ = ["StoreClient", "AsyncStore", "journal_of", "open_store"]

T = TypeVar("T")


def open_store(path: str, memory_limit: str = "") -> Store:
    """The DuckDB store at ``path``; ``:memory:`` keeps everything in memory.

    ``memory_limit``: DuckDB's ``memory_limit`` (``"128MB"``); ``""`` keeps DuckDB's default.
    """
    from troupe.storage.duckdb_store import DuckDBStore

    return DuckDBStore(None if path == ":memory:" else path, memory_limit=memory_limit or None)


def journal_of(path: str) -> str | None:
    """The response journal's directory of the DuckDB file at ``path``; None in memory."""
    return None if path == ":memory:" else journal_dir(path)


class StoreClient(Protocol):
    """The async store interface; each method is documented on :class:`~troupe.storage.Store`."""

    async def write_response(self, record: ResponseRecord) -> None:
        """Store a finished response; returns once it is durable (journaled, or committed).

        Raises:
            StorageError: this record could not be stored; nothing of it was written (the
                records written with it are not affected).
        """
        ...

    async def get_response(self, tenant: str, response_id: str) -> dict[str, Any] | None: ...
    async def get_thread_id(self, tenant: str, response_id: str) -> str | None: ...
    async def delete_response(self, tenant: str, response_id: str) -> bool: ...
    async def list_responses(
        self, tenant: str, *, model: str | None = None, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page: ...
    async def find_responses(
        self, where: ResponseFilter, *, after: str | None = None, limit: int = 50
    ) -> ResponseList: ...
    async def response_stats(self, tenant: str | None, since: float, until: float) -> ResponseStats: ...
    async def thread_turns(self, tenant: str, thread_id: str, *, limit: int = 100) -> list[Turn]: ...
    async def list_input_items(
        self, tenant: str, response_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None: ...
    async def chain_items(self, tenant: str, response_id: str) -> list[dict[str, Any]] | None: ...
    async def response_events(self, tenant: str, response_id: str) -> list[dict[str, Any]] | None: ...
    async def prune_event_logs(self, ended_before: float) -> int: ...
    async def start_run(self, run: RunRecord) -> None: ...
    async def end_run(self, tenant: str, response_id: str) -> None: ...
    async def get_run(self, tenant: str, response_id: str) -> RunRecord | None: ...
    async def unfinished_runs(self) -> list[RunRecord]: ...
    async def claim_run(self, tenant: str, response_id: str, attempt: int) -> RunRecord | None: ...
    async def checkpoint_run(self, step: RunStep, start: RunRecord | None = None) -> None:
        """Store a run's step; ``start``: the run's ``runs`` row, written with it (a foreground
        run's first step)."""
        ...
    async def run_steps(self, tenant: str, response_id: str) -> list[RunStep]: ...
    async def step_traces(self, tenant: str, response_id: str) -> list[StepTrace]: ...
    async def create_conversation(
        self, tenant: str, conversation: dict[str, Any], items: Sequence[dict[str, Any]]
    ) -> None: ...
    async def get_conversation(self, tenant: str, conversation_id: str) -> dict[str, Any] | None: ...
    async def update_conversation(
        self, tenant: str, conversation_id: str, metadata: dict[str, Any]
    ) -> dict[str, Any] | None: ...
    async def delete_conversation(self, tenant: str, conversation_id: str) -> bool: ...
    async def add_conversation_items(
        self, tenant: str, conversation_id: str, items: Sequence[dict[str, Any]]
    ) -> bool: ...
    async def list_conversation_items(
        self, tenant: str, conversation_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None: ...
    async def get_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> dict[str, Any] | None: ...
    async def delete_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> bool: ...
    async def conversation_items(self, tenant: str, conversation_id: str) -> list[dict[str, Any]] | None: ...
    async def create_prompt(
        self, tenant: str, prompt_id: str, content: dict[str, Any], created_at: float
    ) -> dict[str, Any]: ...
    async def get_prompt(self, tenant: str, prompt_id: str, version: int | None = None) -> dict[str, Any] | None: ...
    async def list_prompts(
        self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page: ...
    async def update_prompt(
        self, tenant: str, prompt_id: str, content: dict[str, Any], *, from_version: int, set_default: bool,
        created_at: float,
    ) -> dict[str, Any] | None: ...  # fmt: skip
    async def set_default_prompt_version(
        self, tenant: str, prompt_id: str, version: int
    ) -> dict[str, Any] | None: ...
    async def delete_prompt(self, tenant: str, prompt_id: str) -> bool: ...
    async def list_prompt_versions(self, tenant: str, prompt_id: str) -> list[dict[str, Any]] | None: ...
    async def put_eval_run(self, run: EvalRunRecord) -> None: ...
    async def get_eval_run(self, run_id: str) -> EvalRunRecord | None: ...
    async def list_eval_runs(self) -> list[EvalRunRecord]: ...
    async def write_eval_results(self, results: Sequence[EvalResultRecord]) -> None: ...
    async def eval_results(self, run_id: str) -> list[EvalResultRecord]: ...
    async def run_sql(
        self, sql: str, *, max_rows: int = DEFAULT_MAX_ROWS, timeout_s: float | None = DEFAULT_TIMEOUT_S
    ) -> QueryResult:
        """One read-only SQL statement, on the store's thread once what was written before it
        is stored; it holds later store calls (the writes too) back at most ``timeout_s``."""

    async def metrics_snapshot(self) -> dict[str, Any] | None:
        """The metrics of the process the store runs in when it is another one (the storage
        actor's, ``troupe.observe.metrics.Registry.snapshot``); None when it is this one."""

    async def rag(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``method`` of the files and vector stores (:class:`troupe.storage.rag.RagStore`,
        documented there); its typed face is :class:`troupe.actors.rag.VectorStores`."""
        ...

    async def flush(self) -> None:
        """Return once every response whose ``write_response`` returned before this call is in
        DuckDB, out of the journals (a stopping server's last call; the journals would be
        replayed at the next start anyway)."""

    async def close(self) -> None: ...


class AsyncStore:
    """A :class:`StoreClient` over a store in this process: calls run on one thread, in order.

    A finished response is durable once ``write_response`` returns: in the response journal
    beside a DuckDB file (:mod:`troupe.storage.journal`), which reaches the file behind, many
    responses per transaction; for a store in memory, in the store itself, group-committed.
    Every other call runs on the store's thread once what was written before it is stored,
    so a read sees every write that returned before it. :meth:`close` stores what is
    pending, then closes the store.
    """

    def __init__(
        self, store: Store, *, journal: str | None = None, on_commit: Callable[[str, int, float], None] | None = None
    ) -> None:
        """``journal``: the journal directory of ``store``, a ``DuckDBStore`` on a file (replayed
        already). ``on_commit(writer, records, seconds)``: told of every group commit, by writer
        (``journal``, ``duckdb``, ``runs``), for metrics."""
        self.store = store

        def reported(writer: str) -> Callable[[int, float], None] | None:
            return None if on_commit is None else functools.partial(on_commit, writer)

        if journal is None:
            self.writer: GroupCommitWriter[ResponseRecord] | JournaledWriter = GroupCommitWriter(
                store.write_responses, on_commit=reported("duckdb")
            )
        else:
            stages = {"journal": "journal", "apply": "duckdb"}
            self.writer = JournaledWriter(
                store, journal,
                on_commit=None if on_commit is None else lambda stage, n, s: on_commit(stages[stage], n, s),
            )  # fmt: skip
        self.runs: GroupCommitWriter[RunRecord | RunStep] = GroupCommitWriter(
            store.write_run_progress, executor=self.writer.executor, max_delay_s=0.0, on_commit=reported("runs")
        )
        """Durable runs' starts and checkpoints: group-committed on the store's thread, and not
        behind the responses in the journal (a run's own response always comes after them). No
        wait for company: a run waits for each of its checkpoints, and those that arrive while
        a batch is written form the next one."""
        self._rag: RagExecutor | None = None
        """The files and vector stores, on connections and threads of their own; opened on first use."""

    @classmethod
    def open(
        cls, path: str, memory_limit: str = "", *, on_commit: Callable[[str, int, float], None] | None = None
    ) -> AsyncStore:
        """Over the DuckDB file at ``path``, with its journal (``:memory:`` for a throwaway one)."""
        return cls(open_store(path, memory_limit), journal=journal_of(path), on_commit=on_commit)

    async def metrics_snapshot(self) -> None:
        """The store runs in this process: its metrics are this process's."""
        return None

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await self.writer.run_sync(functools.partial(fn, *args, **kwargs))

    async def write_response(self, record: ResponseRecord) -> None:
        await self.writer.submit(record)

    async def get_response(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        return await self._run(self.store.get_response, tenant, response_id)

    async def get_thread_id(self, tenant: str, response_id: str) -> str | None:
        return await self._run(self.store.get_thread_id, tenant, response_id)

    async def delete_response(self, tenant: str, response_id: str) -> bool:
        return await self._run(self.store.delete_response, tenant, response_id)

    async def list_responses(
        self, tenant: str, *, model: str | None = None, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        return await self._run(self.store.list_responses, tenant, model=model, after=after, limit=limit, order=order)

    async def find_responses(self, where: ResponseFilter, *, after: str | None = None, limit: int = 50) -> ResponseList:
        return await self._run(self.store.find_responses, where, after=after, limit=limit)

    async def response_stats(self, tenant: str | None, since: float, until: float) -> ResponseStats:
        return await self._run(self.store.response_stats, tenant, since, until)

    async def thread_turns(self, tenant: str, thread_id: str, *, limit: int = 100) -> list[Turn]:
        return await self._run(self.store.thread_turns, tenant, thread_id, limit=limit)

    async def list_input_items(
        self, tenant: str, response_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None:
        return await self._run(self.store.list_input_items, tenant, response_id, after=after, limit=limit, order=order)

    async def chain_items(self, tenant: str, response_id: str) -> list[dict[str, Any]] | None:
        return await self._run(self.store.chain_items, tenant, response_id)

    async def response_events(self, tenant: str, response_id: str) -> list[dict[str, Any]] | None:
        return await self._run(self.store.response_events, tenant, response_id)

    async def prune_event_logs(self, ended_before: float) -> int:
        return await self._run(self.store.prune_event_logs, ended_before)

    async def start_run(self, run: RunRecord) -> None:
        await self.runs.submit(run)

    async def end_run(self, tenant: str, response_id: str) -> None:
        await self._run(self.store.end_run, tenant, response_id)

    async def get_run(self, tenant: str, response_id: str) -> RunRecord | None:
        return await self._run(self.store.get_run, tenant, response_id)

    async def unfinished_runs(self) -> list[RunRecord]:
        return await self._run(self.store.unfinished_runs)

    async def claim_run(self, tenant: str, response_id: str, attempt: int) -> RunRecord | None:
        return await self._run(self.store.claim_run, tenant, response_id, attempt)

    async def checkpoint_run(self, step: RunStep, start: RunRecord | None = None) -> None:
        if start is None:
            await self.runs.submit(step)
        else:  # queued together: one transaction (unless the batch is full)
            await asyncio.gather(self.runs.submit(start), self.runs.submit(step))

    async def run_steps(self, tenant: str, response_id: str) -> list[RunStep]:
        return await self._run(self.store.run_steps, tenant, response_id)

    async def step_traces(self, tenant: str, response_id: str) -> list[StepTrace]:
        return await self._run(self.store.step_traces, tenant, response_id)

    async def create_conversation(
        self, tenant: str, conversation: dict[str, Any], items: Sequence[dict[str, Any]]
    ) -> None:
        await self._run(self.store.create_conversation, tenant, conversation, items)

    async def get_conversation(self, tenant: str, conversation_id: str) -> dict[str, Any] | None:
        return await self._run(self.store.get_conversation, tenant, conversation_id)

    async def update_conversation(
        self, tenant: str, conversation_id: str, metadata: dict[str, Any]
    ) -> dict[str, Any] | None:
        return await self._run(self.store.update_conversation, tenant, conversation_id, metadata)

    async def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        return await self._run(self.store.delete_conversation, tenant, conversation_id)

    async def add_conversation_items(self, tenant: str, conversation_id: str, items: Sequence[dict[str, Any]]) -> bool:
        return await self._run(self.store.add_conversation_items, tenant, conversation_id, items)

    async def list_conversation_items(
        self, tenant: str, conversation_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None:
        return await self._run(
            self.store.list_conversation_items, tenant, conversation_id, after=after, limit=limit, order=order
        )

    async def get_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> dict[str, Any] | None:
        return await self._run(self.store.get_conversation_item, tenant, conversation_id, item_id)

    async def delete_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> bool:
        return await self._run(self.store.delete_conversation_item, tenant, conversation_id, item_id)

    async def conversation_items(self, tenant: str, conversation_id: str) -> list[dict[str, Any]] | None:
        return await self._run(self.store.conversation_items, tenant, conversation_id)

    async def create_prompt(
        self, tenant: str, prompt_id: str, content: dict[str, Any], created_at: float
    ) -> dict[str, Any]:
        return await self._run(self.store.create_prompt, tenant, prompt_id, content, created_at)

    async def get_prompt(self, tenant: str, prompt_id: str, version: int | None = None) -> dict[str, Any] | None:
        return await self._run(self.store.get_prompt, tenant, prompt_id, version)

    async def list_prompts(
        self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        return await self._run(self.store.list_prompts, tenant, after=after, limit=limit, order=order)

    async def update_prompt(
        self, tenant: str, prompt_id: str, content: dict[str, Any], *, from_version: int, set_default: bool,
        created_at: float,
    ) -> dict[str, Any] | None:  # fmt: skip
        return await self._run(self.store.update_prompt, tenant, prompt_id, content, from_version=from_version,
                               set_default=set_default, created_at=created_at)  # fmt: skip

    async def set_default_prompt_version(self, tenant: str, prompt_id: str, version: int) -> dict[str, Any] | None:
        return await self._run(self.store.set_default_prompt_version, tenant, prompt_id, version)

    async def delete_prompt(self, tenant: str, prompt_id: str) -> bool:
        return await self._run(self.store.delete_prompt, tenant, prompt_id)

    async def list_prompt_versions(self, tenant: str, prompt_id: str) -> list[dict[str, Any]] | None:
        return await self._run(self.store.list_prompt_versions, tenant, prompt_id)

    async def put_eval_run(self, run: EvalRunRecord) -> None:
        await self._run(self.store.put_eval_run, run)

    async def get_eval_run(self, run_id: str) -> EvalRunRecord | None:
        return await self._run(self.store.get_eval_run, run_id)

    async def list_eval_runs(self) -> list[EvalRunRecord]:
        return await self._run(self.store.list_eval_runs)

    async def write_eval_results(self, results: Sequence[EvalResultRecord]) -> None:
        await self._run(self.store.write_eval_results, results)

    async def eval_results(self, run_id: str) -> list[EvalResultRecord]:
        return await self._run(self.store.eval_results, run_id)

    async def run_sql(
        self, sql: str, *, max_rows: int = DEFAULT_MAX_ROWS, timeout_s: float | None = DEFAULT_TIMEOUT_S
    ) -> QueryResult:
        # On the store's thread like every call: between two write batches, never beside one,
        # so a query never competes with a write or a checkpoint for the store's memory_limit.
        return await self._run(self.store.run_sql, sql, max_rows=max_rows, timeout_s=timeout_s)

    async def flush(self) -> None:
        if isinstance(self.writer, JournaledWriter):
            await self.writer.drain()
        # A GroupCommitWriter's submit returns once the store has the record: nothing is pending.

    async def rag(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._rag is None:
            self._rag = RagExecutor.over(self.store)
        return await self._rag.call(method, *args, **kwargs)

    async def close(self) -> None:
        await self.runs.close()
        await self.writer.close()
        if self._rag is not None:
            await self._rag.close()
        self.store.close()
