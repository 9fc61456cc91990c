"""Files, vector stores and their search, for the runtime and the conversation hosts.

:class:`VectorStores` is the API's face of the store's files and vector stores (the
:class:`~troupe.storage.contract.Files` area of the store client, :class:`troupe.storage.rag.RagStore`
behind it): ids, 404s, plus the two things that are not storage: ingestion and the query side of search.

* **Ingestion** of each attached file is a task of its own (:mod:`._ingest`): on Ray, a Ray
  task reserving ``ingest_num_cpus`` (:mod:`.ray_ingest`, which the runtime hands in), so files are parsed, chunked and embedded in parallel
  across the cluster, each writing its chunks through the storage actor; in-process
  (``Runtime.local``, an :class:`~troupe.runtime.store_client.AsyncStore`), the same function
  on a pool of threads. Either way a watcher records a task that died (a worker killed) as
  the file's ``server_error``; any other failure the task records itself.
* **Search** (:meth:`VectorStores.search`): the query is embedded here, with each store's
  embedder, and the stores are searched in one storage call (BM25 and vector rankings fused
  there, :mod:`troupe.rag.fusion`). This is the interface of the ``file_search`` tool.

Example (in a conversation host, whose ``vector_stores`` this is)::

    hits = await host.vector_stores.search(tenant, ["vs_…"], "how do I rotate the keys?", max_num_results=5)
    hits[0]["file_id"], hits[0]["filename"], hits[0]["text"], hits[0]["score"]
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from troupe.protocol import InvalidRequest, ServerError, new_id
from troupe.rag import wire
from troupe.rag.text import term_hash, terms
from troupe.rag.wire import not_found
from troupe.runtime.settings import ModelSpec, RuntimeSettings
from troupe.runtime.store_client import StoreClient
from troupe.storage import Order, Page

if TYPE_CHECKING:
    # numpy (and the embedders' HTTP client) on first use: every conversation host has these
    # vector stores, and most never embed a query (0.65 s of each host's start, with DuckDB's).
    from troupe.rag.embedders import Embedder
    from troupe.rag.records import IngestTicket

__all__ = ["VectorStores", "file_id", "vector_store_id", "batch_id"]

log = logging.getLogger(__name__)

_LOCAL_INGEST_THREADS = 4


def file_id() -> str:
    """A new file id, ``file-…`` as OpenAI spells it."""
    return "file-" + new_id("file").partition("_")[2]


def vector_store_id() -> str:
    return new_id("vs")


def batch_id() -> str:
    return new_id("vsfb")


StartIngest = Callable[["list[IngestTicket]", dict[str, ModelSpec | None]], list[asyncio.Future[Any]]]
"""Starts one ingestion per ticket (each with its ticket's embedder); a future per ticket. On
Ray: :func:`troupe.runtime.ray.ingest.ray_ingestion`."""


class VectorStores:
    """Files and vector stores of one runtime (or host), over its store client.

    Args:
        settings: the embedders (``[[models]]`` with ``task = "embeddings"``), the default one,
            and the CPUs an ingestion task reserves.
        store: the store client.
        start_ingest: how ingestions start (on Ray: as Ray tasks); None: on threads of this
            process, over an in-process :class:`AsyncStore` (``store``).
    """

    def __init__(self, settings: RuntimeSettings, store: StoreClient, start_ingest: StartIngest | None = None) -> None:
        self.settings = settings
        self.store = store
        self.start_ingest = start_ingest
        self._embedders: dict[str, Embedder] = {}
        self._watchers: set[asyncio.Future[Any]] = set()
        self._threads: concurrent.futures.ThreadPoolExecutor | None = None
        self._store_models: dict[tuple[str, str], str] = {}
        """(tenant, store id) → its embedder, as searches learned it."""

    # -- files -------------------------------------------------------------------------

    async def create_file(
        self, tenant: str, *, filename: str, purpose: str, data: bytes, expires_in_s: int | None = None
    ) -> dict[str, Any]:
        """Store an upload; its ``FileObject``."""
        now = time.time()
        file = {"id": file_id(), "created_at": now, "filename": filename, "purpose": purpose,
                "expires_at": None if expires_in_s is None else int(now) + expires_in_s}  # fmt: skip
        return await self.store.create_file(tenant, file, data)

    async def get_file(self, tenant: str, file_id_: str) -> dict[str, Any]:
        return _found(await self.store.get_file(tenant, file_id_), "file", file_id_, "file_id")

    async def list_files(
        self, tenant: str, *, purpose: str | None, after: str | None, limit: int, order: Order
    ) -> Page:
        return await self.store.list_files(tenant, purpose=purpose, after=after, limit=limit, order=order)

    async def delete_file(self, tenant: str, file_id_: str) -> dict[str, Any]:
        """Delete a file (and take it out of every vector store); OpenAI's ``FileDeleted``."""
        if not await self.store.delete_file(tenant, file_id_):
            raise not_found("file", file_id_, "file_id")
        return {"id": file_id_, "object": "file", "deleted": True}

    async def file_content(self, tenant: str, file_id_: str) -> tuple[str, bytes]:
        """``(filename, bytes)`` of a file."""
        return _found(await self.store.file_content(tenant, file_id_), "file", file_id_, "file_id")

    # -- vector stores -------------------------------------------------------------------

    async def create_vector_store(
        self, tenant: str, *, name: str | None = None, description: str | None = None,
        metadata: dict[str, str] | None = None, expires_after: dict[str, Any] | None = None,
        file_ids: Sequence[str] = (), chunking: dict[str, Any] | None = None, embedding_model: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Create a store (and start ingesting ``file_ids``); its ``VectorStore``.

        Raises:
            InvalidRequest: ``embedding_model`` names no embedder.
            NotFound: one of ``file_ids`` (the store is not created).
        """
        model = embedding_model or self.settings.embedding_model
        if self.settings.embedder(model) is None:
            raise InvalidRequest(f"The embedding model '{model}' does not exist.", param="embedding_model",
                                 code="model_not_found")  # fmt: skip
        store: dict[str, Any] = {"id": vector_store_id(), "created_at": time.time(), "name": name, "description": description,
                 "metadata": metadata, "expires_after": expires_after}  # fmt: skip
        await self.store.create_vector_store(tenant, store, embedding_model=model)
        if file_ids:
            entries = [{"file_id": f, "chunking": chunking or wire.chunking_strategy(None)} for f in file_ids]
            try:
                self._start(await self.store.add_files(tenant, store["id"], entries))
            except BaseException:
                await self.store.delete_vector_store(tenant, store["id"])
                raise
        return await self.get_vector_store(tenant, store["id"])

    async def get_vector_store(self, tenant: str, store_id: str) -> dict[str, Any]:
        return _found(await self.store.get_vector_store(tenant, store_id), "vector store", store_id, "vector_store_id")

    async def list_vector_stores(
        self, tenant: str, *, after: str | None, before: str | None, limit: int, order: Order
    ) -> Page:
        return await self.store.list_vector_stores(tenant, after=after, before=before, limit=limit, order=order)

    async def update_vector_store(self, tenant: str, store_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        found = await self.store.update_vector_store(tenant, store_id, changes)
        return _found(found, "vector store", store_id, "vector_store_id")

    async def delete_vector_store(self, tenant: str, store_id: str) -> dict[str, Any]:
        if not await self.store.delete_vector_store(tenant, store_id):
            raise not_found("vector store", store_id, "vector_store_id")
        return {"id": store_id, "object": "vector_store.deleted", "deleted": True}

    # -- a store's files and batches -----------------------------------------------------

    async def add_file(
        self, tenant: str, store_id: str, file_id_: str, *, attributes: dict[str, Any] | None, chunking: dict[str, Any]
    ) -> dict[str, Any]:
        """Attach a file (``in_progress``) and start its ingestion; its ``VectorStoreFile``."""
        entry = {"file_id": file_id_, "attributes": attributes, "chunking": chunking}
        self._start(await self.store.add_files(tenant, store_id, [entry]))
        return await self.get_store_file(tenant, store_id, file_id_)

    async def get_store_file(self, tenant: str, store_id: str, file_id_: str) -> dict[str, Any]:
        found = await self.store.get_store_file(tenant, store_id, file_id_)
        return _found(found, "file", file_id_, "file_id")

    async def list_store_files(
        self, tenant: str, store_id: str, *, batch: str | None = None, status: str | None, after: str | None,
        before: str | None, limit: int, order: Order,
    ) -> Page:  # fmt: skip
        page = await self.store.list_store_files(tenant, store_id, batch_id=batch, status=status, after=after,
                               before=before, limit=limit, order=order)  # fmt: skip
        if page is None:
            raise not_found("vector store", store_id, "vector_store_id") if batch is None else \
                not_found("file batch", batch, "batch_id")  # fmt: skip
        return page

    async def update_store_file(
        self, tenant: str, store_id: str, file_id_: str, attributes: dict[str, Any] | None
    ) -> dict[str, Any]:
        found = await self.store.update_store_file(tenant, store_id, file_id_, attributes)
        return _found(found, "file", file_id_, "file_id")

    async def delete_store_file(self, tenant: str, store_id: str, file_id_: str) -> dict[str, Any]:
        if not await self.store.delete_store_file(tenant, store_id, file_id_):
            raise not_found("file", file_id_, "file_id")
        return {"id": file_id_, "object": "vector_store.file.deleted", "deleted": True}

    async def store_file_chunks(self, tenant: str, store_id: str, file_id_: str) -> list[str]:
        found = await self.store.store_file_chunks(tenant, store_id, file_id_)
        return _found(found, "file", file_id_, "file_id")

    async def create_batch(self, tenant: str, store_id: str, entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Attach files as one batch and start their ingestion; the ``VectorStoreFileBatch``."""
        batch: dict[str, Any] = {"id": batch_id(), "created_at": time.time()}
        self._start(await self.store.add_files(tenant, store_id, list(entries), batch=batch))
        return await self.get_batch(tenant, store_id, batch["id"])

    async def get_batch(self, tenant: str, store_id: str, batch: str) -> dict[str, Any]:
        return _found(await self.store.get_batch(tenant, store_id, batch), "file batch", batch, "batch_id")

    async def cancel_batch(self, tenant: str, store_id: str, batch: str) -> dict[str, Any]:
        return _found(await self.store.cancel_batch(tenant, store_id, batch), "file batch", batch, "batch_id")

    async def resume_ingestion(self) -> int:
        """After a start: ingest again every file left ``in_progress`` (its task died with the
        server that ran it); how many."""
        tickets = await self.store.unfinished_ingests()
        self._start(tickets)
        return len(tickets)

    async def ingest_trace(self, tenant: str, store_id: str) -> list[dict[str, Any]]:
        """When each file's ingestion task started and ended, and where it ran (RagStore.ingest_trace)."""
        return await self.store.ingest_trace(tenant, store_id)

    # -- search ----------------------------------------------------------------------------

    async def search(
        self, tenant: str, vector_store_ids: Sequence[str], query: str | Sequence[str], *, max_num_results: int = 10,
        filters: dict[str, Any] | None = None, ranking_options: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Search vector stores: what ``POST /v1/vector_stores/{id}/search`` and the ``file_search``
        tool run. Hybrid: BM25 over the chunks' terms and cosine similarity to the query's
        embedding (each store's own embedder), fused by weighted reciprocal rank fusion
        (:mod:`troupe.rag.fusion`). Only completed files' chunks are searched.

        Args:
            tenant: the caller's tenant; another tenant's stores are not found.
            vector_store_ids: the stores to search, together (one ranking over all).
            query: a string, or several (each adds its rankings to the fusion).
            max_num_results: 1–50.
            filters: OpenAI's attribute filter (comparison ``eq ne gt gte lt lte in nin``,
                compound ``and``/``or``) over the files' ``attributes``.
            ranking_options: OpenAI's ``{ranker, score_threshold, hybrid_search:
                {embedding_weight, text_weight}}``; ``score_threshold`` is on the fused score.

        Returns:
            The best chunks, best first, each ``{"vector_store_id", "file_id", "filename",
            "chunk_index", "text", "score", "attributes"}``; ``score`` in [0, 1] (1: first in
            every ranking), ``chunk_index`` the chunk's position in its file.

        Raises:
            InvalidRequest: a malformed argument (``param`` names it, as the API's 400 does).
            NotFound: one of the stores does not exist for this tenant.
            ServerError: an embedder failed.
        """
        queries = wire.check_query(query)
        options = wire.check_ranking_options(ranking_options)
        checked = wire.check_filters(filters)
        limit = wire.check_max_num_results(max_num_results)
        ids = list(dict.fromkeys(vector_store_ids))
        if not ids:
            raise InvalidRequest("At least one vector store is required.", param="vector_store_ids")
        models = await self._models(tenant, ids)
        vectors: dict[str, list[Any]] = {}
        if options.embedding_weight > 0:
            for model in set(models.values()):
                vectors[model] = list(await self._embed_queries(model, queries))
        hashes = [[term_hash(t) for t in terms(q)] for q in queries]
        return await self.store.search(tenant, ids, term_hashes=hashes, vectors=vectors, filters=checked,
                               options=options, max_num_results=limit)  # fmt: skip

    def searcher(self, tenant: str) -> TenantSearch:
        """What the loop's ``file_search`` tool searches with, for ``tenant``
        (:class:`troupe.agentloop.file_search.FileSearcher`)."""
        return TenantSearch(self, tenant)

    async def check_file_search(self, tenant: str, tools: Sequence[dict[str, Any]]) -> None:
        """Before a turn: every vector store a ``file_search`` tool of ``tools`` names exists.

        Raises:
            NotFound: one does not (for ``tenant``); ``param`` names the tool's ``vector_store_ids``.
        """
        for i, tool in enumerate(tools):
            ids = tool.get("vector_store_ids") if tool.get("type") == "file_search" else None
            for store_id in ids if isinstance(ids, list) else ():
                if isinstance(store_id, str) and await self.store.get_vector_store(tenant, store_id) is None:
                    raise not_found("vector store", store_id, f"tools[{i}].vector_store_ids")

    async def _models(self, tenant: str, ids: list[str]) -> dict[str, str]:
        """Each store's embedder. A store never changes its embedder, so once known it is kept
        here: a search then makes one storage call, not two (the search itself still finds a
        store deleted since, and answers 404)."""
        missing = [i for i in ids if (tenant, i) not in self._store_models]
        if missing:
            found = await self.store.search_models(tenant, missing)
            if len(self._store_models) > 10_000:
                self._store_models.clear()
            self._store_models.update({(tenant, i): m for i, m in found.items()})
        return {i: self._store_models[(tenant, i)] for i in ids}

    async def _embed_queries(self, model: str, queries: list[str]) -> Any:
        spec = self.settings.embedder(model)
        if spec is None:
            raise ServerError(f"The embedding model '{model}' of this vector store is not configured.")
        from troupe.rag.embedders import EmbeddingError

        try:
            return await self._embedder(spec).aembed(queries)
        except EmbeddingError as exc:
            raise ServerError(f"The embedding model '{model}' failed: {exc.message}") from exc

    def _embedder(self, spec: ModelSpec) -> Embedder:
        embedder = self._embedders.get(spec.name)
        if embedder is None:
            from troupe.runtime._ingest import build_embedder

            embedder = self._embedders[spec.name] = build_embedder(spec)
        return embedder

    # -- embeddings ---------------------------------------------------------------------------

    async def embed(
        self, model: str, inputs: list[str], *, encoding_format: str = "float", dimensions: int | None = None
    ) -> dict[str, Any]:
        """``POST /v1/embeddings`` for a configured embedder: OpenAI's ``CreateEmbeddingResponse``.

        Raises:
            NotFound: ``model`` names no embedder.
            ServerError: the embedder failed.
        """
        spec = self.settings.embedder(model)
        if spec is None:
            from troupe.protocol import model_not_found

            raise model_not_found(model)
        if dimensions is not None and spec.kind == "sim":
            spec = spec.model_copy(update={"dimensions": dimensions})
        elif dimensions is not None:
            spec = spec.model_copy(update={"dimensions": dimensions, "name": f"{spec.name}@{dimensions}"})
        from troupe.rag.embedders import EmbeddingError, encode_base64, usage_tokens

        try:
            vectors = await self._embedder(spec).aembed(inputs)
        except EmbeddingError as exc:
            raise ServerError(f"The embedding model '{model}' failed: {exc.message}") from exc
        data = [
            {"object": "embedding", "index": i,
             "embedding": encode_base64(v) if encoding_format == "base64" else [float(x) for x in v]}
            for i, v in enumerate(vectors)
        ]  # fmt: skip
        tokens = usage_tokens(inputs)
        return {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    # -- ingestion ----------------------------------------------------------------------------

    def _start(self, tickets: list[IngestTicket]) -> None:
        """Start one ingestion task per ticket, and a watcher that fails the files whose task died."""
        if not tickets:
            return
        specs = {t.embedding_model: self.settings.embedder(t.embedding_model) for t in tickets}
        if self.start_ingest is not None:
            futures = self.start_ingest(tickets, specs)
        else:
            futures = [self._on_thread(t, specs[t.embedding_model]) for t in tickets]
        watcher = asyncio.ensure_future(self._watch(tickets, futures))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)

    def _on_thread(self, ticket: IngestTicket, spec: ModelSpec | None) -> asyncio.Future[Any]:
        from troupe.runtime._ingest import ingest, local_worker

        loop = asyncio.get_running_loop()
        if self._threads is None:
            self._threads = concurrent.futures.ThreadPoolExecutor(_LOCAL_INGEST_THREADS, thread_name_prefix="troupe-ingest")

        def call(method: str, *args: Any, **kwargs: Any) -> Any:
            return asyncio.run_coroutine_threadsafe(self.store.call(method, args, kwargs), loop).result(timeout=300)

        return loop.run_in_executor(self._threads, lambda: ingest(ticket, spec, call, worker=local_worker()))

    async def _watch(self, tickets: list[IngestTicket], futures: list[asyncio.Future[Any]]) -> None:
        outcomes = await asyncio.gather(*futures, return_exceptions=True)
        for ticket, outcome in zip(tickets, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                log.warning("ingestion of %s into %s died: %r", ticket.file_id, ticket.vector_store_id, outcome)
                try:
                    await self.store.fail_ingest(ticket, "server_error", f"The ingestion task died: {outcome!r}",
                                    started_at=None, ended_at=time.time(), worker=None)  # fmt: skip
                except Exception:
                    log.exception("could not record the failure of %s", ticket.file_id)

    async def close(self) -> None:
        """Wait (a bounded while) for the ingestions started here, then release the embedders."""
        if self._watchers:
            await asyncio.wait(list(self._watchers), timeout=30)
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
        for embedder in self._embedders.values():
            aclose = getattr(embedder, "aclose", None)
            if aclose is not None:
                await aclose()
        self._embedders.clear()


class TenantSearch:
    """:meth:`VectorStores.search` for one tenant, as the loop's ``file_search`` tool calls it."""

    def __init__(self, stores: VectorStores, tenant: str) -> None:
        self.stores, self.tenant = stores, tenant

    async def search(
        self, vector_store_ids: Sequence[str], query: str, *, max_num_results: int,
        filters: dict[str, Any] | None, ranking_options: dict[str, Any] | None,
    ) -> list[dict[str, Any]]:  # fmt: skip
        return await self.stores.search(
            self.tenant, vector_store_ids, query, max_num_results=max_num_results, filters=filters,
            ranking_options=ranking_options,
        )  # fmt: skip


def _found(value: Any, kind: str, object_id: str, param: str) -> Any:
    if value is None:
        raise not_found(kind, object_id, param)
    return value
