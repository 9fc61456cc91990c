"""Embedders: text to vectors, for vector stores and ``POST /v1/embeddings``.

Two kinds, configured like chat models (``[[models]]`` with ``task = "embeddings"``, see
:class:`troupe.runtime.settings.ModelSpec`):

* :class:`SimEmbedder` (``kind = "sim"``): **not a language model.** It hashes the terms of
  a text (:func:`troupe.rag.text.terms`: words, stop words dropped, lightly stemmed) and
  their bigrams into a fixed number of dimensions (feature hashing, with a sign bit per
  feature so that collisions cancel rather than pile up), weighs each by ``1 + ln(count)``
  and scales the vector to unit length. Two texts are similar exactly as far as they share
  words and word pairs: a paraphrase with other words is *not* found by it. It is
  deterministic, costs nothing to download, and is what the tests and the embedded
  defaults use; put a real embedding model behind ``kind = "openai"`` for semantic search.
* :class:`OpenAIEmbedder` (``kind = "openai"``): any OpenAI-compatible ``/v1/embeddings``
  server (vLLM, Ollama, TEI, llama.cpp, OpenAI), called with ``encoding_format: "float"``
  in batches of :data:`BATCH`; its vectors are scaled to unit length.

Both return ``float32`` arrays of shape ``(len(texts), dimensions)``, rows of length 1, so
that cosine similarity and the inner product agree.

Errors::

    EmbeddingError     the embedding server failed, or answered something unusable

Example::

    vectors = SimEmbedder(dimensions=256).embed(["router restarts", "the routers restarted"])
    float(vectors[0] @ vectors[1])   # 1.0: the same terms
"""

from __future__ import annotations

import base64
import functools
import math
import os
import zlib
from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol

import httpx
import numpy as np

from .text import count_tokens, terms

__all__ = [
    "BATCH",
    "Embedder",
    "EmbeddingError",
    "OpenAIEmbedder",
    "SimEmbedder",
    "decode_base64",
    "encode_base64",
    "normalize",
    "usage_tokens",
]

BATCH = 32
"""Texts per upstream request (TEI's default batch limit is 32)."""
_TIMEOUT = httpx.Timeout(60.0, connect=5.0)


class EmbeddingError(Exception):
    """The embedder failed; the message says how. Picklable."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Embedder(Protocol):
    """Turns texts into unit vectors of ``dimensions`` floats (None: known after the first call)."""

    name: str
    dimensions: int | None

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...

    async def aembed(self, texts: Sequence[str]) -> np.ndarray: ...

    def close(self) -> None: ...


def normalize(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` (rows) scaled to length 1; a zero row stays zero."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.where(norms == 0, 1, norms)).astype(np.float32)


def encode_base64(vector: np.ndarray) -> str:
    """OpenAI's ``encoding_format: "base64"``: the little-endian float32 bytes, base64."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def decode_base64(text: str) -> np.ndarray:
    """Inverse of :func:`encode_base64`."""
    return np.frombuffer(base64.b64decode(text), dtype="<f4").astype(np.float32)


class SimEmbedder:
    """Feature hashing of terms and term bigrams (module docstring); deterministic."""

    def __init__(self, dimensions: int = 512, *, name: str = "sim-embedding") -> None:
        if dimensions < 2:
            raise ValueError(f"dimensions must be at least 2, got {dimensions}")
        self.name = name
        self.dimensions: int | None = dimensions

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_terms([terms(text) for text in texts])

    def embed_terms(self, analyzed: Sequence[Sequence[str]]) -> np.ndarray:
        """:meth:`embed` of texts already analyzed (:func:`troupe.rag.text.terms`), so that
        ingestion analyzes each chunk once for both the keyword index and its vector."""
        assert self.dimensions is not None
        out = np.zeros((len(analyzed), self.dimensions), dtype=np.float32)
        for row, words in enumerate(analyzed):
            features = Counter(words) + Counter(f"{a} {b}" for a, b in zip(words, words[1:], strict=False))
            for feature, count in features.items():
                column, sign = _bucket(feature, self.dimensions)
                out[row, column] += sign * (1.0 + math.log(count))
        return normalize(out)

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)

    def close(self) -> None:
        pass


