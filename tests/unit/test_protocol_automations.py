"""The Agents API's automation bodies, schedule maths and objects (troupe.protocol.automations),
with plain values."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from openai.types.beta.agents import Automation
from openai.types.beta.agents.automations import AutomationInvocation
from pydantic import TypeAdapter

from troupe.protocol import InvalidRequest
from troupe.protocol.automations import (
    apply_automation_update,
    automation_object,
    invocation_object,
    next_due,
    parse_automation_create,
    parse_automation_update,
    restore_environment,
    session_body,
    session_events,
    withhold_environment,
)

NOW = 1_800_000_000  # Friday 2027-01-15 08:00:00 UTC
EXISTING = {"type": "existing_session", "session_id": "sess_1", "instructions": "Report the build."}
MESSAGE = {"role": "user", "type": "message", "content": [{"type": "input_text", "text": "Check the build."}]}
NEW = {"type": "new_session", "agent_id": "agent_1", "environment": {"type": "none"}, "input": [MESSAGE]}


def at(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp())


def periodic(expression: str = "0 9 * * *", timezone: str = "Europe/Berlin", **more: Any) -> dict[str, Any]:
    body = {"type": "periodic", "name": "daily", "expression": expression, "timezone": timezone, "target": EXISTING}
    return parse_automation_create({**body, **more}, now=NOW)


def refused(body: Any, *, update: bool = False) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        (parse_automation_update if update else parse_automation_create)(body, now=NOW)
    return caught.value


def validate(model: Any, value: dict[str, Any]) -> dict[str, Any]:
    """``value`` as the SDK reads it, dumped back (a field the SDK does not have would be lost)."""
    return TypeAdapter(model).validate_python(value).model_dump(mode="json", by_alias=True)


def test_a_periodic_automation_and_its_object_as_the_sdk_reads_it() -> None:
    definition = periodic(metadata={"team": "core"})
    assert definition == {"type": "periodic", "name": "daily", "metadata": {"team": "core"}, "target": EXISTING,
                          "expression": "0 9 * * *", "timezone": "Europe/Berlin"}  # fmt: skip
    obj = automation_object("automation_1", definition, created_at=NOW)
    assert obj == {
        "id": "automation_1", "object": "agent.automation", "created_at": NOW, "created_by": {"type": "developer"},
        "type": "periodic", "name": "daily", "metadata": {"team": "core"}, "target": EXISTING, "status": "active",
        "pause_reason": None, "expression": "0 9 * * *", "timezone": "Europe/Berlin",
    }  # fmt: skip
    assert validate(Automation, obj) == obj


def test_a_one_time_automation_with_a_new_session_target() -> None:
    agent = {"model": "sim", "instructions": "Be brief."}
    definition = parse_automation_create({"type": "once", "name": "once", "run_at": NOW + 60, "target": {
        "type": "new_session", "agent": agent, "environment": {"type": "none"}, "input": [MESSAGE],
        "metadata": {"k": "v"}, "vault_ids": None}}, now=NOW)  # fmt: skip
    target = definition["target"]
    assert (target["agent_id"], target["agent"]["model"], target["agent"]["service_tier"]) == (None, "sim", "auto")
    assert "name" not in target["agent"] and (target["metadata"], target["vault_ids"]) == ({"k": "v"}, [])
    obj = automation_object("automation_1", definition, created_at=NOW)
    assert obj["run_at"] == NOW + 60 and "expression" not in obj
    assert validate(Automation, obj) == obj
    body = session_body(target)
    assert body == {"agent": target["agent"], "environment": {"type": "none"}, "input": [MESSAGE],
                    "metadata": {"k": "v"}, "vault_ids": []}  # fmt: skip
    assert session_body(parse_automation_create({"type": "once", "name": "x", "run_at": NOW + 1, "target": NEW},
                                                now=NOW)["target"])["agent_id"] == "agent_1"  # fmt: skip


def test_an_invocation_as_the_sdk_reads_it() -> None:
    obj = automation_object("automation_1", periodic(), created_at=NOW)
    scheduled = invocation_object("ainv_1", obj, created_at=NOW + 5, scheduled_at=NOW)
    assert (scheduled["status"], scheduled["source"]) == ("queued", {"type": "automation", "automation": obj})
    assert validate(AutomationInvocation, scheduled) == scheduled
    manual = invocation_object("ainv_2", obj, created_at=NOW, scheduled_at=None)
    assert manual["source"] == {"type": "manual"} and validate(AutomationInvocation, manual) == manual


def test_an_existing_session_gets_its_instructions_as_a_user_message() -> None:
    assert session_events(EXISTING) == [{"type": "agent.session.input.message", "input": [
        {"role": "user", "type": "message", "content": [{"type": "input_text", "text": "Report the build."}]}]}]


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"name": "x", "target": EXISTING}, "type", "missing_required_parameter"),
        ({"type": "hourly", "name": "x", "target": EXISTING}, "type", "invalid_value"),
        ({"type": "once", "name": "x", "target": EXISTING}, "run_at", "missing_required_parameter"),
        ({"type": "once", "name": "x", "run_at": NOW, "target": EXISTING}, "run_at", "invalid_value"),
        ({"type": "once", "name": "x", "run_at": NOW - 3600, "target": EXISTING}, "run_at", "invalid_value"),
        ({"type": "once", "name": "x", "run_at": "tomorrow", "target": EXISTING}, "run_at", "invalid_type"),
        ({"type": "once", "name": "x", "run_at": 10**15, "target": EXISTING}, "run_at", "invalid_value"),
        ({"type": "once", "name": "x", "run_at": NOW + 1, "target": EXISTING, "timezone": "UTC"}, "timezone",
         "unsupported_parameter"),
        ({"type": "periodic", "name": "x", "expression": "0 9 * * *", "timezone": "UTC", "target": EXISTING,
          "run_at": NOW + 1}, "run_at", "unsupported_parameter"),
        ({"type": "periodic", "name": "x", "timezone": "UTC", "target": EXISTING}, "expression",
         "missing_required_parameter"),
        ({"type": "periodic", "name": "x", "expression": "0 25 * * *", "timezone": "UTC", "target": EXISTING},
         "expression", "invalid_value"),
        ({"type": "periodic", "name": "x", "expression": "@daily", "timezone": "UTC", "target": EXISTING},
         "expression", "invalid_value"),
        ({"type": "periodic", "name": "x", "expression": "0 0 9 * * *", "timezone": "UTC", "target": EXISTING},
         "expression", "invalid_value"),
        ({"type": "periodic", "name": "x", "expression": "0 0 30 2 *", "timezone": "UTC", "target": EXISTING},
         "expression", "invalid_value"),
        ({"type": "periodic", "name": "x", "expression": "0 9 * * *", "timezone": "Mars/Olympus", "target": EXISTING},
         "timezone", "invalid_value"),
        ({"type": "periodic", "name": "x", "expression": "0 9 * * *", "timezone": "+02:00", "target": EXISTING},
         "timezone", "invalid_value"),
        ({"type": "once", "name": "", "run_at": NOW + 1, "target": EXISTING}, "name", "empty_string"),
        ({"type": "once", "name": "x" * 129, "run_at": NOW + 1, "target": EXISTING}, "name",
         "string_above_max_length"),
        ({"type": "once", "name": "x", "run_at": NOW + 1, "target": EXISTING, "metadata": {"k": 1}}, "metadata.k",
         "invalid_type"),
        ({"type": "once", "name": "x", "run_at": NOW + 1, "target": EXISTING, "created_by": {}}, "created_by",
         "unknown_parameter"),
    ],
)  # fmt: skip
def test_a_bad_automation_body_is_refused_naming_its_field(body: dict[str, Any], param: str, code: str) -> None:
    error = refused(body)
    assert (error.param, error.code, error.status) == (param, code, 400), error.message
    assert param in error.message


@pytest.mark.parametrize(
    ("target", "param", "code"),
    [
        ({"type": "webhook"}, "target.type", "invalid_value"),
        ({"session_id": "sess_1"}, "target.type", "missing_required_parameter"),
        ({"type": "existing_session", "session_id": "sess_1"}, "target.instructions", "missing_required_parameter"),
        ({**EXISTING, "instructions": ""}, "target.instructions", "invalid_type"),
        ({**EXISTING, "input": []}, "target.input", "unknown_parameter"),
        ({**NEW, "agent": {"model": "sim"}}, "target.agent", "invalid_value"),
        ({k: v for k, v in NEW.items() if k != "agent_id"}, "target.agent", "missing_required_parameter"),
        ({**NEW, "agent_id": "asst_1"}, "target.agent_id", "invalid_value"),
        ({k: v for k, v in NEW.items() if k != "environment"}, "target.environment", "missing_required_parameter"),
        ({**NEW, "environment": {"type": "none", "network": {}}}, "target.environment.network", "unknown_parameter"),
        ({**NEW, "environment": "none"}, "target.environment", "invalid_type"),
        ({**NEW, "input": []}, "target.input", "empty_array"),
        ({**NEW, "input": [{**MESSAGE, "role": "assistant"}]}, "target.input[0].role", "invalid_value"),
        ({**NEW, "input": [{**MESSAGE, "content": [{"type": "input_file", "file_id": "f"}]}]},
         "target.input[0].content[0].type", "invalid_value"),
        ({**NEW, "input": [{**MESSAGE, "content": [{"type": "input_text", "text": 1}]}]},
         "target.input[0].content[0].text", "invalid_type"),
        ({**NEW, "metadata": {"k": ["v"]}}, "target.metadata.k", "invalid_type"),
        ({**NEW, "vault_ids": "vlt_1"}, "target.vault_ids", "invalid_type"),
        ({k: v for k, v in {**NEW, "agent": {"model": "sim", "name": "n"}}.items() if k != "agent_id"},
         "target.agent.name", "unknown_parameter"),
        ({k: v for k, v in {**NEW, "agent": {"model": "sim", "service_tier": "flex"}}.items() if k != "agent_id"},
         "target.agent.service_tier", "unsupported_value"),
        ({k: v for k, v in {**NEW, "agent": {"model": "sim", "tools": [{"type": "automations"}]}}.items()
          if k != "agent_id"}, "target.agent.tools[0].type", "unsupported_value"),
    ],
)  # fmt: skip
def test_a_bad_target_is_refused_naming_its_field(target: dict[str, Any], param: str, code: str) -> None:
    error = refused({"type": "once", "name": "x", "run_at": NOW + 1, "target": target})
    assert (error.param, error.code) == (param, code), error.message
    assert f"'{param}'" in error.message or param in error.message


def test_an_environment_other_than_none_passes_to_the_sessions_unchanged() -> None:
    hosted = {"type": "openai_hosted", "container_size": "small", "anything": ["the sessions' to check"]}
    definition = parse_automation_create({"type": "once", "name": "x", "run_at": NOW + 1,
                                          "target": {**NEW, "environment": hosted}}, now=NOW)  # fmt: skip
    assert definition["target"]["environment"] == hosted


def test_an_environments_confidential_values_are_withheld_and_restored() -> None:
    environment = {"type": "openai_hosted", "env": {"TOKEN": "s3cret"}, "setup_commands": [{"command": "x"}],
                   "container_size": "small"}  # fmt: skip
    target = {**NEW, "environment": environment}
    public, secrets = withhold_environment(target)
    assert public["environment"] == {"type": "openai_hosted", "container_size": "small"}
    assert "s3cret" not in repr(public) and secrets == {"environment": {"env": {"TOKEN": "s3cret"},
                                                                        "setup_commands": [{"command": "x"}]}}  # fmt: skip
    assert restore_environment(public, secrets) == target
    assert withhold_environment(NEW) == (NEW, {})


def test_an_update_keeps_the_type_and_checks_its_fields_against_it() -> None:
    current = automation_object("automation_1", periodic(), created_at=NOW)
    changes = parse_automation_update({"name": "weekly", "expression": "0 9 * * 1", "metadata": {}}, now=NOW)
    assert apply_automation_update(current, changes) == {**current, "name": "weekly", "expression": "0 9 * * 1"}
    assert current["name"] == "daily", "not changed in place"
    for body, param, code in [({"run_at": NOW + 5}, "run_at", "unsupported_parameter"),
                              ({"target": {**NEW}}, "target.type", "invalid_value")]:
        with pytest.raises(InvalidRequest) as caught:
            apply_automation_update(current, parse_automation_update(body, now=NOW))
        assert (caught.value.param, caught.value.code) == (param, code)
    once = {**automation_object("automation_2", parse_automation_create(
        {"type": "once", "name": "x", "run_at": NOW + 1, "target": EXISTING}, now=NOW), created_at=NOW),
        "status": "completed"}  # fmt: skip
    with pytest.raises(InvalidRequest) as caught:
        apply_automation_update(once, parse_automation_update({"run_at": NOW + 100}, now=NOW))
    assert caught.value.param == "run_at"
    assert refused({"type": "once"}, update=True).code == "unknown_parameter"
    assert refused({"timezone": "Nowhere/Land"}, update=True).param == "timezone"
    assert refused({"run_at": NOW - 1}, update=True).param == "run_at"
    assert parse_automation_update({}, now=NOW) == {}


# -- the schedule --------------------------------------------------------------------------


def test_a_one_time_automation_is_due_at_run_at_then_never() -> None:
    once = {"type": "once", "run_at": NOW + 60}
    assert next_due(once, after=NOW) == NOW + 60
    assert next_due(once, after=NOW + 59.5) == NOW + 60
    assert next_due(once, after=NOW + 60) is None


def test_a_periodic_automation_follows_its_timezone() -> None:
    berlin = periodic("0 9 * * *", "Europe/Berlin")
    # 09:00 in Berlin is 08:00 UTC in winter (CET) and 07:00 UTC in summer (CEST).
    assert next_due(berlin, after=at("2027-01-15T08:00:00+00:00")) == at("2027-01-16T08:00:00+00:00")
    assert next_due(berlin, after=at("2027-07-15T06:00:00+00:00")) == at("2027-07-15T07:00:00+00:00")
    assert next_due(periodic("0 9 * * *", "UTC"), after=at("2027-07-15T06:00:00+00:00")) == at(
        "2027-07-15T09:00:00+00:00")
    weekdays = periodic("30 8 * * 1-5", "America/New_York")
    assert next_due(weekdays, after=at("2027-01-15T14:00:00+00:00")) == at("2027-01-18T13:30:00+00:00"), "Monday"


def test_daylight_saving_time_in_a_periodic_automations_timezone() -> None:
    # Berlin springs forward on 2027-03-28 at 02:00 (to 03:00): 02:30 does not exist that day,
    # and cron runs such a job at the first minute after the gap, 03:00 CEST (01:00 UTC).
    nightly = periodic("30 2 * * *", "Europe/Berlin")
    days = []
    after = at("2027-03-26T12:00:00+00:00")
    for _ in range(4):
        after = next_due(nightly, after=after)
        days.append(datetime.fromtimestamp(after, UTC).isoformat())
    assert days == ["2027-03-27T01:30:00+00:00", "2027-03-28T01:00:00+00:00", "2027-03-29T00:30:00+00:00",
                    "2027-03-30T00:30:00+00:00"]
    # It falls back on 2027-10-31 at 03:00 (to 02:00): 02:30 happens twice, and runs once.
    after, days = at("2027-10-30T12:00:00+00:00"), []
    for _ in range(3):
        after = next_due(nightly, after=after)
        days.append(datetime.fromtimestamp(after, UTC).isoformat())
    assert days == ["2027-10-31T00:30:00+00:00", "2027-11-01T01:30:00+00:00", "2027-11-02T01:30:00+00:00"]
    hourly = periodic("0 * * * *", "Europe/Berlin")
    assert next_due(hourly, after=at("2027-03-28T00:30:00+00:00")) == at("2027-03-28T01:00:00+00:00"), \
        "03:00 CEST follows 01:00 CET"
