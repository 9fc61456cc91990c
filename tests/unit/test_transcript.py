"""Canonical transcript: built in one place from history + new input."""

from __future__ import annotations

import pytest

from troupe.agentloop.model import ToolCall
from troupe.agentloop.transcript import Transcript, build_transcript
from troupe.protocol import InvalidRequest, normalize_input


def user(text: str, id: str | None = None) -> dict:
    return normalize_input([{"role": "user", "content": text, **({"id": id} if id else {})}])[0]


def test_typeless_and_string_input_become_user_messages():
    transcript, accepted = build_transcript([], normalize_input([{"role": "user", "content": "hi"}]))
    assert transcript.to_chat_messages() == [{"role": "user", "content": "hi"}]
    assert accepted[0]["type"] == "message"
    transcript, _ = build_transcript([], normalize_input("hello"))
    assert transcript.to_chat_messages("sys") == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hello"},
    ]


def test_developer_role_goes_upstream_as_system():
    transcript, _ = build_transcript([], normalize_input([{"role": "developer", "content": "rules"}]))
    assert transcript.to_chat_messages() == [{"role": "system", "content": "rules"}]


def test_assistant_history_with_output_text_parts():
    history = normalize_input(
        [
            {"role": "user", "content": "a"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "b"}]},
        ]
    )
    transcript, _ = build_transcript(history, normalize_input("c"))
    assert transcript.to_chat_messages() == [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
    ]


def test_replayed_mcp_call_becomes_a_call_and_its_output():
    history = [
        user("add please", "msg_1"),
        {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "calc", "tools": []},
        {"type": "mcp_call", "id": "mcp_1", "server_label": "calc", "name": "add", "arguments": '{"a":1}', "output": "2"},
        {"type": "mcp_call", "id": "mcp_2", "server_label": "calc", "name": "div", "arguments": "{}", "error": {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": "division by zero"}]}},
        {"type": "mcp_call", "id": "mcp_3", "server_label": "calc", "name": "mul", "arguments": "{}", "error": "boom"},
        {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "calc", "name": "rm", "arguments": "{}"},
    ]
    transcript, _ = build_transcript(history, normalize_input("next"))
    messages = transcript.to_chat_messages()
    # A stored mcp_call does not say which model turn made it, so each replays as its own
    # turn: never tell the model it made dependent calls in parallel.
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant", "tool", "user"]
    assert [m["tool_calls"][0]["function"]["name"] for m in messages[1:7:2]] == ["add", "div", "mul"]
    assert [m["content"] for m in messages[2:7:2]] == ["2", "Error: division by zero", "Error: boom"]
    # Nothing unsettled is left for the loop to run again.
    assert transcript.settled_call_ids() == {"mcp_1", "mcp_2", "mcp_3"}


def test_client_only_items_never_go_upstream():
    history = [
        user("q", "msg_1"),
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "mcp_approval_response", "id": "mcpa_1", "approval_request_id": "mcpr_1", "approve": True},
    ]
    transcript, _ = build_transcript(history, [])
    assert transcript.to_chat_messages() == [{"role": "user", "content": "q"}]


def test_function_call_output_pairs_with_its_call_by_call_id():
    history = [
        user("weather?", "msg_1"),
        {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "get_weather", "arguments": "{}"},
    ]
    new = normalize_input([{"type": "function_call_output", "call_id": "call_a", "output": "sunny"}])
    transcript, accepted = build_transcript(history, new)
    assert transcript.to_chat_messages()[1:] == [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
    ]
    assert accepted == new


def test_unpaired_output_is_a_400_naming_the_item():
    new = normalize_input([{"role": "user", "content": "x"}, {"type": "function_call_output", "call_id": "call_zz", "output": "1"}])
    with pytest.raises(InvalidRequest) as info:
        build_transcript([], new)
    assert (info.value.status, info.value.param, info.value.type) == (400, "input[1].call_id", "invalid_request_error")


def test_a_second_output_for_a_settled_call_is_a_400():
    history = [
        {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "id": "fco_1", "call_id": "call_a", "output": "1"},
    ]
    with pytest.raises(InvalidRequest) as info:
        build_transcript(history, normalize_input([{"type": "function_call_output", "call_id": "call_a", "output": "2"}]))
    assert info.value.param == "input[0].call_id"


def test_unanswered_calls_are_left_out_upstream():
    history = [user("q", "msg_1"), {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "f", "arguments": "{}"}]
    transcript, _ = build_transcript(history, normalize_input("never mind"))
    assert transcript.to_chat_messages() == [{"role": "user", "content": "q"}, {"role": "user", "content": "never mind"}]


def test_tool_messages_follow_their_call_even_when_outputs_come_later():
    transcript = Transcript()
    transcript.add_message("user", "go")
    transcript.add_message("assistant", "calling")
    transcript.add_call(ToolCall(call_id="c1", name="a", arguments="{}"))
    transcript.add_call(ToolCall(call_id="c2", name="b", arguments="{}"))
    transcript.add_output("c1", "A")
    transcript.add_message("user", "interjection")
    transcript.add_output("c2", "B")
    messages = transcript.to_chat_messages()
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "user"]
    assert messages[1]["content"] == "calling" and len(messages[1]["tool_calls"]) == 2


