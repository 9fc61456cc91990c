"""The responses and runs area in DuckDB (:class:`~troupe.storage.contract.Responses`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import duckdb

from troupe.protocol.webhooks import EVENT_TYPE_OF_RESPONSE_STATUS

from .. import event_log, schema
from ..base import Order, Page, ResponseRecord, RunRecord, RunStep, StepTrace
from ..contract import Responses
from .connection import check_page_args
from .webhooks import WebhookEvent, WebhookTables

__all__ = ["ResponseTables"]

# One link of a previous_response_id chain (see ResponseTables.chain_items).
_PREVIOUS = "SELECT previous_response_id FROM responses WHERE tenant = ? AND id = ?"


class ResponseTables(WebhookTables, Responses):
    """The responses and runs area in DuckDB (:class:`~troupe.storage.contract.Responses`)."""

    def write_responses(
        self, records: Sequence[ResponseRecord], *, journal_lsn: int | None = None, journal: str = ""
    ) -> None:
        """See :meth:`Responses.write_responses`. One transaction for the whole batch.

        ``journal_lsn``: the records come from the response journal named ``journal``
        (:mod:`troupe.storage.journal`; ``""`` is the storage actor's own), the last of them
        with this log sequence number; stored as :meth:`journal_lsn` in the same transaction.
        """
        if not records:
            return
        on_commit: list[Callable[[], None]] = []
        with self._transaction(on_commit) as conn:
            seq = self._next_response_seq
            # Rows of responses, response_items, step_traces, conversation_items and response_events.
            responses: list[tuple[Any, ...]] = []
            items: list[tuple[Any, ...]] = []
            traces: list[tuple[Any, ...]] = []
            appended: list[tuple[Any, ...]] = []
            logs: list[tuple[Any, ...]] = []
            parts: list[tuple[int, int, str]] = []
            next_seq: dict[tuple[str, str], int | None] = {}
            for offset, record in enumerate(records):
                rid = record.response.get("id")
                row = schema.response_row(record, seq + offset)
                responses.append((*row[:-2], *self._stored(row[-2], parts)))
                # Each item is encoded once, for response_items and the conversation alike.
                encoded = {
                    role: [(item.get("id"), schema.dump_json(item)) for item in role_items]
                    for role, role_items in (
                        ("input", record.input_items),
                        ("output", record.response.get("output") or []),
                    )
                }
                for role, role_items in encoded.items():
                    items.extend(
                        (record.tenant, rid, role, pos, iid, *self._stored(text, parts))
                        for pos, (iid, text) in enumerate(role_items)
                    )
                traces.extend(schema.trace_row(record.tenant, t) for t in record.traces)
                if record.events is not None:
                    events = self._stored(schema.dump_json(record.events), parts)
                    logs.append((record.tenant, rid, *events, record.ended_at))
                conversation_id = schema.nested(record.response, "conversation", "id")
                if record.append_to_conversation and conversation_id is not None:
                    key = (record.tenant, conversation_id)
                    if key not in next_seq:
                        next_seq[key] = self._next_conversation_seq(conn, key)
                    start = next_seq[key]
                    if start is None:
                        continue  # deleted while the response ran: the response is still stored
                    added = [*encoded["input"], *encoded["output"]]
                    # A copy of its own: deleting the response leaves the conversation whole.
                    appended.extend(
                        (*key, start + i, iid, *self._stored(text, parts)) for i, (iid, text) in enumerate(added)
                    )
                    next_seq[key] = start + len(added)
            self._append(conn, "responses", schema.RESPONSE_COLUMNS, responses)
            self._append(conn, "response_items", schema.ITEM_COLUMNS, items)
            self._append(conn, "step_traces", schema.TRACE_COLUMNS, traces)
            self._append(conn, "conversation_items", schema.CONVERSATION_ITEM_COLUMNS, appended)
            self._append(conn, "response_events", schema.EVENT_LOG_COLUMNS, logs)
            ended = self._end_runs(conn, records)
            if self._webhook_subscribers:  # the outbox, for background responses' endpoints
                self._add_deliveries(conn, _webhook_events(records), on_commit)
            self._append(conn, "value_parts", schema.PART_COLUMNS, parts)
            if journal_lsn is not None:
                conn.execute(
                    "INSERT INTO journal_positions VALUES (?, ?) ON CONFLICT (journal) "
                    "DO UPDATE SET applied_lsn = greatest(applied_lsn, excluded.applied_lsn)",
                    [journal, journal_lsn],
                )
            on_commit.append(lambda: self._advance(seq + len(records), next_seq, ended))

    def _advance(
        self, next_response_seq: int, conversation_seqs: dict[tuple[str, str], int | None], runs_ended: int
    ) -> None:
        """Move the counters past a committed batch of responses (under the lock)."""
        self._next_response_seq = next_response_seq
        self._open_runs -= runs_ended
        for key, start in conversation_seqs.items():
            if start is not None:
                self._remember_conversation_seq(key, start)

    def get_response(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        """See :meth:`Responses.get_response`."""
        sql = "SELECT response, response_parts FROM responses WHERE tenant = ? AND id = ?"
        rows = self._fetch_values(sql, [tenant, response_id])
        return rows[0][0] if rows else None

    def get_thread_id(self, tenant: str, response_id: str) -> str | None:
        """See :meth:`Responses.get_thread_id`."""
        row = self._fetchone("SELECT thread_id FROM responses WHERE tenant = ? AND id = ?", [tenant, response_id])
        return None if row is None else row[0]

    def delete_response(self, tenant: str, response_id: str) -> bool:
        """See :meth:`Responses.delete_response`."""
        key = [tenant, response_id]
        with self._transaction() as conn:
            sql = "DELETE FROM responses WHERE tenant = ? AND id = ? RETURNING response_parts"
            found = self._delete_returning_parts(conn, sql, key)
            for table, parts in (("response_items", "item_parts"), ("response_events", "events_parts")):
                sql = f"DELETE FROM {table} WHERE tenant = ? AND response_id = ? RETURNING {parts}"
                self._delete_returning_parts(conn, sql, key)
            conn.execute("DELETE FROM step_traces WHERE tenant = ? AND response_id = ?", key)
        return found > 0

    def list_responses(
        self, tenant: str, *, model: str | None = None, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """See :meth:`Responses.list_responses`. An unknown ``after`` gives an empty page."""
        check_page_args(limit, order)
        anchor = None
        if after is not None:
            # The cursor need not match the model filter: it only marks a position.
            row = self._fetchone("SELECT created_at, id FROM responses WHERE tenant = ? AND id = ?", [tenant, after])
            if row is None:
                return Page(data=[], has_more=False)
            anchor = row
        where, params = "tenant = ?", [tenant]
        if model is not None:
            where, params = where + " AND model = ?", [*params, model]
        # The id breaks ties between equal created_at (whole seconds on the wire): ids sort in
        # creation order (troupe.protocol.ids), to the millisecond across processes. Not seq, the
        # order rows reached the store: with several ingress replicas each ships its own journal,
        # so a response made later on one may arrive before one made earlier on another.
        keys = ("created_at", "id")
        return self._paged("responses", where, params, keys, anchor, limit, order, "response, response_parts")

    def list_input_items(
        self, tenant: str, response_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None:
        """See :meth:`Responses.list_input_items`. An unknown ``after`` gives an empty page."""
        check_page_args(limit, order)
        if self._fetchone("SELECT 1 FROM responses WHERE tenant = ? AND id = ?", [tenant, response_id]) is None:
            return None
        where = "tenant = ? AND response_id = ? AND role = 'input'"
        return self._item_page("response_items", where, [tenant, response_id], "position", after, limit, order)

    def chain_items(self, tenant: str, response_id: str) -> list[dict[str, Any]] | None:
        """See :meth:`Responses.chain_items`.

        The links are followed one lookup by id at a time. Response ids grow in time order, so
        DuckDB reads only the few row groups whose min/max admit the id (3 of 135 at 250,000
        responses): the cost grows with the chain, not with the history. A recursive query
        joined the whole table once per link instead (32 ms for two turns there, against 5).
        """
        order: list[str] = []
        seen: set[str] = set()
        with self._locked() as conn:
            current: str | None = response_id
            while current is not None and current not in seen:  # a (corrupt) cycle stops
                row = conn.execute(_PREVIOUS, [tenant, current]).fetchone()
                if row is None:
                    break  # unknown, or deleted mid-chain: the chain starts after it
                order.append(current)
                seen.add(current)
                current = row[0]
        if not order:
            return None
        rank = {rid: -i for i, rid in enumerate(order)}  # oldest first
        rows = self._fetch_values(
            "SELECT response_id, role, position, item, item_parts FROM response_items"
            f" WHERE tenant = ? AND response_id IN ({', '.join('?' * len(order))})",
            [tenant, *order],
        )
        rows.sort(key=lambda r: (rank[r[0]], r[1] != "input", r[2]))
        return [r[3] for r in rows]

    def prune_event_logs(self, ended_before: float) -> int:
        """See :meth:`Responses.prune_event_logs`."""
        sql = "DELETE FROM response_events WHERE ended_at < ? RETURNING events_parts"
        with self._transaction() as conn:
            return self._delete_returning_parts(conn, sql, [ended_before])

    def response_events(self, tenant: str, response_id: str) -> list[dict[str, Any]] | None:
        """See :meth:`Responses.response_events`."""
        sql = "SELECT events, events_parts FROM response_events WHERE tenant = ? AND response_id = ?"
        rows = self._fetch_values(sql, [tenant, response_id])
        response = self.get_response(tenant, response_id) if rows else None
        return event_log.unpack(rows[0][0], response) if rows and response is not None else None

    def step_traces(self, tenant: str, response_id: str) -> list[StepTrace]:
        """See :meth:`Responses.step_traces`."""
        rows = self._fetchall(
            "SELECT response_id, seq, kind, name, call_id, started_at, duration_s, ttft_s, input_tokens, output_tokens,"
            " error, detail FROM step_traces WHERE tenant = ? AND response_id = ? ORDER BY seq",
            [tenant, response_id],
        )
        fields = ("response_id", "seq", "kind", "name", "call_id", "started_at", "duration_s", "ttft_s",
                  "input_tokens", "output_tokens", "error")  # fmt: skip
        return [
            StepTrace(**dict(zip(fields, row[:-1], strict=True)), detail=None if row[-1] is None else json.loads(row[-1]))
            for row in rows
        ]

    def _end_runs(self, conn: duckdb.DuckDBPyConnection, records: Sequence[ResponseRecord]) -> int:
        """Delete the runs of ``records`` (inside their transaction); how many there were."""
        if not self._open_runs:
            return 0
        keys = [[r.tenant, r.id] for r in records]
        ended = conn.execute(
            "DELETE FROM runs WHERE [tenant, response_id] IN (SELECT unnest(?)) RETURNING request_parts", [keys]
        ).fetchall()
        if ended:
            steps = conn.execute(
                "DELETE FROM run_steps WHERE [tenant, response_id] IN (SELECT unnest(?)) RETURNING step_parts", [keys]
            ).fetchall()
            self._delete_parts(conn, ended + steps)
        return len(ended)

    def write_run_progress(self, items: Sequence[RunRecord | RunStep]) -> None:
        """See :meth:`Responses.write_run_progress`."""
        on_commit: list[Callable[[], None]] = []
        with self._transaction(on_commit) as conn:
            parts: list[tuple[int, int, str]] = []
            runs, steps = [], []
            for item in items:
                if isinstance(item, RunRecord):
                    request = self._stored(schema.dump_json(item.request), parts)
                    runs.append((item.tenant, item.response_id, item.thread_id, item.created_at, *request, item.attempt,
                                 item.credentials))  # fmt: skip
                else:
                    steps.append((item.tenant, item.response_id, item.seq, *self._stored(schema.dump_json(item.data), parts)))
            self._append(conn, "runs", schema.RUN_COLUMNS, runs)
            self._append(conn, "run_steps", schema.RUN_STEP_COLUMNS, steps)
            self._append(conn, "value_parts", schema.PART_COLUMNS, parts)
            on_commit.append(lambda: self._count_runs(len(runs)))

    def _count_runs(self, started: int) -> None:
        self._open_runs += started

    def end_run(self, tenant: str, response_id: str) -> None:
        """See :meth:`Responses.end_run`."""
        on_commit: list[Callable[[], None]] = []
        key = [tenant, response_id]
        with self._transaction(on_commit) as conn:
            sql = "DELETE FROM runs WHERE tenant = ? AND response_id = ? RETURNING request_parts"
            ended = self._delete_returning_parts(conn, sql, key)
            sql = "DELETE FROM run_steps WHERE tenant = ? AND response_id = ? RETURNING step_parts"
            self._delete_returning_parts(conn, sql, key)
            on_commit.append(lambda: self._advance(self._next_response_seq, {}, ended))

    def get_run(self, tenant: str, response_id: str) -> RunRecord | None:
        """See :meth:`Responses.get_run`."""
        found = [r for r in self._runs("WHERE tenant = ? AND response_id = ?", [tenant, response_id])]
        return found[0] if found else None

    def unfinished_runs(self) -> list[RunRecord]:
        """See :meth:`Responses.unfinished_runs`."""
        return sorted(self._runs("", []), key=lambda run: run.created_at)  # not by DuckDB (see _fetch_values)

    def _runs(self, where: str, params: Sequence[Any]) -> list[RunRecord]:
        sql = (
            "SELECT tenant, response_id, thread_id, created_at, attempt, credentials, request, request_parts"
            f" FROM runs {where}"
        )
        fields = ("tenant", "response_id", "thread_id", "created_at", "attempt", "credentials", "request")
        return [RunRecord(**dict(zip(fields, row, strict=True))) for row in self._fetch_values(sql, params)]

    def claim_run(self, tenant: str, response_id: str, attempt: int) -> RunRecord | None:
        """See :meth:`Responses.claim_run`."""
        sql = "UPDATE runs SET attempt = attempt + 1 WHERE tenant = ? AND response_id = ? AND attempt = ? RETURNING 1"
        with self._transaction() as conn:
            claimed = conn.execute(sql, [tenant, response_id, attempt]).fetchall()
        return self.get_run(tenant, response_id) if claimed else None

    def run_steps(self, tenant: str, response_id: str) -> list[RunStep]:
        """See :meth:`Responses.run_steps`."""
        sql = "SELECT seq, step, step_parts FROM run_steps WHERE tenant = ? AND response_id = ?"
        rows = sorted(self._fetch_values(sql, [tenant, response_id]), key=lambda row: row[0])  # see _fetch_values
        return [RunStep(tenant=tenant, response_id=response_id, seq=seq, data=data) for seq, data in rows]


def _webhook_events(records: Sequence[ResponseRecord]) -> list[WebhookEvent]:
    """The events of the background responses of ``records`` (``response.completed`` …)."""
    events: list[WebhookEvent] = []
    for record in records:
        response = record.response
        kind = EVENT_TYPE_OF_RESPONSE_STATUS.get(response.get("status"))  # type: ignore[arg-type]
        if response.get("background") and kind is not None:
            events.append((record.tenant, kind, record.id, record.id, record.ended_at))
    return events
