"""Several ingress replicas hosting conversations: each thread has one owner replica.

With ``placement = "replica"`` and ``[server] num_replicas = N``, every ingress replica hosts
the threads whose id hashes to its Serve rank (``stable_hash(thread) % N``, the hash the
pooled placement uses), so a turn runs in the process that holds its message cache. A request
may land on any replica (a load balancer in front of the replicas' ports cannot read a body):
the replica that takes it checks it, builds its turn, and hands the turn to the owner with
one Ray call on the owner's actor (:class:`PeerReplica`): Ray's ``__ray_call__`` runs
:func:`_host_stream` or :func:`_host_call` in the owner's process, on its own host, and the
batches stream back as a pooled host's do. A request that lands on the owner costs nothing more.

Each replica journals the responses it finishes (``JournalingStoreClient``); its store calls
first have the other replicas ship theirs (:meth:`Peers.drain`), so a read on any replica sees
every response any replica acknowledged.

Serve numbers the replicas of a deployment 0..N-1 (its rank) and gives a replica that replaces
a dead one the rank it had, so a thread keeps its owner across restarts; the new owner rebuilds
the thread's cache from storage, as after an eviction. :class:`Peers` finds a rank's replica
by the names Serve gives its replica actors, and asks each its rank.

Example::

    owner = owner_rank("conv_…", 2)                 # 0 or 1
    host = RayHostClient(PeerReplica(handle))       # as if it were a host actor
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncGenerator, Awaitable
from typing import TYPE_CHECKING, Any

from troupe.runtime.ray.calls import ray_result

if TYPE_CHECKING:
    from troupe.runtime.host import ConversationHost

__all__ = ["Peers", "PeerReplica", "owner_rank", "serve_this_process", "stable_hash", "this_rank"]

logger = logging.getLogger(__name__)

_local: dict[str, Any] = {}
"""This process's host and the event loop it lives on (:func:`serve_this_process`)."""


def stable_hash(key: str) -> int:
    """Python's ``hash()`` is salted per process; replicas must agree, so use a digest."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


def owner_rank(thread_id: str, replicas: int) -> int:
    """The rank of the replica that hosts ``thread_id`` among ``replicas``."""
    return stable_hash(thread_id) % replicas


def this_rank() -> int | None:
    """This Serve replica's rank; None outside a replica."""
    from ray import serve

    try:
        rank = serve.get_replica_context().rank
    except RuntimeError:  # not in a replica
        return None
    return None if rank is None else rank.rank


def serve_this_process(host: ConversationHost) -> None:
    """Make ``host`` the one that calls from other replicas reach in this process."""
    _local["host"] = host
    _local["loop"] = asyncio.get_running_loop()


# -- run in the owner's process, through __ray_call__ --------------------------------------------


def _rank_here(_actor: Any) -> int | None:
    return this_rank() if "host" in _local else None  # None: a replica still starting


async def _on_host_loop(step: Awaitable[Any]) -> Any:
    """Await ``step`` on the host's event loop: the one Ray runs this on, unless Serve runs
    the replica's code on a thread of its own (``RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD``)."""
    loop = _local["loop"]
    if loop is asyncio.get_running_loop():
        return await step
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(step, loop))  # type: ignore[arg-type]


