"""The Agents API's agents with the ``openai`` SDK only (``client.beta.agents``), over real HTTP.

On the in-process app and on Ray Serve's ``replica`` app of the session (the agents in the
storage actor's DuckDB file; what the placement cannot change, ``LOCAL_ONLY``, in process only);
the tenants' test and the MCP allowlist on a keyed in-process app.
Sessions, which run agents: test_sessions.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.servers import served_local
from troupe.runtime.settings import McpSettings
from troupe.serve.config import ServerSettings

from .conftest import LOCAL_ONLY

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}  # fmt: skip
CLOCK = {"type": "function", "name": "now", "description": "The time.", "parameters": {"type": "object"}}


@pytest.fixture
def client(root: str) -> OpenAI:
    return OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)


def test_an_agent_from_create_to_delete(client: OpenAI) -> None:
    name = f"helper-{uuid.uuid4().hex[:8]}"
    made = client.beta.agents.create(
        model="sim", name=name, instructions="Answer briefly.", metadata={"team": "core"}, tools=[WEATHER],
        text={"format": {"type": "json_schema", "schema": {"type": "object"}}, "verbosity": "low"},
        reasoning={"effort": "low"}, service_tier="default", multi_agent={"enabled": False},
        compaction={"async_": False}, experimental={"time_awareness": False},
    )  # fmt: skip
    assert made.id.startswith("agent_") and (made.object, made.model, made.name) == ("agent", "sim", name)
    assert (made.instructions, made.metadata, made.service_tier) == ("Answer briefly.", {"team": "core"}, "default")
    [tool] = made.tools
    assert (tool.type, tool.name, tool.parameters, tool.defer_loading) == ("function", "get_weather",
                                                                          WEATHER["parameters"], False)  # fmt: skip
    assert (made.text.format.type, made.text.format.schema_, made.text.verbosity) == ("json_schema",
                                                                                      {"type": "object"}, "low")  # fmt: skip
    assert (made.reasoning.effort, made.reasoning.summary) == ("low", None)
    assert (made.multi_agent.enabled, made.multi_agent.max_concurrent_subagents) == (False, None)
    assert made.compaction.async_ is False and made.experimental.time_awareness is False
    assert made.created_at == made.updated_at > 0
    assert client.beta.agents.retrieve(made.id).model_dump() == made.model_dump()

    updated = client.beta.agents.update(made.id, name=None, tools=[CLOCK, WEATHER], metadata=None, text=None,
                                        experimental={})  # fmt: skip
    assert (updated.id, updated.name, updated.metadata, [t.name for t in updated.tools]) == (
        made.id, None, {}, ["now", "get_weather"])
    assert (updated.text.format.type, updated.text.verbosity) == ("text", "medium"), "null: the default"
    assert (updated.instructions, updated.reasoning.effort, updated.service_tier) == ("Answer briefly.", "low",
                                                                                     "default"), "kept"  # fmt: skip
    assert updated.created_at == made.created_at and updated.updated_at >= made.updated_at
    assert client.beta.agents.retrieve(made.id).model_dump() == updated.model_dump()
    assert client.beta.agents.update(made.id).model_dump()["tools"] == updated.model_dump()["tools"], "no change"
    assert made.id in [a.id for a in client.beta.agents.list(order="asc")]

    deleted = client.beta.agents.delete(made.id)
    assert (deleted.id, deleted.object, deleted.deleted) == (made.id, "agent.deleted", True)
    for call in (
        lambda: client.beta.agents.retrieve(made.id),
        lambda: client.beta.agents.update(made.id, name="back"),
        lambda: client.beta.agents.delete(made.id),
    ):
        with pytest.raises(openai.NotFoundError) as gone:
            call()
        assert (gone.value.body["param"], gone.value.body["code"]) == ("agent_id", "not_found")
    assert made.id not in [a.id for a in client.beta.agents.list(order="asc")]


@LOCAL_ONLY
def test_updates_at_once_each_land(client: OpenAI) -> None:
    """Each update is read and written in one transaction: none undoes another's field."""
    made = client.beta.agents.create(model="sim")
    changes: list[dict[str, Any]] = [
        {"name": "racer"}, {"instructions": "Be quick."}, {"metadata": {"lane": "3"}}, {"reasoning": {"effort": "high"}},
        {"service_tier": "default"}, {"text": {"verbosity": "high"}}, {"tools": [WEATHER]},
        {"multi_agent": {"enabled": False, "max_concurrent_subagents": 2}},
    ]  # fmt: skip
    with ThreadPoolExecutor(len(changes)) as pool:
        list(pool.map(lambda change: client.beta.agents.update(made.id, **change), changes))
    got = client.beta.agents.retrieve(made.id)
    assert (got.name, got.instructions, got.metadata, got.reasoning.effort, got.service_tier, got.text.verbosity) == (
        "racer", "Be quick.", {"lane": "3"}, "high", "default", "high")
    assert [t.name for t in got.tools] == ["get_weather"] and got.updated_at >= made.updated_at
    client.beta.agents.delete(made.id)


