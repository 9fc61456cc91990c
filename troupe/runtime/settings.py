"""Runtime settings: what the actors need to know (models, tools, placement, storage, MCP, containers).

Frozen pydantic models, picklable, so one value travels to every actor. They are also
the configuration's schema: ``troupe.serve.config`` reads the TOML file's ``[runtime]``,
``[[models]]``, ``[[tools]]``, ``[mcp]`` and ``[containers]`` tables into them, so each option is declared,
checked and documented (its docstring) here and nowhere else. The defaults are the
embedded defaults: the ``sim`` model, the example tools, conversations hosted in the
ingress replica, ``troupe.duckdb`` in the working directory.

Example::

    RuntimeSettings(storage_path=":memory:", pool_size=2)
    RuntimeSettings(mcp=McpSettings(allowed_urls=("http://127.0.0.1:*",)))
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    SecretStr,
    model_validator,
)

from troupe._settings import SETTINGS_CONFIG, import_target
from troupe.observe.settings import TelemetrySettings

__all__ = [
    "ContainersSettings",
    "DEFAULT_TOOLS",
    "GuardrailRule",
    "GuardrailSpec",
    "GuardrailStage",
    "SETTINGS_CONFIG",
    "McpServerSpec",
    "NonEmpty",
    "McpSettings",
    "ModelSpec",
    "RuntimeOptions",
    "RuntimeSettings",
    "TelemetrySettings",
    "SIM_EMBEDDER",
    "ToolSpec",
]

NonEmpty = Annotated[str, Field(min_length=1)]

_MEMORY_SIZE = re.compile(r"\d+(\.\d+)?\s*(B|[KMGT]i?B)\Z", re.IGNORECASE)


def _memory_size(value: str) -> str:
    if value and not _MEMORY_SIZE.match(value):
        raise ValueError(f'expected a size such as "128MB" or "1GiB" ("" for DuckDB\'s default), got {value!r}')
    return value


def _fernet_keys(keys: tuple[SecretStr, ...]) -> tuple[SecretStr, ...]:
    from troupe.storage.credentials import CredentialKeys

    for index, key in enumerate(keys):
        try:
            CredentialKeys([key.get_secret_value()])
        except (ValueError, TypeError):
            raise ValueError(
                f"credentials_keys[{index}] is not a Fernet key (url-safe base64 of 32 random bytes; make one with "
                "`python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'`)"
            ) from None
    return keys


class LoopGuardSpec(BaseModel):
    """A model's loop guards (``[models.loop_guards]``; ``troupe.agentloop.loop_guards``): each a
    count, unset: off."""

    model_config = SETTINGS_CONFIG

    repeat: Annotated[int, Field(ge=2)] | None = None
    """Stop when the same calls (tools and arguments) make this many model turns in a row."""
    alternate: Annotated[int, Field(ge=2)] | None = None
    """Stop when two different turns of calls take turns this many times each (A B A B)."""
    poll: Annotated[int, Field(ge=2)] | None = None
    """Stop when this many turns in a row each call one tool, the same one, whatever its arguments."""


class ModelSpec(BaseModel):
    """A model clients can name in ``model`` (a ``[[models]]`` entry)."""

    model_config = SETTINGS_CONFIG

    name: NonEmpty
    """The name clients send."""
    kind: Literal["sim", "openai"] = "openai"
    """``openai``: any OpenAI-compatible server (vLLM, SGLang, Ollama, llama.cpp, OpenAI);
    ``sim``: the in-process simulated model."""
    base_url: str | None = None
    """For ``openai`` (required): e.g. ``http://127.0.0.1:8001/v1``."""
    upstream_model: str | None = None
    """The name sent upstream (default: ``name``)."""
    api_key_env: str | None = None
    """Environment variable holding the upstream API key (read where the model is called)."""
    context_window: PositiveInt | None = None
    """The model's context window in tokens, as Troupe estimates them (about four characters
    a token; ``troupe.agentloop.context``). Set: a request whose thread does not fit is a 400
    ``context_length_exceeded``, or with ``truncation: "auto"`` loses its oldest items; a
    ``context_management`` compaction entry without ``compact_threshold`` compacts past 80% of
    it (less ``max_output_tokens``). None: not checked (the upstream server decides), and such
    an entry is a 400."""
    task: Literal["chat", "embeddings"] = "chat"
    """What it does: ``chat`` answers responses; ``embeddings`` turns text into vectors, for
    ``POST /v1/embeddings`` and vector stores (``kind = "openai"``: any OpenAI-compatible
    ``/v1/embeddings`` server; ``kind = "sim"``: feature hashing, ``troupe.rag.embedders``)."""
    dimensions: PositiveInt | None = None
    """For ``embeddings``: the vectors' size. ``sim``: its dimensions (default 512); ``openai``:
    sent upstream as OpenAI's ``dimensions`` when set (models that can shorten their vectors)."""
    ttft_ms: NonNegativeFloat = 0.0
    """For ``sim``: default time to first token."""
    itl_ms: NonNegativeFloat = 0.0
    """For ``sim``: default time between tokens."""
    streaming: Literal["when_watched", "always"] = "when_watched"
    """How the model is called. ``when_watched``: streamed when someone takes the tokens as they
    come (a streamed response, a background one, which may be followed), else one JSON
    completion (a non-streamed request sees only the end: measured, a quarter less of the
    replica's CPU a response, and the model server spares its streaming). ``always``: every call streamed, for an
    upstream that may stay silent longer than the read timeout (300 s between bytes) while it
    makes a whole answer."""

    tool_protocol: Literal["native", "react", "json"] = "native"
    """How the model calls tools (docs/tool-protocols.md). ``native``: Chat Completions
    ``tools`` and ``tool_calls``. For a model without them, ``react``: it is told the tools
    and writes Thought / Action / Action Input / Final Answer, which Troupe reads; ``json``: it
    answers one JSON object naming an action or a final answer. Clients see the same items and
    events either way."""
    loop_guards: LoopGuardSpec | None = None
    """The loop guards every response of this model runs (docs/loop-guards.md); a request may
    turn more on or tighten these (``loop_guards``), never loosen them. None: none (the loop's
    cap, ``max_infer_iters``, still holds)."""

    @model_validator(mode="after")
    def _needs_a_server(self) -> ModelSpec:
        if self.kind == "openai" and not self.base_url:
            raise ValueError("base_url is required for kind 'openai'")
        return self


