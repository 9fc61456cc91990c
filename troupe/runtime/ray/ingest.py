"""Ingestion as Ray tasks: one task per attached file, reaching storage through the storage
actor. What :class:`~troupe.runtime.rag.VectorStores` starts its ingestions with on Ray
(:func:`ray_ingestion`); in-process it runs :func:`~troupe.runtime._ingest.ingest` on threads.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

from troupe.rag.records import IngestTicket
from troupe.runtime._ingest import Outcome, ingest
from troupe.runtime.settings import ModelSpec

if TYPE_CHECKING:  # not at run time: an ingestion task's worker imports this module, kept light
    from troupe.runtime.rag import StartIngest

__all__ = ["ingest_on_ray", "ray_ingestion"]


def ingest_on_ray(ticket: IngestTicket, spec: ModelSpec | None, storage: Any) -> Outcome:
    """:func:`ingest` as a Ray task: storage is the storage actor (its handle, ``storage``).

    Its imports are light on purpose (no DuckDB, no wire protocol): a cold worker starts faster.
    """
    import ray

    from troupe.runtime.ray.calls import ray_result_sync

    def call(method: str, *args: Any, **kwargs: Any) -> Any:
        return ray_result_sync(storage.call.remote(method, args, kwargs))

    node = ray.get_runtime_context().get_node_id()[:8]
    return ingest(ticket, spec, call, worker=f"{node}:{os.getpid()}")



_INGEST_TASK: Any = None


def _ray_ingest() -> Any:
    """:func:`ingest_on_ray` as a Ray remote function (made once: each ``ray.remote`` exports anew)."""
    global _INGEST_TASK
    if _INGEST_TASK is None:
        import ray

        _INGEST_TASK = ray.remote(ingest_on_ray)
    return _INGEST_TASK


def ray_ingestion(num_cpus: float, storage: Any) -> StartIngest:
    """Start each ticket's ingestion as a Ray task of ``num_cpus`` CPUs, reaching the storage
    actor ``storage`` (its handle)."""

    def start(tickets: list[IngestTicket], specs: dict[str, ModelSpec | None]) -> list[asyncio.Future[Any]]:
        task = _ray_ingest().options(num_cpus=num_cpus, max_retries=0)
        return [asyncio.wrap_future(task.remote(t, specs[t.embedding_model], storage).future()) for t in tickets]

    return start
