"""An in-memory :class:`~troupe.storage.base.Store`: for tests and ``--storage :memory:`` style runs.

Everything is kept as JSON text, which gives two properties for free: callers can
never mutate stored state (every read decodes a fresh object), and the store
accepts and returns exactly what :class:`~troupe.storage.duckdb_store.DuckDBStore`
does (tuples come back as lists, a non-JSON value or NaN is a StorageError). It has no
tables, so it runs no SQL: :meth:`InMemoryStore.run_sql` refuses every query.

One long module because it is one class implementing the whole Store contract, the twin of
the DuckDB store that the same conformance suite runs against.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from troupe.protocol.prompts import prompt_object

from . import event_log
from .base import (
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    EvalResultRecord,
    EvalRunRecord,
    Order,
    Page,
    PromptConflict,
    QueryError,
    QueryResult,
    ResponseFilter,
    ResponseList,
    ResponseRecord,
    ResponseStats,
    ResponseSummary,
    RunRecord,
    RunStep,
    StepTrace,
    StorageError,
    Store,
    Turn,
    quantile,
)

__all__ = ["InMemoryStore"]


def _dump(value: Any) -> str:
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise StorageError(f"not storable as JSON: {exc}") from exc


def _check_page_args(limit: int, order: str) -> None:
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if order not in ("asc", "desc"):
        raise ValueError(f"order must be 'asc' or 'desc', got {order!r}")


def _anchor(entries: list[tuple[Any, str | None, str]], after: str, order: Order) -> Any:
    """The key of the first entry with id ``after`` in iteration order (None if absent)."""
    ordered = entries if order == "asc" else reversed(entries)
    return next((key for key, item_id, _ in ordered if item_id == after), None)


def _page(entries: list[tuple[Any, str | None, str]], anchor: Any, limit: int, order: Order) -> Page:
    """A page of ``entries`` (``(sort key, id, JSON)``, ascending by key) after the ``anchor`` key."""
    ordered = entries if order == "asc" else entries[::-1]
    if anchor is not None:
        ordered = [e for e in ordered if (e[0] > anchor if order == "asc" else e[0] < anchor)]
    return Page(data=[json.loads(text) for _, _, text in ordered[:limit]], has_more=len(ordered) > limit)


def _page_after(entries: list[tuple[Any, str | None, str]], after: str | None, limit: int, order: Order) -> Page:
    """Like :func:`_page`, the cursor being an id; an unknown ``after`` gives an empty page."""
    if after is None:
        return _page(entries, None, limit, order)
    anchor = _anchor(entries, after, order)
    return Page(data=[], has_more=False) if anchor is None else _page(entries, anchor, limit, order)


def _selected(summary: ResponseSummary, where: ResponseFilter) -> bool:
    """Whether ``where`` selects the response of ``summary``."""
    return (
        all(
            wanted is None or wanted == value
            for wanted, value in (
                (where.tenant, summary.tenant), (where.model, summary.model), (where.status, summary.status),
                (where.thread_id, summary.thread_id), (where.id, summary.id),
            )
        )  # fmt: skip
        and (where.since is None or summary.created_at >= where.since)
        and (where.until is None or summary.created_at < where.until)
    )


@dataclass(slots=True)
class _Response:
    seq: int
    created_at: float
    model: str | None
    previous_response_id: str | None
    thread_id: str
    response: str
    input_items: list[tuple[str | None, str]]
    """``(id, JSON)`` in input order."""
    output_items: list[str]
    traces: list[StepTrace]
    summary: ResponseSummary
    ended_at: float = 0.0
    events: str | None = None
    """The event log, as JSON."""


@dataclass(slots=True)
class _Conversation:
    conversation: str
    items: list[tuple[int, str | None, str]] = field(default_factory=list)
    """``(seq, id, JSON)`` in append order."""
    next_seq: int = 0

    def append(self, items: Sequence[tuple[str | None, str]]) -> None:
        for item_id, text in items:
            self.items.append((self.next_seq, item_id, text))
            self.next_seq += 1


@dataclass(slots=True)
class _Prompt:
    created_at: float
    default: int
    versions: dict[int, tuple[float, str]] = field(default_factory=dict)
    """version → (created_at, content as JSON)."""

    def object(self, prompt_id: str, version: int) -> dict[str, Any]:
        created_at, content = self.versions[version]
        return prompt_object(prompt_id, version, created_at, json.loads(content), is_default=version == self.default)


def _encode_items(items: Sequence[dict[str, Any]]) -> list[tuple[str | None, str]]:
    return [(item.get("id"), _dump(item)) for item in items]


class InMemoryStore(Store):
    """Dicts behind one lock. See :class:`~troupe.storage.base.Store` for the method contracts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._responses: dict[tuple[str, str], _Response] = {}
        self._conversations: dict[tuple[str, str], _Conversation] = {}
        self._next_seq = 0
        self._runs: dict[tuple[str, str], str] = {}
        """(tenant, response id) → the run's fields as JSON."""
        self._run_steps: dict[tuple[str, str], dict[int, str]] = {}
        """(tenant, response id) → seq → the step's data as JSON."""
        self._prompts: dict[tuple[str, str], _Prompt] = {}
        self._eval_runs: dict[str, str] = {}
        """run_id → the run's fields as JSON."""
        self._eval_results: dict[tuple[str, str, int], str] = {}
        """(run_id, case_id, sample) → the result's fields as JSON."""

    # -- responses ---------------------------------------------------------------

    def write_responses(self, records: Sequence[ResponseRecord]) -> None:
        """See :meth:`Store.write_responses`."""
        with self._lock:
            # Phase 1 validates and encodes everything; phase 2 cannot fail, so a
            # failing batch leaves no trace (the same all-or-none as a rollback).
            try:
                staged = self._stage(records)
            except StorageError:
                raise
            except Exception as exc:  # e.g. a malformed record (no id, an item that is not a dict)
                raise StorageError(f"{type(exc).__name__}: {exc}") from exc
            for record, stored, outputs in staged:
                self._responses[(record.tenant, record.id)] = stored
                self._runs.pop((record.tenant, record.id), None)
                self._run_steps.pop((record.tenant, record.id), None)
                conversation = self._appended_conversation(record)
                if conversation is not None:
                    conversation.append(stored.input_items)
                    conversation.append(outputs)
            self._next_seq += len(staged)

    def _stage(
        self, records: Sequence[ResponseRecord]
    ) -> list[tuple[ResponseRecord, _Response, list[tuple[str | None, str]]]]:
        """Validate and encode ``records`` without touching the store."""
        staged = []
        seen: set[tuple[str, str]] = set()
        for offset, record in enumerate(records):
            response = record.response
            key = (record.tenant, response.get("id"))
            if not isinstance(key[1], str) or key in self._responses or key in seen:
                raise StorageError(f"cannot store response {key[1]!r}: missing or duplicate id")
            if not isinstance(response.get("created_at"), int | float):
                raise StorageError(f"response {key[1]!r} has no numeric created_at")
            seen.add(key)
            outputs = _encode_items(response.get("output") or [])
            stored = _Response(
                seq=self._next_seq + offset,
                created_at=response["created_at"],
                model=response.get("model"),
                previous_response_id=response.get("previous_response_id"),
                thread_id=record.thread_id,
                response=_dump(response),
                input_items=_encode_items(record.input_items),
                output_items=[text for _, text in outputs],
                traces=list(record.traces),
                summary=ResponseSummary.of(record),
                ended_at=record.ended_at,
                events=None if record.events is None else _dump(record.events),
            )
            staged.append((record, stored, outputs))
        return staged

    def _appended_conversation(self, record: ResponseRecord) -> _Conversation | None:
        ref = record.response.get("conversation")
        if not record.append_to_conversation or not isinstance(ref, dict):
            return None
        # A conversation deleted while the response ran gets nothing; the response is still stored.
        return self._conversations.get((record.tenant, ref.get("id")))

    def get_response(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        """See :meth:`Store.get_response`."""
        with self._lock:
            stored = self._responses.get((tenant, response_id))
            return None if stored is None else json.loads(stored.response)

    def get_thread_id(self, tenant: str, response_id: str) -> str | None:
        """See :meth:`Store.get_thread_id`."""
        with self._lock:
            stored = self._responses.get((tenant, response_id))
            return None if stored is None else stored.thread_id

    def delete_response(self, tenant: str, response_id: str) -> bool:
        """See :meth:`Store.delete_response`."""
        with self._lock:
            return self._responses.pop((tenant, response_id), None) is not None

    def list_responses(
        self, tenant: str, *, model: str | None = None, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """See :meth:`Store.list_responses`."""
        _check_page_args(limit, order)
        with self._lock:
            anchor = None
            if after is not None:
                cursor = self._responses.get((tenant, after))
                if cursor is None:
                    return Page(data=[], has_more=False)
                # The cursor need not match the model filter: it only marks a position.
                anchor = (cursor.created_at, cursor.seq)
            entries = sorted(
                ((r.created_at, r.seq), rid, r.response)
                for (t, rid), r in self._responses.items()
                if t == tenant and (model is None or r.model == model)
            )
            return _page(entries, anchor, limit, order)

    def find_responses(self, where: ResponseFilter, *, after: str | None = None, limit: int = 50) -> ResponseList:
        """See :meth:`Store.find_responses`."""
        _check_page_args(limit, "desc")
        with self._lock:
            found = sorted(
                ((r.created_at, r.seq), r.summary)
                for r in self._responses.values()
                if _selected(r.summary, where)
            )[::-1]
            if after is not None:
                cursor = next(
                    (r for (t, rid), r in self._responses.items() if rid == after and where.tenant in (None, t)), None
                )
                if cursor is None:
                    return ResponseList(data=[], has_more=False)
                found = [(key, s) for key, s in found if key < (cursor.created_at, cursor.seq)]
        return ResponseList(data=[s for _, s in found[:limit]], has_more=len(found) > limit)

    def response_stats(self, tenant: str | None, since: float, until: float) -> ResponseStats:
        """See :meth:`Store.response_stats`."""
        with self._lock:
            ended = [
                r.summary for (t, _), r in self._responses.items()
                if tenant in (None, t) and since <= r.ended_at < until
            ]  # fmt: skip
        ttfts = [s.ttft_s for s in ended if s.ttft_s is not None]
        e2es = [s.e2e_s for s in ended]
        statuses = sorted(s.status or "" for s in ended)
        return ResponseStats(
            since=since, until=until, responses=len(ended),
            by_status={status: statuses.count(status) for status in statuses},
            ttft_p50_s=quantile(ttfts, 0.5), ttft_p99_s=quantile(ttfts, 0.99),
            e2e_p50_s=quantile(e2es, 0.5), e2e_p99_s=quantile(e2es, 0.99),
            threads=len({(s.tenant, s.thread_id) for s in ended}),
        )  # fmt: skip

    def thread_turns(self, tenant: str, thread_id: str, *, limit: int = 100) -> list[Turn]:
        """See :meth:`Store.thread_turns`."""
        with self._lock:
            stored = sorted(
                (r for (t, _), r in self._responses.items() if t == tenant and r.thread_id == thread_id),
                key=lambda r: (r.created_at, r.seq),
            )[:limit]
            return [
                Turn(
                    summary=r.summary,
                    input_items=[json.loads(text) for _, text in r.input_items],
                    output_items=[json.loads(text) for text in r.output_items],
                )
                for r in stored
            ]

    def list_input_items(
        self, tenant: str, response_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None:
        """See :meth:`Store.list_input_items`."""
        _check_page_args(limit, order)
        with self._lock:
            stored = self._responses.get((tenant, response_id))
            if stored is None:
                return None
            entries = [(pos, item_id, text) for pos, (item_id, text) in enumerate(stored.input_items)]
            return _page_after(entries, after, limit, order)

    def chain_items(self, tenant: str, response_id: str) -> list[dict[str, Any]] | None:
        """See :meth:`Store.chain_items`."""
        with self._lock:
            if (tenant, response_id) not in self._responses:
                return None
            chain: list[_Response] = []
            visited: set[str] = set()
            current: str | None = response_id
            # Walk back until the first response, a deleted link, or (defensively) a cycle.
            while current is not None and current not in visited and (tenant, current) in self._responses:
                visited.add(current)
                stored = self._responses[(tenant, current)]
                chain.append(stored)
                current = stored.previous_response_id
            texts = [
                t for stored in reversed(chain) for t in [*(t for _, t in stored.input_items), *stored.output_items]
            ]
            return [json.loads(t) for t in texts]

    def prune_event_logs(self, ended_before: float) -> int:
        """See :meth:`Store.prune_event_logs`."""
        with self._lock:
            old = [r for r in self._responses.values() if r.events is not None and r.ended_at < ended_before]
            for stored in old:
                stored.events = None
            return len(old)

    def write_run_progress(self, items: Sequence[RunRecord | RunStep]) -> None:
        """See :meth:`Store.write_run_progress`."""
        try:  # encoded first: a value that is not JSON fails the batch before anything is kept
            encoded = [(item, _dump(dataclasses.asdict(item) if isinstance(item, RunRecord) else item.data))
                       for item in items]  # fmt: skip
        except Exception as exc:
            raise StorageError(f"{type(exc).__name__}: {exc}") from exc
        with self._lock:
            for item, text in encoded:
                if isinstance(item, RunRecord):
                    self._runs[(item.tenant, item.response_id)] = text
                else:
                    self._run_steps.setdefault((item.tenant, item.response_id), {})[item.seq] = text

    def end_run(self, tenant: str, response_id: str) -> None:
        """See :meth:`Store.end_run`."""
        with self._lock:
            self._runs.pop((tenant, response_id), None)
            self._run_steps.pop((tenant, response_id), None)

    def get_run(self, tenant: str, response_id: str) -> RunRecord | None:
        """See :meth:`Store.get_run`."""
        with self._lock:
            encoded = self._runs.get((tenant, response_id))
        return None if encoded is None else RunRecord(**json.loads(encoded))

    def unfinished_runs(self) -> list[RunRecord]:
        """See :meth:`Store.unfinished_runs`."""
        with self._lock:
            runs = [RunRecord(**json.loads(encoded)) for encoded in self._runs.values()]
        return sorted(runs, key=lambda r: r.created_at)

    def claim_run(self, tenant: str, response_id: str, attempt: int) -> RunRecord | None:
        """See :meth:`Store.claim_run`."""
        with self._lock:
            encoded = self._runs.get((tenant, response_id))
            if encoded is None:
                return None
            run = RunRecord(**json.loads(encoded))
            if run.attempt != attempt:
                return None
            claimed = dataclasses.replace(run, attempt=attempt + 1)
            self._runs[(tenant, response_id)] = _dump(dataclasses.asdict(claimed))
            return claimed

    def run_steps(self, tenant: str, response_id: str) -> list[RunStep]:
        """See :meth:`Store.run_steps`."""
        with self._lock:
            steps = sorted(self._run_steps.get((tenant, response_id), {}).items())
        return [RunStep(tenant=tenant, response_id=response_id, seq=seq, data=json.loads(d)) for seq, d in steps]

    def response_events(self, tenant: str, response_id: str) -> list[dict[str, Any]] | None:
        """See :meth:`Store.response_events`."""
        with self._lock:
            stored = self._responses.get((tenant, response_id))
            if stored is None or stored.events is None:
                return None
            return event_log.unpack(json.loads(stored.events), json.loads(stored.response))

    def step_traces(self, tenant: str, response_id: str) -> list[StepTrace]:
        """See :meth:`Store.step_traces`."""
        with self._lock:
            stored = self._responses.get((tenant, response_id))
            # StepTrace is frozen with immutable fields, so sharing instances is safe.
            return [] if stored is None else sorted(stored.traces, key=lambda t: t.seq)

    # -- conversations -----------------------------------------------------------

    def create_conversation(self, tenant: str, conversation: dict[str, Any], items: Sequence[dict[str, Any]]) -> None:
        """See :meth:`Store.create_conversation`.

        Raises:
            StorageError: the id is taken (for this tenant) or a value is not JSON.
        """
        encoded = _dump(conversation)
        encoded_items = _encode_items(items)
        with self._lock:
            key = (tenant, conversation.get("id"))
            if not isinstance(key[1], str) or key in self._conversations:
                raise StorageError(f"cannot create conversation {key[1]!r}: missing or duplicate id")
            stored = _Conversation(conversation=encoded)
            stored.append(encoded_items)
            self._conversations[key] = stored

    def get_conversation(self, tenant: str, conversation_id: str) -> dict[str, Any] | None:
        """See :meth:`Store.get_conversation`."""
        with self._lock:
            stored = self._conversations.get((tenant, conversation_id))
            return None if stored is None else json.loads(stored.conversation)

    def update_conversation(self, tenant: str, conversation_id: str, metadata: dict[str, Any]) -> dict[str, Any] | None:
        """See :meth:`Store.update_conversation`."""
        with self._lock:
            stored = self._conversations.get((tenant, conversation_id))
            if stored is None:
                return None
            conversation = json.loads(stored.conversation)
            conversation["metadata"] = metadata
            stored.conversation = _dump(conversation)
            return json.loads(stored.conversation)

    def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        """See :meth:`Store.delete_conversation`."""
        with self._lock:
            return self._conversations.pop((tenant, conversation_id), None) is not None

    def add_conversation_items(self, tenant: str, conversation_id: str, items: Sequence[dict[str, Any]]) -> bool:
        """See :meth:`Store.add_conversation_items`."""
        encoded = _encode_items(items)
        with self._lock:
            stored = self._conversations.get((tenant, conversation_id))
            if stored is None:
                return False
            stored.append(encoded)
            return True

    def list_conversation_items(
        self, tenant: str, conversation_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None:
        """See :meth:`Store.list_conversation_items`."""
        _check_page_args(limit, order)
        with self._lock:
            stored = self._conversations.get((tenant, conversation_id))
            return None if stored is None else _page_after(stored.items, after, limit, order)

    def get_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> dict[str, Any] | None:
        """See :meth:`Store.get_conversation_item`. With duplicate ids, the earliest item."""
        with self._lock:
            stored = self._conversations.get((tenant, conversation_id))
            if stored is None:
                return None
            text = next((t for _, i, t in stored.items if i == item_id), None)
            return None if text is None else json.loads(text)

    def delete_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> bool:
        """See :meth:`Store.delete_conversation_item`. With duplicate ids, removes them all."""
        with self._lock:
            stored = self._conversations.get((tenant, conversation_id))
            if stored is None:
                return False
            kept = [entry for entry in stored.items if entry[1] != item_id]
            removed = len(kept) != len(stored.items)
            stored.items = kept
            return removed

    def conversation_items(self, tenant: str, conversation_id: str) -> list[dict[str, Any]] | None:
        """See :meth:`Store.conversation_items`."""
        with self._lock:
            stored = self._conversations.get((tenant, conversation_id))
            return None if stored is None else [json.loads(t) for _, _, t in stored.items]

    # -- prompts ---------------------------------------------------------------------

    def create_prompt(self, tenant: str, prompt_id: str, content: dict[str, Any], created_at: float) -> dict[str, Any]:
        """See :meth:`Store.create_prompt`."""
        encoded = _dump(content)
        with self._lock:
            if (tenant, prompt_id) in self._prompts:
                raise StorageError(f"cannot create prompt {prompt_id!r}: duplicate id")
            stored = self._prompts[(tenant, prompt_id)] = _Prompt(created_at=created_at, default=1)
            stored.versions[1] = (created_at, encoded)
            return stored.object(prompt_id, 1)

    def get_prompt(self, tenant: str, prompt_id: str, version: int | None = None) -> dict[str, Any] | None:
        """See :meth:`Store.get_prompt`."""
        with self._lock:
            stored = self._prompts.get((tenant, prompt_id))
            if stored is None:
                return None
            version = stored.default if version is None else version
            return stored.object(prompt_id, version) if version in stored.versions else None

    def list_prompts(self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc") -> Page:
        """See :meth:`Store.list_prompts`."""
        _check_page_args(limit, order)
        with self._lock:
            entries = sorted(
                ((p.created_at, pid), pid, _dump(p.object(pid, p.default)))
                for (t, pid), p in self._prompts.items()
                if t == tenant
            )
            return _page_after(entries, after, limit, order)

    def update_prompt(
        self, tenant: str, prompt_id: str, content: dict[str, Any], *, from_version: int, set_default: bool,
        created_at: float,
    ) -> dict[str, Any] | None:  # fmt: skip
        """See :meth:`Store.update_prompt`."""
        encoded = _dump(content)
        with self._lock:
            stored = self._prompts.get((tenant, prompt_id))
            if stored is None:
                return None
            latest = max(stored.versions)
            if from_version != latest:
                raise PromptConflict(f"version {from_version} of prompt {prompt_id!r} is not its latest ({latest})",
                                     latest)  # fmt: skip
            stored.versions[latest + 1] = (created_at, encoded)
            if set_default:
                stored.default = latest + 1
            return stored.object(prompt_id, latest + 1)

    def set_default_prompt_version(self, tenant: str, prompt_id: str, version: int) -> dict[str, Any] | None:
        """See :meth:`Store.set_default_prompt_version`."""
        with self._lock:
            stored = self._prompts.get((tenant, prompt_id))
            if stored is None or version not in stored.versions:
                return None
            stored.default = version
            return stored.object(prompt_id, version)

    def delete_prompt(self, tenant: str, prompt_id: str) -> bool:
        """See :meth:`Store.delete_prompt`."""
        with self._lock:
            return self._prompts.pop((tenant, prompt_id), None) is not None

    def list_prompt_versions(self, tenant: str, prompt_id: str) -> list[dict[str, Any]] | None:
        """See :meth:`Store.list_prompt_versions`."""
        with self._lock:
            stored = self._prompts.get((tenant, prompt_id))
            return None if stored is None else [stored.object(prompt_id, v) for v in sorted(stored.versions)]

    # -- evaluation runs -----------------------------------------------------------

    def put_eval_run(self, run: EvalRunRecord) -> None:
        """See :meth:`Store.put_eval_run`."""
        encoded = _dump(dataclasses.asdict(run))
        with self._lock:
            self._eval_runs[run.run_id] = encoded

    def get_eval_run(self, run_id: str) -> EvalRunRecord | None:
        """See :meth:`Store.get_eval_run`."""
        with self._lock:
            encoded = self._eval_runs.get(run_id)
        return None if encoded is None else EvalRunRecord(**json.loads(encoded))

    def list_eval_runs(self) -> list[EvalRunRecord]:
        """See :meth:`Store.list_eval_runs`."""
        with self._lock:
            runs = [EvalRunRecord(**json.loads(encoded)) for encoded in self._eval_runs.values()]
        return sorted(runs, key=lambda r: (-r.created_at, r.run_id))

    def write_eval_results(self, results: Sequence[EvalResultRecord]) -> None:
        """See :meth:`Store.write_eval_results`."""
        # Encode everything first: a value that is not JSON fails the batch before any write.
        try:
            staged = [(r.key, _dump(dataclasses.asdict(r))) for r in results]
        except StorageError:
            raise
        except Exception as exc:
            raise StorageError(f"{type(exc).__name__}: {exc}") from exc
        with self._lock:
            self._eval_results.update(staged)

    def eval_results(self, run_id: str) -> list[EvalResultRecord]:
        """See :meth:`Store.eval_results`."""
        with self._lock:
            found = sorted((key, encoded) for key, encoded in self._eval_results.items() if key[0] == run_id)
        return [EvalResultRecord(**json.loads(encoded)) for _, encoded in found]

    # -- read-only SQL -------------------------------------------------------------

    def run_sql(
        self, sql: str, *, max_rows: int = DEFAULT_MAX_ROWS, timeout_s: float | None = DEFAULT_TIMEOUT_S
    ) -> QueryResult:
        """Refused: this store keeps JSON in dicts, not tables (see :meth:`Store.run_sql`).

        Raises:
            QueryError: always.
        """
        raise QueryError("SQL needs the DuckDB store: the in-memory store has no tables to query")
