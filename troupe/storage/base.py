"""The store contract: responses, conversations and step traces, per tenant.

For the operator's console (:mod:`troupe.console`) it answers a few reads across the history:
:meth:`Store.find_responses` (:class:`ResponseFilter` → :class:`ResponseSummary` rows),
:meth:`Store.response_stats` (:class:`ResponseStats` of a time window) and
:meth:`Store.thread_turns` (a conversation's :class:`Turn` objects). These may read every tenant
at once (``tenant=None``): the console only asks so for an admin key.

It also keeps batch evaluation runs and their per-sample results (:class:`EvalRunRecord`,
:class:`EvalResultRecord`; written by ``troupe eval run``, see :mod:`troupe.eval`).

Two implementations pass one conformance suite (``tests/unit/test_store_contract.py``):
:class:`~troupe.storage.memory.InMemoryStore` and
:class:`~troupe.storage.duckdb_store.DuckDBStore`. Methods are synchronous; the
runtime calls them from one dedicated thread (DuckDB allows one writer), batching
writes through :class:`~troupe.storage.group_commit.GroupCommitWriter`.

Every method takes the ``tenant`` (the API key's tenant, ``""`` when auth is
off): a tenant never sees another tenant's objects, which look exactly like
unknown ids.

Lists page the way the OpenAI API does: ``after`` is the id of
the last item of the previous page (exclusive), ``limit`` 1–100, ``order``
``asc`` or ``desc`` (default ``desc``), and a :class:`Page` says ``has_more``.

Read-only SQL (:meth:`Store.run_sql`, for ``troupe sql`` and ``POST /v1/troupe/sql``) spans
every tenant: it is an operator's tool.

Errors::

    StorageError        the backend failed (I/O, corruption, a migration)
    ├── PromptConflict  a prompt updated from a version that is not its latest
    ├── QueryError      a read-only SQL query was refused (not exactly one read-only
    │   │               statement) or failed in DuckDB (bad SQL): the query's fault
    │   └── QueryTimeout    it ran past its timeout and was interrupted
    └── StoreLocked     the DuckDB file is open in another process (DuckDB allows one)
"""

from __future__ import annotations

import abc
import base64
import datetime
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "DEFAULT_MAX_ROWS",
    "DEFAULT_TIMEOUT_S",
    "EvalResultRecord",
    "EvalRunRecord",
    "Order",
    "Page",
    "PromptConflict",
    "QueryError",
    "QueryResult",
    "QueryTimeout",
    "ResponseFilter",
    "ResponseList",
    "ResponseRecord",
    "ResponseStats",
    "ResponseSummary",
    "RunRecord",
    "RunStep",
    "StepTrace",
    "StorageError",
    "Store",
    "StoreLocked",
    "json_value",
    "Turn",
    "quantile",
]

Order = Literal["asc", "desc"]

DEFAULT_MAX_ROWS = 10_000
"""The most rows a read-only SQL query returns unless told otherwise (:meth:`Store.run_sql`)."""
DEFAULT_TIMEOUT_S = 10.0
"""How long a read-only SQL query may run unless told otherwise (:meth:`Store.run_sql`)."""


class StorageError(Exception):
    """The storage backend failed. Picklable (its args reach ``Exception``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class QueryError(StorageError):
    """A read-only SQL query was refused (not exactly one read-only statement), or DuckDB
    rejected it (a syntax error, an unknown column): the query's fault, not the store's."""


class QueryTimeout(QueryError):
    """A read-only SQL query ran past its timeout and was interrupted; nothing was returned."""


class PromptConflict(StorageError):
    """A prompt update from a version that is not its latest (:meth:`Store.update_prompt`): another
    update came first. Picklable: ``latest`` travels with the message."""

    def __init__(self, message: str, latest: int) -> None:
        super().__init__(message)
        self.latest = latest
        """The prompt's latest version, which an update must start from."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message, self.latest))


