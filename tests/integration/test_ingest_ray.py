"""Ingestion on Ray: a file per Ray task, writing through the storage actor.

The real path of ``troupe serve``: :class:`VectorStores` over the storage actor's client, so
each attached file is a Ray task (``ingest_num_cpus`` each) that parses, chunks and embeds it
and stores its chunks through the actor. The tasks' recorded start and end times show them
overlapping, on several worker processes; a corrupt PDF among them fails alone.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
import ray

from tests.servers import wait_until
from troupe.rag import wire
from troupe.runtime.rag import VectorStores
from troupe.runtime.ray.ingest import ray_ingestion
from troupe.runtime.ray.storage_actor import STORAGE_ACTOR_NAME, RayStoreClient
from troupe.runtime.settings import RuntimeSettings

pytestmark = [pytest.mark.usefixtures("ray_session")]

FILES = 200


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The largest number of ``(start, end)`` intervals that hold at one moment."""
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda e: (e[0], e[1]))
    running = best = 0
    for _, step in edges:
        running += step
        best = max(best, running)
    return best


async def test_two_hundred_files_are_ingested_by_overlapping_tasks_and_a_corrupt_pdf_fails_alone(tmp_path) -> None:
    # 0.5 CPUs a task: 4 at once on the session's 2 CPUs (Ray starts 4 worker processes, not 8).
    settings = RuntimeSettings(namespace=f"ingest-{uuid.uuid4().hex[:6]}", storage_path=str(tmp_path / "t.duckdb"),
                               ingest_num_cpus=0.5)  # fmt: skip
    store = await RayStoreClient.connect(settings)
    stores = VectorStores(settings, store, ray_ingestion(settings.ingest_num_cpus, store.handle))
    try:
        def note(i: int) -> bytes:
            return (f"Note {i}. The code word of note {i} is lantern{i}. " + "Filler words about nothing. " * 20).encode()

        made = await asyncio.gather(*(stores.create_file("", filename=f"n{i}.txt", purpose="assistants", data=note(i))
                                      for i in range(FILES)))  # fmt: skip
        ids = [f["id"] for f in made]
        corrupt = (await stores.create_file("", filename="broken.pdf", purpose="assistants", data=b"%PDF-1.5 oops"))["id"]
        vs = await stores.create_vector_store("", name="many")
        chunking = wire.chunking_strategy(None)
        batch = await stores.create_batch("", vs["id"], [{"file_id": f, "attributes": None, "chunking": chunking}
                                                         for f in [*ids, corrupt]])  # fmt: skip

        async def settled() -> bool:
            return (await stores.get_batch("", vs["id"], batch["id"]))["status"] != "in_progress"

        await wait_until(settled, timeout_s=90, what="the batch ingested")
        done = await stores.get_batch("", vs["id"], batch["id"])
        assert done["status"] == "completed"
        assert done["file_counts"] == {"in_progress": 0, "completed": FILES, "failed": 1, "cancelled": 0,
                                       "total": FILES + 1}  # fmt: skip
        failed = await stores.get_store_file("", vs["id"], corrupt)
        assert failed["last_error"]["code"] == "invalid_file" and "PDF" in failed["last_error"]["message"]

        trace = await stores.ingest_trace("", vs["id"])
        intervals = [(t["started_at"], t["ended_at"]) for t in trace]
        assert all(s is not None and e is not None and s <= e for s, e in intervals)
        assert most_at_once(intervals) >= 2, "the ingestion tasks never overlapped"
        workers = {t["worker"] for t in trace}
        assert len(workers) >= 2, f"every file ran in one process: {workers}"
        assert all(w.split(":")[0] == ray.get_runtime_context().get_node_id()[:8] for w in workers)

        hits = await stores.search("", [vs["id"]], "which note has the code word lantern137?", max_num_results=3)
        assert hits[0]["filename"] == "n137.txt"
    finally:
        await stores.close()
        ray.kill(ray.get_actor(STORAGE_ACTOR_NAME, namespace=settings.namespace))