def test_resent_history_items_are_deduplicated():
    history = [user("hi", "msg_1")]
    transcript, accepted = build_transcript(history, [*history, user("again")])
    assert [m["content"] for m in transcript.to_chat_messages()] == ["hi", "again"]
    assert len(accepted) == 1


def test_item_reference_resolves_against_history_or_is_a_400():
    history = [user("remember me", "msg_1")]
    transcript, _ = build_transcript(history, normalize_input([{"type": "item_reference", "id": "msg_1"}]))
    assert [m["content"] for m in transcript.to_chat_messages()] == ["remember me", "remember me"]
    with pytest.raises(InvalidRequest) as info:
        build_transcript(history, normalize_input([{"type": "item_reference", "id": "msg_nope"}]))
    assert info.value.param == "input[0].id"


def test_image_parts_go_upstream_as_image_urls():
    new = normalize_input([{"role": "user", "content": [{"type": "input_text", "text": "what is this"}, {"type": "input_image", "image_url": "https://x/y.png"}]}])
    transcript, _ = build_transcript([], new)
    content = transcript.to_chat_messages()[0]["content"]
    assert content[0] == {"type": "text", "text": "what is this"}
    assert content[1]["image_url"]["url"] == "https://x/y.png"


def _call(call_id: str, item_id: str) -> dict:
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": "f", "arguments": "{}"}


def _output(call_id: str, item_id: str, text: str) -> dict:
    return {"type": "function_call_output", "id": item_id, "call_id": call_id, "output": text}


def test_sequential_tool_turns_are_separate_assistant_messages():
    history = [user("go", "msg_1"), _call("call_1", "fc_1"), _output("call_1", "fco_1", "r1"),
               _call("call_2", "fc_2"), _output("call_2", "fco_2", "r2")]
    transcript, _ = build_transcript(history, [])
    messages = transcript.to_chat_messages()
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "tool"]
    assert [m["tool_calls"][0]["id"] for m in messages[1::2][:2]] == ["call_1", "call_2"]
    assert [m["content"] for m in messages[2::2]] == ["r1", "r2"]


def test_parallel_calls_of_one_turn_share_an_assistant_message():
    history = [user("go", "msg_1"), _call("call_1", "fc_1"), _call("call_2", "fc_2"),
               _output("call_1", "fco_1", "r1"), _output("call_2", "fco_2", "r2"),
               _call("call_3", "fc_3"), _output("call_3", "fco_3", "r3")]
    transcript, _ = build_transcript(history, [])
    messages = transcript.to_chat_messages()
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant", "tool"]
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["call_1", "call_2"]
    assert [c["id"] for c in messages[4]["tool_calls"]] == ["call_3"]


def test_text_and_calls_of_one_turn_share_an_assistant_message():
    transcript, _ = build_transcript([user("go", "msg_1")], [])
    transcript.add_message("assistant", "let me check")
    transcript.items.append(_call("call_1", "fc_1"))
    transcript.add_output("call_1", "r1")
    messages = transcript.to_chat_messages()
    assert messages[1]["content"] == "let me check" and [c["id"] for c in messages[1]["tool_calls"]] == ["call_1"]
    assert messages[2] == {"role": "tool", "tool_call_id": "call_1", "content": "r1"}


def test_a_replayed_mcp_call_error_with_free_form_content_is_text_not_a_crash():
    history = [user("go", "msg_1"), {"type": "mcp_call", "id": "m", "server_label": "s", "name": "n", "arguments": "",
                                     "error": {"type": "mcp_tool_execution_error", "content": [None, 1, {"text": "x"}]}}]
    transcript, _ = build_transcript(history, [])
    assert transcript.to_chat_messages()[-1] == {"role": "tool", "tool_call_id": "m", "content": "Error: x"}


def _compaction(summary: str) -> dict:
    from troupe.agentloop.compaction import encode_summary

    return {"type": "compaction", "id": "cmp_1", "encrypted_content": encode_summary(summary)}


def _answer(text: str) -> dict:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def test_a_compaction_item_replaces_all_before_it_but_the_user_messages():
    call = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}"}
    result = {"type": "function_call_output", "id": "fco_1", "call_id": "c1", "output": "42"}
    # A compaction made before answering "q2": the question stays after the summary.
    history = [user("q1"), _answer("a1"), user("q2"), _compaction("S"), _answer("a2")]
    transcript, _ = build_transcript(history, normalize_input("q3"))
    assert transcript.to_chat_messages("rules") == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "q1"},
        {"role": "system", "content": "Summary of the conversation so far:\nS"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "a2"},
        {"role": "user", "content": "q3"},
    ]
    # One made between tool steps: the calls and an earlier summary go, the summary follows the questions.
    history = [user("q1"), _compaction("S0"), _answer("a1"), user("q2"), call, result, _compaction("S1")]
    transcript, _ = build_transcript(history, [])
    assert [m["content"] for m in transcript.to_chat_messages()] == [
        "q1", "q2", "Summary of the conversation so far:\nS1",
    ]
    assert not transcript.compactable(), "nothing but questions and the summary is left"


def test_an_unfinished_compaction_item_replaces_nothing():
    empty = {"type": "compaction", "id": "cmp_1", "encrypted_content": ""}
    transcript, _ = build_transcript([user("q1"), _answer("a1"), empty], normalize_input([empty, user("q2")]))
    assert [m["content"] for m in transcript.to_chat_messages()] == ["q1", "a1", "q2"]
