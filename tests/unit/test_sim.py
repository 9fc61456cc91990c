"""The sim model: directives, decision order, schema generation, streaming, usage."""

from __future__ import annotations

import json
import threading
from typing import Any

import jsonschema
import pytest

from troupe.agentloop.model import (
    ChatRequest,
    ModelClient,
    ModelError,
    ReasoningChunk,
    TextChunk,
    ToolCallArgumentsDelta,
    ToolCallStart,
    TurnEnd,
)
from troupe.sim import model as sim
from troupe.sim.model import (
    SimModel,
    SimSettings,
    generate_from_schema,
    plan_reply,
    split_arguments,
    split_tokens,
    stream_reply,
)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search_docs",
        "description": "Search the documentation.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string", "minLength": 3}}},
    },
}
NO_PARAMS = {"type": "function", "function": {"name": "ping", "description": "Check liveness."}}


def user(text: Any) -> dict[str, Any]:
    return {"role": "user", "content": text}


def request(*messages: dict[str, Any], **kwargs: Any) -> ChatRequest:
    return ChatRequest(model="sim", messages=list(messages), **kwargs)


def ask(text: Any, **kwargs: Any) -> sim.SimReply:
    return plan_reply(request(user(text), **kwargs))


async def collect(model: SimModel, req: ChatRequest) -> list[Any]:
    return [chunk async for chunk in model.stream(req)]


# --- directives -------------------------------------------------------------------------


def test_plain_message_is_echoed() -> None:
    reply = ask("hello there")
    assert (reply.text, reply.finish_reason, reply.tool_calls) == ("You said: hello there", "stop", ())


def test_say_answers_exactly() -> None:
    assert ask("please [[say Bonjour, le monde!]] thanks").text == "Bonjour, le monde!"


def test_tokens_answers_n_deterministic_words() -> None:
    reply = ask("[[tokens 30]]")
    assert len(reply.text.split()) == 30
    assert reply.text == ask("[[tokens 30]]").text
    assert ask("[[tokens 0]]").text == ""


def test_think_emits_reasoning_and_combines() -> None:
    reply = ask("[[think let me see]] [[say 42]]")
    assert (reply.reasoning, reply.text) == ("let me see", "42")
    assert ask("[[think hmm]] hi").text == "You said: hi"


def test_call_with_json_arguments_kept_verbatim_and_nested() -> None:
    args = '{"a": {"b": [[1, 2]], "c": "]]"}}'
    reply = ask(f"[[call anything {args}]]")
    assert reply.finish_reason == "tool_calls"
    [call] = reply.tool_calls
    assert (call.name, call.arguments) == ("anything", args)
    assert call.call_id.startswith("call_")


def test_parallel_calls_in_order_with_unique_ids() -> None:
    reply = ask('[[call b {"x": 1}]] then [[call a {"y": 2}]] [[call get_weather]]', tools=[WEATHER])
    assert [c.name for c in reply.tool_calls] == ["b", "a", "get_weather"]
    assert len({c.call_id for c in reply.tool_calls}) == 3
    assert json.loads(reply.tool_calls[2].arguments) == {"city": "example", "unit": "celsius"}


def test_call_without_json_uses_schema_or_empty_object() -> None:
    assert ask("[[call search_docs]]", tools=[SEARCH]).tool_calls[0].arguments == '{"query": "example"}'
    assert ask("[[call unknown]]", tools=[SEARCH]).tool_calls[0].arguments == "{}"
    assert ask("[[call ping]]", tools=[NO_PARAMS]).tool_calls[0].arguments == "{}"


def test_call_works_with_tool_choice_none_and_unoffered_tool() -> None:
    reply = ask("[[call rogue]]", tools=[WEATHER], tool_choice="none")
    assert [c.name for c in reply.tool_calls] == ["rogue"]


def test_malformed_directive_stays_text() -> None:
    assert ask("[[call broken {nope]]").text == "You said: [[call broken {nope]]"


