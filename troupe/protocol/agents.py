"""The Agents API's agents (OpenAI's Agents API, beta), pure: the create and update bodies, the
``agent`` object with OpenAI's resolved defaults, its deleted marker and errors.

An agent (``agent_…``; OpenAI's own prefix is not documented, so the word is ours) is a saved,
reusable definition that sessions use: a model, instructions, tools, text and reasoning
settings. It is not versioned (the SDK's ``Agent`` has no version field): an update changes it
in place and moves its ``updated_at``.

``POST /v1/agents`` takes (:func:`parse_agent_create`; the SDK's ``AgentCreateParams``)::

    {"model": str,                                            required; a model this server serves
     "instructions": str | null, "name": str | null,          name: at most 128 characters
     "metadata": {str: str} | null,                           16 pairs; keys 64, values 512 characters
     "tools": [function | mcp, ...] | null,                   within 3 MiB of compact JSON
     "text": {"format": {"type": "text"} | {"type": "json_schema", "schema": {...}},
              "verbosity": "low" | "medium" | "high"} | null,
     "reasoning": {"effort": ..., "summary": ...} | null,
     "service_tier": "auto" | "default" | null,               OpenAI's processing tiers are refused
     "multi_agent": {"enabled": bool, "max_concurrent_subagents": 1..64} | null,  (enabled: 6 by default)
     "compaction": {"async": false | null} | null,
     "experimental": {"time_awareness": false}}

``POST /v1/agents/{agent_id}`` takes the same fields, every one optional
(:func:`parse_agent_update`): a field given replaces the agent's (null resets it to its
default), except ``experimental``, whose settings are merged by key (:func:`apply_agent_update`).

What Troupe cannot provide is refused, naming it, never stored and ignored: a value is
``unsupported_value`` (a tool type, ``service_tier: "flex"``,
``compaction.async: true``, ``experimental.time_awareness: true``, a function's
``defer_loading`` or ``async``, an MCP server's ``stdio`` transport or ``environment`` origin),
a field that has nothing to do here is ``unsupported_parameter`` (an MCP server's
``request_metadata``). An MCP server's ``credential_id`` names a vault credential
(:mod:`troupe.protocol.vaults`), which a session's vaults must hold. Whether the model is
served and an MCP server may be reached depend on the deployment: :mod:`troupe.runtime.agents`
checks them.

Example::

    >>> definition = parse_agent_create({"model": "sim", "instructions": "Be brief."})
    >>> definition["service_tier"], definition["text"], definition["multi_agent"]
    ('auto', {'format': {'type': 'text'}, 'verbosity': 'medium'}, {'enabled': False, 'max_concurrent_subagents': None})
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from .errors import InvalidRequest, NotFound, object_body, show_value, wrong_type
from .ids import AGENT, new_id
from .request import check_metadata
from .schema_refs import dangling_refs
from .vaults import CREDENTIAL

__all__ = [
    "AGENT_FIELDS",
    "AGENT_TOOL_TYPES",
    "DEFAULT_MAX_SUBAGENTS",
    "MAX_SUBAGENTS",
    "MAX_AGENT_NAME",
    "MAX_AGENT_TEXT",
    "MAX_TOOLS_BYTES",
    "REASONING_EFFORTS",
    "REASONING_SUMMARIES",
    "SERVED_SERVICE_TIERS",
    "SERVED_TOOL_TYPES",
    "SERVICE_TIERS",
    "VERBOSITIES",
    "agent_deleted",
    "agent_not_found",
    "agent_object",
    "apply_agent_update",
    "merge_agent_fields",
    "new_agent_id",
    "parse_agent_create",
    "parse_agent_update",
]

AGENT_FIELDS = (
    "model", "instructions", "name", "metadata", "tools", "text", "reasoning", "service_tier", "multi_agent",
    "compaction", "experimental",
)  # fmt: skip
"""The fields of an agent's definition: what a create or an update body may hold."""
MAX_AGENT_NAME = 128
MAX_AGENT_TEXT = 1_048_576
"""The longest ``model`` and ``instructions`` (OpenAI's ``maxLength``)."""
MAX_TOOLS_BYTES = 3 * 1024 * 1024
"""The most bytes of compact UTF-8 JSON the tool list may take (OpenAI's limit)."""
DEFAULT_MAX_SUBAGENTS = 6
"""Subagents running at once when ``multi_agent.max_concurrent_subagents`` is not given."""
MAX_SUBAGENTS = 64
"""The most ``max_concurrent_subagents`` may be here (each running subagent is a turn on a host)."""
SERVICE_TIERS = ("auto", "default", "flex", "priority", "fast", "ultrafast")
SERVED_SERVICE_TIERS = ("auto", "default")
"""The tiers that mean something here: whatever the model server does. The others are OpenAI's
processing tiers, which no model server behind Troupe offers."""
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
REASONING_SUMMARIES = ("concise", "detailed", "auto")
VERBOSITIES = ("low", "medium", "high")
AGENT_TOOL_TYPES = ("function", "tool_search", "programmatic_tool_calling", "mcp", "web_search", "computer_use",
                    "automations")  # fmt: skip
