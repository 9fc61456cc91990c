"""Durable runs whose steps call MCP tools, resumed after their server stops mid-step: the
in-process runtime (as tests/unit/test_resume.py) with a real MCP server on loopback
(tests/mcp_servers.py). Its counted tools write their runs to a SQLite side table
(tests/side_effects.py): ``note`` and ``hold_once`` are not idempotent, ``hold`` is
annotated ``idempotentHint``. "The server stops" is ``Runtime.close()``, which cancels the
run mid-step and stores nothing of it but its checkpoints.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.loop_harness import sim_request as req
from tests.mcp_servers import McpTestServer, serve_mcp
from tests.servers import wait_until
from tests.side_effects import executions
from tests.unit.test_resume import assert_one_unbroken_log, events_of, finished, settings, shape, step_kinds
from troupe.agentloop.checkpoint import INTERRUPTED
from troupe.runtime import Runtime
from troupe.runtime.settings import McpSettings
from troupe.storage.credentials import CREDENTIALS_NOT_KEPT, new_key


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpTestServer]:
    with serve_mcp() as server:
        yield server


def runtime_on(tmp_path: Path) -> Runtime:
    return Runtime.local(settings(tmp_path, mcp=McpSettings(allowed_urls=("http://127.0.0.1:*",))))


def mcp(server: McpTestServer, **kw: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "side", "server_url": server.url, "require_approval": "never", **kw}


def call(name: str, **arguments: Any) -> str:
    return f"[[call {name} {json.dumps(arguments)}]]"


def mcp_calls(response: dict[str, Any]) -> list[tuple[str, str | None, str | None]]:
    return [(i["name"], i["output"], i["error"]) for i in response["output"] if i["type"] == "mcp_call"]


async def test_a_restart_during_mcp_calls_reruns_only_the_idempotent_one(tmp_path, mcp_server):
    db, gate = str(tmp_path / "side.sqlite"), tmp_path / "gate"
    script = call("note", db=db, key="n") + " " + call("hold", db=db, key="h", path=str(gate))
    body = {"input": script, "tools": [mcp(mcp_server)]}
    first = runtime_on(tmp_path)
    started = await first.background("", req(**body, background=True))

    async def note_settled() -> bool:
        return "tool" in await step_kinds(first, started["id"]) and executions(db, "h") == 1

    await wait_until(note_settled, what="note's result stored while hold runs")
    await first.close()
    gate.touch()
    second = runtime_on(tmp_path)
    try:
        assert await second.recover() == 1
        resumed = await finished(second, started["id"])
        assert resumed["status"] == "completed"
        assert executions(db, "n") == 1, "a settled MCP call never runs again"
        assert executions(db, "h") == 2, "the idempotentHint call in flight ran again"
        assert mcp_calls(resumed) == [("note", "recorded n", None), ("hold", "h passed", None)]
        assert [i["type"] for i in resumed["output"]].count("mcp_list_tools") == 1, "the listing is not shown again"
        assert_one_unbroken_log(await events_of(second, started["id"]))
        uncrashed = await second.respond("", req(**body))
        assert shape(resumed["output"]) == shape(uncrashed["output"])
    finally:
        await second.close()


async def test_a_restart_during_an_approved_mcp_call_does_not_run_it_again(tmp_path, mcp_server):
    db, gate = str(tmp_path / "side.sqlite"), tmp_path / "gate"
    tools = [mcp(mcp_server, require_approval="always")]
    first = runtime_on(tmp_path)
    asked = await first.respond("", req(input=call("hold_once", db=db, key="o", path=str(gate)), tools=tools))
    request = asked["output"][-1]
    assert request["type"] == "mcp_approval_request" and executions(db, "o") == 0
    approve = {"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True}
    started = await first.background(
        "", req(input=[approve], tools=tools, previous_response_id=asked["id"], background=True)
    )

    async def approved_running() -> bool:
        return await step_kinds(first, started["id"]) == ["approved"] and executions(db, "o") == 1

    await wait_until(approved_running, what="the approved call stored, then running")
    await first.close()
    gate.touch()
    second = runtime_on(tmp_path)
    try:
        assert await second.recover() == 1
        resumed = await finished(second, started["id"])
        assert resumed["status"] == "completed"
        assert executions(db, "o") == 1, "an approved call in flight is not run again"
        [(name, output, error)] = mcp_calls(resumed)
        assert name == "hold_once" and output is None
        assert error["message"] == "interrupted by a host failure; not run again (the tool is not idempotent)"
        assert resumed["output"][-1]["content"][0]["text"] == f"hold_once -> {INTERRUPTED}", "what the model was told"
        assert resumed["output"][0]["approval_request_id"] == request["id"], "the approved call's item, reopened"
        assert_one_unbroken_log(await events_of(second, started["id"]))
    finally:
        await second.close()


# -- credentials: never on disk in plain text; a restart resumes with them only if sealed ----------

TOKEN = "sk-resume-credential-7c1f"


@pytest.fixture(scope="module")
def guarded_server() -> Iterator[McpTestServer]:
    """The same tools, behind a bearer token: a call without the credentials is refused (401)."""
    with serve_mcp(token=TOKEN) as server:
        yield server


async def lost_during_hold(tmp_path: Path, server: McpTestServer, **options: Any) -> tuple[str, str, Path]:
    """Start a background run whose MCP call (``hold``) waits on a gate, with the server's
    credentials in ``authorization`` and a header; stop its server mid-call. The run's id, the
    side table and the gate."""
    db, gate = str(tmp_path / "side.sqlite"), tmp_path / "gate"
    tools = [mcp(server, authorization=TOKEN, headers={"X-Probe": TOKEN})]
    first = Runtime.local(settings(tmp_path, mcp=McpSettings(allowed_urls=("http://127.0.0.1:*",)), **options))
    started = await first.background("", req(input=call("hold", db=db, key="h", path=str(gate)), tools=tools,
                                             background=True))  # fmt: skip

    async def holding() -> bool:
        return executions(db, "h") == 1

    await wait_until(holding, what="the MCP call running, the token accepted")
    await first.close()
    gate.touch()
    return started["id"], db, gate


def bytes_hold(tmp_path: Path, secret: str) -> list[str]:
    """The files under ``tmp_path`` whose bytes hold ``secret``."""
    return [str(p) for p in tmp_path.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


async def test_without_a_key_a_run_that_needs_credentials_fails_clearly_after_a_restart(tmp_path, guarded_server):
    response_id, db, _ = await lost_during_hold(tmp_path, guarded_server)
    assert bytes_hold(tmp_path, TOKEN) == [], "no credential reached disk"
    second = Runtime.local(settings(tmp_path, mcp=McpSettings(allowed_urls=("http://127.0.0.1:*",))))
    try:
        assert await second.recover() == 1
        failed = await second.get_response("", response_id)
        assert failed["status"] == "failed"
        assert failed["error"]["message"] == CREDENTIALS_NOT_KEPT
        assert [i["type"] for i in failed["output"]] == ["mcp_list_tools", "mcp_call"], "the output it had"
        assert executions(db, "h") == 1, "nothing called the server again"
        assert [e["type"] for e in (await events_of(second, response_id))[-2:]] == ["error", "response.failed"]
    finally:
        await second.close()


async def test_with_a_key_a_run_resumes_with_its_sealed_credentials(tmp_path, guarded_server):
    old, key = new_key(), new_key()
    response_id, db, _ = await lost_during_hold(tmp_path, guarded_server, credentials_keys=(key,))
    assert bytes_hold(tmp_path, TOKEN) == [], "sealed, never in plain text"
    # Rotation: a new key first, the one the run was sealed with still there to open it.
    second = Runtime.local(settings(tmp_path, mcp=McpSettings(allowed_urls=("http://127.0.0.1:*",)),
                                    credentials_keys=(old, key)))  # fmt: skip
    try:
        assert await second.recover() == 1
        resumed = await finished(second, response_id)
        assert resumed["status"] == "completed", resumed.get("error")
        assert executions(db, "h") == 2, "the idempotent call ran again, and the guarded server let it in"
        assert mcp_calls(resumed) == [("hold", "h passed", None)]
        assert all("authorization" not in t and "headers" not in t for t in resumed["tools"]), "never echoed"
    finally:
        await second.close()
    assert bytes_hold(tmp_path, TOKEN) == []


async def test_a_run_sealed_with_a_key_the_server_no_longer_has_fails_clearly(tmp_path, guarded_server):
    response_id, db, _ = await lost_during_hold(tmp_path, guarded_server, credentials_keys=(new_key(),))
    second = Runtime.local(settings(tmp_path, mcp=McpSettings(allowed_urls=("http://127.0.0.1:*",)),
                                    credentials_keys=(new_key(),)))  # fmt: skip
    try:
        assert await second.recover() == 1
        failed = await second.get_response("", response_id)
        assert failed["status"] == "failed" and failed["error"]["message"] == CREDENTIALS_NOT_KEPT
        assert executions(db, "h") == 1
    finally:
        await second.close()
