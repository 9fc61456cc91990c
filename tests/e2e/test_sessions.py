"""The Agents API's sessions with the ``openai`` SDK only (``client.beta.agents.sessions``), over
real HTTP: on the in-process app and on Ray Serve's ``replica`` app of the session.

A session's turns are background responses on its conversation (troupe.runtime.sessions), so
what is checked here is what a client sees: the event stream's order and indexes, turns, items,
the client's function calls (``requires_action``, ``tool_result``), cancelling, and what is
refused by name.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import openai
import pytest
from openai import OpenAI

from tests.servers import wait_for

from .conftest import LOCAL_ONLY

NONE = {"type": "none"}
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}  # fmt: skip


@pytest.fixture
def client(root: str) -> OpenAI:
    return OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)


def _until_idle(events: Any) -> list[Any]:
    """The events of a stream up to the session's idle (or requires_action) after a turn."""
    seen = []
    for event in events:
        seen.append(event)
        settled = event.type in ("agent.session.requires_action", "agent.session.idle", "agent.session.failed")
        if settled and any(e.type.startswith("agent.session.turn.") for e in seen):
            return seen
    raise AssertionError(f"the stream ended before the session was idle: {[e.type for e in seen]}")


def test_a_session_streams_its_first_turn_then_takes_a_second(client: OpenAI) -> None:
    stream = client.beta.agents.sessions.create(environment=NONE, agent={"model": "sim", "instructions": "Be brief."},
                                                input="hello there", metadata={"run": "e2e"}, stream=True)  # fmt: skip
    events = _until_idle(stream)
    stream.close()
    kinds = [e.type for e in events]
    assert kinds[:4] == ["agent.session.created", "agent.session.turn.created", "agent.session.turn.in_progress",
                         "agent.session.in_progress"]  # fmt: skip
    assert kinds[-2:] == ["agent.session.turn.completed", "agent.session.idle"]
    assert kinds.index("agent.session.turn.item.added") < kinds.index("agent.session.turn.output_text.delta")
    assert kinds.index("agent.session.turn.output_text.done") < kinds.index("agent.session.turn.item.done")
    session = events[0].session
    assert session.id.startswith("sess_") and session.status == "in_progress" and session.metadata == {"run": "e2e"}
    assert session.agent.model == "sim" and session.agent.instructions == "Be brief." and session.agent.id.startswith("agent_")
    turn_id = events[1].turn_id
    assert turn_id.startswith("turn_") and events[1].turn.status == "queued" and events[1].turn.subagent_id is None
    deltas = [e for e in events if e.type == "agent.session.turn.output_text.delta"]
    assert "".join(e.delta for e in deltas) == "You said: hello there"
    assert {(e.turn_id, e.output_index, e.content_index, e.session_id) for e in deltas} == {(turn_id, 0, 0, session.id)}
    done = next(e for e in events if e.type == "agent.session.turn.item.done")
    assert (done.item.type, done.item.role, done.item.content[0].text, done.item.turn_id) == (
        "message", "assistant", "You said: hello there", turn_id)  # fmt: skip
    completed = events[-2]
    assert completed.turn.status == "completed" and completed.turn.completed_at and completed.usage.total_tokens > 0
    assert len({e.event_id for e in events}) == len(events)
    assert client.beta.agents.sessions.retrieve(session.id).status == "idle"

    # The SDK's helper: subscribe, send input, read to idle.
    with client.beta.agents.sessions.stream(session.id, input="[[history]]") as second:
        texts = [e.delta for e in second if e.type == "agent.session.turn.output_text.delta"]
    assert "".join(texts) == "hello there | [[history]]"

    turns = client.beta.agents.sessions.turns.list(session.id, order="asc").data
    assert [t.status for t in turns] == ["completed", "completed"] and turns[0].id == turn_id
    assert client.beta.agents.sessions.turns.retrieve(turns[1].id, session_id=session.id).id == turns[1].id
    items = client.beta.agents.sessions.items.list(session.id, order="asc").data
    assert [(i.type, i.role, i.turn_id) for i in items] == [
        ("message", "user", turn_id), ("message", "assistant", turn_id),
        ("message", "user", turns[1].id), ("message", "assistant", turns[1].id),
    ]  # fmt: skip
    assert [i.content[0].text for i in items] == ["hello there", "You said: hello there", "[[history]]",
                                                  "hello there | [[history]]"]  # fmt: skip
    newest = client.beta.agents.sessions.items.list(session.id, limit=1)
    assert newest.data[0].id == items[-1].id and newest.has_more
    second_turn_items = client.beta.agents.sessions.turns.items.list(turns[1].id, session_id=session.id, order="asc")
    assert [i.id for i in second_turn_items.data] == [i.id for i in items[2:]]


