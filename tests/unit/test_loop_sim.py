"""The loop scenarios again, driven by the in-process ``sim`` model's directives."""

from __future__ import annotations

import asyncio

from tests.fakes import RecordingModel
from tests.loop_harness import both, history_of, run
from troupe.agentloop.tools import LocalFunctionExecutor
from troupe.sim.model import SimModel

ADD_SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def tools() -> LocalFunctionExecutor:
    def broken() -> str:
        raise ValueError("no such thing")

    return LocalFunctionExecutor(
        {"add": lambda a, b: a + b, "tick": lambda: "tock", "broken": broken, "echo": lambda text="": text},
        schemas={"add": ADD_SCHEMA},
    )


async def test_say():
    out, _ = await both({"model": "sim", "input": "[[say Hello, world!]]"}, SimModel)
    assert out.text == "Hello, world!"
    assert out.response["usage"]["output_tokens"] == 2


async def test_plain_echo():
    out, _ = await both({"model": "sim", "input": "good morning"}, SimModel)
    assert out.text == "You said: good morning"


async def test_tool_loop():
    out, _ = await both({"model": "sim", "input": '[[call add {"a": 2, "b": 40}]]'}, SimModel, executors=[tools()])
    assert out.output_types == ["function_call", "function_call_output", "message"]
    assert out.text == "add -> 42"


async def test_parallel_calls_overlap():
    started = 0
    all_started = asyncio.Event()

    async def slow(name: str) -> str:
        nonlocal started
        started += 1
        if started == 3:
            all_started.set()
        await asyncio.wait_for(all_started.wait(), timeout=10)
        return name

    executor = LocalFunctionExecutor({"slow": slow})
    body = {"model": "sim", "input": '[[call slow {"name": "a"}]] [[call slow {"name": "b"}]] [[call slow {"name": "c"}]]'}
    from tests.loop_harness import check_stream, run

    out = await run(body, SimModel(), executors=[executor])
    check_stream(out)
    traces = out.tool_traces()
    assert max(t.started_at for t in traces) < min(t.ended_at for t in traces)
    assert out.text == "slow -> a\nslow -> b\nslow -> c"


async def test_tool_error_fed_back():
    out, _ = await both({"model": "sim", "input": "[[call broken]]"}, SimModel, executors=[tools()])
    assert out.text == "broken -> Error: ValueError: no such thing"
    assert out.response["status"] == "completed"


async def test_allowed_tools_rejection():
    body = {
        "model": "sim",
        "input": "[[call tick]]",
        "tools": [{"type": "function", "name": "add", "parameters": ADD_SCHEMA}, {"type": "function", "name": "tick"}],
        "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "add"}]},
    }
    out, _ = await both(body, SimModel, executors=[tools()])
    assert out.text == "tick -> Error: tool 'tick' is not in allowed_tools"


async def test_allowed_tools_required_calls_the_first_allowed():
    body = {
        "model": "sim",
        "input": "hello",
        "tools": [{"type": "function", "name": "tick"}, {"type": "function", "name": "add", "parameters": ADD_SCHEMA}],
        "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "add"}]},
    }
    out, _ = await both(body, SimModel, executors=[tools()])
    assert out.response["output"][0]["name"] == "add"
    assert out.text.startswith("add -> ")


async def test_forced_function_is_called_once_then_the_model_answers():
    body = {"model": "sim", "input": "hi", "tools": [{"type": "function", "name": "tick"}], "tool_choice": {"type": "function", "name": "tick"}}
    out, model = await both(body, SimModel, executors=[tools()])
    assert out.text == "tick -> tock"


async def test_tool_choice_none():
    out, _ = await both({"model": "sim", "input": "[[call tick]]", "tool_choice": "none"}, SimModel, executors=[tools()])
    assert out.output_types == ["function_call"]