@LOCAL_ONLY
def test_agents_list_in_pages(client: OpenAI) -> None:
    made = [client.beta.agents.create(model="sim", name=f"paged-{i}").id for i in range(3)]
    page = client.beta.agents.list(limit=2)
    assert len(page.data) == 2 and page.has_more
    assert [a.id for a in page.data] == made[:0:-1], "newest first"
    newest_first = [a.id for a in client.beta.agents.list(limit=2)]  # the SDK pages on with `after`
    assert [i for i in newest_first if i in made] == made[::-1]
    assert len(newest_first) == len(set(newest_first)) >= 3, "no agent twice across pages"
    oldest_first = [a.id for a in client.beta.agents.list(limit=2, order="asc")]
    assert [i for i in oldest_first if i in made] == made and oldest_first == newest_first[::-1]
    after = client.beta.agents.list(after=made[0], order="asc", limit=100).data
    assert [a.id for a in after][:2] == made[1:]
    assert client.beta.agents.list(after="agent_unknown").data == []
    for agent_id in made:
        client.beta.agents.delete(agent_id)
    assert not {a.id for a in client.beta.agents.list(limit=100)} & set(made)


@LOCAL_ONLY
@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [
        ({}, 400, "model", "missing_required_parameter"),
        ({"model": "gpt-nowhere"}, 404, "model", "model_not_found"),
        ({"model": "sim", "colour": "red"}, 400, "colour", "unknown_parameter"),
        ({"model": "sim", "service_tier": "flex"}, 400, "service_tier", "unsupported_value"),
        ({"model": "sim", "multi_agent": {"enabled": True, "max_concurrent_subagents": 65}}, 400,
         "multi_agent.max_concurrent_subagents", "invalid_value"),
        ({"model": "sim", "compaction": {"async": True}}, 400, "compaction.async", "unsupported_value"),
        ({"model": "sim", "experimental": {"time_awareness": True}}, 400, "experimental.time_awareness",
         "unsupported_value"),
        ({"model": "sim", "tools": [WEATHER, {"type": "computer_use"}]}, 400, "tools[1].type", "unsupported_value"),
        ({"model": "sim", "tools": [{"type": "web_search"}]}, 400, "tools[0].type", "unsupported_value"),
        ({"model": "sim", "tools": [{"type": "code_interpreter"}]}, 400, "tools[0].type", "invalid_value"),
        ({"model": "sim", "tools": [{**WEATHER, "defer_loading": True}]}, 400, "tools[0].defer_loading",
         "unsupported_value"),
        ({"model": "sim", "tools": [{"type": "mcp", "server_label": "m",
                                     "transport": {"type": "stdio", "command": "npx", "cwd": "/"}}]},
         400, "tools[0].transport.type", "unsupported_value"),
        ({"model": "sim", "tools": [{"type": "mcp", "server_label": "m", "credential_id": "cred_1",
                                     "transport": {"type": "http", "server_url": "https://mcp.example.com/mcp"}}]},
         400, "tools[0].credential_id", "invalid_value"),
        # A cloud metadata address is refused even where an allowlist names it (the MCP policy).
        ({"model": "sim", "tools": [WEATHER, {"type": "mcp", "server_label": "m",
                                              "transport": {"type": "http", "server_url": "http://169.254.169.254/"}}]},
         400, "tools[1].transport.server_url", "invalid_value"),
        ({"model": "sim", "text": {"format": {"type": "json_schema", "schema": {"$ref": "#/$defs/gone"}}}}, 400,
         "text.format.schema", "invalid_value"),
    ],
)  # fmt: skip
def test_a_bad_body_names_its_field(client: OpenAI, body: dict[str, Any], status: int, param: str, code: str) -> None:
    with pytest.raises(openai.APIStatusError) as refused:
        client.post("/agents", body=body, cast_to=object)
    assert refused.value.status_code == status
    assert (refused.value.body["param"], refused.value.body["code"]) == (param, code)
    assert refused.value.body["type"] == "invalid_request_error"


