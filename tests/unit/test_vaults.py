"""Vaults and their credentials (troupe.protocol.vaults, troupe.runtime.vaults), without Ray:
the bodies and their refusals, the matching rule, sealing (the secret is never in the database
file's bytes), tenants, and what a session's turn gets from them: ``Runtime.local``'s real
sessions (the sim model, in process) calling a real MCP server that requires a bearer token,
and an OAuth refresh against a token endpoint served on loopback.
"""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.mcp_servers import serve_mcp
from tests.servers import serve_app, wait_until
from troupe.protocol import InvalidRequest, NotFound
from troupe.protocol.sessions import (
    agent_response_tools,
    chosen_credentials,
    parse_session_create,
    parse_session_events,
)
from troupe.protocol.vaults import (
    parse_credential_create,
    parse_credential_update,
    parse_status_filter,
    parse_vault_create,
    parse_vault_ids,
    parse_vault_update,
    server_key,
)
from troupe.runtime.facade import Runtime
from troupe.runtime.settings import McpSettings, RuntimeSettings
from troupe.storage.credentials import new_key

SECRET = "sk-vault-unit-7f3a9c"
BEARER = {"type": "static_bearer", "mcp_server_url": "https://mcp.example.com/mcp", "token": SECRET}
LOOPBACK = McpSettings(allowed_urls=("http://127.0.0.1:*",))