async def test_client_function_round_trip():
    first, _ = await both({"model": "sim", "input": "What is the weather in Paris?", "tools": [WEATHER]}, SimModel)
    assert first.output_types == ["function_call"]
    call = first.response["output"][0]
    assert call["name"] == "get_weather"
    follow = {
        "model": "sim",
        "tools": [WEATHER],
        "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "sunny, 21 C"}],
    }
    second, _ = await both(follow, SimModel, history=history_of(first))
    assert second.text == "get_weather -> sunny, 21 C"


async def test_max_infer_iters():
    out, _ = await both({"model": "sim", "input": "[[loop tick]]", "max_infer_iters": 3}, SimModel, executors=[tools()])
    assert out.response["status"] == "incomplete"
    assert out.output_types.count("function_call_output") == 3


async def test_max_tool_calls():
    body = {"model": "sim", "input": "[[call tick]] [[call tick]] [[call tick]]", "max_tool_calls": 2}
    out, _ = await both(body, SimModel, executors=[tools()])
    assert out.response["status"] == "completed"
    # The third call is ignored, as OpenAI does: no item, no output, and the model never hears of it.
    assert out.output_types == ["function_call", "function_call", "function_call_output", "function_call_output",
                                "message"]
    assert out.text.splitlines() == ["tick -> tock", "tick -> tock"]
    added = [e["item"]["type"] for e in out.events if e["type"] == "response.output_item.added"]
    assert added == out.output_types


async def test_upstream_failure():
    out, _ = await both({"model": "sim", "input": "[[fail 503]]"}, SimModel)
    assert out.response["status"] == "failed"
    assert "503" in out.response["error"]["message"]


async def test_usage_is_the_sum_of_every_model_call():
    out, _ = await both({"model": "sim", "input": '[[call add {"a": 1, "b": 2}]]'}, SimModel, executors=[tools()])
    model_steps = [t for t in out.traces if t.kind == "model"]
    assert len(model_steps) == 2
    usage = out.response["usage"]
    assert usage["input_tokens"] == sum(t.input_tokens for t in model_steps)
    assert usage["output_tokens"] == sum(t.output_tokens for t in model_steps)


async def test_history_reaches_the_model_across_a_chain():
    first, _ = await both({"model": "sim", "input": "my name is Ada"}, SimModel)
    second, _ = await both({"model": "sim", "input": "[[history]]"}, SimModel, history=history_of(first))
    assert second.text == "my name is Ada | [[history]]"


async def test_think_emits_reasoning_first():
    out, _ = await both({"model": "sim", "input": "[[think step by step]] [[say done]]"}, SimModel)
    assert out.output_types == ["reasoning", "message"]
    assert out.response["usage"]["output_tokens_details"]["reasoning_tokens"] == 3


async def test_json_schema_output():
    import json

    import jsonschema

    schema = {"type": "object", "properties": {"city": {"type": "string"}, "temp": {"type": "number"}}, "required": ["city", "temp"]}
    body = {"model": "sim", "input": "weather", "text": {"format": {"type": "json_schema", "name": "w", "schema": schema}}}
    out, _ = await both(body, SimModel)
    jsonschema.validate(json.loads(out.text), schema)


async def test_max_output_tokens():
    out, _ = await both({"model": "sim", "input": "[[tokens 50]]", "max_output_tokens": 16}, SimModel)
    assert out.response["status"] == "incomplete"
    assert len(out.text.split()) == 16


async def test_reasoning_effort_and_verbosity_go_upstream_only_when_set():
    model = RecordingModel(SimModel())
    await run({"model": "sim", "input": "hi", "reasoning": {"effort": "low"}, "text": {"verbosity": "high"}}, model)
    await run({"model": "sim", "input": "hi"}, model)
    sent, plain = (call.to_payload() for call in model.calls)
    assert (sent["reasoning_effort"], sent["verbosity"]) == ("low", "high")
    assert "reasoning_effort" not in plain and "verbosity" not in plain