def test_history_lists_raw_user_messages() -> None:
    reply = plan_reply(
        request(
            {"role": "system", "content": "be nice"},
            user("first"),
            {"role": "assistant", "content": "You said: first"},
            user([{"type": "text", "text": "second [[history]]"}]),
        )
    )
    assert reply.text == "first | second [[history]]"


def test_content_parts_are_read() -> None:
    reply = ask([{"type": "text", "text": "[[say from parts]]"}, {"type": "image_url", "image_url": {}}])
    assert reply.text == "from parts"


def test_latency_directive_overrides_settings() -> None:
    settings = SimSettings(ttft_ms=5, itl_ms=7)
    assert plan_reply(request(user("[[latency ttft=100]]")), settings=settings).itl_ms == 7
    reply = plan_reply(request(user("[[latency ttft=100 itl=3]]")), settings=settings)
    assert (reply.ttft_ms, reply.itl_ms) == (100, 3)
    assert plan_reply(request(user("hi")), settings=settings).ttft_ms == 5


# --- decision order ---------------------------------------------------------------------


def tool_turn(text: str, *results: tuple[str, str, str]) -> ChatRequest:
    """A conversation where the assistant called tools and the results came back."""
    calls = [{"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}} for cid, name, _ in results]
    outputs = [{"role": "tool", "tool_call_id": cid, "content": out} for cid, _, out in results]
    return request(user(text), {"role": "assistant", "content": None, "tool_calls": calls}, *outputs)


def test_tool_results_are_summarised_in_order() -> None:
    req = tool_turn("[[call a]] [[call b]]", ("c1", "a", "sunny"), ("c2", "b", "12 C"))
    reply = plan_reply(req)
    assert (reply.text, reply.finish_reason, reply.tool_calls) == ("a -> sunny\nb -> 12 C", "stop", ())


def test_loop_calls_again_after_results() -> None:
    reply = plan_reply(tool_turn("[[loop ping]]", ("c1", "ping", "pong")))
    assert [c.name for c in reply.tool_calls] == ["ping"]
    assert plan_reply(request(user("[[loop ping]]"))).tool_calls[0].name == "ping"


def test_then_calls_a_second_round_after_the_first_results_then_answers() -> None:
    script = '[[call a {"x": 1}]] [[call a {"x": 2}]] [[then b {"all": true}]] [[then c]]'
    first = plan_reply(request(user(script)))
    assert [(c.name, c.arguments) for c in first.tool_calls] == [("a", '{"x": 1}'), ("a", '{"x": 2}')]
    second = plan_reply(tool_turn(script, ("c1", "a", "one"), ("c2", "a", "two")))
    assert [(c.name, c.arguments) for c in second.tool_calls] == [("b", '{"all": true}'), ("c", "{}")]
    done = tool_turn(script, ("c1", "a", "one"), ("c3", "b", "both"))
    assert (plan_reply(done).text, plan_reply(done).tool_calls) == ("a -> one\nb -> both", ())
    assert plan_reply(request(user("[[then b]] hi"))).text == "You said: hi", "a second round needs a first"


def test_asked_to_summarise_it_counts_the_messages_by_role() -> None:
    from troupe.agentloop.compaction import SUMMARY_PROMPT

    thread = tool_turn("[[call a]]", ("c1", "a", "sunny")).messages
    reply = plan_reply(request({"role": "system", "content": "be brief"}, *thread, user(SUMMARY_PROMPT)))
    assert (reply.text, reply.tool_calls) == ("Summary of 4 messages: 1 system, 1 user, 1 assistant, 1 tool.", ())
    assert reply.usage.output_tokens == 12, "its words"


def test_a_summary_after_the_question_stands_for_its_tool_results() -> None:
    summary = {"role": "system", "content": "Summary of the conversation so far:\nThe weather was sunny."}
    assert plan_reply(request(user("[[call a]]"), summary)).text == "From the summary: The weather was sunny."
    assert [c.name for c in plan_reply(request(user("[[loop a]]"), summary)).tool_calls] == ["a"]
    # Before the question it is context, and the question's directives apply.
    assert plan_reply(request(summary, user("[[say hi]]"))).text == "hi"


def test_fail_beats_everything() -> None:
    assert plan_reply(tool_turn("[[fail 500]] [[say x]]", ("c1", "a", "b"))).fail_status == 500


def test_call_beats_say() -> None:
    assert ask("[[say no]] [[call yes {}]]").tool_calls[0].name == "yes"


def test_first_answer_directive_wins() -> None:
    assert ask("[[tokens 2]] [[say later]]").text == "alpha bravo"


# --- tool choice and word matching -------------------------------------------------------


def test_weather_question_calls_get_weather() -> None:
    reply = ask("What is the weather in Paris?", tools=[SEARCH, WEATHER])
    assert [c.name for c in reply.tool_calls] == ["get_weather"]
    assert json.loads(reply.tool_calls[0].arguments)["city"] == "example"


def test_word_matching_picks_most_matches_then_first() -> None:
    # "search" matches search_docs; "current weather city" match get_weather three times.
    reply = ask("search the current weather for my city", tools=[SEARCH, WEATHER])
    assert reply.tool_calls[0].name == "get_weather"
    tie = ask("documentation weather", tools=[SEARCH, WEATHER])
    assert tie.tool_calls[0].name == "search_docs"


def test_no_match_or_tool_choice_none_answers_text() -> None:
    assert ask("hello world", tools=[WEATHER]).text == "You said: hello world"
    assert ask("the weather?", tools=[WEATHER], tool_choice="none").tool_calls == ()
    # Three-letter words do not count.
    assert ask("get", tools=[WEATHER]).tool_calls == ()


def test_tool_choice_required_and_forced() -> None:
    assert ask("hi", tools=[SEARCH, WEATHER], tool_choice="required").tool_calls[0].name == "search_docs"
    forced = {"type": "function", "function": {"name": "get_weather"}}
    reply = ask("hi", tools=[SEARCH, WEATHER], tool_choice=forced)
    assert reply.tool_calls[0].name == "get_weather"
    assert reply.finish_reason == "tool_calls"


# --- response_format and max_tokens -------------------------------------------------------


def test_json_schema_response_format() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 5}}, "required": ["n"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    reply = ask("hi", response_format=fmt)
    assert json.loads(reply.text) == {"n": 5}


def test_json_object_response_format() -> None:
    assert json.loads(ask("[[say yes]]", response_format={"type": "json_object"}).text) == {"answer": "yes"}


def test_max_tokens_truncates_with_length() -> None:
    reply = ask("[[tokens 10]]", max_tokens=3)
    assert (reply.text, reply.finish_reason) == ("alpha bravo charlie", "length")
    assert ask("[[tokens 3]]", max_tokens=3).finish_reason == "stop"


# --- usage ------------------------------------------------------------------------------


def test_usage_counts_words() -> None:
    req = request(
        {"role": "system", "content": "two words"},
        user([{"type": "text", "text": "three more words"}]),
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
        ]},
        {"role": "tool", "tool_call_id": "c", "content": "ok"},
        user("[[think a b c]] [[call g {\"k\": \"v w\"}]]"),
    )
    usage = plan_reply(req).usage
    # 2 + 3 + 2 (arguments) + 1 + 9 (the last user message, directives included)
    assert usage.input_tokens == 17
    # 3 reasoning + 3 argument words
    assert (usage.output_tokens, usage.reasoning_tokens) == (6, 3)


