"""The conversations area in DuckDB (:class:`~troupe.storage.contract.Conversations`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import duckdb

from .. import schema
from ..base import Order, Page
from ..contract import Conversations
from .connection import Connection, check_page_args

__all__ = ["ConversationTables"]


class ConversationTables(Connection, Conversations):
    """The conversations area in DuckDB (:class:`~troupe.storage.contract.Conversations`)."""

    def create_conversation(self, tenant: str, conversation: dict[str, Any], items: Sequence[dict[str, Any]]) -> None:
        """See :meth:`Conversations.create_conversation`.

        Raises:
            StorageError: the id is taken (for this tenant) or a value is not JSON.
        """
        with self._transaction() as conn:
            self._insert_conversation(conn, tenant, conversation, items)

    def _insert_conversation(
        self, conn: duckdb.DuckDBPyConnection, tenant: str, conversation: dict[str, Any], items: Sequence[dict[str, Any]]
    ) -> None:
        """:meth:`create_conversation`'s rows, in the caller's transaction."""
        conversation_id: str = conversation["id"]  # the contract's Conversation object has its id
        row = (
            tenant,
            conversation_id,
            conversation.get("created_at"),
            schema.dump_json(conversation.get("metadata") or {}),
        )
        encoded = [(item.get("id"), schema.dump_json(item)) for item in items]
        conn.execute(
            "INSERT INTO conversations (tenant, id, created_at, metadata, conversation) VALUES (?, ?, ?, ?, ?)",
            [*row, schema.dump_json(conversation)],
        )
        self._append_conversation_items(conn, tenant, conversation_id, 0, encoded)

    def get_conversation(self, tenant: str, conversation_id: str) -> dict[str, Any] | None:
        """See :meth:`Conversations.get_conversation`."""
        sql = "SELECT conversation FROM conversations WHERE tenant = ? AND id = ?"
        row = self._fetchone(sql, [tenant, conversation_id])
        return None if row is None else json.loads(row[0])

    def update_conversation(self, tenant: str, conversation_id: str, metadata: dict[str, Any]) -> dict[str, Any] | None:
        """See :meth:`Conversations.update_conversation`."""
        with self._transaction() as conn:
            sql = "SELECT conversation FROM conversations WHERE tenant = ? AND id = ?"
            row = conn.execute(sql, [tenant, conversation_id]).fetchone()
            if row is None:
                return None
            conversation = {**json.loads(row[0]), "metadata": metadata}
            conn.execute(
                "UPDATE conversations SET metadata = ?, conversation = ? WHERE tenant = ? AND id = ?",
                [schema.dump_json(metadata), schema.dump_json(conversation), tenant, conversation_id],
            )
        return json.loads(schema.dump_json(conversation))  # a copy the caller's metadata dict does not alias

    def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        """See :meth:`Conversations.delete_conversation`."""
        key = [tenant, conversation_id]
        with self._transaction() as conn:
            found = self._delete_with_children(
                conn, "conversations", "conversation_items", "conversation_id", "item_parts", key
            )
            self._conversation_seqs.pop((tenant, conversation_id), None)
        return found

    def add_conversation_items(self, tenant: str, conversation_id: str, items: Sequence[dict[str, Any]]) -> bool:
        """See :meth:`Conversations.add_conversation_items`."""
        encoded = [(item.get("id"), schema.dump_json(item)) for item in items]
        key = (tenant, conversation_id)
        on_commit: list[Callable[[], None]] = []
        with self._transaction(on_commit) as conn:
            start = self._next_conversation_seq(conn, key)
            if start is None:
                return False
            self._append_conversation_items(conn, tenant, conversation_id, start, encoded)
            on_commit.append(lambda: self._remember_conversation_seq(key, start + len(encoded)))
        return True

    def _append_conversation_items(
        self,
        conn: duckdb.DuckDBPyConnection,
        tenant: str,
        conversation_id: str,
        start: int,
        encoded: Sequence[tuple[str | None, str]],
    ) -> None:
        """Append ``(item id, JSON text)`` pairs at positions ``start, start + 1, …`` (inside a transaction)."""
        parts: list[tuple[int, int, str]] = []
        rows = [
            (tenant, conversation_id, start + i, item_id, *self._stored(text, parts))
            for i, (item_id, text) in enumerate(encoded)
        ]
        self._append(conn, "conversation_items", schema.CONVERSATION_ITEM_COLUMNS, rows)
        self._append(conn, "value_parts", schema.PART_COLUMNS, parts)

    def _conversation_exists(self, tenant: str, conversation_id: str) -> bool:
        sql = "SELECT 1 FROM conversations WHERE tenant = ? AND id = ?"
        return self._fetchone(sql, [tenant, conversation_id]) is not None

    def list_conversation_items(
        self, tenant: str, conversation_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None:
        """See :meth:`Conversations.list_conversation_items`. An unknown ``after`` gives an empty page."""
        check_page_args(limit, order)
        if not self._conversation_exists(tenant, conversation_id):
            return None
        where = "tenant = ? AND conversation_id = ?"
        return self._item_page("conversation_items", where, [tenant, conversation_id], "seq", after, limit, order)

    def get_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> dict[str, Any] | None:
        """See :meth:`Conversations.get_conversation_item`. With duplicate ids, the earliest item."""
        # Items never outlive their conversation (delete_conversation removes them).
        rows = self._fetch_values(
            "SELECT item, item_parts FROM conversation_items WHERE tenant = ? AND conversation_id = ? AND item_id = ?"
            " ORDER BY seq LIMIT 1",
            [tenant, conversation_id, item_id],
        )
        return rows[0][0] if rows else None

    def delete_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> bool:
        """See :meth:`Conversations.delete_conversation_item`. With duplicate ids, removes them all."""
        sql = (
            "DELETE FROM conversation_items WHERE tenant = ? AND conversation_id = ? AND item_id = ?"
            " RETURNING item_parts"
        )
        with self._transaction() as conn:
            deleted = self._delete_returning_parts(conn, sql, [tenant, conversation_id, item_id])
        return deleted > 0

    def conversation_items(self, tenant: str, conversation_id: str) -> list[dict[str, Any]] | None:
        """See :meth:`Conversations.conversation_items`."""
        if not self._conversation_exists(tenant, conversation_id):
            return None
        rows = self._fetch_values(
            "SELECT seq, item, item_parts FROM conversation_items WHERE tenant = ? AND conversation_id = ?",
            [tenant, conversation_id],
        )
        rows.sort(key=lambda row: row[0])  # here, not by DuckDB (see _fetch_values)
        return [item for _, item in rows]
