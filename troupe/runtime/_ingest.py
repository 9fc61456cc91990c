"""One file's ingestion: parse, chunk, embed, index; the body of an ingestion task.

Kept light (no runtime, no Ray at import) because it is what a Ray worker imports to run an
ingestion task, as ``_tool_runner`` is for tool tasks. :func:`ingest` reaches storage
through ``call(method, *args)``, a blocking call of a :class:`~troupe.storage.contract.Files`
method (the store client's ``call``): through the storage actor in a Ray task (:func:`troupe.runtime.ray.ingest.ingest_on_ray`), through the
in-process store from a thread in ``Runtime.local``. So the same function runs in both.

A file fails alone: whatever goes wrong with it (a corrupt PDF, an embedder that is down) is
recorded as its ``last_error`` and the task ends normally; the other files' tasks never see
it. ``last_error.code``: ``invalid_file`` / ``unsupported_file`` for the file itself
(:class:`~troupe.rag.DocumentError`), ``server_error`` for everything else.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any, Literal

from troupe.rag.documents import DocumentError, parse_document
from troupe.rag.embedders import Embedder, EmbeddingError, OpenAIEmbedder, SimEmbedder
from troupe.rag.records import IndexedFile, IngestTicket
from troupe.rag.text import chunk_text, indexed_terms, terms
from troupe.runtime.settings import ModelSpec

__all__ = ["build_embedder", "ingest", "local_worker"]

Call = Callable[..., Any]
Outcome = Literal["completed", "failed", "stale"]


def build_embedder(spec: ModelSpec) -> Embedder:
    """The embedder a ``task = "embeddings"`` model entry describes."""
    if spec.kind == "sim":
        return SimEmbedder(spec.dimensions or 512, name=spec.name)
    if not spec.base_url:
        raise EmbeddingError(f"the embedding model '{spec.name}' has no base_url")
    return OpenAIEmbedder(spec.base_url, model=spec.upstream_model or spec.name, name=spec.name,
                          api_key_env=spec.api_key_env, dimensions=spec.dimensions)  # fmt: skip


def index_file(ticket: IngestTicket, data: bytes, embedder: Embedder) -> IndexedFile:
    """``data`` (the file of ``ticket``) parsed, chunked as the ticket says, embedded and analyzed.

    Raises:
        DocumentError: the file cannot be read as its kind.
        EmbeddingError: the embedder failed.
    """
    text = parse_document(ticket.filename, data)
    chunks = chunk_text(text, max_tokens=ticket.max_tokens, overlap_tokens=ticket.overlap_tokens)
    texts = [c.text for c in chunks]
    words = [terms(t) for t in texts]  # once, for the index and (the sim embedder) the vectors
    analyzed = [indexed_terms(w) for w in words]
    vectors = embedder.embed_terms(words) if isinstance(embedder, SimEmbedder) else embedder.embed(texts)
    return IndexedFile(texts=texts, terms=[a[0] for a in analyzed], lengths=[a[1] for a in analyzed], vectors=vectors)


def ingest(ticket: IngestTicket, spec: ModelSpec | None, call: Call, *, worker: str) -> Outcome:
    """Ingest the file of ``ticket`` with the embedder ``spec`` (None: not configured any more).

    Records its chunks and ``completed``, or ``failed`` with ``last_error``, with when the
    task started and ended and ``worker`` (where it ran).

    Returns:
        ``completed``, ``failed``, or ``stale`` (the file was removed, re-added or cancelled
        meanwhile: nothing was written).
    """
    started = time.time()
    try:
        if spec is None:
            raise EmbeddingError(f"the embedding model '{ticket.embedding_model}' of this vector store is not configured")
        found = call("file_content", ticket.tenant, ticket.file_id)
        if found is None:
            raise DocumentError("invalid_file", "The file was deleted.")
        embedder = build_embedder(spec)
        try:
            indexed = index_file(ticket, found[1], embedder)
        finally:
            embedder.close()
    except DocumentError as exc:
        return _failed(call, ticket, exc.code, exc.message, started, worker)
    except Exception as exc:  # an embedder down, a bug: this file fails, not the others
        return _failed(call, ticket, "server_error", f"{type(exc).__name__}: {exc}", started, worker)
    stored = call("complete_ingest", ticket, indexed, started_at=started, ended_at=time.time(), worker=worker)
    return "completed" if stored else "stale"


def _failed(call: Call, ticket: IngestTicket, code: str, message: str, started: float, worker: str) -> Outcome:
    stored = call("fail_ingest", ticket, code, message, started_at=started, ended_at=time.time(), worker=worker)
    return "failed" if stored else "stale"


def local_worker() -> str:
    """How an in-process ingestion names where it ran: host, process and thread."""
    import threading

    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
