"""Server configuration: one TOML file plus ``TROUPE_*`` environment overrides.

:func:`load_config` returns the two halves Troupe needs: :class:`ServerSettings`
(where and how the HTTP layer listens, who may call it) and
:class:`~troupe.actors.settings.RuntimeSettings` (models, tools, placement,
storage). With no file and no environment it returns the embedded defaults: the
``sim`` model, the example tools, ``127.0.0.1:8000``, no API keys.

Precedence, lowest first: embedded defaults → the TOML file → the environment →
(in ``troupe serve``) command-line flags. Every option is documented in
``docs/troupe.example.toml``.

Sections::

    [server]    host, port, ray_address, num_replicas, max_ongoing_requests, ingress, dashboard
    [auth]      keys = {"sk-..." = "tenant-a"}   (or a list of bare keys)
    [limits]    max_body_bytes, max_json_depth, max_active_responses, max_waiting_responses,
                max_wait_s, tenant_requests_per_minute, tenant_max_streams, stream_stall_timeout_s,
                stream_keepalive_s
    [runtime]   placement, pool_size, storage_path, … , example_tools, sim_model
    [[models]]  name, kind, base_url, upstream_model, api_key_env, ttft_ms, itl_ms
    [mcp]       allowed_urls, timeout_s, list_ttl_s; [[mcp.servers]] label, url | command, headers, …
    [[tools]]   name, target, description, parameters, num_cpus

Environment: ``TROUPE_CONFIG`` (the file, when no path is given), ``TROUPE_HOST``,
``TROUPE_PORT``, ``TROUPE_RAY_ADDRESS``, ``TROUPE_INGRESS``, ``TROUPE_STORAGE_PATH``,
``TROUPE_STORAGE_MEMORY_LIMIT``, ``TROUPE_PLACEMENT``, ``TROUPE_POOL_SIZE``, ``TROUPE_MCP_ALLOWED_URLS``, ``TROUPE_API_KEYS`` (comma-separated
``key=tenant`` pairs or bare keys). An empty variable counts as unset.

Example::

    server, runtime = load_config("troupe.toml", env={"TROUPE_PORT": "9000"})
    server.port, [m.name for m in runtime.models]   # (9000, ['sim', 'llama'])
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from troupe.actors.settings import DEFAULT_TOOLS, McpServerSpec, ModelSpec, RuntimeSettings, ToolSpec

__all__ = ["ServerSettings", "ConfigError", "load_config", "parse_api_keys", "tenant_of_key"]


class ConfigError(ValueError):
    """The configuration file or an environment variable is invalid; the message says where."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    """How the HTTP layer listens and authenticates (picklable: it travels to Serve replicas)."""

    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: Mapping[str, str] = field(default_factory=dict)
    """API key → tenant name. Empty: authentication is off and every caller is tenant ``""``."""
    ray_address: str | None = None
    """An existing Ray cluster (``ray://…`` or ``host:port``); None starts a local Ray instance."""
    num_replicas: int = 1
    """Serve replicas of the HTTP ingress."""
    max_ongoing_requests: int = 1000
    """Concurrent requests per replica. Streams are long-lived and I/O-bound, so this is far
    above Serve's default of 5, which would queue the sixth concurrent stream."""
    ingress: Literal["direct", "proxy"] = "direct"
    """How HTTP reaches the ingress replicas. ``"direct"``: each replica serves HTTP on its own
    port, ``port`` for the first, ``port + 1`` for the next, with no Serve proxy in the path
    (Serve's direct ingress). ``"proxy"``: Serve's HTTP proxy listens on ``port`` and forwards
    every request to a replica over Ray, one more hop per streamed batch. A cluster Troupe joins
    (``ray_address``) decides for itself, through its own environment (README "Running on a
    Ray cluster")."""
    dashboard: bool = False
    """Start Ray's dashboard with a local Ray instance (it costs about 0.2 cores at rest)."""

    # [limits]: what one request may be, and how much load a replica admits (README "Limits").
    max_body_bytes: int = 16 * 1024 * 1024
    """The largest request body; a larger one answers 413 ``request_too_large``."""
    max_json_depth: int = 64
    """The deepest nesting of objects and arrays in a body; deeper answers 400 ``nesting_too_deep``."""
    max_active_responses: int = 64
    """Writes (``POST /v1/…``: responses, streams included; conversations) running at once in one
    ingress replica. The default is what a 2-core machine serves before latency collapses
    (README "Limits"); raise it with the cores."""
    max_waiting_responses: int = 256
    """Requests that may wait for a running slot; beyond this, 429 at once."""
    max_wait_s: float = 2.0
    """The longest a request waits for a running slot before it answers 429."""
    tenant_requests_per_minute: int = 0
    """Responses one tenant may create per minute, per replica; 0: no limit."""
    tenant_max_streams: int = 0
    """Streams one tenant may hold open at once, per replica; 0: no limit."""
    stream_stall_timeout_s: float = 60.0
    """A client that reads nothing of its stream for this long is dropped (its turn is cancelled)."""
    stream_keepalive_s: float = 15.0
    """A stream that has sent nothing for this long sends an SSE comment (``: keepalive``), so
    that proxies do not close it while a tool or the model takes its time; 0: never."""


# -- the TOML schema -------------------------------------------------------------

_SERVER_KEYS = ("host", "port", "ray_address", "num_replicas", "max_ongoing_requests", "ingress", "dashboard")
_LIMIT_KEYS = (
    "max_body_bytes", "max_json_depth", "max_active_responses", "max_waiting_responses", "max_wait_s",
    "tenant_requests_per_minute", "tenant_max_streams", "stream_stall_timeout_s", "stream_keepalive_s",
)
# [runtime] options that are RuntimeSettings fields as-is (models/tools have their own tables).
_MCP_FIELDS = {"allowed_urls": "mcp_allowed_urls", "timeout_s": "mcp_timeout_s", "list_ttl_s": "mcp_list_ttl_s"}
_RUNTIME_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(RuntimeSettings)
    if f.name not in ("models", "tools", "mcp_servers", *_MCP_FIELDS.values())
)
_RUNTIME_EXTRA = ("example_tools", "sim_model")
_SECTIONS = ("server", "auth", "limits", "runtime", "models", "tools", "mcp")
_POSITIVE = {
    "port", "num_replicas", "max_ongoing_requests", "pool_size", "idle_timeout_s", "cache_size",
    "tool_timeout_s", "max_body_bytes", "max_json_depth", "max_active_responses", "max_wait_s",
    "stream_stall_timeout_s",
}
_NON_NEGATIVE = {
    "tool_num_cpus", "num_cpus", "ttft_ms", "itl_ms", "max_waiting_responses", "tenant_requests_per_minute",
    "tenant_max_streams", "stream_keepalive_s",
}
_MEMORY_SIZE = re.compile(r"\d+(\.\d+)?\s*(B|[KMGT]i?B)\Z", re.IGNORECASE)
_TARGET = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*\Z")


