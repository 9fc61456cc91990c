"""Where a thread's turns run, as the runtime sees it: the :class:`Placement` interface, and
:class:`HostFailed`, what a host that died mid-turn becomes.

The placements themselves (in this process, in the ingress replica, on pooled or dedicated
Ray actors) are in :mod:`troupe.runtime.ray.placement`; what the runtime and its Conversations API
calls need of one is here, so that they import no Ray to name it.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Protocol

from troupe.protocol import ServerError
from troupe.runtime.container_runs import ContainerFleet
from troupe.runtime.host import HostClient

if TYPE_CHECKING:
    from troupe.observe.metrics import Snapshot

__all__ = ["Placement", "HostFailed", "HostUnavailable", "HOSTING_REPLICA", "note_hosting_replica"]

HOSTING_REPLICA: ContextVar[list[int] | None] = ContextVar("troupe_hosting_replica", default=None)
"""Per request, when several ingress replicas share the threads: a list the HTTP layer sets, in
which the placement notes the rank of the replica hosting the thread the request is about (the
last one noted wins). The HTTP answer names it in its ``Troupe-Replica`` header."""


def note_hosting_replica(rank: int) -> None:
    """Note ``rank`` as the replica hosting this request's thread (nothing outside a request)."""
    noted = HOSTING_REPLICA.get()
    if noted is not None:
        noted[:] = [rank]


class HostFailed(ServerError):
    """The host running a turn died or could not be reached (500, ``server_error``)."""

    default_code = "server_error"


class HostUnavailable(HostFailed):
    """No host could take the turn now, and nothing of it ran (503: the ``openai`` SDK retries
    it): the ingress replica that hosts its thread is down while Serve starts another."""

    default_status = 503


class Placement(Protocol):
    fleet: ContainerFleet
    """Where the containers' sandboxes run (the Containers API stops a deleted one's)."""

    async def host_for(self, thread_id: str) -> HostClient: ...

    def forget(self, thread_id: str) -> None:
        """Drop any cached route for ``thread_id`` (its host died)."""
        ...

    async def warm(self) -> None:
        """Return once the hosts that exist up front are up (the first request must not wait)."""
        ...

    def would_start_process(self, thread_id: str) -> bool:
        """Whether routing a turn of ``thread_id`` now would start a new host process."""
        ...

    def new_thread_id(self, prefix: str = "thread") -> str:
        """The id of a new thread (``thread_…`` for a chain's first response, ``conv_…`` for a
        conversation): one this process hosts when it hosts some (several ingress replicas), so
        that the next turn sent here stays here."""
        ...

    async def running_host(self, thread_id: str) -> HostClient | None:
        """The host of ``thread_id`` if one is up; never starts one (to read or cancel a run)."""
        ...

    async def metrics_snapshots(self) -> dict[str, Snapshot | None]:
        """The metrics of every host process apart from this one, by a stable source name
        (None: a host that did not answer now); ``troupe.observe.metrics.ScrapeView`` sums them."""
        ...

    async def close(self) -> None: ...
