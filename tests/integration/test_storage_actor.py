"""The storage actor's one ``call``: a store method sent by ``RayStoreClient`` reaches DuckDB in
the actor (real Ray, a DuckDB file), with the store's errors as themselves; a name the
contract does not declare is refused before anything is sent."""

from __future__ import annotations

import uuid

import pytest
import ray

from troupe.protocol import NotFound
from troupe.runtime import RuntimeSettings
from troupe.runtime.ray.calls import ray_result
from troupe.runtime.ray.storage_actor import RayStoreClient
from troupe.runtime.store_client import NotAStoreMethod
from troupe.storage import StorageError

from ..unit.test_store_contract import conversation, make_record, message

pytestmark = [pytest.mark.usefixtures("ray_session"), pytest.mark.asyncio(loop_scope="module")]


def _in_duckdb(actor, sql: str) -> list[tuple]:
    """``sql`` run on the actor's own DuckDB store, in the actor's process."""
    return ray.get(actor.__ray_call__.remote(lambda self: self.store.query(sql)[1]))


async def test_a_call_across_the_storage_actor_reaches_duckdb(tmp_path) -> None:
    settings = RuntimeSettings(storage_path=str(tmp_path / "s.duckdb"), namespace=f"test-sa-{uuid.uuid4().hex[:8]}")
    client = await RayStoreClient.connect(settings)
    try:
        await client.create_conversation("acme", conversation("conv_1"), [message("msg_1", "user", "hi")])
        assert _in_duckdb(client.handle, "SELECT tenant, id FROM conversations") == [("acme", "conv_1")]
        assert (await client.get_conversation("acme", "conv_1"))["id"] == "conv_1"
        with pytest.raises(StorageError):  # the id is taken: DuckDB's refusal, as itself
            await client.create_conversation("acme", conversation("conv_1"), [])
        await client.write_response(make_record("resp_1"))  # the journal path, then a read behind it
        assert [r["id"] for r in (await client.list_responses("acme")).data] == ["resp_1"]
        assert await client.call("delete_conversation", ("acme", "conv_1")) is True
        assert _in_duckdb(client.handle, "SELECT count(*) FROM conversations") == [(0,)]
        # The files area: the actor's files thread and connection.
        file = {"id": "file-1", "created_at": 1.0, "filename": "a.txt", "purpose": "assistants", "expires_at": None}
        await client.create_file("acme", file, b"abc")
        assert _in_duckdb(client.handle, "SELECT id, bytes FROM files") == [("file-1", 3)]
        with pytest.raises(NotFound):  # the API's 404, as itself
            await client.add_files("acme", "vs_missing", [{"file_id": "file-1"}])
    finally:
        ray.kill(client.handle)


async def test_a_name_that_is_not_a_store_method_is_refused_on_both_sides(tmp_path) -> None:
    settings = RuntimeSettings(storage_path=":memory:", namespace=f"test-sa-{uuid.uuid4().hex[:8]}")
    client = await RayStoreClient.connect(settings)
    try:
        for name in ("drop_everything", "query", "write_responses"):
            with pytest.raises(NotAStoreMethod):
                getattr(client, name)
            with pytest.raises(NotAStoreMethod):
                await client.call(name, ())
        with pytest.raises(NotAStoreMethod):  # sent anyway: the actor refuses it too
            await ray_result(client.handle.call.remote("query", ("SELECT 1",), {}))
        assert await client.get_response("acme", "resp_missing") is None
    finally:
        ray.kill(client.handle)
