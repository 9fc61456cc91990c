"""The Agents API's automations (OpenAI's Agents API, beta), pure: the create and update bodies,
the schedule maths, the ``agent.automation`` and ``agent.automation.invocation`` objects.

An automation (``automation_…``; OpenAI's prefix is not documented, so the word is ours) is a
schedule that, at each due time, starts a new session or sends a turn to an existing one:

* ``type: "once"``: at ``run_at`` (a Unix time, in the future when given), then ``completed``;
* ``type: "periodic"``: at each time a standard five-field cron ``expression`` gives, read in the
  IANA ``timezone`` (:func:`next_due`; daylight saving as cron does: a time that does not exist
  runs at the first minute after the gap, a time that happens twice runs once).

``POST /v1/agents/automations`` takes (:func:`parse_automation_create`; the SDK's
``AutomationCreateParams``)::

    {"type": "once", "run_at": int,                           a time after now
     | "type": "periodic", "expression": str, "timezone": str,
     "name": str,                                             at most 128 characters
     "metadata": {str: str},                                  16 pairs; keys 64, values 512 characters
     "target": {"type": "new_session",
                "agent": {model, instructions, tools, ...} | "agent_id": "agent_…",   exactly one
                "environment": {"type": "none"} | {...},     the rest is the sessions' to check
                "input": [{"role": "user", "type": "message",
                           "content": [{"type": "input_text", "text"} | {"type": "input_image", "image_url"}]}],
                "metadata": {str: str} | null, "vault_ids": [str] | null}
             | {"type": "existing_session", "session_id": str, "instructions": str}}

``POST /v1/agents/automations/{id}`` takes any of ``name``, ``metadata``, ``target`` (the whole
target, of the same type), and ``run_at`` (a one-time automation's) or ``expression`` and
``timezone`` (a periodic one's): :func:`parse_automation_update`, then
:func:`apply_automation_update` against the automation.

Refused, naming the field: a ``run_at`` at or before now (the SDK: "a future Unix timestamp"; a
time already past would fire at once, which is what a manual invocation is for), a cron
expression cronsim cannot read (``expression``), a timezone zoneinfo does not know
(``timezone``), ``expression``/``timezone`` on a one-time automation and ``run_at`` on a
periodic one (``unsupported_parameter``), a target of the other type on update
(``target.type``), both or neither of ``agent`` and ``agent_id``. An inline agent is checked as
``POST /v1/agents`` checks one (:func:`troupe.protocol.agents.parse_agent_create`), its errors
named under ``target.agent``. The environment is passed to the sessions' code unchanged but for
what is confidential in it (``env``, ``setup_commands``, ``files``: :func:`withhold_environment`),
which is never stored in plain text.

Example::

    >>> made = parse_automation_create({"type": "periodic", "name": "daily", "expression": "0 9 * * 1-5",
    ...     "timezone": "Europe/Berlin", "target": {"type": "existing_session", "session_id": "sess_1",
    ...     "instructions": "Report."}}, now=0)
    >>> next_due(made, after=1_800_000_000)  # Friday 2027-01-15 09:00 in Berlin: the next is Monday's
    1800259200
"""

from __future__ import annotations

import copy
import functools
import math
import zoneinfo
from datetime import UTC, datetime
from typing import Any

from cronsim import CronSim, CronSimError

from .agents import parse_agent_create
from .errors import InvalidRequest, NotFound, object_body, show_value, wrong_type
from .ids import AGENT, new_id
from .request import check_metadata
from .vaults import parse_vault_ids

__all__ = [
    "AUTOMATION",
    "AUTOMATION_FIELDS",
    "AUTOMATION_INVOCATION",
    "CONFIDENTIAL_ENVIRONMENT_KEYS",
    "INLINE_AGENT_FIELDS",
    "MAX_AUTOMATION_NAME",
    "MAX_RUN_AT",
    "PENDING_DELIVERY_S",
    "apply_automation_update",
    "automation_deleted",
    "automation_not_found",
    "automation_object",
    "invocation_not_found",
    "invocation_object",
    "new_automation_id",
    "new_invocation_id",
    "named_under",
    "next_due",
    "parse_automation_create",
    "parse_automation_update",
    "restore_environment",
    "session_body",
    "session_events",
    "withhold_environment",
]