class StoreLocked(StorageError):
    """The DuckDB file is open in another process (DuckDB lets one process open a file).

    Picklable: ``pid`` travels with the message.
    """

    def __init__(self, message: str, pid: int | None = None) -> None:
        super().__init__(message)
        self.pid = pid
        """The process holding the file, when DuckDB says (it does on Linux and macOS)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message, self.pid))


@dataclass(frozen=True, slots=True, kw_only=True)
class Page:
    """One page of a list."""

    data: list[dict[str, Any]]
    has_more: bool

    @property
    def first_id(self) -> str | None:
        return self.data[0]["id"] if self.data else None

    @property
    def last_id(self) -> str | None:
        return self.data[-1]["id"] if self.data else None

    def to_list_object(self) -> dict[str, Any]:
        """The wire shape: ``{"object": "list", "data", "first_id", "last_id", "has_more"}``."""
        return {
            "object": "list",
            "data": self.data,
            "first_id": self.first_id,
            "last_id": self.last_id,
            "has_more": self.has_more,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryResult:
    """What a read-only SQL query answered (:meth:`Store.run_sql`)."""

    columns: list[str]
    """The column names, in order (two columns may share a name)."""
    types: list[str]
    """DuckDB's name of each column's type: ``VARCHAR``, ``DOUBLE``, ``STRUCT(a INTEGER)``, …"""
    rows: list[tuple[Any, ...]]
    """The rows, as DuckDB's Python values (JSON columns as JSON text)."""
    truncated: bool = False
    """The query had more rows than the row limit; ``rows`` holds the first ones."""

    def to_json_object(self) -> dict[str, Any]:
        """The wire shape (``POST /v1/troupe/sql``): ``{"columns", "types", "rows", "truncated"}``,
        each row an array of JSON values (see :func:`json_value`)."""
        return {
            "columns": list(self.columns),
            "types": list(self.types),
            "rows": [[json_value(v) for v in row] for row in self.rows],
            "truncated": self.truncated,
        }


