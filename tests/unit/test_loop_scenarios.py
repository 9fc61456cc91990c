"""Loop scenarios with a scripted model: each runs streamed and not, and must agree.

Every streamed run is replayed through the openai SDK's stream accumulator and
validated against Open Responses' models (see tests/loop_harness.py).
"""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.fakes import ScriptedModel, text_turn, tool_turn
from tests.loop_harness import both, check_stream, history_of, run
from troupe.agentloop.driver import LoopSettings
from troupe.agentloop.model import ModelError
from troupe.agentloop.tools import LocalFunctionExecutor
from troupe.protocol import InvalidRequest

ADD_SCHEMA = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}
GET_WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


def adder() -> LocalFunctionExecutor:
    return LocalFunctionExecutor({"add": lambda a, b: a + b}, schemas={"add": ADD_SCHEMA})


async def test_single_answer():
    out, model = await both({"model": "m", "input": "hello"}, lambda: ScriptedModel(text_turn("Hi there friend")))
    assert out.response["status"] == "completed"
    assert out.output_types == ["message"]
    assert out.text == "Hi there friend"
    assert model.calls[0].messages == [{"role": "user", "content": "hello"}]
    types = [e["type"] for e in out.events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[2:5] == ["response.output_item.added", "response.content_part.added", "response.output_text.delta"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"]
    assert out.response["usage"]["output_tokens"] == 3


async def test_instructions_go_first_as_system():
    _, model = await both(
        {"model": "m", "input": "hi", "instructions": "Be brief."}, lambda: ScriptedModel(text_turn("ok"))
    )
    assert model.calls[0].messages[0] == {"role": "system", "content": "Be brief."}


async def test_two_turn_tool_loop_with_a_server_side_tool():
    out, model = await both(
        {"model": "m", "input": "add 2 and 40"},
        lambda: ScriptedModel(tool_turn(("add", {"a": 2, "b": 40})), text_turn("It is 42")),
        executors=[adder()],
    )
    assert out.output_types == ["function_call", "function_call_output", "message"]
    assert out.response["output"][1]["output"] == "42"
    assert out.text == "It is 42"
    # The model saw the registered tool, then its own call and the result.
    assert [t["function"]["name"] for t in model.calls[0].tools] == ["add"]
    second = model.calls[1].messages
    assert second[1]["tool_calls"][0]["function"]["name"] == "add"
    assert second[2] == {"role": "tool", "tool_call_id": "call_add_0", "content": "42"}


async def test_three_parallel_server_calls_overlap():
    started: list[str] = []
    all_started = asyncio.Event()

    async def slow(name: str) -> str:
        started.append(name)
        if len(started) == 3:
            all_started.set()
        # Each call waits until all three are running: sequential execution would time out here.
        await asyncio.wait_for(all_started.wait(), timeout=10)
        return name.upper()

    tools = LocalFunctionExecutor({"slow": slow})
    model = ScriptedModel(
        tool_turn(("slow", {"name": "a"}), ("slow", {"name": "b"}), ("slow", {"name": "c"})), text_turn("done")
    )
    out = await run({"model": "m", "input": "go"}, model, executors=[tools])
    check_stream(out)
    traces = out.tool_traces()
    assert len(traces) == 3
    assert max(t.started_at for t in traces) < min(t.ended_at for t in traces), "the three calls overlapped"
    outputs = [i["output"] for i in out.response["output"] if i["type"] == "function_call_output"]
    assert outputs == ["A", "B", "C"], "outputs follow the model's call order"


async def test_tool_error_is_fed_back_and_the_loop_goes_on():
    def broken(**_):
        raise RuntimeError("disk on fire")

    out, model = await both(
        {"model": "m", "input": "x"},
        lambda: ScriptedModel(tool_turn(("broken", {})), text_turn("sorry")),
        executors=[LocalFunctionExecutor({"broken": broken})],
    )
    assert out.response["status"] == "completed"
    assert out.response["output"][1]["output"] == "Error: RuntimeError: disk on fire"
    assert model.calls[1].messages[-1]["content"] == "Error: RuntimeError: disk on fire"
    assert out.tool_traces()[0].error == "RuntimeError: disk on fire"


async def test_allowed_tools_rejects_a_call_outside_the_list():
    calls = []
    tools = LocalFunctionExecutor({"add": lambda a, b: calls.append("add") or a + b, "mul": lambda: calls.append("mul")})
    body = {
        "model": "m",
        "input": "x",
        "tools": [{"type": "function", "name": "add"}, {"type": "function", "name": "mul"}],
        "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "add"}]},
    }
    out, model = await both(body, lambda: ScriptedModel(tool_turn(("mul", {})), text_turn("ok")), executors=[tools])
    assert calls == [], "the disallowed tool never ran"
    assert out.response["output"][1]["output"] == "Error: tool 'mul' is not in allowed_tools"
    assert [t["function"]["name"] for t in model.calls[0].tools] == ["add"], "only allowed tools are offered"


async def test_unknown_tool_is_rejected_not_run():
    out, _ = await both({"model": "m", "input": "x"}, lambda: ScriptedModel(tool_turn(("nope", {})), text_turn("ok")))
    assert out.response["output"][1]["output"] == "Error: unknown tool 'nope'"


async def test_tool_choice_none_returns_calls_as_is():
    calls = []
    tools = LocalFunctionExecutor({"add": lambda a, b: calls.append(1)})
    body = {"model": "m", "input": "x", "tool_choice": "none"}
    out, model = await both(body, lambda: ScriptedModel(tool_turn(("add", {"a": 1, "b": 2}))), executors=[tools])
    assert calls == []
    assert out.output_types == ["function_call"] and out.response["status"] == "completed"
    assert model.calls[0].tool_choice == "none" and model.calls[0].tools, "tools still sent for context"


async def test_client_function_call_ends_the_response_and_a_follow_up_continues():
    body = {"model": "m", "input": "weather?", "tools": [GET_WEATHER]}
    first, _ = await both(body, lambda: ScriptedModel(tool_turn(("get_weather", {"city": "Paris"}, "call_w"))))
    assert first.response["status"] == "completed"
    assert first.output_types == ["function_call"]
    assert first.response["output"][0]["call_id"] == "call_w"

    follow = {
        "model": "m",
        "tools": [GET_WEATHER],
        "input": [{"type": "function_call_output", "call_id": "call_w", "output": "sunny"}],
    }
    second, model = await both(follow, lambda: ScriptedModel(text_turn("It is sunny")), history=history_of(first))
    assert second.text == "It is sunny"
    messages = model.calls[0].messages
    assert messages[0] == {"role": "user", "content": "weather?"}
    assert messages[1]["tool_calls"][0]["id"] == "call_w"
    assert messages[2] == {"role": "tool", "tool_call_id": "call_w", "content": "sunny"}


async def test_mixed_turn_runs_server_calls_then_returns_client_calls():
    body = {"model": "m", "input": "x", "tools": [GET_WEATHER]}
    out, _ = await both(
        body,
        lambda: ScriptedModel(tool_turn(("add", {"a": 1, "b": 1}), ("get_weather", {"city": "Oslo"}))),
        executors=[adder()],
    )
    assert out.output_types == ["function_call", "function_call", "function_call_output"]
    assert out.response["output"][2]["output"] == "2"


async def test_requires_action_setting():
    body = {"model": "m", "input": "x", "tools": [GET_WEATHER]}
    out = await run(
        body, ScriptedModel(tool_turn(("get_weather", {}))), settings=LoopSettings(client_tool_status="requires_action")
    )
    assert out.response["status"] == "requires_action"
    assert out.events[-1]["type"] == "response.requires_action"
    check_stream(out)


async def test_unpaired_function_call_output_is_a_400():
    body = {"model": "m", "input": [{"type": "function_call_output", "call_id": "call_x", "output": "1"}]}
    with pytest.raises(InvalidRequest) as info:
        await run(body, ScriptedModel())
    assert info.value.param == "input[0].call_id"
    assert info.value.status == 400


async def test_max_infer_iters_is_incomplete():
    tools = LocalFunctionExecutor({"tick": lambda: "tock"})
    out, model = await both(
        {"model": "m", "input": "x", "max_infer_iters": 2},
        lambda: ScriptedModel(tool_turn(("tick", {}, "call_1")), tool_turn(("tick", {}, "call_2"))),
        executors=[tools],
    )
    assert out.response["status"] == "incomplete"
    assert out.response["incomplete_details"] == {"reason": "max_messages"}
    assert out.events[-1]["type"] == "response.incomplete"
    assert len(model.calls) == 2


async def test_max_tool_calls_caps_server_calls_then_one_turn_without_tools():
    ran = []
    tools = LocalFunctionExecutor({"tick": lambda n: ran.append(n) or "ok"})
    out, model = await both(
        {"model": "m", "input": "x", "max_tool_calls": 2},
        lambda: ScriptedModel(
            tool_turn(("tick", {"n": 1}), ("tick", {"n": 2}), ("tick", {"n": 3})),
            text_turn("finished"),
        ),
        executors=[tools],
    )
    assert sorted(ran) == [1, 1, 2, 2], "calls 1 and 2 ran in each of the two runs; call 3 never"
    calls = [json.loads(i["arguments"])["n"] for i in out.response["output"] if i["type"] == "function_call"]
    assert calls == [1, 2], "the call past the budget is ignored: no item"
    assert len([i for i in out.response["output"] if i["type"] == "function_call_output"]) == 2
    assert model.calls[1].tool_choice == "none", "the last turn cannot call tools"
    upstream = model.calls[1].messages
    assert [len(m.get("tool_calls") or []) for m in upstream if m["role"] == "assistant"] == [2]
    assert [m["role"] for m in upstream].count("tool") == 2
    assert out.response["status"] == "completed" and out.text == "finished"


async def test_upstream_failure_fails_the_response():
    out, _ = await both({"model": "m", "input": "x"}, lambda: ScriptedModel(ModelError("overloaded", status=503)))
    assert out.response["status"] == "failed"
    assert out.response["error"]["code"] == "server_error"
    assert "503" in out.response["error"]["message"] and "overloaded" in out.response["error"]["message"]
    assert [e["type"] for e in out.events][-2:] == ["error", "response.failed"]


async def test_failure_mid_stream_closes_open_items():
    def failing():
        yield from text_turn("partial answer")[:2]
        raise ModelError("connection reset", status=502)

    class Failing(ScriptedModel):
        async def stream(self, request):
            self.calls.append(request)
            for chunk in failing():
                yield chunk

    out = await run({"model": "m", "input": "x"}, Failing())
    check_stream(out)
    assert out.response["status"] == "failed"
    assert out.response["output"][0]["status"] == "incomplete"
    assert out.response["output"][0]["content"][0]["text"] == "partial answer"


async def test_usage_is_summed_over_model_calls():
    out, _ = await both(
        {"model": "m", "input": "x"},
        lambda: ScriptedModel(tool_turn(("add", {"a": 1, "b": 2}), input_tokens=7), text_turn("three", input_tokens=11)),
        executors=[adder()],
    )
    usage = out.response["usage"]
    assert usage["input_tokens"] == 18
    assert usage["output_tokens"] == 5 + 1
    assert usage["total_tokens"] == 24


async def test_reasoning_comes_first_with_its_own_content_index():
    out, _ = await both({"model": "m", "input": "x"}, lambda: ScriptedModel(text_turn("answer", reasoning="let me think")))
    assert out.output_types == ["reasoning", "message"]
    parts = [e for e in out.events if e["type"] == "response.content_part.added"]
    assert [(p["output_index"], p["content_index"]) for p in parts] == [(0, 0), (1, 0)]
    assert out.response["output"][0]["content"][0]["text"] == "let me think"


async def test_a_reasoning_or_message_item_is_done_before_the_next_item_opens():
    # As OpenAI streams a turn: reasoning, then the words before the calls, then the calls, each
    # item done before the next is added (check_stream asserts the order for every stream).
    first = tool_turn(("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4}), text="Adding both.")
    turns = [text_turn("", reasoning="two sums")[:-1] + first, text_turn("3 and 7", reasoning="done")]
    out, _ = await both({"model": "m", "input": "x"}, lambda: ScriptedModel(*turns), executors=[adder()])
    lifecycle = [(e["type"].rsplit(".", 1)[1], e["item"]["type"]) for e in out.events if e["type"].startswith("response.output_item.")]
    assert lifecycle[:6] == [("added", "reasoning"), ("done", "reasoning"), ("added", "message"), ("done", "message"),
                             ("added", "function_call"), ("added", "function_call")]  # fmt: skip
    assert [i["type"] for i in out.response["output"]] == [
        "reasoning", "message", "function_call", "function_call", "function_call_output", "function_call_output",
        "reasoning", "message",
    ]  # fmt: skip
    texts = [i["content"][0]["text"] for i in out.response["output"] if i["type"] in ("reasoning", "message")]
    assert texts == ["two sums", "Adding both.", "done", "3 and 7"]
    assert all(i["status"] == "completed" for i in out.response["output"] if "status" in i)


async def test_length_finish_is_incomplete_max_output_tokens():
    out, _ = await both(
        {"model": "m", "input": "x", "max_output_tokens": 16},
        lambda: ScriptedModel(text_turn("one two", finish_reason="length")),
    )
    assert out.response["status"] == "incomplete"
    assert out.response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert out.response["output"][0]["status"] == "incomplete"


async def test_cancel_ends_the_response_cancelled():
    from troupe.agentloop.driver import prepare, run_loop
    from troupe.agentloop.events import ResponseFinished
    from troupe.protocol import parse_create_request

    gate = asyncio.Event()

    async def wait_forever() -> str:
        gate.set()
        await asyncio.Event().wait()
        return "never"

    request = parse_create_request({"model": "m", "input": "x"})
    tools = LocalFunctionExecutor({"hang": wait_forever})
    cancel = asyncio.Event()
    events = run_loop(prepare(request, [], [tools]), model=ScriptedModel(tool_turn(("hang", {}))), executors=[tools], cancel=cancel)

    async def cancel_when_running():
        await gate.wait()
        cancel.set()

    canceller = asyncio.create_task(cancel_when_running())
    seen = [e async for e in events]
    await canceller
    assert isinstance(seen[-1], ResponseFinished) and seen[-1].status == "cancelled"


async def test_duplicate_input_items_are_deduplicated_against_history():
    first, _ = await both({"model": "m", "input": "hi"}, lambda: ScriptedModel(text_turn("hello")))
    history = history_of(first)
    resend = {"model": "m", "input": [*history, {"role": "user", "content": "again"}]}
    second, model = await both(resend, lambda: ScriptedModel(text_turn("ok")), history=history)
    assert [m["content"] for m in model.calls[0].messages] == ["hi", "hello", "again"]
    assert len(second.prepared.input_items) == 1


async def test_json_schema_format_is_passed_upstream():
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    body = {"model": "m", "input": "x", "text": {"format": {"type": "json_schema", "name": "thing", "schema": schema}}}
    _, model = await both(body, lambda: ScriptedModel(text_turn(json.dumps({"x": 1}))))
    assert model.calls[0].response_format == {"type": "json_schema", "json_schema": {"name": "thing", "schema": schema}}


async def test_a_turn_whose_calls_are_all_past_the_budget_gets_a_last_turn_without_tools():
    tools = LocalFunctionExecutor({"tick": lambda n: "ok"})
    out, model = await both(
        {"model": "m", "input": "x", "max_tool_calls": 1},
        lambda: ScriptedModel(tool_turn(("tick", {"n": 1})), tool_turn(("tick", {"n": 2})), text_turn("done")),
        executors=[tools],
    )
    assert out.output_types == ["function_call", "function_call_output", "message"]
    assert model.calls[2].tool_choice == "none"
    assert out.response["status"] == "completed" and out.text == "done"
