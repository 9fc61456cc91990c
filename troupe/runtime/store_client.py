"""The store as one async interface: in this process, or through the storage actor.

:class:`StoreClient` is what every caller holds (the runtime, the hosts, evaluation, the
console): every method of the store contract (:mod:`troupe.storage.contract`: responses and
runs, conversations, prompts, evaluation, console reads, files and vector stores) as a
coroutine of the same name, arguments and result, plus the writes that are behaviour rather
than forwarding: :meth:`~StoreClient.write_response` (one finished response, returns once it
is durable), :meth:`~StoreClient.start_run` and :meth:`~StoreClient.checkpoint_steps`
(group-committed), :meth:`~StoreClient.flush`.

No method of the contract is written out here: a client forwards any name the protocols
declare through one :meth:`~StoreClient.call` (``call(method, args, kwargs)``), found with
one dict lookup (:data:`ROUTES`, which also says which thread runs it); any other name is
refused with :class:`NotAStoreMethod`. Two implementations:

* :class:`AsyncStore` runs a store in this process: contract calls on the store's one thread,
  in order (the files and vector stores', and the containers', on a thread of their own,
  :mod:`troupe.storage.rag_executor`); responses durable in the response journal first
  (group-synced), DuckDB behind. The in-process runtime uses it directly, and it is the body
  of the storage actor (``troupe.runtime.ray.storage_actor``), the one owner of the DuckDB file,
  whose one ``call`` is :meth:`AsyncStore.call`.
* ``troupe.runtime.ray.storage_actor.RayStoreClient`` sends each call to that actor's ``call``
  (one Ray call per store call); its subclass ``JournalingStoreClient`` (the ingress
  replica under the replica placement) makes ``write_response`` durable in a journal of
  its own process first.

Typing: a contract method's signature is its type on the protocol, and written once there.
Python's type system cannot derive "the same methods, as coroutines" from a protocol, so a
type checker sees a forwarded method as ``StoreClient.__getattr__`` declares it, a coroutine
function of any arguments (``Callable[..., Awaitable[Any]]``); the runtime check is that the
name is the contract's. Hand-written async twins of the protocols would give checked
signatures at the cost of writing every method again, which is what this module exists to avoid.

Example::

    store = AsyncStore.open(":memory:")
    await store.get_response("", "resp_…")   # None: Responses.get_response, on the store's thread
    await store.call("get_response", ("", "resp_…"))   # the same
    await store.close()
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from troupe.runtime.settings import WebhookSettings
from troupe.storage import ResponseRecord, RunRecord, RunStep
from troupe.storage.contract import (
    APART_FROM_RESPONSES,
    ARTIFACTS_METHODS,
    CONTAINERS_METHODS,
    FILES_METHODS,
    STORE_METHODS,
    Store,
)
from troupe.storage.credentials import CredentialKeys
from troupe.storage.group_commit import GroupCommitWriter
from troupe.storage.journal import JournaledWriter, JournalStore, journal_dir

if TYPE_CHECKING:  # imported where used: a process whose store is the storage actor needs neither
    from troupe.runtime.webhook_delivery import Deliverer
    from troupe.storage.rag_executor import RagExecutor

__all__ = ["AsyncStore", "Forwarding", "NotAStoreMethod", "ROUTES", "StoreClient", "journal_of", "open_store"]

T = TypeVar("T")

ROUTES: dict[str, bool] = {
    **dict.fromkeys(STORE_METHODS, False), **dict.fromkeys(FILES_METHODS | CONTAINERS_METHODS | ARTIFACTS_METHODS, True)
}
"""Every method a client forwards, by name: True for the files and vector stores' thread (the
containers' and the session artifacts' too), False for the store's."""


class NotAStoreMethod(AttributeError):
    """A name the store contract does not declare (:mod:`troupe.storage.contract`), asked of a
    store client; nothing was called."""

    def __init__(self, name: str) -> None:
        super().__init__(f"{name!r} is not a method of the store contract (troupe.storage.contract)")