def tenant_of_key(key: str) -> str:
    """The tenant name of a bare API key: a stable, non-secret id derived from it.

    The key itself is never used as the name, since tenant names are stored with
    every response and show up in analytics.

    Example::

        tenant_of_key("sk-test")   # 'key-' + 12 hex digits, the same on every run
    """
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:12]


def parse_api_keys(text: str, *, where: str = "TROUPE_API_KEYS") -> dict[str, str]:
    """Parse ``key=tenant,key2,…`` (a bare key's tenant is :func:`tenant_of_key`).

    Example::

        parse_api_keys("sk-a=alice, sk-b=bob")   # {'sk-a': 'alice', 'sk-b': 'bob'}
    """
    keys: dict[str, str] = {}
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            continue
        key, sep, tenant = (part.strip() for part in entry.partition("="))
        if not key or (sep and not tenant):
            raise ConfigError(f"{where}: malformed entry {entry!r}; expected 'key=tenant' or a bare key")
        keys[key] = tenant if sep else tenant_of_key(key)
    return keys


def load_config(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] = os.environ
) -> tuple[ServerSettings, RuntimeSettings]:
    """Read the TOML file (if any) and apply the environment overrides.

    Args:
        path: the TOML file; None uses ``TROUPE_CONFIG`` from ``env``, or no file.
        env: the environment to read ``TROUPE_*`` overrides from.

    Returns:
        ``(ServerSettings, RuntimeSettings)``.

    Raises:
        ConfigError: unreadable file, TOML syntax error, unknown key (named), a value of
            the wrong type or out of range, a bad environment variable.

    Example::

        server, runtime = load_config(None, env={})   # the embedded defaults
    """
    env = {k: v for k, v in env.items() if k.startswith("TROUPE_") and v.strip()}
    path = path if path is not None else env.get("TROUPE_CONFIG")
    doc: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        source = os.fspath(path)
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except OSError as exc:
            raise ConfigError(f"{source}: cannot read the configuration file: {exc.strerror or exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: invalid TOML: {exc}") from exc
    _check_keys(doc, _SECTIONS, source, "")
    server = _server_settings(doc, source)
    runtime = _runtime_settings(doc, source)
    server, runtime = _apply_env(server, runtime, env)
    if runtime.placement == "replica" and server.num_replicas > 1:
        chosen = "placement" in _table(doc, "runtime", source) or "TROUPE_PLACEMENT" in env
        if chosen:
            raise ConfigError(
                f"{source}: runtime.placement = \"replica\" hosts conversations inside the one ingress "
                f"replica; server.num_replicas = {server.num_replicas} would give each replica its own copy "
                "of a conversation (use \"pooled\")"
            )
        # The default placement, with several ingress replicas: they share pooled hosts.
        runtime = dataclasses.replace(runtime, placement="pooled")
    return server, runtime


