"""The artifacts area of the store contract: the files session turns published (the Agents API's
session artifacts, :mod:`troupe.protocol.artifacts`).

Two kinds of rows:

* **a turn's written paths**: while a session's turn runs commands and code in its environment's
  container, each run notes the files it wrote (:meth:`Artifacts.note_turn_files`, paths relative
  to the container's directory). They are kept in the store, not in the host's memory, because a
  turn is one or more responses, which a server restart may split between processes.
* **artifacts**: when the turn completes, :meth:`Artifacts.publish_artifacts` copies each noted
  file's bytes as they are then into the Files API's byte store
  (:class:`~troupe.storage.file_bytes.FileBytes`, ``<path>.files/<artifact id>``): a copy, so a
  later change of the live file, or the container's expiry, leaves the artifact as it was. One
  artifact per (turn, path), whoever publishes (a unique key: a second publisher, another replica
  or a resumed run, adds nothing).

Objects are the wire objects of :func:`troupe.protocol.artifacts.artifact_object`. Every method
is scoped to a tenant (another tenant's artifact is None, as an unknown one is) and to the
session that owns the artifact.

Implemented by :class:`troupe.storage.duckdb_store.artifacts.ArtifactTables`, on the files and
vector stores' thread beside the containers (whose directories it reads) and the Files API's bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..base import Order, Page

__all__ = ["Artifacts"]


class Artifacts(Protocol):
    """Session artifacts and the turns' written paths they are published from, per tenant."""

    def note_turn_files(self, tenant: str, session_id: str, turn_id: str, paths: Sequence[str]) -> None:
        """Note that a run of the session's turn ``turn_id`` wrote the files at ``paths`` (relative
        to its container's directory); a path noted twice is noted once."""
        ...

    def publish_artifacts(
        self, tenant: str, session_id: str, turn_id: str, *, environment_id: str, container_id: str,
        max_file_bytes: int, max_files: int,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Publish the completed turn's noted files: for each path, in path order, a copy of the
        file in ``container_id``'s directory as it is now, unless it is gone (or not a regular
        file), larger than ``max_file_bytes``, already published for this turn, or past the first
        ``max_files`` the turn publishes. Then forget the session's noted paths (a failed or
        cancelled earlier turn's too: they are never published).

        Returns:
            The artifacts published now (none when another caller published them first).
        """
        ...

    def list_artifacts(
        self, tenant: str, session_id: str, *, environment_id: str | None = None, after: str | None = None,
        limit: int = 20, order: Order = "desc",
    ) -> Page:  # fmt: skip
        """The session's artifacts by publication (``environment_id``: only those it produced);
        an unknown ``after`` gives an empty page."""
        ...

    def get_artifact(self, tenant: str, session_id: str, artifact_id: str) -> dict[str, Any] | None:
        """An artifact of the session; None if unknown."""
        ...

    def artifact_content(self, tenant: str, session_id: str, artifact_id: str) -> tuple[str, bytes] | None:
        """``(path, bytes)`` of an artifact of the session; None if unknown.

        Raises:
            StorageError: its bytes are missing or unreadable.
        """
        ...

    def delete_artifact(self, tenant: str, session_id: str, artifact_id: str) -> bool:
        """Delete an artifact and its bytes (never the live file it was copied from); False if unknown."""
        ...

    def delete_session_artifacts(self, tenant: str, session_id: str) -> int:
        """Delete every artifact of the session (rows and bytes) and its noted paths; how many artifacts went."""
        ...