# --- fail ---------------------------------------------------------------------------------


async def test_fail_raises_model_error_every_time() -> None:
    model = SimModel()
    for _ in range(2):
        with pytest.raises(ModelError) as caught:
            await collect(model, request(user("[[fail 429]]")))
        assert caught.value.status == 429


async def test_fail_once_then_succeeds_per_conversation() -> None:
    model = SimModel()
    req = request(user("[[fail 503 once]] [[say recovered]]"))
    with pytest.raises(ModelError):
        await collect(model, req)
    assert (await collect(model, req))[-1].text == "recovered"
    # Another conversation (another key) fails on its own first call.
    with pytest.raises(ModelError):
        await collect(model, request(user("[[fail 503 once]] other")))
    # A fresh model has no memory.
    with pytest.raises(ModelError):
        await collect(SimModel(), req)


def test_fail_once_fires_once_under_concurrency() -> None:
    model = SimModel()
    req = request(user("[[fail 500 once]]"))
    barrier = threading.Barrier(8)
    statuses: list[int | None] = []

    def call() -> None:
        barrier.wait()
        statuses.append(model.plan(req).fail_status)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses, key=str) == [500] + [None] * 7


# --- streaming ----------------------------------------------------------------------------


def test_split_tokens_roundtrips() -> None:
    for text in ["a -> b\nc -> d", "  lead and trail  ", "", "one", "x\n\n y"]:
        assert "".join(split_tokens(text)) == text
    assert split_tokens("a b\nc") == ["a", " b", "\nc"]


