"""Server configuration: one TOML file plus ``TROUPE_*`` environment variables, on pydantic-settings.

:func:`load_config` returns the two halves Troupe needs: :class:`ServerSettings`
(where and how the HTTP layer listens, who may call it, its limits) and
:class:`~troupe.runtime.settings.RuntimeSettings` (models, tools, placement, storage, MCP).
With no file and no environment it returns the embedded defaults: the ``sim`` model, the
example tools, ``127.0.0.1:8000``, no API keys.

:class:`TroupeConfig` is the file's schema, one table per section; each table is a pydantic
model whose field docstrings document the options (``docs/troupe.example.toml`` shows them
all, and a test keeps it in step)::

    [server]    ServerOptions        [limits]   Limits         [auth]  keys, admin_keys
    [runtime]   RuntimeOptions, plus example_tools and sim_model
    [[models]]  ModelSpec            [[tools]]  ToolSpec
    [mcp]       McpSettings, with [[mcp.servers]] McpServerSpec
    [telemetry] TelemetrySettings    [containers] ContainersSettings
    [webhooks]  WebhookSettings      [web_search] WebSearchSettings

Precedence, lowest first: embedded defaults → the TOML file → the environment →
(in ``troupe serve``) command-line flags. Every option has an environment variable,
``TROUPE_<TABLE>__<KEY>`` (``TROUPE_LIMITS__MAX_WAIT_S=5``; arrays and tables as JSON:
``TROUPE_MODELS='[{"name": "m", "base_url": "http://…"}]'``). The usual ones also have a
short name (:data:`ENV_SHORT_NAMES`): ``TROUPE_HOST``, ``TROUPE_PORT``, ``TROUPE_RAY_ADDRESS``,
``TROUPE_INGRESS``, ``TROUPE_STORAGE_PATH``, ``TROUPE_STORAGE_MEMORY_LIMIT``,
``TROUPE_PLACEMENT``, ``TROUPE_POOL_SIZE``, ``TROUPE_API_KEYS`` (comma-separated
``key=tenant`` pairs or bare keys), ``TROUPE_ADMIN_KEYS``, ``TROUPE_CREDENTIALS_KEYS``, ``TROUPE_MCP_ALLOWED_URLS`` and
``TROUPE_WEBHOOK_ALLOWED_URLS`` (comma-separated).
``TROUPE_CONFIG`` names the file when no path is given. An empty variable counts as unset.

Example::

    server, runtime = load_config("troupe.toml", env={"TROUPE_PORT": "9000"})
    server.port, [m.name for m in runtime.models]   # (9000, ['sim', 'llama'])

Most of it is the options' own documentation: their docstrings, beside their declarations.
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
)
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.sources.utils import parse_env_vars

from troupe.runtime.settings import (
    DEFAULT_TOOLS,
    SETTINGS_CONFIG,
    ContainersSettings,
    GuardrailSpec,
    McpSettings,
    ModelSpec,
    NonEmpty,
    RuntimeOptions,
    RuntimeSettings,
    TelemetrySettings,
    ToolSpec,
    WebhookSettings,
    WebSearchSettings,
)
from troupe.storage.base import DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT_S

__all__ = [
    "ENV_SHORT_NAMES",
    "ConfigError",
    "Limits",
    "ServerOptions",
    "ServerSettings",
    "TroupeConfig",
    "load_config",
    "parse_api_keys",
    "tenant_of_key",
]

ENV_PREFIX = "TROUPE_"
ENV_NESTED = "__"


class ConfigError(ValueError):
    """The configuration file or an environment variable is invalid; the message says where."""


class ServerOptions(BaseModel):
    """How the HTTP layer listens (the ``[server]`` table)."""

    model_config = SETTINGS_CONFIG

    host: str = Field(default="127.0.0.1", min_length=1)
    """The interface the API binds; ``0.0.0.0`` for all."""
    port: int = Field(default=8000, gt=0, le=65535)
    """The API's port (with several direct-ingress replicas: ``port``, ``port + 1``, …)."""
    ray_address: str | None = None
    """An existing Ray cluster (``ray://…`` or ``host:port``); None starts a local Ray instance."""
    num_replicas: PositiveInt = 1
    """Serve replicas of the HTTP ingress. With the ``replica`` placement they share the
    conversations: each hosts those whose id hashes to it (docs/cluster.md)."""
    max_replicas_per_node: PositiveInt | None = None
    """At most this many ingress replicas on one node of a Ray cluster (Serve's
    ``max_replicas_per_node``): 1 puts each replica on a node of its own, so that N replicas use
    N machines. None: Serve places them, and may put several, or all, on one node."""
    max_ongoing_requests: PositiveInt = 1000
    """Concurrent requests per replica. Streams are long-lived and I/O-bound, so this is far
    above Serve's default of 5, which would queue the sixth concurrent stream."""
    ingress: Literal["direct", "proxy"] = "direct"
    """How HTTP reaches the ingress replicas. ``"direct"``: each replica serves HTTP on its own
    port, ``port`` for the first, ``port + 1`` for the next, with no Serve proxy in the path
    (Serve's direct ingress). ``"proxy"``: Serve's HTTP proxy listens on ``port`` and forwards
    every request to a replica over Ray, one more hop per streamed batch. A cluster Troupe joins
    (``ray_address``) decides for itself, through its own environment
    (docs/cluster.md)."""
    dashboard: bool = False
    """Start Ray's dashboard with a local Ray instance (it costs about 0.2 cores at rest)."""
    shutdown_grace_s: NonNegativeFloat = 2.0
    """On SIGTERM or Ctrl-C, how long ``troupe serve`` lets the requests in flight finish
    (new ones answer 503 with ``Retry-After`` meanwhile) before it stops Ray; a stream still
    running then is cut. Background runs are not waited for: they go on at the next start.
    The whole stop takes about this plus 2 s."""


