"""The Agents API's agent bodies and object (troupe.protocol.agents), with plain values."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from openai.types.beta import Agent, AgentDeleted

from troupe.protocol import InvalidRequest
from troupe.protocol.agents import (
    MAX_TOOLS_BYTES,
    agent_deleted,
    agent_object,
    apply_agent_update,
    new_agent_id,
    parse_agent_create,
    parse_agent_update,
)
from troupe.protocol.sessions import agent_response_tools, chosen_credentials

FUNCTION = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}  # fmt: skip
MCP = {"type": "mcp", "server_label": "docs", "transport": {"type": "http", "server_url": "https://mcp.example.com/mcp"}}


def made(body: dict[str, Any], at: float = 1_760_000_000) -> dict[str, Any]:
    return agent_object("agent_1", parse_agent_create(body), created_at=at, updated_at=at)


def test_the_defaults_are_openais_resolved_ones() -> None:
    agent = made({"model": "sim"})
    assert agent == {
        "id": "agent_1", "object": "agent", "created_at": 1_760_000_000, "updated_at": 1_760_000_000,
        "model": "sim", "instructions": None, "name": None, "metadata": {}, "tools": [],
        "text": {"format": {"type": "text"}, "verbosity": "medium"}, "reasoning": {"effort": None, "summary": None},
        "service_tier": "auto", "multi_agent": {"enabled": False, "max_concurrent_subagents": None},
        "compaction": {"async": False}, "experimental": {"time_awareness": False},
    }  # fmt: skip
    assert Agent.model_validate(agent).model_dump(mode="json", by_alias=True) == agent, "the SDK reads it whole"


def test_every_served_field_is_taken_and_resolved() -> None:
    schema = {"type": "object", "properties": {"answer": {"$ref": "#/$defs/a"}}, "$defs": {"a": {"type": "string"}}}
    agent = made({
        "model": "sim", "instructions": "Be brief.", "name": "helper", "metadata": {"team": "core"},
        "tools": [{**FUNCTION, "defer_loading": False, "async": False},
                  {**MCP, "allowed_tools": ["search"], "connection_origin": "service", "credential_id": None,
                   "request_metadata": {}, "required": True, "transport": {**MCP["transport"], "headers": {}}}],
        "text": {"format": {"type": "json_schema", "schema": schema}, "verbosity": "low"},
        "reasoning": {"effort": "high", "summary": "auto"}, "service_tier": "default",
        "multi_agent": {"enabled": False, "max_concurrent_subagents": 3}, "compaction": {"async": None},
        "experimental": {"time_awareness": False},
    })  # fmt: skip
    assert agent["tools"] == [
        {**FUNCTION, "defer_loading": False, "async": False},
        {"type": "mcp", "server_label": "docs", "allowed_tools": ["search"], "connection_origin": "service",
         "credential_id": None, "request_metadata": {}, "required": True,
         "transport": {"type": "http", "server_url": "https://mcp.example.com/mcp", "headers": {}}},
    ]  # fmt: skip
    assert (agent["text"], agent["reasoning"], agent["service_tier"]) == (
        {"format": {"type": "json_schema", "schema": schema}, "verbosity": "low"},
        {"effort": "high", "summary": "auto"}, "default")  # fmt: skip
    assert agent["multi_agent"] == {"enabled": False, "max_concurrent_subagents": None}, "OpenAI's: null when disabled"
    assert (agent["compaction"], agent["metadata"], agent["name"]) == ({"async": False}, {"team": "core"}, "helper")
    sdk = Agent.model_validate(agent)
    assert sdk.tools[1].transport.headers == {} and sdk.text.format.schema_ == schema


def test_a_web_search_tool_is_stored_as_the_sdk_reads_it_and_offered_as_a_responses_tool() -> None:
    location = {"country": "NO", "city": "Oslo"}
    agent = made({"model": "sim", "tools": [
        {"type": "web_search", "allowed_domains": ["duckdb.org"], "context_size": "low", "location": location},
        {**MCP, "credential_id": "vcred_1"}]})  # fmt: skip
    search = {"type": "web_search", "allowed_domains": ["duckdb.org"], "context_size": "low",
              "location": {"city": "Oslo", "country": "NO", "region": None, "timezone": None}, "mode": "live"}  # fmt: skip
    assert agent["tools"][0] == search
    assert Agent.model_validate(agent).model_dump(mode="json", by_alias=True)["tools"][0] == search
    assert made({"model": "sim", "tools": [{"type": "web_search"}]})["tools"] == [
        {"type": "web_search", "allowed_domains": None, "context_size": "medium", "location": None, "mode": "live"}]
    assert agent_response_tools(agent)[0] == {
        "type": "web_search", "search_context_size": "low", "filters": {"allowed_domains": ["duckdb.org"]},
        "user_location": {"type": "approximate", "country": "NO", "city": "Oslo"}}  # fmt: skip
    assert chosen_credentials(agent) == {1: "vcred_1"}
    # Disabled: kept on the agent, not offered; the MCP tool's credential follows its place.
    off = made({"model": "sim", "tools": [{"type": "web_search", "mode": "disabled"}, {**MCP, "credential_id": "vcred_1"}]})
    assert off["tools"][0]["mode"] == "disabled"
    assert [t["type"] for t in agent_response_tools(off)] == ["mcp"] and chosen_credentials(off) == {0: "vcred_1"}


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ([], None, "invalid_type"),
        ({}, "model", "missing_required_parameter"),
        ({"model": None}, "model", "invalid_type"),
        ({"model": "sim", "colour": "red"}, "colour", "unknown_parameter"),
        ({"model": "x" * 1_048_577}, "model", "string_above_max_length"),
        ({"model": "sim", "instructions": 7}, "instructions", "invalid_type"),
        ({"model": "sim", "name": "n" * 129}, "name", "string_above_max_length"),
        ({"model": "sim", "metadata": {"k": 1}}, "metadata.k", "invalid_type"),
        ({"model": "sim", "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata", "invalid_value"),
        # service tiers: OpenAI's processing tiers mean nothing behind this server
        ({"model": "sim", "service_tier": "flex"}, "service_tier", "unsupported_value"),
        ({"model": "sim", "service_tier": "priority"}, "service_tier", "unsupported_value"),
        ({"model": "sim", "service_tier": "ultrafast"}, "service_tier", "unsupported_value"),
        ({"model": "sim", "service_tier": "scale"}, "service_tier", "invalid_value"),
        # reasoning, text
        ({"model": "sim", "reasoning": {"effort": "huge"}}, "reasoning.effort", "invalid_value"),
        ({"model": "sim", "reasoning": {"summary": "long"}}, "reasoning.summary", "invalid_value"),
        ({"model": "sim", "reasoning": {"generate_summary": "auto"}}, "reasoning.generate_summary",
         "unknown_parameter"),
        ({"model": "sim", "text": "json"}, "text", "invalid_type"),
        ({"model": "sim", "text": {"verbosity": "loud"}}, "text.verbosity", "invalid_value"),
        ({"model": "sim", "text": {"format": {"type": "json_object"}}}, "text.format.type", "invalid_value"),
        ({"model": "sim", "text": {"format": {"type": "json_schema"}}}, "text.format.schema",
         "missing_required_parameter"),
        ({"model": "sim", "text": {"format": {"type": "json_schema", "schema": {"$ref": "#/$defs/x"}}}},
         "text.format.schema", "invalid_value"),
        ({"model": "sim", "text": {"format": {"type": "json_schema", "schema": {}, "name": "x"}}}, "text.format.name",
         "unknown_parameter"),
        # settings Troupe cannot provide
        ({"model": "sim", "multi_agent": {"enabled": True, "max_concurrent_subagents": 65}},
         "multi_agent.max_concurrent_subagents", "invalid_value"),
        ({"model": "sim", "multi_agent": {}}, "multi_agent.enabled", "missing_required_parameter"),
        ({"model": "sim", "multi_agent": {"enabled": False, "max_concurrent_subagents": 0}},
         "multi_agent.max_concurrent_subagents", "invalid_value"),
        ({"model": "sim", "compaction": {"async": True}}, "compaction.async", "unsupported_value"),
        ({"model": "sim", "compaction": {"async": "yes"}}, "compaction.async", "invalid_type"),
        ({"model": "sim", "experimental": {"time_awareness": True}}, "experimental.time_awareness",
         "unsupported_value"),
        ({"model": "sim", "experimental": {"memory": True}}, "experimental.memory", "unknown_parameter"),
        # tools
        ({"model": "sim", "tools": {"type": "function"}}, "tools", "invalid_type"),
        ({"model": "sim", "tools": [{"name": "f"}]}, "tools[0].type", "missing_required_parameter"),
        ({"model": "sim", "tools": [FUNCTION, {"type": "computer_use"}]}, "tools[1].type", "unsupported_value"),
        ({"model": "sim", "tools": [{"type": "web_search", "mode": "cached"}]}, "tools[0].mode", "unsupported_value"),
        ({"model": "sim", "tools": [{"type": "web_search", "mode": "offline"}]}, "tools[0].mode", "invalid_value"),
        ({"model": "sim", "tools": [{"type": "web_search", "context_size": "huge"}]}, "tools[0].context_size",
         "invalid_value"),
        ({"model": "sim", "tools": [{"type": "web_search", "allowed_domains": "a.org"}]}, "tools[0].allowed_domains",
         "invalid_type"),
        ({"model": "sim", "tools": [{"type": "web_search", "location": {"planet": "Mars"}}]},
         "tools[0].location.planet", "unknown_parameter"),
        ({"model": "sim", "tools": [{"type": "web_search", "filters": {}}]}, "tools[0].filters", "unknown_parameter"),
        ({"model": "sim", "tools": [{"type": "web_search"}, {"type": "web_search"}]}, "tools[1].type", "invalid_value"),
        ({"model": "sim", "tools": [{"type": "tool_search"}]}, "tools[0].type", "unsupported_value"),
        ({"model": "sim", "tools": [{"type": "programmatic_tool_calling"}]}, "tools[0].type", "unsupported_value"),
        ({"model": "sim", "tools": [{"type": "automations"}]}, "tools[0].type", "unsupported_value"),
        ({"model": "sim", "tools": [{"type": "code_interpreter"}]}, "tools[0].type", "invalid_value"),
        ({"model": "sim", "tools": [{"type": "teleport"}]}, "tools[0].type", "invalid_value"),
        ({"model": "sim", "tools": [{k: v for k, v in FUNCTION.items() if k != "description"}]},
         "tools[0].description", "missing_required_parameter"),
        ({"model": "sim", "tools": [{**FUNCTION, "name": "get weather"}]}, "tools[0].name", "invalid_value"),
        ({"model": "sim", "tools": [{**FUNCTION, "parameters": "{}"}]}, "tools[0].parameters", "invalid_type"),
        ({"model": "sim", "tools": [{**FUNCTION, "parameters": {"$ref": "#/nowhere"}}]}, "tools[0].parameters",
         "invalid_value"),
        ({"model": "sim", "tools": [{**FUNCTION, "strict": True}]}, "tools[0].strict", "unknown_parameter"),
        ({"model": "sim", "tools": [{**FUNCTION, "defer_loading": True}]}, "tools[0].defer_loading",
         "unsupported_value"),
        ({"model": "sim", "tools": [{**FUNCTION, "async": True}]}, "tools[0].async", "unsupported_value"),
        ({"model": "sim", "tools": [FUNCTION, FUNCTION]}, "tools[1].name", "invalid_value"),
        ({"model": "sim", "tools": [{"type": "mcp", "transport": MCP["transport"]}]}, "tools[0].server_label",
         "missing_required_parameter"),
        ({"model": "sim", "tools": [{"type": "mcp", "server_label": "docs"}]}, "tools[0].transport",
         "missing_required_parameter"),
        ({"model": "sim", "tools": [{**MCP, "transport": {"type": "stdio", "command": "npx", "cwd": "/"}}]},
         "tools[0].transport.type", "unsupported_value"),
        ({"model": "sim", "tools": [{**MCP, "transport": {"type": "http"}}]}, "tools[0].transport.server_url",
         "missing_required_parameter"),
        ({"model": "sim", "tools": [{**MCP, "transport": {**MCP["transport"], "headers": {"Authorization": "x"}}}]},
         "tools[0].transport.headers", "unsupported_parameter"),
        ({"model": "sim", "tools": [{**MCP, "transport": {**MCP["transport"], "headers": {"X-Api-Key": "k"}}}]},
         "tools[0].transport.headers", "unsupported_parameter"),  # any header may be the secret
        ({"model": "sim", "tools": [{**MCP, "connection_origin": "environment"}]}, "tools[0].connection_origin",
         "unsupported_value"),
        ({"model": "sim", "tools": [{**MCP, "credential_id": "cred_1"}]}, "tools[0].credential_id",
         "invalid_value"),
        ({"model": "sim", "tools": [{**MCP, "request_metadata": {"team": "core"}}]}, "tools[0].request_metadata",
         "unsupported_parameter"),
        ({"model": "sim", "tools": [{**MCP, "require_approval": "never"}]}, "tools[0].require_approval",
         "unknown_parameter"),
        ({"model": "sim", "tools": [{**MCP, "allowed_tools": "search"}]}, "tools[0].allowed_tools", "invalid_type"),
        ({"model": "sim", "tools": [MCP, FUNCTION, MCP]}, "tools[2].server_label", "invalid_value"),
    ],
)
def test_a_refusal_names_its_field(body: Any, param: str | None, code: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_agent_create(body)
    assert (refused.value.param, refused.value.code, refused.value.status) == (param, code, 400)
    if param is not None:
        assert f"'{param}'" in refused.value.message, "the message names it too"


def test_the_tool_list_is_bounded_by_its_compact_json() -> None:
    description = "x" * (MAX_TOOLS_BYTES // 2)
    with pytest.raises(InvalidRequest) as refused:
        parse_agent_create({"model": "sim", "tools": [{**FUNCTION, "description": description},
                                                      {**FUNCTION, "name": "other", "description": description}]})  # fmt: skip
    assert (refused.value.param, refused.value.code) == ("tools", "invalid_value")
    assert len(parse_agent_create({"model": "sim", "tools": [{**FUNCTION, "description": description}]})["tools"]) == 1


def test_an_update_replaces_what_it_names_and_null_resets_to_the_default() -> None:
    agent = made({"model": "sim", "name": "helper", "instructions": "Be brief.", "metadata": {"a": "1"},
                  "tools": [FUNCTION], "reasoning": {"effort": "low"}, "service_tier": "default"})  # fmt: skip
    changes = parse_agent_update({"name": None, "metadata": {}, "tools": None, "reasoning": None, "service_tier": None,
                                  "text": {"verbosity": "high"}})  # fmt: skip
    updated = apply_agent_update(agent, changes, 1_760_000_099.5)
    assert updated == {**agent, "name": None, "metadata": {}, "tools": [], "reasoning": {"effort": None, "summary": None},
                       "service_tier": "auto", "text": {"format": {"type": "text"}, "verbosity": "high"},
                       "updated_at": 1_760_000_099}  # fmt: skip
    assert updated["instructions"] == "Be brief." and updated["created_at"] == agent["created_at"]


def test_an_update_merges_experimental_settings_and_leaves_its_input_alone() -> None:
    agent = made({"model": "sim"})
    before = copy.deepcopy(agent)
    assert parse_agent_update({}) == {}
    assert parse_agent_update({"experimental": {}}) == {"experimental": {}}
    assert parse_agent_update({"experimental": None}) == {"experimental": {}}
    updated = apply_agent_update(agent, parse_agent_update({"experimental": {}, "model": "other"}), 1_760_000_100)
    assert updated["experimental"] == {"time_awareness": False} and updated["model"] == "other"
    assert agent == before


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": None}, "model", "invalid_type"),
        ({"id": "agent_2"}, "id", "unknown_parameter"),
        ({"experimental": {"time_awareness": True}}, "experimental.time_awareness", "unsupported_value"),
        ({"tools": [{"type": "computer_use", "include_screenshots": True}]}, "tools[0].type", "unsupported_value"),
        ({"service_tier": "fast"}, "service_tier", "unsupported_value"),
        ({"multi_agent": {"enabled": True, "max_concurrent_subagents": 0}}, "multi_agent.max_concurrent_subagents",
         "invalid_value"),
    ],
)
def test_an_update_refusal_names_its_field(body: dict[str, Any], param: str, code: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_agent_update(body)
    assert (refused.value.param, refused.value.code) == (param, code)


def test_ids_and_the_deleted_marker_are_the_sdks() -> None:
    first, second = new_agent_id(), new_agent_id()
    assert first.startswith("agent_") and first < second
    assert AgentDeleted.model_validate(agent_deleted(first)).model_dump() == agent_deleted(first)
