"""The prompts area in DuckDB (:class:`~troupe.storage.contract.Prompts`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import duckdb

from troupe.protocol.prompts import prompt_object

from .. import schema
from ..base import Order, Page, PromptConflict
from ..contract import Prompts
from .connection import Connection, check_page_args

__all__ = ["PromptTables"]


class PromptTables(Connection, Prompts):
    """The prompts area in DuckDB (:class:`~troupe.storage.contract.Prompts`)."""

    # A version with its prompt's default: the prompt object's columns, the content and its parts last.
    _PROMPT_VERSION = (
        "SELECT v.prompt_id, v.version, v.created_at, v.version = p.default_version, v.content, v.content_parts"
        " FROM prompts p JOIN prompt_versions v ON v.tenant = p.tenant AND v.prompt_id = p.id"
    )

    def _prompt_objects(self, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        return [
            prompt_object(pid, version, created_at, content, is_default=is_default)
            for pid, version, created_at, is_default, content in self._fetch_values(sql, params)
        ]

    def _insert_prompt_version(
        self, conn: duckdb.DuckDBPyConnection, tenant: str, prompt_id: str, version: int, created_at: float,
        content: dict[str, Any],
    ) -> None:  # fmt: skip
        parts: list[tuple[int, int, str]] = []
        stored = self._stored(schema.dump_json(content), parts)
        conn.execute(
            "INSERT INTO prompt_versions (tenant, prompt_id, version, created_at, content, content_parts)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            [tenant, prompt_id, version, created_at, *stored],
        )
        self._insert(conn, "value_parts", schema.PART_COLUMNS, parts)

    def create_prompt(self, tenant: str, prompt_id: str, content: dict[str, Any], created_at: float) -> dict[str, Any]:
        """See :meth:`Prompts.create_prompt`."""
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO prompts (tenant, id, created_at, default_version, latest_version) VALUES (?, ?, ?, 1, 1)",
                [tenant, prompt_id, created_at],
            )
            self._insert_prompt_version(conn, tenant, prompt_id, 1, created_at, content)
        return prompt_object(prompt_id, 1, created_at, json.loads(schema.dump_json(content)), is_default=True)

    def get_prompt(self, tenant: str, prompt_id: str, version: int | None = None) -> dict[str, Any] | None:
        """See :meth:`Prompts.get_prompt`."""
        sql = f"{self._PROMPT_VERSION} WHERE p.tenant = ? AND p.id = ? AND v.version = coalesce(?, p.default_version)"
        found = self._prompt_objects(sql, [tenant, prompt_id, version])
        return found[0] if found else None

    def list_prompts(self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc") -> Page:
        """See :meth:`Prompts.list_prompts`."""
        check_page_args(limit, order)
        sql = f"{self._PROMPT_VERSION} AND v.version = p.default_version WHERE p.tenant = ?"
        params: list[Any] = [tenant]
        if after is not None:
            anchor = self._fetchone("SELECT created_at FROM prompts WHERE tenant = ? AND id = ?", [tenant, after])
            if anchor is None:
                return Page(data=[], has_more=False)
            sql += f" AND (p.created_at, p.id) {'>' if order == 'asc' else '<'} (?, ?)"
            params += [anchor[0], after]
        direction = "ASC" if order == "asc" else "DESC"
        found = self._prompt_objects(f"{sql} ORDER BY p.created_at {direction}, p.id {direction} LIMIT ?",
                                     [*params, limit + 1])  # fmt: skip
        return Page(data=found[:limit], has_more=len(found) > limit)

    def update_prompt(
        self, tenant: str, prompt_id: str, content: dict[str, Any], *, from_version: int, set_default: bool,
        created_at: float,
    ) -> dict[str, Any] | None:  # fmt: skip
        """See :meth:`Prompts.update_prompt`."""
        with self._transaction() as conn:
            rows = conn.execute(
                "SELECT latest_version FROM prompts WHERE tenant = ? AND id = ?", [tenant, prompt_id]
            ).fetchall()
            if not rows:
                return None
            latest = rows[0][0]
            if from_version != latest:
                raise PromptConflict(f"version {from_version} of prompt {prompt_id!r} is not its latest ({latest})",
                                     latest)  # fmt: skip
            version = latest + 1
            self._insert_prompt_version(conn, tenant, prompt_id, version, created_at, content)
            conn.execute(
                "UPDATE prompts SET latest_version = ?, default_version = CASE WHEN ? THEN ? ELSE default_version END"
                " WHERE tenant = ? AND id = ?",
                [version, set_default, version, tenant, prompt_id],
            )
        return self.get_prompt(tenant, prompt_id, version)

    def set_default_prompt_version(self, tenant: str, prompt_id: str, version: int) -> dict[str, Any] | None:
        """See :meth:`Prompts.set_default_prompt_version`."""
        with self._transaction() as conn:
            found = conn.execute(
                "SELECT 1 FROM prompt_versions WHERE tenant = ? AND prompt_id = ? AND version = ?",
                [tenant, prompt_id, version],
            ).fetchall()
            if not found:
                return None
            conn.execute(
                "UPDATE prompts SET default_version = ? WHERE tenant = ? AND id = ?", [version, tenant, prompt_id]
            )
        return self.get_prompt(tenant, prompt_id, version)

    def delete_prompt(self, tenant: str, prompt_id: str) -> bool:
        """See :meth:`Prompts.delete_prompt`."""
        with self._transaction() as conn:
            return self._delete_with_children(conn, "prompts", "prompt_versions", "prompt_id", "content_parts",
                                              [tenant, prompt_id])  # fmt: skip

    def list_prompt_versions(self, tenant: str, prompt_id: str) -> list[dict[str, Any]] | None:
        """See :meth:`Prompts.list_prompt_versions`."""
        sql = f"{self._PROMPT_VERSION} WHERE p.tenant = ? AND p.id = ? ORDER BY v.version"
        found = self._prompt_objects(sql, [tenant, prompt_id])
        if not found and self._fetchone("SELECT 1 FROM prompts WHERE tenant = ? AND id = ?", [tenant, prompt_id]) is None:
            return None
        return found
