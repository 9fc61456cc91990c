"""Compaction: the summary's encoding, the compact request, and a compaction item as input."""

from __future__ import annotations

import pytest

from tests.loop_harness import sim_request as req
from troupe.agentloop.compaction import decode_summary, encode_summary, parse_compact_request
from troupe.protocol import InvalidRequest


def test_a_summary_round_trips_and_a_foreign_one_is_refused():
    assert decode_summary(encode_summary("Ada asked about tides. ü")) == "Ada asked about tides. ü"
    with pytest.raises(InvalidRequest) as info:
        decode_summary("gAAAAABopaque-openai-blob", param="input[0].encrypted_content")
    assert info.value.param == "input[0].encrypted_content"


def test_the_compact_request_takes_its_own_parameters_only():
    assert parse_compact_request({"model": "sim", "input": "hi", "image": None}).model == "sim"
    with pytest.raises(InvalidRequest) as info:  # asked for, not available: refused, not ignored
        parse_compact_request({"model": "sim", "input": "hi", "image": {"context_compression": "enabled"}})
    assert (info.value.param, info.value.code) == ("image", "unsupported_parameter")
    with pytest.raises(InvalidRequest) as info:
        parse_compact_request({"model": "sim", "stream": True})
    assert (info.value.param, info.value.code) == ("stream", "unknown_parameter")
    with pytest.raises(InvalidRequest) as info:
        parse_compact_request({"input": "hi"})
    assert info.value.param == "model"


async def test_compacting_a_thread_keeps_its_user_messages_and_a_summary(runtime):
    first = await runtime.respond("", req(input="My name is Ada."))
    second = await runtime.respond("", req(input="[[say noted]]", previous_response_id=first["id"]))
    compacted = await runtime.compact("", parse_compact_request({"model": "sim", "previous_response_id": second["id"],
                                                                 "input": "and one more"}))  # fmt: skip
    assert compacted["object"] == "response.compaction" and compacted["usage"]["total_tokens"] > 0
    *users, item = compacted["output"]
    assert [u["content"][0]["text"] for u in users] == ["My name is Ada.", "[[say noted]]", "and one more"]
    assert item["type"] == "compaction" and item["id"].startswith("cmp_")
    # The sim's summary counts what it was sent: the thread (three questions, two answers).
    assert decode_summary(item["encrypted_content"]) == "Summary of 5 messages: 3 user, 2 assistant."
    # The compacted items as the next input (the summary goes upstream: the test below).
    after = await runtime.respond("", req(input=[*compacted["output"], {"role": "user", "content": "[[history]]"}]))
    assert after["status"] == "completed"
    assert after["output"][-1]["content"][0]["text"] == "My name is Ada. | [[say noted]] | and one more | [[history]]"


async def test_a_compaction_item_made_elsewhere_is_a_400(runtime):
    foreign = {"type": "compaction", "id": "cmp_1", "encrypted_content": "opaque"}
    with pytest.raises(InvalidRequest) as info:
        await runtime.respond("", req(input=[foreign, {"role": "user", "content": "hi"}]))
    assert info.value.param == "input[0].encrypted_content"


def test_a_compaction_item_goes_upstream_as_a_system_message_with_its_summary():
    from troupe.agentloop.transcript import build_transcript

    item = {"type": "compaction", "id": "cmp_1", "encrypted_content": encode_summary("Ada likes tides.")}
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and now?"}]}
    transcript, _ = build_transcript([], [item, user])
    assert transcript.to_chat_messages("be brief") == [
        {"role": "system", "content": "be brief"},
        {"role": "system", "content": "Summary of the conversation so far:\nAda likes tides."},
        {"role": "user", "content": "and now?"},
    ]
