"""Models without tool calling, through the ``openai`` SDK against the HTTP app: the sim over
loopback HTTP speaking the ``react`` and the ``json`` protocol (it answers in text when asked
in text), every body it was sent recorded, with registered tools and a real MCP server. The
client sees the items and events a native tool-calling model gives; upstream, no ``tools``."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from openai import OpenAI

from tests.mcp_servers import McpTestServer, serve_mcp
from tests.servers import RecordingUpstream, recorded_sim, served_local
from troupe.runtime.settings import McpSettings, ModelSpec
from troupe.serve.config import ServerSettings

PROTOCOLS = ["react", "json"]


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[str, RecordingUpstream]]:
    with recorded_sim() as recorded:
        yield recorded


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpTestServer]:
    with serve_mcp() as server:
        yield server


@pytest.fixture(scope="module")
def client(upstream: tuple[str, RecordingUpstream]) -> Iterator[OpenAI]:
    models = tuple(ModelSpec(name=p, base_url=upstream[0], upstream_model="sim", tool_protocol=p) for p in PROTOCOLS)
    mcp = McpSettings(allowed_urls=("http://127.0.0.1:*",))
    for root in served_local(ServerSettings(), models=models, mcp=mcp):
        yield OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)


def _turn_text(protocol: str, body: dict) -> str:
    """The assistant's earlier turn as the model was sent it."""
    return next(m["content"] for m in body["messages"] if m["role"] == "assistant")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_readmes_tool_loop_runs_on_a_model_without_tool_calling(client, upstream, protocol) -> None:
    _, recording = upstream
    since = len(recording.bodies)
    response = client.responses.create(model=protocol, input='[[call calculator {"expression": "6 * 7"}]]')
    assert [o.type for o in response.output] == [
        "reasoning", "function_call", "function_call_output", "reasoning", "message",
    ]  # fmt: skip
    call = response.output[1]
    assert (call.name, json.loads(call.arguments)) == ("calculator", {"expression": "6 * 7"})
    assert response.output[2].output == "42" and response.output_text == "calculator -> 42"

    first, second = recording.bodies[since:]
    assert "tools" not in first and "tool_choice" not in first and "tools" not in second
    prompt = first["messages"][0]
    assert prompt["role"] == "system" and "- calculator: " in prompt["content"]
    assert prompt["content"].endswith(f"(Troupe tool protocol: {protocol})")
    assert (first.get("response_format") == {"type": "json_object"}) == (protocol == "json")
    turn = _turn_text(protocol, second)
    if protocol == "react":
        assert 'Action: calculator\nAction Input: {"expression": "6 * 7"}' in turn
    else:
        assert json.loads(turn)["action"] == {"name": "calculator", "arguments": {"expression": "6 * 7"}}
    assert second["messages"][-1] == {"role": "user", "content": "Observation (calculator): 42"}
    assert all(m["role"] != "tool" for m in second["messages"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_mcp_servers_tools_are_offered_and_called_in_text(client, upstream, mcp_server, protocol) -> None:
    _, recording = upstream
    since = len(recording.bodies)
    tool = {"type": "mcp", "server_label": "calc", "server_url": mcp_server.url, "require_approval": "never"}
    response = client.responses.create(model=protocol, input='[[call add {"a": 2, "b": 40}]]', tools=[tool])
    kinds = [o.type for o in response.output]
    assert kinds == ["mcp_list_tools", "reasoning", "mcp_call", "reasoning", "message"]
    assert response.output[2].output == "42" and response.output_text == "add -> 42"
    first = recording.bodies[since]
    assert "- add: " in first["messages"][0]["content"] and "tools" not in first


def test_a_streamed_react_answer_sends_its_thought_as_reasoning_and_never_its_action_as_text(client) -> None:
    with client.responses.stream(
        model="react", input='[[think add them]] [[call calculator {"expression": "1+1"}]]'
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    thought = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert text == final.output_text == "calculator -> 2"
    assert "add them" in thought and "Action" not in text
    assert [e.sequence_number for e in events] == list(range(len(events)))
    arguments = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [json.loads(e.arguments) for e in arguments] == [{"expression": "1+1"}]