AUTOMATION = "automation"
"""An automation's id prefix (OpenAI does not document its own)."""
AUTOMATION_INVOCATION = "ainv"
"""An automation invocation's id prefix (ours)."""
AUTOMATION_FIELDS = ("type", "name", "metadata", "target", "run_at", "expression", "timezone")
MAX_AUTOMATION_NAME = 128
MAX_RUN_AT = 253_402_300_799
"""The latest ``run_at``: 9999-12-31T23:59:59Z."""
PENDING_DELIVERY_S = 900
"""How long a ``queued`` invocation makes the automation's next due times ``skipped``
(``pending_delivery``): past it, the delivery is taken for lost with the process that made it."""
INLINE_AGENT_FIELDS = ("model", "instructions", "tools", "text", "reasoning", "service_tier", "multi_agent",
                       "compaction", "experimental")  # fmt: skip
"""What a ``new_session`` target's inline ``agent`` may hold (the SDK's
``AutomationTargetParamNewSessionAgent``: an agent's definition without name and metadata)."""
CONFIDENTIAL_ENVIRONMENT_KEYS = ("env", "setup_commands", "files")
"""An environment's values the SDK's ``AutomationEnvironment`` omits as confidential (variables,
setup commands, inline file contents): withheld from the stored automation."""

_NEW_SESSION_KEYS = ("type", "agent", "agent_id", "environment", "input", "metadata", "vault_ids")
_EXISTING_SESSION_KEYS = ("type", "session_id", "instructions")
_ONLY_FOR = {"run_at": "once", "expression": "periodic", "timezone": "periodic"}


def new_automation_id() -> str:
    return new_id(AUTOMATION)


def new_invocation_id() -> str:
    return new_id(AUTOMATION_INVOCATION)


# -- bodies ------------------------------------------------------------------------------


def parse_automation_create(body: Any, *, now: float) -> dict[str, Any]:
    """``POST /v1/agents/automations``'s body, checked: the automation's definition
    (``{"type", "name", "metadata", "target"}`` and ``run_at`` or ``expression`` and ``timezone``).

    Raises:
        InvalidRequest: naming the field (module docstring).
    """
    body = object_body(body, "", AUTOMATION_FIELDS)
    kind = body.get("type")
    if kind is None:
        raise _missing("type")
    if kind not in ("once", "periodic"):
        raise _one_of("type", kind, ("once", "periodic"))
    for name in ("name", "target", *(f for f, only in _ONLY_FOR.items() if only == kind)):
        if name not in body:
            raise _missing(name)
    definition = {"type": kind, "name": _name(body["name"]), "metadata": _metadata(body.get("metadata")),
                  "target": _target(body["target"])}  # fmt: skip
    _check_kind(kind, body)
    if kind == "once":
        definition["run_at"] = _run_at(body["run_at"], now)
    else:
        definition["expression"] = _expression(body["expression"])
        definition["timezone"] = _timezone(body["timezone"])
    return definition


def parse_automation_update(body: Any, *, now: float) -> dict[str, Any]:
    """``POST /v1/agents/automations/{id}``'s body, checked: the changes, by field. Whether they
    fit the automation's type is :func:`apply_automation_update`'s to say.

    Raises:
        InvalidRequest: naming the field; ``type`` may not change (``unknown_parameter``).
    """
    body = object_body(body, "", AUTOMATION_FIELDS[1:])
    changes: dict[str, Any] = {}
    for name, value in body.items():
        if name == "metadata":
            changes[name] = _metadata(value)
        elif name == "run_at":
            changes[name] = _run_at(value, now)
        else:
            changes[name] = _PARSERS[name](value)
    return changes