async def _host_stream(_actor: Any, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> AsyncGenerator[Any, None]:
    """The batches of the host's ``method`` (``respond``, ``follow``); closed when the caller stops."""
    batches = getattr(_local["host"], method)(*args, **kwargs)
    try:
        while True:
            try:
                batch = await _on_host_loop(batches.__anext__())
            except StopAsyncIteration:
                return
            yield batch
    finally:
        with contextlib.suppress(Exception):
            await _on_host_loop(batches.aclose())


async def _host_call(_actor: Any, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> AsyncGenerator[Any, None]:
    """What the host's ``method`` returns, as the one item of a stream: ``__ray_call__`` returns
    what its function returns, and only a generator is run (a coroutine is not awaited)."""
    yield await _on_host_loop(getattr(_local["host"], method)(*args, **kwargs))


async def _drain_here(_actor: Any) -> AsyncGenerator[None, None]:
    """Ship what this replica journaled to the storage actor; yields once it is there."""
    drain = getattr(_local["host"].store, "drain_journal", None)  # None: it writes through
    if drain is not None:
        await _on_host_loop(drain())
    yield None


# -- the caller's side --------------------------------------------------------------------------


class PeerReplica:
    """Another ingress replica's actor, called as a host actor is (:class:`~troupe.runtime.ray.
    placement.RayHostClient` takes it): ``peer.respond.options(num_returns="streaming").remote(job)``
    streams that replica's own host's ``respond``; ``await peer.cancel.remote(tenant, rid)``
    is its ``cancel``."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def __getattr__(self, method: str) -> _PeerMethod:
        return _PeerMethod(self.handle, method, {})


class _PeerMethod:
    __slots__ = ("handle", "method", "opts")

    def __init__(self, handle: Any, method: str, opts: dict[str, Any]) -> None:
        self.handle, self.method, self.opts = handle, method, opts

    def options(self, **opts: Any) -> _PeerMethod:
        return _PeerMethod(self.handle, self.method, opts)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        # ``__ray_call__`` is not declared a generator, so ``.options(num_returns="streaming")``
        # refuses it; ``_remote`` takes the option as given, and Ray streams what the function
        # returns when it is an async generator (tests/e2e/test_replicas.py fails if that stops).
        call = self.handle.__ray_call__._remote
        if self.opts.get("num_returns") == "streaming":
            return call(args=[_host_stream, self.method, args, kwargs], **self.opts)
        return _first(call(args=[_host_call, self.method, args, kwargs], num_returns="streaming"))


async def _first(refs: Any) -> Any:
    async for ref in refs:
        return await ref
    raise RuntimeError("the peer replica returned nothing")  # _host_call always yields once


class Peers:
    """The live replicas of this replica's deployment, by rank (found once, again after a failure)."""

    SEARCH_EVERY_S = 1.0
    """While some replica is missing, look for it at most this often."""

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas
        self._by_rank: dict[int, Any] = {}
        self._finding: asyncio.Future[None] | None = None
        self._searched_at = -float("inf")

    async def get(self, rank: int) -> Any | None:
        """The actor of the replica of ``rank``; None when none answers to it now."""
        if rank not in self._by_rank:
            await self._find()
        return self._by_rank.get(rank)

    def forget(self, rank: int) -> None:
        """Its replica failed: find it again next time (Serve starts another with its rank)."""
        self._by_rank.pop(rank, None)

    async def drain(self) -> None:
        """Every other replica's journaled responses in the storage actor, so that a read made
        now sees every response any replica acknowledged (as a single replica's reads see its
        own). A replica that does not answer is skipped: a dead one's journal is stored when
        Serve's replacement for it starts."""
        if len(self._by_rank) < self.replicas - 1:
            await self._find()

        async def one(rank: int, handle: Any) -> None:
            try:
                refs = handle.__ray_call__._remote(args=[_drain_here], num_returns="streaming")
                await asyncio.wait_for(_first(refs), 10.0)
            except Exception:  # noqa: BLE001 - restarting or gone
                self.forget(rank)

        await asyncio.gather(*(one(rank, handle) for rank, handle in list(self._by_rank.items())))

    async def _find(self) -> None:
        loop = asyncio.get_running_loop()
        if self._finding is None:  # one search at a time; the callers meanwhile wait for it
            if loop.time() - self._searched_at < self.SEARCH_EVERY_S:
                return
            self._searched_at = loop.time()
            self._finding = asyncio.ensure_future(self._search())
        try:
            await asyncio.shield(self._finding)
        finally:
            if self._finding is not None and self._finding.done():
                self._finding = None

    async def _search(self) -> None:
        import ray
        from ray import serve

        own = serve.get_replica_context().replica_id.to_full_id_str()
        prefix = own[: own.rindex("#") + 1]  # SERVE_REPLICA::<app>#<deployment>#
        listed = await asyncio.to_thread(ray.util.list_named_actors, all_namespaces=True)
        handles = []
        for actor in listed:
            if actor["name"].startswith(prefix) and actor["name"] != own:
                with contextlib.suppress(ValueError):  # gone meanwhile
                    handles.append(await asyncio.to_thread(ray.get_actor, actor["name"], namespace=actor["namespace"]))

        async def rank_of(handle: Any) -> int | None:
            try:
                return await asyncio.wait_for(ray_result(handle.__ray_call__.remote(_rank_here)), 5.0)
            except Exception:  # noqa: BLE001 - starting, stopping or gone: not a peer now
                return None

        ranks = await asyncio.gather(*(rank_of(h) for h in handles))
        self._by_rank = {rank: handle for rank, handle in zip(ranks, handles, strict=True) if rank is not None}
        logger.debug("peer replicas by rank: %s", sorted(self._by_rank))