class ToolSpec(BaseModel):
    """A server-side Python tool, ``module:function``, run on Ray (a ``[[tools]]`` entry)."""

    model_config = SETTINGS_CONFIG

    name: NonEmpty
    """The name the model calls."""
    target: Annotated[str, AfterValidator(import_target)]
    """``package.module:function``, sync or async, importable on every Ray node; called with
    the JSON arguments as keywords."""
    description: str = ""
    """What the model is told the tool does."""
    parameters: dict[str, Any] | None = None
    """JSON schema of the arguments (a TOML table, or a JSON string); None derives it from
    the function's type hints."""
    num_cpus: NonNegativeFloat | None = None
    """None (the default): calls run in the node's tool runner (``RuntimeSettings.tool_runner``).
    A number: each call is a Ray task of its own reserving this many CPUs, for CPU-bound
    tools that should run in parallel processes, anywhere in the cluster. Every running task
    occupies a Ray worker process, which Ray may have to start first."""
    idempotent: bool = False
    """Whether running a call twice does no harm. A durable response whose host died during
    a call runs it again only if so; otherwise the model is told the call was interrupted."""

    @model_validator(mode="before")
    @classmethod
    def _parameters_as_json(cls, data: Any) -> Any:
        # A JSON schema is often easier to paste as a JSON string than to write as TOML.
        if isinstance(data, dict) and isinstance(data.get("parameters"), str):
            try:
                data = {**data, "parameters": json.loads(data["parameters"])}
            except ValueError as exc:
                raise ValueError(f"parameters: not valid JSON: {exc}") from exc
        return data


GuardrailStage = Literal["input", "output", "tool_call", "tool_output"]
"""Where a guardrail looks: the turn's new ``input`` before the first model call, the model's
``output`` text as it streams, a server-side tool's arguments before it runs (``tool_call``),
a tool's result before the model sees it (``tool_output``)."""


def _regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"not a regular expression ({exc}): {pattern!r}") from None
    return pattern


