"""Containers on Ray: one actor per container owns its sandbox
(:class:`~troupe.runtime.ray.container_actor.ContainerActor`), and :class:`RayFleet` reaches it
by name from any host of the cluster.

The actor is named ``troupe-container-<id>`` in the runtime's namespace and is detached: it
outlives the host that started it (a dedicated host that idles out, a replica that restarts),
so the container's Python state lives as long as the container does. It reserves the
container's ``memory_limit`` as Ray ``memory`` and ``[containers] ray_cpus`` CPUs, which is how
Ray spreads containers over the cluster's nodes. It ends itself once idle for its container's
expiry time, and the runtime kills it when the container is deleted or expires.

Its sandbox mounts the container's directory, which is on the storage actor's node unless
``[containers] directory`` names a filesystem every node shares: by default, container actors
are placed on that node (Ray's node affinity); with a shared directory, anywhere Ray finds room.

**Spares.** A new Ray worker process takes 0.5 to 1 s to start on a 2-core machine, most of a
new container's first run. So a fleet that has made a container keeps one spare: an actor
already running (or starting) under the name of a container id not used yet. The next container
made here with the default ``memory_limit`` takes that id (:meth:`RayFleet.reserve`, which
``ContainerService.create_container`` asks; a spare still starting is waited for, briefly, as
it is ahead of a new actor), and its first run finds its process up; the sandbox itself starts on that run,
with the container's settings. A spare unused for
:data:`SPARE_IDLE_S` ends itself.

If the actor dies (its node, an out-of-memory kill), Ray starts it again under its name and
the next run gets a fresh kernel over the same directory; the run that was under way fails
(its call tells the model).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from troupe.protocol.containers import new_container_id
from troupe.runtime.container_runs import BoxSpec
from troupe.runtime.ray.actors import STORAGE_ACTOR_NAME, start_actor
from troupe.runtime.ray.container_actor import ContainerActor
from troupe.runtime.settings import RuntimeSettings
from troupe.sandbox import CommandResult, PythonResult

__all__ = ["RayFleet", "container_actor_name"]

NAME_PREFIX = "troupe-container-"
SPARE_MEMORY_LIMIT = "1g"
"""The ``memory_limit`` a spare's Ray memory is reserved for: the default one."""
SPARE_IDLE_S = 600.0
"""How long a spare waits for its container before it ends."""
SPARE_WAIT_S = 2.0
"""How long a new container waits for a spare still starting (a new actor takes 0.5 to 1 s)."""
_GiB = 1 << 30


def container_actor_name(container_id: str) -> str:
    """The Ray name of a container's actor."""
    return NAME_PREFIX + container_id