class Limits(BaseModel):
    """What one request may be, and how much load a replica admits (the ``[limits]`` table;
    docs/behaviour.md, "Limits")."""

    model_config = SETTINGS_CONFIG

    max_body_bytes: PositiveInt = 16 * 1024 * 1024
    """The largest request body; a larger one answers 413 ``request_too_large``."""
    max_file_bytes: PositiveInt = 32 * 1024 * 1024
    """The largest upload (``POST /v1/files``); a larger file answers 413 ``file_too_large``."""
    max_json_depth: PositiveInt = 64
    """The deepest nesting of objects and arrays in a body; deeper answers 400 ``nesting_too_deep``."""
    max_active_responses: PositiveInt = 64
    """Writes (``POST /v1/…``: responses, streams included; conversations) running at once in one
    ingress replica. The default is what a 2-core machine serves before latency collapses
    (docs/behaviour.md, "Limits"); raise it with the cores."""
    max_waiting_responses: NonNegativeInt = 256
    """Requests that may wait for a running slot; beyond this, 429 at once."""
    max_wait_s: PositiveFloat = 2.0
    """The longest a request waits for a running slot before it answers 429."""
    tenant_requests_per_minute: NonNegativeInt = 0
    """Responses one tenant may create per minute, per replica; 0: no limit."""
    tenant_max_streams: NonNegativeInt = 0
    """Streams one tenant may hold open at once, per replica; 0: no limit."""
    stream_stall_timeout_s: PositiveFloat = 60.0
    """A client that reads nothing of its stream for this long is dropped (its turn is cancelled)."""
    stream_keepalive_s: NonNegativeFloat = 15.0
    """A stream that has sent nothing for this long sends an SSE comment (``: keepalive``), so
    that proxies do not close it while a tool or the model takes its time; 0: never."""
    websocket_idle_timeout_s: PositiveFloat = 300.0
    """A WebSocket on ``/v1/responses`` with no message in this long, and no response running on
    it, is closed (docs/websocket.md). Each connection counts as one of ``tenant_max_streams``."""
    sql_timeout_s: PositiveFloat = DEFAULT_TIMEOUT_S
    """A read-only SQL query (``POST /v1/troupe/sql``; ``troupe sql``'s default) running longer is
    interrupted. It runs on the storage actor's thread between two write batches, so this is
    also the longest it holds stored responses back from DuckDB (they are durable meanwhile)."""
    sql_max_rows: PositiveInt = DEFAULT_MAX_ROWS
    """The most rows a read-only SQL query returns (``POST /v1/troupe/sql`` may ask for fewer;
    ``troupe sql``'s default); a result cut there says ``truncated``."""