def json_value(value: Any) -> Any:
    """A DuckDB value as JSON can hold it: dates and times in ISO 8601, an ``INTERVAL`` in
    seconds, a ``BLOB`` in base64, ``NaN`` and infinities as the strings ``"nan"``, ``"inf"``,
    ``"-inf"``, and anything else JSON has no type for (``DECIMAL``, ``UUID``) as its text."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return str(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTrace:
    """One model call or tool call of a response, timed."""

    response_id: str
    seq: int
    """Position within the response (0, 1, …)."""
    kind: Literal["model", "tool"]
    name: str
    """The model name, or the tool name."""
    started_at: float
    """Unix seconds."""
    duration_s: float
    call_id: str | None = None
    ttft_s: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseRecord:
    """A finished response, written in one transaction with everything that goes with it."""

    tenant: str
    response: dict[str, Any]
    """The full Response JSON, as served by GET."""
    input_items: list[dict[str, Any]]
    """This request's accepted input items (normalized, each with an ``id``)."""
    thread_id: str
    """The conversation id, or the id of the first response of a previous_response_id chain."""
    started_at: float
    """Unix seconds when the request arrived."""
    ended_at: float
    ttft_s: float | None = None
    """Seconds from arrival to the first output event, when streamed."""
    traces: list[StepTrace] = field(default_factory=list)
    append_to_conversation: bool = True
    """With ``response["conversation"]``: append the input and output items to it."""
    events: dict[str, Any] | list[dict[str, Any]] | None = None
    """The response's wire events (its event log, which ``GET ?stream=true`` replays), packed
    against :attr:`response` (:func:`troupe.storage.event_log.pack`; a list: the events
    themselves, as records written before packing existed); None: none kept (see the
    ``event_logs`` setting)."""

    @property
    def id(self) -> str:
        return self.response["id"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseSummary:
    """A stored response as the console lists it: its row of ``responses``, without the JSON."""

    tenant: str
    id: str
    created_at: float
    """Unix seconds (the Response's ``created_at``)."""
    model: str | None
    status: str | None
    thread_id: str
    conversation_id: str | None = None
    previous_response_id: str | None = None
    started_at: float
    """Unix seconds when the request arrived."""
    ended_at: float
    ttft_s: float | None = None
    e2e_s: float
    """``ended_at - started_at``."""
    input_tokens: int | None = None
    output_tokens: int | None = None
    error_code: str | None = None

    @classmethod
    def of(cls, record: ResponseRecord) -> ResponseSummary:
        """The summary of a record, as a store keeps it (the same values as DuckDB's columns)."""
        response = record.response
        usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
        conversation, error = response.get("conversation"), response.get("error")
        return cls(
            tenant=record.tenant,
            id=response["id"],
            created_at=response["created_at"],
            model=response.get("model"),
            status=response.get("status"),
            thread_id=record.thread_id,
            conversation_id=conversation.get("id") if isinstance(conversation, dict) else None,
            previous_response_id=response.get("previous_response_id"),
            started_at=record.started_at,
            ended_at=record.ended_at,
            ttft_s=record.ttft_s,
            e2e_s=record.ended_at - record.started_at,
            input_tokens=usage.get("input_tokens"),
            output_tokens=usage.get("output_tokens"),
            error_code=error.get("code") if isinstance(error, dict) else None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseFilter:
    """Which stored responses :meth:`Store.find_responses` returns; every field set narrows it."""

    tenant: str | None = None
    """One tenant's responses; None: every tenant's (an operator's view)."""
    model: str | None = None
    status: str | None = None
    since: float | None = None
    """Created at or after (Unix seconds)."""
    until: float | None = None
    """Created before (Unix seconds)."""
    thread_id: str | None = None
    id: str | None = None
    """One response id (of whichever tenant, with ``tenant=None``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseList:
    """One page of :meth:`Store.find_responses`."""

    data: list[ResponseSummary]
    has_more: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseStats:
    """What the responses that ended in a time window add up to (:meth:`Store.response_stats`)."""

    since: float
    until: float
    responses: int
    by_status: dict[str, int]
    """Responses per final status (``completed``, ``failed``, …)."""
    ttft_p50_s: float | None = None
    """Percentiles interpolate linearly between the closest ranks (:func:`quantile`); None
    without values (a non-streamed response has no time to first token)."""
    ttft_p99_s: float | None = None
    e2e_p50_s: float | None = None
    e2e_p99_s: float | None = None
    threads: int = 0
    """Distinct conversations and ``previous_response_id`` chains among them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    """One response of a thread, with its items (:meth:`Store.thread_turns`)."""

    summary: ResponseSummary
    input_items: list[dict[str, Any]]
    output_items: list[dict[str, Any]]


def quantile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0–1) of ``values``, interpolating linearly between the closest ranks
    (numpy's default, DuckDB's ``quantile_cont``); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """A background response accepted and not yet stored (a row of ``runs``). Storing the
    response ends it; one left behind by a host that died was lost."""

    tenant: str
    response_id: str
    thread_id: str
    created_at: int
    request: dict[str, Any]
    """The create request's body (what a parser accepts again), without its credentials
    (:func:`troupe.storage.credentials.withhold`): they never reach disk in plain text."""
    attempt: int = 0
    """How many times the run was resumed after its host died (:meth:`Store.claim_run`)."""
    credentials: str | None = None
    """What the row keeps of the credentials :attr:`request` was stripped of
    (:mod:`troupe.storage.credentials`): None, it carried none; ``in-memory``, nothing (the
    runtime that started the run holds them); ``fernet:<token>``, them, sealed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStep:
    """One step boundary of a background run (a row of ``run_steps``): a checkpoint.

    A run's steps, in ``seq`` order, are what a resumed run rebuilds its loop from
    (:mod:`troupe.agentloop.checkpoint`). Storing the response deletes them.
    """

    tenant: str
    response_id: str
    seq: int
    """0, 1, 2, … within the run."""
    data: dict[str, Any]
    """The step as JSON: its kind, its outcome, the wire events and step traces since the previous step."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalRunRecord:
    """One batch evaluation run (a row of ``eval_runs``); written again as the run progresses."""

    run_id: str
    created_at: float
    """Unix seconds when the run was first started."""
    dataset: str
    """Where the cases came from (the dataset path as given)."""
    dataset_sha256: str = ""
    """Digest of the dataset file, to tell when a resumed run's dataset changed."""
    cases: int = 0
    samples: int = 1
    """Samples per case (for pass@k / pass^k)."""
    model: str | None = None
    """The ``--model`` every case ran with, or None when each case named its own."""
    status: str = "running"
    """``running`` (or interrupted without a chance to say so), ``interrupted``, ``finished``."""
    finished_at: float | None = None
    options: dict[str, Any] = field(default_factory=dict)
    """The run's other options (concurrency, timeout, judge model, Ray address, …), as JSON."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalResultRecord:
    """One sample of one case of an evaluation run (a row of ``eval_results``).

    ``passed`` is the verdict of all the case's graders together; ``grades`` holds
    each grader's own (``{"grader", "passed", "detail"}``). A sample that could not
    be graded (a crash, a timeout, a failed model call) has ``error_kind`` set and
    ``passed`` False.
    """

    run_id: str
    case_id: str
    sample: int
    passed: bool
    model: str | None = None
    tags: list[str] = field(default_factory=list)
    grades: list[dict[str, Any]] = field(default_factory=list)
    response_id: str | None = None
    """The stored response (``responses.id``, and its ``step_traces``); None if nothing was stored."""
    status: str | None = None
    """The response's status (``completed``, ``incomplete``, ``failed``)."""
    output_text: str | None = None
    ttft_s: float | None = None
    """Seconds to the first output event (text, reasoning or tool-call arguments)."""
    e2e_s: float | None = None
    """Seconds from the start of the case to the end of its response."""
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    tool_calls: int = 0
    tools_called: list[str] = field(default_factory=list)
    """The names of the tools called, in call order."""
    node_id: str | None = None
    """The Ray node the case ran on."""
    error_kind: str | None = None
    """``timeout``, ``model_error``, ``invalid_request``, ``grader_error``, ``crash``; None when it ran."""
    error_message: str | None = None
    started_at: float | None = None
    ended_at: float | None = None

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.run_id, self.case_id, self.sample)


