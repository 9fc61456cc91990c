"""Files and vector stores over a real DuckDB file, in-process (``Runtime.local``: ingestion on threads).

Real DuckDB, the real ingestion function and the sim embedder; no Ray.
"""

from __future__ import annotations

import duckdb
import pytest

from tests.servers import wait_until
from tests.unit.test_rag_pure import pdf_of
from troupe.protocol import InvalidRequest, NotFound
from troupe.rag import wire
from troupe.runtime import Runtime, RuntimeSettings
from troupe.storage import DuckDBStore, schema

DOCS = {
    "router.md": "# Router\n\nTo reset the router, hold the power button for ten seconds until the lights blink.",
    "bread.txt": "Bake the sourdough bread at 230 degrees for forty minutes, then let it cool on a rack.",
    "garden.html": "<p>Water the tomato plants every morning during the summer months.</p>",
}


async def _store_with(runtime: Runtime, tenant: str = "", docs: dict[str, str] = DOCS, **attrs_of: dict) -> tuple[str, dict[str, str]]:
    """A vector store holding ``docs`` (name → text), every file completed; (store id, name → file id)."""
    stores = runtime.vector_stores
    ids = {}
    for name, text in docs.items():
        ids[name] = (await stores.create_file(tenant, filename=name, purpose="assistants", data=text.encode()))["id"]
    store = await stores.create_vector_store(tenant, name="docs")
    for name, fid in ids.items():
        await stores.add_file(tenant, store["id"], fid, attributes=attrs_of.get(name.split(".")[0]),
                              chunking=wire.chunking_strategy(None))  # fmt: skip
    await _settled(runtime, tenant, store["id"])
    return store["id"], ids


async def _settled(runtime: Runtime, tenant: str, store_id: str) -> dict:
    async def done() -> bool:
        return (await runtime.vector_stores.get_vector_store(tenant, store_id))["status"] == "completed"

    await wait_until(done, what="every file ingested")
    return await runtime.vector_stores.get_vector_store(tenant, store_id)


async def test_files_round_trip_and_page_by_creation(runtime: Runtime) -> None:
    stores = runtime.vector_stores
    made = [await stores.create_file("", filename=f"f{i}.txt", purpose=p, data=b"x" * i)
            for i, p in enumerate(["assistants", "user_data", "assistants"])]  # fmt: skip
    page = await stores.list_files("", purpose=None, after=None, limit=2, order="asc")
    assert [f["id"] for f in page.data] == [made[0]["id"], made[1]["id"]] and page.has_more
    rest = await stores.list_files("", purpose=None, after=page.last_id, limit=2, order="asc")
    assert [f["id"] for f in rest.data] == [made[2]["id"]] and not rest.has_more
    only = await stores.list_files("", purpose="user_data", after=None, limit=10, order="desc")
    assert [f["id"] for f in only.data] == [made[1]["id"]]
    assert await stores.file_content("", made[2]["id"]) == ("f2.txt", b"xx")
    assert (await stores.get_file("", made[1]["id"]))["bytes"] == 1
    await stores.delete_file("", made[2]["id"])
    with pytest.raises(NotFound):
        await stores.file_content("", made[2]["id"])


async def test_another_tenants_files_and_stores_are_not_found(runtime: Runtime) -> None:
    store_id, ids = await _store_with(runtime, tenant="alice", docs={"router.md": DOCS["router.md"]})
    stores = runtime.vector_stores
    for call in (
        stores.get_file("bob", ids["router.md"]), stores.delete_file("bob", ids["router.md"]),
        stores.get_vector_store("bob", store_id), stores.search("bob", [store_id], "router"),
        stores.add_file("bob", store_id, ids["router.md"], attributes=None, chunking=wire.chunking_strategy(None)),
    ):  # fmt: skip
        with pytest.raises(NotFound):
            await call
    bobs = await stores.create_vector_store("bob")
    with pytest.raises(NotFound):  # bob cannot attach alice's file to his own store either
        await stores.add_file("bob", bobs["id"], ids["router.md"], attributes=None, chunking=wire.chunking_strategy(None))
    assert (await stores.list_files("bob", purpose=None, after=None, limit=10, order="desc")).data == []
    assert [h["file_id"] for h in await stores.search("alice", [store_id], "reset the router")] == [ids["router.md"]]