# -- sections ----------------------------------------------------------------------


def _server_settings(doc: dict[str, Any], source: str) -> ServerSettings:
    section = _table(doc, "server", source)
    _check_keys(section, _SERVER_KEYS, source, "server.")
    values = {k: _typed(v, ServerSettings, k, f"{source}: server.{k}") for k, v in section.items()}
    limits = _table(doc, "limits", source)
    _check_keys(limits, _LIMIT_KEYS, source, "limits.")
    values.update({k: _typed(v, ServerSettings, k, f"{source}: limits.{k}") for k, v in limits.items()})
    auth = _table(doc, "auth", source)
    _check_keys(auth, ("keys",), source, "auth.")
    if "keys" in auth:
        values["api_keys"] = _auth_keys(auth["keys"], f"{source}: auth.keys")
    return ServerSettings(**values)


def _auth_keys(value: Any, where: str) -> dict[str, str]:
    if isinstance(value, list):
        if not all(isinstance(k, str) and k for k in value):
            raise ConfigError(f"{where}: expected a list of non-empty strings")
        return {k: tenant_of_key(k) for k in value}
    if isinstance(value, dict):
        for tenant in value.values():
            if not isinstance(tenant, str) or not tenant:
                raise ConfigError(f"{where}: the tenant of each key must be a non-empty string")
        return dict(value)
    raise ConfigError(f"{where}: expected a table {{key = tenant}} or a list of keys, got {_kind(value)}")


def _runtime_settings(doc: dict[str, Any], source: str) -> RuntimeSettings:
    section = _table(doc, "runtime", source)
    _check_keys(section, _RUNTIME_FIELDS + _RUNTIME_EXTRA, source, "runtime.")
    values = {
        k: _typed(v, RuntimeSettings, k, f"{source}: runtime.{k}") for k, v in section.items() if k not in _RUNTIME_EXTRA
    }
    example_tools = _check_bool(section.get("example_tools", True), f"{source}: runtime.example_tools")
    sim_model = _check_bool(section.get("sim_model", True), f"{source}: runtime.sim_model")
    defaults = RuntimeSettings()

    models = [_spec(ModelSpec, entry, source, f"models[{i}]") for i, entry in enumerate(_array(doc, "models", source))]
    for i, model in enumerate(models):
        if model.kind == "openai" and not model.base_url:
            raise ConfigError(f"{source}: models[{i}].base_url is required for kind 'openai'")
    tools = [_spec(ToolSpec, entry, source, f"tools[{i}]") for i, entry in enumerate(_array(doc, "tools", source))]
    for i, tool in enumerate(tools):
        if not _TARGET.match(tool.target):
            raise ConfigError(f"{source}: tools[{i}].target must look like 'package.module:function', "
                              f"got {tool.target!r}")
    values["models"] = _merge(defaults.models if sim_model else (), models, f"{source}: models")
    values["tools"] = _merge(DEFAULT_TOOLS if example_tools else (), tools, f"{source}: tools")
    values.update(_mcp_settings(doc, source))
    return RuntimeSettings(**values)