class GuardrailRule(BaseModel):
    """One pattern of a ``regex`` guardrail (a ``[[guardrails.rules]]`` entry)."""

    model_config = SETTINGS_CONFIG

    category: NonEmpty
    """What a match is, as the refusal and the verdicts name it (``email``, ``card_number``…);
    never the matched text."""
    pattern: Annotated[str, AfterValidator(_regex)]
    """A Python regular expression (``re``), searched for anywhere in the text."""
    action: Literal["block", "redact"] = "block"
    """``block``: a match stops what it is found in (the stage says how); ``redact``: each match
    is replaced by ``replacement`` and the text goes on."""
    replacement: str | None = None
    """What a redacted match becomes; default ``[<category>]``."""
    ignore_case: bool = False
    """Match letters whatever their case."""


class GuardrailSpec(BaseModel):
    """A named check of the text that goes into and comes out of the loop (a ``[[guardrails]]``
    entry; docs/guardrails.md).

    A request runs the guardrails its tenant and its model must have (``tenants``, ``models``)
    and those it names itself (the ``guardrails`` extension field); it may add, never remove."""

    model_config = SETTINGS_CONFIG

    name: NonEmpty
    """The name requests and verdicts use."""
    kind: Literal["regex", "moderation", "judge"] = "regex"
    """``regex``: ``rules``, checked in the server's process (no call, no model);
    ``moderation``: OpenAI's moderation verdicts, from an OpenAI-compatible ``/v1/moderations``
    server (``base_url``), or from the sim's moderation model in process when ``base_url`` is
    unset (its verdicts scripted by ``[[flag CATEGORY]]`` in the text: docs/sim.md);
    ``judge``: a configured chat model (``judge_model``) asked with a safety ``prompt`` whether
    the text is safe, answering ``safe`` or ``unsafe`` and the categories (the Llama Guard way;
    the sim answers as a judge too)."""
    stages: tuple[GuardrailStage, ...] = ("input", "output")
    """The stages it checks."""
    tenants: tuple[str, ...] = ()
    """The tenants whose every request it checks (``"*"``: every tenant; with no ``[auth]``
    keys the one tenant is ``""``)."""
    models: tuple[str, ...] = ()
    """The models (``[[models]]`` names) whose every request it checks."""
    rules: tuple[GuardrailRule, ...] = ()
    """For ``regex``: its patterns, each blocking or redacting."""
    base_url: str | None = None
    """For ``moderation``: the server, e.g. ``https://api.openai.com/v1``; unset: the sim's
    moderation model, in process."""
    upstream_model: str = "omni-moderation-latest"
    """For ``moderation``: the ``model`` sent to the server."""
    api_key_env: str | None = None
    """For ``moderation``: the environment variable holding the server's API key (read where
    the check runs)."""
    thresholds: dict[str, Annotated[float, Field(ge=0, le=1)]] = Field(default_factory=dict)
    """For ``moderation``: category → the score from which it is flagged. Empty: the server's
    own ``categories`` decide; given: only these categories count."""
    judge_model: str | None = None
    """For ``judge``: the chat model (a ``[[models]]`` name, or ``sim``) that judges."""
    prompt: str | None = None
    """For ``judge``: the prompt, with ``{role}``, ``{categories}`` and ``{text}`` to fill in;
    unset: ``troupe.agentloop.guardrails.JUDGE_PROMPT`` (docs/guardrails.md shows it)."""
    categories: dict[str, str] = Field(default_factory=dict)
    """For ``judge``: the categories it judges, name → title (the prompt lists them as ``S1:
    <title>.``, in order; verdicts use the names). Empty: the MLCommons hazard taxonomy that
    Llama Guard 3 is trained on."""
    timeout_s: PositiveFloat = 10.0
    """For ``moderation`` and ``judge``: a call taking longer fails the check, and a failed
    check blocks (the text does not pass unchecked)."""
    window: PositiveInt = 256
    """For ``moderation`` and ``judge``: the streamed output is classified once per this many
    new characters (each a call, on the whole text so far) and held back until it is. (A
    ``regex`` guardrail holds back only the tail that could still become a match, however
    long.)"""

    @model_validator(mode="after")
    def _complete(self) -> GuardrailSpec:
        if self.kind == "regex" and not self.rules:
            raise ValueError("a 'regex' guardrail needs 'rules'")
        if self.kind != "regex" and self.rules:
            raise ValueError("'rules' are for a 'regex' guardrail")
        if self.kind != "moderation" and (self.base_url or self.thresholds or self.api_key_env):
            raise ValueError("'base_url', 'thresholds' and 'api_key_env' are for a 'moderation' guardrail")
        if (self.kind == "judge") != (self.judge_model is not None):
            raise ValueError("a 'judge' guardrail needs 'judge_model', and only a 'judge' guardrail takes it")
        if self.kind != "judge" and (self.prompt is not None or self.categories):
            raise ValueError("'prompt' and 'categories' are for a 'judge' guardrail")
        if self.prompt is not None:
            try:
                self.prompt.format(role="", categories="", text="")
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(f"'prompt' can fill in only {{role}}, {{categories}} and {{text}} ({exc!r})") from None
        if not self.stages:
            raise ValueError("'stages' names no stage")
        return self


