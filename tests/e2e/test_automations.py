"""The Agents API's automations with the ``openai`` SDK only (``client.beta.agents.automations``),
over real HTTP: on the in-process app and on Ray Serve's ``replica`` app of the session (its
scheduler in the replica, the rows in the storage actor's DuckDB file); what the placement
cannot change, ``LOCAL_ONLY``, in process only.

A firing starts a session or sends a turn to one through the sessions' code, and the
invocation names that session.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import openai
import pytest
from openai import OpenAI

from tests.servers import wait_for

from .conftest import LOCAL_ONLY

EXISTING = {"type": "existing_session", "session_id": "sess_e2e", "instructions": "Report the build."}
MESSAGE = {"role": "user", "type": "message", "content": [{"type": "input_text", "text": "Check the build."}]}


@pytest.fixture
def client(root: str) -> OpenAI:
    return OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)


def test_an_automation_from_create_to_delete(client: OpenAI) -> None:
    automations = client.beta.agents.automations
    name = f"nightly-{uuid.uuid4().hex[:8]}"
    agent = client.beta.agents.create(model="sim", name="builder")
    target = {"type": "new_session", "agent_id": agent.id, "environment": {"type": "none"}, "input": [MESSAGE],
              "metadata": {"from": "automation"}}  # fmt: skip
    made = automations.create(type="periodic", name=name, expression="30 2 * * *", timezone="Europe/Berlin",
                              target=target, metadata={"team": "core"})  # fmt: skip
    assert made.id.startswith("automation_") and (made.object, made.type, made.status) == ("agent.automation",
                                                                                           "periodic", "active")  # fmt: skip
    assert (made.name, made.expression, made.timezone, made.metadata) == (name, "30 2 * * *", "Europe/Berlin",
                                                                         {"team": "core"})  # fmt: skip
    assert made.created_by.type == "developer" and made.pause_reason is None
    assert (made.target.type, made.target.agent_id, made.target.agent, made.target.environment.type) == (
        "new_session", agent.id, None, "none")
    assert made.target.input[0].content[0].text == "Check the build." and made.target.vault_ids == []
    assert automations.retrieve(made.id).model_dump() == made.model_dump()

    updated = automations.update(made.id, name="hourly", expression="0 * * * *", metadata={})
    assert (updated.name, updated.expression, updated.metadata, updated.timezone) == ("hourly", "0 * * * *", {},
                                                                                     "Europe/Berlin")  # fmt: skip
    assert automations.update(made.id).model_dump() == updated.model_dump(), "an empty update changes nothing"
    paused = automations.pause(made.id)
    assert (paused.status, paused.pause_reason) == ("paused", None)
    assert automations.retrieve(made.id).status == "paused"
    assert automations.resume(made.id).status == "active"
    assert made.id in [a.id for a in automations.list(order="asc")]

    deleted = automations.delete(made.id)
    assert (deleted.id, deleted.object, deleted.deleted) == (made.id, "agent.automation.deleted", True)
    for call in (lambda: automations.retrieve(made.id), lambda: automations.pause(made.id),
                 lambda: automations.invocations.list(made.id)):  # fmt: skip
        with pytest.raises(openai.NotFoundError) as gone:
            call()
        assert (gone.value.body["param"], gone.value.body["code"]) == ("automation_id", "not_found")
    assert made.id not in [a.id for a in automations.list(order="asc")]


def delivered(client: OpenAI, automation_id: str) -> Any:
    """The automation's one invocation, once its delivery has ended (waited on, not slept for)."""
    def ended() -> bool:
        found = list(client.beta.agents.automations.invocations.list(automation_id))
        return bool(found) and found[0].status != "queued"

    wait_for(ended, timeout_s=30, what="the automation's delivery")
    [invocation] = list(client.beta.agents.automations.invocations.list(automation_id))
    return invocation


