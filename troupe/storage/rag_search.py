"""The SQL of a vector store search: BM25 over the term table, nearest vectors, the results.

Neither of DuckDB's ``fts`` nor ``vss`` extension is used: both are downloaded on first use,
and Troupe must run where nothing can be. Both rankings are plain SQL over DuckDB's core:

**BM25** (Robertson and Zaragoza's Okapi BM25, with Lucene's always-positive idf), over
``vector_store_terms``, one row per (chunk, term) with the term's count ``tf`` and the chunk's
length in terms ``length``::

    score(c) = Σ over query terms t in c   idf(t) · tf · (k1 + 1) / (tf + k1 · (1 − b + b · length / avgdl))
    idf(t)   = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))          k1 = 1.2, b = 0.75

``N`` and ``avgdl`` are the searched stores' chunk count and mean length, ``df`` the chunks
holding the term; all computed at query time, so there is nothing to maintain. Terms are
64-bit hashes (:func:`troupe.rag.text.term_hash`): one scan of the table filters on two
integer columns (store key, term). Measured with 4 million rows: ~30 ms.

**Vectors**: ``array_cosine_similarity(embedding, query)`` over ``vector_store_vectors_<n>``,
the best ``k`` by a top-k sort: an exact scan, no approximate index (``vss`` would bring HNSW).
A chunk whose similarity is not above 0 is no candidate: with the ``sim`` embedder it shares
no word with the query, and a real embedder puts unrelated texts there too.

An attribute filter restricts both to the chunks of the files it lets through (their ids
registered as a relation for the duration of the search); ``N``, ``avgdl`` and ``df`` stay
those of the whole stores, so that a filter does not change how rare a word is.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np

__all__ = ["BM25_B", "BM25_K1", "Scope", "bm25", "nearest", "results"]

BM25_K1 = 1.2
"""How fast repeats of a term stop adding to a chunk's score."""
BM25_B = 0.75
"""How much a chunk's length discounts its term counts."""
_ALLOWED = "search_allowed_chunks"


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" * len(values))


@dataclass(frozen=True, slots=True, kw_only=True)
class Scope:
    """What one search reads: the stores' keys, their size for BM25, and whether a filter
    restricts the chunks (then registered on the connection as :data:`_ALLOWED`)."""

    keys: list[int]
    chunks: int
    """N: the stores' chunks."""
    mean_length: float
    """avgdl: their mean length in terms."""
    filtered: bool

    @classmethod
    def of(
        cls, conn: duckdb.DuckDBPyConnection, keys: list[int], allowed: list[tuple[str, str]] | None,
        stores: Sequence[tuple[Any, ...]],
    ) -> Scope:  # fmt: skip
        """The scope of a search of the stores ``keys``; ``allowed``: the ``(store id, file id)``
        pairs a filter lets through (None: all). Call :func:`results` (which unregisters) last."""
        n, mean = conn.execute(
            f"SELECT count(*), coalesce(avg(length), 0) FROM vector_store_chunks WHERE store_key IN ({_marks(keys)})",
            keys,
        ).fetchall()[0]  # fetchall: an unread result would block register()
        if allowed is not None:
            key_of = {s[0]: s[1] for s in stores}
            pairs = {"k": np.asarray([key_of[s] for s, _ in allowed], dtype=np.int32),
                     "f": np.asarray([f for _, f in allowed], dtype=object)}  # fmt: skip
            conn.register("search_allowed_files", pairs)
            try:
                ids = conn.execute(
                    "SELECT c.chunk_id FROM vector_store_chunks c JOIN search_allowed_files p"
                    " ON c.store_key = p.k AND c.file_id = p.f"
                ).fetchnumpy()["chunk_id"]
            finally:
                conn.unregister("search_allowed_files")
            conn.register(_ALLOWED, {"chunk_id": np.asarray(ids, dtype=np.int64)})
        return cls(keys=keys, chunks=int(n), mean_length=float(mean), filtered=allowed is not None)

    def restriction(self, column: str = "chunk_id") -> str:
        return f" AND {column} IN (SELECT chunk_id FROM {_ALLOWED})" if self.filtered else ""