@LOCAL_ONLY
def test_a_bad_update_or_id_names_its_field_and_changes_nothing(client: OpenAI) -> None:
    made = client.beta.agents.create(model="sim", name="kept", tools=[WEATHER])
    for kwargs, status, param, code in (
        ({"model": "gpt-nowhere"}, 404, "model", "model_not_found"),
        ({"extra_body": {"model": None}}, 400, "model", "invalid_type"),
        ({"name": "x", "tools": [{"type": "automations"}]}, 400, "tools[0].type", "unsupported_value"),
        ({"service_tier": "priority"}, 400, "service_tier", "unsupported_value"),
    ):
        with pytest.raises(openai.APIStatusError) as refused:
            client.beta.agents.update(made.id, **kwargs)
        assert refused.value.status_code == status
        assert (refused.value.body["param"], refused.value.body["code"]) == (param, code)
    assert client.beta.agents.retrieve(made.id).model_dump() == made.model_dump(), "no refused update changed it"
    with pytest.raises(openai.BadRequestError) as refused:
        client.beta.agents.retrieve("asst_123")
    assert (refused.value.body["param"], refused.value.body["code"]) == ("agent_id", "invalid_value")
    with pytest.raises(openai.BadRequestError) as refused:
        client.beta.agents.list(limit=101)
    assert refused.value.body["param"] == "limit"
    client.beta.agents.delete(made.id)


@LOCAL_ONLY
def test_the_beta_header_is_accepted_not_required(root: str) -> None:
    made = httpx.post(f"{root}/v1/agents", json={"model": "sim"}, timeout=30)  # no OpenAI-Beta header
    assert made.status_code == 200 and made.json()["object"] == "agent"
    got = httpx.get(f"{root}/v1/agents/{made.json()['id']}", headers={"OpenAI-Beta": "agents=v1"}, timeout=30)
    assert got.json() == made.json()
    assert httpx.delete(f"{root}/v1/agents/{made.json()['id']}", timeout=30).json()["deleted"] is True


# -- tenants, and the MCP policy with an allowlist (a keyed in-process app) ------------------------


@pytest.fixture(scope="module")
def keyed_root() -> Iterator[str]:
    keys = {"sk-alice": "alice", "sk-bob": "bob"}
    yield from served_local(ServerSettings(api_keys=keys), mcp=McpSettings(allowed_urls=("http://127.0.0.1:*",)))


def test_another_tenant_sees_none_of_it(keyed_root: str) -> None:
    alice = OpenAI(base_url=f"{keyed_root}/v1", api_key="sk-alice", max_retries=0)
    bob = OpenAI(base_url=f"{keyed_root}/v1", api_key="sk-bob", max_retries=0)
    made = alice.beta.agents.create(model="sim", name="alice's", instructions="Only for Alice.")
    for call in (
        lambda: bob.beta.agents.retrieve(made.id),
        lambda: bob.beta.agents.update(made.id, name="stolen"),
        lambda: bob.beta.agents.delete(made.id),
    ):
        with pytest.raises(openai.NotFoundError) as refused:
            call()
        assert refused.value.body["param"] == "agent_id"
    bobs = bob.beta.agents.create(model="sim", name="bob's")
    assert [a.id for a in bob.beta.agents.list()] == [bobs.id]
    assert [a.id for a in alice.beta.agents.list()] == [made.id]
    assert alice.beta.agents.retrieve(made.id).model_dump() == made.model_dump(), "untouched by bob"
    with pytest.raises(openai.AuthenticationError):
        OpenAI(base_url=f"{keyed_root}/v1", api_key="sk-mallory", max_retries=0).beta.agents.list()


def test_mcp_servers_are_those_the_policy_allows(keyed_root: str) -> None:
    alice = OpenAI(base_url=f"{keyed_root}/v1", api_key="sk-alice", max_retries=0)
    allowed = {"type": "mcp", "server_label": "local", "allowed_tools": ["add"], "required": True,
               "transport": {"type": "http", "server_url": "http://127.0.0.1:9/mcp"}}  # fmt: skip
    made = alice.beta.agents.create(model="sim", tools=[allowed])
    [tool] = made.tools
    assert (tool.type, tool.server_label, tool.allowed_tools, tool.required, tool.connection_origin) == (
        "mcp", "local", ["add"], True, "service")
    assert (tool.transport.type, tool.transport.server_url, tool.transport.headers) == (
        "http", "http://127.0.0.1:9/mcp", {})
    assert (tool.credential_id, tool.request_metadata) == (None, {})
    elsewhere = {**allowed, "transport": {"type": "http", "server_url": "http://10.0.0.7/mcp"}}
    with pytest.raises(openai.BadRequestError) as refused:
        alice.beta.agents.update(made.id, tools=[allowed, {**elsewhere, "server_label": "other"}])
    assert (refused.value.body["param"], refused.value.body["code"]) == ("tools[1].transport.server_url",
                                                                         "invalid_value")  # fmt: skip
    assert "does not match the allowed MCP server URLs" in refused.value.body["message"]
    assert alice.beta.agents.retrieve(made.id).tools[0].server_label == "local"
