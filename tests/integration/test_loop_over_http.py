"""The whole loop with its real HTTP model client against ``troupe sim`` on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from tests.loop_harness import both, history_of
from tests.servers import serve_app
from troupe.agentloop.openai_client import OpenAIChatClient
from troupe.agentloop.sim import SimSettings
from troupe.agentloop.tools import LocalFunctionExecutor
from troupe.serve.sim_app import create_sim_app

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with serve_app(create_sim_app(SimSettings())) as url:
        yield f"{url}/v1"


@pytest.fixture
async def client(sim_url: str) -> AsyncIterator[OpenAIChatClient]:
    async with OpenAIChatClient(sim_url) as model:
        yield model


async def test_text_answer_over_http(client):
    out, _ = await both({"model": "sim", "input": "[[say streamed over a real socket]]"}, lambda: client)
    assert out.text == "streamed over a real socket"
    assert sum(e["type"] == "response.output_text.delta" for e in out.events) == 5
    assert out.response["usage"]["output_tokens"] == 5


async def test_tool_loop_over_http(client):
    tools = LocalFunctionExecutor({"add": lambda a, b: a + b})
    out, _ = await both({"model": "sim", "input": '[[call add {"a": 2, "b": 40}]]'}, lambda: client, executors=[tools])
    assert out.text == "add -> 42"
    arg_deltas = [e for e in out.events if e["type"] == "response.function_call_arguments.delta"]
    assert len(arg_deltas) > 1, "the sim splits arguments across chunks; the stream keeps them apart"


async def test_client_function_round_trip_over_http(client):
    first, _ = await both({"model": "sim", "input": "What is the weather in Paris?", "tools": [WEATHER]}, lambda: client)
    call = first.response["output"][0]
    assert call["type"] == "function_call" and call["name"] == "get_weather"
    follow = {
        "model": "sim",
        "tools": [WEATHER],
        "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "rain"}],
    }
    second, _ = await both(follow, lambda: client, history=history_of(first))
    assert second.text == "get_weather -> rain"


async def test_upstream_error_status_is_kept(client):
    out, _ = await both({"model": "sim", "input": "[[fail 400]]"}, lambda: client)
    assert out.response["status"] == "failed"
    assert "400" in out.response["error"]["message"]