def test_a_due_automation_fires_once_into_a_new_session(client: OpenAI) -> None:
    automations = client.beta.agents.automations
    run_at = int(time.time()) + 2
    target = {"type": "new_session", "agent": {"model": "sim", "instructions": "Be brief."},
              "environment": {"type": "none"}, "input": [MESSAGE], "metadata": {"from": "automation"}}  # fmt: skip
    made = automations.create(type="once", name="soon", run_at=run_at, target=target)
    assert (made.run_at, made.status, made.target.agent.model) == (run_at, "active", "sim")

    invocation = delivered(client, made.id)
    assert (invocation.status, invocation.error, invocation.automation_id) == ("completed", None, made.id)
    assert (invocation.scheduled_at, invocation.source.type, invocation.source.automation.id) == (
        run_at, "automation", made.id)
    assert invocation.created_at >= run_at and invocation.session_id.startswith("sess_")
    session = client.beta.agents.sessions.retrieve(invocation.session_id)
    assert session.metadata == {"from": "automation"}, "the session the invocation names is the one it started"
    [turn] = client.beta.agents.sessions.turns.list(session.id).data
    assert turn.id
    assert automations.retrieve(made.id).status == "completed"
    assert automations.invocations.retrieve(invocation.id, automation_id=made.id).model_dump() == \
        invocation.model_dump()
    with pytest.raises(openai.BadRequestError) as refused:
        automations.resume(made.id)
    assert refused.value.body["param"] == "run_at"
    assert [i.id for i in automations.invocations.list(made.id)] == [invocation.id], "fired once"
    automations.delete(made.id)


def test_an_existing_session_gets_the_instructions_as_its_next_turn(client: OpenAI) -> None:
    automations = client.beta.agents.automations
    session = client.beta.agents.sessions.create(environment={"type": "none"}, agent={"model": "sim"}, input="hi")
    wait_for(lambda: client.beta.agents.sessions.retrieve(session.id).status == "idle", what="the first turn's end")
    made = automations.create(type="periodic", name="yearly", expression="0 0 1 1 *", timezone="UTC",
                              target={**EXISTING, "session_id": session.id})  # fmt: skip
    manual = automations.invocations.create(made.id)
    assert (manual.object, manual.automation_id, manual.source.type, manual.scheduled_at) == (
        "agent.automation.invocation", made.id, "manual", None)
    invocation = delivered(client, made.id)
    assert (invocation.id, invocation.status, invocation.session_id) == (manual.id, "completed", session.id)
    assert len(client.beta.agents.sessions.turns.list(session.id).data) == 2, "the instructions made a turn"
    assert [a.id for a in automations.list(session_id=session.id)] == [made.id]
    assert automations.retrieve(made.id).model_dump() == made.model_dump(), "the schedule is unchanged"
    automations.delete(made.id)


def test_a_gone_target_session_fails_the_invocation_and_pauses_the_automation(client: OpenAI) -> None:
    automations = client.beta.agents.automations
    made = automations.create(type="periodic", name="yearly", expression="0 0 1 1 *", timezone="UTC",
                              target={**EXISTING, "session_id": "sess_gone"})  # fmt: skip
    automations.invocations.create(made.id)
    invocation = delivered(client, made.id)
    assert (invocation.status, invocation.error.code, invocation.session_id) == ("failed", "not_found", "sess_gone")
    paused = automations.retrieve(made.id)
    assert (paused.status, paused.pause_reason) == ("paused", "target_session_failed")
    automations.delete(made.id)


@LOCAL_ONLY
def test_automations_list_in_pages_and_by_target_session(client: OpenAI) -> None:
    automations = client.beta.agents.automations
    session = f"sess_{uuid.uuid4().hex[:8]}"
    made = [automations.create(type="periodic", name=f"a{i}", expression="0 9 * * *", timezone="UTC",
                               target={**EXISTING, "session_id": session if i % 2 else "sess_other"})
            for i in range(5)]  # fmt: skip
    ids = [a.id for a in made]
    listed = [a.id for a in automations.list(order="asc", limit=2)]  # the SDK follows the pages
    assert [i for i in listed if i in ids] == ids
    first = automations.list(order="desc", limit=2)
    assert first.has_more and [a.id for a in first.data] == ids[::-1][:2]
    assert [a.id for a in automations.list(session_id=session, order="asc")] == [ids[1], ids[3]]
    for automation_id in ids:
        automations.delete(automation_id)