class ServerSettings(ServerOptions, Limits):
    """How the HTTP layer listens, authenticates and limits (picklable: it travels to Serve replicas)."""

    api_keys: Mapping[str, str] = Field(default_factory=dict)
    """API key → tenant name. Empty: authentication is off and every caller is tenant ``""``."""
    admin_keys: tuple[str, ...] = Field(default=(), repr=False)
    """Keys of the operator endpoints (``POST /v1/troupe/sql``, refused while there is none) and
    of the console's view over every tenant, apart from ``api_keys``."""


class Auth(BaseModel):
    """API keys (the ``[auth]`` table)."""

    model_config = SETTINGS_CONFIG

    keys: dict[str, NonEmpty] = Field(default_factory=dict)
    """``{"sk-…" = "tenant"}``, or a list of bare keys, each key's tenant then being
    :func:`tenant_of_key`. Empty: authentication is off."""
    admin_keys: tuple[NonEmpty, ...] = ()
    """Keys for the operator endpoints (``POST /v1/troupe/sql``: SQL over every tenant's history)
    and the console's views over every tenant (``/console``, the evaluation runs), apart from the
    tenants' ``keys``. Empty: those endpoints are off, and the console shows each key its tenant."""

    @field_validator("keys", mode="before")
    @classmethod
    def _bare_keys(cls, keys: Any) -> Any:
        if isinstance(keys, list):
            if not all(isinstance(k, str) and k for k in keys):
                raise ValueError("expected a list of non-empty strings")
            return {k: tenant_of_key(k) for k in keys}
        if not isinstance(keys, dict):
            raise ValueError(f"expected a table {{key = tenant}} or a list of keys, got {keys!r}")
        return keys


class RuntimeSection(RuntimeOptions):
    """The ``[runtime]`` table: the runtime's options and whether the built-ins are offered."""

    example_tools: bool = True
    """Offer the built-in example tools (calculator, sleep, now) alongside the ``[[tools]]``."""
    sim_model: bool = True
    """Offer the built-in ``sim`` model alongside the ``[[models]]``."""