class McpServerSpec(BaseModel):
    """An MCP server the deployment configures; requests name it by ``server_label`` alone
    (an ``[[mcp.servers]]`` entry).

    Configured servers are trusted: the URL allowlist does not apply to them.
    """

    model_config = SETTINGS_CONFIG

    label: NonEmpty
    """The ``server_label`` requests use."""
    url: str | None = None
    """Streamable HTTP endpoint (falls back to legacy SSE); exactly one of ``url`` and ``command``."""
    command: tuple[str, ...] | None = None
    """A stdio server: the command line that starts it, on the connection actor's node."""
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    """HTTP headers; a value may name environment variables as ``${NAME}`` (read where the
    server is resolved; never stored, logged or echoed)."""
    allowed_tools: tuple[str, ...] | None = None
    """Only these tools are listed and callable; None means all."""
    require_approval: str | dict[str, Any] = "always"
    """``always``, ``never`` or ``{"always": {"tool_names": [...]}, "never": {"tool_names": [...]}}``."""
    description: str | None = None
    """Shown to the model with the server's tools."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSpec:
        if (self.url is None) == (self.command is None):
            raise ValueError("give exactly one of 'url' (HTTP) and 'command' (stdio)")
        return self


class McpSettings(BaseModel):
    """MCP: the servers requests may name by label, and the policy for the ``server_url``s
    requests bring themselves (the ``[mcp]`` table)."""

    model_config = SETTINGS_CONFIG

    allowed_urls: tuple[str, ...] = ()
    """URL patterns (``*`` wildcards, whole URL) a request's ``server_url`` must match; also the
    env var ``TROUPE_MCP_ALLOWED_URLS`` (comma-separated). Empty: any public http(s) URL;
    loopback, private, link-local and cloud metadata addresses are refused."""
    timeout_s: PositiveFloat = 30.0
    """An MCP tool call (or listing) taking longer fails with a timeout error."""
    list_ttl_s: NonNegativeFloat = 300.0
    """How long a server's ``tools/list`` answer is reused."""
    servers: tuple[McpServerSpec, ...] = ()
    """Configured MCP servers (trusted; requests name them by label)."""


class WebhookSettings(BaseModel):
    """Webhooks: where deliveries may go, and how they are retried (the ``[webhooks]`` table;
    docs/webhooks.md)."""

    model_config = SETTINGS_CONFIG

    allowed_urls: tuple[str, ...] = ()
    """URL patterns (``*`` wildcards, whole URL) an endpoint's ``url`` must match; also the env var
    ``TROUPE_WEBHOOK_ALLOWED_URLS`` (comma-separated). Empty: any public http(s) URL; loopback,
    private, link-local and cloud metadata addresses are refused (the MCP servers' URL policy)."""
    timeout_s: PositiveFloat = 10.0
    """An attempt whose endpoint has not answered in this time failed (and is retried)."""
    retry_initial_s: PositiveFloat = 10.0
    """The wait before the second attempt; each wait after doubles, up to ``retry_max_s``."""
    retry_max_s: PositiveFloat = 3600.0
    """The longest wait between two attempts."""
    retry_for_s: PositiveFloat = 72 * 3600.0
    """A delivery not made this long after its event is ``failed`` (no more attempts)."""
    concurrency: PositiveInt = 8
    """Attempts in flight at once."""
    log_retention_s: PositiveFloat = 7 * 86400.0
    """How long the delivery log keeps a delivery once it is delivered or failed."""
    user_agent: str = "Troupe-Webhooks/1"
    """The ``User-Agent`` of every delivery."""


