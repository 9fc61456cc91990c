"""build_response: every §2 field, valid for the openai SDK and Open Responses."""

from __future__ import annotations

from typing import Any

import openresponses_types
import pytest
from openai.types.responses import Response

from troupe.protocol import (
    RESPONSE_STATUSES,
    build_response,
    new_id,
    parse_create_request,
    usage_dict,
)

# The fields a Response always carries (+ conversation, which we always emit, null when unused).
ALWAYS_EMIT = {
    "id", "object", "created_at", "status", "completed_at", "model", "output", "error",
    "incomplete_details", "instructions", "previous_response_id", "conversation", "tools", "tool_choice",
    "parallel_tool_calls", "text", "temperature", "top_p", "presence_penalty", "frequency_penalty",
    "top_logprobs", "truncation", "reasoning", "usage", "max_output_tokens", "max_tool_calls", "store",
    "background", "service_tier", "metadata", "safety_identifier", "prompt_cache_key",
}

WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
MESSAGE = {
    "type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
    "content": [{"type": "output_text", "text": "Sunny.", "annotations": []}],
}
CALL = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
        "arguments": "{}", "status": "completed"}

SCENARIOS: dict[str, dict[str, Any]] = {
    "in_progress": {},
    "completed": {"output": [MESSAGE, CALL], "usage": usage_dict(input_tokens=10, output_tokens=4),
                  "completed_at": 1_700_000_005},
    "failed": {"error": {"code": "server_error", "message": "model unavailable"},
               "usage": usage_dict(input_tokens=10, output_tokens=0), "completed_at": 1_700_000_005},
    "incomplete": {"output": [MESSAGE], "incomplete_details": {"reason": "max_output_tokens"},
                   "usage": usage_dict(input_tokens=10, output_tokens=16, reasoning_tokens=3),
                   "completed_at": 1_700_000_005},
    "queued": {},
    "cancelled": {"completed_at": 1_700_000_005},
}


def make(status: str, **params: Any) -> dict[str, Any]:
    req = parse_create_request({"model": "sim", "input": "weather?", "tools": [WEATHER], **params})
    return build_response(req, response_id=new_id("resp"), created_at=1_700_000_000, status=status,
                          **SCENARIOS[status])


@pytest.mark.parametrize("status", ["in_progress", "completed", "failed", "incomplete"])
def test_valid_for_open_responses_and_openai_sdk(status: str) -> None:
    resp = make(status)
    assert ALWAYS_EMIT <= set(resp)
    openresponses_types.ResponseResource.model_validate(resp)
    parsed = Response.model_validate(resp)
    assert parsed.status == status
    assert parsed.id.startswith("resp_")


@pytest.mark.parametrize("status", ["queued", "cancelled"])
def test_other_statuses_parse_with_openai_sdk(status: str) -> None:
    assert Response.model_validate(make(status)).status == status


def test_unknown_status_is_a_bug() -> None:
    req = parse_create_request({"model": "sim"})
    with pytest.raises(ValueError, match="status"):
        build_response(req, response_id="resp_x", created_at=1, status="done")


def test_defaults_are_client_friendly() -> None:
    resp = make("in_progress")
    assert resp["output"] == [] and resp["usage"] is None and resp["error"] is None
    assert resp["completed_at"] is None and resp["conversation"] is None
    assert (resp["temperature"], resp["top_p"], resp["top_logprobs"]) == (1.0, 1.0, 0)
    assert (resp["presence_penalty"], resp["frequency_penalty"]) == (0, 0)
    assert (resp["store"], resp["background"], resp["parallel_tool_calls"]) == (True, False, True)
    assert resp["service_tier"] == "default" and resp["metadata"] == {}
    assert resp["text"] == {"format": {"type": "text"}}
    assert resp["reasoning"] == {"effort": None, "summary": None}
    assert resp["truncation"] == "disabled" and resp["tool_choice"] == "auto"
    assert isinstance(resp["created_at"], int)


