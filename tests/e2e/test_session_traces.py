"""A session's traces with the ``openai`` SDK (``client.beta.agents.sessions.traces.list``), over
real HTTP on the in-process app: a parent whose two subagents ran at once is one trace, their
tool spans overlapping under it; pagination and what is refused, by name."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from openai import OpenAI

from .conftest import LOCAL_ONLY

pytestmark = LOCAL_ONLY  # what the traces read is the same on every placement: the stored responses

TASK = json.dumps({"task": '[[call sleep {"ms": 400}]]'})  # each subagent runs a 400 ms tool


@pytest.fixture
def client(root: str) -> OpenAI:
    return OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)


def _spans(otlp: dict[str, Any]) -> list[dict[str, Any]]:
    return [span for resource in otlp["resourceSpans"] for scope in resource["scopeSpans"] for span in scope["spans"]]


def test_a_parents_trace_holds_its_subagents_overlapping_in_time(client: OpenAI) -> None:
    agent = {"model": "sim", "multi_agent": {"enabled": True, "max_concurrent_subagents": 2}}
    script = f"[[call create_subagent {TASK}]] [[call create_subagent {TASK}]] [[then wait_for_subagents {{}}]]"
    with client.beta.agents.sessions.create(environment={"type": "none"}, agent=agent, input=script,
                                            stream=True) as events:  # fmt: skip
        for event in events:
            if event.type == "agent.session.created":
                session_id = event.session.id
            if event.type == "agent.session.turn.completed":
                first_turn = event.turn_id
                break
    with client.beta.agents.sessions.stream(session_id, input="[[say again]]") as stream:
        second_turn = stream.get_final_result().turn.id

    page = client.beta.agents.sessions.traces.list(session_id)
    assert [t.id for t in page.data] == [second_turn, first_turn] and not page.has_more  # newest first
    trace = page.data[1]
    assert (trace.object, trace.session_id, trace.created_at > 0) == ("agent.session.trace", session_id, True)
    spans = _spans(trace.otlp)
    by_id = {s["spanId"]: s for s in spans}
    assert len({s["traceId"] for s in spans}) == 1 and len(by_id) == len(spans)
    [root] = [s for s in spans if "parentSpanId" not in s]
    assert (root["name"], root["kind"]) == ("agent.session.turn", 2)

    def ancestors(span: dict[str, Any]) -> list[str]:
        names = []
        while "parentSpanId" in span:
            span = by_id[span["parentSpanId"]]
            names.append(span["name"])
        return names

    sleeps = [s for s in spans if s["name"] == "execute_tool sleep"]
    assert len(sleeps) == 2, [s["name"] for s in spans]
    for sleep in sleeps:
        assert ancestors(sleep) == ["troupe.response", "agent.session.turn", "execute_tool create_subagent",
                                    "troupe.response", "agent.session.turn"]  # fmt: skip
        assert {a["key"]: a["value"] for a in sleep["attributes"]}["gen_ai.tool.name"] == {"stringValue": "sleep"}
    (s1, e1), (s2, e2) = [(int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])) for s in sleeps]
    assert max(s1, s2) < min(e1, e2), "the two subagents' sleeps overlap in time"
    assert min(e1 - s1, e2 - s2) > 350_000_000  # each slept 400 ms (as its step trace measured it)
    subagents = {s.id for s in client.beta.agents.sessions.subagents.list(session_id).data}
    turns = [s for s in spans if s["name"] == "agent.session.turn" and s is not root]
    assert {next(a["value"]["stringValue"] for a in t["attributes"] if a["key"] == "troupe.subagent.id")
            for t in turns} == subagents and len(subagents) == 2  # fmt: skip

    # Read again: the same trace, ids and all. Then pages: order, after, limit (the SDK pages on).
    assert client.beta.agents.sessions.traces.list(session_id).data[1].otlp == trace.otlp
    asc = client.beta.agents.sessions.traces.list(session_id, order="asc", limit=1)
    assert [t.id for t in asc.data] == [first_turn] and asc.has_more
    assert [t.id for t in client.beta.agents.sessions.traces.list(session_id, order="asc", after=first_turn).data] == [
        second_turn]  # fmt: skip
    assert [t.id for t in client.beta.agents.sessions.traces.list(session_id, after=second_turn).data] == [first_turn]
    assert [t.id for t in client.beta.agents.sessions.traces.list(session_id, limit=1)] == [
        second_turn, first_turn]  # fmt: skip


def test_traces_of_an_unknown_session_and_bad_pages_are_refused_by_name(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as unknown:
        client.beta.agents.sessions.traces.list("sess_nope")
    assert unknown.value.body["param"] == "session_id" and "sess_nope" in unknown.value.body["message"]
    session = client.beta.agents.sessions.create(environment={"type": "none"}, agent={"model": "sim"}, input="hi")
    assert len(client.beta.agents.sessions.traces.list(session.id).data) == 1  # its turn, running or done
    for params, param in (({"limit": 0}, "limit"), ({"limit": 101}, "limit"), ({"order": "up"}, "order")):
        with pytest.raises(openai.BadRequestError) as refused:
            client.get(f"/agents/sessions/{session.id}/traces", cast_to=object, options={"params": params})
        assert refused.value.body["param"] == param