def _refused(parse: Any, *args: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as refused:
        parse(*args)
    return refused.value


# -- bodies ---------------------------------------------------------------------------------


def test_a_vault_name_is_trimmed_and_held_to_256_utf8_bytes() -> None:
    assert parse_vault_create({"name": "  team docs  ", "metadata": {"team": "core"}}) == {
        "name": "team docs", "metadata": {"team": "core"}}  # fmt: skip
    assert parse_vault_create({}) == {"name": None, "metadata": {}}
    assert parse_vault_create({"name": "é" * 128})["name"] == "é" * 128  # 256 bytes
    for name, param in (("é" * 129, "name"), ("   ", "name"), (7, "name")):
        assert _refused(parse_vault_create, {"name": name}).param == param
    assert _refused(parse_vault_create, {"metadata": {str(i): "v" for i in range(17)}}).param == "metadata"
    assert _refused(parse_vault_create, {"status": "archived"}).param == "status"
    assert parse_vault_update({"name": None}) == {"name": None}
    assert parse_vault_update({"metadata": {}}) == {"metadata": {}}
    assert _refused(parse_vault_update, {"metadata": None}).param == "metadata"


def test_a_credential_is_parsed_apart_from_its_secrets() -> None:
    public, secrets = parse_credential_create({"name": " docs ", "metadata": {"k": "v"}, "auth": BEARER})
    assert public == {"name": "docs", "metadata": {"k": "v"},
                      "auth": {"type": "static_bearer", "mcp_server_url": BEARER["mcp_server_url"]}}  # fmt: skip
    assert secrets == {"token": SECRET} and SECRET not in repr(public)
    oauth = {"type": "mcp_oauth", "mcp_server_url": "https://mcp.example.com/mcp", "access_token": "at-1",
             "expires_at": "2030-01-01T00:00:00Z",
             "refresh": {"client_id": "c1", "refresh_token": "rt-1", "token_endpoint": "https://auth.example.com/token",
                         "token_endpoint_auth": {"type": "client_secret_post", "client_secret": "cs-1"},
                         "scope": "read"}}  # fmt: skip
    public, secrets = parse_credential_create({"name": "o", "auth": oauth})
    assert secrets == {"access_token": "at-1", "refresh_token": "rt-1", "client_secret": "cs-1"}
    assert public["auth"] == {"type": "mcp_oauth", "mcp_server_url": oauth["mcp_server_url"],
                              "expires_at": "2030-01-01T00:00:00Z",
                              "refresh": {"client_id": "c1", "resource": None, "scope": "read",
                                          "token_endpoint": "https://auth.example.com/token",
                                          "token_endpoint_auth": {"type": "client_secret_post"}}}  # fmt: skip


@pytest.mark.parametrize(
    ("auth", "param"),
    [
        ({**BEARER, "type": "environment_variable"}, "auth.type"),
        ({**BEARER, "type": "basic"}, "auth.type"),
        ({k: v for k, v in BEARER.items() if k != "type"}, "auth.type"),
        ({k: v for k, v in BEARER.items() if k != "token"}, "auth.token"),
        ({**BEARER, "token": ""}, "auth.token"),
        ({**BEARER, "token": "a\r\nX-Evil: 1"}, "auth.token"),
        ({**BEARER, "token": 5}, "auth.token"),
        ({**BEARER, "mcp_server_url": "ftp://mcp.example.com"}, "auth.mcp_server_url"),
        ({**BEARER, "mcp_server_url": "https://user:pw@mcp.example.com"}, "auth.mcp_server_url"),
        ({**BEARER, "access_token": "x"}, "auth.access_token"),  # not a static_bearer's
        ({"type": "mcp_oauth", "mcp_server_url": "https://m.example.com", "access_token": "a",
          "expires_at": "tomorrow"}, "auth.expires_at"),
        ({"type": "mcp_oauth", "mcp_server_url": "https://m.example.com", "access_token": "a",
          "expires_at": "2030-01-01T00:00:00"}, "auth.expires_at"),  # no time zone
        ({"type": "mcp_oauth", "mcp_server_url": "https://m.example.com", "access_token": "a",
          "refresh": {"client_id": "c", "refresh_token": "r", "token_endpoint": "https://a.example.com/t",
                      "token_endpoint_auth": {"type": "client_secret_basic"}}},
         "auth.refresh.token_endpoint_auth.client_secret"),
        ({"type": "mcp_oauth", "mcp_server_url": "https://m.example.com", "access_token": "a",
          "refresh": {"client_id": "c", "refresh_token": "r", "token_endpoint": "https://a.example.com/t",
                      "token_endpoint_auth": {"type": "private_key_jwt"}}}, "auth.refresh.token_endpoint_auth.type"),
    ],
)  # fmt: skip
def test_a_credential_body_is_refused_naming_the_field(auth: dict[str, Any], param: str) -> None:
    refused = _refused(parse_credential_create, {"name": "n", "auth": auth})
    assert refused.param == param and refused.status == 400
    assert "X-Evil" not in refused.message and SECRET not in refused.message


def test_an_environment_variable_credential_is_refused_saying_why() -> None:
    refused = _refused(parse_credential_create, {"name": "n", "auth": {
        "type": "environment_variable", "secret_name": "API_KEY", "secret_value": "v",
        "networking": {"type": "unrestricted"}}})  # fmt: skip
    assert (refused.param, refused.code) == ("auth.type", "unsupported_value")
    assert "does not intercept TLS" in refused.message


def test_a_rotation_keeps_the_type_and_says_what_it_replaces() -> None:
    bearer = parse_credential_create({"name": "n", "auth": BEARER})[0]["auth"]
    assert parse_credential_update({"auth": {"type": "static_bearer", "token": "new"}}, bearer) == (
        {"auth": bearer}, {"token": "new"})
    assert _refused(parse_credential_update, {"auth": {"type": "mcp_oauth", "access_token": "a"}}, bearer).param == "auth.type"
    assert parse_credential_update({"metadata": {"a": "b"}}, bearer) == ({"metadata": {"a": "b"}}, {})
    oauth = {"type": "mcp_oauth", "mcp_server_url": "https://m.example.com", "expires_at": "2030-01-01T00:00:00Z",
             "refresh": None}  # fmt: skip
    changes, secrets = parse_credential_update({"auth": {"type": "mcp_oauth", "access_token": "a2"}}, oauth)
    assert changes["auth"]["expires_at"] is None and secrets == {"access_token": "a2"}, "a new token clears expires_at"
    refused = _refused(parse_credential_update, {"auth": {"type": "mcp_oauth", "refresh": {"refresh_token": "r"}}}, oauth)
    assert refused.param == "auth.refresh"


def test_vault_ids_and_status_filters() -> None:
    assert parse_vault_ids(None) == [] and parse_vault_ids(["vault_a", "vault_b"]) == ["vault_a", "vault_b"]
    assert _refused(parse_vault_ids, "vault_a").param == "vault_ids"
    assert _refused(parse_vault_ids, ["vault_a", "vault_a"]).param == "vault_ids[1]"
    assert _refused(parse_vault_ids, ["agent_a"]).param == "vault_ids[0]"
    assert _refused(parse_vault_ids, [f"vault_{i}" for i in range(11)]).param == "vault_ids"
    assert parse_session_create({"environment": {"type": "none"}, "agent": {"model": "sim"}, "input": "hi",
                                 "vault_ids": ["vault_a"]})["vault_ids"] == ["vault_a"]  # fmt: skip
    assert parse_status_filter([]) == ("active", "archived") and parse_status_filter(["active"]) == ("active",)
    assert _refused(parse_status_filter, ["deleted"]).param == "status"


def test_the_matching_rule() -> None:
    same = ["https://MCP.Example.com/mcp", "https://mcp.example.com:443/mcp/", "https://mcp.example.com/mcp#x"]
    assert len({server_key(url) for url in same}) == 1
    other = ["http://mcp.example.com/mcp", "https://mcp.example.com/MCP", "https://mcp.example.com:8443/mcp",
             "https://mcp.example.com/mcp?v=2", "https://mcp.example.com/mcp/x"]  # fmt: skip
    assert len({server_key(url) for url in [same[0], *other]}) == 1 + len(other)


# -- the service over a real store ----------------------------------------------------------


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    runtime = Runtime.local(RuntimeSettings(storage_path=str(tmp_path / "t.duckdb"), credentials_keys=(new_key(),),
                                            mcp=LOOPBACK))  # fmt: skip
    yield runtime
    await runtime.close()


def _bytes_under(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(path.parent.rglob("*")) if p.is_file())


async def test_crud_tenants_and_the_secret_never_in_the_file(runtime: Runtime, tmp_path: Path) -> None:
    vaults = runtime.vaults
    vault = await vaults.create_vault("acme", {"name": "docs", "metadata": {"team": "core"}})
    assert vault["id"].startswith("vault_") and vault["object"] == "vault" and set(vault) == {
        "id", "object", "created_at", "metadata", "name"}  # fmt: skip
    made = await vaults.create_credential("acme", vault["id"], {"name": "d", "auth": BEARER})
    assert made["object"] == "vault.credential" and made["vault_id"] == vault["id"] and SECRET not in str(made)
    assert await vaults.get_credential("acme", vault["id"], made["id"]) == made
    for call in (vaults.get_vault("other", vault["id"]), vaults.get_credential("other", vault["id"], made["id"]),
                 vaults.list_credentials("other", vault["id"]), vaults.delete_vault("other", vault["id"])):  # fmt: skip
        with pytest.raises(NotFound):
            await call
    assert (await vaults.list_vaults("other")).data == []
    assert [v["id"] for v in (await vaults.list_vaults("acme", metadata={"team": "core"})).data] == [vault["id"]]
    assert (await vaults.list_vaults("acme", metadata={"team": "ops"})).data == []
    assert (await vaults.list_vaults("acme", statuses=("archived",))).data == []
    assert [c["id"] for c in (await vaults.list_credentials("acme", vault["id"], statuses=("active",))).data] == [made["id"]]

    rotated = await vaults.update_credential("acme", vault["id"], made["id"], {"auth": {"type": "static_bearer",
                                                                                       "token": SECRET + "-2"}})
    assert rotated["updated_at"] >= made["updated_at"] and rotated["auth"] == made["auth"]
    updated = await vaults.update_vault("acme", vault["id"], {"name": None})
    assert updated["name"] is None and updated["metadata"] == {"team": "core"}
    with pytest.raises(NotFound) as gone:
        await vaults.create_credential("other", vault["id"], {"name": "d", "auth": BEARER})
    assert gone.value.param == "vault_id"

    await runtime.close()
    stored = _bytes_under(tmp_path / "t.duckdb")
    assert b"static_bearer" in stored, "the search finds what the credential stores in plain text"
    assert SECRET.encode() not in stored


async def test_without_credentials_keys_a_credential_is_refused_saying_how_to_make_one() -> None:
    runtime = Runtime.local(RuntimeSettings(storage_path=":memory:"))
    try:
        vault = await runtime.vaults.create_vault("acme", {})
        with pytest.raises(InvalidRequest) as refused:
            await runtime.vaults.create_credential("acme", vault["id"], {"name": "d", "auth": BEARER})
        assert (refused.value.status, refused.value.param) == (400, "auth.token")
        assert "TROUPE_CREDENTIALS_KEYS" in refused.value.message and "new_key" in refused.value.message
        assert (await runtime.vaults.list_credentials("acme", vault["id"])).data == []
    finally:
        await runtime.close()


async def test_deleting_a_vault_deletes_its_credentials(runtime: Runtime) -> None:
    vault = await runtime.vaults.create_vault("acme", {})
    made = await runtime.vaults.create_credential("acme", vault["id"], {"name": "d", "auth": BEARER})
    assert (await runtime.vaults.delete_vault("acme", vault["id"]))["deleted"] is True
    assert await runtime.store.get_credential("acme", vault["id"], made["id"]) is None
    with pytest.raises(NotFound):
        await runtime.vaults.get_vault("acme", vault["id"])


async def test_authorize_gives_matching_tools_the_token_and_keeps_their_own(runtime: Runtime) -> None:
    vault = await runtime.vaults.create_vault("acme", {})
    await runtime.vaults.create_credential("acme", vault["id"], {"name": "d", "auth": BEARER})
    tools = [{"type": "mcp", "server_label": "a", "server_url": "https://MCP.example.com/mcp/"},
             {"type": "mcp", "server_label": "b", "server_url": "https://mcp.example.com/mcp", "authorization": "own"},
             {"type": "mcp", "server_label": "c", "server_url": "https://other.example.com/mcp"},
             {"type": "function", "name": "f", "parameters": {}}]  # fmt: skip
    body = {"model": "sim", "tools": tools}
    got = await runtime.vaults.authorize("acme", [vault["id"]], body)
    assert [t.get("authorization") for t in got["tools"]] == [SECRET, "own", None, None]
    assert body["tools"] is tools and "authorization" not in tools[0], "the body given is not changed"
    assert (await runtime.vaults.authorize("other", [vault["id"]], body))["tools"] == tools, "another tenant's vault"

    second = await runtime.vaults.create_vault("acme", {})
    await runtime.vaults.create_credential("acme", second["id"], {"name": "d", "auth": BEARER})
    with pytest.raises(InvalidRequest) as ambiguous:
        await runtime.vaults.authorize("acme", [vault["id"], second["id"]], body)
    assert ambiguous.value.param == "vault_ids" and SECRET not in ambiguous.value.message


async def test_a_session_checks_its_vault_ids(runtime: Runtime) -> None:
    mine = await runtime.vaults.create_vault("acme", {})
    body = {"environment": {"type": "none"}, "agent": {"model": "sim"}, "input": "hi"}
    for tenant, vault_ids in (("other", [mine["id"]]), ("acme", [mine["id"], "vault_missing"])):
        with pytest.raises(NotFound) as missing:
            await runtime.sessions.create_session(tenant, parse_session_create({**body, "vault_ids": vault_ids}))
        assert missing.value.param == f"vault_ids[{len(vault_ids) - 1}]"
    made = await runtime.sessions.create_session("acme", parse_session_create({**body, "vault_ids": [mine["id"]]}))
    assert made["vault_ids"] == [mine["id"]]
    assert (await runtime.sessions.get_session("acme", made["id"]))["vault_ids"] == [mine["id"]]


# -- a session's turns on a real MCP server -------------------------------------------------


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[Any]:
    with serve_mcp(token=SECRET) as server:
        yield server


async def _turn_end(runtime: Runtime, session_id: str) -> dict[str, Any]:
    async def ended() -> bool:
        return (await runtime.sessions.get_session("acme", session_id))["status"] != "running"

    async def settled() -> bool:
        turns = (await runtime.sessions.list_turns("acme", session_id)).data
        return bool(turns) and turns[0]["status"] not in ("queued", "in_progress")

    await wait_until(settled, what="the turn's end")
    return (await runtime.sessions.list_turns("acme", session_id)).data[0]


async def test_a_sessions_mcp_tool_gets_its_token_from_the_vault_until_the_credential_is_gone(
    runtime: Runtime, mcp_server: Any, tmp_path: Path
) -> None:
    vault = await runtime.vaults.create_vault("acme", {"name": "mcp"})
    credential = await runtime.vaults.create_credential("acme", vault["id"], {"name": "t", "auth": {
        "type": "static_bearer", "mcp_server_url": mcp_server.url + "/", "token": SECRET}})  # fmt: skip
    agent = {"model": "sim", "tools": [{"type": "mcp", "server_label": "calc",
                                        "transport": {"type": "http", "server_url": mcp_server.url}}]}  # fmt: skip
    session = await runtime.sessions.create_session("acme", parse_session_create({
        "environment": {"type": "none"}, "agent": agent, "vault_ids": [vault["id"]],
        "input": '[[call add {"a": 2, "b": 40}]]'}))  # fmt: skip
    turn = await _turn_end(runtime, session["id"])
    assert turn["status"] == "completed", turn
    items = (await runtime.sessions.list_items("acme", session["id"], order="asc")).data
    [call] = [i for i in items if i["type"] == "mcp_call"]
    assert "42" in str(call["output"]) and call.get("error") is None

    await runtime.vaults.delete_credential("acme", vault["id"], credential["id"])
    await runtime.sessions.submit_events("acme", session["id"], parse_session_events({"events": [
        {"type": "agent.session.input.message", "input": [{"role": "user", "type": "message", "content": [
            {"type": "input_text", "text": '[[call add {"a": 1, "b": 1}]]'}]}]}]}))  # fmt: skip

    async def second_ended() -> bool:
        turns = (await runtime.sessions.list_turns("acme", session["id"])).data
        return len(turns) == 2 and turns[0]["status"] not in ("queued", "in_progress")

    await wait_until(second_ended, what="the second turn's end")
    # The server was listed on the first turn (once per conversation): the call itself is refused,
    # reported on its item as any failing call is.
    second = (await runtime.sessions.list_turns("acme", session["id"])).data[0]
    items = (await runtime.sessions.list_items("acme", session["id"], turn_id=second["id"], order="asc")).data
    [call] = [i for i in items if i["type"] == "mcp_call"]
    assert (call["status"], call["error"]["code"]) == ("failed", 401), "no stale token"

    await runtime.close()
    assert SECRET.encode() not in _bytes_under(tmp_path / "t.duckdb")


# -- OAuth refresh --------------------------------------------------------------------------


class TokenEndpoint:
    """A token endpoint on loopback that hands out ``at-<n>`` (or the ``tokens`` given, in turn)
    and rotates refresh tokens."""

    def __init__(self, tokens: tuple[str, ...] = ()) -> None:
        self.tokens = tokens
        self.requests: list[tuple[dict[str, str], str | None]] = []
        self.app = Starlette(routes=[Route("/token", self.token, methods=["POST"]),
                                     Route("/health", lambda r: JSONResponse({}))])  # fmt: skip

    async def token(self, request: Request) -> JSONResponse:
        form = dict(parse_qsl((await request.body()).decode()))
        self.requests.append((form, request.headers.get("authorization")))
        n = len(self.requests)
        token = self.tokens[n - 1] if self.tokens else f"at-{n}"
        return JSONResponse({"access_token": token, "token_type": "Bearer", "expires_in": 3600,
                             "refresh_token": f"rt-{n}"})  # fmt: skip


@pytest.mark.parametrize("client_auth", ["none", "client_secret_basic", "client_secret_post"])
async def test_an_expired_oauth_token_is_refreshed_sealed_and_stored(
    runtime: Runtime, tmp_path: Path, client_auth: str
) -> None:
    endpoint = TokenEndpoint()
    with serve_app(endpoint.app) as base:
        vault = await runtime.vaults.create_vault("acme", {})
        endpoint_auth: dict[str, Any] = {"type": client_auth}
        if client_auth != "none":
            endpoint_auth["client_secret"] = "cs-secret-1"
        expired = datetime.fromtimestamp(time.time() - 10, UTC).isoformat()
        made = await runtime.vaults.create_credential("acme", vault["id"], {"name": "o", "auth": {
            "type": "mcp_oauth", "mcp_server_url": "https://mcp.example.com/mcp", "access_token": "at-old",
            "expires_at": expired, "refresh": {"client_id": "client 1", "refresh_token": "rt-0", "scope": "read",
                                               "token_endpoint": f"{base}/token", "token_endpoint_auth": endpoint_auth}}})  # fmt: skip
        body = {"model": "sim", "tools": [{"type": "mcp", "server_label": "m", "server_url": "https://mcp.example.com/mcp"}]}
        got = await runtime.vaults.authorize("acme", [vault["id"]], body)
        assert got["tools"][0]["authorization"] == "at-1"
        [(form, header)] = endpoint.requests
        assert (form["grant_type"], form["refresh_token"], form["scope"]) == ("refresh_token", "rt-0", "read")
        if client_auth == "client_secret_basic":
            assert header == "Basic " + base64.b64encode(b"client+1:cs-secret-1").decode() and "client_id" not in form
        else:
            assert header is None and form["client_id"] == "client 1"
            assert form.get("client_secret") == ("cs-secret-1" if client_auth == "client_secret_post" else None)
        stored = await runtime.vaults.get_credential("acme", vault["id"], made["id"])
        assert datetime.fromisoformat(stored["auth"]["expires_at"]).timestamp() > time.time() + 3000

        again = await runtime.vaults.authorize("acme", [vault["id"]], body)
        assert again["tools"][0]["authorization"] == "at-1" and len(endpoint.requests) == 1, "fresh: not refreshed"

        past = datetime.fromtimestamp(time.time() - 1, UTC).isoformat()
        await runtime.vaults.update_credential("acme", vault["id"], made["id"], {"auth": {"type": "mcp_oauth",
                                                                                          "expires_at": past}})
        assert (await runtime.vaults.authorize("acme", [vault["id"]], body))["tools"][0]["authorization"] == "at-2"
        assert endpoint.requests[1][0]["refresh_token"] == "rt-1", "the rotated refresh token was kept"
    await runtime.close()
    stored_bytes = _bytes_under(tmp_path / "t.duckdb")
    for secret in (b"at-old", b"at-1", b"rt-0", b"rt-1", b"cs-secret-1"):
        assert secret not in stored_bytes


async def test_a_tool_names_its_credential_where_several_match(runtime: Runtime) -> None:
    """Two credentials for one server: a session is refused (naming ``vault_ids``) unless the
    agent's tool names one (``credential_id``), which must be in the session's vaults and for
    that tool's server."""
    bearer = {**BEARER, "mcp_server_url": "http://127.0.0.1:9/mcp"}  # the allowlist's: an agent's URL is checked
    first, second = await runtime.vaults.create_vault("acme", {}), await runtime.vaults.create_vault("acme", {})
    await runtime.vaults.create_credential("acme", first["id"], {"name": "a", "auth": bearer})
    chosen = await runtime.vaults.create_credential("acme", second["id"], {"name": "b", "auth": {**bearer,
                                                                                               "token": "sk-chosen"}})
    elsewhere = await runtime.vaults.create_credential("acme", second["id"], {"name": "c", "auth": {
        **bearer, "mcp_server_url": "http://127.0.0.1:9/other"}})  # fmt: skip
    vault_ids = [first["id"], second["id"]]

    def session(credential_id: str | None) -> dict[str, Any]:
        tool = {"type": "mcp", "server_label": "m", "credential_id": credential_id,
                "transport": {"type": "http", "server_url": bearer["mcp_server_url"]}}  # fmt: skip
        return parse_session_create({"environment": {"type": "none"}, "agent": {"model": "sim", "tools": [tool]},
                                     "vault_ids": vault_ids, "input": "hi"})  # fmt: skip

    for credential_id, param in ((None, "vault_ids"), ("vcred_missing", "agent.tools[0].credential_id"),
                                 (elsewhere["id"], "agent.tools[0].credential_id")):  # fmt: skip
        with pytest.raises(InvalidRequest) as refused:
            await runtime.sessions.create_session("acme", session(credential_id))
        assert refused.value.param == param and SECRET not in refused.value.message
    agent = session(chosen["id"])["agent"]  # as the session's turns build their requests
    body = {"tools": agent_response_tools(agent)}
    assert (await runtime.vaults.authorize("acme", vault_ids, body, chosen_credentials(agent)))["tools"][0][
        "authorization"] == "sk-chosen"  # fmt: skip


async def test_a_key_that_is_gone_leaves_a_credential_unused_until_it_is_rotated_whole(tmp_path: Path) -> None:
    path = str(tmp_path / "t.duckdb")
    first = Runtime.local(RuntimeSettings(storage_path=path, credentials_keys=(new_key(),), mcp=LOOPBACK))
    vault = await first.vaults.create_vault("acme", {})
    bearer = await first.vaults.create_credential("acme", vault["id"], {"name": "b", "auth": BEARER})
    oauth = await first.vaults.create_credential("acme", vault["id"], {"name": "o", "auth": {
        "type": "mcp_oauth", "mcp_server_url": "https://o.example.com/mcp", "access_token": "at-1",
        "refresh": {"client_id": "c", "refresh_token": "rt-1", "token_endpoint": "http://127.0.0.1:9/token",
                    "token_endpoint_auth": {"type": "none"}}}})  # fmt: skip
    await first.close()

    unkeyed = Runtime.local(RuntimeSettings(storage_path=path))
    try:
        with pytest.raises(InvalidRequest) as refused:
            await unkeyed.vaults.update_credential("acme", vault["id"], bearer["id"], {"auth": {
                "type": "static_bearer", "token": "t2"}})  # fmt: skip
        assert refused.value.param == "auth.token" and "TROUPE_CREDENTIALS_KEYS" in refused.value.message
    finally:
        await unkeyed.close()

    other = Runtime.local(RuntimeSettings(storage_path=path, credentials_keys=(new_key(),)))
    try:
        tools = [{"type": "mcp", "server_label": "b", "server_url": BEARER["mcp_server_url"]}]
        got = await other.vaults.authorize("acme", [vault["id"]], {"tools": tools})
        assert "authorization" not in got["tools"][0], "sealed with a key that is gone: not used"
        await other.vaults.update_credential("acme", vault["id"], bearer["id"], {"auth": {"type": "static_bearer",
                                                                                         "token": "t2"}})
        got = await other.vaults.authorize("acme", [vault["id"]], {"tools": tools})
        assert got["tools"][0]["authorization"] == "t2", "rotated whole: sealed with this server's key"
        with pytest.raises(InvalidRequest) as partial:
            await other.vaults.update_credential("acme", vault["id"], oauth["id"], {"auth": {"type": "mcp_oauth",
                                                                                            "access_token": "at-2"}})
        assert partial.value.param == "auth" and "refresh_token" in partial.value.message
        whole = {"type": "mcp_oauth", "access_token": "at-2", "refresh": {"refresh_token": "rt-2"}}
        await other.vaults.update_credential("acme", vault["id"], oauth["id"], {"auth": whole})
        oauth_tools = [{"type": "mcp", "server_label": "o", "server_url": "https://o.example.com/mcp"}]
        got = await other.vaults.authorize("acme", [vault["id"]], {"tools": oauth_tools})
        assert got["tools"][0]["authorization"] == "at-2"
    finally:
        await other.close()


def _oauth(server_url: str, access_token: str, token_endpoint: str) -> dict[str, Any]:
    return {"name": "o", "auth": {"type": "mcp_oauth", "mcp_server_url": server_url, "access_token": access_token,
                                  "refresh": {"client_id": "c", "refresh_token": "rt-0", "token_endpoint": token_endpoint,
                                              "token_endpoint_auth": {"type": "none"}}}}  # fmt: skip


async def _oauth_session(runtime: Runtime, server_url: str, vault_id: str, text: str) -> dict[str, Any]:
    agent = {"model": "sim", "tools": [{"type": "mcp", "server_label": "calc",
                                        "transport": {"type": "http", "server_url": server_url}}]}  # fmt: skip
    return await runtime.sessions.create_session("acme", parse_session_create({
        "environment": {"type": "none"}, "agent": agent, "vault_ids": [vault_id], "input": text}))  # fmt: skip


async def _next_turn(runtime: Runtime, session_id: str, text: str, turns: int) -> list[dict[str, Any]]:
    """Send ``text`` as the session's next turn (its ``turns``-th); that turn's items once it ended."""
    if turns > 1:
        await runtime.sessions.submit_events("acme", session_id, parse_session_events({"events": [
            {"type": "agent.session.input.message", "input": [{"role": "user", "type": "message",
                                                               "content": [{"type": "input_text", "text": text}]}]}]}))  # fmt: skip

    async def ended() -> bool:
        listed = (await runtime.sessions.list_turns("acme", session_id)).data
        return len(listed) == turns and listed[0]["status"] not in ("queued", "in_progress")

    await wait_until(ended, what=f"turn {turns}'s end")
    turn = (await runtime.sessions.list_turns("acme", session_id)).data[0]
    return (await runtime.sessions.list_items("acme", session_id, turn_id=turn["id"], order="asc")).data


async def test_a_listing_refused_with_401_refreshes_the_oauth_token_and_starts_again(
    runtime: Runtime, mcp_server: Any
) -> None:
    """No expiry known, the token stale: the server refuses the listing (401), the credential is
    refreshed and the turn's response started once more, with the new token."""
    endpoint = TokenEndpoint(tokens=(SECRET,))
    with serve_app(endpoint.app) as base:
        vault = await runtime.vaults.create_vault("acme", {})
        await runtime.vaults.create_credential("acme", vault["id"], _oauth(mcp_server.url, "at-stale", f"{base}/token"))
        session = await _oauth_session(runtime, mcp_server.url, vault["id"], '[[call add {"a": 2, "b": 40}]]')
        items = await _next_turn(runtime, session["id"], "", 1)
        [call] = [i for i in items if i["type"] == "mcp_call"]
        assert "42" in str(call["output"]) and len(endpoint.requests) == 1


async def test_a_call_refused_with_401_refreshes_the_oauth_token_for_the_next_turn(runtime: Runtime) -> None:
    """The server listed with the first token, then stops taking it: the call that is refused
    (401, on its item) has the next turn refresh the credential first."""
    endpoint = TokenEndpoint(tokens=("tok-b",))
    with serve_mcp(token="tok-a") as server, serve_app(endpoint.app) as base:
        vault = await runtime.vaults.create_vault("acme", {})
        await runtime.vaults.create_credential("acme", vault["id"], _oauth(server.url, "tok-a", f"{base}/token"))
        session = await _oauth_session(runtime, server.url, vault["id"], '[[call add {"a": 2, "b": 40}]]')
        [first] = [i for i in await _next_turn(runtime, session["id"], "", 1) if i["type"] == "mcp_call"]
        assert "42" in str(first["output"]) and endpoint.requests == []
        server.token = "tok-b"
        server.restart()
        refused = await _next_turn(runtime, session["id"], '[[call add {"a": 1, "b": 1}]]', 2)
        assert [i["error"]["code"] for i in refused if i["type"] == "mcp_call"] == [401]
        assert endpoint.requests == [], "a call refused is not retried within its turn"
        again = await _next_turn(runtime, session["id"], '[[call add {"a": 3, "b": 3}]]', 3)
        [call] = [i for i in again if i["type"] == "mcp_call"]
        assert "6" in str(call["output"]) and len(endpoint.requests) == 1
