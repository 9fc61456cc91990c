"""The containers area of the store contract: the Containers API's containers and container files.

A container is a row and a directory on disk (``<storage_path>.containers/<container id>/``,
:mod:`troupe.storage.container_files`), which the container's sandbox mounts at ``/mnt/data``;
a container file is a row and the file at its path in that directory. Objects are the wire
objects of :mod:`troupe.protocol.containers`: a container ``{"id", "object": "container",
"name", "created_at", "status", "expires_after", "last_active_at", "memory_limit",
"network_policy"}``, a file ``{"id", "object": "container.file", "container_id", "bytes",
"created_at", "path", "source"}`` (``path`` under ``/mnt/data``).

**Expiry**, lazily: a ``running`` container idle for its ``expires_after.minutes`` since
``last_active_at`` becomes ``expired`` the next time any method looks at it (or a sweep,
:meth:`Containers.expire_containers`, finds it): its file rows and its directory are deleted,
its own row stays (OpenAI shows an expired container's metadata). An expired container is never
active again. **Activity**: every method that addresses one running container's files, and
:meth:`~Containers.touch_container` (the container actor, on each run), sets its
``last_active_at``; :meth:`~Containers.get_container` does with ``touch=True`` (OpenAI counts a
retrieve as activity).

Errors of the file methods, all before anything is written: the container unknown (another
tenant's too): :class:`~troupe.protocol.NotFound` naming ``container_id``; expired:
:class:`~troupe.protocol.InvalidRequest` ``container_expired``
(:func:`troupe.protocol.containers.container_expired`); a Files API file unknown: ``NotFound``
naming ``file_ids`` / ``file_id``. Files on disk are read and written without following
symbolic links (code in the container may make one point anywhere).

Implemented by :class:`troupe.storage.duckdb_store.containers.ContainerTables`, on the files and
vector stores' thread and a connection of its own (its work is mostly file I/O, which must not
hold up the responses' writes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..base import Order, Page

__all__ = ["Containers"]


class Containers(Protocol):
    """Containers and their files, per tenant."""

    def create_container(self, tenant: str, container: dict[str, Any], file_ids: Sequence[str] = ()) -> dict[str, Any]:
        """Store a new ``running`` container, make its directory and copy the Files API files
        ``file_ids`` (the tenant's own) into it as ``user`` files; the container object.

        Args:
            container: ``{"id", "name", "created_at", "expires_minutes", "memory_limit",
                "network_policy"}``.

        Raises:
            NotFound: a file of ``file_ids`` is unknown (``param``: ``file_ids``); nothing is kept.
            StorageError: the id is taken, or the disk refused.
        """
        ...

    def get_container(self, tenant: str, container_id: str, *, touch: bool = False) -> dict[str, Any] | None:
        """A container (``running`` or ``expired``); None if unknown. ``touch``: a running one's
        ``last_active_at`` becomes now."""
        ...

    def list_containers(
        self, tenant: str, *, name: str | None = None, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """The tenant's containers by creation (``name``: only those so named; ``after``: a
        container id, an unknown one gives an empty page)."""
        ...

    def delete_container(self, tenant: str, container_id: str) -> bool:
        """Delete a container, its files' rows and its directory; False if unknown."""
        ...

    def touch_container(self, tenant: str, container_id: str) -> dict[str, Any] | None:
        """Mark a container active now (its ``last_active_at``); the container (an expired one
        stays expired: its status says so); None if unknown. The container actor calls it on
        each run."""
        ...

    def container_directory(self, tenant: str, container_id: str) -> str | None:
        """The absolute path of a running container's directory (what the sandbox mounts at
        ``/mnt/data``); None if the container is unknown or expired."""
        ...

    def expire_containers(self) -> list[tuple[str, str]]:
        """Expire every running container idle past its time, of every tenant (a sweep);
        ``(tenant, container id)`` of each expired now."""
        ...

    def count_running_containers(self) -> int:
        """How many containers, of every tenant, are running (not expired, not idle past their
        time): the ``troupe_containers_running`` gauge."""
        ...

    def create_container_file(
        self, tenant: str, container_id: str, *, name: str | None = None, data: bytes | None = None,
        file_id: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Add a ``user`` file to a running container: ``data`` named ``name`` (an upload), or
        the Files API file ``file_id`` (copied, under its filename). It goes in the container's
        top directory under its name; a name a file there has already gets OpenAI's form,
        ``<32 hex digits>-<name>``. The file object.

        Raises:
            NotFound: the container (``container_id``) or ``file_id`` (``file_id``) is unknown.
            InvalidRequest: the container is expired (``container_expired``).
        """
        ...

    def get_container_file(self, tenant: str, container_id: str, file_id: str) -> dict[str, Any] | None:
        """A container file; None if unknown. Raises as :meth:`create_container_file` for the container."""
        ...

    def list_container_files(
        self, tenant: str, container_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """A container's files by creation (``after``: a file id). Raises as
        :meth:`create_container_file` for the container."""
        ...

    def container_file_content(self, tenant: str, container_id: str, file_id: str) -> tuple[str, bytes] | None:
        """``(path, bytes)`` of a container file (``path`` under ``/mnt/data``); None if the file
        is unknown or no longer a regular file on disk. Raises as :meth:`create_container_file`
        for the container."""
        ...

    def delete_container_file(self, tenant: str, container_id: str, file_id: str) -> bool:
        """Delete a container file: its row and its bytes; False if unknown. Raises as
        :meth:`create_container_file` for the container."""
        ...

    def register_container_files(
        self, tenant: str, container_id: str, paths: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """After code ran in a container: bring its file rows in line with its directory.

        Args:
            paths: the files the run created or changed, relative to the directory (what the
                sandbox reports); None: walk the whole directory and find them by size and
                modification time.

        Returns:
            The file objects of the files that appeared (new rows, ``source: "assistant"``)
            or changed (their rows updated: ``bytes``, and ``source: "assistant"``; the id stays),
            by path. A file of ``paths`` (or, with None, any row) that is no longer a regular
            file on disk loses its row. Links and other special files are never files.

        Raises:
            NotFound, InvalidRequest: the container is unknown or expired.
        """
        ...
