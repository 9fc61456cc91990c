"""The agents area in DuckDB (:class:`~troupe.storage.contract.Agents`)."""

from __future__ import annotations

import json
from typing import Any

import duckdb

from troupe.protocol.agents import apply_agent_update

from .. import schema
from ..base import Order, Page
from ..contract import Agents
from .connection import Connection, check_page_args

__all__ = ["AgentTables"]


class AgentTables(Connection, Agents):
    """The agents area in DuckDB (:class:`~troupe.storage.contract.Agents`): one row per agent,
    its object as one JSON value (in ``value_parts`` when long: instructions and tools may be MBs)."""

    def _write_agent(
        self, conn: duckdb.DuckDBPyConnection, tenant: str, agent: dict[str, Any], *, new: bool, old_parts: int | None = None
    ) -> dict[str, Any]:
        """Write ``agent``'s row: a new one, or over its row, whose value's parts (``old_parts``,
        None when it was inline) go. The object as stored."""
        text = schema.dump_json(agent)
        parts: list[tuple[int, int, str]] = []
        row = [agent["created_at"], agent["updated_at"], agent["model"], agent["name"], *self._stored(text, parts)]
        if new:
            conn.execute(
                "INSERT INTO agents (tenant, id, created_at, updated_at, model, name, agent, agent_parts)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [tenant, agent["id"], *row],
            )
        else:
            conn.execute(
                "UPDATE agents SET created_at = ?, updated_at = ?, model = ?, name = ?, agent = ?, agent_parts = ?"
                " WHERE tenant = ? AND id = ?",
                [*row, tenant, agent["id"]],
            )
            self._delete_parts(conn, [(old_parts,)])
        self._insert(conn, "value_parts", schema.PART_COLUMNS, parts)
        return json.loads(text)

    def create_agent(self, tenant: str, agent: dict[str, Any]) -> dict[str, Any]:
        """See :meth:`Agents.create_agent`."""
        with self._transaction() as conn:
            return self._write_agent(conn, tenant, agent, new=True)

    def get_agent(self, tenant: str, agent_id: str) -> dict[str, Any] | None:
        """See :meth:`Agents.get_agent`."""
        found = self._fetch_values("SELECT agent, agent_parts FROM agents WHERE tenant = ? AND id = ?",
                                   [tenant, agent_id])  # fmt: skip
        return found[0][0] if found else None

    def list_agents(self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc") -> Page:
        """See :meth:`Agents.list_agents`."""
        check_page_args(limit, order)
        anchor = None
        if after is not None:
            anchor = self._fetchone("SELECT created_at, id FROM agents WHERE tenant = ? AND id = ?", [tenant, after])
            if anchor is None:
                return Page(data=[], has_more=False)
        return self._paged("agents", "tenant = ?", [tenant], ("created_at", "id"), anchor, limit, order,
                           "agent, agent_parts")  # fmt: skip

    def update_agent(
        self, tenant: str, agent_id: str, changes: dict[str, Any], updated_at: float
    ) -> dict[str, Any] | None:
        """See :meth:`Agents.update_agent`."""
        with self._transaction() as conn:
            rows = conn.execute("SELECT agent, agent_parts FROM agents WHERE tenant = ? AND id = ?",
                                [tenant, agent_id]).fetchall()  # fmt: skip
            if not rows:
                return None
            text, parts_id = rows[0]
            current = json.loads(text if parts_id is None else self._join_parts(conn, [parts_id])[parts_id])
            updated = apply_agent_update(current, changes, updated_at)
            return self._write_agent(conn, tenant, updated, new=False, old_parts=parts_id)

    def delete_agent(self, tenant: str, agent_id: str) -> bool:
        """See :meth:`Agents.delete_agent`."""
        with self._transaction() as conn:
            sql = "DELETE FROM agents WHERE tenant = ? AND id = ? RETURNING agent_parts"
            return self._delete_returning_parts(conn, sql, [tenant, agent_id]) > 0
