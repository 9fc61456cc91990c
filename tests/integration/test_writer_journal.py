"""A writer journal beside the storage actor: durable without the round trip, read back, never lost.

Under ``placement = "replica"`` the ingress replica journals its finished responses itself
(``JournalingStoreClient``) and ships them to the storage actor behind. These tests run the
real storage actor on a DuckDB file, and a writer in an actor process that is killed.
"""

from __future__ import annotations

import os
import uuid

import pytest
import ray

from tests.servers import wait_until
from troupe.runtime import RuntimeSettings
from troupe.runtime.ray.calls import ray_result
from troupe.runtime.ray.storage_actor import JournalingStoreClient, RayStoreClient, storage_actor
from troupe.storage.journal import WRITER_PREFIX, journal_dir

from ..unit.test_store_contract import make_record

pytestmark = [pytest.mark.usefixtures("ray_session"), pytest.mark.asyncio(loop_scope="module")]

LINGER = 3600.0
"""The writers here ship nothing on their own: what the storage actor gets, it got on demand."""


def _settings(tmp_path) -> RuntimeSettings:
    return RuntimeSettings(storage_path=str(tmp_path / "journal.duckdb"), namespace=f"test-wj-{uuid.uuid4().hex[:8]}")


async def _journaling_client(settings: RuntimeSettings) -> JournalingStoreClient:
    client = await JournalingStoreClient.connect(settings)
    assert isinstance(client, JournalingStoreClient)  # the storage actor is on this node
    await client.close()  # connect's own client ships as usual: replaced by one that lingers
    home = await ray_result(client.handle.journal_home.remote())
    return JournalingStoreClient(client.handle, home[1], apply_delay_s=LINGER)


async def _gone(pid: int) -> None:
    """Wait until process ``pid`` has exited (ray.kill returns before it has)."""

    async def exited() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    await wait_until(exited, what=f"process {pid}'s exit")


def _writer_dirs(settings: RuntimeSettings) -> list[str]:
    return sorted(n for n in os.listdir(journal_dir(settings.storage_path)) if n.startswith(WRITER_PREFIX))


@ray.remote(num_cpus=0)
class Writer:
    """A process that journals responses and is then killed before it ships them."""

    async def write(self, settings: RuntimeSettings, ids: list[str]) -> tuple[str, int]:
        handle = storage_actor(settings)
        home = await ray_result(handle.journal_home.remote())
        self.client = JournalingStoreClient(handle, home[1], apply_delay_s=LINGER)
        for rid in ids:
            await self.client.write_response(make_record(rid))
        return self.client.name, os.getpid()


async def test_a_replica_without_a_journal_reads_what_a_peer_journaled_before_it_was_shipped(tmp_path):
    """Two ingress replicas on two nodes: the one on the storage actor's node journals, the
    other has no journal (a plain client). The plain one's reads first have its peers ship
    their journals (``drain_peers_first``), so it sees a response the moment the journaling
    one acknowledged it; calls apart from responses do not wait for them."""
    settings = _settings(tmp_path)
    journaling = await _journaling_client(settings)
    plain = RayStoreClient(journaling.handle)
    drains = []

    async def drain_peer() -> None:
        drains.append(1)
        await journaling.drain_journal()

    plain.drain_peers_first(drain_peer)
    try:
        await journaling.write_response(make_record("resp_peer"))  # held in the journal (LINGER)
        stored = await plain.get_response("acme", "resp_peer")
        assert stored is not None and stored["id"] == "resp_peer"
        assert [r["id"] for r in (await plain.list_responses("acme")).data] == ["resp_peer"]
        assert len(drains) == 2
        await plain.list_agents("acme")  # the agents area reads no response: no drain
        assert len(drains) == 2
    finally:
        await journaling.close()


async def test_a_writer_reads_its_own_writes_before_they_were_shipped(tmp_path):
    settings = _settings(tmp_path)
    client = await _journaling_client(settings)
    try:
        await client.write_response(make_record("resp_own"))
        # Only the writer's own journal holds it now; a read ships it first.
        stored = await client.get_response("acme", "resp_own")
        assert stored is not None and stored["id"] == "resp_own"
        page = await client.list_input_items("acme", "resp_own")
        assert page is not None and [i["id"] for i in page.data] == ["msg_resp_own_in"]
    finally:
        await client.close()
        ray.kill(client.handle)


async def test_a_killed_writer_loses_no_acknowledged_response(tmp_path):
    settings = _settings(tmp_path)
    reader = await RayStoreClient.connect(settings)
    writer = Writer.remote()
    ids = [f"resp_{i:02d}" for i in range(8)]
    name, pid = await writer.write.remote(settings, ids)
    try:
        assert _writer_dirs(settings) == [WRITER_PREFIX + name]
        assert await reader.get_response("acme", ids[0]) is None  # journaled, not shipped
        assert await ray_result(reader.handle.adopt_orphans.remote()) == 0  # its writer lives
        ray.kill(writer)  # SIGKILL: nothing runs on the way out
        await _gone(pid)
        # The next writer to connect (a restarted replica) has the actor adopt the journal.
        successor = await JournalingStoreClient.connect(settings)
        for rid in ids:
            stored = await reader.get_response("acme", rid)
            assert stored is not None and stored["id"] == rid
        assert WRITER_PREFIX + name not in _writer_dirs(settings)
        await successor.close()
    finally:
        ray.kill(reader.handle)


async def test_a_batch_sent_again_is_not_stored_twice(tmp_path):
    """A batch whose reply was lost is resent; the writer's position tells the actor it has it."""
    settings = _settings(tmp_path)
    reader = await RayStoreClient.connect(settings)
    try:
        batch = [make_record("resp_a"), make_record("resp_b")]
        await ray_result(reader.handle.apply_journal.remote("w1", batch, 2))
        await ray_result(reader.handle.apply_journal.remote("w1", batch, 2))  # resent: no duplicate-id error
        page = await reader.list_responses("acme")
        assert sorted(r["id"] for r in page.data) == ["resp_a", "resp_b"]
    finally:
        ray.kill(reader.handle)
