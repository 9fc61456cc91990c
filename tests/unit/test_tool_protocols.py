"""Text tool protocols: ReAct read as it streams (whatever the chunks), JSON read whole, the
thread as text and back, and a runtime whose model is a scripted server over loopback HTTP that
answers in ReAct or JSON text, malformed answers included: what the client gets, and what the
model was sent (told once what was wrong, then the response fails)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.servers import ScriptedUpstream, serve_app
from troupe.agentloop.model import ChatRequest, ReasoningChunk, TextChunk
from troupe.agentloop.tool_protocols import (
    ProtocolError,
    ReactReader,
    Step,
    native_request,
    protocol_of,
    read_json,
    read_react,
    render_step,
    text_request,
)
from troupe.protocol import parse_create_request
from troupe.runtime import Runtime, RuntimeSettings
from troupe.runtime.settings import ModelSpec


def _tool(name: str, *properties: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": {p: {"type": "string"} for p in properties}}
    return {"type": "function", "function": {"name": name, "description": f"The {name} tool.", "parameters": schema}}


TOOLS = [_tool("calculator", "expression"), _tool("get_weather", "city", "unit"), _tool("now")]

REACT_CASES = [
    # (answer, thought, calls, final answer) or (answer, error)
    ("Thought: add them\nAction: calculator\nAction Input: {\"expression\": \"2+2\"}",
     "add them", [("calculator", {"expression": "2+2"})], ""),
    ("**Thought:** hmm\n**Action:** Calculator\n**Action Input:** 6*7",  # bold, another case, one argument
     "hmm", [("calculator", {"expression": "6*7"})], ""),
    ("```\nthought : x\naction: get_weather\naction_input: city=\"Paris\", unit=c\n```",  # fenced, key=value
     "x", [("get_weather", {"city": "Paris", "unit": "c"})], ""),
    ("Thought: two at once\nAction: calculator\nAction Input: {\"expression\": \"1\"}\n"
     "Action: now\nAction Input: none", "two at once", [("calculator", {"expression": "1"}), ("now", {})], ""),
    ("Thought: add\nAction: calculator\nAction Input: {\"expression\": \"2\"}\nObservation: 2\n"
     "Thought: done\nFinal Answer: 2", "add", [("calculator", {"expression": "2"})], ""),  # what it made up is dropped
    ("Thought: first\n\nsecond\nFinal Answer:\n\nFour.\n```py\nprint(4)\n```", "first\n\nsecond", [],
     "Four.\n```py\nprint(4)\n```"),
    ("  The answer is 4.", "", [], "The answer is 4."),  # no marker at all: an answer
    ("Thought: I think", "it has neither an Action nor a Final Answer"),
    ("", "the answer is empty"),
    ("Action Input: {}", "an Action Input follows no Action"),
    ("Action: calculator\nAction Input: {oops", "its Action Input is not a JSON object"),
    ("Action: get_weather\nAction Input: Paris", "its Action Input is neither a JSON object nor key=value pairs"),
]  # fmt: skip


@pytest.mark.parametrize("case", REACT_CASES, ids=lambda c: c[0][:30])
def test_a_react_answer_reads_the_same_whatever_its_chunks_and_its_action_is_never_text(case) -> None:
    answer, *expected = case
    seen = set()
    for size in (1, 2, 3, 7, len(answer) or 1):
        reader, chunks = ReactReader(TOOLS), []
        for i in range(0, len(answer), size):
            chunks += reader.feed(answer[i : i + size])
        chunks += reader.end()
        text = "".join(c.text for c in chunks if isinstance(c, TextChunk))
        thought = "".join(c.text for c in chunks if isinstance(c, ReasoningChunk))
        try:
            step = reader.step()
            read: tuple[Any, ...] = (step.thought, [(n, json.loads(a)) for n, a in step.calls], step.answer)
            assert thought == step.thought and text == step.answer  # what streamed is what was read
        except ProtocolError as exc:
            read = (str(exc).split(" (")[0],)
        assert "Action" not in text and "Observation" not in text + thought
        seen.add(json.dumps(read))
    assert [json.loads(s) for s in seen] == [json.loads(json.dumps(expected))]


def test_a_json_answer_is_read_leniently() -> None:
    step = read_json('```json\n{"Thought": "t", "action": {"name": "Calculator", "arguments": "{\\"expression\\": \\"1\\"}"}}\n```',
                     TOOLS)  # fmt: skip
    assert (step.thought, step.calls) == ("t", [("calculator", '{"expression": "1"}')])
    step = read_json('{"actions": [{"tool": "now"}, {"name": "calculator", "args": {"expression": "2"}}]}')
    assert step.calls == [("now", "{}"), ("calculator", '{"expression": "2"}')]
    assert read_json('{"action": "now", "action_input": {}}').calls == [("now", "{}")]
    assert read_json('{"final_answer": "42"}').answer == "42"
    for bad, why in [("42", "not a JSON object"), ('{"thought": "hm"}', "neither an action nor a final_answer"),
                     ('{"action": {"arguments": {}}}', "names no tool"), ('{"action": {"name": "now", "arguments": [1]}}',
                     "are not an object")]:  # fmt: skip
        with pytest.raises(ProtocolError, match=why):
            read_json(bad)


def _native() -> ChatRequest:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "calculator", "arguments": '{"expression": "6*7"}'},
    }
    other = {"id": "call_2", "type": "function", "function": {"name": "now", "arguments": "{}"}}
    return ChatRequest(model="m", tools=TOOLS, tool_choice="auto", messages=[
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "six times seven, and the time?"},
        {"role": "assistant", "content": None, "tool_calls": [call, other]},
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        {"role": "tool", "tool_call_id": "call_2", "content": "noon"},
    ])  # fmt: skip


@pytest.mark.parametrize("protocol", ["react", "json"])
def test_the_thread_goes_upstream_as_text_and_reads_back_as_it_was(protocol) -> None:
    sent = text_request(_native(), protocol)
    assert not sent.tools and sent.tool_choice is None and protocol_of(sent) == protocol
    system, user, turn, seen = sent.messages
    assert system["content"].startswith("Be brief.\n\nYou can use these tools:\n- calculator: The calculator tool.")
    assert seen == {"role": "user", "content": "Observation (calculator): 42\nObservation (now): noon"}
    reread = read_react(turn["content"]) if protocol == "react" else read_json(turn["content"])
    assert reread.calls == [("calculator", '{"expression": "6*7"}'), ("now", "{}")]
    back = native_request(sent, protocol)
    assert back.tools == TOOLS and back.tool_choice is None
    assert [m["role"] for m in back.messages] == ["system", "user", "assistant", "tool", "tool"]
    assert [m["content"] for m in back.messages if m["role"] == "tool"] == ["42", "noon"]
    assert back.messages[0]["content"] == "Be brief."
    # What the request says of tool_choice reaches the model in words, and the sim reads it back.
    for choice in ("none", "required", {"type": "function", "function": {"name": "now"}}):
        asked = text_request(ChatRequest(model="m", tools=TOOLS, tool_choice=choice, messages=[]), protocol)
        assert native_request(asked, protocol).tool_choice == choice
    assert render_step(protocol, Step(answer="done")) in ("Final Answer: done", '{"final_answer": "done"}')


@contextlib.asynccontextmanager
async def _scripted(
    tmp_path: Any, protocol: str, answers: list[str]
) -> AsyncIterator[tuple[Runtime, ScriptedUpstream]]:
    """A runtime whose model ``m`` is a server answering ``answers`` in turn, spoken to in ``protocol``."""
    upstream = ScriptedUpstream(answers)
    with serve_app(upstream) as url:
        model = ModelSpec(name="m", base_url=f"{url}/v1", tool_protocol=protocol)  # type: ignore[arg-type]
        runtime = Runtime.local(RuntimeSettings(storage_path=str(tmp_path / "t.duckdb"), models=(model,)))
        try:
            yield runtime, upstream
        finally:
            await runtime.close()


async def _events(runtime: Runtime, body: dict[str, Any]) -> list[dict[str, Any]]:
    stream = await runtime.stream("", parse_create_request({**body, "stream": True}))
    return [event async for batch in stream for event in batch]


@pytest.mark.asyncio
async def test_a_malformed_answer_is_told_back_once_and_the_loop_goes_on(tmp_path) -> None:
    answers = [
        "Thought: compute\nAction: calculator\nAction Input: {oops",
        'Thought: again\nAction: calculator\nAction Input: {"expression": "6*7"}',
        "Thought: done\nFinal Answer: It is 42.",
    ]
    async with _scripted(tmp_path, "react", answers) as (runtime, upstream):
        events = await _events(runtime, {"model": "m", "input": "six times seven?"})
        response = events[-1]["response"]
        assert response["status"] == "completed" and response["output"][-1]["content"][0]["text"] == "It is 42."
        assert [o["type"] for o in response["output"]] == [
            "reasoning", "function_call", "function_call_output", "reasoning", "message",
        ]  # fmt: skip
        thought = response["output"][0]["content"][0]["text"]
        assert thought.startswith("compute") and "again" in thought  # both attempts' thoughts, as streamed
        first, retry, last = upstream.bodies
        assert retry["messages"][-2] == {"role": "assistant", "content": answers[0]}
        told = retry["messages"][-1]["content"]
        assert told.startswith("Your last answer could not be read: its Action Input is not a JSON object")
        assert last["messages"][-1] == {"role": "user", "content": "Observation (calculator): 42"}
        assert all("could not be read" not in json.dumps(m) for m in last["messages"])  # told once, not kept
        deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        assert deltas == "It is 42."
        assert response["usage"]["output_tokens"] == sum(len(a.split()) for a in answers)


@pytest.mark.asyncio
async def test_a_second_malformed_answer_fails_the_response_saying_why(tmp_path) -> None:
    async with _scripted(tmp_path, "react", ["Thought: hmm", "Thought: still thinking"]) as (runtime, upstream):
        failed = await runtime.respond("", parse_create_request({"model": "m", "input": "[[x]]", "tools": [
            {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}]}))  # fmt: skip
        assert failed["status"] == "failed" and len(upstream.bodies) == 2
        assert failed["error"]["code"] == "server_error" and failed["error"]["message"] == (
            "The model call failed: The model's answer did not follow the 'react' tool protocol, after being told once: "
            "it has neither an Action nor a Final Answer."
        )


@pytest.mark.asyncio
async def test_a_json_model_is_asked_for_json_and_its_actions_run(tmp_path) -> None:
    answers = [
        '{"thought": "both", "actions": [{"name": "calculator", "arguments": {"expression": "2*3"}}, {"name": "now"}]}',
        "not json at all",
        '{"thought": "done", "final_answer": "6"}',
    ]
    async with _scripted(tmp_path, "json", answers) as (runtime, upstream):
        response = await runtime.respond("", parse_create_request({"model": "m", "input": "2*3, and the time?"}))
        assert response["status"] == "completed" and response["output"][-1]["content"][0]["text"] == "6"
        calls = [o["name"] for o in response["output"] if o["type"] == "function_call"]
        assert calls == ["calculator", "now"]  # parallel, as written
        assert all(b["response_format"] == {"type": "json_object"} and "tools" not in b for b in upstream.bodies)
        assert upstream.bodies[2]["messages"][-1]["content"].startswith("Your last answer could not be read: it is not")