async def test_hybrid_search_finds_the_chunk_by_its_words(runtime: Runtime) -> None:
    store_id, ids = await _store_with(runtime)
    store = await runtime.vector_stores.get_vector_store("", store_id)
    assert store["file_counts"] == {"in_progress": 0, "completed": 3, "failed": 0, "cancelled": 0, "total": 3}
    search = runtime.search_vector_stores
    top = await search("", [store_id], "how long do I hold the power button?")
    assert top[0]["file_id"] == ids["router.md"] and top[0]["score"] == pytest.approx(1.0)
    assert top[0]["filename"] == "router.md" and "hold the power button" in top[0]["text"]
    assert top[0]["chunk_index"] == 0 and top[0]["vector_store_id"] == store_id
    assert len(top) == 1  # chunks sharing no word with the query are in neither ranking
    both = await search("", [store_id], ["tomato plants", "sourdough"], max_num_results=5)
    assert {h["file_id"] for h in both} == {ids["garden.html"], ids["bread.txt"]}
    assert await search("", [store_id], "quantum chromodynamics") == []


async def test_filters_and_ranking_options(runtime: Runtime) -> None:
    store_id, ids = await _store_with(runtime, router={"team": "infra", "year": 2024}, bread={"team": "kitchen"})
    search = runtime.search_vector_stores
    query = "the router bread"
    assert {h["file_id"] for h in await search("", [store_id], query)} == {ids["router.md"], ids["bread.txt"]}
    infra = await search("", [store_id], query, filters={"type": "eq", "key": "team", "value": "infra"})
    assert [h["file_id"] for h in infra] == [ids["router.md"]] and infra[0]["attributes"]["year"] == 2024
    none = await search("", [store_id], query, filters={"type": "gt", "key": "year", "value": 2030})
    assert none == []
    # Text alone: one ranking, so the second chunk scores (1/62) / (1/61), below 0.99.
    weighted = await search("", [store_id], query, ranking_options={
        "score_threshold": 0.99, "hybrid_search": {"embedding_weight": 0, "text_weight": 1}})  # fmt: skip
    assert len(weighted) == 1 and weighted[0]["score"] == pytest.approx(1.0)
    with pytest.raises(InvalidRequest) as caught:
        await search("", [store_id], query, max_num_results=51)
    assert caught.value.param == "max_num_results"


async def test_a_corrupt_pdf_fails_alone_and_a_removed_file_leaves_no_chunks(runtime: Runtime) -> None:
    stores = runtime.vector_stores
    good = await stores.create_file("", filename="ok.pdf", purpose="assistants", data=pdf_of("Kettles boil water."))
    bad = await stores.create_file("", filename="bad.pdf", purpose="assistants", data=b"%PDF-1.4 not really")
    store = await stores.create_vector_store("", file_ids=[good["id"], bad["id"]])
    settled = await _settled(runtime, "", store["id"])
    assert settled["file_counts"]["completed"] == 1 and settled["file_counts"]["failed"] == 1
    failed = await stores.get_store_file("", store["id"], bad["id"])
    assert failed["status"] == "failed" and failed["last_error"]["code"] == "invalid_file"
    assert (await stores.get_store_file("", store["id"], good["id"]))["last_error"] is None
    assert [h["file_id"] for h in await runtime.search_vector_stores("", [store["id"]], "kettles")] == [good["id"]]
    await stores.delete_file("", good["id"])  # out of the store too, chunks and all
    assert await runtime.search_vector_stores("", [store["id"]], "kettles") == []
    assert (await stores.get_vector_store("", store["id"]))["file_counts"]["total"] == 1


RAN = {"started_at": 1.0, "ended_at": 2.0, "worker": "w"}


async def test_a_late_report_of_a_cancelled_or_re_added_file_is_ignored(runtime: Runtime) -> None:
    store_id, ids = await _store_with(runtime, docs={"router.md": DOCS["router.md"]})
    rag = runtime.store
    entry = {"file_id": ids["router.md"], "attributes": None, "chunking": wire.chunking_strategy(None)}
    # The storage calls an ingestion task makes, by hand: a batch cancelled before its task reports.
    [ticket] = await rag.add_files("", store_id, [entry], batch={"id": "vsfb_1", "created_at": 1.0})
    assert (await rag.cancel_batch("", store_id, "vsfb_1"))["status"] == "cancelled"
    assert not await rag.fail_ingest(ticket, "server_error", "late", **RAN)
    cancelled = await runtime.vector_stores.get_store_file("", store_id, ids["router.md"])
    assert cancelled["status"] == "cancelled" and cancelled["last_error"] is None
    # Re-added: the first ticket is stale, the second one's report counts.
    [first] = await rag.add_files("", store_id, [entry])
    [second] = await rag.add_files("", store_id, [entry])
    assert not await rag.fail_ingest(first, "server_error", "stale", **RAN)
    assert await rag.fail_ingest(second, "invalid_file", "current", **RAN)
    assert (await runtime.vector_stores.get_store_file("", store_id, ids["router.md"]))["last_error"]["message"] == "current"


