"""The storage actor's read-only SQL, and the owner file by which ``troupe sql`` finds it.

The real storage actor on a DuckDB file, reached as the ingress replica reaches it
(``JournalingStoreClient``, which ships its own journal first), and as ``troupe sql`` does
(:func:`troupe.runtime.ray.live_sql.query_server`, here inside a process already on the cluster).
"""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest
import ray

from troupe.runtime import RuntimeSettings
from troupe.runtime.ray.live_sql import query_server, read_owner
from troupe.runtime.ray.storage_actor import JournalingStoreClient
from troupe.storage import DuckDBStore, QueryError, QueryTimeout, StoreLocked

from ..unit.test_store_contract import make_record

pytestmark = [pytest.mark.usefixtures("ray_session"), pytest.mark.asyncio(loop_scope="module")]


async def test_the_storage_actor_answers_sql_and_says_where_it_is(tmp_path) -> None:
    path = str(tmp_path / "live.duckdb")
    settings = RuntimeSettings(storage_path=path, namespace=f"test-sql-{uuid.uuid4().hex[:8]}")
    client = await JournalingStoreClient.connect(settings)
    try:
        await client.write_response(make_record("resp_sql"))  # in this process's journal only, for now
        result = await client.run_sql("SELECT id, tenant FROM responses", max_rows=10, timeout_s=5)
        assert (result.columns, result.rows, result.truncated) == (["id", "tenant"], [("resp_sql", "acme")], False)
        # The store's own errors cross the actor boundary as themselves.
        with pytest.raises(QueryTimeout):
            await client.run_sql("SELECT sum(hash(range)) FROM range(10_000_000_000)", timeout_s=0.2)
        with pytest.raises(QueryError, match="not DELETE"):
            await client.run_sql("DELETE FROM responses")

        # The owner file names the process that holds the file, its cluster and its namespace.
        with pytest.raises(StoreLocked) as locked:
            DuckDBStore(path)
        owner = read_owner(path, locked.value.pid)
        assert owner is not None and owner.pid == locked.value.pid != os.getpid()
        assert owner.address == ray.get_runtime_context().gcs_address
        assert owner.namespace == settings.namespace
        assert owner.auth_mode == os.environ.get("RAY_AUTH_MODE")

        # troupe sql's way in; a process already on the cluster keeps its connection.
        found = await asyncio.to_thread(query_server, owner.address, owner.namespace, "SELECT count(*) FROM responses")
        assert found.rows == [(1,)]
        assert ray.is_initialized()
    finally:
        await client.close()
        ray.kill(client.handle)
