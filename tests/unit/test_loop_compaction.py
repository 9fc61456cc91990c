"""Automatic compaction (``context_management``): when the loop compacts, what the client sees
(the ``compaction`` item, its events, the usage), and what goes upstream before and after.

The sim writes the summary (it counts the messages it was sent, by role), so every summary
here is known in advance; ``RecordingModel`` keeps each upstream Chat Completions request.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes import RecordingModel, ScriptedModel, text_turn
from tests.loop_harness import both, check_stream, history_of, run
from tests.loop_harness import sim_request as req
from troupe.agentloop.compaction import SUMMARY_PROMPT, decode_summary
from troupe.agentloop.model import ModelError
from troupe.agentloop.tools import LocalFunctionExecutor
from troupe.protocol import InvalidRequest, parse_create_request
from troupe.runtime import Runtime, RuntimeSettings
from troupe.runtime.settings import ModelSpec
from troupe.sim.model import SimModel


def compaction(threshold: int | None = None) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {"type": "compaction"}
    if threshold is not None:
        entry["compact_threshold"] = threshold
    return [entry]


def message(role: str, text: str) -> dict[str, Any]:
    kind = "input_text" if role == "user" else "output_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


# An earlier turn of about 200 estimated tokens (800 characters).
ADA, NOTED = "My name is Ada. " + "x" * 400, "Noted, Ada. " + "y" * 400
HISTORY = [message("user", ADA), message("assistant", NOTED)]
SUMMARY_OF_TURN = "Summary of 3 messages: 2 user, 1 assistant."
"""The sim's summary of HISTORY plus the question: what it was sent before the summary prompt."""


def sim() -> RecordingModel:
    return RecordingModel(SimModel())


def wire(out: Any) -> list[tuple[Any, ...]]:
    """The stream's events as (type, output_index, item type) where they have them."""
    return [(e["type"], e.get("output_index"), (e.get("item") or {}).get("type")) for e in out.events]


async def test_a_thread_past_the_threshold_is_compacted_before_the_model_call():
    body = {"model": "sim", "input": "[[say fine]]", "context_management": compaction(100)}
    out, model = await both(body, sim, history=HISTORY)

    assert out.output_types == ["compaction", "message"] and out.text == "fine"
    item = out.response["output"][0]
    assert item["id"].startswith("cmp_") and decode_summary(item["encrypted_content"]) == SUMMARY_OF_TURN
    assert wire(out) == [
        ("response.created", None, None),
        ("response.in_progress", None, None),
        ("response.output_item.added", 0, "compaction"),
        ("response.compaction.compacting", 0, None),
        ("response.output_item.done", 0, "compaction"),
        ("response.output_item.added", 1, "message"),
        ("response.content_part.added", 1, None),
        ("response.output_text.delta", 1, None),
        ("response.output_text.done", 1, None),
        ("response.content_part.done", 1, None),
        ("response.output_item.done", 1, "message"),
        ("response.completed", None, None),
    ]
    assert out.events[2]["item"]["encrypted_content"] == "", "the item opens before the summary is written"
    assert out.events[4]["item"] == item

    summary_call, answer_call = model.calls
    assert summary_call.messages == [
        {"role": "user", "content": ADA},
        {"role": "assistant", "content": NOTED},
        {"role": "user", "content": "[[say fine]]"},
        {"role": "user", "content": SUMMARY_PROMPT},
    ]
    assert (summary_call.tools, summary_call.response_format, summary_call.max_tokens) == ([], None, None)
    # After it, the model sees the user messages, the summary, and the question.
    assert answer_call.messages == [
        {"role": "user", "content": ADA},
        {"role": "system", "content": f"Summary of the conversation so far:\n{SUMMARY_OF_TURN}"},
        {"role": "user", "content": "[[say fine]]"},
    ]
    # The summary call counts in the usage: 8 words of summary, 1 of answer.
    assert out.response["usage"]["output_tokens"] == 8 + 1
    model_traces = [t for t in out.traces if t.kind == "model"]
    assert len(model_traces) == 2
    assert out.response["usage"]["input_tokens"] == sum(t.input_tokens for t in model_traces)


