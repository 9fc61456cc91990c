"""decide(): every transition and stopping rule, with plain values."""

from __future__ import annotations

from dataclasses import replace

import pytest

from troupe.agentloop.decide import CallModel, ExecuteTools, Finish, InterruptForApproval, LoopState, decide
from troupe.agentloop.model import TokenUsage, ToolCall, TurnEnd
from troupe.agentloop.tools import RejectedCall, TurnPlan

ADD = ToolCall(call_id="call_1", name="add", arguments='{"a": 1}')
MUL = ToolCall(call_id="call_2", name="mul", arguments="{}")


def after(turn: TurnEnd, plan: TurnPlan = TurnPlan(), **state) -> LoopState:
    return LoopState(**state).after_model(turn, plan, had_tools=True)


def test_first_step_calls_the_model_with_the_requests_tool_choice():
    assert decide(LoopState()) == CallModel(use_request_tool_choice=True)


def test_no_tool_calls_completes():
    assert decide(after(TurnEnd(text="hi"))) == Finish(status="completed")


def test_length_is_incomplete_max_output_tokens():
    state = after(TurnEnd(text="hi", finish_reason="length"), TurnPlan(server=(ADD,)))
    assert decide(state) == Finish(status="incomplete", incomplete_reason="max_output_tokens")


def test_content_filter_is_incomplete():
    assert decide(after(TurnEnd(finish_reason="content_filter"))).incomplete_reason == "content_filter"


def test_server_calls_are_executed_then_model_called_again_with_auto():
    state = after(TurnEnd(tool_calls=(ADD,)), TurnPlan(server=(ADD,)))
    assert decide(state) == ExecuteTools(calls=(ADD,))
    assert decide(state.after_tools()) == CallModel(use_request_tool_choice=False, tools_enabled=True)


def test_rejected_calls_alone_still_go_back_to_the_model():
    rejected = (RejectedCall(call=ADD, reason="unknown tool 'add'"),)
    state = after(TurnEnd(tool_calls=(ADD,)), TurnPlan(rejected=rejected))
    assert decide(state) == ExecuteTools(calls=(), rejected=rejected)
    assert isinstance(decide(state.after_tools()), CallModel)


def test_client_call_finishes_after_the_turns_server_calls():
    state = after(TurnEnd(tool_calls=(ADD, MUL)), TurnPlan(server=(ADD,), client=(MUL,)))
    assert decide(state) == ExecuteTools(calls=(ADD,))
    assert decide(state.after_tools()) == Finish(status="completed")


def test_client_call_with_requires_action_setting():
    state = LoopState(client_tool_status="requires_action").after_model(
        TurnEnd(tool_calls=(MUL,)), TurnPlan(client=(MUL,)), had_tools=True
    )
    assert decide(state) == Finish(status="requires_action")


def test_tool_choice_none_returns_calls_as_is():
    state = after(TurnEnd(tool_calls=(ADD,)), TurnPlan(returned_as_is=(ADD,)))
    assert decide(state) == Finish(status="completed")


def test_max_infer_iters_reached_is_incomplete():
    state = LoopState(max_infer_iters=1).after_model(TurnEnd(tool_calls=(ADD,)), TurnPlan(server=(ADD,)), had_tools=True)
    assert decide(state) == ExecuteTools(calls=(ADD,))
    assert decide(state.after_tools()) == Finish(status="incomplete", incomplete_reason="max_messages")


def test_exhausted_tool_budget_gives_one_last_turn_without_tools():
    plan = TurnPlan(server=(ADD,), rejected=(RejectedCall(call=MUL, reason="max"),), budget_exhausted=True)
    state = after(TurnEnd(tool_calls=(ADD, MUL)), plan).after_tools()
    assert state.tools_exhausted and state.tool_calls_used == 1
    assert decide(state) == CallModel(use_request_tool_choice=False, tools_enabled=False)
    final = state.after_model(TurnEnd(text="done"), TurnPlan(), had_tools=False)
    assert decide(final) == Finish(status="completed")


def test_calls_in_the_no_tools_turn_end_incomplete():
    state = LoopState().after_model(TurnEnd(tool_calls=(ADD,)), TurnPlan(server=(ADD,)), had_tools=False)
    assert decide(state) == Finish(status="incomplete", incomplete_reason="max_messages")


def test_approval_interrupts_after_other_calls_ran():
    state = after(TurnEnd(tool_calls=(ADD, MUL)), TurnPlan(server=(ADD,), approval=(MUL,)))
    assert decide(state) == ExecuteTools(calls=(ADD,))
    assert decide(state.after_tools()) == InterruptForApproval(pending=(MUL,))


def test_output_token_budget_spent_is_incomplete():
    turn = TurnEnd(tool_calls=(ADD,), usage=TokenUsage(output_tokens=5))
    state = LoopState(output_tokens_left=5).after_model(turn, TurnPlan(server=(ADD,)), had_tools=True).after_tools()
    assert state.output_tokens_left == 0
    assert decide(state) == Finish(status="incomplete", incomplete_reason="max_output_tokens")


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"cancelled": True}, Finish(status="cancelled")),
        ({"error": {"code": "server_error", "message": "x"}}, Finish(status="failed", error={"code": "server_error", "message": "x"})),
    ],
)
def test_cancel_and_error_win_over_everything(changes, expected):
    state = replace(after(TurnEnd(tool_calls=(ADD,)), TurnPlan(server=(ADD,))), **changes)
    assert decide(state) == expected


def test_usage_is_summed_over_turns():
    state = LoopState().after_model(TurnEnd(tool_calls=(ADD,), usage=TokenUsage(input_tokens=3, output_tokens=2)), TurnPlan(server=(ADD,)), had_tools=True)
    state = state.after_tools().after_model(TurnEnd(text="x", usage=TokenUsage(input_tokens=7, output_tokens=1)), TurnPlan(), had_tools=True)
    assert state.usage == TokenUsage(input_tokens=10, output_tokens=3)
    assert state.model_calls == 2


def test_approved_calls_run_before_the_first_model_turn():
    state = LoopState(approved_calls=(ADD,))
    assert decide(state) == ExecuteTools(calls=(ADD,))
    ran = state.after_tools()
    assert ran.approved_ran and ran.tool_calls_used == 1
    assert decide(ran) == CallModel(use_request_tool_choice=True)
