"""The ``sim`` model as a standalone OpenAI-compatible HTTP server (``troupe sim``).

Routes::

    POST /v1/chat/completions   Chat Completions, streaming (SSE) or not
    POST /v1/responses          stateless Responses, one model turn (see :mod:`.responses`)
    POST /v1/embeddings         the sim embedder, 384 dimensions by default (see :mod:`.embeddings`)
    POST /v1/moderations        the sim's moderation model, its verdicts scripted (see :mod:`.moderation`)
    GET  /v1/models             lists the model ``sim``
    GET  /health                {"status": "ok"}

The answers follow :mod:`troupe.sim.model` (directives in the last user message). The
stream looks like a real server's: a role chunk, one chunk per reasoning token
(``delta.reasoning_content``), one per text token, each tool call as a head chunk (``id``,
``type``, ``function.name``, empty arguments) followed by its arguments split over several
chunks, a ``finish_reason`` chunk, an optional usage chunk (``stream_options.include_usage``)
and ``data: [DONE]``. Errors use OpenAI's body ``{"error": {message, type, param, code}}``.

Example::

    uvicorn.run(create_sim_app(SimSettings(ttft_ms=200, itl_ms=20)), port=8001)
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from troupe.agentloop.model import (
    ChatRequest,
    ReasoningChunk,
    TextChunk,
    TokenUsage,
    ToolCallArgumentsDelta,
    ToolCallStart,
    TurnEnd,
)
from troupe.sim import moderation
from troupe.sim.bodies import bad_request, json_object, texts
from troupe.sim.embeddings import add_embeddings_route
from troupe.sim.model import SimModel, SimReply, SimSettings, stream_reply
from troupe.sim.responses import add_responses_route

__all__ = ["create_sim_app", "SIM_MODEL_NAME"]

SIM_MODEL_NAME = "sim"

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


def create_sim_app(settings: SimSettings = SimSettings()) -> FastAPI:
    """Build the sim server.

    Args:
        settings: latency defaults for every request (``[[latency]]`` overrides them).

    Returns:
        A FastAPI app; one app shares one :class:`SimModel`, so ``[[fail S once]]`` is
        remembered across its requests.
    """
    sim = SimModel(settings)
    app = FastAPI(title="Troupe sim", description="A deterministic simulated OpenAI-compatible model.")

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> Response:
        # Unknown routes / wrong methods still answer in OpenAI's error shape.
        return _error(exc.status_code, str(exc.detail))

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        model = {"id": SIM_MODEL_NAME, "object": "model", "created": 0, "owned_by": "troupe"}
        return {"object": "list", "data": [model]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "The request body is not valid JSON.")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "'messages' is required and must be an array.", param="messages")

        chat = ChatRequest.from_payload(body)
        reply = sim.plan(chat)
        if reply.fail_status is not None:
            return _error(reply.fail_status, reply.failure_message, param=reply.fail_param, code=reply.fail_code)

        head = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "created": int(time.time()),
            "model": chat.model or SIM_MODEL_NAME,
        }
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(
                _sse(reply, head=head, include_usage=include_usage),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        end = None
        async for chunk in stream_reply(reply):  # drained for its pacing: same latency as streaming
            if isinstance(chunk, TurnEnd):
                end = chunk
        assert end is not None  # stream_reply always ends with a TurnEnd
        return JSONResponse(_completion(end, head=head))

    add_responses_route(app, sim)
    add_embeddings_route(app)
    _add_moderations_route(app)
    return app


def _add_moderations_route(app: FastAPI) -> None:
    """``POST /v1/moderations``: the sim's moderation model on text inputs (a string or an array)."""

    @app.post("/v1/moderations")
    async def moderations(request: Request) -> Any:
        body = await json_object(request)
        if isinstance(body, JSONResponse):
            return body
        inputs = texts(body)
        if not inputs or not all(isinstance(i, str) for i in inputs):
            return bad_request("'input' must be a string or an array of strings.", "input")
        results = [moderation.moderate(text) for text in inputs]
        return moderation.moderation_response(results, body.get("model") or moderation.MODEL)


def _error(status: int, message: str, *, param: str | None = None, code: str | None = None) -> JSONResponse:
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status)


def _usage(usage: TokenUsage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def _completion(end: TurnEnd, *, head: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        # Like OpenAI: content is null on a pure tool-call turn, tool_calls absent without calls.
        "content": end.text if end.text or not end.tool_calls else None,
        "reasoning_content": end.reasoning or None,
    }
    if end.tool_calls:
        message["tool_calls"] = [
            {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in end.tool_calls
        ]
    choice = {"index": 0, "message": message, "finish_reason": end.finish_reason, "logprobs": None}
    return {**head, "object": "chat.completion", "choices": [choice], "usage": _usage(end.usage)}


def _frame(payload: dict[str, Any] | str) -> str:
    # One event per frame, one line of JSON, LF only (CRLF breaks some SSE clients).
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n"


async def _sse(reply: SimReply, *, head: dict[str, Any], include_usage: bool) -> AsyncIterator[str]:
    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return _frame({**head, "object": "chat.completion.chunk", "choices": [choice]})

    started = False
    async for item in stream_reply(reply):
        if not started:
            # The role chunk goes out with the first token, i.e. after the ttft, as a real
            # server's would: clients measure time to first token from it.
            started = True
            yield chunk({"role": "assistant", "content": ""})
        match item:
            case ReasoningChunk(text=text):
                yield chunk({"reasoning_content": text})
            case TextChunk(text=text):
                yield chunk({"content": text})
            case ToolCallStart(index=index, call_id=call_id, name=name):
                call = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
                yield chunk({"tool_calls": [call]})
            case ToolCallArgumentsDelta(index=index, delta=delta):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": delta}}]})
            case TurnEnd(finish_reason=finish_reason, usage=usage):
                yield chunk({}, finish_reason)
                if include_usage:
                    yield _frame({**head, "object": "chat.completion.chunk", "choices": [], "usage": _usage(usage)})
    yield _frame("[DONE]")
