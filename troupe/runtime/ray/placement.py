"""Placement: which conversation host runs a thread's turns.

* ``replica`` (default): one host inside each ingress replica itself, so that a streamed
  event reaches the HTTP response without a Ray hop; with several replicas, each hosts the
  threads that hash to its rank, and the others hand it their turns (:mod:`.replicas`).
* ``pooled``: K long-lived host actors; a thread goes to host ``hash(thread) mod K`` (a
  stable hash, so every ingress replica agrees). Many conversations share a host, the way a
  virtual-actor system hosts grains.
* ``dedicated``: one named actor per conversation, created on first use; it exits
  after ``idle_timeout_s`` without a turn and is recreated later from storage. A host
  that crashes restarts in place, as pooled ones do.
* ``LocalPlacement``: one in-process host, no Ray (tests, development).

A host that dies mid-turn surfaces as :class:`HostFailed`; the runtime turns it
into a clear ``server_error`` (a background run is resumed instead). Hosts restart
(``max_restarts=-1``) and rebuild their message cache from storage.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from troupe.protocol import ProtocolError, new_id
from troupe.protocol.job import TurnJob
from troupe.runtime.container_runs import ContainerFleet, LocalFleet
from troupe.runtime.host import ConversationHost, HostClient
from troupe.runtime.hosting import HostFailed, HostUnavailable, Placement, note_hosting_replica
from troupe.runtime.ray.actors import start_actor
from troupe.runtime.ray.calls import ray_result
from troupe.runtime.ray.idle import exit_when_idle
from troupe.runtime.ray.replicas import PeerReplica, Peers, owner_rank, serve_this_process, stable_hash, this_rank
from troupe.runtime.ray.tool_tasks import local_executor
from troupe.runtime.settings import RuntimeSettings
from troupe.runtime.store_client import StoreClient
from troupe.storage.base import StorageUnavailable

if TYPE_CHECKING:
    from troupe.observe.metrics import Snapshot

__all__ = [
    "LocalPlacement",
    "PooledPlacement",
    "DedicatedPlacement",
    "ReplicaPlacement",
    "ray_placement",
    "stable_hash",
]

_OWN = (ProtocolError, StorageUnavailable)
"""A host's errors that reach the ingress as themselves: a refusal, and the store out of reach
for a moment (the HTTP layer's 503); anything else a host raised stays Ray's error."""


class LocalPlacement:
    """Every thread on one host in this process (the Ray-free runtime: tools in-process too)."""

    def __init__(self, settings: RuntimeSettings, store: StoreClient) -> None:
        from troupe.runtime.ray.mcp import LocalMcpClient

        self.fleet: ContainerFleet = LocalFleet()
        self.host = ConversationHost(
            settings, store=store, executors=[local_executor(settings.tools)], mcp_client=LocalMcpClient(settings),
            fleet=self.fleet,
        )  # fmt: skip

    async def metrics_snapshots(self) -> dict[str, Snapshot | None]:
        """The host is in this process: its metrics are this process's."""
        return {}

    async def host_for(self, thread_id: str) -> HostClient:
        return self.host

    def forget(self, thread_id: str) -> None:
        """A host in this process cannot die on its own."""

    async def warm(self) -> None:
        """The host is in this process already: warm its model clients."""
        await self.host.warm()

    def would_start_process(self, thread_id: str) -> bool:
        return False

    def new_thread_id(self, prefix: str = "thread") -> str:
        return new_id(prefix)

    async def running_host(self, thread_id: str) -> HostClient | None:
        return await self.host_for(thread_id)

    async def close(self) -> None:
        await self.host.close()
        await self.fleet.close()


# -- Ray ----------------------------------------------------------------------------


def ray_tools(settings: RuntimeSettings) -> tuple[list[Any], Any]:
    """A host's tool executors and MCP client on Ray: this node's tool runner (or tasks), MCP actors."""
    import ray

    from troupe.runtime.ray.mcp import RayMcpClient
    from troupe.runtime.ray.tool_tasks import RayToolExecutor, tool_runner

    node_id = ray.get_runtime_context().get_node_id()
    executor = RayToolExecutor(
        settings.tools,
        num_cpus=settings.tool_num_cpus,
        timeout_s=settings.tool_timeout_s,
        runner=(lambda: tool_runner(settings.namespace, node_id)) if settings.tool_runner == "actor" else None,
    )
    return [executor], RayMcpClient(settings)


class ReplicaPlacement(LocalPlacement):
    """``placement = "replica"``: threads hosted inside the ingress replicas themselves.

    A streamed event goes from the loop to the HTTP response without a Ray hop; tools,
    MCP connections and storage are on Ray as with the other placements. With one replica
    (``settings.ingress_replicas``) it hosts every thread; with N, each thread is hosted by
    the replica of rank ``stable_hash(thread) % N``, and a turn that arrives at another is
    handed to it in one Ray call (:mod:`troupe.runtime.ray.replicas`).
    """

    def __init__(self, settings: RuntimeSettings, store: StoreClient) -> None:
        from troupe.runtime.ray.containers import RayFleet
        from troupe.runtime.ray.storage_actor import RayStoreClient

        executors, mcp_client = ray_tools(settings)
        self.fleet: ContainerFleet = RayFleet(settings)
        self.host = ConversationHost(
            settings, store=store, executors=executors, mcp_client=mcp_client, fleet=self.fleet, host_label="replica"
        )
        self.replicas = settings.ingress_replicas
        self.peers = Peers(self.replicas)
        if self.replicas > 1:
            serve_this_process(self.host)
            if isinstance(store, RayStoreClient):  # what another replica journaled is read here too
                store.drain_peers_first(self.peers.drain)

    async def host_for(self, thread_id: str) -> HostClient:
        host = await self.running_host(thread_id)
        if host is None:
            raise HostUnavailable("The replica hosting this conversation is restarting; retry the request.")
        return host

    async def running_host(self, thread_id: str) -> HostClient | None:
        owner = self._owner(thread_id)
        if owner is None:
            return self.host
        peer = await self.peers.get(owner)
        return None if peer is None else RayHostClient(PeerReplica(peer))

    def forget(self, thread_id: str) -> None:
        if (owner := self._owner(thread_id)) is not None:
            self.peers.forget(owner)  # it failed: look for its replica again (Serve restarts it)

    def new_thread_id(self, prefix: str = "thread") -> str:
        # An id that hashes to this replica (one try in N on average): a client that keeps to
        # one replica's port keeps its chains' and conversations' turns on it.
        if self.replicas == 1:
            return new_id(prefix)
        here = this_rank()
        if here is None:
            return new_id(prefix)
        while True:
            thread = new_id(prefix)
            if owner_rank(thread, self.replicas) == here:
                note_hosting_replica(here)
                return thread

    def _owner(self, thread_id: str) -> int | None:
        """The rank of the replica hosting ``thread_id``; None when it is this one. Noted for
        the request's ``Troupe-Replica`` header (:func:`~troupe.runtime.hosting.note_hosting_replica`)."""
        if self.replicas == 1:
            return None
        owner = owner_rank(thread_id, self.replicas)
        note_hosting_replica(owner)
        return None if owner == this_rank() else owner


class HostActor(ConversationHost):
    """The host as it runs inside a Ray actor: storage and tools over Ray."""

    def __init__(self, settings: RuntimeSettings, idle_timeout_s: float | None = None) -> None:
        import ray

        from troupe.runtime.ray.containers import RayFleet
        from troupe.runtime.ray.storage_actor import RayStoreClient

        executors, mcp_client = ray_tools(settings)
        # A bounded label: a pooled host's name; every dedicated host is "dedicated" (its name holds a thread id).
        label = "dedicated" if idle_timeout_s is not None else ray.get_runtime_context().get_actor_name() or "host"
        super().__init__(
            settings, store=RayStoreClient.by_name(settings), executors=executors, mcp_client=mcp_client,
            fleet=RayFleet(settings), host_label=label,
        )
        self._idle_timeout_s = idle_timeout_s
        self._watcher: asyncio.Task[None] | None = None

    async def respond(self, job: TurnJob, *, stream: bool = True) -> AsyncGenerator[list[dict[str, Any]], None]:
        self._watch_idle()
        async with contextlib.aclosing(super().respond(job, stream=stream)) as batches:
            async for batch in batches:
                yield batch

    async def start_background(self, job: TurnJob) -> dict[str, Any]:
        self._watch_idle()
        return await super().start_background(job)

    async def resume_background(self, job: TurnJob) -> dict[str, Any]:
        self._watch_idle()
        return await super().resume_background(job)

    def _watch_idle(self) -> None:
        if self._idle_timeout_s is not None and self._watcher is None:
            # The next turn for this conversation creates a fresh actor, rebuilt from storage.
            self._watcher = asyncio.create_task(
                exit_when_idle(self._idle_timeout_s, lambda: None if self.runs else self.last_active, poll_s=5.0)
            )

    async def ping(self) -> int:
        """Turns running now (tests wait on it; a health probe just awaits it)."""
        return self.running

    async def metrics_snapshot(self) -> Snapshot:
        """This host process's metrics (``troupe.observe.metrics.Registry.snapshot``)."""
        from troupe.observe.metrics import process_registry

        return process_registry().snapshot()


class RayHostClient:
    """A host reached through a Ray actor handle."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def respond(self, job: TurnJob, *, stream: bool = True) -> AsyncGenerator[list[dict[str, Any]], None]:
        # When the client goes away the turn stops (its streaming task is cancelled).
        failed = (
            "The conversation host failed during the response; the conversation's history is intact, "
            "and the next request will continue it."
        )
        return self._stream("respond", job, stream=stream, failed=failed)

    def follow(self, tenant: str, response_id: str, starting_after: int) -> AsyncGenerator[list[dict[str, Any]], None]:
        # When the follower goes away only the following stops; the run goes on.
        failed = "The conversation host failed while the response was followed."
        return self._stream("follow", tenant, response_id, starting_after, failed=failed)

    async def _stream(self, method: str, *args: Any, failed: str, **kwargs: Any) -> AsyncGenerator[list[dict[str, Any]], None]:
        """A host method's batches over a Ray streaming generator; cancelled when not read to the end."""
        import ray

        # Backpressure of one batch: the host holds its next batch until this one is taken, and
        # meanwhile gathers what the turn makes into it (batching.coalesce): under load, fewer and
        # bigger hops instead of a queue of one-event objects.
        options = {"num_returns": "streaming", "_generator_backpressure_num_objects": 1}
        refs = getattr(self.handle, method).options(**options).remote(*args, **kwargs)
        done = False
        try:
            async for ref in refs:
                # A bad request, raised by the host before streaming, arrives as itself.
                yield await ray_result(ref, own=_OWN)
            done = True
        except ray.exceptions.RayActorError as exc:
            raise HostFailed(failed) from exc
        finally:
            if not done:
                ray.cancel(refs)

    async def start_background(self, job: TurnJob) -> dict[str, Any]:
        return await self._call("start_background", job)

    async def resume_background(self, job: TurnJob) -> dict[str, Any]:
        return await self._call("resume_background", job)

    async def run_ended(self, tenant: str, response_id: str) -> None:
        await self._call("run_ended", tenant, response_id)

    async def live_response(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        return await self._call("live_response", tenant, response_id)

    async def cancel(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        return await self._call("cancel", tenant, response_id)

    async def steer(self, tenant: str, response_id: str) -> bool:
        return bool(await self._call("steer", tenant, response_id))

    async def _call(self, method: str, *args: Any) -> Any:
        import ray

        try:
            return await ray_result(getattr(self.handle, method).remote(*args), own=_OWN)
        except ray.exceptions.RayActorError as exc:
            raise HostFailed("The conversation host is not available; retry the request.") from exc

    async def add_conversation_items(self, tenant: str, conversation_id: str, items: list[dict[str, Any]]) -> Any:
        ref = self.handle.add_conversation_items.remote(tenant, conversation_id, items)
        return await ray_result(ref, own=_OWN)

    async def delete_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> bool:
        ref = self.handle.delete_conversation_item.remote(tenant, conversation_id, item_id)
        return await ray_result(ref, own=_OWN)

    async def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        ref = self.handle.delete_conversation.remote(tenant, conversation_id)
        return await ray_result(ref, own=_OWN)



class PooledPlacement:
    """K shared host actors; a thread's host is chosen by a stable hash of its id."""

    def __init__(self, settings: RuntimeSettings) -> None:
        from troupe.runtime.ray.containers import RayFleet

        self.fleet: ContainerFleet = RayFleet(settings)
        self.handles = [
            start_actor(HostActor, settings, name=f"troupe-host-{i}", namespace=settings.namespace)
            for i in range(settings.pool_size)
        ]

    async def host_for(self, thread_id: str) -> HostClient:
        return RayHostClient(self.handles[stable_hash(thread_id) % len(self.handles)])

    def forget(self, thread_id: str) -> None:
        """Pooled hosts restart in place; the handle stays valid."""

    async def warm(self) -> None:
        await asyncio.gather(*(handle.warm.remote() for handle in self.handles))

    def would_start_process(self, thread_id: str) -> bool:
        return False

    def new_thread_id(self, prefix: str = "thread") -> str:
        return new_id(prefix)

    async def running_host(self, thread_id: str) -> HostClient | None:
        return await self.host_for(thread_id)

    async def metrics_snapshots(self) -> dict[str, Snapshot | None]:
        return await _snapshots({f"troupe-host-{i}": handle for i, handle in enumerate(self.handles)})

    async def close(self) -> None:
        """The hosts serve every replica; they end with the Ray namespace."""


class DedicatedPlacement:
    """One named, detached actor per conversation, exiting when idle."""

    def __init__(self, settings: RuntimeSettings, *, max_cached_handles: int = 10_000) -> None:
        from troupe.runtime.ray.containers import RayFleet

        self.settings = settings
        self.fleet: ContainerFleet = RayFleet(settings)
        self._handles: OrderedDict[str, Any] = OrderedDict()
        self._max = max_cached_handles

    async def host_for(self, thread_id: str) -> HostClient:
        handle = self._handles.get(thread_id)
        if handle is None:
            handle = start_actor(
                HostActor,
                self.settings,
                self.settings.idle_timeout_s,
                name=f"troupe-conv-{thread_id}",
                namespace=self.settings.namespace,
                max_concurrency=1_000,
                # A crashed host restarts in place, under its name: Ray keeps the name of an actor
                # that died unexpectedly bound to the dead actor (measured: still after 30 s), so a
                # fresh one could not take it. Its idle exit is final (no_restart).
                max_restarts=-1,
                # Detached: Ray ends an actor that is not when its owner drops its last handle, so
                # forget() (or this cache's eviction) killed a live host, and a resume that had
                # reached it ran again on the next (a tool ran three times where it should twice),
                # and the ingress replica that started it took it down when it died.
                lifetime="detached",
            )
            self._handles[thread_id] = handle
            if len(self._handles) > self._max:
                self._handles.popitem(last=False)
        self._handles.move_to_end(thread_id)
        return RayHostClient(handle)

    def forget(self, thread_id: str) -> None:
        self._handles.pop(thread_id, None)

    async def warm(self) -> None:
        """A conversation's actor starts with its first turn."""

    def would_start_process(self, thread_id: str) -> bool:
        # An actor this replica routed to before is (or was recently) alive.
        return thread_id not in self._handles

    def new_thread_id(self, prefix: str = "thread") -> str:
        return new_id(prefix)

    async def running_host(self, thread_id: str) -> HostClient | None:
        import ray

        handle = self._handles.get(thread_id)
        if handle is None:
            try:  # another replica may have started it
                name = f"troupe-conv-{thread_id}"
                handle = await asyncio.to_thread(ray.get_actor, name, namespace=self.settings.namespace)
            except ValueError:
                return None
        return RayHostClient(handle)

    async def metrics_snapshots(self) -> dict[str, Snapshot | None]:
        """Every live dedicated host of the namespace (also those another replica started)."""
        import ray

        prefix = "troupe-conv-"
        listed = await asyncio.to_thread(ray.util.list_named_actors, all_namespaces=True)
        names = {a["name"] for a in listed if a["namespace"] == self.settings.namespace and a["name"].startswith(prefix)}
        handles = {}
        for name in names:
            handle = self._handles.get(name.removeprefix(prefix))
            if handle is None:
                try:
                    handle = await asyncio.to_thread(ray.get_actor, name, namespace=self.settings.namespace)
                except ValueError:  # it exited meanwhile
                    continue
            handles[name] = handle
        return await _snapshots(handles)

    async def close(self) -> None:
        self._handles.clear()


async def _snapshots(handles: dict[str, Any], timeout_s: float = 5.0) -> dict[str, Snapshot | None]:
    """Each host actor's ``metrics_snapshot()`` at once; None for one that did not answer in time."""

    async def one(handle: Any) -> Snapshot | None:
        try:
            return await asyncio.wait_for(ray_result(handle.metrics_snapshot.remote()), timeout_s)
        except Exception:  # noqa: BLE001 - restarting, exited, busy: its last snapshot stands
            return None

    results = await asyncio.gather(*(one(handle) for handle in handles.values()))
    return dict(zip(handles, results, strict=True))


def ray_placement(settings: RuntimeSettings, store: StoreClient) -> Placement:
    """The placement ``settings.placement`` names; ``store`` serves a host in this process."""
    if settings.placement == "dedicated":
        return DedicatedPlacement(settings)
    if settings.placement == "replica":
        return ReplicaPlacement(settings, store)
    return PooledPlacement(settings)
