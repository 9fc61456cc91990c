"""OpenAIChatClient against the real ``troupe sim`` HTTP server on a loopback port.

The server runs in a background thread (uvicorn on a socket bound to port 0, so no fixed
port); the tests wait for ``/health`` rather than for wall-clock time.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx
import pytest

from tests.servers import serve_app
from troupe.agentloop.model import (
    ChatRequest,
    ModelChunk,
    ModelError,
    TextChunk,
    ToolCallArgumentsDelta,
    ToolCallStart,
    TurnEnd,
)
from troupe.agentloop.openai_client import OpenAIChatClient
from troupe.sim.model import SimSettings
from troupe.sim.server import create_sim_app


class CountingSim:
    """The sim app, counting the Chat Completions requests it is sent."""

    def __init__(self) -> None:
        self.app = create_sim_app(SimSettings())
        self.sent = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].endswith("/chat/completions"):
            self.sent += 1
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def sim_server() -> Iterator[tuple[str, CountingSim]]:
    counting = CountingSim()
    with serve_app(counting) as url:
        yield f"{url}/v1", counting


@dataclass
class SimClient:
    """An OpenAIChatClient on the sim, and the count of requests the sim was sent."""

    base_url: str
    server: CountingSim
    client: OpenAIChatClient

    @property
    def sent(self) -> int:
        return self.server.sent

    async def run(self, text: str) -> list[ModelChunk]:
        request = ChatRequest(model="sim", messages=[{"role": "user", "content": text}])
        return [chunk async for chunk in self.client.stream(request)]


@pytest.fixture
async def sim(sim_server: tuple[str, CountingSim]) -> AsyncIterator[SimClient]:
    base_url, server = sim_server
    server.sent = 0
    async with OpenAIChatClient(base_url, backoff_base_s=0.01) as client:
        yield SimClient(base_url, server, client)


def _nonce() -> str:
    # ``[[fail S once]]`` is remembered per message text for the server's lifetime.
    return uuid.uuid4().hex[:8]


async def test_streams_text_in_several_deltas(sim: SimClient) -> None:
    chunks = await sim.run("[[say hello big world]]")
    deltas = [c for c in chunks if isinstance(c, TextChunk)]
    end = chunks[-1]
    assert isinstance(end, TurnEnd)
    assert end.text == "hello big world" == "".join(d.text for d in deltas)
    assert len(deltas) > 1
    assert end.finish_reason == "stop"
    assert sum(isinstance(c, TurnEnd) for c in chunks) == 1


async def test_tool_call_arguments_arrive_split(sim: SimClient) -> None:
    chunks = await sim.run('[[call add {"a": 2, "b": 40}]]')
    starts = [c for c in chunks if isinstance(c, ToolCallStart)]
    arg_deltas = [c for c in chunks if isinstance(c, ToolCallArgumentsDelta)]
    end = chunks[-1]
    assert isinstance(end, TurnEnd) and end.finish_reason == "tool_calls"
    (call,) = end.tool_calls
    assert call.name == "add" and json.loads(call.arguments) == {"a": 2, "b": 40}
    assert [(s.index, s.call_id, s.name) for s in starts] == [(0, call.call_id, "add")]
    assert len(arg_deltas) > 1
    assert "".join(d.delta for d in arg_deltas) == call.arguments
    # Every argument delta comes after its start.
    assert chunks.index(starts[0]) < chunks.index(arg_deltas[0])


async def test_usage_is_reported(sim: SimClient) -> None:
    end = (await sim.run("[[tokens 12]]"))[-1]
    assert isinstance(end, TurnEnd)
    assert end.usage.input_tokens > 0
    assert end.usage.output_tokens > 0


async def test_503_once_is_retried_then_succeeds(sim: SimClient) -> None:
    chunks = await sim.run(f"[[fail 503 once]] [[say recovered]] {_nonce()}")
    end = chunks[-1]
    assert isinstance(end, TurnEnd) and end.text == "recovered"
    assert sim.sent == 2


async def test_400_is_not_retried_and_keeps_the_message(sim: SimClient) -> None:
    text = f"[[fail 400]] {_nonce()}"
    with pytest.raises(ModelError) as info:
        await sim.run(text)
    assert info.value.status == 400
    assert sim.sent == 1
    # The message is the server's own, as its error body states it.
    payload = ChatRequest(model="sim", messages=[{"role": "user", "content": text}]).to_payload()
    async with httpx.AsyncClient() as http:
        raw = await http.post(f"{sim.base_url}/chat/completions", json=payload)
    assert raw.status_code == 400
    assert info.value.message == raw.json()["error"]["message"]


async def test_read_timeout_between_bytes_is_504_and_not_retried(sim: SimClient) -> None:
    timeout = aiohttp.ClientTimeout(connect=5.0, sock_connect=5.0, sock_read=0.2)
    async with OpenAIChatClient(sim.base_url, timeout=timeout) as client:
        request = ChatRequest(
            model="sim", messages=[{"role": "user", "content": "[[latency ttft=2000]] [[say late]]"}]
        )
        with pytest.raises(ModelError) as info:
            async for _ in client.stream(request):
                pass
    assert info.value.status == 504
    assert sim.sent == 1


async def test_consecutive_turns_reuse_one_connection():
    """A turn reads the reply to its end after [DONE], so the connection goes back to the pool
    (otherwise every model call pays a new TCP, and with a real server a TLS, handshake)."""
    peers: list[tuple[str, int]] = []
    sim_app = create_sim_app(SimSettings())

    async def recording(scope, receive, send):
        if scope["type"] == "http" and scope["path"].endswith("/chat/completions"):
            peers.append(tuple(scope["client"]))
        await sim_app(scope, receive, send)

    with serve_app(recording) as url:
        client = OpenAIChatClient(f"{url}/v1")
        try:
            for text in ("[[tokens 5]]", "[[say again]]", "[[tokens 3]]"):
                request = ChatRequest(model="sim", messages=[{"role": "user", "content": text}])
                chunks = [chunk async for chunk in client.stream(request)]
                assert isinstance(chunks[-1], TurnEnd)
        finally:
            await client.aclose()
    assert len(peers) == 3
    assert len(set(peers)) == 1, f"each turn opened its own connection: {peers}"
