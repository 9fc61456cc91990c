"""Retrieval, pure of Ray and DuckDB: parsing, chunking, terms, embedders, fusion, and the
Files and Vector Stores wire checks.

- :mod:`.documents` — uploaded files to text (text, Markdown, HTML, PDF)
- :mod:`.text` — the analyzer (terms, their index ids), token estimates, the chunker
- :mod:`.embedders` — the ``sim`` embedder (feature hashing) and OpenAI-compatible ones
- :mod:`.fusion` — weighted reciprocal rank fusion of the vector and BM25 rankings
- :mod:`.wire` — request checks (chunking, attributes, filters, ranking options) and shapes

The DuckDB side is :mod:`troupe.storage.rag`; ingestion as Ray tasks and the search the
agent loop calls are :mod:`troupe.runtime.rag`.
"""

from typing import TYPE_CHECKING

from troupe._lazy import lazy_exports

if TYPE_CHECKING:
    from .documents import DocumentError, parse_document
    from .embedders import Embedder, EmbeddingError, OpenAIEmbedder, SimEmbedder
    from .fusion import fuse
    from .text import Chunk, chunk_text, count_tokens, indexed_terms, term_hash, terms

__all__ = [
    "Chunk",
    "DocumentError",
    "Embedder",
    "EmbeddingError",
    "OpenAIEmbedder",
    "SimEmbedder",
    "chunk_text",
    "count_tokens",
    "fuse",
    "indexed_terms",
    "parse_document",
    "term_hash",
    "terms",
]

# Imported on first use (troupe._lazy): a conversation host checks requests with .wire and .text
# and never needs numpy, which .embedders and .documents import.
_HOMES = {
    ".documents": ["DocumentError", "parse_document"],
    ".embedders": ["Embedder", "EmbeddingError", "OpenAIEmbedder", "SimEmbedder"],
    ".fusion": ["fuse"],
    ".text": ["Chunk", "chunk_text", "count_tokens", "indexed_terms", "term_hash", "terms"],
}
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