class WebSearchProvider(BaseModel):
    """A search engine the ``web_search`` tool asks: the deployment's (``[web_search]``) or a
    tenant's (``[web_search.tenants.NAME]``; docs/web-search.md)."""

    model_config = SETTINGS_CONFIG

    provider: Literal["none", "searxng", "brave", "tavily", "responses"] = "none"
    """The search engine: ``searxng`` (a SearXNG instance's JSON API, at ``url``; self-hosted, no
    key), ``brave`` (Brave Search API) or ``tavily`` (Tavily), each with a key, or ``responses``
    (pass-through: an OpenAI-compatible Responses server at ``url`` whose ``model`` has its own
    ``web_search`` tool searches, its key optional). ``none``: a request with the ``web_search``
    tool is a 400 naming it."""
    url: str = ""
    """SearXNG's base URL (``http://127.0.0.1:8888``; its ``/search?format=json`` must be
    enabled), or the Responses server's (``https://api.openai.com/v1``: ``/responses`` is added)."""
    model: str = ""
    """``responses``: the upstream's model that searches (``gpt-5-mini``)."""
    brave_url: str = "https://api.search.brave.com/res/v1/web/search"
    """Brave Search's web search endpoint."""
    tavily_url: str = "https://api.tavily.com/search"
    """Tavily's search endpoint."""
    api_key: SecretStr | None = None
    """The provider's key (Brave, Tavily, the Responses server). Never stored with the history nor
    shown. Better in the environment: ``api_key_env``."""
    api_key_env: str = ""
    """The environment variable holding the key when ``api_key`` is unset. The deployment's is
    ``TROUPE_WEB_SEARCH_API_KEY``; a tenant's has none unless named (a tenant's provider never
    uses the deployment's key)."""

    @model_validator(mode="after")
    def _complete(self) -> WebSearchProvider:
        if self.provider in ("searxng", "responses") and not self.url:
            raise ValueError(f"provider = {self.provider!r} needs its url")
        if self.provider == "responses" and not self.model:
            raise ValueError("provider = 'responses' needs the upstream's model that searches (model)")
        return self


class WebSearchSettings(WebSearchProvider):
    """The ``web_search`` tool: the search engine it asks, per deployment and per tenant, and how
    pages are fetched (the ``[web_search]`` table; docs/web-search.md)."""

    api_key_env: str = "TROUPE_WEB_SEARCH_API_KEY"
    """The environment variable holding the key when ``api_key`` is unset."""
    tenants: dict[str, WebSearchProvider] = {}
    """A tenant's own search engine (``[web_search.tenants.acme]``, the tenant as ``[auth]`` names
    it), instead of the deployment's; ``provider = "none"`` takes the tool away from that tenant.
    Pages are opened alike for all (the settings below)."""
    timeout_s: PositiveFloat = 10.0
    """A search, or a page's fetch, taking longer fails (the model is told)."""
    max_page_bytes: PositiveInt = 2_000_000
    """A page larger than this is not read (the model is told)."""
    user_agent: str = "Troupe-WebSearch/1"
    """The ``User-Agent`` of page fetches, and the name robots.txt rules are matched against."""
    allowed_urls: tuple[str, ...] = ()
    """URL patterns (``*`` wildcards, whole URL) of pages that may be fetched although they are on
    private addresses (the MCP servers' URL policy otherwise refuses loopback, private, link-local
    and metadata addresses); also the env var ``TROUPE_WEB_SEARCH_ALLOWED_URLS`` (comma-separated)."""
    respect_robots: bool = True
    """Honour a site's robots.txt before opening one of its pages."""

    def provider_for(self, tenant: str) -> WebSearchProvider:
        """The search engine ``tenant``'s requests ask: its own, else the deployment's."""
        return self.tenants.get(tenant, self)