def _mcp_settings(doc: dict[str, Any], source: str) -> dict[str, Any]:
    """``[mcp]``: ``allowed_urls``, ``timeout_s``, ``list_ttl_s`` and ``[[mcp.servers]]``."""
    section = _table(doc, "mcp", source)
    _check_keys(section, (*_MCP_FIELDS, "servers"), source, "mcp.")
    values: dict[str, Any] = {}
    for key in ("timeout_s", "list_ttl_s"):
        if key in section:
            values[_MCP_FIELDS[key]] = _typed(section[key], RuntimeSettings, _MCP_FIELDS[key], f"{source}: mcp.{key}")
    if "allowed_urls" in section:
        values["mcp_allowed_urls"] = _strings(section["allowed_urls"], f"{source}: mcp.allowed_urls")
    servers = []
    for i, entry in enumerate(_array(section, "servers", source)):
        where = f"{source}: mcp.servers[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a table, got {_kind(entry)}")
        _check_keys(entry, tuple(f.name for f in dataclasses.fields(McpServerSpec)), source, f"mcp.servers[{i}].")
        if not entry.get("label"):
            raise ConfigError(f"{where}: missing required key 'label'")
        if ("url" in entry) == ("command" in entry):
            raise ConfigError(f"{where}: give exactly one of 'url' (HTTP) and 'command' (stdio)")
        spec = dict(entry)
        if "command" in spec:
            spec["command"] = _strings(spec["command"], f"{where}.command")
        if "allowed_tools" in spec:
            spec["allowed_tools"] = _strings(spec["allowed_tools"], f"{where}.allowed_tools")
        if not isinstance(spec.get("headers", {}), dict):
            raise ConfigError(f"{where}.headers: expected a table")
        servers.append(McpServerSpec(**spec))
    if servers:
        values["mcp_servers"] = tuple(servers)
    return values


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected an array of strings, got {_kind(value)}")
    return tuple(value)


def _merge(base: tuple[Any, ...], configured: list[Any], where: str) -> tuple[Any, ...]:
    """The built-ins plus the configured entries; a configured name replaces a built-in one."""
    names = [c.name for c in configured]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise ConfigError(f"{where}: the name {duplicate!r} is configured twice")
    return tuple(b for b in base if b.name not in names) + tuple(configured)


def _spec(cls: type, entry: Any, source: str, label: str) -> Any:
    where = f"{source}: {label}"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected a table, got {_kind(entry)}")
    _check_keys(entry, tuple(f.name for f in dataclasses.fields(cls)), source, label + ".")
    if "name" not in entry:
        raise ConfigError(f"{where}: missing required key 'name'")
    if cls is ToolSpec and "target" not in entry:
        raise ConfigError(f"{where}: missing required key 'target'")
    values = {}
    for key, value in entry.items():
        if key == "parameters" and isinstance(value, str):
            # A JSON schema is often easier to paste as a JSON string than to write as TOML.
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise ConfigError(f"{where}.parameters: not valid JSON: {exc}") from exc
        values[key] = _typed(value, cls, key, f"{where}.{key}")
    return cls(**values)


# -- environment -------------------------------------------------------------------


