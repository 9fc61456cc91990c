"""The whole loop with its real HTTP model client against ``troupe sim`` on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.loop_harness import both, history_of
from tests.servers import RecordingUpstream, recorded_sim, serve_app
from troupe.agentloop.openai_client import OpenAIChatClient
from troupe.agentloop.tools import LocalFunctionExecutor
from troupe.sim.model import SimSettings
from troupe.sim.server import create_sim_app

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


@pytest.fixture(scope="module")
def recording() -> Iterator[tuple[str, RecordingUpstream]]:
    with recorded_sim() as recorded:
        yield recorded


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


async def test_an_upstream_client_error_keeps_its_code(client):
    image = {"type": "input_image", "image_url": "data:image/png;base64,@@@", "detail": "auto"}
    body = {"model": "sim", "input": [{"role": "user", "content": [{"type": "input_text", "text": "see"}, image]}]}
    out, _ = await both(body, lambda: client)
    assert out.response["status"] == "failed"
    # Response.error.code is a closed enum for strict clients: the upstream's own code, named
    # in the message, maps to its twin there.
    assert out.response["error"]["code"] == "invalid_base64_image"
    assert "code invalid_base64" in out.response["error"]["message"]
    assert [e["type"] for e in out.events][-2:] == ["error", "response.failed"]


async def test_an_upstream_server_error_is_a_server_error(client):
    out, _ = await both({"model": "sim", "input": "[[fail 503]]"}, lambda: client)
    assert out.response["error"]["code"] == "server_error"


async def test_upstream_error_status_is_kept(client):
    out, _ = await both({"model": "sim", "input": "[[fail 400]]"}, lambda: client)
    assert out.response["status"] == "failed"
    assert "400" in out.response["error"]["message"]


async def test_sequential_tool_turns_reach_upstream_as_separate_assistant_messages(recording):
    url, upstream = recording
    upstream.bodies.clear()
    tools = LocalFunctionExecutor({"now": lambda: "12:00"})
    async with OpenAIChatClient(url) as model:
        out, _ = await both(
            {"model": "sim", "input": "[[loop now]]", "max_infer_iters": 3}, lambda: model, executors=[tools]
        )
    assert out.output_types.count("function_call") == 3  # [[loop]] calls on every turn
    # The collected run's third model call saw two earlier tool turns.
    third = upstream.bodies[2]["messages"]
    assert [m["role"] for m in third] == ["user", "assistant", "tool", "assistant", "tool"]
    first_call, second_call = third[1]["tool_calls"], third[3]["tool_calls"]
    assert len(first_call) == 1 and len(second_call) == 1
    assert third[2]["tool_call_id"] == first_call[0]["id"]
    assert third[4]["tool_call_id"] == second_call[0]["id"]


async def test_parallel_calls_of_one_turn_share_one_assistant_message_upstream(recording):
    url, upstream = recording
    upstream.bodies.clear()
    tools = LocalFunctionExecutor({"add": lambda a, b: a + b})
    async with OpenAIChatClient(url) as model:
        await both({"model": "sim", "input": '[[call add {"a": 1, "b": 2}]] [[call add {"a": 3, "b": 4}]]'},
                   lambda: model, executors=[tools])
    second = upstream.bodies[1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "tool", "tool"]
    assert len(second[1]["tool_calls"]) == 2


def _message(role: str, text: str) -> dict[str, Any]:
    kind = "input_text" if role == "user" else "output_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


async def test_truncation_auto_sends_only_the_newest_turns_upstream(recording):
    url, upstream = recording
    upstream.bodies.clear()
    history = []
    for i in range(6):
        history += [_message("user", f"question {i} " + "x" * 200), _message("assistant", f"answer {i} " + "y" * 200)]
    body = {"model": "sim", "input": "[[say ok]]", "instructions": "be brief", "truncation": "auto"}
    async with OpenAIChatClient(url) as model:
        await both(body, lambda: model, history=history, context_window=300)
    sent = upstream.bodies[0]["messages"]
    assert sent[0] == {"role": "system", "content": "be brief"}, "the instructions stay"
    assert sent[-1]["content"] == "[[say ok]]"
    texts = [m["content"] for m in sent[1:-1]]
    assert texts and texts[-1].startswith("answer 5") and not any(t.startswith("question 0") for t in texts)
    assert texts[0].startswith("question"), "whole turns are dropped: what is kept starts with a question"


async def test_a_compaction_item_reaches_upstream_as_its_summary(recording):
    from troupe.agentloop.compaction import encode_summary

    url, upstream = recording
    upstream.bodies.clear()
    item = {"type": "compaction", "id": "cmp_1", "encrypted_content": encode_summary("Ada likes tides.")}
    async with OpenAIChatClient(url) as model:
        await both({"model": "sim", "input": [item, _message("user", "[[say ok]]")]}, lambda: model)
    assert upstream.bodies[0]["messages"] == [
        {"role": "system", "content": "Summary of the conversation so far:\nAda likes tides."},
        {"role": "user", "content": "[[say ok]]"},
    ]


async def test_automatic_compaction_sends_the_whole_thread_to_be_summarised_then_the_compacted_one(recording):
    from troupe.agentloop.compaction import SUMMARY_PROMPT

    url, upstream = recording
    upstream.bodies.clear()
    history = [_message("user", "My name is Ada. " + "x" * 400), _message("assistant", "Noted. " + "y" * 400)]
    body = {"model": "sim", "input": "[[say ok]]", "instructions": "be brief",
            "context_management": [{"type": "compaction", "compact_threshold": 100}]}  # fmt: skip
    async with OpenAIChatClient(url) as model:
        out, _ = await both(body, lambda: model, history=history)
    assert out.output_types == ["compaction", "message"] and out.text == "ok"
    summarise, answer = upstream.bodies[:2]  # the collected run's; the streamed run sends the same
    # Before: the whole thread, then the request for a summary; no tools, plain text.
    assert summarise["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "My name is Ada. " + "x" * 400},
        {"role": "assistant", "content": "Noted. " + "y" * 400},
        {"role": "user", "content": "[[say ok]]"},
        {"role": "user", "content": SUMMARY_PROMPT},
    ]
    assert "tools" not in summarise and "response_format" not in summarise
    # After: the instructions, the user messages and the summary the sim wrote.
    assert answer["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "My name is Ada. " + "x" * 400},
        {"role": "system", "content": "Summary of the conversation so far:\nSummary of 4 messages: 1 system, 2 user, 1 assistant."},
        {"role": "user", "content": "[[say ok]]"},
    ]
    assert upstream.bodies[2:] == [summarise, answer]