"""The tool types of the SDK's ``PersistedAgentToolParam``."""
SERVED_TOOL_TYPES = ("function", "mcp", "web_search")
"""The tool types Troupe provides an agent today."""

_UNSERVED_TOOLS = {
    "tool_search": "deferred tools and tool search are not available on this server",
    "programmatic_tool_calling": "tools cannot be called from model-generated code on this server",
    "computer_use": "computer use needs an OpenAI-hosted browser, which this server does not have",
    "automations": "an agent cannot schedule its own wakeups on this server (automations are made with "
                   "/v1/agents/automations)",
}
_FUNCTION_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}\Z")
_FUNCTION_KEYS = ("type", "name", "description", "parameters", "defer_loading", "async")
_WEB_SEARCH_KEYS = ("type", "allowed_domains", "context_size", "location", "mode")
_LOCATION_KEYS = ("city", "country", "region", "timezone")
_CONTEXT_SIZES = ("low", "medium", "high")
_MCP_KEYS = ("type", "server_label", "transport", "allowed_tools", "connection_origin", "credential_id",
             "request_metadata", "required")  # fmt: skip


def new_agent_id() -> str:
    return new_id(AGENT)


# -- bodies ------------------------------------------------------------------------------


def parse_agent_create(body: Any) -> dict[str, Any]:
    """``POST /v1/agents``'s body, checked: the agent's definition, every field resolved to its
    value or OpenAI's default (the agent object without ``id``, ``object`` and the times).

    Raises:
        InvalidRequest: naming the field (``model``, ``tools[2].type``, ``text.format.schema``,
            ``metadata.<key>``…); ``unsupported_value``/``unsupported_parameter`` for what this
            server cannot provide (module docstring).
    """
    body = object_body(body, "", AGENT_FIELDS)
    if "model" not in body:
        raise InvalidRequest("Missing required parameter: 'model'.", param="model", code="missing_required_parameter")
    return {name: _FIELDS[name](body.get(name)) for name in AGENT_FIELDS}


def parse_agent_update(body: Any) -> dict[str, Any]:
    """``POST /v1/agents/{agent_id}``'s body, checked: the changes, by field, each resolved as on
    create (null: the default), but ``experimental``: only the settings given (merged by key).

    Raises:
        InvalidRequest: as :func:`parse_agent_create`; ``model`` may not be null.
    """
    body = object_body(body, "", AGENT_FIELDS)
    changes: dict[str, Any] = {}
    for name, value in body.items():
        if name == "experimental":
            changes[name] = _experimental(value, partial=True)
        else:
            changes[name] = _FIELDS[name](value)
    return changes


def apply_agent_update(agent: dict[str, Any], changes: dict[str, Any], updated_at: float) -> dict[str, Any]:
    """``agent`` (an agent object) with ``changes`` (:func:`parse_agent_update`) made, and
    ``updated_at``; a new object, ``agent`` is not changed."""
    return {**merge_agent_fields(agent, changes), "updated_at": int(updated_at)}