def test_the_clients_function_calls_wait_for_their_results(client: OpenAI) -> None:
    agent = client.beta.agents.create(model="sim", name=f"weather-{uuid.uuid4().hex[:6]}", tools=[WEATHER])
    with client.beta.agents.sessions.create(environment=NONE, agent_id=agent.id, stream=True,
                                            input='[[call get_weather {"city": "Paris"}]]') as events:  # fmt: skip
        seen = _until_idle(events)
    made = seen[0].session
    assert made.agent.id == agent.id and made.agent.name == agent.name and made.status == "in_progress"
    assert seen[-1].type == "agent.session.requires_action"
    [action] = seen[-1].session.required_actions
    assert (action.type, action.name, action.arguments) == ("function_call", "get_weather", {"city": "Paris"})
    call = next(e.item for e in seen if e.type == "agent.session.turn.item.added" and e.item.type == "function_call")
    assert (call.call_id, call.arguments, call.status) == (action.call_id, {"city": "Paris"}, "completed")
    session = client.beta.agents.sessions.retrieve(made.id)
    assert session.status == "requires_action" and session.required_actions[0].call_id == action.call_id
    [turn] = client.beta.agents.sessions.turns.list(made.id).data
    assert turn.status == "waiting"

    with pytest.raises(openai.BadRequestError) as refused:  # a new message while it waits
        client.beta.agents.sessions.events.create(made.id, events=[
            {"type": "agent.session.input.message", "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}])  # fmt: skip
    assert refused.value.body["param"] == "events[0].type"
    with pytest.raises(openai.BadRequestError) as unknown:
        client.beta.agents.sessions.events.create(made.id, events=[
            {"type": "agent.session.input.tool_result", "turn_id": turn.id, "call_id": "call_nope", "success": True,
             "output": "x"}])  # fmt: skip
    assert unknown.value.body == {"message": "Unknown pending tool call: call_nope", "type": "invalid_request_error",
                                  "param": "events[0].call_id", "code": "invalid_request_error"}  # fmt: skip

    with client.beta.agents.sessions.events.stream(made.id) as events:
        client.beta.agents.sessions.events.create(made.id, events=[
            {"type": "agent.session.input.tool_result", "turn_id": turn.id, "call_id": action.call_id, "success": True,
             "output": "sunny, 21 C"}])  # fmt: skip
        after = _until_idle(events)
    assert after[0].type == "agent.session.requires_action"  # the state when it subscribed
    text = "".join(e.delta for e in after if e.type == "agent.session.turn.output_text.delta")
    assert text == "get_weather -> sunny, 21 C"
    assert after[-2].type == "agent.session.turn.completed" and after[-2].turn_id == turn.id
    assert client.beta.agents.sessions.turns.retrieve(turn.id, session_id=made.id).status == "completed"
    kinds = [i.type for i in client.beta.agents.sessions.items.list(made.id, order="asc").data]
    assert kinds == ["message", "function_call", "function_call_output", "message"]


def test_the_sdks_tool_handlers_run_the_clients_function(client: OpenAI) -> None:
    made = client.beta.agents.sessions.create(environment=NONE, agent={"model": "sim", "tools": [WEATHER]},
                                              input="[[say ready]]")  # fmt: skip
    wait_for(lambda: client.beta.agents.sessions.retrieve(made.id).status == "idle", what="the first turn's end")
    calls = []

    def get_weather(arguments: dict[str, Any]) -> str:
        calls.append(arguments)
        return "rain"

    with client.beta.agents.sessions.stream(made.id, input='[[call get_weather {"city": "Oslo"}]]',
                                            tool_handlers={"get_weather": get_weather}) as stream:  # fmt: skip
        text = "".join(e.delta for e in stream if e.type == "agent.session.turn.output_text.delta")
    assert calls == [{"city": "Oslo"}] and text == "get_weather -> rain"


def test_cancelling_a_running_turn(client: OpenAI) -> None:
    made = client.beta.agents.sessions.create(environment=NONE, agent={"model": "sim"},
                                              input="[[latency ttft=1 itl=50]] [[tokens 2000]]")  # fmt: skip
    with client.beta.agents.sessions.events.stream(made.id) as events:
        kinds = []
        for event in events:
            kinds.append(event.type)
            if event.type == "agent.session.turn.output_text.delta" and "cancelled" not in kinds:
                client.beta.agents.sessions.events.create(made.id, events=[{"type": "agent.session.input.cancel"}])
                kinds.append("cancelled")
            if event.type == "agent.session.idle" and "cancelled" in kinds:
                break
    assert kinds[-2] == "agent.session.turn.cancelled"
    [turn] = client.beta.agents.sessions.turns.list(made.id).data
    assert turn.status == "cancelled"
    with pytest.raises(openai.BadRequestError) as nothing:
        client.beta.agents.sessions.events.create(made.id, events=[{"type": "agent.session.input.cancel"}])
    assert nothing.value.body["param"] == "events[0].type"


def test_sessions_list_filter_update_and_delete(client: OpenAI) -> None:
    tag = uuid.uuid4().hex[:8]
    agent = client.beta.agents.create(model="sim", name=f"a-{tag}")
    first = client.beta.agents.sessions.create(environment=NONE, agent_id=agent.id, input="one", metadata={"tag": tag})
    second = client.beta.agents.sessions.create(environment=NONE, agent={"model": "sim"}, input="two",
                                                metadata={"tag": tag})  # fmt: skip
    assert [s.id for s in client.beta.agents.sessions.list(metadata={"tag": tag})] == [second.id, first.id]
    assert [s.id for s in client.beta.agents.sessions.list(agent_id=agent.id)] == [first.id]
    updated = client.beta.agents.sessions.update(first.id, metadata={"tag": tag, "more": "yes"},
                                                 agent={"instructions": "Now terse."})  # fmt: skip
    assert updated.metadata == {"tag": tag, "more": "yes"} and updated.agent.instructions == "Now terse."
    assert updated.agent.id == agent.id and client.beta.agents.retrieve(agent.id).instructions is None
    deleted = client.beta.agents.sessions.delete(first.id)
    assert (deleted.id, deleted.deleted) == (first.id, True)
    with pytest.raises(openai.NotFoundError) as gone:
        client.beta.agents.sessions.retrieve(first.id)
    assert gone.value.body["param"] == "session_id"
    assert [s.id for s in client.beta.agents.sessions.list(metadata={"tag": tag})] == [second.id]


@LOCAL_ONLY
@pytest.mark.parametrize(("body", "param", "code"), [
    ({"environment": {"type": "self_hosted", "workspace_directory": "/w"}, "agent": {"model": "sim"}, "input": "x"},
     "environment.type", "unsupported_value"),
    ({"environment": {"type": "openai_hosted"}, "agent": {"model": "sim"}, "input": "x", "stream": True,
      "stream_options": {"include_obfuscation": 1}}, "stream_options.include_obfuscation", "invalid_type"),
    ({"environment": NONE, "input": "x"}, "agent.model", "missing_required_parameter"),
    ({"environment": NONE, "agent": {"model": "sim", "name": "n"}, "input": "x"}, "agent.name", "unknown_parameter"),
    ({"environment": NONE, "agent": {"model": "sim"}}, "input", "missing_required_parameter"),
    ({"environment": NONE, "agent": {"model": "sim"}, "input": [{"role": "assistant", "content": []}]},
     "input[0].role", "invalid_value"),
    ({"environment": NONE, "agent": {"model": "sim"}, "input": "x", "review": "auto_review"}, "review",
     "unsupported_value"),
    ({"environment": NONE, "agent": {"model": "sim"}, "input": "x", "vault_ids": ["vlt_1"]}, "vault_ids[0]",
     "invalid_value"),
    ({"environment": NONE, "agent": {"model": "sim", "multi_agent": {"enabled": True, "max_concurrent_subagents": 0}},
      "input": "x"}, "agent.multi_agent.max_concurrent_subagents", "invalid_value"),
])  # fmt: skip
def test_what_a_session_cannot_have_is_refused_by_name(client: OpenAI, body: dict, param: str, code: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.post("/agents/sessions", body=body, cast_to=object)
    assert (refused.value.body["param"], refused.value.body["code"]) == (param, code)


@LOCAL_ONLY
def test_unknown_sessions_and_models_are_404s(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as model:
        client.beta.agents.sessions.create(environment=NONE, agent={"model": "no-such-model"}, input="x")
    assert model.value.body["param"] == "model"
    with pytest.raises(openai.NotFoundError) as agent:
        client.beta.agents.sessions.create(environment=NONE, agent_id="agent_nope", input="x")
    assert agent.value.body["param"] == "agent_id"
    for call in (lambda: client.beta.agents.sessions.retrieve("sess_nope"),
                 lambda: client.beta.agents.sessions.turns.list("sess_nope"),
                 lambda: client.beta.agents.sessions.events.stream("sess_nope")):  # fmt: skip
        with pytest.raises(openai.NotFoundError) as unknown:
            call()
        assert unknown.value.body["param"] == "session_id"
    with pytest.raises(openai.BadRequestError) as shape:
        client.beta.agents.sessions.retrieve("nope")
    assert shape.value.body["param"] == "session_id"


def test_a_session_runs_commands_in_its_environment(containers_client: OpenAI) -> None:
    client = containers_client
    hosted = {"type": "openai_hosted", "container_size": "small", "env": {"GREETING": "hi from env"}}
    with client.beta.agents.sessions.create(environment=hosted, agent={"model": "sim"}, stream=True,
                                            input="[[shell]]echo $GREETING > note.txt\ncat note.txt[[/shell]]") as events:  # fmt: skip
        seen = _until_idle(events)
    session = seen[0].session
    environment = session.environment
    assert environment.type == "openai_hosted" and environment.id.startswith("env_")
    assert (environment.container_size, environment.network.access) == ("small", "disabled")
    added = next(e for e in seen if e.type == "agent.session.turn.item.added")
    assert (added.item.type, added.item.command, added.item.status) == (
        "command_execution", "echo $GREETING > note.txt\ncat note.txt", "in_progress")  # fmt: skip
    [delta] = [e for e in seen if e.type == "agent.output.command_execution_output.delta"]
    assert (delta.delta, delta.item_id, delta.output_index) == ("hi from env\n", added.item.id, added.output_index)
    done = next(e for e in seen if e.type == "agent.session.turn.item.done" and e.item.type == "command_execution")
    assert (done.item.exit_code, done.item.status, done.item.cwd) == (0, "completed", "/workspace")
    assert seen[-2].type == "agent.session.turn.completed"
    [command] = [i for i in client.beta.agents.sessions.items.list(session.id).data if i.type == "command_execution"]
    assert (command.output, command.exit_code) == ("hi from env\n", 0)

    # A second turn runs in the same container: the file is there.
    with client.beta.agents.sessions.stream(session.id, input="[[shell]]cat /workspace/note.txt[[/shell]]") as second:
        outputs = [e.delta for e in second if e.type == "agent.output.command_execution_output.delta"]
    assert outputs == ["hi from env\n"]
    container_id = client.beta.agents.environments.retrieve(environment.id).model_extra["container_id"]
    client.beta.agents.sessions.delete(session.id)  # its environment goes with it
    with pytest.raises(openai.NotFoundError):
        client.containers.retrieve(container_id)


@LOCAL_ONLY
def test_an_environment_must_be_one_this_server_can_provide(containers_client: OpenAI) -> None:
    for environment, param in (({"type": "openai_hosted", "network": {"access": "enabled"}}, "environment.network.access"),
                               ({"type": "openai_hosted", "desktop": {"enabled": True}}, "environment.desktop.enabled")):  # fmt: skip
        with pytest.raises(openai.BadRequestError) as refused:
            containers_client.beta.agents.sessions.create(environment=environment, agent={"model": "sim"}, input="x")
        assert refused.value.body["param"] == param


def _subagent_task(ms: int) -> str:
    return json.dumps({"task": f'[[call sleep {{"ms": {ms}}}]]'})


def test_a_parents_subagents_run_in_parallel_and_it_reads_their_answers(client: OpenAI) -> None:
    # Eight create_subagent calls in one step, then (the sim's second round) wait_for_subagents.
    script = " ".join(f"[[call create_subagent {_subagent_task(400)}]]" for _ in range(8))
    script += " [[then wait_for_subagents {}]]"
    agent = {"model": "sim", "multi_agent": {"enabled": True, "max_concurrent_subagents": 8}}
    with client.beta.agents.sessions.create(environment=NONE, agent=agent, input=script, stream=True) as events:
        seen = _until_idle(events)
    session = seen[0].session
    assert session.agent.multi_agent.enabled and seen[-2].type == "agent.session.turn.completed"
    added = [e.item for e in seen if e.type == "agent.session.turn.item.added"]
    creates = [i for i in added if i.type == "create_subagent_call"]
    assert len(creates) == 8 and all(i.content[0].text == '[[call sleep {"ms": 400}]]' for i in creates)
    [waited] = [i for i in added if i.type == "wait_for_subagents_call"]
    assert waited.sender_agent_id == session.agent.id
    answer = "".join(e.delta for e in seen if e.type == "agent.session.turn.output_text.delta").split("\n")[-1]
    assert answer.startswith("wait_for_subagents -> ")
    results = json.loads(answer.removeprefix("wait_for_subagents -> "))["subagents"]
    assert [r["status"] for r in results] == ["completed"] * 8
    assert {r["output"] for r in results} == {"sleep -> slept 400 ms"}

    subagents = client.beta.agents.sessions.subagents.list(session.id, order="asc").data
    assert sorted(s.id for s in subagents) == sorted(i.agent_id for i in creates) == sorted(r["subagent_id"] for r in results)
    # The stream showed each subagent as it was made, and each create call done.
    made = [e.subagent for e in seen if e.type == "agent.session.subagent.created"]
    assert sorted(s.id for s in made) == sorted(s.id for s in subagents) and {s.status for s in made} == {"active"}
    done = [e.item for e in seen if e.type == "agent.session.turn.item.done" and e.item.type.endswith("subagent_call")]
    assert [i.type for i in done] == ["create_subagent_call"] * 8 and {i.status for i in done} == {"completed"}
    child = subagents[0]
    assert (child.session_id, child.parent_agent_id, child.status) == (session.id, session.agent.id, "active")
    assert client.beta.agents.sessions.subagents.retrieve(child.id, session_id=session.id).id == child.id
    [turn] = client.beta.agents.sessions.subagents.turns.list(child.id, session_id=session.id).data
    assert (turn.subagent_id, turn.session_id, turn.status) == (child.id, session.id, "completed")
    kinds = [i.type for i in client.beta.agents.sessions.subagents.items.list(child.id, session_id=session.id,
                                                                             order="asc").data]  # fmt: skip
    assert kinds == ["message", "function_call", "function_call_output", "message"]
    # A subagent is not a session of its own in the sessions API.
    assert child.id not in [s.id for s in client.beta.agents.sessions.list(limit=100)]
    with pytest.raises(openai.NotFoundError):
        client.beta.agents.sessions.retrieve(child.id)

    # They ran at once: each child's sleep overlaps every other's (the children's step traces).
    spans = []
    for sub in subagents:
        responses = [r for r in client.get("/responses", cast_to=object, options={"params": {"limit": 100}})["data"]
                     if r["metadata"].get("agent_session_id") == sub.id]  # fmt: skip
        [response] = responses
        traces = client.get(f"/responses/{response['id']}/step_traces", cast_to=object)
        [tool] = [t for t in traces if t["kind"] == "tool"]
        spans.append((tool["started_at"], tool["started_at"] + tool["duration_s"]))
    assert max(start for start, _ in spans) < min(end for _, end in spans), spans

    items = client.beta.agents.sessions.items.list(session.id, order="asc").data
    assert [i.type for i in items][:2] == ["message", "create_subagent_call"] and items[1].status == "completed"
    client.beta.agents.sessions.delete(session.id)  # its subagents go with it
    with pytest.raises(openai.NotFoundError):
        client.beta.agents.sessions.subagents.list(session.id)


@LOCAL_ONLY
def test_subagent_calls_that_cannot_be_done_are_the_models_to_read(client: OpenAI) -> None:
    agent = {"model": "sim", "multi_agent": {"enabled": True, "max_concurrent_subagents": 1}}
    script = (f"[[call create_subagent {_subagent_task(300)}]] [[call create_subagent {_subagent_task(300)}]] "
              '[[call send_subagent_input {"subagent_id": "sess_nope", "input": "hi"}]]')  # fmt: skip
    with client.beta.agents.sessions.create(environment=NONE, agent=agent, input=script, stream=True) as events:
        seen = _until_idle(events)
    lines = "".join(e.delta for e in seen if e.type == "agent.session.turn.output_text.delta").split("\n")
    assert lines[0].startswith("create_subagent -> {") and '"running"' in lines[0]
    assert lines[1] == ("create_subagent -> Error: at most 1 subagents run at once: wait for some "
                        "(wait_for_subagents) first")  # fmt: skip
    assert lines[2] == "send_subagent_input -> Error: no subagent 'sess_nope' of this session"
    assert len(client.beta.agents.sessions.subagents.list(seen[0].session.id).data) == 1
