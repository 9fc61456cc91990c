"""Runtime settings: what the actors need to know (models, tools, placement, storage, limits).

Plain frozen dataclasses, picklable, so one value travels to every actor. The
HTTP layer (``troupe.serve.config``) builds them from the TOML file and the
environment; the defaults here are the embedded defaults: the ``sim`` model,
the example tools, conversations hosted in the ingress replica, ``troupe.duckdb`` in the
working directory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["ModelSpec", "ToolSpec", "McpServerSpec", "RuntimeSettings", "DEFAULT_TOOLS"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A model clients can name in ``model``."""

    name: str
    """The name clients use."""
    kind: Literal["sim", "openai"] = "openai"
    """``sim``: the in-process simulated model; ``openai``: any OpenAI-compatible server."""
    base_url: str | None = None
    """For ``openai``: e.g. ``http://127.0.0.1:8001/v1``."""
    upstream_model: str | None = None
    """The name sent upstream (default: ``name``)."""
    api_key_env: str | None = None
    """Environment variable holding the upstream API key (read where the model is called)."""
    ttft_ms: float = 0.0
    """For ``sim``: default time to first token."""
    itl_ms: float = 0.0
    """For ``sim``: default time between tokens."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """A server-side Python tool: ``module:function``, run as a Ray task."""

    name: str
    target: str
    """``package.module:function``; sync or async; called with the JSON arguments as keywords."""
    description: str = ""
    parameters: dict[str, Any] | None = None
    """JSON schema of the arguments; None derives it from the function's type hints."""
    num_cpus: float | None = None
    """None (the default): calls run in the node's tool runner (``RuntimeSettings.tool_runner``).
    A number: each call is a Ray task of its own reserving this many CPUs, for CPU-bound
    tools that should run in parallel processes, anywhere in the cluster. Every running task
    occupies a Ray worker process, which Ray may have to start first."""


@dataclass(frozen=True, slots=True, kw_only=True)
class McpServerSpec:
    """An MCP server the deployment configures; requests name it by ``server_label`` alone.

    Configured servers are trusted: the URL allowlist does not apply to them.
    """

    label: str
    """The ``server_label`` requests use."""
    url: str | None = None
    """Streamable HTTP (or legacy SSE) endpoint; exactly one of ``url`` and ``command``."""
    command: tuple[str, ...] | None = None
    """A stdio server: the command line that starts it."""
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    """HTTP headers; a value may name environment variables as ``${NAME}`` (read where the server is resolved)."""
    allowed_tools: tuple[str, ...] | None = None
    """Only these tools are offered; None means all."""
    require_approval: str | dict[str, Any] = "always"
    """``always``, ``never`` or ``{"always": {"tool_names": [...]}, "never": {"tool_names": [...]}}``."""
    description: str | None = None


DEFAULT_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(name="calculator", target="troupe.actors.example_tools:calculator",
             description="Evaluate an arithmetic expression, e.g. '2 * (3 + 4)'."),
    ToolSpec(name="sleep", target="troupe.actors.example_tools:sleep",
             description="Wait the given number of milliseconds, then say so."),
    ToolSpec(name="now", target="troupe.actors.example_tools:now",
             description="The current date and time in UTC, ISO 8601."),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeSettings:
    """Everything the runtime needs; the embedded defaults need no file."""

    models: tuple[ModelSpec, ...] = (ModelSpec(name="sim", kind="sim"),)
    tools: tuple[ToolSpec, ...] = DEFAULT_TOOLS
    tool_runner: Literal["actor", "task"] = "actor"
    """Where calls of tools whose ToolSpec sets no ``num_cpus`` run. ``"actor"``: in the node's
    long-lived tool runner (async tools on its event loop, sync tools on its threads), so no
    call waits for a process to start. ``"task"``: each call is a Ray task reserving
    ``tool_num_cpus``; a burst after an idle second waits for Ray to start worker processes."""
    tool_num_cpus: float = 0.25
    """CPUs each tool *task* reserves unless its ToolSpec says otherwise (0.25 lets 4 run per core)."""
    tool_timeout_s: float = 60.0
    """A tool call taking longer fails with a timeout error (fed back to the model)."""
    placement: Literal["replica", "pooled", "dedicated"] = "replica"
    """Which host runs a conversation's turns: ``"replica"``, the ingress replica itself (no Ray
    hop per streamed batch; one ingress replica only: with more, the configuration loader picks
    ``"pooled"`` unless told otherwise); ``"pooled"``, ``pool_size`` host actors shared by all
    conversations and replicas; ``"dedicated"``, an actor per conversation."""
    pool_size: int = 4
    """Pooled placement: how many conversation hosts."""
    idle_timeout_s: float = 300.0
    """Dedicated placement: a conversation actor exits after this long without a turn."""
    cache_size: int = 1_000
    """Conversations whose message cache a host keeps (least recently used are dropped; a
    dropped one is read back from storage on its next turn). With the default 4 hosts,
    4,000 warm conversations: enough that a 30-minute soak fills it during warm-up and then
    stays flat; at 10,000 each host still grew after half an hour. Raise it with memory."""
    storage_path: str = "troupe.duckdb"
    """The DuckDB file; ``:memory:`` keeps history in memory only."""
    storage_memory_limit: str = "128MB"
    """DuckDB's ``memory_limit`` in the process that owns the file: its cache of the file's
    blocks, and what a write or a checkpoint holds, stay within it (more spills to
    ``<storage_path>.tmp``). ``""``: DuckDB's default, 80% of the machine's memory, which the
    cache grows towards as history grows. 128MB stores 16 MB requests (about 80 MB of JSON each)."""
    client_tool_status: Literal["completed", "requires_action"] = "completed"
    namespace: str = "troupe"
    """Ray namespace of the named actors (hosts, storage)."""
    mcp_servers: tuple[McpServerSpec, ...] = ()
    """Configured MCP servers (trusted; requests name them by label)."""
    mcp_allowed_urls: tuple[str, ...] = ()
    """URL patterns (``*`` wildcards, whole URL) a request's ``server_url`` must match; also the env var
    ``TROUPE_MCP_ALLOWED_URLS`` (comma-separated). Empty: any public http(s) URL."""
    mcp_timeout_s: float = 30.0
    """An MCP tool call (or listing) taking longer fails with a protocol error."""
    mcp_list_ttl_s: float = 300.0
    """How long a server's ``tools/list`` answer is reused."""

    def model(self, name: str) -> ModelSpec | None:
        return next((m for m in self.models if m.name == name), None)
