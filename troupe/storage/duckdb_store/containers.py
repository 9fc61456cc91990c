"""The containers area in DuckDB (:class:`~troupe.storage.contract.Containers`): the ``containers``
and ``container_files`` tables (schema version 12), and the containers' directories on disk
(:class:`~troupe.storage.container_files.ContainerDirs`).

:class:`ContainerTables` runs on the files and vector stores' thread
(:class:`~troupe.storage.rag_executor.RagExecutor`), on a DuckDB connection of its own, beside the
:class:`~troupe.storage.rag.RagStore` whose files it copies (the Files API's bytes,
:class:`~troupe.storage.file_bytes.FileBytes`). Its calls run one at a time, in order, so what it
reads of a container (its status, its files' paths) holds until it writes.

Bytes first, rows second: a file is on disk before its row is committed, and goes after its row
is deleted, so a crash leaves at most a file without a row (which the next
:meth:`~ContainerTables.register_container_files` walk adopts, as code's files are), never a row
without its file that was not also deleted by code.
"""

from __future__ import annotations

import functools
import io
import json
import secrets
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

import duckdb

from troupe.protocol import NotFound
from troupe.protocol.containers import (
    MOUNT,
    container_expired,
    container_file_object,
    container_not_found,
    container_object,
    new_container_file_id,
)

from ..base import Order, Page
from ..container_files import check_relative
from ..contract import Containers
from .side_connection import SideConnection

__all__ = ["ContainerTables"]

_CONTAINER_COLUMNS = "id, name, created_at, status, expires_minutes, last_active_at, memory_limit, network_policy"
_FILE_COLUMNS = "id, container_id, path, bytes, created_at, source"
_IDLE = "last_active_at + expires_minutes * 60 <= ?"
_MAX_NAME_BYTES = 255


