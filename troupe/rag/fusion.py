"""Hybrid ranking: weighted reciprocal rank fusion of vector and keyword rankings.

A search ranks the chunks twice per query: by the cosine similarity of their embedding to
the query's (``array_cosine_similarity`` in DuckDB), and by BM25 over their terms. Scores of
the two are not on one scale (a cosine of 0.3 may be good, a BM25 score has no upper
bound), so they are fused by rank, not by score (Cormack et al., 2009)::

    score(c) = Σ over rankings r   w_r / (K + rank_r(c))        rank from 1; K = 60

with ``w_r`` the ranking's weight (``ranking_options.hybrid_search``: ``embedding_weight``
for vector rankings, ``text_weight`` for BM25 ones; 1 and 1 by default). A chunk missing
from a ranking gets nothing from it. With several queries (a ``query`` array) every query
adds its two rankings. The score is then divided by the best possible one (first in every
ranking), so that it lies in [0, 1] and ``score_threshold`` has OpenAI's range: 1.0 means
first by every ranking, 0.5 about first by half of the weight.

Example::

    fuse([(1.0, [7, 3]), (1.0, [3, 9])])   # [(3, 0.99…), (7, 0.50), (9, 0.49…)]
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["RRF_K", "fuse"]

RRF_K = 60
"""The rank constant of reciprocal rank fusion (the value of the original paper, and of most engines)."""


def fuse(rankings: Sequence[tuple[float, Sequence[int]]], *, k: int = RRF_K) -> list[tuple[int, float]]:
    """Fuse ``(weight, ids best first)`` rankings; ``(id, score in [0, 1])``, best first.

    Ties keep the order in which the ids were first seen (the earlier ranking's order).
    """
    best = sum(weight / (k + 1) for weight, _ in rankings)
    if best <= 0:
        return []
    scores: dict[int, float] = {}
    for weight, ids in rankings:
        for rank, chunk_id in enumerate(ids, start=1):
            scores[chunk_id] = scores.get(chunk_id, 0.0) + weight / (k + rank)
    ordered = sorted(scores.items(), key=lambda pair: -pair[1])  # stable: first-seen order on ties
    return [(chunk_id, score / best) for chunk_id, score in ordered]
