"""The console's session view over the in-process runtime: a session whose two subagents ran at
once is one timeline, read from the session's OTLP traces (the same tree as the API's
``…/traces``); sessions are per tenant as in the API."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from tests.unit.test_console_api import ACME, ADMIN, ADMIN_KEY, API, BETA, KEYS, client_of
from troupe.console.session_view import span_rows
from troupe.protocol.sessions import parse_session_create
from troupe.runtime import Runtime, RuntimeSettings
from troupe.runtime.session_traces import SessionTraces

TASK = json.dumps({"task": '[[call sleep {"ms": 200}]]'})


@pytest.fixture
async def session(tmp_path) -> AsyncIterator[tuple[Runtime, str]]:
    """A runtime, and tenant acme's session whose turn made two subagents and waited for them."""
    runtime = Runtime.local(RuntimeSettings(storage_path=str(tmp_path / "t.duckdb")))
    body = {"environment": {"type": "none"}, "agent": {"model": "sim", "multi_agent": {"enabled": True}},
            "input": f"[[call create_subagent {TASK}]] [[call create_subagent {TASK}]] [[then wait_for_subagents {{}}]]"}  # fmt: skip
    events = await runtime.sessions.stream_new_session("acme", parse_session_create(body))
    async for batch in events:
        if any(e["type"] == "agent.session.turn.completed" for e in batch):
            break
    await events.aclose()
    [made] = (await runtime.sessions.list_sessions("acme")).data
    yield runtime, made["id"]
    await runtime.close()


async def test_a_sessions_subagents_share_one_timeline(session: tuple[Runtime, str]) -> None:
    runtime, session_id = session
    async with client_of(runtime, api_keys=KEYS, admin_keys=(ADMIN,)) as client:
        listed = (await client.get(f"{API}/sessions", headers=ACME)).json()
        assert [s["id"] for s in listed["data"]] == [session_id] and listed["data"][0]["multi_agent"] is True
        assert (await client.get(f"{API}/sessions", headers=BETA)).json()["data"] == []
        reply = await client.get(f"{API}/sessions/{session_id}", headers=ACME)
        assert reply.status_code == 200, reply.text
        data = reply.json()

        # Another tenant's session is unknown; an admin names the tenant.
        assert (await client.get(f"{API}/sessions/{session_id}", headers=BETA)).status_code == 404
        assert (await client.get(f"{API}/sessions/{session_id}", headers=ADMIN_KEY)).status_code == 404
        admin = await client.get(f"{API}/sessions/{session_id}", params={"tenant": "acme"}, headers=ADMIN_KEY)
        assert admin.status_code == 200 and admin.json()["rows"] == data["rows"]
        assert (await client.get(f"{API}/sessions", params={"tenant": "beta"}, headers=ACME)).status_code == 403

    assert data["session"]["id"] == session_id and len(data["subagents"]) == 2 and len(data["turns"]) == 1
    rows = data["rows"]
    # One source of truth: the rows are the API's traces, as rows.
    traces = await SessionTraces(runtime.sessions).list_traces("acme", session_id, order="asc")
    assert rows == span_rows([t["otlp"] for t in traces.data])
    by_id = {r["span_id"]: r for r in rows}
    assert rows[0]["depth"] == 0 and rows[0]["kind"] == "turn" and rows[0]["start_s"] == 0
    sleeps = [r for r in rows if r["name"] == "execute_tool sleep"]
    assert len(sleeps) == 2
    for sleep in sleeps:
        chain = [sleep["name"]]
        row = sleep
        while row["parent_id"]:
            row = by_id[row["parent_id"]]
            chain.append(row["name"])
        assert chain == ["execute_tool sleep", "troupe.response", "agent.session.turn", "execute_tool create_subagent",
                         "troupe.response", "agent.session.turn"] and sleep["depth"] == 5  # fmt: skip
        assert rows.index(by_id[sleep["parent_id"]]) < rows.index(sleep)  # parents first
    assert max(r["start_s"] for r in sleeps) < min(r["end_s"] for r in sleeps), "side by side"
    assert {r["kind"] for r in rows} == {"turn", "response", "model", "tool"}


def test_rows_are_depth_first_and_plain() -> None:
    def span(span_id: str, parent: str | None, name: str, start: int, end: int) -> dict:
        out = {"traceId": "t" * 32, "spanId": span_id, "name": name, "startTimeUnixNano": str(start),
               "endTimeUnixNano": str(end), "attributes": [{"key": "n", "value": {"intValue": "3"}}]}  # fmt: skip
        return out | ({"parentSpanId": parent} if parent else {})

    otlp = {"resourceSpans": [{"scopeSpans": [{"spans": [
        span("a", None, "agent.session.turn", 1_000_000_000, 3_000_000_000),
        span("b", "a", "troupe.response", 1_000_000_000, 2_000_000_000),
        span("d", "a", "troupe.response", 2_000_000_000, 3_000_000_000),
        span("c", "b", "mcp_call add", 1_500_000_000, 2_000_000_000) | {"status": {"code": 2, "message": "no"}},
    ]}]}]}  # fmt: skip
    rows = span_rows([otlp])
    assert [(r["span_id"], r["depth"], r["kind"]) for r in rows] == [
        ("a", 0, "turn"), ("b", 1, "response"), ("c", 2, "tool"), ("d", 1, "response")]  # fmt: skip
    assert (rows[2]["start_s"], rows[2]["end_s"], rows[2]["error"], rows[2]["attributes"]) == (0.5, 1.0, "no", {"n": 3})
    assert span_rows([]) == []