async def test_a_thread_under_the_threshold_or_with_nothing_but_questions_is_not_compacted():
    under = {"model": "sim", "input": "[[say fine]]", "context_management": compaction(100_000)}
    out, model = await both(under, sim, history=HISTORY)
    assert out.output_types == ["message"] and len(model.calls) == 1
    assert [m["content"] for m in model.calls[0].messages] == [ADA, NOTED, "[[say fine]]"]
    # Past the threshold, but only user messages: a summary could leave nothing out.
    alone = {"model": "sim", "input": [message("user", ADA), message("user", "[[say fine]]")],
             "context_management": compaction(10)}  # fmt: skip
    out, model = await both(alone, sim)
    assert out.output_types == ["message"] and len(model.calls) == 1


async def test_the_transcript_growing_past_the_threshold_between_tool_steps_is_compacted_there():
    tools = LocalFunctionExecutor({"read_file": lambda: "z" * 2000})  # about 500 tokens of output
    body = {"model": "sim", "input": "[[call read_file]]", "context_management": compaction(200)}
    out, model = await both(body, sim, executors=[tools])

    assert out.output_types == ["function_call", "function_call_output", "compaction", "message"]
    summary = "Summary of 3 messages: 1 user, 1 assistant, 1 tool."
    assert decode_summary(out.response["output"][2]["encrypted_content"]) == summary
    first, summary_call, answer_call = model.calls
    assert [m["role"] for m in first.messages] == ["user"]
    assert [m["role"] for m in summary_call.messages] == ["user", "assistant", "tool", "user"]
    assert summary_call.messages[2]["content"] == "z" * 2000
    # The tool's call and result are left to the summary: the model goes on from it.
    assert answer_call.messages == [
        {"role": "user", "content": "[[call read_file]]"},
        {"role": "system", "content": f"Summary of the conversation so far:\n{summary}"},
    ]
    assert out.text == f"From the summary: {summary}"


async def test_a_later_turn_of_the_chain_sees_only_the_compacted_context():
    first, _ = await both({"model": "sim", "input": "[[say fine]]", "context_management": compaction(100)}, sim,
                          history=HISTORY)  # fmt: skip
    # The next turn asks for no compaction: the thread it continues is compacted all the same.
    later, model = await both({"model": "sim", "input": "[[history]]"}, sim, history=HISTORY + history_of(first))
    assert model.calls[0].messages == [
        {"role": "user", "content": ADA},
        {"role": "system", "content": f"Summary of the conversation so far:\n{SUMMARY_OF_TURN}"},
        {"role": "user", "content": "[[say fine]]"},
        {"role": "assistant", "content": "fine"},
        {"role": "user", "content": "[[history]]"},
    ]
    assert later.text == f"{ADA} | [[say fine]] | [[history]]"


async def test_without_a_threshold_the_models_context_window_sets_it():
    # 80% of the window: 800 of 1000. The thread is about 870 tokens: it fits, past 800.
    history = [message("user", "q " + "x" * 1700), message("assistant", "a " + "y" * 1700)]
    body = {"model": "sim", "input": "[[say fine]]", "context_management": compaction()}
    out, _ = await both(body, sim, history=history, context_window=1000)
    assert out.output_types == ["compaction", "message"]
    out, _ = await both(body, sim, history=history, context_window=2000)
    assert out.output_types == ["message"]