class TroupeConfig(BaseSettings):
    """The whole configuration: the TOML file's tables, then the ``TROUPE_*`` environment."""

    model_config = SettingsConfigDict(
        frozen=True, extra="forbid", use_attribute_docstrings=True,
        env_prefix=ENV_PREFIX, env_nested_delimiter=ENV_NESTED, env_ignore_empty=True,
    )  # fmt: skip

    server: ServerOptions = ServerOptions()
    limits: Limits = Limits()
    auth: Auth = Auth()
    runtime: RuntimeSection = RuntimeSection()
    models: tuple[ModelSpec, ...] = ()
    """Models clients can name, added to the built-in ``sim`` (an entry named ``sim`` replaces it)."""
    tools: tuple[ToolSpec, ...] = ()
    """Server-side Python tools, added to the example tools (the same name replaces one)."""
    guardrails: tuple[GuardrailSpec, ...] = ()
    """Guardrails: checks of the text going into and out of the loop (docs/guardrails.md)."""
    mcp: McpSettings = McpSettings()
    telemetry: TelemetrySettings = TelemetrySettings()
    containers: ContainersSettings = ContainersSettings()
    webhooks: WebhookSettings = WebhookSettings()
    web_search: WebSearchSettings = WebSearchSettings()

    @field_validator("models", "tools", "guardrails")
    @classmethod
    def _unique_names(cls, entries: tuple[Any, ...]) -> tuple[Any, ...]:
        names = [e.name for e in entries]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate is not None:
            raise ValueError(f"the name {duplicate!r} is configured twice")
        return entries

    def settings(self) -> tuple[ServerSettings, RuntimeSettings]:
        """The two halves: :class:`ServerSettings` and :class:`RuntimeSettings`."""
        server = ServerSettings(
            **dict(self.server), **dict(self.limits), api_keys=self.auth.keys, admin_keys=self.auth.admin_keys
        )
        options = {name: getattr(self.runtime, name) for name in RuntimeOptions.model_fields}
        runtime = RuntimeSettings(
            **options,
            ingress_replicas=self.server.num_replicas,
            models=_merge(RuntimeSettings().models if self.runtime.sim_model else (), self.models),
            tools=_merge(DEFAULT_TOOLS if self.runtime.example_tools else (), self.tools),
            guardrails=self.guardrails,
            mcp=self.mcp,
            telemetry=self.telemetry,
            containers=self.containers,
            webhooks=self.webhooks,
            web_search=self.web_search,
        )
        return server, runtime

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The file's tables come in as keyword arguments; the environment wins over them.
        env = _ENVIRONMENT.get()
        return (env_settings if env is None else _EnvSource(settings_cls, env)), init_settings


def _merge(builtin: tuple[Any, ...], configured: tuple[Any, ...]) -> tuple[Any, ...]:
    """The built-ins plus the configured entries; a configured name replaces a built-in one."""
    names = {c.name for c in configured}
    return tuple(b for b in builtin if b.name not in names) + configured


# -- the environment ------------------------------------------------------------------

ENV_SHORT_NAMES: dict[str, str] = {
    "TROUPE_HOST": "server.host",
    "TROUPE_PORT": "server.port",
    "TROUPE_RAY_ADDRESS": "server.ray_address",
    "TROUPE_INGRESS": "server.ingress",
    "TROUPE_STORAGE_PATH": "runtime.storage_path",
    "TROUPE_STORAGE_MEMORY_LIMIT": "runtime.storage_memory_limit",
    "TROUPE_PLACEMENT": "runtime.placement",
    "TROUPE_POOL_SIZE": "runtime.pool_size",
    "TROUPE_API_KEYS": "auth.keys",
    "TROUPE_ADMIN_KEYS": "auth.admin_keys",
    "TROUPE_MCP_ALLOWED_URLS": "mcp.allowed_urls",
    "TROUPE_WEBHOOK_ALLOWED_URLS": "webhooks.allowed_urls",
    "TROUPE_CREDENTIALS_KEYS": "runtime.credentials_keys",
}
"""Short environment variables for the usual options (each also has its ``TROUPE_<TABLE>__<KEY>`` name)."""


def _env_name(dotted: str) -> str:
    return ENV_PREFIX + ENV_NESTED.join(dotted.split(".")).upper()