class RayFleet:
    """The containers' actors of one Ray namespace (any host's; a ``ContainerFleet``).

    Handles are kept by container id. A call whose actor died fails (the code may have run, so
    it is never tried again) and drops the handle: the next call looks the actor up anew.
    """

    def __init__(self, settings: RuntimeSettings, *, max_handles: int = 4096) -> None:
        self.namespace = settings.namespace
        self.ray_cpus = settings.containers.ray_cpus
        self.start_timeout_s = settings.containers.start_timeout_s
        self.shared_directory = bool(settings.containers.directory)
        self._node: str | None = None
        self._handles: OrderedDict[str, Any] = OrderedDict()
        self._max = max_handles
        self._spare: _Spare | None = None
        self._reserving = asyncio.Lock()

    async def reserve(self, memory_limit: str) -> str | None:
        """The id of a container actor already running (a spare), for a container about to be
        made with the default ``memory_limit`` (the spare's Ray memory is reserved for that);
        None for another limit, and for the first container made here, which starts the spare.

        A spare still starting is waited for, up to :data:`SPARE_WAIT_S`: it is ahead of a new
        actor; one not up by then stays the spare, for the next container. Taking one starts the
        next, in the background: a fleet keeps at most one, and only a fleet that makes
        containers keeps one. Reservations are taken one at a time (no id is handed out twice).
        """
        if memory_limit != SPARE_MEMORY_LIMIT:
            return None
        async with self._reserving:
            spare = self._spare
            if spare is None:
                self._spare = self._new_spare()
                return None
            if not spare.started.done() and spare.fresh():
                try:
                    await asyncio.wait_for(asyncio.shield(spare.started), SPARE_WAIT_S)
                except TimeoutError:
                    return None  # still on its way (a busy machine, a full cluster): kept for the next
                except Exception:  # noqa: BLE001, S110 - it failed to start: replaced below
                    pass
            self._spare = self._new_spare()
            if spare.usable():
                return spare.container_id
            if spare.started.done() and not spare.started.cancelled() and spare.started.exception() is None:
                asyncio.ensure_future(self.stop(spare.container_id))  # too old to hand out: end it now
            return None

    def _new_spare(self) -> _Spare:
        container_id = new_container_id()
        return _Spare(container_id, asyncio.ensure_future(self._start(container_id, _GiB, SPARE_IDLE_S)))

    async def _actor(self, box: BoxSpec) -> Any:
        handle = self._handles.get(box.container_id)
        if handle is None:
            handle = await self._start(box.container_id, box.limits.memory_bytes, box.idle_s)
            self._handles[box.container_id] = handle
            if len(self._handles) > self._max:
                self._handles.popitem(last=False)
        self._handles.move_to_end(box.container_id)
        return handle

    async def _start(self, container_id: str, memory_bytes: int, idle_s: float) -> Any:
        """The container's actor, started (or the running one of that name), once it runs."""
        placement = {} if self.shared_directory else {"scheduling_strategy": await self._beside_the_files()}
        # Looking the name up is a blocking call to Ray's control store: off the event loop.
        handle = await asyncio.to_thread(
            start_actor, ContainerActor, idle_s, name=container_actor_name(container_id), namespace=self.namespace,
            lifetime="detached", num_cpus=self.ray_cpus, memory=memory_bytes, max_concurrency=64, **placement,
        )  # fmt: skip
        await self._placed(handle, memory_bytes)
        return handle

    async def _beside_the_files(self) -> Any:
        """Ray's strategy that keeps a container's actor on the storage actor's node, where its
        directory is (the default ``[containers] directory``, on that node's disk)."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if self._node is None:
            storage = await asyncio.to_thread(ray.get_actor, STORAGE_ACTOR_NAME, namespace=self.namespace)
            self._node = str(await storage.node_id.remote())
        return NodeAffinitySchedulingStrategy(self._node, soft=False)

    async def _placed(self, handle: Any, memory_bytes: int) -> None:
        """Wait until the actor runs: Ray keeps an actor no node has room for pending forever."""
        import ray

        try:
            await asyncio.wait_for(handle.ready.remote(), self.start_timeout_s)
        except TimeoutError:
            ray.kill(handle, no_restart=True)
            gib = memory_bytes / _GiB
            raise RuntimeError(
                f"the container's sandbox could not start within {self.start_timeout_s:g} s: no node of the cluster "
                f"had {gib:g} GiB of memory (its memory_limit) and {self.ray_cpus:g} CPUs free for it"
            ) from None

    async def _call(self, box: BoxSpec, method: str, *args: Any) -> Any:
        import ray
        from ray.exceptions import RayActorError

        handle = await self._actor(box)
        ref = getattr(handle, method).remote(box.sandbox(), *args)
        try:
            return await ref
        except asyncio.CancelledError:
            ray.cancel(ref)  # the actor's call is cancelled too: the sandbox kills what it ran
            raise
        except RayActorError:
            # Never tried again: the code may have run. The next call looks the actor up anew.
            self._handles.pop(box.container_id, None)
            raise

    async def run_python(self, box: BoxSpec, code: str, *, timeout_s: float) -> PythonResult:
        result: PythonResult = await self._call(box, "run_python", code, timeout_s)
        return result

    async def run_shell(
        self, box: BoxSpec, commands: Sequence[str], *, timeout_s: float, max_output_length: int | None
    ) -> list[CommandResult]:
        results: list[CommandResult] = await self._call(box, "run_shell", list(commands), timeout_s, max_output_length)
        return results

    async def stop(self, container_id: str) -> None:
        import ray

        self._handles.pop(container_id, None)
        try:
            handle = await asyncio.to_thread(
                ray.get_actor, container_actor_name(container_id), namespace=self.namespace
            )
        except ValueError:
            return  # no sandbox runs for it
        try:
            await asyncio.wait_for(handle.close.remote(), timeout=10)
        finally:
            ray.kill(handle, no_restart=True)

    async def close(self) -> None:
        """The actors are detached: they end when idle, or with their containers (a spare
        after :data:`SPARE_IDLE_S` unused)."""


@dataclass(slots=True)
class _Spare:
    """A container actor started before its container: its id, and its start."""

    container_id: str
    started: asyncio.Future[Any]
    at: float = field(default_factory=time.monotonic)

    def fresh(self) -> bool:
        """Young enough not to be ending as idle while its container is made."""
        return time.monotonic() - self.at < SPARE_IDLE_S / 2

    def usable(self) -> bool:
        """Running, and fresh."""
        return self.fresh() and self.started.done() and not self.started.cancelled() and self.started.exception() is None
