"""The context window: the estimate, truncation "auto", and the 400 when a thread does not fit."""

from __future__ import annotations

import pytest

from tests.loop_harness import sim_request as req
from troupe.agentloop.context import estimate_tokens, fit_messages
from troupe.protocol import InvalidRequest
from troupe.runtime import Runtime, RuntimeSettings
from troupe.runtime.settings import ModelSpec

SYSTEM = {"role": "system", "content": "be brief"}


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def test_the_estimate_is_four_characters_a_token_plus_each_message():
    assert estimate_tokens([user("x" * 400)]) == 100 + 4
    assert estimate_tokens([user("x" * 401)]) == 101 + 4
    assert estimate_tokens([]) == 0


def test_fitting_drops_the_oldest_turns_and_keeps_the_system_message():
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "y" * 400}
    messages = [SYSTEM, user("a" * 400), call, result, user("b" * 40)]
    assert fit_messages(messages, 10_000) == messages
    # A turn goes whole: the question with the call and its result.
    assert fit_messages(messages, 60) == [SYSTEM, user("b" * 40)]
    assert fit_messages(messages, 5) is None, "not even the last turn fits"


@pytest.fixture
async def small(tmp_path):
    # The example tools take about 160 of the window.
    models = (ModelSpec(name="sim", kind="sim", context_window=400),)
    rt = Runtime.local(RuntimeSettings(storage_path=str(tmp_path / "t.duckdb"), models=models))
    yield rt
    await rt.close()


async def test_a_thread_past_the_window_is_refused_with_openais_error(small):
    with pytest.raises(InvalidRequest) as info:
        await small.respond("", req(input="word " * 200))  # ~250 tokens
    assert (info.value.code, info.value.param, info.value.status) == ("context_length_exceeded", "input", 400)
    assert "'truncation' to 'auto'" in info.value.message


async def test_truncation_auto_drops_the_oldest_items_of_a_long_thread(small):
    conv = (await small.create_conversation(""))["id"]
    turns = [
        await small.respond("", req(input=f"turn {i} " + "x" * 150, conversation=conv, truncation="auto"))
        for i in range(6)
    ]
    seen = await small.respond("", req(input="[[history]]", conversation=conv, truncation="auto"))
    heard = seen["output"][-1]["content"][0]["text"]
    assert "turn 5" in heard and "turn 0" not in heard, heard
    assert all(r["status"] == "completed" for r in turns)
    # Without truncation the same thread is refused, and nothing is appended to it.
    with pytest.raises(InvalidRequest):
        await small.respond("", req(input="[[history]]", conversation=conv))
    items = (await small.list_conversation_items("", conv, limit=100)).data
    assert len(items) == 14, "six turns and the truncated one, each an input and an answer"


async def test_a_question_too_long_even_alone_fails_the_truncated_response(small):
    # truncation "auto" may drop older turns, never the question itself: the response fails.
    failed = await small.respond("", req(input="[[tokens 5]] " + "x" * 1200, truncation="auto"))
    assert failed["status"] == "failed" and failed["error"]["code"] == "invalid_prompt"
    assert failed["error"]["message"].startswith("Your input exceeds the context window of model 'sim'")