class ContainerTables(SideConnection, Containers):
    """Containers in DuckDB and on disk; the methods are documented on
    :class:`~troupe.storage.contract.Containers`.

    Args:
        conn: a DuckDB connection of its own to the store's database (``DuckDBStore.cursor()``).
        files: the Files API's bytes (what ``file_ids`` copy).
        dirs: the containers' directories.
        clock: the time, in Unix seconds (tests move it to expire containers).
    """

    def close(self) -> None:
        super().close()
        self.dirs.close()

    # -- plumbing ------------------------------------------------------------------

    def _expire_due(self, tenant: str | None = None, container_id: str | None = None) -> list[tuple[str, str]]:
        """Expire the running containers idle past their time (of ``tenant``, or just
        ``container_id``; every one when None): status, rows, then directories."""
        now = self.clock()
        where = f"status = 'running' AND {_IDLE}"
        params: list[Any] = [now]
        if tenant is not None:
            where += " AND tenant = ?"
            params.append(tenant)
        if container_id is not None:
            where += " AND id = ?"
            params.append(container_id)
        # Most calls find none: a read, not a write transaction, tells.
        if not self._rows(f"SELECT 1 FROM containers WHERE {where} LIMIT 1", params):
            return []
        with self._tx() as conn:
            expired = [(t, c) for t, c in conn.execute(
                f"UPDATE containers SET status = 'expired', expired_at = ? WHERE {where} RETURNING tenant, id",
                [now, *params],
            ).fetchall()]  # fmt: skip
            for owner, cid in expired:
                conn.execute("DELETE FROM container_files WHERE tenant = ? AND container_id = ?", [owner, cid])
        for _, cid in expired:
            self.dirs.remove(cid)
        return expired

    def _live(self, tenant: str, container_id: str) -> None:
        """Raise unless the container is there and running (expiring it first if it is due)."""
        self._expire_due(tenant, container_id)
        rows = self._rows("SELECT status FROM containers WHERE tenant = ? AND id = ?", [tenant, container_id])
        if not rows:
            raise container_not_found(container_id)
        if rows[0][0] != "running":
            raise container_expired(container_id)

    def _touch(self, conn: duckdb.DuckDBPyConnection, tenant: str, container_id: str) -> None:
        conn.execute(
            "UPDATE containers SET last_active_at = ? WHERE tenant = ? AND id = ? AND status = 'running'",
            [self.clock(), tenant, container_id],
        )

    def _container(self, tenant: str, container_id: str) -> dict[str, Any] | None:
        rows = self._rows(f"SELECT {_CONTAINER_COLUMNS} FROM containers WHERE tenant = ? AND id = ?",
                          [tenant, container_id])  # fmt: skip
        return _container_object(rows[0]) if rows else None

    def _paths(self, tenant: str, container_id: str) -> dict[str, tuple[Any, ...]]:
        """The container's file rows by path: ``(id, bytes, mtime_ns, source, created_at)``."""
        rows = self._rows(
            "SELECT path, id, bytes, mtime_ns, source, created_at FROM container_files"
            " WHERE tenant = ? AND container_id = ?",
            [tenant, container_id],
        )
        return {row[0]: row[1:] for row in rows}

    def _free_name(self, container_id: str, name: str, taken: set[str]) -> str:
        """``name`` if nothing in the container's top directory has it (no row, nothing on disk);
        else OpenAI's form, ``<32 hex digits>-<name>``."""
        if name not in taken and not self.dirs.exists(container_id, name):
            return name
        prefix = secrets.token_hex(16) + "-"
        while len((prefix + name).encode()) > _MAX_NAME_BYTES:
            name = name[1:]
        return prefix + name

    def _write_user_file(
        self, conn: duckdb.DuckDBPyConnection, tenant: str, container_id: str, name: str,
        source: Callable[[], BinaryIO], taken: set[str], written: list[str],
    ) -> dict[str, Any]:  # fmt: skip
        """Write one user file, read from what ``source()`` opens (``written`` gets its path, to
        undo), and insert its row."""
        name = self._free_name(container_id, name, taken)
        with source() as data:
            size, mtime_ns = self.dirs.write(container_id, name, data)
        taken.add(name)
        written.append(name)
        file_id, now = new_container_file_id(), self.clock()
        conn.execute(
            "INSERT INTO container_files (tenant, id, container_id, created_at, path, bytes, source, mtime_ns)"
            " VALUES (?, ?, ?, ?, ?, ?, 'user', ?)",
            [tenant, file_id, container_id, now, name, size, mtime_ns],
        )
        return container_file_object(file_id, container_id=container_id, relative=name, size=size, created_at=now,
                                     source="user")  # fmt: skip

    # -- containers ------------------------------------------------------------------

    def create_container(self, tenant: str, container: dict[str, Any], file_ids: Sequence[str] = ()) -> dict[str, Any]:
        self._expire_due()  # the sweep, at every create: cheap, and what keeps idle disk in check
        names = dict(self._rows("SELECT id, filename FROM files WHERE tenant = ? AND id = ANY(?)",
                                [tenant, list(file_ids)])) if file_ids else {}  # fmt: skip
        missing = next((f for f in file_ids if f not in names), None)
        if missing is not None:
            raise NotFound(f"No file found with id '{missing}'.", param="file_ids")
        cid, now = container["id"], container["created_at"]
        self.dirs.make(cid)
        try:
            with self._tx() as conn:
                conn.execute(
                    f"INSERT INTO containers ({_CONTAINER_COLUMNS}, tenant) VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?)",
                    [cid, container["name"], now, container["expires_minutes"], now, container["memory_limit"],
                     json.dumps(container["network_policy"]), tenant],
                )  # fmt: skip
                taken: set[str] = set()
                for file_id in file_ids:
                    self._write_user_file(conn, tenant, cid, _name_of(names[file_id], file_id),
                                          functools.partial(self.files.open, file_id), taken, [])  # fmt: skip
        except BaseException:
            self.dirs.remove(cid)
            raise
        found = self._container(tenant, cid)
        assert found is not None
        return found

    def get_container(self, tenant: str, container_id: str, *, touch: bool = False) -> dict[str, Any] | None:
        self._expire_due(tenant, container_id)
        if touch:
            with self._tx() as conn:
                self._touch(conn, tenant, container_id)
        return self._container(tenant, container_id)

    def list_containers(
        self, tenant: str, *, name: str | None = None, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        self._expire_due(tenant)
        sql = f"SELECT created_at AS created, {_CONTAINER_COLUMNS} FROM containers WHERE tenant = ?"
        params: list[Any] = [tenant]
        if name is not None:
            sql += " AND name = ?"
            params.append(name)
        anchor = "SELECT created_at, id FROM containers WHERE tenant = ? AND id = ?"
        return self._page(sql, params, anchor, [tenant], after, limit, order, lambda r: _container_object(r[1:]))

    def delete_container(self, tenant: str, container_id: str) -> bool:
        with self._tx() as conn:
            found = conn.execute("DELETE FROM containers WHERE tenant = ? AND id = ? RETURNING id",
                                 [tenant, container_id]).fetchall()  # fmt: skip
            if found:
                conn.execute("DELETE FROM container_files WHERE tenant = ? AND container_id = ?",
                             [tenant, container_id])  # fmt: skip
        if found:
            self.dirs.remove(container_id)
        return bool(found)

    def touch_container(self, tenant: str, container_id: str) -> dict[str, Any] | None:
        return self.get_container(tenant, container_id, touch=True)

    def container_directory(self, tenant: str, container_id: str) -> str | None:
        self._expire_due(tenant, container_id)
        rows = self._rows("SELECT status FROM containers WHERE tenant = ? AND id = ?", [tenant, container_id])
        if not rows or rows[0][0] != "running":
            return None
        return self.dirs.make(container_id)

    def expire_containers(self) -> list[tuple[str, str]]:
        return self._expire_due()

    def count_running_containers(self) -> int:
        rows = self._rows(f"SELECT count(*) FROM containers WHERE status = 'running' AND NOT ({_IDLE})", [self.clock()])
        return int(rows[0][0])

    # -- container files ---------------------------------------------------------------

    def create_container_file(
        self, tenant: str, container_id: str, *, name: str | None = None, data: bytes | None = None,
        file_id: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        if (file_id is None) == (data is None):
            raise ValueError("give exactly one of data (with its name) and file_id")
        self._live(tenant, container_id)
        source: Callable[[], BinaryIO]
        if file_id is not None:
            rows = self._rows("SELECT filename FROM files WHERE tenant = ? AND id = ?", [tenant, file_id])
            if not rows:
                raise NotFound(f"No file found with id '{file_id}'.", param="file_id")
            name, source = _name_of(rows[0][0], file_id), functools.partial(self.files.open, file_id)
        else:
            assert data is not None and name is not None
            source = functools.partial(io.BytesIO, data)
        written: list[str] = []
        try:
            with self._tx() as conn:
                made = self._write_user_file(conn, tenant, container_id, name, source, set(self._paths(tenant,
                                             container_id)), written)  # fmt: skip
                self._touch(conn, tenant, container_id)
        except BaseException:
            for path in written:
                self.dirs.unlink(container_id, path)
            raise
        return made

    def get_container_file(self, tenant: str, container_id: str, file_id: str) -> dict[str, Any] | None:
        self._live(tenant, container_id)
        with self._tx() as conn:
            self._touch(conn, tenant, container_id)
        rows = self._rows(f"SELECT {_FILE_COLUMNS} FROM container_files WHERE tenant = ? AND container_id = ?"
                          " AND id = ?", [tenant, container_id, file_id])  # fmt: skip
        return _file_object(rows[0]) if rows else None

    def list_container_files(
        self, tenant: str, container_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        self._live(tenant, container_id)
        with self._tx() as conn:
            self._touch(conn, tenant, container_id)
        sql = (f"SELECT created_at AS created, {_FILE_COLUMNS} FROM container_files WHERE tenant = ?"
               " AND container_id = ?")  # fmt: skip
        anchor = "SELECT created_at, id FROM container_files WHERE tenant = ? AND container_id = ? AND id = ?"
        return self._page(sql, [tenant, container_id], anchor, [tenant, container_id], after, limit, order,
                          lambda r: _file_object(r[1:]))  # fmt: skip

    def container_file_content(self, tenant: str, container_id: str, file_id: str) -> tuple[str, bytes] | None:
        found = self.get_container_file(tenant, container_id, file_id)
        if found is None:
            return None
        relative = found["path"].removeprefix(MOUNT + "/")
        data = self.dirs.read(container_id, relative)
        return None if data is None else (found["path"], data)

    def delete_container_file(self, tenant: str, container_id: str, file_id: str) -> bool:
        self._live(tenant, container_id)
        with self._tx() as conn:
            removed = [p for (p,) in conn.execute(
                "DELETE FROM container_files WHERE tenant = ? AND container_id = ? AND id = ? RETURNING path",
                [tenant, container_id, file_id],
            ).fetchall()]  # fmt: skip
            self._touch(conn, tenant, container_id)
        for path in removed:
            self.dirs.unlink(container_id, path)
        return bool(removed)

    def register_container_files(
        self, tenant: str, container_id: str, paths: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        self._live(tenant, container_id)
        rows = self._paths(tenant, container_id)
        if paths is None:
            on_disk: dict[str, tuple[int, int] | None] = dict(self.dirs.scan(container_id))
            candidates = sorted(set(on_disk) | set(rows))
        else:
            for path in paths:
                check_relative(path)
            candidates = sorted(set(paths))
            on_disk = {path: self.dirs.stat(container_id, path) for path in candidates}
        now = self.clock()
        changed: list[dict[str, Any]] = []
        with self._tx() as conn:
            for path in candidates:
                meta, row = on_disk.get(path), rows.get(path)
                if meta is None:
                    if row is not None:
                        conn.execute("DELETE FROM container_files WHERE tenant = ? AND id = ?", [tenant, row[0]])
                    continue
                size, mtime_ns = meta
                if row is None:
                    file_id, created_at = new_container_file_id(), now
                    conn.execute(
                        "INSERT INTO container_files (tenant, id, container_id, created_at, path, bytes, source,"
                        " mtime_ns) VALUES (?, ?, ?, ?, ?, ?, 'assistant', ?)",
                        [tenant, file_id, container_id, now, path, size, mtime_ns],
                    )
                elif (row[1], row[2]) != (size, mtime_ns):
                    file_id, created_at = row[0], row[4]
                    conn.execute(
                        "UPDATE container_files SET bytes = ?, mtime_ns = ?, source = 'assistant' WHERE tenant = ?"
                        " AND id = ?",
                        [size, mtime_ns, tenant, file_id],
                    )
                else:
                    continue
                changed.append(container_file_object(file_id, container_id=container_id, relative=path, size=size,
                                                     created_at=created_at, source="assistant"))  # fmt: skip
            self._touch(conn, tenant, container_id)
        return changed


def _name_of(filename: str, file_id: str) -> str:
    """The name a Files API file gets in a container: its filename's last component, or its id."""
    name = filename.replace("\\", "/").rpartition("/")[2].strip()
    if name in ("", ".", "..") or "\x00" in name or len(name.encode()) > _MAX_NAME_BYTES:
        return file_id
    return name


def _container_object(row: tuple[Any, ...]) -> dict[str, Any]:
    cid, name, created_at, status, minutes, last_active_at, memory_limit, policy = row
    return container_object(cid, name=name, created_at=created_at, status=status, expires_minutes=minutes,
                            last_active_at=last_active_at, memory_limit=memory_limit,
                            network_policy=json.loads(policy))  # fmt: skip


def _file_object(row: tuple[Any, ...]) -> dict[str, Any]:
    file_id, container_id, path, size, created_at, source = row
    return container_file_object(file_id, container_id=container_id, relative=path, size=size,
                                 created_at=created_at, source=source)  # fmt: skip