async def test_a_failed_summary_fails_the_response_and_its_empty_item_replaces_nothing():
    body = {"model": "m", "input": "and now?", "context_management": compaction(100)}
    failed = await run(body, ScriptedModel(ModelError("overloaded", status=503)), history=HISTORY)
    check_stream(failed)
    assert failed.response["status"] == "failed" and failed.response["error"]["code"] == "server_error"
    assert failed.response["output"] == [{"id": failed.response["output"][0]["id"], "encrypted_content": "",
                                          "type": "compaction"}]  # fmt: skip
    assert [e["type"] for e in failed.events][2:] == [
        "response.output_item.added", "response.output_item.done", "error", "response.failed",
    ]  # fmt: skip
    # A thread that holds it goes on uncompacted.
    model = ScriptedModel(text_turn("ok"))
    await run({"model": "m", "input": "again"}, model, history=HISTORY + history_of(failed))
    assert [m["content"] for m in model.calls[0].messages] == [ADA, NOTED, "and now?", "again"]
    # An empty summary is a failure too; what its call cost is counted.
    empty = await run(body, ScriptedModel(text_turn("", input_tokens=210)), history=HISTORY)
    assert empty.response["status"] == "failed" and empty.response["output"][0]["encrypted_content"] == ""
    assert empty.response["error"]["message"] == "The model wrote an empty summary of the thread."
    assert empty.response["usage"]["input_tokens"] == 210


@pytest.mark.parametrize(
    ("context_management", "param", "code"),
    [
        ([{"type": "truncation"}], "context_management[0].type", "invalid_value"),
        ([{"type": "compaction", "compact_threshold": 0}], "context_management[0].compact_threshold", "invalid_value"),
        ([{"type": "compaction", "compact_threshold": "1000"}], "context_management[0].compact_threshold",
         "invalid_type"),
        ([{"type": "compaction", "compact_threshold": 1.5}], "context_management[0].compact_threshold",
         "invalid_type"),
        (compaction(100) + compaction(200), "context_management[1]", "invalid_value"),
    ],
)
def test_a_context_management_entry_troupe_cannot_honour_is_a_400_naming_it(context_management, param, code):
    with pytest.raises(InvalidRequest) as info:
        parse_create_request({"model": "sim", "input": "hi", "context_management": context_management})
    assert (info.value.status, info.value.param, info.value.code) == (400, param, code)


async def test_no_threshold_and_no_context_window_is_a_400_before_anything_runs(tmp_path):
    rt = Runtime.local(RuntimeSettings(storage_path=str(tmp_path / "t.duckdb")))
    try:
        with pytest.raises(InvalidRequest) as info:
            await rt.respond("", req(input="hi", context_management=compaction()))
        assert (info.value.param, info.value.code) == ("context_management[0].compact_threshold",
                                                       "missing_required_parameter")  # fmt: skip
        assert "has no context_window configured" in info.value.message
        assert (await rt.list_responses("", limit=10)).data == [], "nothing stored"
    finally:
        await rt.close()


async def test_the_stored_response_and_the_conversation_keep_the_compaction_item(tmp_path):
    # The server's tools (about 160 tokens) are offered with every call.
    models = (ModelSpec(name="sim", kind="sim"),)
    rt = Runtime.local(RuntimeSettings(storage_path=str(tmp_path / "t.duckdb"), models=models))
    try:
        conv = (await rt.create_conversation(""))["id"]
        await rt.respond("", req(input="[[say noted]] " + "x" * 2000, conversation=conv))
        compacted = await rt.respond("", req(input="[[say fine]]", conversation=conv,
                                             context_management=compaction(300)))  # fmt: skip
        assert [i["type"] for i in compacted["output"]] == ["compaction", "message"]
        assert (await rt.get_response("", compacted["id"]))["output"] == compacted["output"]
        items = (await rt.list_conversation_items("", conv, limit=100, order="asc")).data
        assert [i["type"] for i in items] == ["message", "message", "message", "compaction", "message"]
        # A later compaction summarises what the model saw: the compacted thread (the earlier
        # summary, a system message, and no longer the first answer), not the whole of it.
        later = await rt.respond("", req(input="[[say again]]", conversation=conv,
                                         context_management=compaction(300)))  # fmt: skip
        assert decode_summary(later["output"][0]["encrypted_content"]) == (
            "Summary of 5 messages: 1 system, 3 user, 1 assistant."
        )
        assert later["usage"]["output_tokens"] == 10 + 1, "the summary's words and the answer's"
    finally:
        await rt.close()
