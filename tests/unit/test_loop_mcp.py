"""MCP in the loop: listing, calls, allowed_tools, approvals, replay; streamed and not.

The servers here are plain functions behind the MCP seam; tests/integration runs the
same flows against real MCP servers.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.fakes import FunctionMcpClient
from tests.loop_harness import both, check_stream, history_of, run
from troupe.protocol import InvalidRequest
from troupe.sim.model import SimModel


def calc_server(**extra):
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    def fail() -> str:
        """Always fails."""
        raise RuntimeError("the tool broke")

    return {"add": add, "fail": fail, **extra}


def mcp_tool(label="calc", **kw):
    return {"type": "mcp", "server_label": label, "server_url": "https://mcp.example/mcp", "require_approval": "never", **kw}


def types(out):
    return [e["type"] for e in out.events]


async def test_listing_a_call_and_the_answer():
    client = FunctionMcpClient({"calc": calc_server()})
    body = {"model": "sim", "input": '[[call add {"a": 2, "b": 40}]]', "tools": [mcp_tool()]}
    out, _ = await both(body, SimModel, mcp_client=client)
    assert out.output_types == ["mcp_list_tools", "mcp_call", "message"]
    listing, call = out.response["output"][0], out.response["output"][1]
    assert [t["name"] for t in listing["tools"]] == ["add", "fail"]
    assert (call["server_label"], call["name"], call["output"], call["error"], call["status"]) == ("calc", "add", "42", None, "completed")
    assert out.text == "add -> 42"
    for expected in (
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
    ):
        assert expected in types(out)
    assert client.called == [("calc", "add", {"a": 2, "b": 40})] * 2  # once per run (both runs)


async def test_allowed_tools_filters_the_listing_and_the_calls():
    client = FunctionMcpClient({"calc": calc_server()})
    body = {"model": "sim", "input": "[[call fail]]", "tools": [mcp_tool(allowed_tools=["add"])]}
    out, _ = await both(body, SimModel, mcp_client=client)
    assert [t["name"] for t in out.response["output"][0]["tools"]] == ["add"]
    assert not [c for c in client.called if c[1] == "fail"], "the disallowed tool never ran"
    assert out.text == "fail -> Error: unknown tool 'fail'"


async def test_three_calls_in_one_turn_overlap():
    started, all_started = [], asyncio.Event()

    async def slow(text: str = "") -> str:
        started.append(text)
        if len(started) % 3 == 0:
            all_started.set()
        await asyncio.wait_for(all_started.wait(), timeout=10)
        return text

    client = FunctionMcpClient({"calc": calc_server(slow=slow)})
    calls = " ".join(f'[[call slow {{"text": "{t}"}}]]' for t in "abc")
    out = await run({"model": "sim", "input": calls, "tools": [mcp_tool()]}, SimModel(), mcp_client=client)
    check_stream(out)
    tools = out.tool_traces()
    assert max(t.started_at for t in tools) < min(t.ended_at for t in tools)
    assert [i["output"] for i in out.response["output"] if i["type"] == "mcp_call"] == ["a", "b", "c"]


async def test_approval_request_ends_the_response_and_approve_runs_it_once():
    client = FunctionMcpClient({"calc": calc_server()})
    tool = mcp_tool(require_approval="always")
    first, _ = await both({"model": "sim", "input": '[[call add {"a": 1, "b": 2}]]', "tools": [tool]}, SimModel, mcp_client=client)
    assert first.response["status"] == "completed"
    assert first.output_types == ["mcp_list_tools", "mcp_approval_request"]
    request = first.response["output"][1]
    assert (request["name"], request["arguments"], request["server_label"]) == ("add", '{"a": 1, "b": 2}', "calc")
    assert client.called == []

    approve = {
        "model": "sim",
        "tools": [tool],
        "input": [{"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True}],
    }
    second, model = await both(approve, SimModel, mcp_client=client, history=history_of(first))
    assert second.output_types == ["mcp_call", "message"], "no re-listing; the call runs before any model turn"
    assert second.response["output"][0]["approval_request_id"] == request["id"]
    assert second.text == "add -> 3"
    assert len(client.called) == 2  # once per run (both runs), never twice in one
    assert client.listed == ["calc", "calc"]  # only the first request listed (once per run)

    # Re-sending the same approval later never runs the call again.
    again = {**approve, "input": [{"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True}, {"role": "user", "content": "[[say ok]]"}]}
    third, _ = await both(again, SimModel, mcp_client=client, history=history_of(first) + history_of(second))
    assert len(client.called) == 2
    assert third.output_types == ["message"]


async def test_deny_tells_the_model_and_runs_nothing():
    client = FunctionMcpClient({"calc": calc_server()})
    tool = mcp_tool(require_approval={"always": {"tool_names": ["add"]}})
    first, _ = await both({"model": "sim", "input": '[[call add {"a": 1, "b": 2}]]', "tools": [tool]}, SimModel, mcp_client=client)
    request = first.response["output"][1]
    deny = {
        "model": "sim",
        "tools": [tool],
        "input": [{"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": False, "reason": "not now"}],
    }
    second, model = await both(deny, SimModel, mcp_client=client, history=history_of(first))
    assert client.called == []
    assert second.text == "add -> The user denied this tool call. Reason: not now"


async def test_unknown_approval_request_is_a_400():
    body = {
        "model": "sim",
        "tools": [mcp_tool()],
        "input": [{"type": "mcp_approval_response", "approval_request_id": "mcpr_nope", "approve": True}],
    }
    with pytest.raises(InvalidRequest) as info:
        await run(body, SimModel(), mcp_client=FunctionMcpClient({"calc": calc_server()}))
    assert info.value.param == "input[0].approval_request_id"


async def test_a_chain_does_not_relist_and_replays_calls_as_history():
    client = FunctionMcpClient({"calc": calc_server()})
    tool = mcp_tool()
    first, _ = await both({"model": "sim", "input": '[[call add {"a": 2, "b": 2}]]', "tools": [tool]}, SimModel, mcp_client=client)
    calls_before = len(client.called)
    second, model = await both({"model": "sim", "input": "[[history]]", "tools": [tool]}, SimModel, mcp_client=client, history=history_of(first))
    assert second.output_types == ["message"], "no second mcp_list_tools in the thread"
    assert len(client.called) == calls_before, "nothing re-executed"
    messages = model.calls[0].messages if hasattr(model, "calls") else None
    assert second.text == '[[call add {"a": 2, "b": 2}]] | [[history]]'
    assert messages is None or messages  # SimModel keeps no call log; the transcript is checked below
    transcript = second.prepared.transcript.to_chat_messages()
    assert transcript[1]["tool_calls"][0]["function"]["name"] == "add"
    assert transcript[2] == {"role": "tool", "tool_call_id": first.response["output"][1]["id"], "content": "4"}


async def test_failing_tool_and_down_server_are_reported_on_their_items():
    client = FunctionMcpClient({"calc": calc_server(), "gone": {}}, down=frozenset({"gone"}))
    body = {"model": "sim", "input": "[[call fail]]", "tools": [mcp_tool(), mcp_tool("gone")]}
    out, _ = await both(body, SimModel, mcp_client=client)
    assert out.response["status"] == "completed"
    listings = [i for i in out.response["output"] if i["type"] == "mcp_list_tools"]
    assert [bool(i["error"]) for i in listings] == [False, True]
    assert "response.mcp_list_tools.failed" in types(out)
    call = next(i for i in out.response["output"] if i["type"] == "mcp_call")
    assert call["status"] == "failed"
    assert call["error"] == {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": "the tool broke"}]}
    assert "response.mcp_call.failed" in types(out)
    assert out.text == "fail -> Error: the tool broke"


async def test_secrets_never_reach_items_events_or_the_response():
    client = FunctionMcpClient({"calc": calc_server()})
    secret = "sk-very-secret-token"
    body = {"model": "sim", "input": '[[call add {"a": 1, "b": 1}]]', "tools": [mcp_tool(headers={"Authorization": f"Bearer {secret}"})]}
    out = await run(body, SimModel(), mcp_client=client)
    assert secret not in repr(out.events) and secret not in repr(out.response)
    assert secret not in repr(out.traces)


def test_a_resumed_response_learns_its_listings_and_which_tools_are_idempotent():
    # A resumed response's MCP listings are in its own output, not its thread (module checkpoint).
    from troupe.agentloop.mcp import McpServer, McpToolset
    from troupe.agentloop.model import ToolCall

    listing = {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "calc", "error": None, "tools": [
        {"name": "add", "input_schema": {}, "annotations": {"idempotentHint": True}},
        {"name": "charge", "input_schema": {}, "annotations": {"idempotentHint": False}},
        {"name": "plain", "input_schema": {}},
    ]}  # fmt: skip
    toolset = McpToolset(client=None, servers=[McpServer(label="calc", url="http://x")], history=[])  # type: ignore[arg-type]
    assert toolset.to_list() and toolset.label_of("add") is None
    toolset.learn([listing])
    assert toolset.to_list() == [] and toolset.label_of("add") == "calc"
    idempotent = {name: toolset.is_idempotent(ToolCall(call_id="c", name=name, arguments="{}"))
                  for name in ("add", "charge", "plain", "unknown")}  # fmt: skip
    assert idempotent == {"add": True, "charge": False, "plain": False, "unknown": False}