class JournaledStore(Store, JournalStore, Protocol):
    """The store an :class:`AsyncStore` runs (``DuckDBStore``): the contract, and the position of
    a response journal kept with the responses it stored (:class:`~troupe.storage.journal.JournalStore`)."""

    on_webhook_events: Callable[[], None] | None
    """Told (on the store's thread) when a transaction wrote webhook deliveries."""

    def write_responses(
        self, records: Sequence[ResponseRecord], *, journal_lsn: int | None = None, journal: str = ""
    ) -> None: ...


def open_store(path: str, memory_limit: str = "") -> JournaledStore:
    """The DuckDB store at ``path``; ``:memory:`` keeps everything in memory.

    ``memory_limit``: DuckDB's ``memory_limit`` (``"128MB"``); ``""`` keeps DuckDB's default.
    """
    from troupe.storage.duckdb_store import DuckDBStore

    return DuckDBStore(None if path == ":memory:" else path, memory_limit=memory_limit or None)


def journal_of(path: str) -> str | None:
    """The response journal's directory of the DuckDB file at ``path``; None in memory."""
    return None if path == ":memory:" else journal_dir(path)


class StoreClient(Protocol):
    """The async store interface (module docstring): the contract's methods, forwarded, and these."""

    async def call(self, method: str, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        """``method`` of the store contract with these arguments, where the store runs; its result.

        Raises:
            NotAStoreMethod: the contract declares no ``method``.
            StorageError, NotFound, …: what the store method raised.
        """
        ...

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        """``store.<name>(*args, **kwargs)`` is ``store.call(name, args, kwargs)``, for the names
        the contract declares (:data:`ROUTES`); any other raises :class:`NotAStoreMethod`."""
        ...

    async def write_response(self, record: ResponseRecord) -> None:
        """Store a finished response; returns once it is durable (journaled, or committed).

        Raises:
            StorageError: this record could not be stored; nothing of it was written (the
                records written with it are not affected).
        """
        ...

    async def start_run(self, run: RunRecord) -> None:
        """Record a durable run as accepted (group-committed with other runs' progress)."""
        ...

    async def checkpoint_steps(self, steps: Sequence[RunStep], start: RunRecord | None = None) -> None:
        """Store a run's next steps, in order; ``start``: the run's ``runs`` row, written with
        them (a foreground run's first step). One call, group-committed with other runs' progress."""
        ...

    async def metrics_snapshot(self) -> dict[str, Any] | None:
        """The metrics of the process the store runs in when it is another one (the storage
        actor's, ``troupe.observe.metrics.Registry.snapshot``); None when it is this one."""
        ...

    async def flush(self) -> None:
        """Return once every response whose ``write_response`` returned before this call is in
        DuckDB, out of the journals (a stopping server's last call; the journals would be
        replayed at the next start anyway)."""
        ...

    async def close(self) -> None: ...


class Forwarding:
    """The forwarding half of a :class:`StoreClient`: any contract method by name, through :meth:`call`."""

    async def call(self, method: str, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        # Only reached for names the class does not define. Not cached on the instance: a
        # client stays picklable, and a miss costs this dict lookup and a closure.
        if name not in ROUTES:
            raise NotAStoreMethod(name)
        call = self.call

        async def forward(*args: Any, **kwargs: Any) -> Any:
            return await call(name, args, kwargs)

        forward.__name__ = forward.__qualname__ = name
        return forward


class AsyncStore(Forwarding):
    """A :class:`StoreClient` over a store in this process: calls run on one thread, in order.

    A finished response is durable once ``write_response`` returns: in the response journal
    beside a DuckDB file (:mod:`troupe.storage.journal`), which reaches the file behind, many
    responses per transaction; for a store in memory, in the store itself, group-committed.
    Every other call runs on the store's thread once what was written before it is stored,
    so a read sees every write that returned before it (a read-only SQL query too: between
    two write batches, never beside one, so it never competes with a write or a checkpoint
    for the store's ``memory_limit``). The calls of the areas that the responses do not touch
    (:data:`~troupe.storage.contract.APART_FROM_RESPONSES`: sessions, agents…) do not wait for
    the journal. The files and vector stores' calls run on a thread and connection of their
    own, in order. With ``webhooks``, the store's outbox is delivered from here
    (:class:`~troupe.runtime.webhook_delivery.Deliverer`, started by the first call). :meth:`close`
    stores what is pending, then closes the store.
    """

    def __init__(
        self, store: JournaledStore, *, journal: str | None = None,
        on_commit: Callable[[str, int, float], None] | None = None, containers_directory: str = "",
        webhooks: tuple[WebhookSettings, CredentialKeys] | None = None,
    ) -> None:  # fmt: skip
        """``journal``: the journal directory of ``store``, a ``DuckDBStore`` on a file (replayed
        already). ``on_commit(writer, records, seconds)``: told of every group commit, by writer
        (``journal``, ``duckdb``, ``runs``), for metrics. ``containers_directory``: where the
        containers' directories go (``""``: beside the database, ``<path>.containers/``).
        ``webhooks``: deliver the webhooks this store's outbox holds, with these settings and keys
        (without keys, nothing: no endpoint's secret could be opened, so pending deliveries wait
        for a process that has them)."""
        self.store = store
        self._containers_directory = containers_directory
        self._deliverer: Deliverer | None = None
        if webhooks is not None and webhooks[1].sealing:  # without keys no endpoint's secret can be opened
            from troupe.runtime.webhook_delivery import Deliverer

            self._deliverer = Deliverer(*webhooks, self.call)
            store.on_webhook_events = self._deliverer.wake

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
        cls, path: str, memory_limit: str = "", *, on_commit: Callable[[str, int, float], None] | None = None,
        containers_directory: str = "", webhooks: tuple[WebhookSettings, CredentialKeys] | None = None,
    ) -> AsyncStore:  # fmt: skip
        """Over the DuckDB file at ``path``, with its journal (``:memory:`` for a throwaway one)."""
        return cls(open_store(path, memory_limit), journal=journal_of(path), on_commit=on_commit,
                   containers_directory=containers_directory, webhooks=webhooks)  # fmt: skip

    async def metrics_snapshot(self) -> dict[str, Any] | None:
        """The store runs in this process: its metrics are this process's."""
        return None

    async def call(self, method: str, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        """``method`` of the store contract, on the thread of its area; what it returned or raised.
        The storage actor's one ``call`` (``StorageService``) is this."""
        files = ROUTES.get(method)
        if files is None:
            raise NotAStoreMethod(method)
        if self._deliverer is not None and not self._deliverer.started:
            self._deliverer.start()
        if files:
            if self._rag is None:
                from troupe.storage.rag_executor import RagExecutor  # duckdb and numpy: the store's process only

                self._rag = RagExecutor.over(self.store, self._containers_directory)
            return await self._rag.run(functools.partial(self._rag.bound(method), *args, **(kwargs or {})))
        return await self._run(getattr(self.store, method), *args, **(kwargs or {}))

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the store's thread, once what was written before is stored
        (at once for a method of :data:`~troupe.storage.contract.APART_FROM_RESPONSES`)."""
        bound = functools.partial(fn, *args, **kwargs)
        if fn.__name__ in APART_FROM_RESPONSES and isinstance(self.writer, JournaledWriter):
            return await self.writer.run_apart(bound)  # it reads nothing the journal holds
        return await self.writer.run_sync(bound)

    async def write_response(self, record: ResponseRecord) -> None:
        if self._deliverer is not None and not self._deliverer.started:
            self._deliverer.start()
        await self.writer.submit(record)

    async def start_run(self, run: RunRecord) -> None:
        await self.runs.submit(run)

    async def checkpoint_steps(self, steps: Sequence[RunStep], start: RunRecord | None = None) -> None:
        items: list[RunRecord | RunStep] = [start, *steps] if start is not None else list(steps)
        # Queued together, in order: one transaction (unless the batch is full).
        await asyncio.gather(*(self.runs.submit(item) for item in items))

    async def flush(self) -> None:
        if isinstance(self.writer, JournaledWriter):
            await self.writer.drain()
        # A GroupCommitWriter's submit returns once the store has the record: nothing is pending.

    async def close(self) -> None:
        if self._deliverer is not None:
            await self._deliverer.close()
        await self.runs.close()
        await self.writer.close()
        if self._rag is not None:
            await self._rag.close()
        self.store.close()
