"""CreateResponseRequest: every accepted form and every rejection rule."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses.response_create_params import ResponseCreateParamsBase

from troupe.protocol import (
    CreateResponseRequest,
    InvalidRequest,
    build_response,
    new_id,
    parse_create_request,
)

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
MCP = {
    "type": "mcp",
    "server_label": "docs",
    "server_url": "https://mcp.example.com/sse",
    "headers": {"X-Api-Key": "secret"},
}


def body(**params: Any) -> dict[str, Any]:
    return {"model": "sim", **params}


def reject(params: dict[str, Any]) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        parse_create_request(params)
    err = info.value
    assert err.status == 400
    assert err.type == "invalid_request_error"
    assert err.to_body()["error"]["param"] == err.param
    return err


# --- accepted forms --------------------------------------------------------


def test_minimal_body_has_api_defaults() -> None:
    req = parse_create_request({"model": "sim"})
    assert req.input == ""
    assert (req.store, req.stream, req.background, req.parallel_tool_calls) == (True, False, False, True)
    assert req.tool_choice == "auto"
    assert req.tools == []
    assert req.max_infer_iters == 10
    assert req.input_items() == []


def test_string_input_is_one_user_message() -> None:
    req = parse_create_request(body(input="hello"))
    (item,) = req.input_items()
    assert item["type"] == "message" and item["role"] == "user" and item["status"] == "completed"
    assert item["id"].startswith("msg_")
    assert item["content"] == [{"type": "input_text", "text": "hello"}]


def test_input_items_are_stable_across_calls() -> None:
    req = parse_create_request(body(input=[{"role": "user", "content": "hi"}]))
    first = req.input_items()
    first[0]["role"] = "mutated"
    assert req.input_items()[0]["id"] == first[0]["id"]
    assert req.input_items()[0]["role"] == "user"


@pytest.mark.parametrize("role", ["user", "assistant", "system", "developer"])
def test_typeless_messages_of_every_role(role: str) -> None:
    req = parse_create_request(body(input=[{"role": role, "content": "x"}]))
    (item,) = req.input_items()
    assert item["type"] == "message" and item["role"] == role
    part = item["content"][0]
    if role == "assistant":
        assert part == {"type": "output_text", "text": "x", "annotations": []}
    else:
        assert part == {"type": "input_text", "text": "x"}


EVERY_ITEM_KIND: list[dict[str, Any]] = [
    {"role": "user", "content": [
        {"type": "input_text", "text": "look"},
        {"type": "input_image", "image_url": "https://example.com/a.png"},
        {"type": "input_file", "file_id": "file_1"},
    ]},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "earlier"}]},
    {"type": "message", "role": "assistant", "id": "msg_9", "status": "completed", "phase": "final_answer",
     "content": [{"type": "output_text", "text": "a", "annotations": []}, {"type": "refusal", "refusal": "no"}]},
    {"type": "message", "role": "developer", "content": "be brief"},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
    {"type": "function_call", "id": "fc_1", "call_id": "call_2", "name": "get_weather", "arguments": "{}",
     "status": "completed"},
    {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "rain"}]},
    {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "docs",
     "tools": [{"name": "search", "input_schema": {"type": "object"}}]},
    {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "docs", "name": "search", "arguments": "{}"},
    {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
    {"type": "mcp_call", "id": "mcp_1", "server_label": "docs", "name": "search", "arguments": "{}",
     "output": "found", "status": "completed"},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "thinking"}],
     "encrypted_content": "opaque"},
    {"type": "item_reference", "id": "msg_0"},
    {"id": "msg_00"},
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}},
    {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["q"]},
    {"type": "code_interpreter_call", "id": "ci_1", "status": "completed", "container_id": "c", "code": "1",
     "outputs": [{"type": "logs", "logs": "1"}]},
    {"type": "compaction", "id": "cmp_1", "encrypted_content": "opaque"},
]


def test_every_input_item_kind_is_accepted_and_normalized() -> None:
    req = parse_create_request(body(input=EVERY_ITEM_KIND))
    items = req.input_items()
    assert [i["type"] for i in items] == [
        "message", "message", "message", "message", "function_call", "function_call",
        "function_call_output", "function_call_output", "mcp_list_tools", "mcp_approval_request",
        "mcp_approval_response", "mcp_call", "reasoning", "item_reference", "item_reference",
        "web_search_call", "file_search_call", "code_interpreter_call", "compaction",
    ]
    assert items[0]["content"][1]["detail"] == "auto"  # lenient replay made canonical
    assert items[1]["content"][0]["annotations"] == []
    assert items[2]["id"] == "msg_9" and items[2]["phase"] == "final_answer"
    assert items[4]["id"].startswith("fc_") and items[5]["id"] == "fc_1"
    assert items[6]["id"].startswith("fco_") and items[6]["status"] == "completed"
    assert items[10]["id"].startswith("mcpa_")
    assert items[14] == {"id": "msg_00", "type": "item_reference"}
    assert EVERY_ITEM_KIND[14] == {"id": "msg_00"}  # normalize does not mutate the request


@pytest.mark.parametrize("tool", [
    WEATHER,
    {"type": "function", "name": "bare"},
    MCP,
    {"type": "mcp", "server_label": "gh", "connector_id": "connector_gmail"},
    {"type": "mcp", "server_label": "a", "server_url": "https://a", "allowed_tools": ["x", "y"],
     "require_approval": "never", "authorization": "tok", "server_description": "A"},
    {"type": "mcp", "server_label": "b", "server_url": "https://b",
     "allowed_tools": {"tool_names": ["x"], "read_only": True},
     "require_approval": {"always": {"tool_names": ["x"]}, "never": {"tool_names": ["y"]}}},
    {"type": "web_search"},
    {"type": "file_search", "vector_store_ids": ["vs_1"]},
    {"type": "code_interpreter", "container": {"type": "auto"}},
    {"type": "custom", "name": "grammar"},
    {"type": "image_generation"},
])
def test_every_tool_form(tool: dict[str, Any]) -> None:
    req = parse_create_request(body(tools=[tool]))
    assert req.tools == [tool]


def test_function_tools_carry_all_keys() -> None:
    req = parse_create_request(body(tools=[{"type": "function", "name": "bare"}, MCP]))
    assert req.function_tools() == [
        {"type": "function", "name": "bare", "description": None, "parameters": None, "strict": None}
    ]
    assert req.mcp_tools() == [MCP]


@pytest.mark.parametrize("choice", [
    "none", "auto", "required",
    {"type": "function", "name": "get_weather"},
    {"type": "mcp", "server_label": "docs"},
    {"type": "mcp", "server_label": "docs", "name": "search"},
    {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "get_weather"}]},
    {"type": "allowed_tools", "mode": "required", "tools": [{"type": "mcp", "server_label": "docs"}]},
    {"type": "web_search_preview"},
    {"type": "code_interpreter"},
])
def test_every_tool_choice_form(choice: Any) -> None:
    req = parse_create_request(body(tools=[WEATHER, MCP], tool_choice=choice))
    assert req.tool_choice == choice


@pytest.mark.parametrize("conversation", ["conv_1", {"id": "conv_1"}])
def test_conversation_id_from_either_form(conversation: Any) -> None:
    assert parse_create_request(body(conversation=conversation)).conversation_id == "conv_1"


def test_every_parameter_is_accepted() -> None:
    full = body(
        input="hi", instructions="be kind", stream=True, stream_options={"include_obfuscation": False},
        background=True, store=True, previous_response_id="resp_1", tools=[WEATHER], tool_choice="required",
        parallel_tool_calls=False, max_tool_calls=3, max_output_tokens=100, temperature=0.5, top_p=0.9,
        top_logprobs=0, text={"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"},
                                        "strict": True}, "verbosity": "low"},
        reasoning={"effort": "low", "summary": "auto"}, truncation="auto",
        include=["reasoning.encrypted_content"], metadata={"k": "v"}, prompt={"id": "pmpt_1"},
        prompt_cache_key="ck", prompt_cache_retention="24h", safety_identifier="u1", service_tier="flex",
        user="u", context_management=[{"type": "compaction", "compact_threshold": 1000}],
        background_options={"completion_window": "8h", "continuation_id": "c1"}, max_infer_iters=3,
        moderation=None, access_programs=None, image=None, prompt_cache_options=None,
    )
    full["stream"] = False  # a 2h/8h completion window needs background without stream
    req = parse_create_request(full)
    assert req.model_dump(exclude_unset=True) == full


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("access_programs", {"cyber": "standard"}),
        ("image", {"context_compression": "auto"}),
        ("prompt_cache_options", {"prewarm": True}),
    ],
)
def test_a_parameter_troupe_cannot_honour_is_refused_naming_it(name: str, value: Any) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_create_request(body(**{name: value}))
    assert (refused.value.param, refused.value.code) == (name, "unsupported_parameter")
    assert f"'{name}' is not supported by this server" in refused.value.message


def test_openais_moderation_parameter_is_taken_and_its_shape_checked() -> None:
    value = {"model": "omni-moderation-latest", "policy": {"input": {"mode": "block"}}}
    assert parse_create_request(body(moderation=value)).moderation == value
    with pytest.raises(InvalidRequest) as refused:
        parse_create_request(body(moderation={"model": "m", "policy": {"input": {"mode": "warn"}}}))
    assert refused.value.param == "moderation.policy.input.mode"


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"include": ["reasoning.encrypted_content", "message.output_text.logprobs"]}, "include[1]"),
        ({"background_options": {"completion_window": "2h"}}, "background_options.completion_window"),
        ({"background": True, "stream": True, "background_options": {"completion_window": "8h"}},
         "background_options.completion_window"),
    ],
)
def test_values_troupe_cannot_honour_are_refused_naming_them(params: dict, param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_create_request(body(**params))
    assert refused.value.param == param


def test_model_covers_every_sdk_create_parameter() -> None:
    sdk = set(ResponseCreateParamsBase.__annotations__) | {"stream"}
    assert sdk <= set(CreateResponseRequest.model_fields)


def test_null_means_default_and_empty_include() -> None:
    req = parse_create_request(body(store=None, stream=None, tools=None, tool_choice=None, include=[]))
    assert (req.store, req.stream, req.tools, req.tool_choice, req.include) == (True, False, [], "auto", [])


def test_realistic_agents_sdk_body() -> None:
    # The shape openai-agents sends: typeless messages, echoed tool call items,
    # include [], nulls omitted.
    agents_body = {
        "model": "gpt-4.1",
        "instructions": "You are a weather bot.",
        "input": [
            {"role": "user", "content": "Weather in Paris?"},
            {"arguments": '{"city":"Paris"}', "call_id": "call_abc", "name": "get_weather",
             "type": "function_call", "id": "fc_abc", "status": "completed"},
            {"call_id": "call_abc", "output": "Sunny, 21C", "type": "function_call_output"},
            {"id": "msg_abc", "content": [{"annotations": [], "text": "It is sunny.", "type": "output_text",
                                           "logprobs": []}],
             "role": "assistant", "status": "completed", "type": "message"},
            {"role": "user", "content": "And tomorrow?"},
        ],
        "include": [],
        "tools": [WEATHER],
        "stream": True,
        "metadata": {"trace": "t1"},
    }
    req = parse_create_request(agents_body)
    assert [i["type"] for i in req.input_items()] == [
        "message", "function_call", "function_call_output", "message", "message"]
    assert req.stream and req.instructions == "You are a weather bot."


def _sdk_body(**kwargs: Any) -> dict[str, Any]:
    """The exact JSON the openai SDK sends for ``client.responses.create(**kwargs)``."""
    sent: dict[str, Any] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        sent.update(json.loads(request.content))
        req = parse_create_request(dict(sent))
        return httpx.Response(200, json=build_response(req, response_id=new_id("resp"), created_at=1,
                                                       status="completed", completed_at=1))

    client = openai.OpenAI(api_key="k", base_url="http://troupe.test/v1",
                           http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    resp = client.responses.create(**kwargs)
    assert resp.status == "completed"
    return sent


def test_openai_sdk_bodies() -> None:
    sent = _sdk_body(model="sim", input="hi", tools=[WEATHER], tool_choice="auto", temperature=0.2,
                     metadata={"a": "b"}, reasoning={"effort": "low"}, include=[])
    assert sent["input"] == "hi"
    sent = _sdk_body(
        model="sim", previous_response_id="resp_1",
        input=[{"type": "function_call_output", "call_id": "call_1", "output": "42"},
               {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": False}],
        tools=[MCP], store=True, text={"format": {"type": "json_object"}},
    )
    assert sent["previous_response_id"] == "resp_1"


# --- rejections ------------------------------------------------------------


@pytest.mark.parametrize(("params", "code", "param"), [
    ({"input": "hi"}, "missing_required_parameter", "model"),
    (body(foo=1), "unknown_parameter", "foo"),
    ({"modle": "sim"}, "unknown_parameter", "modle"),
    ({"model": 3}, "invalid_type", "model"),
    (body(temperature="1"), "invalid_type", "temperature"),
    (body(temperature=True), "invalid_type", "temperature"),
    (body(temperature=2.5), "decimal_above_max_value", "temperature"),
    (body(top_p=-0.1), "decimal_below_min_value", "top_p"),
    (body(stream="yes"), "invalid_type", "stream"),
    (body(store=1), "invalid_type", "store"),
    (body(max_output_tokens=1.5), "invalid_type", "max_output_tokens"),
    (body(max_tool_calls=0), "integer_below_min_value", "max_tool_calls"),
    (body(max_infer_iters=0), "integer_below_min_value", "max_infer_iters"),
    (body(max_output_tokens=15), "integer_below_min_value", "max_output_tokens"),
    (body(conversation="invalid-format"), "invalid_value", "conversation"),
    (body(conversation={"id": "resp_1"}), "invalid_value", "conversation"),
    (body(previous_response_id="conv_1"), "invalid_value", "previous_response_id"),
    (body(truncation="sometimes"), "invalid_value", "truncation"),
    (body(service_tier="gold"), "invalid_value", "service_tier"),
    (body(include=["nope"]), "invalid_value", "include[0]"),
    (body(include="reasoning.encrypted_content"), "invalid_type", "include"),
    (body(previous_response_id="resp_1", conversation="conv_1"), "invalid_value", "conversation"),
    (body(conversation=7), "invalid_type", "conversation"),
    (body(conversation={"id": 7}), "invalid_type", "conversation.id"),
    (body(conversation={}), "missing_required_parameter", "conversation.id"),
    (body(metadata={"a": 1}), "invalid_type", "metadata.a"),
    (body(metadata={f"k{i}": "v" for i in range(17)}), "invalid_value", "metadata"),
    (body(metadata={"k" * 65: "v"}), "invalid_value", "metadata"),
    (body(metadata={"k": "v" * 513}), "invalid_value", "metadata.k"),
    (body(text={"format": {"type": "yaml"}}), "invalid_value", "text.format.type"),
    (body(text={"format": {"type": "json_schema", "schema": {}}}), "missing_required_parameter",
     "text.format.name"),
    (body(reasoning={"effort": "huge"}), "invalid_value", "reasoning.effort"),
    (body(stream_options={"include_obfuscation": "no"}), "invalid_type", "stream_options.include_obfuscation"),
    (body(input=5), "invalid_type", "input"),
    (body(input=[5]), "invalid_type", "input[0]"),
    (body(input=[{"content": "hi"}]), "missing_required_parameter", "input[0].type"),
    (body(input=[{"type": "telepathy"}]), "invalid_value", "input[0].type"),
    (body(input=[{"role": "robot", "content": "hi"}]), "invalid_value", "input[0].role"),
    (body(input=[{"role": "user"}]), "missing_required_parameter", "input[0].content"),
    (body(input=[{"role": "user", "content": 5}]), "invalid_type", "input[0].content"),
    (body(input=[{"role": "user", "content": [{"type": "input_video"}]}]), "invalid_value",
     "input[0].content[0].type"),
    (body(input=[{"role": "user", "content": [{"type": "input_text", "text": 1}]}]), "invalid_type",
     "input[0].content[0].text"),
    (body(input=[{"role": "user", "content": "hi"}, {"type": "function_call", "name": "f", "arguments": "{}"}]),
     "missing_required_parameter", "input[1].call_id"),
    (body(input=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
                 {"type": "function_call_output", "output": "x"}]), "missing_required_parameter",
     "input[2].call_id"),
    (body(input=[{"type": "function_call_output", "call_id": "c", "output": 5}]), "invalid_type",
     "input[0].output"),
    (body(input=[{"type": "mcp_approval_response", "approval_request_id": "r", "approve": "yes"}]),
     "invalid_type", "input[0].approve"),
    (body(input=[{"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text"}]}]),
     "missing_required_parameter", "input[0].summary[0].text"),
    (body(input=[{"type": "mcp_list_tools", "id": "l", "server_label": "s", "tools": [{"name": "a"}]}]),
     "missing_required_parameter", "input[0].tools[0].input_schema"),
    (body(tools={"type": "function"}), "invalid_type", "tools"),
    (body(tools=[{"name": "f"}]), "missing_required_parameter", "tools[0].type"),
    (body(tools=[{"type": "teleport"}]), "invalid_value", "tools[0].type"),
    (body(tools=[{"type": "function"}]), "missing_required_parameter", "tools[0].name"),
    (body(tools=[{"type": "function", "name": "has space"}]), "invalid_value", "tools[0].name"),
    (body(tools=[{"type": "function", "name": "f", "parameters": "{}"}]), "invalid_type", "tools[0].parameters"),
    (body(tools=[{"type": "function", "name": "f", "strict": "yes"}]), "invalid_type", "tools[0].strict"),
    (body(tools=[WEATHER, WEATHER]), "invalid_value", "tools[1].name"),
    (body(tools=[{"type": "mcp", "server_url": "https://x"}]), "missing_required_parameter",
     "tools[0].server_label"),
    (body(tools=[{**MCP, "require_approval": "sometimes"}]), "invalid_value", "tools[0].require_approval"),
    (body(tools=[{**MCP, "allowed_tools": 5}]), "invalid_type", "tools[0].allowed_tools"),
    (body(tools=[{**MCP, "headers": {"A": 1}}]), "invalid_type", "tools[0].headers.A"),
    (body(tool_choice="sometimes"), "invalid_value", "tool_choice"),
    (body(tool_choice="required"), "invalid_value", "tool_choice"),
    (body(tool_choice=3), "invalid_type", "tool_choice"),
    (body(tool_choice={"name": "f"}), "missing_required_parameter", "tool_choice.type"),
    (body(tools=[WEATHER], tool_choice={"type": "function", "name": "nope"}), "invalid_value", "tool_choice"),
    (body(tools=[WEATHER], tool_choice={"type": "function"}), "missing_required_parameter", "tool_choice.name"),
    (body(tools=[WEATHER], tool_choice={"type": "mcp", "server_label": "nope"}), "invalid_value", "tool_choice"),
    (body(tools=[WEATHER], tool_choice={"type": "allowed_tools", "mode": "auto",
                                        "tools": [{"type": "function", "name": "get_weather"},
                                                  {"type": "function", "name": "nope"}]}),
     "invalid_value", "tool_choice.tools[1]"),
    (body(tools=[WEATHER], tool_choice={"type": "allowed_tools", "mode": "maybe", "tools": []}),
     "invalid_value", "tool_choice.mode"),
])
def test_rejections(params: dict[str, Any], code: str, param: str) -> None:
    err = reject(params)
    assert (err.code, err.param) == (code, param), err.message


@pytest.mark.parametrize("payload", [[], "model", 3, None])
def test_body_must_be_an_object(payload: object) -> None:
    err = reject(payload)  # type: ignore[arg-type]
    assert err.param is None and err.code == "invalid_type"


@pytest.mark.parametrize(("params", "message"), [
    (body(foo=1), "Unknown parameter: 'foo'."),
    ({}, "Missing required parameter: 'model'."),
    (body(temperature="hot"), "Invalid type for 'temperature': expected a number, got a string."),
    (body(previous_response_id="r", conversation="c"),
     "'previous_response_id' and 'conversation' cannot both be set."),
    (body(max_output_tokens=10),
     "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got 10 instead."),
    (body(conversation="invalid-format"),
     "Invalid 'conversation': 'invalid-format'. Expected an ID that begins with 'conv'."),
    (body(truncation="x"), "Invalid value for 'truncation': expected 'auto' or 'disabled', got 'x'."),
    (body(input=[{"type": "function_call_output", "output": "x"}]),
     "Missing required parameter: 'input[0].call_id'."),
])
def test_messages_are_readable(params: dict[str, Any], message: str) -> None:
    assert reject(params).message == message


def test_unknown_parameter_is_reported_before_other_errors() -> None:
    err = reject({"temperature": "x", "bogus": 1})
    assert (err.param, err.code) == ("bogus", "unknown_parameter")