async def test_stores_page_both_ways_and_update(runtime: Runtime) -> None:
    stores = runtime.vector_stores
    made = [(await stores.create_vector_store("", name=f"s{i}"))["id"] for i in range(4)]
    first = await stores.list_vector_stores("", after=None, before=None, limit=2, order="desc")
    assert [s["id"] for s in first.data] == made[:1:-1] and first.has_more
    back = await stores.list_vector_stores("", after=None, before=made[1], limit=10, order="desc")
    assert [s["id"] for s in back.data] == made[:1:-1]
    updated = await stores.update_vector_store("", made[0], {"name": "renamed", "metadata": {"k": "v"},
                                                             "expires_after": {"anchor": "last_active_at", "days": 2}})  # fmt: skip
    assert (updated["name"], updated["metadata"], updated["expires_after"]["days"]) == ("renamed", {"k": "v"}, 2)
    assert updated["expires_at"] == updated["last_active_at"] + 2 * 86400
    assert (await stores.delete_vector_store("", made[0]))["deleted"]
    with pytest.raises(NotFound):
        await stores.get_vector_store("", made[0])


async def test_chunks_survive_reopening_and_new_ids_follow_them(tmp_path) -> None:
    path = str(tmp_path / "t.duckdb")
    runtime = Runtime.local(RuntimeSettings(storage_path=path))
    store_id, ids = await _store_with(runtime, docs={"router.md": DOCS["router.md"]})
    await runtime.close()
    again = Runtime.local(RuntimeSettings(storage_path=path))
    try:
        more, _ = await _store_with(again, docs={"bread.txt": DOCS["bread.txt"]})
        assert [h["file_id"] for h in await again.search_vector_stores("", [store_id], "power button")] == [ids["router.md"]]
        assert len(await again.search_vector_stores("", [more], "sourdough")) == 1
    finally:
        await again.close()
    with duckdb.connect(path, read_only=True) as conn:
        ids_ = [r[0] for r in conn.execute("SELECT chunk_id FROM vector_store_chunks ORDER BY chunk_id").fetchall()]
    assert ids_ == list(range(len(ids_)))  # no id reused after the reopen


def test_a_version_8_file_gains_the_tables_of_version_9_and_after(tmp_path, monkeypatch) -> None:
    path = tmp_path / "old.duckdb"
    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:8])
    monkeypatch.setattr(schema, "SCHEMA_VERSION", 8)
    DuckDBStore(path).close()
    monkeypatch.undo()
    store = DuckDBStore(path)
    try:
        assert store.schema_version == schema.SCHEMA_VERSION
        tables = {r[0] for r in store.query("SELECT table_name FROM information_schema.tables")[1]}
        assert {"files", "vector_stores", "vector_store_files", "vector_store_chunks", "vector_store_terms"} <= tables
    finally:
        store.close()


async def test_a_file_whose_ingestion_died_with_the_server_is_ingested_at_the_next_start(tmp_path) -> None:
    settings = RuntimeSettings(storage_path=str(tmp_path / "t.duckdb"))
    first = Runtime.local(settings)
    stores = first.vector_stores
    fid = (await stores.create_file("", filename="router.md", purpose="assistants", data=DOCS["router.md"].encode()))["id"]
    store = await stores.create_vector_store("", name="docs")
    # Attached, and the server stops before the file's ingestion task ran.
    entry = {"file_id": fid, "attributes": None, "chunking": wire.chunking_strategy(None)}
    [old] = await stores.store.add_files("", store["id"], [entry])
    await first.close()
    second = Runtime.local(settings)
    try:
        assert (await second.vector_stores.get_store_file("", store["id"], fid))["status"] == "in_progress"
        await second.recover()
        assert (await _settled(second, "", store["id"]))["file_counts"]["completed"] == 1
        [hit] = await second.vector_stores.search("", [store["id"]], "reset the router", max_num_results=1)
        assert hit["file_id"] == fid
        assert await second.store.unfinished_ingests() == [], "nothing is left to take over"
        [trace] = await second.vector_stores.ingest_trace("", store["id"])
        assert trace["ended_at"] is not None
    finally:
        await second.close()