def test_split_arguments_uses_several_pieces() -> None:
    pieces = split_arguments('{"city": "Paris"}')
    assert len(pieces) == 3 and "".join(pieces) == '{"city": "Paris"}'
    assert split_arguments("{}") == ["{", "}"]


async def test_stream_order_and_assembly() -> None:
    model = SimModel()
    assert isinstance(model, ModelClient)
    chunks = await collect(model, request(user('[[think hmm ok]] [[call f {"a": 1}]] [[call g]]')))
    kinds = [type(c).__name__ for c in chunks]
    assert kinds[:2] == ["ReasoningChunk", "ReasoningChunk"]
    assert kinds[-1] == "TurnEnd" and kinds.count("TurnEnd") == 1
    starts = [c for c in chunks if isinstance(c, ToolCallStart)]
    end = chunks[-1]
    assert [s.name for s in starts] == ["f", "g"]
    assert [s.call_id for s in starts] == [c.call_id for c in end.tool_calls]
    for index, call in enumerate(end.tool_calls):
        deltas = [c.delta for c in chunks if isinstance(c, ToolCallArgumentsDelta) and c.index == index]
        assert "".join(deltas) == call.arguments
    assert len([c for c in chunks if isinstance(c, ToolCallArgumentsDelta) and c.index == 0]) > 1
    assert end.finish_reason == "tool_calls" and end.reasoning == "hmm ok"


async def test_text_deltas_reassemble_text() -> None:
    chunks = await collect(SimModel(), request(user("[[say line one\nline  two]]")))
    text = "".join(c.text for c in chunks if isinstance(c, TextChunk))
    end = chunks[-1]
    assert isinstance(end, TurnEnd) and text == end.text == "line one\nline  two"
    assert not any(isinstance(c, ReasoningChunk) for c in chunks)


async def test_latency_paces_stream_with_injected_sleep() -> None:
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    model = SimModel(SimSettings(itl_ms=10), sleep=fake_sleep)
    await collect(model, request(user("[[latency ttft=200]] [[tokens 3]]")))
    assert slept == [0.2, 0.01, 0.01]

    slept.clear()
    reply = sim.SimReply(ttft_ms=50)  # nothing to stream: the turn still waits its ttft
    assert [c async for c in stream_reply(reply, sleep=fake_sleep)][-1].text == ""
    assert slept == [0.05]


# --- schema generation ----------------------------------------------------------------------


