"""OpenAIChatClient against a scripted upstream: an ``aiohttp.web`` app served on a free
loopback port, which answers each request from a script and records what it was sent.

Real HTTP end to end; the tests wait on conditions (a request seen, a connection gone),
never on wall-clock time. The timeout tests set timeouts of a fraction of a second.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from troupe.agentloop import openai_client
from troupe.agentloop.model import (
    ChatRequest,
    ModelChunk,
    ModelClient,
    ModelError,
    ReasoningChunk,
    TextChunk,
    TokenUsage,
    ToolCallArgumentsDelta,
    ToolCallStart,
    TurnEnd,
)
from troupe.agentloop.openai_client import OpenAIChatClient

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


Reply = Callable[[web.Request], Awaitable[web.StreamResponse]]


def sse_reply(body: bytes, status: int = 200) -> Reply:
    """The whole SSE body at once, with a Content-Length."""

    async def reply(request: web.Request) -> web.StreamResponse:
        return web.Response(status=status, body=body, headers={"Content-Type": "text/event-stream"})

    return reply


def json_reply(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    async def reply(request: web.Request) -> web.StreamResponse:
        return web.json_response(obj, status=status, headers=headers)

    return reply


def bare_reply(status: int, text: str = "", headers: dict[str, str] | None = None) -> Reply:
    async def reply(request: web.Request) -> web.StreamResponse:
        return web.Response(status=status, text=text, headers=headers)

    return reply


class Script:
    """A streamed (chunked) SSE reply: writes its parts, then ends the reply, holds it open,
    or closes the connection mid-reply (``"drop"``). ``gone`` is set when the client goes
    away while the reply is still open."""

    def __init__(self, *parts: bytes, then: Literal["end", "hold", "drop"] = "end") -> None:
        self.parts, self.then = parts, then
        self.gone = asyncio.Event()

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        try:
            await response.prepare(request)
            for part in self.parts:
                await response.write(part)
            if self.then == "end":
                return response
            if self.then == "drop":
                assert request.transport is not None
                request.transport.close()
            await asyncio.Event().wait()  # until the connection is lost, which cancels us
        except asyncio.CancelledError:
            self.gone.set()
            raise
        raise AssertionError("unreachable")


async def no_reply(request: web.Request) -> web.StreamResponse:
    """Read the request, send nothing until the client gives up."""
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def hang_up(request: web.Request) -> web.StreamResponse:
    """Read the request, then close the connection without a reply."""
    assert request.transport is not None
    request.transport.close()
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    peer: tuple[str, int]
    """The client end of the connection the request came on."""


class Upstream:
    """A scripted ``/v1`` server: answers each request with the next reply (the last one
    repeats) and records every request it was sent."""

    def __init__(self, replies: Iterable[Reply], clients: list[OpenAIChatClient]) -> None:
        self.replies = list(replies)
        self.requests: list[Seen] = []
        self.base_url = ""
        self._clients = clients

    async def handle(self, request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        peer = request.transport.get_extra_info("peername")
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.requests.append(Seen(request.method, request.path, headers, await request.read(), peer))
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        return await reply(request)

    def client(self, base_url: str | None = None, **kwargs: Any) -> OpenAIChatClient:
        kwargs.setdefault("backoff_base_s", 0.0)
        client = OpenAIChatClient(base_url or self.base_url, **kwargs)
        self._clients.append(client)
        return client


Serve = Callable[..., Awaitable[Upstream]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """``await serve(reply, ...)`` starts an Upstream on 127.0.0.1 on a free port."""
    servers: list[TestServer] = []
    clients: list[OpenAIChatClient] = []

    async def start(*replies: Reply) -> Upstream:
        upstream = Upstream(replies, clients)
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", upstream.handle)
        server = TestServer(app)
        await server.start_server()  # cancels a handler when its client disconnects
        servers.append(server)
        upstream.base_url = str(server.make_url("/v1"))
        return upstream

    yield start
    for client in clients:
        await client.aclose()
    for server in servers:
        await server.close()


def refused_url() -> str:
    """A loopback URL on which nothing listens (a port just bound and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


async def collect(client: OpenAIChatClient, request: ChatRequest = REQUEST) -> list[ModelChunk]:
    return [c async for c in client.stream(request)]


def recorded_sleeps(client: OpenAIChatClient) -> list[float]:
    delays: list[float] = []

    async def record(delay: float) -> None:
        delays.append(delay)

    client._sleep = record
    return delays


# -- the happy path ---------------------------------------------------------------------


async def test_text_reasoning_and_usage_with_crlf_framing(serve: Serve) -> None:
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
    upstream = await serve(sse_reply(body))
    chunks = await collect(upstream.client())
    assert chunks[:4] == [
        ReasoningChunk(text="think "),
        ReasoningChunk(text="harder"),
        TextChunk(text="hello "),
        TextChunk(text="world"),
    ]
    assert chunks[4:] == [
        TurnEnd(
            text="hello world",
            reasoning="think harder",
            finish_reason="length",
            usage=TokenUsage(input_tokens=11, output_tokens=7, cached_tokens=3, reasoning_tokens=2),
        )
    ]


async def test_cr_framing_and_events_written_piece_by_piece(serve: Serve) -> None:
    body = sse([chunk({"content": "a"}), chunk({"content": "b"}, finish="stop")], sep="\r")
    # Written in 7-byte pieces; the client may get them joined, split, or cut inside a line.
    script = Script(*(body[i : i + 7] for i in range(0, len(body), 7)))
    chunks = await collect((await serve(script)).client())
    assert chunks == [TextChunk(text="a"), TextChunk(text="b"), TurnEnd(text="ab")]


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"])
def test_lines_split_at_any_read_boundary(ending: bytes) -> None:
    # TCP may cut a reply anywhere, a CRLF included: every cut gives the same lines.
    lines = [b"data: 1", b"", b": comment", b"data: two", b"", b"event: x", b"data: 3"]
    stream = ending.join(lines)  # the last line is not terminated
    for cut in range(len(stream) + 1):
        splitter = openai_client._LineSplitter()
        got = splitter.feed(stream[:cut]) + splitter.feed(stream[cut:]) + splitter.feed(b"")
        assert got == lines, cut


async def test_multi_line_data_is_joined_with_newlines(serve: Serve) -> None:
    obj = json.dumps(chunk({"content": "x"}, finish="stop"), indent=1)
    body = "".join(f"data: {line}\n" for line in obj.splitlines()) + "\ndata: [DONE]\n\n"
    assert obj.count("\n") > 3
    chunks = await collect((await serve(sse_reply(body.encode()))).client())
    assert chunks == [TextChunk(text="x"), TurnEnd(text="x")]


async def test_request_shape_and_auth_header(serve: Serve) -> None:
    upstream = await serve(sse_reply(sse([chunk({"content": "x"}, finish="stop")])))
    client = upstream.client(upstream.base_url + "/", api_key="sk-test")
    assert isinstance(client, ModelClient)
    await collect(client)
    (request,) = upstream.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["accept"] == "text/event-stream"
    assert json.loads(request.body) == REQUEST.to_payload(stream=True)


async def test_no_auth_header_without_a_key(serve: Serve) -> None:
    upstream = await serve(sse_reply(sse([chunk({"content": "x"}, finish="stop")])))
    await collect(upstream.client())
    (request,) = upstream.requests
    assert "authorization" not in request.headers


async def test_defaults_without_finish_reason_chunk_or_usage(serve: Serve) -> None:
    # No finish_reason anywhere, but a proper [DONE]: "stop" and zero usage.
    upstream = await serve(sse_reply(sse([chunk({"content": "ok"})])))
    chunks = await collect(upstream.client())
    assert chunks[-1] == TurnEnd(text="ok", finish_reason="stop", usage=TokenUsage())


async def test_tool_call_arguments_split_over_chunks(serve: Serve) -> None:
    body = sse(
        [
            tool_delta(0, id="call_1", name="add", args=""),
            tool_delta(0, args='{"a": '),
            tool_delta(0, args='2, "b"'),
            tool_delta(0, args=": 40}"),
            chunk({}, finish="tool_calls"),
        ]
    )
    chunks = await collect((await serve(sse_reply(body))).client())
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


async def test_parallel_tool_calls_interleaved_by_index(serve: Serve) -> None:
    body = sse(
        [
            tool_delta(1, id="call_b", name="second", args='{"y"'),
            tool_delta(0, id="call_a", name="first", args='{"x"'),
            tool_delta(1, args=": 2}"),
            tool_delta(0, args=": 1}"),
            chunk({}, finish="tool_calls"),
        ]
    )
    chunks = await collect((await serve(sse_reply(body))).client())
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


async def test_arguments_before_the_name_are_buffered_until_the_start(serve: Serve) -> None:
    body = sse(
        [
            tool_delta(0, id="call_1", args='{"q": '),
            tool_delta(0, args='"x"'),
            tool_delta(0, name="search", args="}"),
            chunk({}, finish="tool_calls"),
        ]
    )
    chunks = await collect((await serve(sse_reply(body))).client())
    assert chunks[:-1] == [
        ToolCallStart(index=0, call_id="call_1", name="search"),
        ToolCallArgumentsDelta(index=0, delta='{"q": "x"}'),
    ]
    assert isinstance(chunks[-1], TurnEnd) and chunks[-1].tool_calls[0].arguments == '{"q": "x"}'


async def test_non_streaming_json_reply_is_accepted(serve: Serve) -> None:
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
    upstream = await serve(json_reply(completion))
    end = (await collect(upstream.client()))[-1]
    assert isinstance(end, TurnEnd)
    assert [(c.call_id, c.name, c.arguments) for c in end.tool_calls] == [("c1", "f", "{}")]
    assert end.finish_reason == "tool_calls" and end.usage.input_tokens == 5


async def test_consecutive_calls_reuse_one_connection(serve: Serve) -> None:
    # After [DONE] come 4 MB more (comments): far more than is buffered when [DONE] is
    # read, so the connection goes back to the pool only if the client reads on to the end.
    after_done = (b": " + b"x" * 1022 + b"\n") * 4096
    upstream = await serve(Script(sse([chunk({"content": "hi"}, finish="stop")]), after_done))
    client = upstream.client()
    for _ in range(2):
        assert (await collect(client))[-1] == TurnEnd(text="hi")
    assert len(upstream.requests) == 2
    assert len({r.peer for r in upstream.requests}) == 1, "each call opened its own connection"


# -- errors -----------------------------------------------------------------------------


async def test_error_body_message_and_code_are_kept(serve: Serve) -> None:
    body = {
        "error": {
            "message": "max_tokens is too large",
            "type": "invalid_request_error",
            "code": "invalid_value",
            "param": "max_tokens",
        }
    }
    upstream = await serve(json_reply(body, status=400))
    with pytest.raises(ModelError) as info:
        await collect(upstream.client())
    assert (info.value.status, info.value.message, info.value.code, info.value.param) == (
        400,
        "max_tokens is too large",
        "invalid_value",
        "max_tokens",
    )
    assert len(upstream.requests) == 1  # a 400 is never retried


async def test_plain_text_error_body_is_kept(serve: Serve) -> None:
    upstream = await serve(bare_reply(404, "no such route"))
    with pytest.raises(ModelError) as info:
        await collect(upstream.client())
    assert (info.value.status, info.value.message) == (404, "no such route")


async def test_empty_error_body_names_the_status(serve: Serve) -> None:
    upstream = await serve(bare_reply(403))
    with pytest.raises(ModelError) as info:
        await collect(upstream.client())
    assert (info.value.status, info.value.message) == (403, "upstream replied HTTP 403 Forbidden")


async def test_a_redirect_is_an_error_not_followed(serve: Serve) -> None:
    upstream = await serve(bare_reply(307, headers={"Location": "/v2/chat/completions"}))
    with pytest.raises(ModelError) as info:
        await collect(upstream.client())
    assert info.value.status == 307
    assert [r.path for r in upstream.requests] == ["/v1/chat/completions"]


async def test_error_object_inside_the_stream(serve: Serve) -> None:
    error = {"error": {"message": "engine died", "code": "server_error"}}
    body = sse([chunk({"content": "par"}), error])
    gen = (await serve(sse_reply(body))).client().stream(REQUEST)
    assert await anext(gen) == TextChunk(text="par")
    with pytest.raises(ModelError) as info:
        await anext(gen)
    assert (info.value.status, info.value.message) == (502, "engine died")
    assert info.value.code == "server_error"


async def test_error_event_with_a_flat_object(serve: Serve) -> None:
    body = b'event: error\ndata: {"message": "overloaded", "code": 503}\n\n'
    with pytest.raises(ModelError) as info:
        await collect((await serve(sse_reply(body))).client())
    assert (info.value.status, info.value.message, info.value.code) == (503, "overloaded", "503")


@pytest.mark.parametrize("data", ["{not json", "[1, 2]", '"text"'])
async def test_malformed_chunk_is_a_502(serve: Serve, data: str) -> None:
    upstream = await serve(sse_reply(sse([chunk({"content": "a"}), data])))
    with pytest.raises(ModelError, match="malformed upstream chunk") as info:
        await collect(upstream.client())
    assert info.value.status == 502
    assert len(upstream.requests) == 1


async def test_stream_cut_short_is_an_error(serve: Serve) -> None:
    upstream = await serve(sse_reply(sse([chunk({"content": "half"})], done=False)))
    with pytest.raises(ModelError, match="ended before") as info:
        await collect(upstream.client())
    assert info.value.status == 502


async def test_a_reply_kept_open_after_done_still_ends_the_turn(serve: Serve, monkeypatch) -> None:
    # The client reads on after [DONE] (so the connection can be reused), but only so long.
    monkeypatch.setattr(openai_client, "_DRAIN_S", 0.05)
    script = Script(sse([chunk({"content": "hi"}, finish="stop")]), then="hold")
    chunks = await collect((await serve(script)).client())
    assert isinstance(chunks[-1], TurnEnd) and chunks[-1].finish_reason == "stop"
    await asyncio.wait_for(script.gone.wait(), timeout=5)  # and then it drops the connection


async def test_connection_refused_maps_to_502_after_retries() -> None:
    client = OpenAIChatClient(refused_url(), max_retries=2, backoff_base_s=0.0)
    delays = recorded_sleeps(client)
    try:
        with pytest.raises(ModelError) as info:
            await collect(client)
    finally:
        await client.aclose()
    assert (info.value.status, info.value.code) == (502, "connection_error")
    assert len(delays) == 2  # three attempts


async def test_a_request_dropped_unanswered_is_retried_then_502(serve: Serve) -> None:
    upstream = await serve(hang_up)
    with pytest.raises(ModelError) as info:
        await collect(upstream.client(max_retries=2))
    assert (info.value.status, info.value.code) == (502, "connection_error")
    assert len(upstream.requests) == 3


async def test_an_exhausted_pool_maps_to_504_and_is_retried(serve: Serve, monkeypatch) -> None:
    monkeypatch.setattr(openai_client, "DEFAULT_LIMITS", {"limit": 1, "limit_per_host": 0})
    script = Script(sse([chunk({"content": "a"})], done=False), then="hold")
    upstream = await serve(script)
    client = upstream.client(max_retries=1, timeout=aiohttp.ClientTimeout(connect=0.2))
    delays = recorded_sleeps(client)
    holder = client.stream(REQUEST)
    assert await anext(holder) == TextChunk(text="a")  # holds the only connection
    with pytest.raises(ModelError) as info:
        await collect(client)
    await holder.aclose()
    assert (info.value.status, info.value.code) == (504, "timeout")
    assert len(delays) == 1
    assert len(upstream.requests) == 1


async def test_read_timeout_before_headers_maps_to_504_without_retry(serve: Serve) -> None:
    upstream = await serve(no_reply)
    client = upstream.client(timeout=aiohttp.ClientTimeout(connect=5, sock_read=0.2))
    with pytest.raises(ModelError) as info:
        await collect(client)
    assert (info.value.status, info.value.code) == (504, "timeout")
    assert len(upstream.requests) == 1


async def test_a_total_timeout_is_a_504_too(serve: Serve) -> None:
    # DEFAULT_TIMEOUT sets none, but a caller's ClientTimeout may.
    upstream = await serve(no_reply)
    client = upstream.client(timeout=aiohttp.ClientTimeout(total=0.2))
    with pytest.raises(ModelError) as info:
        await collect(client)
    assert (info.value.status, info.value.code) == (504, "timeout")
    assert len(upstream.requests) == 1


# -- retries ----------------------------------------------------------------------------


async def test_503_is_retried_then_succeeds(serve: Serve) -> None:
    ok = sse_reply(sse([chunk({"content": "fine"}, finish="stop")]))
    upstream = await serve(json_reply({"error": {"message": "busy"}}, status=503), ok)
    chunks = await collect(upstream.client())
    assert chunks[-1] == TurnEnd(text="fine")
    assert len(upstream.requests) == 2
    # The error reply was read to its end: the retry came on the same connection.
    assert len({r.peer for r in upstream.requests}) == 1


async def test_5xx_gives_up_after_max_retries_with_the_last_error(serve: Serve) -> None:
    upstream = await serve(json_reply({"error": {"message": "boom"}}, status=500))
    with pytest.raises(ModelError) as info:
        await collect(upstream.client(max_retries=1))
    assert (info.value.status, info.value.message) == (500, "boom")
    assert len(upstream.requests) == 2


async def test_429_with_retry_after_zero_is_retried(serve: Serve) -> None:
    ok = sse_reply(sse([chunk({"content": "ok"}, finish="stop")]))
    limited = json_reply({"error": {"message": "slow down"}}, status=429, headers={"retry-after": "0"})
    upstream = await serve(limited, ok)
    client = upstream.client(backoff_base_s=60.0)  # Retry-After wins over the backoff
    chunks = await asyncio.wait_for(collect(client), timeout=5)
    assert chunks[-1] == TurnEnd(text="ok")
    assert len(upstream.requests) == 2


async def test_retry_after_is_honoured_and_capped(serve: Serve) -> None:
    ok = sse_reply(sse([chunk({"content": "ok"}, finish="stop")]))
    upstream = await serve(
        bare_reply(429, headers={"retry-after": "2"}),
        bare_reply(429, headers={"retry-after-ms": "1500"}),
        bare_reply(429, headers={"retry-after": "9999"}),
        ok,
    )
    client = upstream.client(max_retries=3)
    delays = recorded_sleeps(client)
    await collect(client)
    assert delays == [2.0, 1.5, openai_client._MAX_RETRY_AFTER_S]


async def test_backoff_grows_exponentially(serve: Serve) -> None:
    upstream = await serve(bare_reply(502))
    client = upstream.client(max_retries=3, backoff_base_s=1.0)
    delays = recorded_sleeps(client)
    with pytest.raises(ModelError):
        await collect(client)
    assert len(delays) == 3
    for attempt, delay in enumerate(delays):
        assert 0.75 * 2**attempt <= delay <= 2**attempt


async def test_x_should_retry_false_vetoes_a_retry(serve: Serve) -> None:
    upstream = await serve(bare_reply(500, headers={"x-should-retry": "false"}))
    with pytest.raises(ModelError):
        await collect(upstream.client())
    assert len(upstream.requests) == 1


async def test_failure_after_the_first_chunk_is_not_retried(serve: Serve) -> None:
    upstream = await serve(Script(sse([chunk({"content": "partial"})], done=False), then="drop"))
    seen: list[ModelChunk] = []
    with pytest.raises(ModelError) as info:
        async for c in upstream.client(max_retries=5).stream(REQUEST):
            seen.append(c)
    assert seen == [TextChunk(text="partial")]
    assert (info.value.status, info.value.code) == (502, "connection_error")
    assert len(upstream.requests) == 1


async def test_read_timeout_while_streaming_maps_to_504(serve: Serve) -> None:
    script = Script(sse([chunk({"content": "partial"})], done=False), then="hold")
    upstream = await serve(script)
    client = upstream.client(timeout=aiohttp.ClientTimeout(connect=5, sock_read=0.2))
    with pytest.raises(ModelError) as info:
        await collect(client)
    assert (info.value.status, info.value.code) == (504, "timeout")
    assert len(upstream.requests) == 1


# -- cancellation and lifecycle ---------------------------------------------------------


async def test_closing_the_iterator_closes_the_response(serve: Serve) -> None:
    script = Script(sse([chunk({"content": "a"})], done=False), then="hold")
    gen = (await serve(script)).client().stream(REQUEST)
    assert await anext(gen) == TextChunk(text="a")
    assert not script.gone.is_set()
    await gen.aclose()
    await asyncio.wait_for(script.gone.wait(), timeout=5)


async def test_cancelling_the_consumer_closes_the_response(serve: Serve) -> None:
    script = Script(sse([chunk({"content": "a"})], done=False), then="hold")
    client = (await serve(script)).client()
    first = asyncio.Event()

    async def consume() -> None:
        async for _ in client.stream(REQUEST):
            first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(script.gone.wait(), timeout=5)


async def test_own_pool_is_created_once_and_closed() -> None:
    client = OpenAIChatClient(refused_url())
    pool = client._http()
    assert client._http() is pool
    async with client:
        pass
    assert pool.closed
    with pytest.raises(RuntimeError):
        await collect(client)
    await client.aclose()  # idempotent


def test_the_client_is_built_outside_an_event_loop() -> None:
    # troupe/runtime/models.py builds clients before a loop runs; the pool comes on first use.
    client = OpenAIChatClient(refused_url())

    async def use() -> None:
        async with client:
            await client.warm()

    asyncio.run(use())


def test_exported_members() -> None:
    assert set(openai_client.__all__) == {"OpenAIChatClient", "DEFAULT_TIMEOUT", "DEFAULT_LIMITS"}


async def test_the_environments_proxy_is_used(serve: Serve, monkeypatch) -> None:
    # The upstream plays the proxy: it is sent the request for the model server's URL.
    proxy = await serve(sse_reply(sse([chunk({"content": "via proxy"}, finish="stop")])))
    monkeypatch.setenv("HTTP_PROXY", proxy.base_url.removesuffix("/v1"))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("http_proxy", raising=False)
    chunks = await collect(proxy.client("http://model.invalid/v1"))
    assert chunks[-1] == TurnEnd(text="via proxy")
    (request,) = proxy.requests
    assert (request.headers["host"], request.path) == ("model.invalid", "/v1/chat/completions")


async def test_no_proxy_exempts_a_host(serve: Serve, monkeypatch) -> None:
    upstream = await serve(sse_reply(sse([chunk({"content": "direct"}, finish="stop")])))
    monkeypatch.setenv("HTTP_PROXY", refused_url().removesuffix("/v1"))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert (await collect(upstream.client()))[-1] == TurnEnd(text="direct")


async def test_warm_opens_a_connection_with_get_models(serve: Serve) -> None:
    upstream = await serve(
        json_reply({"error": {"message": "bad key"}}, status=401),
        sse_reply(sse([chunk({"content": "ok"}, finish="stop")])),
    )
    client = upstream.client(api_key="sk-test")
    await client.warm()  # a refusal is the first call's business, not the warm-up's
    assert [(r.method, r.path) for r in upstream.requests] == [("GET", "/v1/models")]
    assert upstream.requests[0].headers["authorization"] == "Bearer sk-test"
    await collect(client)
    assert len({r.peer for r in upstream.requests}) == 1, "the first call did not use the warm connection"


async def test_warm_never_raises_when_the_server_is_down() -> None:
    async with OpenAIChatClient(refused_url()) as client:
        await client.warm()


async def test_warm_never_raises_when_the_server_does_not_answer(serve: Serve) -> None:
    upstream = await serve(no_reply)
    await upstream.client().warm(timeout_s=0.2)
    assert len(upstream.requests) == 1


async def test_warming_the_models_skips_one_configured_wrongly() -> None:
    from troupe.runtime.models import ModelRegistry
    from troupe.runtime.settings import ModelSpec

    # The settings refuse an "openai" model without base_url; one built past them fails alone.
    broken = ModelSpec.model_construct(name="broken", kind="openai", base_url=None)
    registry = ModelRegistry([broken, ModelSpec(name="sim", kind="sim")])
    await registry.warm()  # no base_url: that model's requests fail, start-up does not
    with pytest.raises(ValueError, match="base_url"):
        registry.client(broken)
    await registry.close()


async def test_stopping_at_the_turn_end_keeps_the_connection(serve: Serve) -> None:
    # A consumer may stop at the TurnEnd without asking for more: the reply is read by then.
    upstream = await serve(sse_reply(sse([chunk({"content": "hi"}, finish="stop")])))
    client = upstream.client()
    for _ in range(2):
        async with aclosing(client.stream(REQUEST)) as chunks:
            async for c in chunks:
                if isinstance(c, TurnEnd):
                    break
    assert len(upstream.requests) == 2
    assert len({r.peer for r in upstream.requests}) == 1


def test_tls_trusts_certifi_unless_ssl_cert_file_names_another(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    import certifi

    from troupe.agentloop import openai_client

    build = openai_client._tls_context.__wrapped__  # the cached function, built afresh
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    assert build().cert_store_stats()["x509_ca"] > 100  # certifi's bundle, whatever the system has
    one = tmp_path / "one.pem"
    bundle = open(certifi.where(), encoding="ascii").read()
    one.write_text(bundle[: bundle.index("-----END CERTIFICATE-----") + 26], encoding="ascii")
    monkeypatch.setenv("SSL_CERT_FILE", str(one))
    assert build().cert_store_stats()["x509_ca"] == 1