def test_request_parameters_are_echoed() -> None:
    resp = make(
        "completed", instructions="Be brief.", temperature=0, top_p=0.5, top_logprobs=0, store=True,
        background=True, service_tier="flex", metadata={"k": "v"}, truncation="auto", max_output_tokens=64,
        max_tool_calls=2, parallel_tool_calls=False, tool_choice={"type": "function", "name": "get_weather"},
        text={"verbosity": "low"}, reasoning={"effort": "high"}, safety_identifier="s", prompt_cache_key="c",
        previous_response_id="resp_prev", user="u",
    )
    assert resp["instructions"] == "Be brief."
    assert (resp["temperature"], resp["top_p"], resp["top_logprobs"]) == (0.0, 0.5, 0)
    assert isinstance(resp["temperature"], float)
    assert (resp["store"], resp["background"], resp["parallel_tool_calls"]) == (True, True, False)
    assert (resp["service_tier"], resp["metadata"], resp["truncation"]) == ("flex", {"k": "v"}, "auto")
    assert (resp["max_output_tokens"], resp["max_tool_calls"]) == (64, 2)
    assert resp["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert resp["text"] == {"format": {"type": "text"}, "verbosity": "low"}
    assert resp["reasoning"] == {"effort": "high", "summary": None}
    assert resp["previous_response_id"] == "resp_prev" and resp["user"] == "u"
    assert (resp["safety_identifier"], resp["prompt_cache_key"]) == ("s", "c")
    openresponses_types.ResponseResource.model_validate(resp)
    Response.model_validate(resp)


def test_function_tools_always_carry_strict_description_parameters() -> None:
    (tool,) = make("in_progress")["tools"]
    assert tool == {"type": "function", "name": "get_weather", "description": None,
                    "parameters": WEATHER["parameters"], "strict": None}


def test_mcp_secrets_are_never_echoed() -> None:
    mcp = {"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example.com",
           "headers": {"Authorization": "Bearer s3cret"}, "authorization": "s3cret",
           "require_approval": "never"}
    req = parse_create_request({"model": "sim", "tools": [mcp]})
    resp = build_response(req, response_id="resp_1", created_at=1, status="in_progress")
    assert resp["tools"] == [{"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example.com",
                              "require_approval": "never"}]
    assert "s3cret" not in repr(resp)
    assert req.tools[0]["headers"]  # the request itself keeps them for the MCP client
    Response.model_validate(resp)


@pytest.mark.parametrize(("params", "override", "expected"), [
    ({"conversation": "conv_1"}, None, {"id": "conv_1"}),
    ({"conversation": {"id": "conv_2"}}, None, {"id": "conv_2"}),
    ({}, "conv_3", {"id": "conv_3"}),
    ({}, None, None),
])
def test_conversation(params: dict[str, Any], override: str | None, expected: Any) -> None:
    req = parse_create_request({"model": "sim", **params})
    resp = build_response(req, response_id="resp_1", created_at=1, status="completed",
                          conversation_id=override)
    assert resp["conversation"] == expected


def test_response_does_not_alias_inputs() -> None:
    output = [dict(MESSAGE)]
    req = parse_create_request({"model": "sim", "metadata": {"a": "b"}})
    resp = build_response(req, response_id="resp_1", created_at=1, status="completed", output=output)
    resp["output"][0]["id"] = "changed"
    resp["metadata"]["a"] = "changed"
    assert output[0]["id"] == "msg_1" and req.metadata == {"a": "b"}


def test_usage_dict_shape() -> None:
    assert usage_dict(input_tokens=10, output_tokens=5, cached_tokens=2, reasoning_tokens=1) == {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 1},
        "total_tokens": 15,
    }


def test_statuses_constant_matches_sdk() -> None:
    sdk = Response.model_fields["status"].annotation
    assert set(RESPONSE_STATUSES) == set(sdk.__args__[0].__args__)  # Optional[Literal[...]]


def test_requires_action_extension_status() -> None:
    req = parse_create_request({"model": "sim", "tools": [WEATHER]})
    resp = build_response(req, response_id="resp_1", created_at=1, status="requires_action", output=[CALL])
    assert resp["status"] == "requires_action"
