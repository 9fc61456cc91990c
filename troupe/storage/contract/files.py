"""The files and vector stores area of the store contract: uploads, vector stores, their files
and batches, ingestion reports and hybrid search.

Implemented by :class:`troupe.storage.rag.RagStore`, which runs on a DuckDB connection and a
thread of its own (:mod:`troupe.storage.rag`): the async store routes this area's calls there.
Errors: unknown ids raise the API's own :class:`~troupe.protocol.NotFound` (404, picklable),
anything DuckDB refuses a :class:`~troupe.storage.StorageError`. Every method takes the tenant
first (but the ingestion reports, whose ticket names it): another tenant's ids look exactly
like unknown ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..base import Order, Page

if TYPE_CHECKING:
    import numpy as np

    from troupe.rag import wire
    from troupe.rag.records import IndexedFile, IngestTicket

__all__ = ["Files"]


class Files(Protocol):
    """Files and vector stores, per tenant."""

    def create_file(self, tenant: str, file: dict[str, Any], data: bytes) -> dict[str, Any]:
        """Store an upload: ``file`` is its object (``id``, ``filename``, ``purpose``, ``created_at``,
        ``expires_at``); the bytes go to disk first (:mod:`troupe.storage.file_bytes`)."""
        ...

    def get_file(self, tenant: str, file_id: str) -> dict[str, Any] | None:
        """A file's ``FileObject``; None if unknown."""
        ...

    def list_files(
        self, tenant: str, *, purpose: str | None = None, after: str | None = None, limit: int = 10_000,
        order: Order = "desc",
    ) -> Page:  # fmt: skip
        """The tenant's files by creation time, optionally of one ``purpose`` (``after``: a file id)."""
        ...

    def file_content(self, tenant: str, file_id: str) -> tuple[str, bytes] | None:
        """``(filename, bytes)`` of a file; None if there is none."""
        ...

    def delete_file(self, tenant: str, file_id: str) -> bool:
        """Delete a file, and take it out of every vector store that holds it."""
        ...

    def create_vector_store(self, tenant: str, store: dict[str, Any], *, embedding_model: str) -> None:
        """Create a store: ``store`` holds ``id``, ``created_at``, ``name``, ``description``,
        ``metadata`` and ``expires_after``; its chunks will be embedded by ``embedding_model``."""
        ...

    def get_vector_store(self, tenant: str, vector_store_id: str) -> dict[str, Any] | None:
        """A ``VectorStore`` (its ``status`` and ``file_counts`` computed now); None if unknown."""
        ...

    def list_vector_stores(
        self, tenant: str, *, after: str | None = None, before: str | None = None, limit: int = 20,
        order: Order = "desc",
    ) -> Page:  # fmt: skip
        """The tenant's vector stores by creation time, after or before a store id."""
        ...

    def update_vector_store(self, tenant: str, vector_store_id: str, changes: dict[str, Any]) -> dict[str, Any] | None:
        """Apply ``changes`` (any of ``name``, ``metadata``, ``expires_after``); the store, or None."""
        ...

    def delete_vector_store(self, tenant: str, vector_store_id: str) -> bool:
        """Delete a store with its files' rows and chunks (the files themselves stay); False if unknown."""
        ...

    def touch(self, tenant: str, vector_store_ids: Sequence[str]) -> None:
        """Mark stores active now (``last_active_at``, what ``expires_after`` counts from)."""
        ...

    def add_files(
        self, tenant: str, vector_store_id: str, entries: Sequence[dict[str, Any]], *, batch: dict[str, Any] | None = None
    ) -> list[IngestTicket]:
        """Attach files (each entry: ``file_id``, ``attributes``, ``chunking`` as
        :func:`~troupe.rag.wire.chunking_strategy` gives it) ``in_progress``; a file already
        attached is ingested again. ``batch``: a new batch (``id``, ``created_at``) they belong to.

        Returns:
            One ticket per file, for its ingestion task.

        Raises:
            NotFound: the store, or one of the files, does not exist (nothing is attached).
        """
        ...

    def unfinished_ingests(self) -> list[IngestTicket]:
        """Every attached file still ``in_progress``, taken over for a new ingestion: after a
        start, its task died with the server that ran it. Each gets a new token, so a task of
        the old one that still reports is ignored (reports carry their ticket's token).

        Returns:
            One ticket per such file, for its new ingestion task.
        """
        ...

    def get_store_file(self, tenant: str, vector_store_id: str, file_id: str) -> dict[str, Any] | None:
        """A ``VectorStoreFile``; None if the store does not hold the file."""
        ...

    def list_store_files(
        self, tenant: str, vector_store_id: str, *, batch_id: str | None = None, status: str | None = None,
        after: str | None = None, before: str | None = None, limit: int = 20, order: Order = "desc",
    ) -> Page | None:  # fmt: skip
        """A store's files (or a batch's), optionally of one ``status``; None: no such store (or batch)."""
        ...

    def update_store_file(
        self, tenant: str, vector_store_id: str, file_id: str, attributes: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """Replace a store file's ``attributes``; the store file, or None."""
        ...

    def delete_store_file(self, tenant: str, vector_store_id: str, file_id: str) -> bool:
        """Take a file out of a store (the file itself stays)."""
        ...

    def store_file_chunks(self, tenant: str, vector_store_id: str, file_id: str) -> list[str] | None:
        """The texts of a store file's chunks, in order; None: no such file in the store."""
        ...

    def get_batch(self, tenant: str, vector_store_id: str, batch_id: str) -> dict[str, Any] | None:
        """A ``VectorStoreFileBatch`` (its counts computed now); None if unknown."""
        ...

    def cancel_batch(self, tenant: str, vector_store_id: str, batch_id: str) -> dict[str, Any] | None:
        """Cancel a batch: its files still in progress become ``cancelled`` (their tasks' reports
        are then ignored); the batch, or None."""
        ...

    def complete_ingest(
        self, ticket: IngestTicket, indexed: IndexedFile, *, started_at: float, ended_at: float, worker: str
    ) -> bool:
        """Store a file's chunks and mark it ``completed``, in one transaction (its previous
        chunks, if it was ingested before, replaced); False, and nothing written, when the
        ticket is stale. A store's first chunks fix its dimension; chunks of another
        dimension fail the file instead. ``started_at``, ``ended_at``, ``worker``: when and
        where its task ran (one transaction per file: a start recorded apart cost as much again)."""
        ...

    def fail_ingest(
        self, ticket: IngestTicket, code: str, message: str, *, started_at: float | None, ended_at: float,
        worker: str | None,
    ) -> bool:  # fmt: skip
        """Mark a file ``failed`` with ``last_error`` (its chunks, if any, dropped); False if the ticket is stale."""
        ...

    def ingest_trace(self, tenant: str, vector_store_id: str) -> list[dict[str, Any]]:
        """Each file's ingestion: ``file_id``, ``status``, ``chunks``, ``started_at``, ``ended_at``,
        ``worker`` (where its task ran), in order of start (for tests and analytics)."""
        ...

    def search_models(self, tenant: str, vector_store_ids: Sequence[str]) -> dict[str, str]:
        """Each store's embedder: ``{store id: embedding model}``.

        Raises:
            NotFound: one of the stores does not exist.
        """
        ...

    def search(
        self, tenant: str, vector_store_ids: Sequence[str], *, term_hashes: Sequence[Sequence[int]],
        vectors: dict[str, list[np.ndarray]], filters: dict[str, Any] | None, options: wire.RankingOptions,
        max_num_results: int,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Hybrid search (:mod:`troupe.rag.fusion`) of completed files' chunks in the stores.

        Args:
            term_hashes: per query, its terms' hashes (:func:`troupe.rag.text.term_hash`).
            vectors: per embedding model, the query vectors it gave (one per query).
            filters: an attribute filter (checked by :func:`troupe.rag.wire.check_filters`).

        Returns:
            The best chunks, best first: ``vector_store_id``, ``file_id``, ``filename``,
            ``chunk_index``, ``text``, ``score`` (in [0, 1]), ``attributes``.
        """
        ...
