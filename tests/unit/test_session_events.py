"""A turn's Responses events as session events (troupe.protocol.sessions.TurnEvents), and the
turn's status from its responses."""

from __future__ import annotations

from troupe.protocol.sessions import TurnEvents, required_actions, turn_status

CALL = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": ""}
DONE_CALL = {**CALL, "arguments": '{"city": "Paris"}', "status": "completed"}
LIST = {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "s", "tools": []}
MESSAGE = {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}


def events(*pairs):
    return [{"sequence_number": n, **event} for n, event in enumerate(pairs)]


def test_items_are_counted_over_the_turn_and_a_function_call_is_announced_complete() -> None:
    # The second response of a turn whose first showed two items: output_index goes on from 2,
    # mcp_list_tools is not a session item, and the call is announced once its arguments are whole.
    translate = TurnEvents("sess_1", "turn_1", "resp_abc", offset=2)
    stream = events(
        {"type": "response.output_item.added", "output_index": 0, "item": LIST},
        {"type": "response.output_item.done", "output_index": 0, "item": LIST},
        {"type": "response.output_item.added", "output_index": 1, "item": CALL},
        {"type": "response.function_call_arguments.delta", "output_index": 1, "item_id": "fc_1", "delta": "{"},
        {"type": "response.output_item.done", "output_index": 1, "item": DONE_CALL},
        {"type": "response.output_item.added", "output_index": 2, "item": MESSAGE},
        {"type": "response.content_part.added", "output_index": 2, "item_id": "msg_1", "content_index": 0,
         "part": {"type": "output_text", "text": "", "annotations": []}},
        {"type": "response.output_text.delta", "output_index": 2, "item_id": "msg_1", "content_index": 0, "delta": "hi"},
    )  # fmt: skip
    out = [e for event in stream for e in translate.translate(event)]
    assert [(e["type"], e.get("output_index")) for e in out] == [
        ("agent.session.turn.item.added", 2), ("agent.session.turn.item.done", 2),
        ("agent.session.turn.item.added", 3), ("agent.session.turn.content_part.added", 3),
        ("agent.session.turn.output_text.delta", 3),
    ]  # fmt: skip
    assert out[0]["item"] == {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "get_weather",
                              "arguments": {"city": "Paris"}, "status": "completed", "turn_id": "turn_1"}  # fmt: skip
    assert {(e["session_id"], e["turn_id"]) for e in out} == {("sess_1", "turn_1")} and translate.shown == 4
    assert len({e["event_id"] for e in out}) == len(out) and out[0]["event_id"].startswith("sevt_abc_")
    again = TurnEvents("sess_1", "turn_1", "resp_abc", offset=2)  # a reconnect reads the same ids
    assert [e["event_id"] for event in stream for e in again.translate(event)] == [e["event_id"] for e in out]


def test_a_turns_status_follows_its_last_response() -> None:
    turn = {"id": "turn_1", "responses": ["resp_1"], "results": {}, "cancelled": False}
    waiting = {"status": "completed", "output": [DONE_CALL]}
    answered = {"status": "completed", "output": [DONE_CALL, {"type": "function_call_output", "call_id": "call_1"}]}
    assert turn_status(turn, {"status": "queued"}) == "queued"
    assert turn_status({**turn, "responses": ["resp_1", "resp_2"]}, {"status": "queued"}) == "in_progress"
    assert turn_status(turn, waiting) == "waiting" and turn_status(turn, answered) == "completed"
    assert turn_status(turn, {"status": "incomplete"}) == "failed" and turn_status(turn, None) == "failed"
    assert turn_status({**turn, "cancelled": True}, waiting) == "cancelled"
    assert required_actions("turn_1", waiting, {}) == [{"type": "function_call", "turn_id": "turn_1",
                                                        "call_id": "call_1", "name": "get_weather",
                                                        "arguments": {"city": "Paris"}}]  # fmt: skip
    assert required_actions("turn_1", waiting, {"call_1": {"success": True}}) == []
