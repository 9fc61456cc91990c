"""``POST /v1/embeddings`` on the sim server: the ``sim`` embedder over OpenAI's wire.

Any ``model`` name is accepted. The vectors are :class:`troupe.rag.embedders.SimEmbedder`'s
(feature hashing of words and word pairs: keyword-like, not semantic) with ``dimensions``
from the request, else the server's default (384, the size of the small sentence-embedding
models a benchmark stands it in for). ``encoding_format`` ``float`` or ``base64`` (what the
``openai`` SDK asks for by default). Errors use OpenAI's body.

Example::

    curl -s localhost:8001/v1/embeddings -H 'content-type: application/json' \\
      -d '{"model": "sim-384", "input": ["router restarts"]}'
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from troupe.rag.embedders import SimEmbedder, encode_base64, usage_tokens
from troupe.sim.bodies import bad_request, json_object, texts

__all__ = ["DEFAULT_DIMENSIONS", "add_embeddings_route"]

DEFAULT_DIMENSIONS = 384
"""The vectors' size when a request names none."""


def add_embeddings_route(app: FastAPI, *, dimensions: int = DEFAULT_DIMENSIONS) -> None:
    """Add ``POST /v1/embeddings`` to the sim app, ``dimensions`` its default size."""
    embedders: dict[int, SimEmbedder] = {}

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Any:
        body = await json_object(request)
        if isinstance(body, JSONResponse):
            return body
        inputs = texts(body)
        if not inputs or not all(isinstance(i, str) and i for i in inputs):
            return bad_request("'input' must be a non-empty string or array of them.", "input")
        size = body.get("dimensions") or dimensions
        if isinstance(size, bool) or not isinstance(size, int) or not 2 <= size <= 8192:
            return bad_request("'dimensions' must be an integer from 2 to 8192.", "dimensions")
        base64 = body.get("encoding_format") == "base64"
        embedder = embedders.setdefault(size, SimEmbedder(size))
        vectors = embedder.embed(inputs)
        data = [{"object": "embedding", "index": i, "embedding": encode_base64(v) if base64 else v.tolist()}
                for i, v in enumerate(vectors)]  # fmt: skip
        tokens = usage_tokens(inputs)
        return {"object": "list", "data": data, "model": body.get("model") or "sim",
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}  # fmt: skip
