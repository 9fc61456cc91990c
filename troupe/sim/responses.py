"""Stateless ``POST /v1/responses`` for the standalone sim server (``troupe sim``).

The sim server answers the Responses API as a bare model server would: one request, one
model turn, nothing stored. It reuses the agent loop (:func:`~troupe.agentloop.driver.prepare`,
:func:`~troupe.agentloop.driver.run_loop`, :class:`~troupe.agentloop.writer.WireWriter`) over
the server's in-process :class:`~troupe.sim.model.SimModel`, with no tool executors: every
function call the model makes goes back to the client as a ``function_call`` item (declared
or not, as a model server's would), so a response never takes more than one model turn.

This lets gateways that forward the Responses API (SMG, Llama Stack, Troupe itself) stand in
front of the same simulated model, and gives benchmarks the physical limit: the same wire
protocol with no gateway at all.

What it refuses (400, naming ``param``): ``previous_response_id`` and ``conversation`` (there is
no storage), and tools other than ``function``. ``store`` is echoed as ``false``. The sampling
extensions of vLLM and SGLang that gateways add (:data:`IGNORED_EXTENSIONS`) are accepted and
ignored. A
``[[fail STATUS]]`` directive answers that HTTP status (non-streaming) or ends the stream with
``error`` + ``response.failed``.

Example::

    app = create_sim_app(SimSettings(ttft_ms=50, itl_ms=10))   # registers this route
    httpx.post(f"{url}/v1/responses", json={"model": "sim", "input": "[[tokens 8]]", "stream": True})
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from troupe.agentloop.driver import prepare, run_loop
from troupe.agentloop.model import ChatRequest, ModelChunk, ModelError
from troupe.agentloop.writer import WireWriter, collect_response
from troupe.protocol import (
    SSE_DONE,
    SSE_MEDIA_TYPE,
    InvalidRequest,
    ProtocolError,
    encode_sse,
    new_id,
    parse_create_request,
)
from troupe.sim.model import SimModel

__all__ = ["add_responses_route", "IGNORED_EXTENSIONS"]

IGNORED_EXTENSIONS = frozenset({"top_k", "min_p", "repetition_penalty", "priority", "request_id", "cache_salt"})
"""Sampling extensions of vLLM/SGLang that gateways (SMG) add to forwarded requests; a model
server accepts them, and so does the sim (they change nothing in a deterministic model)."""


class _EveryName(frozenset[str]):
    """A ``declared`` set that contains every name: all calls are the client's."""

    def __contains__(self, name: object) -> bool:
        return True


class _FailureRecorder:
    """The sim as a model client that remembers the HTTP status of a simulated failure."""

    def __init__(self, sim: SimModel) -> None:
        self._sim = sim
        self.fail_status: int | None = None

    async def stream(self, request: ChatRequest) -> AsyncGenerator[ModelChunk, None]:
        try:
            async for chunk in self._sim.stream(request):
                yield chunk
        except ModelError as exc:
            self.fail_status = exc.status
            raise


def _error(exc: ProtocolError) -> JSONResponse:
    return JSONResponse(exc.to_body(), status_code=exc.status)


def _validated(body: Any) -> Any:
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k not in IGNORED_EXTENSIONS}
    request = parse_create_request(body)
    for param in ("previous_response_id", "conversation"):
        if body.get(param) is not None:
            raise InvalidRequest(
                f"'{param}' is not supported: the sim server is stateless and stores nothing.",
                param=param,
                code="unsupported_parameter",
            )
    return request.model_copy(update={"store": False})


def add_responses_route(app: FastAPI, sim: SimModel) -> None:
    """Register the stateless ``POST /v1/responses`` on the sim server ``app``.

    Args:
        app: the sim server (:func:`troupe.sim.server.create_sim_app`).
        sim: the app's model; ``[[fail S once]]`` memory is shared with ``/v1/chat/completions``.
    """

    @app.post("/v1/responses")
    async def create_response(http_request: Request) -> Response:
        try:
            body = json.loads(await http_request.body())
        except ValueError:
            return _error(InvalidRequest("The request body is not valid JSON.", param=None, code="invalid_json"))
        try:
            request = _validated(body)
            prepared = prepare(request, [])
        except ProtocolError as exc:
            return _error(exc)
        prepared.policy = dataclasses.replace(prepared.policy, declared=_EveryName())
        model = _FailureRecorder(sim)
        writer = WireWriter(request, response_id=new_id("resp"), created_at=int(time.time()))
        events = run_loop(prepared, model=model, upstream_model=request.model)
        if request.stream:
            return StreamingResponse(
                _sse(events, writer), media_type=SSE_MEDIA_TYPE, headers={"Cache-Control": "no-cache"}
            )
        response = await collect_response(events, writer)
        if response.get("status") == "failed":
            error = response.get("error") or {}
            status = model.fail_status or 500
            kind = "server_error" if status >= 500 else "rate_limit_error" if status == 429 else "invalid_request_error"
            message = error.get("message") or "The model call failed."
            return _error(ProtocolError(message, type=kind, code=error.get("code"), status=status))
        return JSONResponse(response)


async def _sse(events: Any, writer: WireWriter) -> AsyncIterator[bytes]:
    async for event in events:
        wire = writer.write(event)
        if wire:
            yield b"".join(encode_sse(e) for e in wire)
    yield SSE_DONE