def _apply_env(
    server: ServerSettings, runtime: RuntimeSettings, env: Mapping[str, str]
) -> tuple[ServerSettings, RuntimeSettings]:
    server_vars = {
        "TROUPE_HOST": "host",
        "TROUPE_PORT": "port",
        "TROUPE_RAY_ADDRESS": "ray_address",
        "TROUPE_INGRESS": "ingress",
    }
    runtime_vars = {
        "TROUPE_STORAGE_PATH": "storage_path",
        "TROUPE_STORAGE_MEMORY_LIMIT": "storage_memory_limit",
        "TROUPE_PLACEMENT": "placement",
        "TROUPE_POOL_SIZE": "pool_size",
    }
    server_values: dict[str, Any] = {
        name: _from_env(env[var], ServerSettings, name, var) for var, name in server_vars.items() if var in env
    }
    if "TROUPE_API_KEYS" in env:
        server_values["api_keys"] = parse_api_keys(env["TROUPE_API_KEYS"])
    runtime_values = {
        name: _from_env(env[var], RuntimeSettings, name, var) for var, name in runtime_vars.items() if var in env
    }
    if "TROUPE_MCP_ALLOWED_URLS" in env:
        # Carried in the settings so every actor, on every node, applies the same allowlist.
        patterns = tuple(p.strip() for p in env["TROUPE_MCP_ALLOWED_URLS"].split(",") if p.strip())
        runtime_values["mcp_allowed_urls"] = patterns
    return dataclasses.replace(server, **server_values), dataclasses.replace(runtime, **runtime_values)


def _from_env(text: str, cls: type, name: str, var: str) -> Any:
    value: Any = text.strip()
    if _strip_optional(_hint(cls, name)) is int:
        try:
            value = int(value)
        except ValueError as exc:
            raise ConfigError(f"{var}: expected an integer, got {text!r}") from exc
    return _typed(value, cls, name, var)


# -- typing helpers ------------------------------------------------------------------


def _check_keys(table: dict[str, Any], known: tuple[str, ...], source: str, prefix: str) -> None:
    for key in table:
        if key not in known:
            raise ConfigError(f"{source}: unknown key '{prefix}{key}' (known keys: {', '.join(known)})")


def _table(doc: dict[str, Any], name: str, source: str) -> dict[str, Any]:
    value = doc.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: '{name}' must be a table ([{name}]), got {_kind(value)}")
    return value


def _array(doc: dict[str, Any], name: str, source: str) -> list[Any]:
    value = doc.get(name, [])
    if not isinstance(value, list):
        raise ConfigError(f"{source}: '{name}' must be an array of tables ([[{name}]]), got {_kind(value)}")
    return value


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _hint(cls: type, name: str) -> Any:
    return _hints(cls)[name]


def _strip_optional(hint: Any) -> Any:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def _check_bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: expected a boolean, got {_kind(value)} {value!r}")
    return value


def _typed(value: Any, cls: type, name: str, where: str) -> Any:
    """Check ``value`` against the type of field ``name`` of ``cls`` (str, int, float, bool,
    Literal, dict, X | None) and its range; ``where`` locates it in error messages."""
    hint = _hint(cls, name)
    optional = _strip_optional(hint) is not hint
    base = _strip_optional(hint)
    if value is None and optional:
        return None
    if typing.get_origin(base) is Literal:
        allowed = typing.get_args(base)
        if value not in allowed:
            raise ConfigError(f"{where}: expected one of {', '.join(map(repr, allowed))}, got {value!r}")
        return value
    origin = typing.get_origin(base) or base
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, int | float) and not isinstance(value, bool),
        str: isinstance(value, str),
        dict: isinstance(value, dict),
    }.get(origin, True)
    if not ok:
        expected = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", dict: "a table"}[origin]
        raise ConfigError(f"{where}: expected {expected}, got {_kind(value)} {value!r}")
    if origin is float:
        value = float(value)
    if origin in (int, float):
        if name in _POSITIVE and value <= 0:
            raise ConfigError(f"{where}: must be greater than 0, got {value!r}")
        if name in _NON_NEGATIVE and value < 0:
            raise ConfigError(f"{where}: must not be negative, got {value!r}")
        if name == "port" and value > 65535:
            raise ConfigError(f"{where}: not a TCP port: {value!r}")
    if origin is str and name in ("name", "target", "host", "storage_path") and not value:
        raise ConfigError(f"{where}: must not be empty")
    if name == "storage_memory_limit" and value and not _MEMORY_SIZE.match(value):
        raise ConfigError(f'{where}: expected a size such as "128MB" or "1GiB" ("" for DuckDB\'s default), got {value!r}')
    return value


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
            dict: "a table"}.get(type(value), type(value).__name__)