def merge_agent_fields(agent: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``agent`` (an agent, or a session's) with ``changes``' fields over it: each replaces the
    agent's, but ``experimental``, merged by key. A new object; neither argument is changed."""
    updated = copy.deepcopy(agent)
    for name, value in copy.deepcopy(changes).items():
        if name == "experimental":
            updated[name] = {**(updated.get(name) or {}), **value}
        else:
            updated[name] = value
    return updated


# -- fields ------------------------------------------------------------------------------


def _model(value: Any) -> str:
    if not isinstance(value, str):
        raise wrong_type("model", "a string", value)
    return _within(value, "model", MAX_AGENT_TEXT)


def _instructions(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise wrong_type("instructions", "a string", value)
    return _within(value, "instructions", MAX_AGENT_TEXT)


def _name(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise wrong_type("name", "a string", value)
    return _within(value, "name", MAX_AGENT_NAME)


def _metadata(value: Any) -> dict[str, str]:
    return dict(check_metadata(value) or {})


def _service_tier(value: Any) -> str:
    if value is None:
        return "auto"
    if value in SERVED_SERVICE_TIERS:
        return str(value)
    if value in SERVICE_TIERS:
        raise InvalidRequest(f"Unsupported value: 'service_tier' {show_value(value)} is one of OpenAI's processing "
                             "tiers, which the model servers behind this server do not offer. Use 'auto' or "
                             "'default'.", param="service_tier", code="unsupported_value")  # fmt: skip
    raise _one_of("service_tier", value, SERVICE_TIERS)


def _reasoning(value: Any) -> dict[str, Any]:
    if value is None:
        return {"effort": None, "summary": None}
    value = object_body(value, "reasoning", ("effort", "summary"))
    effort, summary = value.get("effort"), value.get("summary")
    if effort is not None and effort not in REASONING_EFFORTS:
        raise _one_of("reasoning.effort", effort, REASONING_EFFORTS)
    if summary is not None and summary not in REASONING_SUMMARIES:
        raise _one_of("reasoning.summary", summary, REASONING_SUMMARIES)
    return {"effort": effort, "summary": summary}


def _text(value: Any) -> dict[str, Any]:
    if value is None:
        value = {}
    value = object_body(value, "text", ("format", "verbosity"))
    verbosity = value.get("verbosity")
    if verbosity is not None and verbosity not in VERBOSITIES:
        raise _one_of("text.verbosity", verbosity, VERBOSITIES)
    return {"format": _text_format(value.get("format")), "verbosity": verbosity or "medium"}


def _text_format(value: Any) -> dict[str, Any]:
    if value is None:
        return {"type": "text"}
    if not isinstance(value, dict):
        raise wrong_type("text.format", "an object", value)
    kind = value.get("type")
    if kind == "text":
        object_body(value, "text.format", ("type",))
        return {"type": "text"}
    if kind != "json_schema":
        if kind is None:
            raise _missing("text.format.type")
        raise _one_of("text.format.type", kind, ("text", "json_schema"))
    object_body(value, "text.format", ("type", "schema"))
    if "schema" not in value:
        raise _missing("text.format.schema")
    schema = value["schema"]
    if not isinstance(schema, dict):
        raise wrong_type("text.format.schema", "a JSON Schema object", schema)
    _check_refs(schema, "text.format.schema")
    return {"type": "json_schema", "schema": schema}


def _multi_agent(value: Any) -> dict[str, Any]:
    if value is None:
        return {"enabled": False, "max_concurrent_subagents": None}
    value = object_body(value, "multi_agent", ("enabled", "max_concurrent_subagents"))
    if "enabled" not in value:
        raise _missing("multi_agent.enabled")
    enabled = value["enabled"]
    if not isinstance(enabled, bool):
        raise wrong_type("multi_agent.enabled", "a boolean", enabled)
    most = value.get("max_concurrent_subagents")
    if most is not None and (isinstance(most, bool) or not isinstance(most, int)):
        raise wrong_type("multi_agent.max_concurrent_subagents", "an integer", most)
    if most is not None and most < 1:
        raise InvalidRequest(f"Invalid 'multi_agent.max_concurrent_subagents': {most}. Expected at least 1.",
                             param="multi_agent.max_concurrent_subagents", code="invalid_value")  # fmt: skip
    if most is not None and most > MAX_SUBAGENTS:
        raise InvalidRequest(f"Invalid 'multi_agent.max_concurrent_subagents': {most}. Expected at most "
                             f"{MAX_SUBAGENTS} on this server.", param="multi_agent.max_concurrent_subagents",
                             code="invalid_value")  # fmt: skip
    if enabled:
        return {"enabled": True, "max_concurrent_subagents": most or DEFAULT_MAX_SUBAGENTS}
    return {"enabled": False, "max_concurrent_subagents": None}  # OpenAI's: null when disabled


def _compaction(value: Any) -> dict[str, Any]:
    if value is None:
        return {"async": False}
    value = object_body(value, "compaction", ("async",))
    background = value.get("async")
    if background is not None and not isinstance(background, bool):
        raise wrong_type("compaction.async", "a boolean", background)
    if background:
        raise InvalidRequest("Unsupported value: 'compaction.async' true. This server compacts context only in the "
                             "turn (blocking), not in the background.", param="compaction.async",
                             code="unsupported_value")  # fmt: skip
    return {"async": False}


def _experimental(value: Any, *, partial: bool = False) -> dict[str, Any]:
    if value is None:
        return {} if partial else {"time_awareness": False}
    value = object_body(value, "experimental", ("time_awareness",))
    if "time_awareness" not in value:
        return {} if partial else {"time_awareness": False}
    aware = value["time_awareness"]
    if not isinstance(aware, bool):
        raise wrong_type("experimental.time_awareness", "a boolean", aware)
    if aware:
        raise InvalidRequest("Unsupported value: 'experimental.time_awareness' true. This server does not give the "
                             "model current-time reminders.", param="experimental.time_awareness",
                             code="unsupported_value")  # fmt: skip
    return {"time_awareness": False}


def _tools(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise wrong_type("tools", "an array of tools", value)
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    if size > MAX_TOOLS_BYTES:
        raise InvalidRequest(f"Invalid 'tools': the tool list takes {size} bytes of compact JSON; at most "
                             f"{MAX_TOOLS_BYTES} are allowed.", param="tools", code="invalid_value")  # fmt: skip
    tools: list[dict[str, Any]] = []
    seen: dict[tuple[str, str], int] = {}
    for i, tool in enumerate(value):
        at = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise wrong_type(at, "an object", tool)
        kind = tool.get("type")
        if kind is None:
            raise _missing(f"{at}.type")
        if kind == "function":
            parsed, key = _function_tool(tool, at), ("function", tool["name"])
        elif kind == "mcp":
            parsed, key = _mcp_tool(tool, at), ("mcp", tool["server_label"])
        elif kind == "web_search":
            parsed, key = _web_search_tool(tool, at), ("web_search", "")
        elif kind in _UNSERVED_TOOLS:
            raise InvalidRequest(f"Unsupported value: '{at}.type' {show_value(kind)}: {_UNSERVED_TOOLS[kind]}.",
                                 param=f"{at}.type", code="unsupported_value")  # fmt: skip
        else:
            hint = (" An agent runs code and reads files in its session's environment, not with this tool."
                    if kind in ("code_interpreter", "file_search", "shell", "local_shell") else "")  # fmt: skip
            raise InvalidRequest(f"Invalid value for '{at}.type': {show_value(kind)} is not a tool type of the Agents "
                                 f"API (expected one of {', '.join(repr(t) for t in AGENT_TOOL_TYPES)}).{hint}",
                                 param=f"{at}.type", code="invalid_value")  # fmt: skip
        if key in seen:
            field = {"function": "name", "mcp": "server_label"}.get(kind, "type")
            named = f" {show_value(key[1])}" if key[1] else ""
            raise InvalidRequest(f"Invalid value for '{at}.{field}': duplicate {kind} tool{named} (also "
                                 f"tools[{seen[key]}]).", param=f"{at}.{field}", code="invalid_value")  # fmt: skip
        seen[key] = i
        tools.append(parsed)
    return tools


def _function_tool(tool: dict[str, Any], at: str) -> dict[str, Any]:
    object_body(tool, at, _FUNCTION_KEYS)
    for key in ("name", "description", "parameters"):
        if key not in tool:
            raise _missing(f"{at}.{key}")
    name, description, parameters = tool["name"], tool["description"], tool["parameters"]
    if not isinstance(name, str):
        raise wrong_type(f"{at}.name", "a string", name)
    if not _FUNCTION_NAME.match(name):
        raise InvalidRequest(f"Invalid value for '{at}.name': {show_value(name)} must match ^[a-zA-Z0-9_-]{{1,64}}$.",
                             param=f"{at}.name", code="invalid_value")  # fmt: skip
    if not isinstance(description, str):
        raise wrong_type(f"{at}.description", "a string", description)
    if not isinstance(parameters, dict):
        raise wrong_type(f"{at}.parameters", "a JSON Schema object", parameters)
    _check_refs(parameters, f"{at}.parameters")
    for flag, why in (("defer_loading", "deferred tools and tool search are not available on this server"),
                      ("async", "the agent waits for every function's result on this server")):  # fmt: skip
        given = tool.get(flag)
        if given is not None and not isinstance(given, bool):
            raise wrong_type(f"{at}.{flag}", "a boolean", given)
        if given:
            raise InvalidRequest(f"Unsupported value: '{at}.{flag}' true: {why}.", param=f"{at}.{flag}",
                                 code="unsupported_value")  # fmt: skip
    return {"type": "function", "name": name, "description": description, "parameters": parameters,
            "defer_loading": False, "async": tool.get("async")}  # fmt: skip


def _web_search_tool(tool: dict[str, Any], at: str) -> dict[str, Any]:
    """A ``web_search`` tool as stored (the SDK's ``PersistedAgentToolResourceWebSearch``): its
    defaults filled in. Whether the domains are domain names, and whether the tenant has a search
    provider, the runtime checks (:mod:`troupe.runtime.agents`)."""
    object_body(tool, at, _WEB_SEARCH_KEYS)
    domains = tool.get("allowed_domains")
    if domains is not None and (not isinstance(domains, list) or not all(isinstance(d, str) and d for d in domains)):
        raise wrong_type(f"{at}.allowed_domains", "an array of domain names", domains)
    size = tool.get("context_size") or "medium"
    if size not in _CONTEXT_SIZES:
        raise InvalidRequest(f"Invalid value for '{at}.context_size': {show_value(size)}. Expected 'low', 'medium' or "
                             "'high'.", param=f"{at}.context_size", code="invalid_value")  # fmt: skip
    location = tool.get("location")
    if location is not None:
        object_body(location, f"{at}.location", _LOCATION_KEYS)
        for key, value in location.items():
            if value is not None and not isinstance(value, str):
                raise wrong_type(f"{at}.location.{key}", "a string", value)
        location = {key: location.get(key) for key in _LOCATION_KEYS}
    mode = tool.get("mode") or "live"
    if mode == "cached":
        raise InvalidRequest(f"Unsupported value: '{at}.mode' 'cached': there is no cache of search results on this "
                             "server; its searches always go to its search provider ('live').", param=f"{at}.mode",
                             code="unsupported_value")  # fmt: skip
    if mode not in ("disabled", "live"):
        raise InvalidRequest(f"Invalid value for '{at}.mode': {show_value(mode)}. Expected 'live', 'cached' or "
                             "'disabled'.", param=f"{at}.mode", code="invalid_value")  # fmt: skip
    return {"type": "web_search", "allowed_domains": domains, "context_size": size, "location": location, "mode": mode}


def _mcp_tool(tool: dict[str, Any], at: str) -> dict[str, Any]:
    object_body(tool, at, _MCP_KEYS)
    for key in ("server_label", "transport"):
        if key not in tool:
            raise _missing(f"{at}.{key}")
    label = tool["server_label"]
    if not isinstance(label, str) or not label:
        raise wrong_type(f"{at}.server_label", "a non-empty string", label)
    allowed = tool.get("allowed_tools")
    if allowed is not None and (not isinstance(allowed, list) or not all(isinstance(n, str) for n in allowed)):
        raise wrong_type(f"{at}.allowed_tools", "an array of tool names", allowed)
    origin = tool.get("connection_origin")
    if origin == "environment":
        raise InvalidRequest(f"Unsupported value: '{at}.connection_origin' 'environment': connections to MCP servers "
                             "are made by this server ('service').", param=f"{at}.connection_origin",
                             code="unsupported_value")  # fmt: skip
    if origin not in (None, "service"):
        raise _one_of(f"{at}.connection_origin", origin, ("service", "environment"))
    credential_id = tool.get("credential_id")
    if credential_id is not None and not (isinstance(credential_id, str) and credential_id.startswith(f"{CREDENTIAL}_")):
        # A session's vaults hold it (troupe.runtime.vaults): checked there, when a session uses the agent.
        raise InvalidRequest(f"Invalid '{at}.credential_id': {show_value(credential_id)}. Expected an ID that begins "
                             f"with '{CREDENTIAL}_'.", param=f"{at}.credential_id", code="invalid_value")  # fmt: skip
    metadata = tool.get("request_metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise wrong_type(f"{at}.request_metadata", "an object", metadata)
    if metadata:
        raise InvalidRequest(f"Unsupported parameter: '{at}.request_metadata'. This server's MCP client sends no "
                             "request metadata.", param=f"{at}.request_metadata", code="unsupported_parameter")  # fmt: skip
    required = tool.get("required", False)
    if not isinstance(required, bool):
        raise wrong_type(f"{at}.required", "a boolean", required)
    return {
        "type": "mcp", "server_label": label, "transport": _transport(tool["transport"], f"{at}.transport"),
        "allowed_tools": allowed, "connection_origin": "service", "credential_id": credential_id, "request_metadata": {},
        "required": required,
    }  # fmt: skip


def _transport(value: Any, at: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise wrong_type(at, "an object", value)
    kind = value.get("type")
    if kind == "stdio":
        raise InvalidRequest(f"Unsupported value: '{at}.type' 'stdio': this server starts no MCP server a request "
                             "names (it reaches MCP servers over HTTP).", param=f"{at}.type",
                             code="unsupported_value")  # fmt: skip
    if kind != "http":
        if kind is None:
            raise _missing(f"{at}.type")
        raise _one_of(f"{at}.type", kind, ("http", "stdio"))
    object_body(value, at, ("type", "server_url", "headers"))
    if "server_url" not in value:
        raise _missing(f"{at}.server_url")
    url = value["server_url"]
    if not isinstance(url, str) or not url:
        raise wrong_type(f"{at}.server_url", "a URL", url)
    if value.get("headers"):
        # An MCP tool's headers are credentials (protocol.MCP_SECRET_KEYS: a response's are used and
        # never echoed or written), and an agent is stored and shown whole: it may hold none.
        raise InvalidRequest(f"Unsupported parameter: '{at}.headers'. MCP headers are credentials, and an agent "
                             "is a stored definition that holds none (vaults, which would hold them, are not "
                             "available on this server).", param=f"{at}.headers", code="unsupported_parameter")  # fmt: skip
    return {"type": "http", "server_url": url, "headers": {}}


_FIELDS = {
    "model": _model, "instructions": _instructions, "name": _name, "metadata": _metadata, "tools": _tools,
    "text": _text, "reasoning": _reasoning, "service_tier": _service_tier, "multi_agent": _multi_agent,
    "compaction": _compaction, "experimental": _experimental,
}  # fmt: skip


# -- helpers -------------------------------------------------------------------------------


def _missing(param: str) -> InvalidRequest:
    return InvalidRequest(f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")


def _one_of(param: str, value: Any, allowed: tuple[str, ...]) -> InvalidRequest:
    return InvalidRequest(f"Invalid value for '{param}': {show_value(value)}. Expected one of "
                          f"{', '.join(repr(a) for a in allowed)}.", param=param, code="invalid_value")  # fmt: skip


def _within(value: str, param: str, most: int) -> str:
    if len(value) > most:
        raise InvalidRequest(f"Invalid '{param}': string too long. Expected at most {most} characters, got "
                             f"{len(value)}.", param=param, code="string_above_max_length")  # fmt: skip
    return value


def _check_refs(schema: dict[str, Any], param: str) -> None:
    if bad := dangling_refs(schema):
        raise InvalidRequest(f"Invalid schema for '{param}': $ref {show_value(bad[0])} does not resolve to a "
                             "definition in the schema.", param=param, code="invalid_value")  # fmt: skip


# -- objects and errors --------------------------------------------------------------------


def agent_object(agent_id: str, definition: dict[str, Any], *, created_at: float, updated_at: float) -> dict[str, Any]:
    """The wire object (the SDK's ``Agent``): ``{"id", "object": "agent", "created_at",
    "updated_at"}`` and the definition's fields (:func:`parse_agent_create`)."""
    fields = {name: copy.deepcopy(definition[name]) for name in AGENT_FIELDS}
    return {"id": agent_id, "object": "agent", "created_at": int(created_at), "updated_at": int(updated_at), **fields}


def agent_deleted(agent_id: str) -> dict[str, Any]:
    return {"id": agent_id, "object": "agent.deleted", "deleted": True}


def agent_not_found(agent_id: str) -> NotFound:
    return NotFound(f"Agent with id '{agent_id}' not found.", param="agent_id")

