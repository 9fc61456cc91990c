"""The SSE answer (``troupe.serve.sse.EventStreamResponse``) at the ASGI level: its keepalive and
its stall guard, one timer per stream, against a client that is slow, silent or gone.

The "server" is a plain ASGI ``send``/``receive`` pair that records what it is given and can
be made to block, as a socket whose buffer is full blocks a real server's write.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from troupe.protocol import SSE_DONE, SSE_KEEPALIVE, encode_sse
from troupe.serve.sse import EventStreamResponse

SCOPE = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "method": "POST", "path": "/v1/responses"}


class Client:
    """What the server was asked to write, and a switch that makes its writes block."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.open = asyncio.Event()
        self.open.set()
        self.gone = asyncio.Event()
        self.writing = 0
        self.overlapped = False  # a write began while another was under way (ASGI forbids it)

    async def send(self, message: dict[str, Any]) -> None:
        self.overlapped |= self.writing > 0
        self.writing += 1
        try:
            await self.open.wait()  # a full socket buffer: the write waits
            if message["type"] == "http.response.body":
                self.bodies.append(message.get("body", b""))
        finally:
            self.writing -= 1

    async def receive(self) -> dict[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}


class Turn:
    """A runtime's event batches, released one at a time; notes whether it was closed."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.gates = [asyncio.Event() for _ in range(count)]
        self.closed = asyncio.Event()

    @staticmethod
    def event(i: int) -> dict[str, Any]:
        return {"type": "response.output_text.delta", "sequence_number": i, "delta": f"t{i}"}

    async def batches(self) -> AsyncGenerator[list[dict[str, Any]], None]:
        try:
            for i, gate in enumerate(self.gates):
                await gate.wait()
                yield [self.event(i)]
        finally:
            self.closed.set()


async def until(condition, *, timeout_s: float = 10.0) -> None:
    """Wait until ``condition()`` holds (checked on each turn of the loop), at most ``timeout_s``."""
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.005)


def frames_of(bodies: list[bytes]) -> list[bytes]:
    return [b for b in bodies if b and b != SSE_KEEPALIVE]


async def streaming(events: int, **options: Any) -> tuple[Client, Turn, asyncio.Future[None]]:
    """An EventStreamResponse over a turn of ``events`` batches, being served, its first batch written."""
    client, turn = Client(), Turn(events)
    response = EventStreamResponse(turn.batches(), **options)
    serving = asyncio.ensure_future(response(SCOPE, client.receive, client.send))
    turn.gates[0].set()
    await until(lambda: encode_sse(turn.event(0)) in client.bodies)
    return client, turn, serving


async def test_a_silent_stream_sends_keepalives_between_whole_frames_and_done_last():
    client, turn, serving = await streaming(2, stall_timeout_s=30.0, keepalive_s=0.05)
    await until(lambda: client.bodies.count(SSE_KEEPALIVE) >= 3)  # the turn is silent meanwhile
    turn.gates[1].set()
    await asyncio.wait_for(serving, 10)
    assert frames_of(client.bodies) == [encode_sse(turn.event(0)), encode_sse(turn.event(1)), SSE_DONE]
    assert client.bodies.index(SSE_KEEPALIVE) > client.bodies.index(encode_sse(turn.event(0)))
    assert not client.overlapped


async def test_a_stream_that_keeps_writing_sends_no_keepalive():
    client, turn, serving = await streaming(30, stall_timeout_s=30.0, keepalive_s=0.2)
    for gate in turn.gates[1:]:  # an event every 20 ms, 0.6 s in all: never 0.2 s of silence
        await asyncio.sleep(0.02)
        gate.set()
    await asyncio.wait_for(serving, 10)
    assert len(frames_of(client.bodies)) == 31 and SSE_KEEPALIVE not in client.bodies


async def test_a_frame_made_while_a_keepalive_is_being_written_goes_out_after_it():
    client, turn, serving = await streaming(2, stall_timeout_s=30.0, keepalive_s=0.05)
    await until(lambda: SSE_KEEPALIVE in client.bodies)
    client.open.clear()  # the next keepalive's write blocks half-way
    await asyncio.sleep(0.2)  # long enough for a keepalive to be due, and started
    turn.gates[1].set()  # the frame comes while it waits
    await asyncio.sleep(0.05)
    client.open.set()
    await asyncio.wait_for(serving, 10)
    assert frames_of(client.bodies) == [encode_sse(turn.event(0)), encode_sse(turn.event(1)), SSE_DONE]
    last_keepalive = len(client.bodies) - 1 - client.bodies[::-1].index(SSE_KEEPALIVE)
    assert last_keepalive < client.bodies.index(encode_sse(turn.event(1)))
    assert not client.overlapped


async def test_a_client_that_stops_reading_is_dropped_after_the_stall_timeout_and_its_turn_closed():
    closed: list[int] = []
    client, turn, serving = await streaming(3, stall_timeout_s=0.3, keepalive_s=None, on_close=lambda: closed.append(1))
    client.open.clear()  # the client reads no more: the next write never ends
    turn.gates[1].set()
    await asyncio.wait_for(serving, 10)  # the stall guard ended it (not the turn, which waits for gate 2)
    assert turn.closed.is_set() and closed == [1]
    assert frames_of(client.bodies) == [encode_sse(turn.event(0))]


async def test_a_stalled_keepalive_write_drops_the_client_too():
    client, turn, serving = await streaming(2, stall_timeout_s=0.3, keepalive_s=0.05)
    client.open.clear()  # silent turn, and the keepalive's write never ends
    await asyncio.wait_for(serving, 10)
    assert turn.closed.is_set()


async def test_a_client_that_leaves_closes_the_turn():
    client, turn, serving = await streaming(2, stall_timeout_s=30.0, keepalive_s=15.0)
    client.gone.set()
    await asyncio.wait_for(serving, 10)
    assert turn.closed.is_set() and SSE_DONE not in client.bodies
