"""The sessions area in DuckDB (:class:`~troupe.storage.contract.Sessions`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import duckdb

from .. import schema
from ..base import Order, Page, StorageError
from ..contract import Sessions
from ..contract.sessions import NewTurn
from .connection import check_page_args
from .conversations import ConversationTables

__all__ = ["SessionTables"]

_TURN_COLUMNS = "id, session_id, seq, created_at, responses, results, cancelled, taken"


class SessionTables(ConversationTables, Sessions):
    """Sessions (one row each, the object as one JSON value, in ``value_parts`` when long: an
    agent's instructions and tools may take MBs) and their turns (one row each). A session's
    conversation may be made with it, in one transaction (hence the conversations' tables)."""

    def create_sessions(
        self, tenant: str, sessions: Sequence[dict[str, Any]], conversations: Sequence[dict[str, Any]] = ()
    ) -> list[dict[str, Any]]:
        """See :meth:`Sessions.create_sessions`."""
        with self._transaction() as conn:
            for conversation in conversations:
                self._insert_conversation(conn, tenant, conversation, ())
            return [self._write_session(conn, tenant, session, new=True) for session in sessions]

    def _write_session(
        self, conn: duckdb.DuckDBPyConnection, tenant: str, session: dict[str, Any], *, new: bool,
        old_parts: int | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        text = schema.dump_json(session)
        parts: list[tuple[int, int, str]] = []
        stored, parts_id = self._stored(text, parts)
        agent_id = session["agent"].get("id")
        metadata = schema.dump_json(session.get("metadata") or {})
        if new:
            conn.execute(
                "INSERT INTO agent_sessions (tenant, id, created_at, last_active_at, agent_id, parent_id, metadata,"
                " session, session_parts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [tenant, session["id"], session["created_at"], session["last_active_at"], agent_id,
                 session.get("parent_id"), metadata, stored, parts_id],
            )
        else:
            conn.execute(
                "UPDATE agent_sessions SET last_active_at = ?, agent_id = ?, metadata = ?, session = ?, session_parts = ?"
                " WHERE tenant = ? AND id = ?",
                [session["last_active_at"], agent_id, metadata, stored, parts_id, tenant, session["id"]],
            )
            self._delete_parts(conn, [(old_parts,)])
        self._insert(conn, "value_parts", schema.PART_COLUMNS, parts)
        return json.loads(text)

    def _read_session(self, conn: duckdb.DuckDBPyConnection, tenant: str, session_id: str) -> tuple[dict[str, Any], int | None] | None:
        rows = conn.execute("SELECT session, session_parts FROM agent_sessions WHERE tenant = ? AND id = ?",
                            [tenant, session_id]).fetchall()  # fmt: skip
        if not rows:
            return None
        text, parts_id = rows[0]
        return json.loads(text if parts_id is None else self._join_parts(conn, [parts_id])[parts_id]), parts_id

    def get_session(self, tenant: str, session_id: str) -> dict[str, Any] | None:
        """See :meth:`Sessions.get_session`."""
        found = self._fetch_values("SELECT session, session_parts FROM agent_sessions WHERE tenant = ? AND id = ?",
                                   [tenant, session_id])  # fmt: skip
        return found[0][0] if found else None

    def list_sessions(
        self,
        tenant: str,
        *,
        after: str | None = None,
        limit: int = 20,
        order: Order = "desc",
        agent_id: str | None = None,
        metadata: dict[str, str] | None = None,
        children_of: str | None = None,
    ) -> Page:
        """See :meth:`Sessions.list_sessions`."""
        check_page_args(limit, order)
        if children_of is None:
            where, params = "tenant = ? AND parent_id IS NULL", [tenant]
        else:
            where, params = "tenant = ? AND parent_id = ?", [tenant, children_of]
        if agent_id is not None:
            where, params = where + " AND agent_id = ?", [*params, agent_id]
        for key, value in (metadata or {}).items():
            path = "$." + json.dumps(key)  # a quoted member name: any key is taken as it is
            where, params = where + " AND json_extract_string(metadata, ?) = ?", [*params, path, value]
        anchor = None
        if after is not None:
            anchor = self._fetchone("SELECT created_at, id FROM agent_sessions WHERE tenant = ? AND id = ?",
                                    [tenant, after])  # fmt: skip
            if anchor is None:
                return Page(data=[], has_more=False)
        return self._paged("agent_sessions", where, params, ("created_at", "id"), anchor, limit, order,
                           "session, session_parts")  # fmt: skip

    def update_session(self, tenant: str, session_id: str, changes: dict[str, Any]) -> dict[str, Any] | None:
        """See :meth:`Sessions.update_session`."""
        with self._transaction() as conn:
            found = self._read_session(conn, tenant, session_id)
            if found is None:
                return None
            session, parts_id = found
            return self._write_session(conn, tenant, {**session, **changes}, new=False, old_parts=parts_id)

    def delete_session(self, tenant: str, session_id: str) -> bool:
        """See :meth:`Sessions.delete_session`."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM session_turns WHERE tenant = ? AND session_id = ?", [tenant, session_id])
            sql = "DELETE FROM agent_sessions WHERE tenant = ? AND id = ? RETURNING session_parts"
            return self._delete_returning_parts(conn, sql, [tenant, session_id]) > 0

    def add_turns(self, tenant: str, turns: Sequence[NewTurn]) -> list[dict[str, Any]]:
        """See :meth:`Sessions.add_turns`."""
        added: list[dict[str, Any]] = []
        with self._transaction() as conn:
            for session_id, turn_id, response_id, created_at in turns:
                moved = conn.execute(
                    "UPDATE agent_sessions SET last_active_at = ? WHERE tenant = ? AND id = ? RETURNING id",
                    [created_at, tenant, session_id],
                ).fetchall()
                if not moved:
                    raise StorageError(f"no session {session_id}")
                (last,) = conn.execute("SELECT max(seq) FROM session_turns WHERE tenant = ? AND session_id = ?",
                                       [tenant, session_id]).fetchone() or (None,)  # fmt: skip
                seq = 0 if last is None else last + 1
                conn.execute(
                    f"INSERT INTO session_turns (tenant, {_TURN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [tenant, turn_id, session_id, seq, created_at, json.dumps([response_id]), "{}", False, "{}"],
                )
                added.append({"id": turn_id, "session_id": session_id, "seq": seq, "created_at": created_at,
                              "responses": [response_id], "results": {}, "cancelled": False, "taken": {}})  # fmt: skip
        return added

    def get_turn(self, tenant: str, session_id: str, turn_id: str) -> dict[str, Any] | None:
        """See :meth:`Sessions.get_turn`."""
        row = self._fetchone(f"SELECT {_TURN_COLUMNS} FROM session_turns WHERE tenant = ? AND session_id = ? AND id = ?",
                             [tenant, session_id, turn_id])  # fmt: skip
        return None if row is None else _turn(row)

    def list_turns(
        self, tenant: str, session_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """See :meth:`Sessions.list_turns`."""
        check_page_args(limit, order)
        where, params = "tenant = ? AND session_id = ?", [tenant, session_id]
        if after is not None:
            anchor = self._fetchone("SELECT seq FROM session_turns WHERE tenant = ? AND session_id = ? AND id = ?",
                                    [tenant, session_id, after])  # fmt: skip
            if anchor is None:
                return Page(data=[], has_more=False)
            where, params = where + f" AND seq {'>' if order == 'asc' else '<'} ?", [*params, anchor[0]]
        rows = self._fetchall(
            f"SELECT {_TURN_COLUMNS} FROM session_turns WHERE {where} ORDER BY seq {'ASC' if order == 'asc' else 'DESC'}"
            " LIMIT ?",
            [*params, limit + 1],
        )
        return Page(data=[_turn(r) for r in rows[:limit]], has_more=len(rows) > limit)

    def record_tool_results(
        self, tenant: str, session_id: str, turn_id: str, results: dict[str, dict[str, Any]]
    ) -> dict[str, Any] | None:
        """See :meth:`Sessions.record_tool_results`."""
        with self._transaction() as conn:
            turn = self._turn_in(conn, tenant, session_id, turn_id)
            if turn is None:
                return None
            _keep_results(conn, tenant, turn, results)
            return turn

    def continue_turn(
        self, tenant: str, session_id: str, turn_id: str, *, after: str, response_id: str, call_ids: list[str],
        results: dict[str, dict[str, Any]] | None = None,
    ) -> dict[str, Any] | None:  # fmt: skip
        """See :meth:`Sessions.continue_turn`."""
        with self._transaction() as conn:
            turn = self._turn_in(conn, tenant, session_id, turn_id)
            if turn is not None and results:
                _keep_results(conn, tenant, turn, results)
            if turn is None or turn["cancelled"] or turn["responses"][-1] != after:
                return None
            results = turn["results"]
            if any(call_id not in results for call_id in call_ids):
                return None
            taken = {call_id: results[call_id] for call_id in call_ids}
            conn.execute(
                "UPDATE session_turns SET responses = ?, results = '{}', taken = ? "
                "WHERE tenant = ? AND session_id = ? AND id = ?",
                [json.dumps([*turn["responses"], response_id]), json.dumps(taken), tenant, session_id, turn_id],
            )
            return taken

    def cancel_turn(self, tenant: str, session_id: str, turn_id: str) -> bool:
        """See :meth:`Sessions.cancel_turn`."""
        with self._transaction() as conn:
            done = conn.execute(
                "UPDATE session_turns SET cancelled = true WHERE tenant = ? AND session_id = ? AND id = ? RETURNING id",
                [tenant, session_id, turn_id],
            ).fetchall()
            return bool(done)

    @staticmethod
    def _turn_in(conn: duckdb.DuckDBPyConnection, tenant: str, session_id: str, turn_id: str) -> dict[str, Any] | None:
        row = conn.execute(f"SELECT {_TURN_COLUMNS} FROM session_turns WHERE tenant = ? AND session_id = ? AND id = ?",
                           [tenant, session_id, turn_id]).fetchone()  # fmt: skip
        return None if row is None else _turn(row)


def _keep_results(conn: duckdb.DuckDBPyConnection, tenant: str, turn: dict[str, Any], results: dict[str, Any]) -> None:
    """Add ``results`` to the turn's kept results (``turn["results"]`` too), in the caller's transaction."""
    turn["results"] = {**turn["results"], **results}
    conn.execute("UPDATE session_turns SET results = ? WHERE tenant = ? AND session_id = ? AND id = ?",
                 [json.dumps(turn["results"]), tenant, turn["session_id"], turn["id"]])  # fmt: skip


def _turn(row: tuple[Any, ...]) -> dict[str, Any]:
    turn_id, session_id, seq, created_at, responses, results, cancelled, taken = row
    return {"id": turn_id, "session_id": session_id, "seq": seq, "created_at": created_at,
            "responses": json.loads(responses), "results": json.loads(results), "cancelled": cancelled,
            "taken": json.loads(taken or "{}")}  # fmt: skip
