"""OpenAIChatClient against an httpx.MockTransport handler: no network, no sleeps."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import httpx
import pytest

from troupe.agentloop import openai_client
from troupe.agentloop.model import (
    ChatRequest,
    ModelChunk,
    ModelClient,
    ModelError,
    ReasoningDelta,
    TextDelta,
    TokenUsage,
    ToolCallArgumentsDelta,
    ToolCallStart,
    TurnEnd,
)
from troupe.agentloop.openai_client import OpenAIChatClient

BASE_URL = "http://upstream.test/v1"
REQUEST = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}])


# -- builders ---------------------------------------------------------------------------


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict:
    choices = [] if delta is None and finish is None else [
        {"index": 0, "delta": delta or {}, "finish_reason": finish}
    ]
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": choices, **extra}


def tool_delta(
    index: int, *, id: str | None = None, name: str | None = None, args: str | None = None
) -> dict:
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
    if args is not None:
        function["arguments"] = args
    fragment: dict[str, Any] = {"index": index, "function": function}
    if id is not None:
        fragment.update(id=id, type="function")
    return chunk({"tool_calls": [fragment]})


def sse(objs: Iterable[dict | str], *, sep: str = "\n", done: bool = True) -> bytes:
    frames = [f"data: {o if isinstance(o, str) else json.dumps(o)}{sep}{sep}" for o in objs]
    if done:
        frames.append(f"data: [DONE]{sep}{sep}")
    return "".join(frames).encode()


def sse_response(body: bytes | httpx.AsyncByteStream, status: int = 200) -> httpx.Response:
    headers = {"content-type": "text/event-stream"}
    if isinstance(body, bytes):
        return httpx.Response(status, headers=headers, content=body)
    return httpx.Response(status, headers=headers, stream=body)


Handler = Callable[[httpx.Request], httpx.Response]


class Upstream:
    """A handler function for MockTransport that answers from a script and counts calls."""

    def __init__(self, *replies: httpx.Response | Handler) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        return reply(request) if callable(reply) else reply

    def client(self, **kwargs: Any) -> OpenAIChatClient:
        http = httpx.AsyncClient(transport=httpx.MockTransport(self))
        kwargs.setdefault("backoff_base_s", 0.0)
        return OpenAIChatClient(BASE_URL, http_client=http, **kwargs)


async def collect(client: OpenAIChatClient, request: ChatRequest = REQUEST) -> list[ModelChunk]:
    return [c async for c in client.stream(request)]


class ScriptedStream(httpx.AsyncByteStream):
    """A response body that yields its parts, then raises or blocks; records aclose()."""

    def __init__(
        self, parts: list[bytes], then: BaseException | None = None, block: bool = False
    ) -> None:
        self.parts, self.then, self.block = parts, then, block
        self.closed = asyncio.Event()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for part in self.parts:
            yield part
        if self.then is not None:
            raise self.then
        if self.block:
            await asyncio.Event().wait()

    async def aclose(self) -> None:
        self.closed.set()


# -- the happy path ---------------------------------------------------------------------


async def test_text_reasoning_and_usage_with_crlf_framing() -> None:
    body = sse(
        [
            chunk({"role": "assistant", "reasoning_content": "think "}),
            chunk({"reasoning": "harder"}),
            chunk({"content": "hello "}),
            chunk({"content": "world"}),
            chunk({}, finish="length"),
            chunk(
                usage={
                    "prompt_tokens": 11,
                    "completion_tokens": 7,
                    "prompt_tokens_details": {"cached_tokens": 3},
                    "completion_tokens_details": {"reasoning_tokens": 2},
                }
            ),
        ],
        sep="\r\n",
    )
    body = b": keep-alive comment\r\n\r\n" + body
    upstream = Upstream(sse_response(body))
    chunks = await collect(upstream.client())
    assert chunks[:4] == [
        ReasoningDelta(text="think "),
        ReasoningDelta(text="harder"),
        TextDelta(text="hello "),
        TextDelta(text="world"),
    ]
    assert chunks[4:] == [
        TurnEnd(
            text="hello world",
            reasoning="think harder",
            finish_reason="length",
            usage=TokenUsage(input_tokens=11, output_tokens=7, cached_tokens=3, reasoning_tokens=2),
        )
    ]


async def test_request_shape_and_auth_header() -> None:
    upstream = Upstream(sse_response(sse([chunk({"content": "x"}, finish="stop")])))
    http = httpx.AsyncClient(transport=httpx.MockTransport(upstream))
    client = OpenAIChatClient(BASE_URL + "/", api_key="sk-test", http_client=http)
    assert isinstance(client, ModelClient)
    await collect(client)
    (request,) = upstream.requests
    assert request.method == "POST"
    assert str(request.url) == "http://upstream.test/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert json.loads(request.content) == REQUEST.to_payload(stream=True)


async def test_defaults_without_finish_reason_chunk_or_usage() -> None:
    # No finish_reason anywhere, but a proper [DONE]: "stop" and zero usage.
    upstream = Upstream(sse_response(sse([chunk({"content": "ok"})])))
    chunks = await collect(upstream.client())
    assert chunks[-1] == TurnEnd(text="ok", finish_reason="stop", usage=TokenUsage())


async def test_tool_call_arguments_split_over_chunks() -> None:
    body = sse(
        [
            tool_delta(0, id="call_1", name="add", args=""),
            tool_delta(0, args='{"a": '),
            tool_delta(0, args='2, "b"'),
            tool_delta(0, args=": 40}"),
            chunk({}, finish="tool_calls"),
        ]
    )
    chunks = await collect(Upstream(sse_response(body)).client())
    assert chunks[:-1] == [
        ToolCallStart(index=0, call_id="call_1", name="add"),
        ToolCallArgumentsDelta(index=0, delta='{"a": '),
        ToolCallArgumentsDelta(index=0, delta='2, "b"'),
        ToolCallArgumentsDelta(index=0, delta=": 40}"),
    ]
    end = chunks[-1]
    assert isinstance(end, TurnEnd) and end.finish_reason == "tool_calls"
    (call,) = end.tool_calls
    assert (call.call_id, call.name) == ("call_1", "add")
    assert json.loads(call.arguments) == {"a": 2, "b": 40}


async def test_parallel_tool_calls_interleaved_by_index() -> None:
    body = sse(
        [
            tool_delta(1, id="call_b", name="second", args='{"y"'),
            tool_delta(0, id="call_a", name="first", args='{"x"'),
            tool_delta(1, args=": 2}"),
            tool_delta(0, args=": 1}"),
            chunk({}, finish="tool_calls"),
        ]
    )
    chunks = await collect(Upstream(sse_response(body)).client())
    assert chunks[:-1] == [
        ToolCallStart(index=1, call_id="call_b", name="second"),
        ToolCallArgumentsDelta(index=1, delta='{"y"'),
        ToolCallStart(index=0, call_id="call_a", name="first"),
        ToolCallArgumentsDelta(index=0, delta='{"x"'),
        ToolCallArgumentsDelta(index=1, delta=": 2}"),
        ToolCallArgumentsDelta(index=0, delta=": 1}"),
    ]
    end = chunks[-1]
    assert isinstance(end, TurnEnd)
    # The TurnEnd lists the calls by index, not by arrival.
    assert [(c.call_id, c.name, c.arguments) for c in end.tool_calls] == [
        ("call_a", "first", '{"x": 1}'),
        ("call_b", "second", '{"y": 2}'),
    ]


async def test_arguments_before_the_name_are_buffered_until_the_start() -> None:
    body = sse(
        [
            tool_delta(0, id="call_1", args='{"q": '),
            tool_delta(0, args='"x"'),
            tool_delta(0, name="search", args="}"),
            chunk({}, finish="tool_calls"),
        ]
    )
    chunks = await collect(Upstream(sse_response(body)).client())
    assert chunks[:-1] == [
        ToolCallStart(index=0, call_id="call_1", name="search"),
        ToolCallArgumentsDelta(index=0, delta='{"q": "x"}'),
    ]
    assert isinstance(chunks[-1], TurnEnd) and chunks[-1].tool_calls[0].arguments == '{"q": "x"}'


async def test_non_streaming_json_reply_is_accepted() -> None:
    completion = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "function": {"name": "f", "arguments": "{}"}}
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1},
    }
    upstream = Upstream(httpx.Response(200, json=completion))
    end = (await collect(upstream.client()))[-1]
    assert isinstance(end, TurnEnd)
    assert [(c.call_id, c.name, c.arguments) for c in end.tool_calls] == [("c1", "f", "{}")]
    assert end.finish_reason == "tool_calls" and end.usage.input_tokens == 5


# -- errors -----------------------------------------------------------------------------


async def test_error_body_message_and_code_are_kept() -> None:
    body = {
        "error": {
            "message": "max_tokens is too large",
            "type": "invalid_request_error",
            "code": "invalid_value",
        }
    }
    upstream = Upstream(httpx.Response(400, json=body))
    with pytest.raises(ModelError) as info:
        await collect(upstream.client())
    assert (info.value.status, info.value.message, info.value.code) == (
        400,
        "max_tokens is too large",
        "invalid_value",
    )
    assert len(upstream.requests) == 1  # a 400 is never retried


async def test_plain_text_error_body_is_kept() -> None:
    upstream = Upstream(httpx.Response(404, text="no such route"))
    with pytest.raises(ModelError) as info:
        await collect(upstream.client())
    assert (info.value.status, info.value.message) == (404, "no such route")


async def test_error_object_inside_the_stream() -> None:
    error = {"error": {"message": "engine died", "code": "server_error"}}
    body = sse([chunk({"content": "par"}), error])
    gen = Upstream(sse_response(body)).client().stream(REQUEST)
    assert await anext(gen) == TextDelta(text="par")
    with pytest.raises(ModelError) as info:
        await anext(gen)
    assert (info.value.status, info.value.message) == (502, "engine died")
    assert info.value.code == "server_error"


async def test_stream_cut_short_is_an_error() -> None:
    upstream = Upstream(sse_response(sse([chunk({"content": "half"})], done=False)))
    with pytest.raises(ModelError, match="ended before"):
        await collect(upstream.client())


async def test_a_reply_kept_open_after_done_still_ends_the_turn(monkeypatch) -> None:
    # The client reads on after [DONE] (so the connection can be reused), but only so long.
    monkeypatch.setattr(openai_client, "_DRAIN_S", 0.01)
    body = ScriptedStream([sse([chunk({"content": "hi"}, finish="stop")])], block=True)
    chunks = await collect(Upstream(sse_response(body)).client())
    assert isinstance(chunks[-1], TurnEnd) and chunks[-1].finish_reason == "stop"
    assert body.closed.is_set()


async def test_connection_error_maps_to_502_after_retries() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    upstream = Upstream(refuse)
    with pytest.raises(ModelError) as info:
        await collect(upstream.client(max_retries=2))
    assert info.value.status == 502
    assert len(upstream.requests) == 3


async def test_read_timeout_before_headers_maps_to_504_without_retry() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    upstream = Upstream(slow)
    with pytest.raises(ModelError) as info:
        await collect(upstream.client())
    assert info.value.status == 504
    assert len(upstream.requests) == 1


# -- retries ----------------------------------------------------------------------------


async def test_503_is_retried_then_succeeds() -> None:
    ok = sse_response(sse([chunk({"content": "fine"}, finish="stop")]))
    upstream = Upstream(httpx.Response(503, json={"error": {"message": "busy"}}), ok)
    chunks = await collect(upstream.client())
    assert chunks[-1] == TurnEnd(text="fine")
    assert len(upstream.requests) == 2


async def test_5xx_gives_up_after_max_retries_with_the_last_error() -> None:
    upstream = Upstream(httpx.Response(500, json={"error": {"message": "boom"}}))
    with pytest.raises(ModelError) as info:
        await collect(upstream.client(max_retries=1))
    assert (info.value.status, info.value.message) == (500, "boom")
    assert len(upstream.requests) == 2


async def test_429_with_retry_after_zero_is_retried() -> None:
    ok = sse_response(sse([chunk({"content": "ok"}, finish="stop")]))
    limited = httpx.Response(
        429, headers={"retry-after": "0"}, json={"error": {"message": "slow down"}}
    )
    upstream = Upstream(limited, ok)
    client = upstream.client(backoff_base_s=60.0)  # Retry-After wins over the backoff
    chunks = await asyncio.wait_for(collect(client), timeout=5)
    assert chunks[-1] == TurnEnd(text="ok")
    assert len(upstream.requests) == 2


async def test_retry_after_is_honoured_and_capped() -> None:
    ok = sse_response(sse([chunk({"content": "ok"}, finish="stop")]))
    upstream = Upstream(
        httpx.Response(429, headers={"retry-after": "2"}),
        httpx.Response(429, headers={"retry-after": "9999"}),
        ok,
    )
    client = upstream.client()
    delays: list[float] = []

    async def record(delay: float) -> None:
        delays.append(delay)

    client._sleep = record
    await collect(client)
    assert delays == [2.0, openai_client._MAX_RETRY_AFTER_S]


async def test_backoff_grows_exponentially() -> None:
    upstream = Upstream(httpx.Response(502))
    client = upstream.client(max_retries=3, backoff_base_s=1.0)
    delays: list[float] = []

    async def record(delay: float) -> None:
        delays.append(delay)

    client._sleep = record
    with pytest.raises(ModelError):
        await collect(client)
    assert len(delays) == 3
    for attempt, delay in enumerate(delays):
        assert 0.75 * 2**attempt <= delay <= 2**attempt


async def test_x_should_retry_false_vetoes_a_retry() -> None:
    upstream = Upstream(httpx.Response(500, headers={"x-should-retry": "false"}))
    with pytest.raises(ModelError):
        await collect(upstream.client())
    assert len(upstream.requests) == 1


async def test_failure_after_the_first_chunk_is_not_retried() -> None:
    first = sse([chunk({"content": "partial"})], done=False)

    def reply(request: httpx.Request) -> httpx.Response:
        return sse_response(ScriptedStream([first], then=httpx.ReadError("connection reset")))

    upstream = Upstream(reply)
    seen: list[ModelChunk] = []
    with pytest.raises(ModelError) as info:
        async for c in upstream.client(max_retries=5).stream(REQUEST):
            seen.append(c)
    assert seen == [TextDelta(text="partial")]
    assert info.value.status == 502
    assert len(upstream.requests) == 1


async def test_read_timeout_while_streaming_maps_to_504() -> None:
    first = sse([chunk({"content": "partial"})], done=False)
    upstream = Upstream(
        lambda r: sse_response(ScriptedStream([first], then=httpx.ReadTimeout("idle")))
    )
    with pytest.raises(ModelError) as info:
        await collect(upstream.client())
    assert info.value.status == 504
    assert len(upstream.requests) == 1


# -- cancellation and lifecycle ---------------------------------------------------------


async def test_closing_the_iterator_closes_the_response() -> None:
    body = ScriptedStream([sse([chunk({"content": "a"})], done=False)], block=True)
    upstream = Upstream(sse_response(body))
    gen = upstream.client().stream(REQUEST)
    assert await anext(gen) == TextDelta(text="a")
    assert not body.closed.is_set()
    await gen.aclose()
    assert body.closed.is_set()


async def test_cancelling_the_consumer_closes_the_response() -> None:
    body = ScriptedStream([sse([chunk({"content": "a"})], done=False)], block=True)
    client = Upstream(sse_response(body)).client()
    first = asyncio.Event()

    async def consume() -> None:
        async for _ in client.stream(REQUEST):
            first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(body.closed.wait(), timeout=5)


async def test_own_pool_is_created_once_and_closed() -> None:
    client = OpenAIChatClient(BASE_URL)
    pool = client._http()
    assert client._http() is pool
    async with client:
        pass
    assert pool.is_closed
    with pytest.raises(RuntimeError):
        await collect(client)


async def test_injected_pool_is_not_closed() -> None:
    http = httpx.AsyncClient(transport=httpx.MockTransport(Upstream(httpx.Response(200))))
    async with OpenAIChatClient(BASE_URL, http_client=http):
        pass
    assert not http.is_closed
    await http.aclose()


def test_exported_members() -> None:
    assert set(openai_client.__all__) == {"OpenAIChatClient", "DEFAULT_TIMEOUT", "DEFAULT_LIMITS"}


async def test_warm_opens_a_connection_with_get_models() -> None:
    upstream = Upstream(httpx.Response(401, json={"error": {"message": "bad key"}}))
    client = upstream.client(api_key="sk-test")
    await client.warm()  # a refusal is the first call's business, not the warm-up's
    assert [(r.method, str(r.url)) for r in upstream.requests] == [("GET", BASE_URL + "/models")]
    assert upstream.requests[0].headers["authorization"] == "Bearer sk-test"


async def test_warm_never_raises_when_the_server_is_down() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    upstream = Upstream(refuse)
    await upstream.client().warm()
    assert len(upstream.requests) == 1


async def test_warming_the_models_skips_one_configured_wrongly() -> None:
    from troupe.actors.models import ModelRegistry
    from troupe.actors.settings import ModelSpec

    registry = ModelRegistry([ModelSpec(name="broken", kind="openai"), ModelSpec(name="sim", kind="sim")])
    await registry.warm()  # no base_url: that model's requests fail, start-up does not
    with pytest.raises(ValueError, match="base_url"):
        registry.client(ModelSpec(name="broken", kind="openai"))
    await registry.close()
