"""Session artifacts: :class:`ArtifactService`, what publishes the files a completed session turn
wrote in its environment (on the conversation's host) and reads them back (the routes).

Ray-free. A session turn is one or more background responses whose ``metadata`` names the
session and the turn (``agent_session_id``, ``agent_session_turn_id``); in an ``openai_hosted``
environment their shell commands and code run in the environment's container. The rule::

    a run of the turn's responses writes files ──► note_turn_files(paths)     (each run, in the store)
    the turn's last response completes, no call left open ──► publish_artifacts
        (each noted file as it is now, copied: one artifact per (turn, path))

**Which files.** Each run is followed by the container's registration
(:meth:`~troupe.runtime.containers.ContainerService.register_files`): the files that appeared or
changed, by size and modification time, in that run (code: the sandbox's before/after walk of
the run; shell: a walk compared with the container's rows, so files any command wrote, under
any directory). Those are the turn's files, attributed to the run that wrote them: a listing of
the directory taken when the turn starts and compared at its end would also take files the
client added meanwhile (``environments.files.create``) or that another session sharing the
environment wrote, and the turn's start is not where its runs are (the ingress vs the host).
The noted paths are kept in the store, since a turn's responses may run in different processes
(a restart, a client's function call between them).

**When.** On the host, as the response that completes the turn ends: ``completed``, with no
function call left open (the client's, which make the turn wait, or the subagent tools, which
the session's runtime runs before the turn goes on), before the response is stored, so a client
told the turn completed finds its artifacts. A failed, cancelled or waiting turn publishes
nothing; a resumed run that completes publishes what is not published yet (the store's unique
key on (turn, path): once, whoever sees the completion). A subagent's turns publish nothing
(its artifacts are not served); a session without an environment has no runs to note.

**Bounds** (``[containers]``): files larger than ``artifact_max_bytes`` (50 MiB) are not published,
nor those past the first ``artifact_max_files`` (100) of a turn, in path order.

Example::

    artifacts = ArtifactService(store, settings.containers)
    runner = ContainerRunner(containers, fleet, tenant, on_files=artifacts.recorder(tenant, request.metadata))
    ...                                                   # the response runs its commands
    await artifacts.publish(tenant, response)             # [{"id": "art_…", "path": "/mnt/data/report.txt", …}]
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from troupe.protocol.artifacts import artifact_deleted, artifact_not_found
from troupe.protocol.sessions import open_calls, session_not_found
from troupe.runtime.settings import ContainersSettings
from troupe.runtime.store_client import StoreClient
from troupe.storage import Order, Page

__all__ = ["ArtifactService", "FilesWritten"]

log = logging.getLogger(__name__)

FilesWritten = Callable[[Sequence[str]], Awaitable[None]]
"""Told the paths (relative to the container's directory) a run wrote: a session turn's recorder."""


class ArtifactService:
    """The session artifacts of one runtime (or host), over its store client (module docstring)."""

    def __init__(self, store: StoreClient, settings: ContainersSettings) -> None:
        self.store = store
        self.settings = settings

    # -- publishing (the conversation's host) -----------------------------------------------

    def recorder(self, tenant: str, metadata: Mapping[str, Any] | None) -> FilesWritten | None:
        """What notes the files a run of a session turn's response wrote; None for a response of
        no session turn (its runs publish nothing)."""
        session_id, turn_id = _turn_of(metadata)
        if session_id is None or turn_id is None:
            return None

        async def note(paths: Sequence[str]) -> None:
            await self.store.note_turn_files(tenant, session_id, turn_id, list(paths))

        return note

    async def publish(self, tenant: str, response: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Publish the files of the session turn ``response`` completes (module docstring); the
        artifacts published now. Nothing for a response that does not complete a session turn."""
        session_id, turn_id = _turn_of(response.get("metadata"))
        if session_id is None or turn_id is None or response.get("status") != "completed" or open_calls(dict(response)):
            return []
        if not any(tool.get("type") == "shell" for tool in response.get("tools") or ()):
            return []  # no environment (its turns get the shell tool on its container): no store call
        session = await self.store.get_session(tenant, session_id)
        if session is None or not session.get("container_id"):
            return []
        # A subagent's turn publishes nothing (max_files 0), which forgets its noted paths.
        limit = 0 if session.get("parent_id") else self.settings.artifact_max_files
        return list(await self.store.publish_artifacts(
            tenant, session_id, turn_id, environment_id=session["environment"]["id"],
            container_id=session["container_id"], max_file_bytes=self.settings.artifact_max_bytes, max_files=limit,
        ))  # fmt: skip

    # -- reading (the routes) ----------------------------------------------------------------

    async def list_artifacts(
        self, tenant: str, session_id: str, *, environment_id: str | None = None, after: str | None = None,
        limit: int = 20, order: Order = "desc",
    ) -> Page:  # fmt: skip
        """The session's artifacts, newest first unless ``order`` is ``asc``.

        Raises: NotFound (``session_id``)."""
        await self._session(tenant, session_id)
        return await self.store.list_artifacts(tenant, session_id, environment_id=environment_id, after=after,
                                               limit=limit, order=order)  # fmt: skip

    async def get_artifact(self, tenant: str, session_id: str, artifact_id: str) -> dict[str, Any]:
        """Raises: NotFound (``session_id``, ``artifact_id``)."""
        await self._session(tenant, session_id)
        found = await self.store.get_artifact(tenant, session_id, artifact_id)
        if found is None:
            raise artifact_not_found(artifact_id)
        return dict(found)

    async def artifact_content(self, tenant: str, session_id: str, artifact_id: str) -> tuple[str, bytes]:
        """``(path, bytes)`` of an artifact. Raises as :meth:`get_artifact`."""
        await self._session(tenant, session_id)
        found = await self.store.artifact_content(tenant, session_id, artifact_id)
        if found is None:
            raise artifact_not_found(artifact_id)
        path, data = found
        return path, data

    async def delete_artifact(self, tenant: str, session_id: str, artifact_id: str) -> dict[str, Any]:
        """Delete an artifact and its copy (the live file and any Files API file stay).
        Raises as :meth:`get_artifact`."""
        await self._session(tenant, session_id)
        if not await self.store.delete_artifact(tenant, session_id, artifact_id):
            raise artifact_not_found(artifact_id)
        return artifact_deleted(artifact_id)

    async def _session(self, tenant: str, session_id: str) -> None:
        """Raise unless the session is the tenant's (a subagent is addressed under its parent: not here)."""
        found = await self.store.get_session(tenant, session_id)
        if found is None or found.get("parent_id"):
            raise session_not_found(session_id)


def _turn_of(metadata: Mapping[str, Any] | None) -> tuple[str | None, str | None]:
    """The session and turn a response's ``metadata`` names (``response_body``'s), or Nones."""
    metadata = metadata or {}
    session_id, turn_id = metadata.get("agent_session_id"), metadata.get("agent_session_turn_id")
    return (session_id, turn_id) if isinstance(session_id, str) and isinstance(turn_id, str) else (None, None)
