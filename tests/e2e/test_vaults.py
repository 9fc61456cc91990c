"""Vaults with the ``openai`` SDK only (``client.beta.agents.vaults``, ``client.beta.agents.sessions``),
over real HTTP, on an in-process app with a DuckDB file and ``credentials_keys``, and a real MCP
server that requires a bearer token (tests/mcp_servers.py).

One test, one server: a session whose vault holds the token calls the tool; the token is then
searched, as an attacker would, in every answer the API gave (vault, credential, session, turn,
items, response, step traces, the session's traces) and in the bytes of every file under the storage path (the DuckDB
file and its WAL, the journal), and is nowhere; once the credential is deleted, the next turn's
call gets the server's 401 (no stale token); another tenant can neither see nor use the vault.
The many cases of the bodies, the refusals, the matching rule and the OAuth refresh:
tests/unit/test_vaults.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI

from tests.mcp_servers import serve_mcp
from tests.servers import served_local
from troupe.runtime.settings import McpSettings
from troupe.serve.config import ServerSettings
from troupe.storage.credentials import new_key

SECRET = "sk-vault-e2e-2d8b41"
KEYS = {"sk-alice": "alice", "sk-bob": "bob"}
NEEDLE = "vault-e2e-name-9c0d"  # stored in plain text: the byte search must find it


def _until_idle(client: OpenAI, session_id: str, turns: int) -> list[Any]:
    deadline = time.monotonic() + 30
    while True:
        listed = client.beta.agents.sessions.turns.list(session_id).data
        if len(listed) == turns and listed[0].status not in ("queued", "in_progress"):
            return listed
        assert time.monotonic() < deadline, f"the session's turn {turns} did not end within 30 s"
        time.sleep(0.05)


def _files_holding(root: Path, needle: bytes) -> tuple[list[str], int]:
    found, read = [], 0
    for path in root.rglob("*"):
        if path.is_file():
            read += 1
            if needle in path.read_bytes():
                found.append(str(path))
    return found, read


def test_a_sessions_vault_authorizes_its_mcp_server_and_its_token_is_never_shown_nor_stored(tmp_path: Path) -> None:
    storage = tmp_path / "store"
    storage.mkdir()
    answers: list[str] = []

    def keep(value: Any) -> Any:
        answers.append(value.model_dump_json() if hasattr(value, "model_dump_json") else json.dumps(value))
        return value

    with serve_mcp(token=SECRET) as mcp:
        server = served_local(ServerSettings(api_keys=KEYS), storage_path=str(storage / "troupe.duckdb"),
                              credentials_keys=(new_key(),), mcp=McpSettings(allowed_urls=("http://127.0.0.1:*",)))  # fmt: skip
        root = next(server)
        try:
            alice = OpenAI(base_url=f"{root}/v1", api_key="sk-alice", max_retries=0)
            bob = OpenAI(base_url=f"{root}/v1", api_key="sk-bob", max_retries=0)
            vaults = alice.beta.agents.vaults
            vault = keep(vaults.create(name=f"  {NEEDLE}  ", metadata={"team": "docs"}))
            assert (vault.object, vault.name, vault.metadata) == ("vault", NEEDLE, {"team": "docs"})
            credential = keep(vaults.credentials.create(vault.id, name="calc", auth={
                "type": "static_bearer", "mcp_server_url": mcp.url, "token": SECRET}))  # fmt: skip
            assert (credential.object, credential.vault_id, credential.auth.type) == ("vault.credential", vault.id,
                                                                                     "static_bearer")  # fmt: skip
            keep(vaults.retrieve(vault.id))
            keep(vaults.credentials.retrieve(credential.id, vault_id=vault.id))
            assert [v.id for v in keep(vaults.list(status=["active"], metadata={"team": "docs"})).data] == [vault.id]
            assert keep(vaults.list(status="archived")).data == []
            assert [c.id for c in keep(vaults.credentials.list(vault.id)).data] == [credential.id]
            with pytest.raises(openai.BadRequestError) as refused:
                vaults.credentials.create(vault.id, name="env", auth={
                    "type": "environment_variable", "secret_name": "K", "secret_value": SECRET,
                    "networking": {"type": "unrestricted"}})  # fmt: skip
            assert refused.value.body["param"] == "auth.type"

            agent = alice.beta.agents.create(model="sim", tools=[{
                "type": "mcp", "server_label": "calc", "transport": {"type": "http", "server_url": mcp.url}}])  # fmt: skip
            session = keep(alice.beta.agents.sessions.create(
                agent_id=agent.id, environment={"type": "none"}, vault_ids=[vault.id],
                input='[[call add {"a": 2, "b": 40}]]'))  # fmt: skip
            assert session.vault_ids == [vault.id]
            [turn] = _until_idle(alice, session.id, 1)
            assert turn.status == "completed"
            items = keep(alice.beta.agents.sessions.items.list(session.id, order="asc")).data
            [call] = [i for i in items if i.type == "mcp_call"]
            assert "42" in str(call.output), call

            keep(alice.beta.agents.sessions.retrieve(session.id))
            keep(alice.beta.agents.sessions.turns.list(session.id))
            traces = keep(alice.beta.agents.sessions.traces.list(session.id))
            assert "calc" in traces.model_dump_json(), "the session's trace shows the MCP call"
            responses = alice.get("/responses", cast_to=object, options={"params": {"limit": 100}})
            keep(responses)
            mine = [r["id"] for r in responses["data"] if r["metadata"].get("agent_session_id") == session.id]
            assert mine, "the session's turn is a response of the tenant's"
            for response_id in mine:
                keep(alice.responses.retrieve(response_id))
                keep(alice.responses.input_items.list(response_id))
                keep(alice.get(f"/responses/{response_id}/step_traces", cast_to=object))

            for call_of_bob in (lambda: bob.beta.agents.vaults.retrieve(vault.id),
                                lambda: bob.beta.agents.vaults.credentials.list(vault.id),
                                lambda: bob.beta.agents.vaults.delete(vault.id)):  # fmt: skip
                with pytest.raises(openai.NotFoundError):
                    call_of_bob()
            assert bob.beta.agents.vaults.list().data == []
            with pytest.raises(openai.NotFoundError) as not_bobs:
                bob.beta.agents.sessions.create(agent={"model": "sim"}, environment={"type": "none"},
                                                vault_ids=[vault.id], input="hi")  # fmt: skip
            assert not_bobs.value.body["param"] == "vault_ids[0]"

            deleted = keep(vaults.credentials.delete(credential.id, vault_id=vault.id))
            assert (deleted.id, deleted.object, deleted.deleted) == (credential.id, "vault.credential.deleted", True)
            alice.beta.agents.sessions.events.create(session.id, events=[{
                "type": "agent.session.input.message", "input": [{"role": "user", "type": "message",
                "content": [{"type": "input_text", "text": '[[call add {"a": 1, "b": 1}]]'}]}]}])  # fmt: skip
            second = _until_idle(alice, session.id, 2)[0]
            later = keep(alice.beta.agents.sessions.turns.items.list(second.id, session_id=session.id, order="asc")).data
            [refused_call] = [i for i in later if i.type == "mcp_call"]
            assert refused_call.error is not None and "401" in json.dumps(refused_call.model_dump()), "no stale token"
            live = _files_holding(storage, SECRET.encode())
            assert live[1] >= 2 and live[0] == [], f"the token is in {live[0]} (the WAL before its checkpoint)"
            assert _files_holding(storage, NEEDLE.encode())[0], "the search finds what the vault stores in plain text"
        finally:
            server.close()  # the runtime closes: its DuckDB file is checkpointed, its WAL kept as it was

    shown = "\n".join(answers)
    assert NEEDLE in shown and SECRET not in shown
    holding, read = _files_holding(storage, SECRET.encode())
    assert read >= 1 and holding == [], f"the token is in {holding}"
    assert _files_holding(storage, NEEDLE.encode())[0], "the search finds what the vault stores in plain text"
