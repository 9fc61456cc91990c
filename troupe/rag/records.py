"""What an ingestion task receives and returns: plain, picklable records.

Kept apart from :mod:`troupe.storage.rag` (which stores them) so that a Ray worker running an
ingestion task unpickles them without importing DuckDB or the wire protocol: a cold worker's
imports are part of the first files' latency.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["IndexedFile", "IngestTicket"]


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestTicket:
    """One file to ingest into one store: what its ingestion task needs, and its token."""

    tenant: str
    vector_store_id: str
    file_id: str
    token: str
    """The row's token when the ingestion was asked for; reports carry it back."""
    filename: str
    max_tokens: int
    overlap_tokens: int
    embedding_model: str
    """The store's embedder (a model name of the runtime settings)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class IndexedFile:
    """A file as the index holds it: its chunks' texts, terms and embeddings (same order)."""

    texts: list[str]
    terms: list[dict[int, int]]
    """Per chunk, ``{term hash: count}`` (:func:`troupe.rag.text.indexed_terms`)."""
    lengths: list[int]
    """Per chunk, its length in terms."""
    vectors: np.ndarray = field(repr=False)
    """``(chunks, dimensions)`` float32, rows of length 1."""