class ContainersSettings(BaseModel):
    """Containers: what the Containers API allows, where their files go, how their code runs
    (the ``[containers]`` table; docs/sandbox.md for the sandbox)."""

    model_config = SETTINGS_CONFIG

    directory: str = ""
    """Where the containers' directories go (each container's is ``/mnt/data`` inside its sandbox).
    ``""``: beside the DuckDB file, ``<storage_path>.containers/`` (with ``storage_path =
    ":memory:"``, a temporary directory removed at exit). On the storage actor's node."""
    max_memory_limit: Literal["1g", "4g", "16g", "64g"] = "4g"
    """The largest ``memory_limit`` a container may ask for; more is a 400 naming ``memory_limit``."""
    default_expires_minutes: PositiveInt = 20
    """A container idle this long after its ``last_active_at`` expires, unless its
    ``expires_after`` says otherwise (OpenAI's default: 20 minutes)."""
    max_expires_minutes: PositiveInt = 1440
    """The longest idle time a container's ``expires_after.minutes`` may ask for."""
    max_file_bytes: PositiveInt = 32 * 1024 * 1024
    """The largest upload to a container (``POST /v1/containers/{id}/files``); a larger file
    answers 413 ``file_too_large``."""
    isolation: Literal["bwrap", "none"] = "bwrap"
    """How a container's code is confined (``troupe.sandbox``). ``"bwrap"``: bubblewrap
    namespaces, an unprivileged uid, no network, rlimits; the tools refuse to start without it
    (the message names the package). ``"none"``: a plain subprocess with rlimits only, which
    sees and may change everything the server's user may: for trusted single-user use only."""
    network_allowlists: bool = True
    """Whether a container's ``network_policy`` may be an allowlist of domains (reached through
    the sandbox's egress proxy: public addresses, ports 80 and 443). False: no container has
    network; an allowlist is a 400 naming ``network_policy``."""
    code_tenants: tuple[str, ...] = ("*",)
    """The tenants whose requests may run code (the ``code_interpreter`` tool): ``"*"`` every
    tenant (with no ``[auth]`` keys, the one tenant ``""``); ``[]`` none. Another tenant's
    request offering the tool is a 400 naming ``tools[i].type``, as on a server without it."""
    bwrap: NonEmpty = "bwrap"
    """The bubblewrap executable: a name looked up on PATH, or a path."""
    call_timeout_s: PositiveFloat = 120.0
    """Wall-clock time one run of code (a ``python`` call) or one shell command may take; past
    it, the sandbox kills it (the interpreter restarts: variables go, files stay)."""
    cpu_seconds: PositiveFloat = 60.0
    """CPU time one run may use (RLIMIT_CPU, renewed before each run)."""
    max_processes: PositiveInt = 64
    """Processes and threads a container's code may have at once (RLIMIT_NPROC)."""
    max_disk_bytes: PositiveInt = 1 << 30
    """Disk a container's ``/mnt/data`` may fill (1 GiB); a run that grows it past this is killed."""
    start_timeout_s: PositiveFloat = 60.0
    """How long a new container's actor may wait for a node with room for it (its memory and
    CPUs) and start; past it, the run fails saying so."""
    ray_cpus: NonNegativeFloat = 0.1
    """CPUs each container's actor reserves on Ray (its ``memory`` reservation is its
    ``memory_limit``): how Ray spreads containers over the nodes. The code may use more CPU
    than this; it runs at a lower priority than the server (``nice`` 10)."""
    artifact_max_bytes: PositiveInt = 50 * 1024 * 1024
    """The largest file a completed session turn publishes as an artifact (a copy, docs/sessions.md,
    Artifacts); a larger file the turn wrote is not published."""
    artifact_max_files: PositiveInt = 100
    """The most files one session turn publishes as artifacts (in path order); the rest are not."""

    @model_validator(mode="after")
    def _default_within_the_most(self) -> ContainersSettings:
        if self.default_expires_minutes > self.max_expires_minutes:
            raise ValueError(f"default_expires_minutes ({self.default_expires_minutes}) is more than "
                             f"max_expires_minutes ({self.max_expires_minutes})")  # fmt: skip
        return self


DEFAULT_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(name="calculator", target="troupe.runtime.example_tools:calculator",
             description="Evaluate an arithmetic expression, e.g. '2 * (3 + 4)'.", idempotent=True),
    ToolSpec(name="sleep", target="troupe.runtime.example_tools:sleep",
             description="Wait the given number of milliseconds, then say so.", idempotent=True),
    ToolSpec(name="now", target="troupe.runtime.example_tools:now",
             description="The current date and time in UTC, ISO 8601.", idempotent=True),
)  # fmt: skip