class Store(abc.ABC):
    """Where responses, conversations and traces live."""

    # -- responses ---------------------------------------------------------------

    @abc.abstractmethod
    def write_responses(self, records: Sequence[ResponseRecord]) -> None:
        """Store finished responses, atomically (all or none).

        Each record writes the response, its input items, its output items, its
        step traces and, for a conversation response, appends input then output
        items to the conversation (in that order, after its existing items).

        All or none is what lets the group commit writer isolate a record the
        store refuses: it writes the rest of a failed batch again, in parts.

        Raises:
            StorageError: nothing was written.
        """

    @abc.abstractmethod
    def get_response(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        """The stored Response JSON, or None if unknown (or another tenant's)."""

    @abc.abstractmethod
    def get_thread_id(self, tenant: str, response_id: str) -> str | None:
        """The thread a stored response belongs to, or None if unknown."""

    @abc.abstractmethod
    def delete_response(self, tenant: str, response_id: str) -> bool:
        """Delete a response and its items/traces; False if unknown.

        Conversation items it appended stay in the conversation.
        """

    @abc.abstractmethod
    def list_responses(
        self, tenant: str, *, model: str | None = None, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """Stored responses (full Response JSON), by creation time, optionally of one model."""

    @abc.abstractmethod
    def find_responses(self, where: ResponseFilter, *, after: str | None = None, limit: int = 50) -> ResponseList:
        """Summaries of the stored responses ``where`` selects, newest ``created_at`` first.

        Args:
            where: the filter; ``where.tenant`` None reads every tenant (the console asks so
                only for an admin key).
            after: the id of the last summary of the previous page (exclusive); an id the
                filter's tenant(s) do not have gives an empty page.
            limit: 1 or more.

        Returns:
            The page, and whether more follow.
        """

    @abc.abstractmethod
    def response_stats(self, tenant: str | None, since: float, until: float) -> ResponseStats:
        """What the responses that ended in ``[since, until)`` (Unix seconds) add up to; of every
        tenant when ``tenant`` is None."""

    @abc.abstractmethod
    def thread_turns(self, tenant: str, thread_id: str, *, limit: int = 100) -> list[Turn]:
        """The first ``limit`` stored responses of a thread (their ``thread_id``: a conversation
        id, or the id a ``previous_response_id`` chain shares), oldest first, each with its input
        and output items ([] for an unknown thread)."""

    @abc.abstractmethod
    def list_input_items(
        self, tenant: str, response_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None:
        """A response's input items; None if the response is unknown."""

    @abc.abstractmethod
    def chain_items(self, tenant: str, response_id: str) -> list[dict[str, Any]] | None:
        """History for ``previous_response_id=response_id``.

        The input and output items of every response of the chain ending at
        ``response_id`` (following ``previous_response_id`` links back to the
        first, or to a deleted link), oldest first: for each response its input
        items then its output items. None if ``response_id`` is unknown.
        """

    @abc.abstractmethod
    def response_events(self, tenant: str, response_id: str) -> list[dict[str, Any]] | None:
        """A stored response's event log (:attr:`ResponseRecord.events`), as its wire events in
        order; None if it kept none."""

    @abc.abstractmethod
    def prune_event_logs(self, ended_before: float) -> int:
        """Drop the event logs of responses that ended before ``ended_before`` (Unix seconds); how many."""

    # -- background runs ---------------------------------------------------------

    def start_run(self, run: RunRecord) -> None:
        """Record a durable run as accepted; :meth:`write_responses` of its response ends it."""
        self.write_run_progress([run])

    @abc.abstractmethod
    def end_run(self, tenant: str, response_id: str) -> None:
        """Forget a run whose response will never be stored (its request was refused)."""

    @abc.abstractmethod
    def get_run(self, tenant: str, response_id: str) -> RunRecord | None:
        """The run of ``response_id`` if it has not been stored yet."""

    @abc.abstractmethod
    def unfinished_runs(self) -> list[RunRecord]:
        """Every run whose response is not stored yet, oldest first."""

    @abc.abstractmethod
    def claim_run(self, tenant: str, response_id: str, attempt: int) -> RunRecord | None:
        """Take a lost run over to resume it: its record with ``attempt + 1``, if its attempt
        is still ``attempt``; None if another caller took it first (or it has ended)."""

    def checkpoint_run(self, step: RunStep) -> None:
        """Append a step of a run (one with a ``runs`` row); each ``seq`` is written once."""
        self.write_run_progress([step])

    @abc.abstractmethod
    def write_run_progress(self, items: Sequence[RunRecord | RunStep]) -> None:
        """Start runs (a :class:`RunRecord` each) and append their steps (:class:`RunStep`), in one
        transaction: all or none (many runs' checkpoints are committed together).

        Raises:
            StorageError: nothing of ``items`` was written.
        """

    @abc.abstractmethod
    def run_steps(self, tenant: str, response_id: str) -> list[RunStep]:
        """A run's steps in ``seq`` order ([] if it has none)."""

    @abc.abstractmethod
    def step_traces(self, tenant: str, response_id: str) -> list[StepTrace]:
        """A response's step traces in ``seq`` order ([] if unknown)."""

    # -- conversations -----------------------------------------------------------

    @abc.abstractmethod
    def create_conversation(self, tenant: str, conversation: dict[str, Any], items: Sequence[dict[str, Any]]) -> None:
        """Store a new ``Conversation`` object (``{"id", "object", "created_at", "metadata"}``) and its first items."""

    @abc.abstractmethod
    def get_conversation(self, tenant: str, conversation_id: str) -> dict[str, Any] | None:
        """The Conversation object, or None."""

    @abc.abstractmethod
    def update_conversation(self, tenant: str, conversation_id: str, metadata: dict[str, Any]) -> dict[str, Any] | None:
        """Replace its metadata; the updated Conversation, or None if unknown."""

    @abc.abstractmethod
    def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        """Delete a conversation and its items; False if unknown."""

    @abc.abstractmethod
    def add_conversation_items(self, tenant: str, conversation_id: str, items: Sequence[dict[str, Any]]) -> bool:
        """Append items (each with an ``id``) after the existing ones; False if the conversation is unknown."""

    @abc.abstractmethod
    def list_conversation_items(
        self, tenant: str, conversation_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None:
        """A page of the conversation's items in append order; None if unknown."""

    @abc.abstractmethod
    def get_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> dict[str, Any] | None:
        """One item, or None if the conversation or the item is unknown."""

    @abc.abstractmethod
    def delete_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> bool:
        """Remove one item; False if the conversation or the item is unknown."""

    @abc.abstractmethod
    def conversation_items(self, tenant: str, conversation_id: str) -> list[dict[str, Any]] | None:
        """Every item of the conversation in append order (the loop's history); None if unknown."""

    # -- prompts -------------------------------------------------------------------
    # A prompt and each of its versions as the Prompts API shows them (``troupe.protocol.prompts.
    # prompt_object``): ``{"id", "object": "prompt", "version", "created_at", "prompt",
    # "messages", "variables", "is_default"}``. ``content`` is ``{"prompt", "messages", "variables"}``.

    @abc.abstractmethod
    def create_prompt(self, tenant: str, prompt_id: str, content: dict[str, Any], created_at: float) -> dict[str, Any]:
        """Store a new prompt with ``content`` as its version 1, the default; that version.

        Raises:
            StorageError: the id is taken (for this tenant), or the content is not JSON.
        """

    @abc.abstractmethod
    def get_prompt(self, tenant: str, prompt_id: str, version: int | None = None) -> dict[str, Any] | None:
        """A version of a prompt (None: its default version); None if either is unknown."""

    @abc.abstractmethod
    def list_prompts(self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc") -> Page:
        """The tenant's prompts, each as its default version, by the prompt's creation time
        (``after``: a prompt id; an unknown one gives an empty page)."""

    @abc.abstractmethod
    def update_prompt(
        self, tenant: str, prompt_id: str, content: dict[str, Any], *, from_version: int, set_default: bool,
        created_at: float,
    ) -> dict[str, Any] | None:  # fmt: skip
        """Add a version (the latest + 1) with ``content``, the default if ``set_default``; that
        version. None if the prompt is unknown.

        Raises:
            PromptConflict: ``from_version`` is not the latest version (another update came
                first); nothing was written.
        """

    @abc.abstractmethod
    def set_default_prompt_version(self, tenant: str, prompt_id: str, version: int) -> dict[str, Any] | None:
        """Make ``version`` the prompt's default; that version. None if the prompt or the version is unknown."""

    @abc.abstractmethod
    def delete_prompt(self, tenant: str, prompt_id: str) -> bool:
        """Delete a prompt and all its versions; False if unknown."""

    @abc.abstractmethod
    def list_prompt_versions(self, tenant: str, prompt_id: str) -> list[dict[str, Any]] | None:
        """Every version of a prompt, oldest first; None if the prompt is unknown."""

    # -- evaluation runs -----------------------------------------------------------
    # Not per tenant: evaluation is an operator's tool. The responses a run stores
    # belong to the tenant the run used (``""``).

    @abc.abstractmethod
    def put_eval_run(self, run: EvalRunRecord) -> None:
        """Create the run, or replace the stored row of the same ``run_id`` (its results stay).

        Raises:
            StorageError: a value is not storable (e.g. ``options`` not JSON).
        """

    @abc.abstractmethod
    def get_eval_run(self, run_id: str) -> EvalRunRecord | None:
        """The run, or None if unknown."""

    @abc.abstractmethod
    def list_eval_runs(self) -> list[EvalRunRecord]:
        """Every run, newest ``created_at`` first."""

    @abc.abstractmethod
    def write_eval_results(self, results: Sequence[EvalResultRecord]) -> None:
        """Store results atomically (all or none).

        A result with the same ``(run_id, case_id, sample)`` as a stored one (or as
        an earlier one of the same batch) replaces it: a sample has one result.

        Raises:
            StorageError: nothing was written.
        """

    @abc.abstractmethod
    def eval_results(self, run_id: str) -> list[EvalResultRecord]:
        """A run's results ordered by ``(case_id, sample)``; [] if the run has none."""

    # -- read-only SQL -------------------------------------------------------------

    @abc.abstractmethod
    def run_sql(
        self, sql: str, *, max_rows: int = DEFAULT_MAX_ROWS, timeout_s: float | None = DEFAULT_TIMEOUT_S
    ) -> QueryResult:
        """Run one read-only SQL statement over everything stored (every tenant's).

        Args:
            sql: one SELECT (also ``WITH …``, ``FROM …``, ``VALUES``), DESCRIBE, SHOW,
                SUMMARIZE, or EXPLAIN [ANALYZE] of one of those; a trailing ``;`` is fine.
            max_rows: the most rows returned; a query with more sets ``truncated``.
            timeout_s: the query is interrupted once it has run this long; None: never.

        Returns:
            The columns, their types and the rows.

        Raises:
            QueryTimeout: the query ran past ``timeout_s``.
            QueryError: not exactly one read-only statement, or the database rejected it
                (or this store cannot run SQL at all).
            StorageError: the store failed (closed, I/O).
            ValueError: ``max_rows`` < 1 or ``timeout_s`` <= 0.
        """

    # -- lifecycle ---------------------------------------------------------------

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (files, connections)."""
