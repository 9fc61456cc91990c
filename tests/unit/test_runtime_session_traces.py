"""A session's traces on the in-process runtime (troupe.runtime.session_traces): a running turn's
trace holds the steps stored so far; sessions are per tenant; a subagent is not a session."""

from __future__ import annotations

import json

import pytest

from tests.servers import until, wait_until
from tests.side_effects import COUNTED_TOOLS, executions
from troupe.protocol import InvalidRequest, NotFound
from troupe.protocol.sessions import parse_session_create
from troupe.runtime import Runtime, RuntimeSettings
from troupe.runtime.session_traces import SessionTraces

pytestmark = pytest.mark.asyncio


def _names(page) -> list[str]:
    return [s["name"] for t in page.data for r in t["otlp"]["resourceSpans"] for sc in r["scopeSpans"] for s in sc["spans"]]


async def test_a_running_turns_trace_holds_what_its_finished_steps_stored(tmp_path) -> None:
    db, gate = str(tmp_path / "side.sqlite"), tmp_path / "gate"
    call = json.dumps({"db": db, "key": "g", "path": str(gate)})
    runtime = Runtime.local(RuntimeSettings(storage_path=str(tmp_path / "t.duckdb"), tools=COUNTED_TOOLS))
    traces = SessionTraces(runtime.sessions)
    try:
        body = {"environment": {"type": "none"}, "agent": {"model": "sim"}, "input": f"[[call gate {call}]]"}
        session = await runtime.sessions.create_session("t1", parse_session_create(body))
        await until(lambda: executions(db, "g") == 1, what="the gate tool started")

        async def model_step_stored() -> bool:
            return "chat sim" in _names(await traces.list_traces("t1", session["id"]))

        await wait_until(model_step_stored, what="the model call's checkpoint")
        running = await traces.list_traces("t1", session["id"])
        assert _names(running) == ["agent.session.turn", "troupe.response", "chat sim"]  # the tool runs still
        gate.touch()

        async def ended() -> bool:
            return (await runtime.sessions.get_session("t1", session["id"]))["status"] == "idle"

        await wait_until(ended, what="the turn's end")
        done = await traces.list_traces("t1", session["id"])
        assert _names(done) == ["agent.session.turn", "troupe.response", "chat sim", "execute_tool gate", "chat sim"]
        spans = done.data[0]["otlp"]["resourceSpans"][0]["scopeSpans"][0]["spans"]
        assert spans[:3] != running.data[0]["otlp"]["resourceSpans"][0]["scopeSpans"][0]["spans"]  # it ended later
        assert [s["spanId"] for s in spans[:3]] == [s["spanId"] for s in
                                                    running.data[0]["otlp"]["resourceSpans"][0]["scopeSpans"][0]["spans"]]

        # A page of more JSON than a page may hold is refused, naming limit.
        with pytest.raises(InvalidRequest) as big:
            await SessionTraces(runtime.sessions, max_page_bytes=1000).list_traces("t1", session["id"])
        assert big.value.param == "limit" and "request fewer traces" in big.value.message
        # Another tenant's session is unknown, as is a session that is not one.
        for tenant, session_id in (("t2", session["id"]), ("t1", "sess_nope")):
            with pytest.raises(NotFound) as unknown:
                await traces.list_traces(tenant, session_id)
            assert unknown.value.param == "session_id" and session_id in unknown.value.message
    finally:
        gate.touch()
        await runtime.close()


async def test_a_subagent_is_not_a_session_of_its_own(tmp_path) -> None:
    runtime = Runtime.local(RuntimeSettings(storage_path=str(tmp_path / "t.duckdb")))
    try:
        task = json.dumps({"task": "[[say done]]"})
        body = {"environment": {"type": "none"}, "agent": {"model": "sim", "multi_agent": {"enabled": True}},
                "input": f"[[call create_subagent {task}]] [[then wait_for_subagents {{}}]]"}  # fmt: skip
        events = await runtime.sessions.stream_new_session("", parse_session_create(body))
        async for batch in events:
            if any(e["type"] == "agent.session.turn.completed" for e in batch):
                break
        await events.aclose()
        [session] = (await runtime.sessions.list_sessions("")).data
        [child] = (await runtime.sessions.list_subagents("", session["id"])).data
        with pytest.raises(NotFound) as unknown:
            await SessionTraces(runtime.sessions).list_traces("", child["id"])
        assert unknown.value.param == "session_id"
        names = _names(await SessionTraces(runtime.sessions).list_traces("", session["id"]))
        assert names.count("agent.session.turn") == 2 and "execute_tool create_subagent" in names
    finally:
        await runtime.close()