def apply_automation_update(automation: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``automation`` (its stored definition or object) with ``changes`` made; a new dict.

    Raises:
        InvalidRequest: a field of the other type's (``unsupported_parameter``), a target of
            the other type (``target.type``), a one-time automation's ``run_at`` once it has fired.
    """
    _check_kind(automation["type"], changes)
    target = changes.get("target")
    if target is not None and target["type"] != automation["target"]["type"]:
        raise InvalidRequest(f"Invalid 'target.type': the automation's target is '{automation['target']['type']}', "
                             "and an update keeps its type.", param="target.type", code="invalid_value")  # fmt: skip
    if "run_at" in changes and automation.get("status") == "completed":
        raise InvalidRequest("Invalid 'run_at': the one-time automation has run; a new run_at is accepted only "
                             "before it does.", param="run_at", code="invalid_value")  # fmt: skip
    updated = copy.deepcopy(automation)
    updated.update(copy.deepcopy(changes))
    return updated


def _check_kind(kind: str, fields: dict[str, Any]) -> None:
    for name, only in _ONLY_FOR.items():
        if name in fields and only != kind:
            raise InvalidRequest(f"Unsupported parameter: '{name}' is only accepted for {only} automations, and "
                                 f"this one is {kind}.", param=name, code="unsupported_parameter")  # fmt: skip


# -- fields ------------------------------------------------------------------------------


def _name(value: Any) -> str:
    if not isinstance(value, str):
        raise wrong_type("name", "a string", value)
    if not value:
        raise InvalidRequest("Invalid 'name': empty string.", param="name", code="empty_string")
    if len(value) > MAX_AUTOMATION_NAME:
        raise InvalidRequest(f"Invalid 'name': string too long. Expected at most {MAX_AUTOMATION_NAME} characters, "
                             f"got {len(value)}.", param="name", code="string_above_max_length")  # fmt: skip
    return value


def _metadata(value: Any, where: str = "") -> dict[str, str]:
    with named_under(where):
        return dict(check_metadata(value) or {})


def _run_at(value: Any, now: float) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise wrong_type("run_at", "an integer (a Unix time in seconds)", value)
    if value > MAX_RUN_AT:
        raise InvalidRequest(f"Invalid 'run_at': {value} is after the year 9999.", param="run_at",
                             code="invalid_value")  # fmt: skip
    if value <= now:
        raise InvalidRequest(f"Invalid 'run_at': {value} is not in the future (now is {int(now)}).",
                             param="run_at", code="invalid_value")  # fmt: skip
    return value


def _expression(value: Any) -> str:
    if not isinstance(value, str):
        raise wrong_type("expression", "a string", value)
    try:
        if len(value.split()) != 5:  # cronsim also reads a sixth field (seconds); OpenAI's take five
            raise CronSimError("Wrong number of fields")
        CronSim(value, datetime.now(UTC))
    except (CronSimError, ValueError, IndexError) as exc:
        raise InvalidRequest(f"Invalid 'expression': {show_value(value)} is not a five-field cron expression "
                             f"({exc}).", param="expression", code="invalid_value") from exc  # fmt: skip
    return value


def _timezone(value: Any) -> str:
    if not isinstance(value, str):
        raise wrong_type("timezone", "a string", value)
    if value not in _timezones():
        raise InvalidRequest(f"Invalid 'timezone': {show_value(value)} is not an IANA timezone (e.g. "
                             "'Europe/Berlin', 'UTC').", param="timezone", code="invalid_value")  # fmt: skip
    return value


@functools.cache
def _timezones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def _target(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise wrong_type("target", "an object", value)
    kind = value.get("type")
    if kind == "existing_session":
        body = object_body(value, "target", _EXISTING_SESSION_KEYS)
        for name in ("session_id", "instructions"):
            if name not in body:
                raise _missing(f"target.{name}")
            if not isinstance(body[name], str) or not body[name]:
                raise wrong_type(f"target.{name}", "a non-empty string", body[name])
        return {"type": kind, "session_id": body["session_id"], "instructions": body["instructions"]}
    if kind != "new_session":
        if kind is None:
            raise _missing("target.type")
        raise _one_of("target.type", kind, ("new_session", "existing_session"))
    body = object_body(value, "target", _NEW_SESSION_KEYS)
    for name in ("environment", "input"):
        if name not in body:
            raise _missing(f"target.{name}")
    target: dict[str, Any] = {"type": kind, "agent": None, "agent_id": None}
    if ("agent" in body) == ("agent_id" in body):
        raise InvalidRequest("Provide exactly one of 'target.agent' and 'target.agent_id'.", param="target.agent",
                             code="invalid_value" if "agent" in body else "missing_required_parameter")  # fmt: skip
    if "agent" in body:
        target["agent"] = _inline_agent(body["agent"])
    else:
        target["agent_id"] = _agent_id(body["agent_id"])
    target["environment"] = _environment(body["environment"])
    target["input"] = _input(body["input"])
    target["metadata"] = _metadata(body.get("metadata"), "target")
    target["vault_ids"] = _vault_ids(body.get("vault_ids"))
    return target


def _inline_agent(value: Any) -> dict[str, Any]:
    agent = object_body(value, "target.agent", INLINE_AGENT_FIELDS)
    with named_under("target.agent"):
        definition = parse_agent_create(agent)
    return {name: definition[name] for name in INLINE_AGENT_FIELDS}


def _agent_id(value: Any) -> str:
    if not isinstance(value, str):
        raise wrong_type("target.agent_id", "a string", value)
    if not value.startswith(f"{AGENT}_"):
        raise InvalidRequest(f"Invalid 'target.agent_id': {show_value(value)}. Expected an ID that begins with "
                             f"'{AGENT}_'.", param="target.agent_id", code="invalid_value")  # fmt: skip
    return value


def _environment(value: Any) -> dict[str, Any]:
    """``{"type": "none"}`` is checked here; any other environment is the sessions' code's to
    check (the Agents API's environments), and passes unchanged."""
    if not isinstance(value, dict):
        raise wrong_type("target.environment", "an object", value)
    if value.get("type") == "none":
        object_body(value, "target.environment", ("type",))
    elif not isinstance(value.get("type"), str):
        raise _missing("target.environment.type")
    return copy.deepcopy(value)


def _input(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise wrong_type("target.input", "an array of messages", value)
    if not value:
        raise InvalidRequest("Invalid 'target.input': empty array. Expected at least one message.",
                             param="target.input", code="empty_array")  # fmt: skip
    return [_message(item, f"target.input[{i}]") for i, item in enumerate(value)]


def _message(value: Any, at: str) -> dict[str, Any]:
    message = object_body(value, at, ("role", "type", "content"))
    if message.get("role") != "user":
        raise _missing(f"{at}.role") if "role" not in message else _one_of(f"{at}.role", message["role"], ("user",))
    if message.get("type", "message") != "message":
        raise _one_of(f"{at}.type", message["type"], ("message",))
    content = message.get("content")
    if not isinstance(content, list) or not content:
        raise wrong_type(f"{at}.content", "a non-empty array of content parts", content)
    parts = []
    for j, part in enumerate(content):
        where = f"{at}.content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        field = {"input_text": "text", "input_image": "image_url"}.get(kind)  # type: ignore[arg-type]
        if field is None:
            if not isinstance(part, dict):
                raise wrong_type(where, "an object", part)
            raise _one_of(f"{where}.type", kind, ("input_text", "input_image"))
        object_body(part, where, ("type", field))
        if not isinstance(part.get(field), str):
            raise wrong_type(f"{where}.{field}", "a string", part.get(field))
        parts.append({"type": kind, field: part[field]})
    return {"role": "user", "type": "message", "content": parts}


def _vault_ids(value: Any) -> list[str]:
    return parse_vault_ids(value, "target.vault_ids")


_PARSERS = {"name": _name, "target": _target, "expression": _expression, "timezone": _timezone}


class named_under:
    """Re-raise a 400 or 404 of a checker written for a top-level field (``metadata``, an agent's
    ``tools[0].name``, its ``model``) with its param under ``where`` (``target.metadata``).

    Example::

        with named_under("target.agent"):
            parse_agent_create(agent)      # a bad tools[0].type is 400 naming target.agent.tools[0].type
    """

    def __init__(self, where: str) -> None:
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if self.where and isinstance(exc, InvalidRequest | NotFound):
            param = f"{self.where}.{exc.param}" if exc.param else self.where
            message = exc.message.replace(f"'{exc.param}'", f"'{param}'") if exc.param else exc.message
            raise type(exc)(message, param=param, code=exc.code) from exc


def _missing(param: str) -> InvalidRequest:
    return InvalidRequest(f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")


def _one_of(param: str, value: Any, allowed: tuple[str, ...]) -> InvalidRequest:
    return InvalidRequest(f"Invalid value for '{param}': {show_value(value)}. Expected one of "
                          f"{', '.join(repr(a) for a in allowed)}.", param=param, code="invalid_value")  # fmt: skip


# -- the schedule ------------------------------------------------------------------------


def next_due(automation: dict[str, Any], *, after: float) -> int | None:
    """The automation's first due time strictly after ``after`` (Unix seconds); None when it has
    none (a one-time automation whose ``run_at`` is not after ``after``, or a cron expression
    that never matches, such as ``0 0 30 2 *``).

    A periodic automation's times are its cron expression's in its timezone (cronsim over
    zoneinfo): ``0 9 * * *`` in ``Europe/Berlin`` is 08:00 UTC in winter and 07:00 UTC in summer.
    """
    if automation["type"] == "once":
        run_at = int(automation["run_at"])
        return run_at if run_at > after else None
    zone = zoneinfo.ZoneInfo(automation["timezone"])
    start = datetime.fromtimestamp(math.floor(after), zone)
    try:
        return int(next(iter(CronSim(automation["expression"], start))).timestamp())
    except StopIteration:  # cronsim looks ahead some 50 years
        return None


# -- confidential values -----------------------------------------------------------------


def withhold_environment(target: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``target`` without the confidential values of its environment
    (:data:`CONFIDENTIAL_ENVIRONMENT_KEYS`), and those values (``{}``: there are none)."""
    environment = target.get("environment")
    if not isinstance(environment, dict) or not CONFIDENTIAL_ENVIRONMENT_KEYS & environment.keys():
        return target, {}
    secrets = {k: environment[k] for k in CONFIDENTIAL_ENVIRONMENT_KEYS if k in environment}
    public = {k: v for k, v in environment.items() if k not in CONFIDENTIAL_ENVIRONMENT_KEYS}
    return {**target, "environment": public}, {"environment": secrets}


def restore_environment(target: dict[str, Any], secrets: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`withhold_environment`."""
    if not secrets:
        return target
    return {**target, "environment": {**target["environment"], **secrets["environment"]}}


# -- what a firing sends -----------------------------------------------------------------


def session_body(target: dict[str, Any]) -> dict[str, Any]:
    """A ``new_session`` target's session create body (the SDK's ``SessionCreateParams``)."""
    body = {"environment": target["environment"], "input": target["input"], "metadata": target["metadata"],
            "vault_ids": target["vault_ids"]}  # fmt: skip
    if target["agent_id"] is not None:
        body["agent_id"] = target["agent_id"]
    else:
        body["agent"] = target["agent"]
    return copy.deepcopy(body)


def session_events(target: dict[str, Any]) -> list[dict[str, Any]]:
    """An ``existing_session`` target's events (the SDK's event create body's ``events``): its
    instructions as a user message."""
    message = {"role": "user", "type": "message", "content": [{"type": "input_text", "text": target["instructions"]}]}
    return [{"type": "agent.session.input.message", "input": [message]}]


# -- objects and errors --------------------------------------------------------------------


def automation_object(
    automation_id: str, definition: dict[str, Any], *, created_at: float, status: str = "active",
    pause_reason: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The wire object (the SDK's ``OneTimeAutomation`` or ``PeriodicAutomation``)."""
    obj: dict[str, Any] = {
        "id": automation_id, "object": "agent.automation", "created_at": int(created_at),
        "created_by": {"type": "developer"}, "type": definition["type"], "name": definition["name"],
        "metadata": copy.deepcopy(definition["metadata"]), "target": copy.deepcopy(definition["target"]),
        "status": status, "pause_reason": pause_reason,
    }  # fmt: skip
    if definition["type"] == "once":
        obj["run_at"] = definition["run_at"]
    else:
        obj["expression"], obj["timezone"] = definition["expression"], definition["timezone"]
    return obj


def invocation_object(
    invocation_id: str, automation: dict[str, Any], *, created_at: float, scheduled_at: int | None,
) -> dict[str, Any]:  # fmt: skip
    """A new invocation (the SDK's ``AutomationInvocation``), ``queued``: scheduled (its
    ``source`` the automation as it was) or, with ``scheduled_at`` None, manual."""
    source = {"type": "manual"} if scheduled_at is None else {"type": "automation",
                                                               "automation": copy.deepcopy(automation)}  # fmt: skip
    return {"id": invocation_id, "object": "agent.automation.invocation", "automation_id": automation["id"],
            "created_at": int(created_at), "scheduled_at": scheduled_at, "source": source, "status": "queued",
            "session_id": None, "error": None, "skip_reason": None}  # fmt: skip


def automation_deleted(automation_id: str) -> dict[str, Any]:
    return {"id": automation_id, "object": "agent.automation.deleted", "deleted": True}


def automation_not_found(automation_id: str) -> NotFound:
    return NotFound(f"Automation with id '{automation_id}' not found.", param="automation_id")


def invocation_not_found(invocation_id: str) -> NotFound:
    return NotFound(f"Invocation with id '{invocation_id}' not found.", param="invocation_id")