SIM_EMBEDDER = ModelSpec(name="sim-embedding", kind="sim", task="embeddings", dimensions=512)
"""The built-in embedder: always there (not listed by ``/v1/models``), deterministic, nothing to
download; feature hashing of words and word pairs into 512 dimensions (``troupe.rag.embedders``)."""


class RuntimeOptions(BaseModel):
    """The runtime's scalar options (the ``[runtime]`` table)."""

    model_config = SETTINGS_CONFIG

    placement: Literal["replica", "pooled", "dedicated"] = "replica"
    """Which host runs a conversation's turns: ``"replica"``, the ingress replicas themselves (no
    Ray hop per streamed batch; with several, each hosts the threads whose id hashes to it, and a
    turn that arrives at another replica is handed to it); ``"pooled"``, ``pool_size`` host
    actors shared by all conversations and replicas; ``"dedicated"``, an actor per conversation."""
    pool_size: PositiveInt = 4
    """Pooled placement: how many conversation hosts."""
    idle_timeout_s: PositiveFloat = 300.0
    """Dedicated placement: a conversation actor exits after this long without a turn."""
    cache_size: PositiveInt = 1_000
    """Conversations whose message cache a host keeps (least recently used are dropped; a
    dropped one is read back from storage on its next turn). With the default 4 hosts,
    4,000 warm conversations: enough that a 30-minute soak fills it during warm-up and then
    stays flat; at 10,000 each host still grew after half an hour. Raise it with memory."""
    storage_path: NonEmpty = "troupe.duckdb"
    """The DuckDB file; ``:memory:`` keeps history in memory only."""
    storage_memory_limit: Annotated[str, AfterValidator(_memory_size)] = "128MB"
    """DuckDB's ``memory_limit`` in the process that owns the file: its cache of the file's
    blocks, and what a write or a checkpoint holds, stay within it (more spills to
    ``<storage_path>.tmp``). ``""``: DuckDB's default, 80% of the machine's memory, which the
    cache grows towards as history grows. 128MB stores 16 MB requests (about 80 MB of JSON each)."""
    client_tool_status: Literal["completed", "requires_action"] = "completed"
    """Status of a response that stops at client function calls: ``completed`` (what OpenAI
    does) or ``requires_action``."""
    tool_runner: Literal["actor", "task"] = "actor"
    """Where calls of tools whose ToolSpec sets no ``num_cpus`` run. ``"actor"``: in the node's
    long-lived tool runner (async tools on its event loop, sync tools on its threads), so no
    call waits for a process to start. ``"task"``: each call is a Ray task reserving
    ``tool_num_cpus``; a burst after an idle second waits for Ray to start worker processes."""
    tool_num_cpus: NonNegativeFloat = 0.25
    """CPUs each tool *task* reserves unless its ToolSpec says otherwise (0.25 lets 4 run per core)."""
    tool_timeout_s: PositiveFloat = 60.0
    """A tool call taking longer fails with a timeout error (fed back to the model)."""
    namespace: NonEmpty = "troupe"
    """Ray namespace of the named actors (hosts, storage)."""
    event_log_retention_s: PositiveFloat = 7 * 24 * 3600.0
    """How long a stored response's event log (what ``GET ?stream=true`` replays) is kept
    after the response ended; the response itself stays."""
    event_logs: Literal["all", "durable"] = "all"
    """Which stored responses keep their event log (what ``GET ?stream=true`` replays once the
    response has ended): ``all``, or only ``durable`` ones (background, and foreground from
    their first tool step). A log is packed against its Response (``troupe.storage.event_log``):
    about 800 bytes for a 64-token answer; its cost per plain response is in
    ``benchmarks/results/event_logs/``."""
    durable_foreground: bool = True
    """Checkpoint stored foreground responses at every step from their first tool step, so that
    a turn whose host dies goes on in the background. false: only background responses are
    durable (a foreground tool loop then writes nothing before its response)."""
    embedding_model: NonEmpty = "sim-embedding"
    """The embedder a new vector store's chunks are embedded with (a request may name another
    with ``embedding_model``): a ``[[models]]`` entry with ``task = "embeddings"``, or the built-in
    ``sim-embedding`` (feature hashing of words: keyword-like, not semantic). A store keeps the
    embedder it was created with."""
    ingest_num_cpus: NonNegativeFloat = 0.25
    """CPUs each file's ingestion task (parse, chunk, embed) reserves on Ray; 0.25 lets 4 run per
    core. Files are ingested in parallel, across the cluster."""
    resume_within_s: NonNegativeFloat = 24 * 3600.0
    """A durable response whose host died (or whose server stopped) resumes from its last
    checkpoint if it was created less than this long ago; an older one is stored ``failed``.
    0: never resume."""
    credentials_keys: Annotated[tuple[SecretStr, ...], AfterValidator(_fernet_keys)] = ()
    """Keys that seal a durable run's credentials (MCP ``headers`` and ``authorization``) for a
    resumption after a restart (Fernet, from ``cryptography``): the first seals, each opens, so a
    new key goes first and an old one stays until no run sealed with it is left. Set them in the
    environment (``TROUPE_CREDENTIALS_KEYS``, comma-separated), never in a file beside the
    database. Empty (the default): credentials are kept in memory only, and a run resumed after a
    restart that needed them fails, asking for the request again (docs/security.md)."""


