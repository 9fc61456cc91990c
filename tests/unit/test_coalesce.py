"""Adaptive batching of a turn's events (``troupe.runtime.batching.coalesce``) and what hosts yield."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from troupe.protocol import parse_create_request
from troupe.protocol.job import TurnJob
from troupe.runtime import RuntimeSettings
from troupe.runtime.batching import coalesce
from troupe.runtime.host import ConversationHost
from troupe.runtime.store_client import AsyncStore


async def gated(gates: list[asyncio.Event], batches: list[list[int]]):
    """Yields ``batches[i]`` once ``gates[i]`` is set."""
    for gate, batch in zip(gates, batches, strict=True):
        await gate.wait()
        yield batch


async def test_a_consumer_that_keeps_up_gets_each_batch_as_it_is_made():
    gates = [asyncio.Event() for _ in range(3)]
    out = coalesce(gated(gates, [[1], [2, 3], [4]]))
    got = []
    for gate in gates:
        gate.set()
        got.append(await anext(out))
    assert got == [[1], [2, 3], [4]]
    with pytest.raises(StopAsyncIteration):
        await anext(out)


async def test_a_consumer_that_falls_behind_gets_what_piled_up_in_one_batch():
    gates = [asyncio.Event() for _ in range(4)]
    out = coalesce(gated(gates, [[1], [2], [3], [4]]))
    gates[0].set()
    assert await anext(out) == [1]
    # The consumer is busy while three more batches are made.
    for gate in gates[1:]:
        gate.set()
        await asyncio.sleep(0)  # let the source run (no time passes)
    assert await anext(out) == [2, 3, 4]


async def test_an_error_comes_after_the_batches_made_before_it():
    async def source():
        yield ["a"]
        raise ValueError("boom")

    out = coalesce(source())
    assert await anext(out) == ["a"]
    with pytest.raises(ValueError, match="boom"):
        await anext(out)


async def test_an_error_before_any_batch_is_raised_on_the_first_pull():
    async def source():
        raise LookupError("no such thread")
        yield []  # pragma: no cover

    with pytest.raises(LookupError, match="no such thread"):
        await anext(coalesce(source()))


async def test_closing_the_consumer_cancels_and_closes_the_source():
    closed = asyncio.Event()
    started = asyncio.Event()

    async def source():
        try:
            yield [1]
            started.set()
            await asyncio.Event().wait()  # a turn that never ends on its own
            yield [2]  # pragma: no cover
        finally:
            closed.set()

    out = coalesce(source())
    assert await anext(out) == [1]
    pending = asyncio.ensure_future(anext(out))
    await started.wait()
    pending.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await pending
    assert closed.is_set(), "the source's clean-up ran before the consumer's cancellation returned"


# -- what a host yields ------------------------------------------------------------------


@pytest.fixture
async def host():
    store = AsyncStore.open(":memory:")
    yield ConversationHost(RuntimeSettings(storage_path=":memory:"), store=store)
    await store.close()


def job(body):
    return TurnJob(
        tenant="", request=parse_create_request({"model": "sim", **body}), response_id="resp_1",
        created_at=1, thread_id="thread_1",
    )


async def test_without_stream_a_host_yields_only_the_start_and_the_end(host):
    batches = [b async for b in host.respond(job({"input": "[[tokens 30]]"}), stream=False)]
    assert len(batches) == 2
    assert batches[0][0]["type"] == "response.created"
    assert batches[-1][-1]["type"] == "response.completed"
    assert batches[-1][-1]["response"]["usage"]["output_tokens"] == 30


async def test_with_stream_every_event_arrives_once_in_order(host):
    events = [e async for b in host.respond(job({"input": "[[tokens 30]]"})) for e in b]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert sum(e["type"] == "response.output_text.delta" for e in events) == 30


async def test_a_source_waits_for_a_consumer_that_stops_taking():
    made = []

    async def endless():
        for i in range(10_000):
            made.append(i)
            yield [i]

    out = coalesce(endless(), max_pending=8)
    first = await anext(out)
    assert 1 <= len(first) <= 8
    for _ in range(100):  # the consumer takes nothing more; the source runs as far as it may
        await asyncio.sleep(0)
    # Bounded by what was taken plus what may wait, not by the response's length.
    assert len(made) <= len(first) + 8
    second = await anext(out)
    assert first + second == list(range(len(first) + len(second)))
    for _ in range(100):
        await asyncio.sleep(0)
    assert len(made) > len(first) + len(second), "taking events lets the source go on"
    await out.aclose()
