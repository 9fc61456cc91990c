"""The session artifacts area in DuckDB (:class:`~troupe.storage.contract.Artifacts`): the
``session_artifacts`` and ``artifact_paths`` tables, and the artifacts' bytes in the Files API's
byte store (:class:`~troupe.storage.file_bytes.FileBytes`, named by artifact id).

:class:`ArtifactTables` runs on the files and vector stores' thread
(:class:`~troupe.storage.rag_executor.RagExecutor`), on a DuckDB connection of its own, beside the
containers whose directories it copies from (:class:`~troupe.storage.container_files.ContainerDirs`,
read without following links, as the containers' reads are).

Bytes first, rows second: an artifact's copy is written (synced, renamed into place) before its
row is committed, and removed after its row is deleted, so a crash leaves at most bytes without a
row, never a row without its bytes. A copy whose row loses the unique key (tenant, turn, path) to
a row already there is removed at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from troupe.protocol.artifacts import artifact_object, artifact_path, new_artifact_id

from ..base import Order, Page
from ..container_files import check_relative
from ..contract import Artifacts
from .side_connection import SideConnection

__all__ = ["ArtifactTables"]

_COLUMNS = "id, session_id, turn_id, environment_id, path, size_bytes, created_at"


class ArtifactTables(SideConnection, Artifacts):
    """Session artifacts in DuckDB and the Files API's byte store; the methods are documented on
    :class:`~troupe.storage.contract.Artifacts`.

    Args:
        conn: a DuckDB connection of its own to the store's database (``DuckDBStore.cursor()``).
        files: the Files API's bytes, where the copies go.
        dirs: the containers' directories, where the live files are.
        clock: the time, in Unix seconds.
    """

    def note_turn_files(self, tenant: str, session_id: str, turn_id: str, paths: Sequence[str]) -> None:
        for path in paths:
            check_relative(path)
        if not paths:
            return
        with self._tx() as conn:
            conn.executemany(
                "INSERT INTO artifact_paths (tenant, session_id, turn_id, path) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                [[tenant, session_id, turn_id, path] for path in sorted(set(paths))],
            )

    def publish_artifacts(
        self, tenant: str, session_id: str, turn_id: str, *, environment_id: str, container_id: str,
        max_file_bytes: int, max_files: int,
    ) -> list[dict[str, Any]]:  # fmt: skip
        noted = [p for (p,) in self._rows("SELECT path FROM artifact_paths WHERE tenant = ? AND turn_id = ?"
                                          " ORDER BY path", [tenant, turn_id])]  # fmt: skip
        done = {p for (p,) in self._rows("SELECT path FROM session_artifacts WHERE tenant = ? AND turn_id = ?",
                                         [tenant, turn_id])}  # fmt: skip
        published: list[dict[str, Any]] = []
        room = max_files - len(done)
        for relative in noted:
            path = artifact_path(relative)
            if room <= 0:
                break
            if path in done:
                continue
            meta = self.dirs.stat(container_id, relative)
            if meta is None or meta[0] > max_file_bytes:
                continue  # gone (or a link, a directory), or too large: never read
            data = self.dirs.read(container_id, relative)
            if data is None or len(data) > max_file_bytes:
                continue
            made = self._publish(tenant, session_id, turn_id, environment_id, path, data)
            if made is not None:
                published.append(made)
                room -= 1
        with self._tx() as conn:
            conn.execute("DELETE FROM artifact_paths WHERE tenant = ? AND session_id = ?", [tenant, session_id])
        return published

    def _publish(
        self, tenant: str, session_id: str, turn_id: str, environment_id: str, path: str, data: bytes
    ) -> dict[str, Any] | None:
        """One artifact: its bytes, then its row; None (and no bytes) if the turn has that path already."""
        artifact_id, now = new_artifact_id(), self.clock()
        self.files.write(artifact_id, data)
        try:
            with self._tx() as conn:
                added = conn.execute(
                    f"INSERT INTO session_artifacts (tenant, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT DO NOTHING RETURNING id",
                    [tenant, artifact_id, session_id, turn_id, environment_id, path, len(data), now],
                ).fetchall()
        except BaseException:
            self.files.remove(artifact_id)
            raise
        if not added:
            self.files.remove(artifact_id)
            return None
        return artifact_object(artifact_id, session_id=session_id, turn_id=turn_id, environment_id=environment_id,
                               path=path, size_bytes=len(data), created_at=now)  # fmt: skip

    def list_artifacts(
        self, tenant: str, session_id: str, *, environment_id: str | None = None, after: str | None = None,
        limit: int = 20, order: Order = "desc",
    ) -> Page:  # fmt: skip
        sql = f"SELECT created_at AS created, {_COLUMNS} FROM session_artifacts WHERE tenant = ? AND session_id = ?"
        params: list[Any] = [tenant, session_id]
        if environment_id is not None:
            sql += " AND environment_id = ?"
            params.append(environment_id)
        anchor = "SELECT created_at, id FROM session_artifacts WHERE tenant = ? AND session_id = ? AND id = ?"
        return self._page(sql, params, anchor, [tenant, session_id], after, limit, order, lambda r: _object(r[1:]))

    def get_artifact(self, tenant: str, session_id: str, artifact_id: str) -> dict[str, Any] | None:
        rows = self._rows(f"SELECT {_COLUMNS} FROM session_artifacts WHERE tenant = ? AND session_id = ? AND id = ?",
                          [tenant, session_id, artifact_id])  # fmt: skip
        return _object(rows[0]) if rows else None

    def artifact_content(self, tenant: str, session_id: str, artifact_id: str) -> tuple[str, bytes] | None:
        found = self.get_artifact(tenant, session_id, artifact_id)
        return None if found is None else (found["path"], self.files.read(artifact_id))

    def delete_artifact(self, tenant: str, session_id: str, artifact_id: str) -> bool:
        with self._tx() as conn:
            gone = conn.execute(
                "DELETE FROM session_artifacts WHERE tenant = ? AND session_id = ? AND id = ? RETURNING id",
                [tenant, session_id, artifact_id],
            ).fetchall()
        for (found,) in gone:
            self.files.remove(found)
        return bool(gone)

    def delete_session_artifacts(self, tenant: str, session_id: str) -> int:
        with self._tx() as conn:
            gone = conn.execute("DELETE FROM session_artifacts WHERE tenant = ? AND session_id = ? RETURNING id",
                                [tenant, session_id]).fetchall()  # fmt: skip
            conn.execute("DELETE FROM artifact_paths WHERE tenant = ? AND session_id = ?", [tenant, session_id])
        for (found,) in gone:
            self.files.remove(found)
        return len(gone)


def _object(row: tuple[Any, ...]) -> dict[str, Any]:
    artifact_id, session_id, turn_id, environment_id, path, size_bytes, created_at = row
    return artifact_object(artifact_id, session_id=session_id, turn_id=turn_id, environment_id=environment_id,
                           path=path, size_bytes=size_bytes, created_at=created_at)  # fmt: skip