def bm25(conn: duckdb.DuckDBPyConnection, scope: Scope, hashes: Sequence[int], k: int) -> list[int]:
    """The ``k`` best chunk ids for a query's terms by BM25 (module docstring), best first."""
    terms = list(dict.fromkeys(hashes))
    if not terms or not scope.chunks:
        return []
    where = f"store_key IN ({_marks(scope.keys)}) AND term IN ({_marks(terms)})"
    df_source = "vector_store_terms WHERE " + where if scope.filtered else "hits"
    sql = (
        f"WITH hits AS (SELECT chunk_id, term, tf, length FROM vector_store_terms WHERE {where}{scope.restriction()}),"
        f" df AS (SELECT term, count(*) AS df FROM {df_source} GROUP BY term)"
        " SELECT h.chunk_id, sum(ln(1 + (? - d.df + 0.5) / (d.df + 0.5)) * h.tf * (? + 1)"
        " / (h.tf + ? * (1 - ? + ? * h.length / ?))) AS score"
        " FROM hits h JOIN df d USING (term) GROUP BY h.chunk_id ORDER BY score DESC, h.chunk_id LIMIT ?"
    )
    params: list[Any] = [*scope.keys, *terms] + ([*scope.keys, *terms] if scope.filtered else [])
    params += [scope.chunks, BM25_K1, BM25_K1, BM25_B, BM25_B, max(scope.mean_length, 1e-9), k]
    return [row[0] for row in conn.execute(sql, params).fetchall()]


def nearest(
    conn: duckdb.DuckDBPyConnection, scope: Scope, keys: list[int], dimensions: int, vector: np.ndarray, k: int
) -> list[int]:
    """The ``k`` chunk ids of the stores ``keys`` (whose vectors have ``dimensions``) most
    similar to ``vector`` by cosine, best first."""
    table = f"vector_store_vectors_{int(dimensions)}"
    similarity = f"array_cosine_similarity(embedding, ?::FLOAT[{int(dimensions)}])"
    sql = (
        f"SELECT chunk_id FROM (SELECT chunk_id, {similarity} AS similarity FROM {table}"
        f" WHERE store_key IN ({_marks(keys)}){scope.restriction()}) WHERE similarity > 0"
        " ORDER BY similarity DESC, chunk_id LIMIT ?"
    )
    params = [np.asarray(vector, np.float32).tolist(), *keys, k]
    return [row[0] for row in conn.execute(sql, params).fetchall()]


def results(conn: duckdb.DuckDBPyConnection, tenant: str, fused: list[tuple[int, float]]) -> list[dict[str, Any]]:
    """The chunks ``fused`` names (``(chunk id, score)``, best first), with their file's name and attributes."""
    try:
        conn.unregister(_ALLOWED)
    except duckdb.Error:
        pass
    if not fused:
        return []
    ids = [chunk_id for chunk_id, _ in fused]
    rows = conn.execute(
        "SELECT c.chunk_id, c.vector_store_id, c.file_id, c.chunk_index, c.text, fi.filename, vf.attributes"
        " FROM vector_store_chunks c JOIN files fi ON fi.tenant = c.tenant AND fi.id = c.file_id"
        " JOIN vector_store_files vf ON vf.tenant = c.tenant AND vf.vector_store_id = c.vector_store_id"
        f" AND vf.file_id = c.file_id WHERE c.tenant = ? AND c.chunk_id IN ({_marks(ids)})",
        [tenant, *ids],
    ).fetchall()
    by_id = {row[0]: row for row in rows}
    out = []
    for chunk_id, score in fused:
        if chunk_id not in by_id:
            continue  # deleted since it was ranked
        _, store_id, file_id, index, text, filename, attributes = by_id[chunk_id]
        out.append({
            "vector_store_id": store_id, "file_id": file_id, "filename": filename, "chunk_index": index,
            "text": text, "score": score, "attributes": json.loads(attributes) if attributes else None,
        })  # fmt: skip
    return out
