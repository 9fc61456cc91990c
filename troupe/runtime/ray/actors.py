"""Starting Troupe's Ray actors: the one place their common options live.

Every actor Troupe runs (the storage actor, conversation hosts, tool runners, MCP
connections, eval workers) is a plain class wrapped by ``ray.remote`` here, and starts with
the same defaults unless its call says otherwise:

* ``num_cpus=0``: they wait on I/O (the model, the store, the network); work that needs
  CPUs runs as Ray tasks that reserve them;
* ``max_concurrency=10_000``: async actors serve many calls at once;
* ``max_restarts=-1``: an actor that dies comes back (a host rebuilds from storage);
* ``max_task_retries=0``: a call is never replayed by Ray (a turn is not idempotent);
* a named actor is looked up when it already runs (``get_if_exists``), so replicas share it.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["start_actor", "STORAGE_ACTOR_NAME"]

STORAGE_ACTOR_NAME = "troupe-storage"
"""The storage actor's name in the server's Ray namespace (live SQL and the tests look it up)."""


@functools.cache
def _remote(cls: type) -> Any:
    import ray

    return ray.remote(cls)


def start_actor(
    cls: type,
    *args: Any,
    name: str | None = None,
    namespace: str | None = None,
    max_concurrency: int = 10_000,
    max_restarts: int = -1,
    **options: Any,
) -> Any:
    """A handle to an actor of ``cls`` started with ``args`` (or the running one named ``name``).

    ``options``: further ``.options()`` for this kind of actor (``scheduling_strategy``,
    ``resources``).
    """
    options = {
        "num_cpus": 0,
        "max_concurrency": max_concurrency,
        "max_restarts": max_restarts,
        "max_task_retries": 0,
        **options,
    }
    if name is not None:
        options.update(name=name, namespace=namespace, get_if_exists=True)
    return _remote(cls).options(**options).remote(*args)