@functools.lru_cache(maxsize=1 << 17)
def _bucket(feature: str, dimensions: int) -> tuple[int, float]:
    """The dimension a feature lands in and its sign. crc32, not ``hash()``: str hashes
    differ between processes (PYTHONHASHSEED)."""
    h = zlib.crc32(feature.encode())
    return h % dimensions, 1.0 if (h // dimensions) & 1 else -1.0


class OpenAIEmbedder:
    """An OpenAI-compatible ``/v1/embeddings`` server.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8080/v1``.
        model: the model name sent upstream.
        name: the name Troupe knows it by.
        api_key_env: the environment variable holding the upstream key (read here).
        dimensions: sent as OpenAI's ``dimensions`` when set (models that can shorten).
    """

    def __init__(
        self, base_url: str, *, model: str, name: str, api_key_env: str | None = None, dimensions: int | None = None
    ) -> None:
        self.name = name
        self.dimensions = dimensions
        self._url = base_url.rstrip("/") + "/embeddings"
        self._model = model
        key = os.environ.get(api_key_env) if api_key_env else None
        self._headers = {"authorization": f"Bearer {key}"} if key else {}
        self._client: httpx.Client | None = None
        self._aclient: httpx.AsyncClient | None = None

    def _payload(self, texts: Sequence[str]) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self._model, "input": list(texts), "encoding_format": "float"}
        if self.dimensions is not None:
            payload["dimensions"] = self.dimensions
        return payload

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self._client is None:
            self._client = httpx.Client(timeout=_TIMEOUT, headers=self._headers)
        rows = []
        for start in range(0, len(texts), BATCH):
            batch = texts[start : start + BATCH]
            try:
                answer = self._client.post(self._url, json=self._payload(batch))
            except httpx.HTTPError as exc:
                raise EmbeddingError(f"the embedding server at {self._url} failed: {exc!r}") from exc
            rows.append(self._vectors(answer, len(batch)))
        return normalize(np.concatenate(rows)) if rows else np.zeros((0, self.dimensions or 0), np.float32)

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        if self._aclient is None:
            self._aclient = httpx.AsyncClient(timeout=_TIMEOUT, headers=self._headers)
        rows = []
        for start in range(0, len(texts), BATCH):
            batch = texts[start : start + BATCH]
            try:
                answer = await self._aclient.post(self._url, json=self._payload(batch))
            except httpx.HTTPError as exc:
                raise EmbeddingError(f"the embedding server at {self._url} failed: {exc!r}") from exc
            rows.append(self._vectors(answer, len(batch)))
        return normalize(np.concatenate(rows)) if rows else np.zeros((0, self.dimensions or 0), np.float32)

    def _vectors(self, answer: httpx.Response, expected: int) -> np.ndarray:
        """The vectors of one upstream answer, in input order."""
        if answer.status_code != 200:
            raise EmbeddingError(f"the embedding server answered {answer.status_code}: {answer.text[:300]}")
        try:
            data = sorted(answer.json()["data"], key=lambda d: d["index"])
            vectors = [decode_base64(d["embedding"]) if isinstance(d["embedding"], str) else d["embedding"] for d in data]
            matrix = np.asarray(vectors, dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(f"the embedding server's answer is not an embeddings list: {exc!r}") from exc
        if matrix.ndim != 2 or matrix.shape[0] != expected:
            raise EmbeddingError(f"the embedding server returned {matrix.shape[0]} vectors for {expected} inputs")
        return matrix

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    async def aclose(self) -> None:
        self.close()
        if self._aclient is not None:
            await self._aclient.aclose()
            self._aclient = None


def usage_tokens(texts: Sequence[str]) -> int:
    """The estimated tokens of ``texts`` (what ``usage.prompt_tokens`` reports for the sim)."""
    return sum(count_tokens(t) for t in texts)
