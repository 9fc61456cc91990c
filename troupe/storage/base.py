"""The store's records and errors: what the contract (:mod:`troupe.storage.contract`) takes and returns.

Records: responses (:class:`ResponseRecord`, with :class:`StepTrace` rows), durable runs
(:class:`RunRecord`, :class:`RunStep`), console reads (:class:`ResponseFilter` →
:class:`ResponseSummary` rows, :class:`ResponseStats`, :class:`Turn`), evaluation runs
(:class:`EvalRunRecord`, :class:`EvalResultRecord`), read-only SQL (:class:`QueryResult`) and
list pages (:class:`Page`). The methods that use them are the area protocols'.

Errors::

    StorageError        the backend failed (I/O, corruption, a migration)
    ├── PromptConflict  a prompt updated from a version that is not its latest
    ├── QueryError      a read-only SQL query was refused (not exactly one read-only
    │   │               statement) or failed in DuckDB (bad SQL): the query's fault
    │   └── QueryTimeout    it ran past its timeout and was interrupted
    └── StoreLocked     the DuckDB file is open in another process (DuckDB allows one)
"""

from __future__ import annotations

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
    "StorageUnavailable",
    "StoreLocked",
    "json_value",
    "Turn",
    "quantile",
]

Order = Literal["asc", "desc"]

DEFAULT_MAX_ROWS = 10_000
"""The most rows a read-only SQL query returns unless told otherwise (:meth:`~troupe.storage.contract.Console.run_sql`)."""
DEFAULT_TIMEOUT_S = 10.0
"""How long a read-only SQL query may run unless told otherwise (:meth:`~troupe.storage.contract.Console.run_sql`)."""


class StorageError(Exception):
    """The storage backend failed. Picklable (its args reach ``Exception``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class StorageUnavailable(StorageError):
    """The store could not be reached for a moment (the storage actor was restarting); the
    call may not have run. A read may be made again; the HTTP layer answers 503 with
    ``Retry-After`` (a retry the ``openai`` SDK makes by itself for a GET)."""


class QueryError(StorageError):
    """A read-only SQL query was refused (not exactly one read-only statement), or DuckDB
    rejected it (a syntax error, an unknown column): the query's fault, not the store's."""


class QueryTimeout(QueryError):
    """A read-only SQL query ran past its timeout and was interrupted; nothing was returned."""


class PromptConflict(StorageError):
    """A prompt update from a version that is not its latest (:meth:`~troupe.storage.contract.Prompts.update_prompt`): another
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
    """What a read-only SQL query answered (:meth:`~troupe.storage.contract.Console.run_sql`)."""

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
    """One model call, tool call or guardrail check of a response, timed."""

    response_id: str
    seq: int
    """Position within the response (0, 1, …)."""
    kind: Literal["model", "tool", "guardrail"]
    name: str
    """The model name, the tool name, or the guardrail's name."""
    started_at: float
    """Unix seconds."""
    duration_s: float
    call_id: str | None = None
    ttft_s: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None
    detail: dict[str, Any] | None = None
    """A guardrail check's ``{"stage", "verdict", "categories"}`` (``verdict``: ``passed``,
    ``redacted`` or ``blocked``; ``categories``: those flagged); None for other steps."""


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
        usage = response.get("usage")
        if not isinstance(usage, dict):
            usage = {}
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
    """Which stored responses :meth:`~troupe.storage.contract.Console.find_responses` returns; every field set narrows it."""

    tenant: str | None = None
    """One tenant's responses; None: every tenant's (an operator's view)."""
    model: str | None = None
    """The model the Response names."""
    status: str | None = None
    """The Response's final status (``completed``, ``failed``, …)."""
    since: float | None = None
    """Created at or after (Unix seconds)."""
    until: float | None = None
    """Created before (Unix seconds)."""
    thread_id: str | None = None
    id: str | None = None
    """One response id (of whichever tenant, with ``tenant=None``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseList:
    """One page of :meth:`~troupe.storage.contract.Console.find_responses`."""

    data: list[ResponseSummary]
    has_more: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseStats:
    """What the responses that ended in a time window add up to (:meth:`~troupe.storage.contract.Console.response_stats`)."""

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
    """One response of a thread, with its items (:meth:`~troupe.storage.contract.Console.thread_turns`)."""

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
    """How many times the run was resumed after its host died (:meth:`~troupe.storage.contract.Responses.claim_run`)."""
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
    """``running`` (or interrupted without a chance to say so), ``interrupted``, ``failed`` (an
    error stopped it), ``finished``."""
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
