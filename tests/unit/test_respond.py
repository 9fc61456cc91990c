"""troupe.agentloop's one-call functions (create_response, stream_response) against the sim:
what the README does not show."""

from __future__ import annotations

import asyncio

import pytest

from troupe.agentloop import LocalFunctionExecutor, create_response, stream_response
from troupe.protocol import InvalidRequest, parse_create_request
from troupe.sim import SimModel


async def test_history_is_the_thread_a_request_goes_on_from() -> None:
    first = await create_response({"model": "sim", "input": "[[say one]]"}, SimModel())
    history = [{"type": "message", "role": "user", "content": "[[say one]]"}, *first["output"]]
    second = await create_response({"model": "sim", "input": "[[history]]"}, SimModel(), history=history)
    assert second["output"][-1]["content"][0]["text"] == "[[say one]] | [[history]]"


@pytest.mark.parametrize("param", ["previous_response_id", "conversation"])
async def test_what_needs_stored_responses_is_refused_before_any_event(param: str) -> None:
    body = {"model": "sim", "input": "hi", param: "resp_1" if param == "previous_response_id" else "conv_1"}
    with pytest.raises(InvalidRequest) as refused:
        await create_response(body, SimModel())
    assert refused.value.param == param
    with pytest.raises(InvalidRequest):
        await anext(stream_response(body, SimModel()))


async def test_executors_and_the_clients_own_function_tools() -> None:
    # A parsed request, executors as a list: the server runs 'add'; 'lookup' is the client's, returned to it.
    request = parse_create_request({
        "model": "sim", "input": '[[call add {"a": 1, "b": 2}]] [[call lookup {"q": "x"}]]',
        "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}],
    })  # fmt: skip
    tools = [LocalFunctionExecutor({"add": lambda a, b: a + b})]
    response = await create_response(request, SimModel(), tools)
    kinds = [(item["type"], item.get("name")) for item in response["output"]]
    assert ("function_call", "lookup") in kinds and ("function_call_output", None) in kinds
    assert next(i for i in response["output"] if i["type"] == "function_call_output")["output"] == "3"


async def test_the_streams_last_event_holds_the_final_response_and_cancel_ends_the_stream() -> None:
    events = [e async for e in stream_response({"model": "sim", "input": "[[say done]]"}, SimModel())]
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "done"
    cancel = asyncio.Event()
    cancel.set()
    cancelled = [e["type"] async for e in stream_response({"model": "sim", "input": "hi"}, SimModel(), cancel=cancel)]
    assert cancelled == ["response.created", "response.in_progress"], "no model call; no terminal event (there is none)"