def _nested_env(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``env``'s ``TROUPE_*`` variables with short names spelled out, and each spelled-out
    name → the variable the user set (for error messages)."""
    given = {k: v for k, v in env.items() if k.startswith(ENV_PREFIX) and v.strip()}
    nested, origin = {}, {}
    for var, value in given.items():
        if var in ENV_SHORT_NAMES:
            name = _env_name(ENV_SHORT_NAMES[var])
            if var == "TROUPE_API_KEYS":
                value = json.dumps(parse_api_keys(value))
            elif var in ("TROUPE_MCP_ALLOWED_URLS", "TROUPE_WEBHOOK_ALLOWED_URLS", "TROUPE_ADMIN_KEYS",
                         "TROUPE_CREDENTIALS_KEYS"):
                value = json.dumps([p.strip() for p in value.split(",") if p.strip()])
        else:
            name = var
        nested[name], origin[name] = value, var
    return nested, origin


_ENVIRONMENT: ContextVar[Mapping[str, str] | None] = ContextVar("troupe_config_environment", default=None)
"""The environment :func:`load_config` was handed (short names spelled out); None: ``os.environ``."""


class _EnvSource(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping instead of ``os.environ``
    (so that :func:`load_config` can be handed an environment, as its tests do)."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._env = env
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(self._env, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


# -- loading ---------------------------------------------------------------------------


def load_config(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] = os.environ
) -> tuple[ServerSettings, RuntimeSettings]:
    """Read the TOML file (if any) and apply the environment.

    Args:
        path: the TOML file; None uses ``TROUPE_CONFIG`` from ``env``, or no file.
        env: the environment to read ``TROUPE_*`` variables from.

    Returns:
        ``(ServerSettings, RuntimeSettings)``.

    Raises:
        ConfigError: unreadable file, TOML syntax error, unknown key (named), a value of
            the wrong type or out of range, a bad environment variable (named).

    Example::

        server, runtime = load_config(None, env={})   # the embedded defaults
    """
    path = path if path is not None else (env.get("TROUPE_CONFIG") or "").strip() or None
    source = "defaults"
    doc: dict[str, Any] = {}
    if path is not None:
        source = os.fspath(path)
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except OSError as exc:
            raise ConfigError(f"{source}: cannot read the configuration file: {exc.strerror or exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: invalid TOML: {exc}") from exc
    nested, origin = _nested_env(env)
    nested.pop("TROUPE_CONFIG", None)
    for name in nested:  # a variable replaces the file's value (pydantic-settings would merge tables)
        _drop(doc, name.removeprefix(ENV_PREFIX).lower().split(ENV_NESTED))
    token = _ENVIRONMENT.set(nested)
    try:
        return TroupeConfig(**doc).settings()
    except ValidationError as exc:
        raise ConfigError(_explain(exc, source, origin)) from None
    finally:
        _ENVIRONMENT.reset(token)


def _drop(doc: dict[str, Any], keys: list[str]) -> None:
    table = doc
    for key in keys[:-1]:
        nested = table.get(key)
        if not isinstance(nested, dict):
            return
        table = nested
    table.pop(keys[-1], None)


_MESSAGES = {
    "model_type": "expected a table", "model_attributes_type": "expected a table", "dict_type": "expected a table",
    "tuple_type": "expected an array", "list_type": "expected an array",
}  # fmt: skip
"""pydantic's error types whose message would name our classes; the rest are pydantic's own."""


def _explain(exc: ValidationError, source: str, origin: Mapping[str, str]) -> str:
    """One line per error: the variable or the file and key it came from, and what is wrong."""
    lines = []
    for error in exc.errors(include_url=False):
        loc = error["loc"]
        dotted = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")
        message = _MESSAGES.get(error["type"], error["msg"].removeprefix("Value error, "))
        if error["type"] == "extra_forbidden":
            message = f"unknown key '{dotted}'"
        elif error["type"] == "missing":
            message = f"missing required key '{loc[-1]}'"
            dotted = dotted.rpartition(".")[0]
        elif "input" in error and error["type"] != "value_error":
            message += f", got {error['input']!r}"
        var = next((origin[n] for n in _env_names(loc) if n in origin), None)
        if var is not None:
            lines.append(f"{var}: {message}")
        elif error["type"] == "extra_forbidden":
            lines.append(f"{source}: {message}")
        else:
            lines.append(f"{source}: {dotted or 'the file'}: {message}")
    return "\n".join(lines)


def _env_names(loc: tuple[Any, ...]) -> list[str]:
    """The environment variables that could have set the value at ``loc``, longest first."""
    keys = [str(p) for p in loc if not isinstance(p, int)]
    return [_env_name(".".join(keys[:n])) for n in range(len(keys), 0, -1)]


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
