"""Whether a model call streams from upstream follows whether anyone watches its tokens: the
in-process runtime against ``troupe sim`` over loopback HTTP, each body the upstream received
recorded (:class:`~tests.servers.RecordingUpstream`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.servers import RecordingUpstream, recorded_sim
from troupe.protocol import parse_create_request
from troupe.runtime import Runtime, RuntimeSettings
from troupe.runtime.settings import ModelSpec

pytestmark = pytest.mark.asyncio

ADD = {
    "type": "function", "name": "add", "description": "Add two numbers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
}  # fmt: skip


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[str, RecordingUpstream]]:
    with recorded_sim() as recorded:
        yield recorded


@contextlib.asynccontextmanager
async def _runtime(tmp_path: Any, url: str, **spec: Any) -> AsyncIterator[Runtime]:
    """An in-process runtime whose model ``m`` is the recorded sim at ``url``; closed after."""
    models = (ModelSpec(name="m", base_url=url, upstream_model="sim", **spec),)
    runtime = Runtime.local(RuntimeSettings(storage_path=str(tmp_path / "t.duckdb"), models=models))
    try:
        yield runtime
    finally:
        await runtime.close()


def _streamed(upstream: RecordingUpstream, since: int) -> list[bool]:
    """Whether each chat call since the ``since``-th body asked upstream to stream."""
    return [body["stream"] for body in upstream.bodies[since:]]


async def test_a_non_streamed_request_asks_upstream_for_one_completion_and_answers_the_same(tmp_path, upstream) -> None:
    url, recording = upstream
    async with _runtime(tmp_path, url) as runtime:
        since = len(recording.bodies)
        plain = await runtime.respond("", parse_create_request({"model": "m", "input": "[[say one two three]]"}))
        assert _streamed(recording, since) == [False]
        assert "stream_options" not in recording.bodies[-1]
        assert plain["output"][0]["content"][0]["text"] == "one two three"
        assert plain["usage"]["output_tokens"] == 3 and plain["status"] == "completed"

        # A tool round: the model's call and its arguments come whole, then the answer.
        since = len(recording.bodies)
        body = {"model": "m", "input": '[[call add {"a": 2, "b": 40}]]', "tools": [ADD]}
        called = await runtime.respond("", parse_create_request(body))
        assert _streamed(recording, since) == [False]
        [call] = called["output"]
        assert (call["type"], call["name"], call["arguments"]) == ("function_call", "add", '{"a": 2, "b": 40}')

        # Its stored events replay whole: the answer as one delta.
        events = [e async for batch in await runtime.follow_response("", plain["id"]) for e in batch]
        assert [e["delta"] for e in events if e["type"] == "response.output_text.delta"] == ["one two three"]
        assert events[-1]["response"] == plain


async def test_a_streamed_or_background_request_streams_from_upstream(tmp_path, upstream) -> None:
    url, recording = upstream
    async with _runtime(tmp_path, url) as runtime:
        since = len(recording.bodies)
        stream = await runtime.stream("", parse_create_request({"model": "m", "input": "[[say one two three]]"}))
        events = [e async for batch in stream for e in batch]
        assert _streamed(recording, since) == [True]
        assert [e["delta"] for e in events if e["type"] == "response.output_text.delta"] == ["one", " two", " three"]

        # A background run may be followed while it runs: its tokens stream too.
        since = len(recording.bodies)
        started = await runtime.background("", parse_create_request({"model": "m", "input": "[[say later]]", "background": True}))
        async for _ in await runtime.follow_response("", started["id"]):
            pass
        assert _streamed(recording, since) == [True]


async def test_a_model_set_to_always_stream_streams_a_non_streamed_request(tmp_path, upstream) -> None:
    url, recording = upstream
    async with _runtime(tmp_path, url, streaming="always") as runtime:
        since = len(recording.bodies)
        out = await asyncio.wait_for(runtime.respond("", parse_create_request({"model": "m", "input": "[[say hi]]"})), 30)
        assert _streamed(recording, since) == [True]
        assert out["output"][0]["content"][0]["text"] == "hi"