class RuntimeSettings(RuntimeOptions):
    """Everything the runtime needs; the embedded defaults need no file."""

    models: tuple[ModelSpec, ...] = (ModelSpec(name="sim", kind="sim"),)
    """The models clients can name."""
    tools: tuple[ToolSpec, ...] = DEFAULT_TOOLS
    """The server-side Python tools."""
    guardrails: tuple[GuardrailSpec, ...] = ()
    """The guardrails requests may run or must run (docs/guardrails.md)."""
    mcp: McpSettings = McpSettings()
    """MCP servers and policy."""
    telemetry: TelemetrySettings = TelemetrySettings()
    """Metrics, traces and hooks."""
    containers: ContainersSettings = ContainersSettings()
    """Containers (the Containers API, ``code_interpreter``): their limits, files and sandbox."""
    webhooks: WebhookSettings = WebhookSettings()
    """Webhook deliveries: their URL policy and retries."""
    web_search: WebSearchSettings = WebSearchSettings()
    """The ``web_search`` tool's provider and page fetches."""
    ingress_replicas: PositiveInt = 1
    """How many ingress replicas share the threads with the ``replica`` placement (``[server]
    num_replicas``): each hosts those whose id hashes to its rank (:mod:`troupe.runtime.ray.replicas`)."""

    @model_validator(mode="after")
    def _judges_are_models(self) -> RuntimeSettings:
        for g in self.guardrails:
            if g.judge_model is not None and self.model(g.judge_model) is None:
                known = ", ".join(repr(m.name) for m in self.models if m.task == "chat")
                raise ValueError(f"guardrail {g.name!r}: judge_model {g.judge_model!r} is not a configured chat "
                                 f"model ({known})")  # fmt: skip
        return self

    def guardrail(self, name: str) -> GuardrailSpec | None:
        """The guardrail called ``name``; None if there is none."""
        return next((g for g in self.guardrails if g.name == name), None)

    def required_guardrails(self, tenant: str, model: str) -> tuple[GuardrailSpec, ...]:
        """The guardrails every request of ``tenant`` to ``model`` runs."""
        return tuple(g for g in self.guardrails if "*" in g.tenants or tenant in g.tenants or model in g.models)

    def model(self, name: str) -> ModelSpec | None:
        """The chat model clients call ``name``; None if there is none (an embedder is none)."""
        return next((m for m in self.models if m.name == name and m.task == "chat"), None)

    def embedder(self, name: str) -> ModelSpec | None:
        """The embedder called ``name``: a ``[[models]]`` entry with ``task = "embeddings"``, or
        the built-in :data:`SIM_EMBEDDER` (unless an entry takes its name); None if there is none."""
        found = next((m for m in self.models if m.name == name), None)
        if found is None and name == SIM_EMBEDDER.name:
            return SIM_EMBEDDER
        return found if found is not None and found.task == "embeddings" else None
