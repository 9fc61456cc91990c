"""Containers: the Containers API of the runtime, and what running code in a container asks of it.

:class:`ContainerService` is Ray-free: it checks a request against the ``[containers]``
settings (:class:`~troupe.runtime.settings.ContainersSettings`), makes ids, and reaches the
store's containers area (:class:`~troupe.storage.contract.Containers`, on the files' thread of
the storage actor, which owns the containers' directories beside the DuckDB file). Every method
is scoped to a tenant: another tenant's container or file is a 404, as an unknown one is.

A container is ``running`` until it has been idle (no API call addressing it, no run) for its
``expires_after.minutes``; then it is ``expired``, lazily, the next time anything looks at it
(and by :meth:`ContainerService.sweep`): as OpenAI's, it can still be retrieved and listed, its
files are discarded (its file routes answer 400 ``container_expired``), and it never runs again.

What runs code in a container (:class:`~troupe.runtime.container_runs.ContainerRunner`, in the
conversation's host) uses these methods:

* :meth:`~ContainerService.directory`: the host directory to mount at ``/mnt/data``;
* :meth:`~ContainerService.mark_active`: before (and after) each run, so the container does not
  expire while it is used; it raises once the container is expired or deleted (the code does
  not run);
* :meth:`~ContainerService.register_files`: after each run, with the sandbox's changed files,
  so that files the code wrote become container files with ids (``source: "assistant"``);
* :meth:`~ContainerService.sweep` is the runtime's: it expires containers idle past their time.

Deleting or expiring a container stops its sandbox (``stop``: the fleet's, in
:mod:`troupe.runtime.container_runs`).

Example::

    containers = ContainerService(settings.containers, store)
    made = await containers.create_container("acme", {"name": "analysis", "file_ids": ["file-…"]})
    path = await containers.directory("acme", made["id"])          # mount it at /mnt/data
    await containers.mark_active("acme", made["id"])
    ...                                                           # the code runs, writes out.csv
    await containers.register_files("acme", made["id"], ["out.csv"])   # [{"id": "cfile_…", …}]
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from troupe.protocol.containers import (
    container_deleted,
    container_expired,
    container_file_deleted,
    container_file_not_found,
    container_not_found,
    new_container_id,
    parse_container_create,
    upload_name,
)
from troupe.runtime.settings import ContainersSettings
from troupe.runtime.store_client import StoreClient
from troupe.storage import Order, Page

__all__ = ["ContainerService"]

log = logging.getLogger(__name__)


class ContainerService:
    """The containers of one runtime, over its store client (module docstring).

    Args:
        settings: the ``[containers]`` table: the memory limit cap, the expiry defaults.
        store: the store client (its containers area).
        stop: stops the sandbox of a container that was deleted or expired (the fleet's).
        reserve: the fleet's ``reserve``: the id of a sandbox's process already up, for a new container.
    """

    def __init__(
        self, settings: ContainersSettings, store: StoreClient, *, stop: Callable[[str], Awaitable[None]] | None = None,
        reserve: Callable[[str], Awaitable[str | None]] | None = None,
    ) -> None:  # fmt: skip
        self.settings = settings
        self.store = store
        self.stop = stop
        self.reserve = reserve
        """The id a new container with a given ``memory_limit`` takes when the fleet has a
        sandbox's process waiting for it (``ContainerFleet.reserve``); None: a new id."""
        """What stops a container's sandbox (``ContainerFleet.stop``), when its container is
        deleted or expires; None: no sandboxes are run from here."""

    # -- containers ----------------------------------------------------------------

    async def create_container(self, tenant: str, body: Any) -> dict[str, Any]:
        """``POST /v1/containers``: a new running container, with the Files API files ``file_ids``
        copied into it; the container object.

        Raises:
            InvalidRequest: the body (:func:`~troupe.protocol.containers.parse_container_create`),
                with the configured cap on ``memory_limit`` and range of ``expires_after.minutes``.
            NotFound: a file of ``file_ids`` is not the tenant's (``param``: ``file_ids``).
        """
        spec = parse_container_create(
            body, max_memory_limit=self.settings.max_memory_limit, default_minutes=self.settings.default_expires_minutes,
            max_minutes=self.settings.max_expires_minutes, allowlists=self.settings.network_allowlists,
        )  # fmt: skip
        reserved = await self.reserve(spec.memory_limit) if self.reserve is not None else None
        container = {
            "id": reserved or new_container_id(), "name": spec.name, "created_at": time.time(),
            "expires_minutes": spec.expires_minutes, "memory_limit": spec.memory_limit,
            "network_policy": spec.network_policy,
        }  # fmt: skip
        return await self.store.create_container(tenant, container, list(spec.file_ids))

    async def list_containers(
        self, tenant: str, *, name: str | None = None, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """The tenant's containers, running and expired, by creation (``name``: only those so named)."""
        return await self.store.list_containers(tenant, name=name, after=after, limit=limit, order=order)

    async def get_container(self, tenant: str, container_id: str) -> dict[str, Any]:
        """A container (a retrieve counts as activity, as OpenAI's does).

        Raises:
            NotFound: naming ``container_id``.
        """
        found = await self.store.get_container(tenant, container_id, touch=True)
        if found is None:
            raise container_not_found(container_id)
        return found

    async def delete_container(self, tenant: str, container_id: str) -> dict[str, Any]:
        """Delete a container and its files; ``{"id", "object": "container.deleted", "deleted": true}``.

        Raises:
            NotFound: naming ``container_id``.
        """
        if not await self.store.delete_container(tenant, container_id):
            raise container_not_found(container_id)
        await self._stop(container_id)
        return container_deleted(container_id)

    # -- container files -----------------------------------------------------------

    async def create_file(
        self, tenant: str, container_id: str, *, filename: str | None = None, data: bytes | None = None,
        file_id: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """``POST /v1/containers/{id}/files``: an upload (``data``, named after ``filename``'s last
        component) or a copy of the Files API file ``file_id``, in the container's ``/mnt/data``;
        the container file (``source: "user"``).

        Raises:
            NotFound: the container (``container_id``) or the file (``file_id``).
            InvalidRequest: the container is expired; ``filename`` is no file name (``file``).
        """
        if file_id is not None:
            return await self.store.create_container_file(tenant, container_id, file_id=file_id)
        name = upload_name(filename)
        return await self.store.create_container_file(tenant, container_id, name=name, data=data or b"")

    async def list_files(
        self, tenant: str, container_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """A container's files by creation.

        Raises:
            NotFound: the container. InvalidRequest: it is expired.
        """
        return await self.store.list_container_files(tenant, container_id, after=after, limit=limit, order=order)

    async def get_file(self, tenant: str, container_id: str, file_id: str) -> dict[str, Any]:
        """A container file.

        Raises:
            NotFound: the container (``container_id``) or the file (``file_id``). InvalidRequest:
                the container is expired.
        """
        found = await self.store.get_container_file(tenant, container_id, file_id)
        if found is None:
            raise container_file_not_found(file_id, container_id)
        return found

    async def file_content(self, tenant: str, container_id: str, file_id: str) -> tuple[str, bytes]:
        """``(path, bytes)`` of a container file; raises as :meth:`get_file` (and NotFound
        when code removed the file since it was registered)."""
        found = await self.store.container_file_content(tenant, container_id, file_id)
        if found is None:
            raise container_file_not_found(file_id, container_id)
        return found

    async def delete_file(self, tenant: str, container_id: str, file_id: str) -> dict[str, Any]:
        """Delete a container file (its bytes too); ``{"id", "object": "container.file.deleted",
        "deleted": true}``. Raises as :meth:`get_file`."""
        if not await self.store.delete_container_file(tenant, container_id, file_id):
            raise container_file_not_found(file_id, container_id)
        return container_file_deleted(file_id)

    # -- what runs code asks ------------------------------------------------------------

    async def directory(self, tenant: str, container_id: str) -> str:
        """The absolute path of a running container's directory, on the storage actor's node:
        what its sandbox mounts at ``/mnt/data``.

        Raises:
            NotFound: the container is unknown. InvalidRequest: it is expired.
        """
        path = await self.store.container_directory(tenant, container_id)
        if path is None:
            await self.mark_active(tenant, container_id)  # raises the right one
            raise container_not_found(container_id)  # deleted meanwhile
        return path

    async def mark_active(self, tenant: str, container_id: str) -> dict[str, Any]:
        """Mark a container active now (its ``last_active_at``), so that it does not expire while
        it runs code; the container object.

        Raises:
            NotFound: the container is unknown (deleted). InvalidRequest: ``container_expired``.
        """
        found = await self.store.touch_container(tenant, container_id)
        if found is None:
            raise container_not_found(container_id)
        if found["status"] != "running":
            raise container_expired(container_id)
        return found

    async def register_files(
        self, tenant: str, container_id: str, paths: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """After a run: the files that appeared or changed in the container's directory become
        container files (``source: "assistant"``), and rows of files that are gone go.

        Args:
            paths: the changed files, relative to the directory (the sandbox's
                ``changed_files``); None: walk the whole directory.

        Returns:
            The file objects of the new and changed files, by path (what ``container_file_citation``
            annotations name: ``id``, and ``path`` under ``/mnt/data``).

        Raises:
            NotFound: the container is unknown. InvalidRequest: it is expired.
        """
        return await self.store.register_container_files(tenant, container_id, None if paths is None else list(paths))

    async def sweep(self) -> list[tuple[str, str]]:
        """Expire every container idle past its time (their files go); ``(tenant, container id)``
        of each expired now."""
        expired = [(tenant, container_id) for tenant, container_id in await self.store.expire_containers()]
        for _, container_id in expired:
            await self._stop(container_id)
        return expired

    async def _stop(self, container_id: str) -> None:
        if self.stop is not None:
            try:
                await self.stop(container_id)
            except Exception:  # noqa: BLE001 - an idle sandbox also ends itself; the row is what counts
                log.warning("container %s: its sandbox could not be stopped", container_id, exc_info=True)