SCHEMAS: list[dict[str, Any]] = [
    {"type": "string", "minLength": 12},
    {"type": "string", "maxLength": 3},
    {"type": "integer", "minimum": 10, "maximum": 20},
    {"type": "integer", "maximum": -4},
    {"type": "integer", "exclusiveMinimum": 1, "multipleOf": 5},
    {"type": "number", "exclusiveMinimum": 1.5, "exclusiveMaximum": 2},
    {"type": "array", "items": {"type": "boolean"}, "minItems": 3},
    {"type": "array", "items": {"type": "string"}, "maxItems": 0},
    {"type": ["string", "null"]},
    {"const": {"fixed": [1]}},
    {"anyOf": [{"type": "integer"}, {"type": "string"}]},
    {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "kind": {"type": "string", "enum": ["cat", "dog"]},
            "tags": {"type": "array", "items": {"type": "string", "minLength": 9}, "minItems": 2},
            "owner": {"$ref": "#/$defs/Person"},
            "legacy": {"$ref": "#/definitions/Legacy"},
            "pick": {"oneOf": [{"$ref": "#/$defs/Person"}, {"type": "null"}]},
            "both": {"allOf": [{"$ref": "#/$defs/Person"}, {"properties": {"x": {"type": "boolean"}}, "required": ["x"]}]},
        },
        "required": ["name", "kind", "tags", "owner", "extra"],
        "additionalProperties": False,
        "$defs": {
            "Person": {
                "type": "object",
                "properties": {"age": {"type": "integer", "minimum": 18}, "address": {"properties": {"zip": {}}}},
                "required": ["age"],
            }
        },
        "definitions": {"Legacy": {"type": "number", "maximum": 0.5}},
    },
    {
        "$ref": "#/$defs/Node",
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {"value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
                "required": ["value"],
            }
        },
    },
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_generated_values_validate(schema: dict[str, Any]) -> None:
    # additionalProperties False plus a required name with no property would be unsatisfiable.
    schema = {k: v for k, v in schema.items() if k != "additionalProperties"}
    value = generate_from_schema(schema)
    jsonschema.validate(value, schema)
    assert generate_from_schema(schema) == value  # deterministic
    json.dumps(value)


def test_generated_values_follow_the_rules() -> None:
    obj = generate_from_schema(SCHEMAS[11])
    assert obj["kind"] == "cat" and obj["owner"]["age"] == 18 and obj["extra"] == "example"
    assert obj["tags"] == ["examplexx", "examplexx"] and obj["pick"] == {"age": 18, "address": {"zip": "example"}}
    assert obj["both"]["x"] is True and obj["legacy"] == 0.5
    assert generate_from_schema({"type": "string", "format": "date-time"}) == "example"
    assert generate_from_schema({}) == "example"
    assert generate_from_schema({"type": "integer"}) == 1
    assert generate_from_schema({"type": "boolean"}) is True


def test_public_names() -> None:
    for name in sim.__all__:
        assert hasattr(sim, name)


# --- the output cap ---------------------------------------------------------------------------

HUGE = {"type": "object", "properties": {"blob": {"type": "string", "minLength": 100_000_000}}, "required": ["blob"]}


def _json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}


def test_a_schema_asking_for_more_than_the_cap_is_answered_cut_at_it() -> None:
    reply = ask("x", response_format=_json_schema(HUGE))
    assert reply.finish_reason == "length"
    assert len(reply.text) == sim.MAX_OUTPUT_CHARS and reply.text.startswith('{"blob": "examplexxx')
    many = {"type": "array", "items": {"type": "integer"}, "minItems": 10**12}
    reply = ask("x", response_format=_json_schema({"type": "object", "properties": {"n": many}}))
    assert reply.finish_reason == "length" and len(reply.text) <= sim.MAX_OUTPUT_CHARS


def test_an_answer_within_the_cap_is_whole_and_valid() -> None:
    schema = {"type": "object", "properties": {"blob": {"type": "string", "minLength": 1000}}, "required": ["blob"]}
    reply = ask("x", response_format=_json_schema(schema))
    assert reply.finish_reason == "stop"
    jsonschema.validate(json.loads(reply.text), schema)


def test_tokens_past_the_cap_are_cut_and_tool_arguments_stay_within_it() -> None:
    reply = ask("[[tokens 100000000]]")
    assert reply.finish_reason == "length" and len(reply.text) <= sim.MAX_OUTPUT_CHARS
    blob = {"type": "function", "function": {"name": "put", "parameters": HUGE}}
    (call,) = ask("[[call put]]", tools=[blob]).tool_calls
    assert len(call.arguments) <= sim.MAX_OUTPUT_CHARS + 20