@LOCAL_ONLY
@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [
        ({"name": "x", "type": "once", "target": EXISTING}, 400, "run_at", "missing_required_parameter"),
        ({"name": "x", "type": "once", "run_at": 1_000_000_000, "target": EXISTING}, 400, "run_at", "invalid_value"),
        ({"name": "x", "type": "periodic", "expression": "61 * * * *", "timezone": "UTC", "target": EXISTING}, 400,
         "expression", "invalid_value"),
        ({"name": "x", "type": "periodic", "expression": "0 9 * * *", "timezone": "Europe/Atlantis",
          "target": EXISTING}, 400, "timezone", "invalid_value"),
        ({"name": "x", "type": "periodic", "expression": "0 9 * * *", "timezone": "UTC", "target": EXISTING,
          "created_by": {"type": "developer"}}, 400, "created_by", "unknown_parameter"),
        ({"name": "x", "type": "periodic", "expression": "0 9 * * *", "timezone": "UTC",
          "target": {"type": "new_session", "agent_id": "agent_nobody", "environment": {"type": "none"},
                     "input": [MESSAGE]}}, 404, "target.agent_id", "not_found"),
        ({"name": "x", "type": "periodic", "expression": "0 9 * * *", "timezone": "UTC",
          "target": {"type": "new_session", "agent": {"model": "gpt-nowhere"}, "environment": {"type": "none"},
                     "input": [MESSAGE]}}, 404, "target.agent.model", "model_not_found"),
        ({"name": "x", "type": "periodic", "expression": "0 9 * * *", "timezone": "UTC",
          "target": {"type": "new_session", "agent": {"model": "sim"}, "environment": {"type": "none"},
                     "input": [MESSAGE], "vault_ids": ["vlt_1"]}}, 400, "target.vault_ids[0]", "invalid_value"),
        ({"name": "x", "type": "periodic", "expression": "0 9 * * *", "timezone": "UTC",
          "target": {"type": "new_session", "agent": {"model": "sim"}, "environment": {"type": "none"},
                     "input": [MESSAGE], "vault_ids": ["vault_nobody"]}}, 404, "target.vault_ids[0]", "not_found"),
        ({"name": "x", "type": "periodic", "expression": "0 9 * * *", "timezone": "UTC",
          "target": {"type": "new_session", "agent": {"model": "sim"}, "input": [MESSAGE],
                     "environment": {"type": "self_hosted", "workspace_directory": "/w", "capability_directories": []}}},
         400, "target.environment.type", "unsupported_value"),
        ({"name": "x", "type": "periodic", "expression": "0 9 * * *", "timezone": "UTC",
          "target": {"type": "new_session", "agent": {"model": "sim", "tools": [{"type": "automations"}]},
                     "environment": {"type": "none"}, "input": [MESSAGE]}}, 400, "target.agent.tools[0].type",
         "unsupported_value"),
    ],
)  # fmt: skip
def test_a_bad_body_names_its_field(client: OpenAI, body: dict[str, Any], status: int, param: str, code: str) -> None:
    with pytest.raises(openai.APIStatusError) as refused:
        client.post("/agents/automations", body=body, cast_to=object)
    assert refused.value.status_code == status
    assert (refused.value.body["param"], refused.value.body["code"]) == (param, code)


@LOCAL_ONLY
def test_a_bad_update_or_id_names_its_field_and_changes_nothing(client: OpenAI) -> None:
    automations = client.beta.agents.automations
    made = automations.create(type="once", name="kept", run_at=int(time.time()) + 3600, target=EXISTING)
    for kwargs, param, code in (
        ({"expression": "0 9 * * *"}, "expression", "unsupported_parameter"),
        ({"run_at": 5}, "run_at", "invalid_value"),
        ({"target": {"type": "new_session", "agent_id": "agent_1", "environment": {"type": "none"},
                     "input": [MESSAGE]}}, "target.type", "invalid_value"),
        ({"extra_body": {"type": "periodic"}}, "type", "unknown_parameter"),
    ):  # fmt: skip
        with pytest.raises(openai.BadRequestError) as refused:
            automations.update(made.id, **kwargs)
        assert (refused.value.body["param"], refused.value.body["code"]) == (param, code)
    assert automations.retrieve(made.id).model_dump() == made.model_dump(), "no refused update changed it"
    for call, param in ((lambda: automations.retrieve("agent_123"), "automation_id"),
                        (lambda: automations.invocations.retrieve("inv_1", automation_id=made.id), "invocation_id")):
        with pytest.raises(openai.BadRequestError) as refused:
            call()
        assert (refused.value.body["param"], refused.value.body["code"]) == (param, "invalid_value")
    automations.delete(made.id)
