"""The Agents API's sessions (OpenAI's Agents API, beta), pure: the bodies a client sends, the
objects it reads (session, turn, items) and the session events translated from a turn's
Responses events.

A **session** (``sess_…``) runs an agent over many **turns**. In Troupe a session is a
conversation, and a turn is one or more *background responses* on it (:mod:`troupe.runtime.sessions`
runs them): the first with the user's messages, and, when the agent called one of the client's
functions, one more with the client's results, as many times as it takes. So a turn survives a
server restart as a durable background run does, and its responses, step traces and console
views are those of any response.

``POST /v1/agents/sessions`` takes (:func:`parse_session_create`; the SDK's ``SessionCreateParams``)::

    {"environment": {"type": "none"} | {"type": "openai_hosted", ...},
                                                         required; openai_hosted: a container
                                                         (troupe.protocol.environments), self_hosted refused
     "agent_id": "agent_…",                              a saved agent, and/or
     "agent": {...},                                     its fields (as POST /v1/agents): with agent_id,
                                                         overrides for this session; alone, model required
     "input": str | [{"role": "user", "type": "message", "content": [input_text | input_image]}],
                                                         required, but with an openai_hosted
                                                         environment and no stream
     "metadata": {str: str} | null, "stream": bool, "stream_options": {"include_obfuscation": bool},
     "review": "none", "prompt_cache_options": null,
     "vault_ids": ["vault_…"] | null}                    vaults whose credentials authorize the agent's
                                                         MCP servers (troupe.protocol.vaults)

``POST /v1/agents/sessions/{id}/events`` takes ``{"events": [...]}`` (:func:`parse_session_events`):
``agent.session.input.message`` (starts a turn), ``agent.session.input.tool_result`` (a result
for a function call the agent made), ``agent.session.input.cancel`` (cancels the active turn).

In an ``openai_hosted`` environment a turn has the ``shell`` tool on the environment's
container, and a ``shell_call`` with its ``shell_call_output`` shows as one
``command_execution`` item (:func:`session_items`). With ``multi_agent`` enabled it also has the
subagent tools (:mod:`troupe.protocol.subagents`), which the runtime runs, not the client: a
turn whose response ended at their calls is ``in_progress`` (:func:`turn_status`), not waiting.

Refused, naming the field: a ``self_hosted`` environment (the client would run the commands),
what an environment cannot have here (:mod:`troupe.protocol.environments`),
``review: "auto_review"`` (no reviewer), ``prompt_cache_options``
(the model server's cache is its own), MCP and computer-use
approval results (nothing here asks for approval: an agent's MCP calls run without it).

Events (:class:`TurnEvents`): a turn's Responses events become the SDK's session events, with
``output_index`` counted over the turn's items (over all its responses) and deterministic
``event_id``\\ s, so a client that reads one event twice (a reconnect) can tell.

Example::

    >>> created = parse_session_create({"environment": {"type": "none"}, "agent": {"model": "sim"}, "input": "hi"})
    >>> created["input"]
    [{'type': 'message', 'role': 'user', 'content': [{'type': 'input_text', 'text': 'hi'}]}]
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .agents import AGENT_FIELDS, parse_agent_create, parse_agent_update
from .environments import WORKSPACE
from .errors import InvalidRequest, NotFound, ProtocolError, object_body, show_value, wrong_type
from .ids import AGENT, AGENT_SESSION, TURN, new_id
from .request import check_metadata
from .subagents import SUBAGENT_TOOL_NAMES, SUBAGENT_TOOLS, subagent_item
from .vaults import parse_vault_ids

__all__ = [
    "CREATE_FIELDS",
    "SESSION_AGENT_FIELDS",
    "UPDATE_FIELDS",
    "TurnEvents",
    "agent_response_tools",
    "chosen_credentials",
    "command_done",
    "describe_result",
    "hosted_environment",
    "new_session_id",
    "new_turn_id",
    "open_calls",
    "parse_session_create",
    "parse_session_events",
    "parse_session_input",
    "parse_session_update",
    "pending_calls",
    "required_actions",
    "response_body",
    "session_deleted",
    "session_event",
    "session_item",
    "session_items",
    "session_not_found",
    "session_object",
    "turn_not_found",
    "turn_object",
    "turn_status",
]

CREATE_FIELDS = ("environment", "agent", "agent_id", "input", "metadata", "prompt_cache_options", "review",
                 "stream", "stream_options", "vault_ids")  # fmt: skip
UPDATE_FIELDS = ("agent", "metadata", "prompt_cache_options", "review")
SESSION_AGENT_FIELDS = tuple(name for name in AGENT_FIELDS if name not in ("name", "metadata"))
"""An agent's fields a session takes and keeps (its ``name`` and ``metadata`` are the saved agent's own)."""
_TERMINAL = ("completed", "failed", "cancelled", "incomplete")


def new_session_id() -> str:
    return new_id(AGENT_SESSION)


def new_turn_id() -> str:
    return new_id(TURN)


def session_not_found(session_id: str) -> NotFound:
    return NotFound(f"Session with id '{session_id}' not found.", param="session_id")


def turn_not_found(turn_id: str) -> NotFound:
    return NotFound(f"Turn with id '{turn_id}' not found.", param="turn_id")


def session_deleted(session_id: str) -> dict[str, Any]:
    return {"id": session_id, "object": "agent.session.deleted", "deleted": True}


# -- bodies ------------------------------------------------------------------------------


def parse_session_create(body: Any) -> dict[str, Any]:
    """``POST /v1/agents/sessions``'s body, checked: ``{"agent_id", "agent", "environment",
    "input", "metadata", "stream"}``, ``agent`` the fields to use (as :func:`parse_agent_update`
    gives them with ``agent_id``; as :func:`parse_agent_create` does, without).

    Raises:
        InvalidRequest: naming the field (``environment.type``, ``agent.model``, ``input[0].role``…).
    """
    body = object_body(body, "", CREATE_FIELDS)
    if "environment" not in body:
        raise _missing("environment")
    environment = _environment(body["environment"])
    agent_id = body.get("agent_id")
    if agent_id is not None and not (isinstance(agent_id, str) and agent_id.startswith(f"{AGENT}_")):
        raise InvalidRequest(f"Invalid 'agent_id': {show_value(agent_id)}. Expected an ID that begins with 'agent_'.",
                             param="agent_id", code="invalid_value")  # fmt: skip
    agent = body.get("agent")
    if agent is None and agent_id is None:
        raise InvalidRequest("Missing required parameter: 'agent.model' (or give 'agent_id', a saved agent).",
                             param="agent.model", code="missing_required_parameter")  # fmt: skip
    if agent is not None:
        object_body(agent, "agent", SESSION_AGENT_FIELDS)
        agent = _under("agent", parse_agent_update if agent_id else parse_agent_create, agent)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise wrong_type("stream", "a boolean", stream)
    options = body.get("stream_options")
    if options is not None:
        if not stream:
            raise InvalidRequest("'stream_options' is only allowed when 'stream' is true.", param="stream_options",
                                 code="invalid_value")  # fmt: skip
        _stream_options(options, "stream_options")
    if body.get("input") is None and (environment["type"] == "none" or stream):
        raise InvalidRequest("Missing required parameter: 'input' (required without an execution environment, and "
                             "when streaming).", param="input", code="missing_required_parameter")  # fmt: skip
    _check_review(body.get("review"))
    _check_prompt_cache(body.get("prompt_cache_options"))
    return {
        "agent_id": agent_id, "agent": agent or {}, "environment": environment,
        "input": None if body.get("input") is None else parse_session_input(body["input"], "input"),
        "metadata": check_metadata(body.get("metadata")) or {},
        "stream": stream, "vault_ids": parse_vault_ids(body.get("vault_ids")),
    }  # fmt: skip


def parse_session_update(body: Any) -> dict[str, Any]:
    """``POST /v1/agents/sessions/{id}``'s body, checked: the changes (``agent``: fields as
    :func:`parse_agent_update` gives them; ``metadata``: the new map, null clearing it).

    Raises:
        InvalidRequest: naming the field.
    """
    body = object_body(body, "", UPDATE_FIELDS)
    changes: dict[str, Any] = {}
    if body.get("agent") is not None:
        object_body(body["agent"], "agent", SESSION_AGENT_FIELDS)
        changes["agent"] = _under("agent", parse_agent_update, body["agent"])
    if "metadata" in body:
        changes["metadata"] = check_metadata(body["metadata"]) or {}
    _check_review(body.get("review"))
    _check_prompt_cache(body.get("prompt_cache_options"))
    return changes


def parse_session_input(value: Any, at: str) -> list[dict[str, Any]]:
    """A session's user input (a string, or a non-empty list of user messages) as Responses
    input items.

    Raises:
        InvalidRequest: naming the field (``input[1].content[0].type``…).
    """
    if isinstance(value, str):
        if not value:
            raise InvalidRequest(f"Invalid '{at}': empty string.", param=at, code="invalid_value")
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}]
    if not isinstance(value, list) or not value:
        raise wrong_type(at, "a string or a non-empty array of user messages", value)
    items = []
    for i, message in enumerate(value):
        where = f"{at}[{i}]"
        object_body(message, where, ("role", "type", "content"))
        if message.get("role") != "user":
            raise InvalidRequest(f"Invalid value for '{where}.role': {show_value(message.get('role'))}; only 'user' "
                                 "messages are session input.", param=f"{where}.role", code="invalid_value")  # fmt: skip
        if message.get("type", "message") != "message":
            raise InvalidRequest(f"Invalid value for '{where}.type': expected 'message'.", param=f"{where}.type",
                                 code="invalid_value")  # fmt: skip
        content = message.get("content")
        if not isinstance(content, list) or not content:
            raise wrong_type(f"{where}.content", "a non-empty array of input_text and input_image parts", content)
        items.append({"type": "message", "role": "user",
                      "content": [_input_part(part, f"{where}.content[{j}]") for j, part in enumerate(content)]})  # fmt: skip
    return items


def parse_session_events(body: Any) -> list[dict[str, Any]]:
    """``POST /v1/agents/sessions/{id}/events``'s body, checked: its events, each ``{"type":
    "message", "input": [items]}``, ``{"type": "cancel"}`` or ``{"type": "tool_result",
    "turn_id", "call_id", "success", "output", "error"}``.

    Raises:
        InvalidRequest: naming the field (``events[0].type``…).
    """
    body = object_body(body, "", ("events",))
    events = body.get("events")
    if events is None:
        raise _missing("events")
    if not isinstance(events, list) or not events:
        raise wrong_type("events", "a non-empty array of session input events", events)
    return [_event(event, f"events[{i}]") for i, event in enumerate(events)]


def _event(event: Any, at: str) -> dict[str, Any]:
    if not isinstance(event, dict):
        raise wrong_type(at, "an object", event)
    kind = event.get("type")
    if kind == "agent.session.input.message":
        object_body(event, at, ("type", "input"))
        if "input" not in event:
            raise _missing(f"{at}.input")
        if not isinstance(event["input"], list):
            raise wrong_type(f"{at}.input", "a non-empty array of user messages", event["input"])
        return {"type": "message", "input": parse_session_input(event["input"], f"{at}.input")}
    if kind == "agent.session.input.cancel":
        object_body(event, at, ("type",))
        return {"type": "cancel"}
    if kind == "agent.session.input.tool_result":
        object_body(event, at, ("type", "turn_id", "call_id", "success", "output", "error"))
        for key in ("turn_id", "call_id", "success"):
            if key not in event:
                raise _missing(f"{at}.{key}")
        for key in ("turn_id", "call_id"):
            if not isinstance(event[key], str) or not event[key]:
                raise wrong_type(f"{at}.{key}", "a non-empty string", event[key])
        if not isinstance(event["success"], bool):
            raise wrong_type(f"{at}.success", "a boolean", event["success"])
        error = event.get("error")
        if error is not None and not isinstance(error, str):
            raise wrong_type(f"{at}.error", "a string", error)
        output = event.get("output")
        if output is not None and not isinstance(output, str):
            if not isinstance(output, list):
                raise wrong_type(f"{at}.output", "a string or an array of input_text and input_image parts", output)
            output = [_input_part(part, f"{at}.output[{j}]") for j, part in enumerate(output)]
        return {"type": "tool_result", "turn_id": event["turn_id"], "call_id": event["call_id"],
                "success": event["success"], "output": output, "error": error}  # fmt: skip
    if kind in ("agent.session.input.mcp_approval_request_result",
                "agent.session.input.computer_use_approval_request_result"):  # fmt: skip
        raise InvalidRequest(f"Unsupported value: '{at}.type' {show_value(kind)}: nothing on this server asks for "
                             "approval (an agent's MCP calls run without it).", param=f"{at}.type",
                             code="unsupported_value")  # fmt: skip
    if kind is None:
        raise _missing(f"{at}.type")
    raise InvalidRequest(f"Invalid value for '{at}.type': {show_value(kind)}. Expected one of "
                         "'agent.session.input.message', 'agent.session.input.tool_result', "
                         "'agent.session.input.cancel'.", param=f"{at}.type", code="invalid_value")  # fmt: skip


def _input_part(part: Any, at: str) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise wrong_type(at, "an object", part)
    kind = part.get("type")
    if kind == "input_text":
        object_body(part, at, ("type", "text"))
        if not isinstance(part.get("text"), str):
            raise wrong_type(f"{at}.text", "a string", part.get("text"))
        return {"type": "input_text", "text": part["text"]}
    if kind == "input_image":
        object_body(part, at, ("type", "image_url", "detail"))
        if not isinstance(part.get("image_url"), str):
            raise wrong_type(f"{at}.image_url", "a URL", part.get("image_url"))
        return {"type": "input_image", "image_url": part["image_url"], "detail": part.get("detail") or "auto"}
    raise InvalidRequest(f"Invalid value for '{at}.type': {show_value(kind)}. Expected 'input_text' or 'input_image'.",
                         param=f"{at}.type", code="invalid_value")  # fmt: skip


def _environment(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise wrong_type("environment", "an object", value)
    kind = value.get("type")
    if kind == "none":
        object_body(value, "environment", ("type",))
        return {"type": "none"}
    if kind == "openai_hosted":
        return dict(value)  # checked against this server's limits by the runtime (Runtime.environments.parse)
    if kind == "self_hosted":
        raise InvalidRequest("Unsupported value: 'environment.type' 'self_hosted': a client-run environment is not "
                             "available on this server; use 'openai_hosted' (a sandboxed container) or 'none'.",
                             param="environment.type", code="unsupported_value")  # fmt: skip
    if kind is None:
        raise _missing("environment.type")
    raise InvalidRequest(f"Invalid value for 'environment.type': {show_value(kind)}. Expected one of 'none', "
                         "'openai_hosted', 'self_hosted'.", param="environment.type", code="invalid_value")  # fmt: skip


def _stream_options(value: Any, at: str) -> None:
    object_body(value, at, ("include_obfuscation",))
    flag = value.get("include_obfuscation")
    if flag is not None and not isinstance(flag, bool):
        raise wrong_type(f"{at}.include_obfuscation", "a boolean", flag)
    # Troupe's events never carry obfuscation padding, which the field makes optional: either value is met.


def _check_review(value: Any) -> None:
    if value in (None, "none"):
        return
    if value == "auto_review":
        raise InvalidRequest("Unsupported value: 'review' 'auto_review': this server has no action reviewer.",
                             param="review", code="unsupported_value")  # fmt: skip
    raise InvalidRequest(f"Invalid value for 'review': {show_value(value)}. Expected 'none' or 'auto_review'.",
                         param="review", code="invalid_value")  # fmt: skip


def _check_prompt_cache(value: Any) -> None:
    if value is not None:
        raise InvalidRequest("Unsupported parameter: 'prompt_cache_options'. The prompt cache is the model server's "
                             "own; this server sets no lifetime for it.", param="prompt_cache_options",
                             code="unsupported_parameter")  # fmt: skip


def _under(prefix: str, parse: Callable[[Any], dict[str, Any]], value: Any) -> dict[str, Any]:
    """``parse(value)``, its errors naming ``prefix.<field>`` (a parser of a whole body names ``<field>``)."""
    if not isinstance(value, dict):
        raise wrong_type(prefix, "an object", value)
    try:
        return parse(value)
    except ProtocolError as exc:
        param = f"{prefix}.{exc.param}" if exc.param else prefix
        message = exc.message.replace(f"'{exc.param}'", f"'{param}'") if exc.param else exc.message
        raise type(exc)(message, type=exc.type, param=param, code=exc.code, status=exc.status) from exc


def _missing(param: str) -> InvalidRequest:
    return InvalidRequest(f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")


# -- what a turn sends the model ----------------------------------------------------------


def response_body(session: dict[str, Any], input_items: list[dict[str, Any]], turn_id: str) -> dict[str, Any]:
    """The ``POST /v1/responses`` body of one of the session's turn's responses: the session's
    agent (model, instructions, tools, text, reasoning) on its conversation, in the background,
    stored, with ``input_items``."""
    agent = session["agent"]
    body: dict[str, Any] = {
        "model": agent["model"], "input": input_items, "conversation": session["conversation_id"],
        "background": True, "store": True, "tools": agent_response_tools(agent)
        + ([{"type": "shell", "environment": {"type": "container_reference", "container_id": session["container_id"]}}]
           if session.get("container_id") else [])
        + (list(SUBAGENT_TOOLS) if agent["multi_agent"]["enabled"] else []),
        "metadata": {"agent_session_id": session["id"], "agent_session_turn_id": turn_id},
    }  # fmt: skip
    if agent.get("instructions"):
        body["instructions"] = agent["instructions"]
    text = agent.get("text") or {}
    if text:
        fmt = text.get("format") or {"type": "text"}
        if fmt["type"] == "json_schema":
            fmt = {"type": "json_schema", "name": "output", "schema": fmt["schema"]}
        body["text"] = {"format": fmt, "verbosity": text.get("verbosity") or "medium"}
    reasoning = agent.get("reasoning") or {}
    if reasoning.get("effort") or reasoning.get("summary"):
        body["reasoning"] = {k: v for k, v in reasoning.items() if v is not None}
    return body


def agent_response_tools(agent: dict[str, Any]) -> list[dict[str, Any]]:
    """The agent's tools as a response's (the first tools of :func:`response_body`'s, in order),
    but those that are off (a ``web_search`` in ``mode: "disabled"``)."""
    return [_response_tool(tool) for tool in _offered(agent)]


def chosen_credentials(agent: dict[str, Any]) -> dict[int, str]:
    """The vault credential each of the agent's MCP tools names (``credential_id``), by its index
    in :func:`agent_response_tools`."""
    return {index: tool["credential_id"] for index, tool in enumerate(_offered(agent))
            if tool["type"] == "mcp" and tool.get("credential_id")}  # fmt: skip


def _offered(agent: dict[str, Any]) -> list[dict[str, Any]]:
    return [tool for tool in agent["tools"] or () if tool.get("mode") != "disabled"]


def _response_tool(tool: dict[str, Any]) -> dict[str, Any]:
    if tool["type"] == "function":
        return {"type": "function", "name": tool["name"], "description": tool["description"],
                "parameters": tool["parameters"], "strict": False}  # fmt: skip
    if tool["type"] == "mcp":
        server = {"type": "mcp", "server_label": tool["server_label"], "server_url": tool["transport"]["server_url"],
                  "require_approval": "never"}  # fmt: skip
        if tool.get("allowed_tools") is not None:
            server["allowed_tools"] = tool["allowed_tools"]
        return server
    if tool["type"] == "web_search":
        search: dict[str, Any] = {"type": "web_search", "search_context_size": tool["context_size"]}
        if tool.get("allowed_domains"):
            search["filters"] = {"allowed_domains": tool["allowed_domains"]}
        if tool.get("location"):
            search["user_location"] = {"type": "approximate", **{k: v for k, v in tool["location"].items() if v}}
        return search
    raise AssertionError(f"an agent tool of type {tool['type']!r} was stored")  # parse_agent_* refuse the others


# -- objects ----------------------------------------------------------------------------


def session_object(
    session: dict[str, Any], status: str, actions: list[dict[str, Any]], *, error: str | None = None
) -> dict[str, Any]:
    """The wire ``agent.session`` of a stored session, with what its turns say of it now."""
    return {
        "id": session["id"], "object": "agent.session", "agent": session["agent"],
        "created_at": int(session["created_at"]), "last_active_at": int(session["last_active_at"]),
        "environment": session["environment"], "error": error, "metadata": session["metadata"],
        "required_actions": actions, "status": status, "usage": None, "vault_ids": session.get("vault_ids", []),
        "prompt_cache_options": None, "review": None,
    }  # fmt: skip


_SIZES = {"1g": "small", "4g": "medium", "16g": "large"}


def hosted_environment(made: dict[str, Any], container: dict[str, Any], python: list[str]) -> dict[str, Any]:
    """The ``openai_hosted`` environment a session shows (the SDK's ``Environment``), of the
    environment ``made`` and the container it runs in."""
    policy = container.get("network_policy") or {"type": "disabled"}
    network = ({"access": "restricted", "allowed_domains": list(policy.get("allowed_domains") or ())}
               if policy["type"] == "allowlist" else {"access": "disabled", "allowed_domains": []})  # fmt: skip
    return {
        "id": made["id"], "type": "openai_hosted", "capability_directories": [], "files": made["files"],
        "network": network, "packages": {"npm": [], "python": python, "system": []}, "plugins": [], "skills": [],
        "container_size": _SIZES.get(container.get("memory_limit", "")), "desktop": None,
    }  # fmt: skip


def open_calls(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The function calls a completed response left open: its ``function_call`` items without a
    ``function_call_output`` (the loop's own tools have theirs): the client's functions and the
    subagent tools (:mod:`troupe.protocol.subagents`), which the session's runtime runs."""
    output = response.get("output") or []
    answered = {item.get("call_id") for item in output if item.get("type") == "function_call_output"}
    return [item for item in output if item.get("type") == "function_call" and item.get("call_id") not in answered]


def pending_calls(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The open calls (:func:`open_calls`) that are the client's to run: not the subagent tools."""
    return [call for call in open_calls(response) if call.get("name") not in SUBAGENT_TOOL_NAMES]


def turn_status(turn: dict[str, Any], last: dict[str, Any] | None) -> str:
    """A turn's status from its row and its last response (None: that response is gone)."""
    if turn["cancelled"]:
        return "cancelled"
    if last is None:
        return "failed"
    status = last["status"]
    if status == "queued":
        return "queued" if len(turn["responses"]) == 1 else "in_progress"
    if status == "in_progress":
        return "in_progress"
    if status == "completed":
        if pending_calls(last):
            return "waiting"
        return "in_progress" if open_calls(last) else "completed"  # open: its subagent calls, running
    return "cancelled" if status == "cancelled" else "failed"


def turn_object(turn: dict[str, Any], responses: list[dict[str, Any] | None], agent_id: str) -> dict[str, Any]:
    """The wire ``agent.session.turn``: ``responses`` are the turn's responses as they stand
    (None for one that is gone)."""
    first, last = responses[0], responses[-1]
    status = turn_status(turn, last)
    ended = status in ("completed", "failed", "cancelled")
    completed_at = last.get("completed_at") if last is not None else None
    return {
        "id": turn["id"], "object": "agent.session.turn", "agent_id": agent_id, "session_id": turn["session_id"],
        "created_at": int(turn["created_at"]), "started_at": None if first is None else first.get("created_at"),
        "completed_at": (completed_at or int(turn["created_at"])) if ended else None, "status": status,
        "error": _turn_error(last) if status == "failed" else None, "subagent_id": None,
        "usage": _usage([r for r in responses if r is not None]), "prompt_cache_options": None,
    }  # fmt: skip


_TURN_ERROR_CODES = frozenset({"context_length_exceeded", "rate_limit_exceeded", "server_error", "invalid_request",
                               "request_timeout", "resource_not_found"})  # fmt: skip


def _turn_error(last: dict[str, Any] | None) -> dict[str, Any]:
    if last is None:
        return {"code": "internal_error", "message": "The turn's response is gone (it was deleted)."}
    if last["status"] == "incomplete":
        reason = (last.get("incomplete_details") or {}).get("reason")
        kind = "max_output_tokens" if reason == "max_output_tokens" else "internal_error"
        return {"code": kind, "message": f"The response ended incomplete ({reason})."}
    error = last.get("error") or {}
    code = error.get("code")
    return {"code": code if code in _TURN_ERROR_CODES else "server_error", "message": error.get("message") or "failed"}


def _usage(responses: list[dict[str, Any]]) -> dict[str, Any] | None:
    usages = [r["usage"] for r in responses if r.get("usage")]
    if not usages:
        return None

    def total(key: str, detail: str | None = None) -> int:
        if detail is None:
            return sum(u.get(key) or 0 for u in usages)
        return sum((u.get(f"{key}_details") or {}).get(detail) or 0 for u in usages)

    return {
        "input_tokens": total("input_tokens"), "input_tokens_details": {"cached_tokens": total("input_tokens", "cached_tokens")},
        "output_tokens": total("output_tokens"),
        "output_tokens_details": {"reasoning_tokens": total("output_tokens", "reasoning_tokens")},
        "total_tokens": total("total_tokens"),
    }  # fmt: skip


def required_actions(turn_id: str, last: dict[str, Any], results: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``function_call`` required actions of a waiting turn: its calls without a result yet."""
    return [{"type": "function_call", "turn_id": turn_id, "call_id": call["call_id"], "name": call["name"],
             "arguments": _arguments(call.get("arguments"))}
            for call in pending_calls(last) if call["call_id"] not in results]  # fmt: skip


def _arguments(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


_STATUS = {"calling": "in_progress", "searching": "in_progress", "interpreting": "in_progress"}


def session_item(item: dict[str, Any], turn_id: str) -> dict[str, Any] | None:
    """A Responses item as the session item the SDK reads (``AgentSessionItem``); None for the
    kinds a session does not show (``mcp_list_tools``, a system or developer message…)."""
    kind = item.get("type")
    status = _STATUS.get(item.get("status") or "completed", item.get("status") or "completed")
    if kind == "message" and item.get("role") in ("user", "assistant"):
        parts = [_content(part) for part in item.get("content") or ()]
        return {"id": item.get("id"), "type": "message", "role": item["role"], "content": [p for p in parts if p],
                "phase": "final_answer" if item["role"] == "assistant" else None,
                "status": status if item["role"] == "assistant" else "completed", "turn_id": turn_id}  # fmt: skip
    if kind == "function_call":
        return {"id": item.get("id"), "type": "function_call", "call_id": item["call_id"], "name": item["name"],
                "arguments": _arguments(item.get("arguments")), "status": status, "turn_id": turn_id}  # fmt: skip
    if kind == "function_call_output":
        return {"id": item.get("id"), "type": "function_call_output", "call_id": item["call_id"],
                "output": item.get("output"), "error": None, "status": "completed", "turn_id": turn_id}  # fmt: skip
    if kind == "reasoning":
        summary = [{"type": "summary_text", "text": s.get("text", "")} for s in item.get("summary") or ()]
        return {"id": item.get("id"), "type": "reasoning", "summary": summary, "status": status, "turn_id": turn_id}
    if kind == "shell_call":
        action = item.get("action") or {}
        return {"id": item.get("id"), "type": "command_execution", "command": "\n".join(action.get("commands") or ()),
                "cwd": WORKSPACE, "duration_ms": None, "exit_code": None, "output": None, "status": "in_progress",
                "turn_id": turn_id}  # fmt: skip
    if kind == "web_search_call":  # a session's search action has no sources; a failed call ends incomplete
        action = {k: v for k, v in (item.get("action") or {}).items() if k in ("type", "query", "queries", "url", "pattern")}
        return {"id": item.get("id"), "type": "web_search_call", "action": action or None,
                "status": "incomplete" if status == "failed" else status, "turn_id": turn_id}  # fmt: skip
    if kind == "mcp_call":
        return {"id": item.get("id"), "type": "mcp_call", "name": item.get("name"), "server_label": item.get("server_label"),
                "arguments": _arguments(item.get("arguments")), "output": item.get("output"), "error": item.get("error"),
                "status": "failed" if item.get("error") else status, "turn_id": turn_id}  # fmt: skip
    return None


def command_done(command: dict[str, Any], output: dict[str, Any]) -> dict[str, Any]:
    """A ``command_execution`` item (of a ``shell_call``) with what its ``shell_call_output``
    says: the commands' output (stdout then stderr of each, in order) and the last one's exit code."""
    runs = output.get("output") or []
    text = "".join((run.get("stdout") or "") + (run.get("stderr") or "") for run in runs)
    outcome = (runs[-1].get("outcome") or {}) if runs else {}
    exit_code = outcome.get("exit_code")
    failed = outcome.get("type") == "timeout" or (exit_code not in (None, 0))
    return {**command, "output": text, "exit_code": exit_code, "status": "failed" if failed else "completed"}


def session_items(items: list[dict[str, Any]], turn_id: str, sender: str = "") -> list[dict[str, Any]]:
    """Responses items as the session items they show (:func:`session_item`), each
    ``shell_call`` and its ``shell_call_output`` as one ``command_execution``, a subagent tool's
    call as its item (:func:`~troupe.protocol.subagents.subagent_item`, ``sender`` the agent's id)
    and its output not at all."""
    shown: list[dict[str, Any]] = []
    commands: dict[str, int] = {}
    subagent_calls: dict[str, tuple[int, dict[str, Any]]] = {}
    for item in items:
        if item.get("type") == "shell_call_output":
            at = commands.get(item.get("call_id", ""))
            if at is not None:
                shown[at] = command_done(shown[at], item)
            continue
        if item.get("type") == "function_call" and item.get("name") in SUBAGENT_TOOL_NAMES:
            subagent_calls[item["call_id"]] = (len(shown), item)
            shown.append(subagent_item(item, turn_id, sender))
            continue
        if item.get("type") == "function_call_output" and item.get("call_id") in subagent_calls:
            at, call = subagent_calls[item["call_id"]]
            shown[at] = subagent_item(call, turn_id, sender, item.get("output"))
            continue
        converted = session_item(item, turn_id)
        if converted is not None:
            if item.get("type") == "shell_call":
                commands[item.get("call_id", "")] = len(shown)
            shown.append(converted)
    return shown


def _content(part: dict[str, Any]) -> dict[str, Any] | None:
    kind = part.get("type")
    if kind in ("input_text", "output_text"):
        return {"type": kind, "text": part.get("text", "")}
    if kind == "input_image" and part.get("image_url"):
        return {"type": "input_image", "image_url": part["image_url"]}
    return None


# -- events -----------------------------------------------------------------------------


def session_event(kind: str, event_id: str, **fields: Any) -> dict[str, Any]:
    """One session event: ``{"type": kind, "event_id", ...fields}``."""
    return {"type": kind, "event_id": event_id, **fields}


class TurnEvents:
    """One response of a turn, its Responses events as session events.

    ``offset`` is how many items the turn's earlier responses showed: ``output_index`` counts the
    turn's items, the ones a session shows (:func:`session_item`), over all its responses. A
    ``function_call`` is announced (``turn.item.added``) when it is complete, with its
    arguments, since that is when a client may run it. Event ids are ``sevt_<response>_<n>_<k>``:
    the same event read twice has the same id. The response's end (completed, failed…) says
    nothing here: what it means for the turn (done, or waiting for the client's results) is the
    runtime's to tell, with the turn's events it builds.
    """

    def __init__(self, session_id: str, turn_id: str, response_id: str, *, offset: int = 0, agent_id: str = "") -> None:
        self.session_id = session_id
        self.agent_id = agent_id
        self.turn_id = turn_id
        self.response_id = response_id
        self.shown = offset
        """How many of the turn's items have been shown, with this response's so far."""
        self._index: dict[int, int] = {}  # the response's output_index -> the turn's
        self._calls: set[int] = set()  # output indexes of function calls, announced when done
        self._commands: dict[str, tuple[int, dict[str, Any]]] = {}  # shell call_id -> (index, command item)

    def index_of(self, output_index: int) -> int | None:
        """The turn's ``output_index`` of the response's item at ``output_index``, once announced."""
        return self._index.get(output_index)

    def translate(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """``event`` (a Responses stream event) as session events (often none)."""
        kind = event.get("type", "")
        n = event.get("sequence_number", 0)
        base = {"session_id": self.session_id, "turn_id": self.turn_id}

        def emit(k: int, session_kind: str, **fields: Any) -> dict[str, Any]:
            return session_event(session_kind, f"sevt_{self.response_id.removeprefix('resp_')}_{n}_{k}", **base, **fields)

        if kind == "response.output_item.added" and event["item"].get("type") == "shell_call_output":
            return []  # its command's item takes its output, when it is done
        if kind == "response.output_item.done" and event["item"].get("type") == "shell_call_output":
            found = self._commands.get(event["item"].get("call_id", ""))
            if found is None:
                return []
            at, command = found
            done = command_done(command, event["item"])
            delta = emit(0, "agent.output.command_execution_output.delta", item_id=done["id"], output_index=at,
                         delta=done["output"])  # fmt: skip
            return [delta, emit(1, "agent.session.turn.item.done", item=done, output_index=at)]
        if kind == "response.output_item.done" and event["item"].get("type") == "shell_call":
            # Announced now, with its commands (streamed, like a function's arguments); done with its output.
            index = self._index.get(event["output_index"])
            announced = session_item(event["item"], self.turn_id)
            if index is None or announced is None:
                return []
            self._commands[event["item"].get("call_id", "")] = (index, announced)
            return [emit(0, "agent.session.turn.item.added", item=announced, output_index=index)]
        if kind == "response.output_item.added":
            item = session_item(event["item"], self.turn_id)
            if item is None:
                return []
            at = self._index[event["output_index"]] = self.shown
            self.shown += 1
            if item["type"] in ("function_call", "command_execution"):  # announced when their arguments are whole
                self._calls.add(event["output_index"])
                return []
            return [emit(0, "agent.session.turn.item.added", item=item, output_index=at)]
        if kind == "response.output_item.done":
            index = self._index.get(event["output_index"])
            item = session_item(event["item"], self.turn_id)
            if index is None or item is None:
                return []
            if item["type"] == "function_call" and item["name"] in SUBAGENT_TOOL_NAMES:  # running, by the server
                called = subagent_item(event["item"], self.turn_id, self.agent_id)
                return [emit(0, "agent.session.turn.item.added", item=called, output_index=index)]
            done = emit(1, "agent.session.turn.item.done", item=item, output_index=index)
            if event["output_index"] in self._calls:
                return [emit(0, "agent.session.turn.item.added", item=item, output_index=index), done]
            return [done]
        shown_at = self._index.get(event.get("output_index", -1))
        if shown_at is None:
            return [emit(0, "error", error=_stream_error(event))] if kind == "error" else []
        where = {"item_id": event.get("item_id"), "output_index": shown_at}
        if kind in ("response.content_part.added", "response.content_part.done"):
            part = event.get("part") or {}
            if part.get("type") != "output_text":
                return []
            suffix = kind.rsplit(".", 1)[1]
            return [emit(0, f"agent.session.turn.content_part.{suffix}", content_index=event["content_index"],
                         part={"type": "output_text", "text": part.get("text", "")}, **where)]  # fmt: skip
        if kind == "response.output_text.delta":
            return [emit(0, "agent.session.turn.output_text.delta", content_index=event["content_index"],
                         delta=event["delta"], **where)]  # fmt: skip
        if kind == "response.output_text.done":
            return [emit(0, "agent.session.turn.output_text.done", content_index=event["content_index"],
                         text=event["text"], **where)]  # fmt: skip
        if kind.startswith("response.reasoning_summary_"):
            suffix = kind.removeprefix("response.reasoning_summary_")  # part.added, text.delta…
            fields = {key: event[key] for key in ("summary_index", "delta", "text", "part") if key in event}
            return [emit(0, f"agent.session.turn.reasoning_summary_{suffix}", **where, **fields)]
        return []


def _stream_error(event: dict[str, Any]) -> dict[str, Any]:
    return {"type": "server_error", "code": event.get("code"), "message": event.get("message") or "error",
            "param": event.get("param")}  # fmt: skip


def describe_result(result: dict[str, Any]) -> Any:
    """What the model reads of a client's function result: its output, or ``Error: …``."""
    if result["success"]:
        return result["output"] if result["output"] is not None else ""
    return f"Error: {result['error'] or 'the function failed'}"
