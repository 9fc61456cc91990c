"""Session artifacts (the Agents API's ``client.beta.agents.sessions.artifacts``): their objects,
ids and errors.

An artifact is an immutable copy of a file that a completed turn of a session in an
``openai_hosted`` environment wrote there (:mod:`troupe.runtime.artifacts` publishes them). Its
object is the SDK's ``SessionArtifact``::

    {"id": "art_…", "object": "agent.session.artifact", "session_id": "sess_…", "turn_id": "turn_…",
     "environment_id": "env_…", "path": "/mnt/data/report.txt", "size_bytes": 12, "created_at": 1764400000}

``path`` is the file's absolute path in the environment: under ``/mnt/data``, the container's
directory (which ``/workspace`` links to). Ids are ``art_…`` (OpenAI does not document its prefix).
"""

from __future__ import annotations

from typing import Any

from .containers import MOUNT
from .errors import NotFound, check_id_format
from .ids import ENVIRONMENT, SESSION_ARTIFACT, new_id

__all__ = [
    "artifact_deleted",
    "artifact_not_found",
    "artifact_object",
    "artifact_path",
    "check_artifact_id",
    "check_environment_filter",
    "new_artifact_id",
]


def new_artifact_id() -> str:
    return new_id(SESSION_ARTIFACT)


def artifact_path(relative: str) -> str:
    """The absolute path in the environment of a file at ``relative`` in its container's directory."""
    return f"{MOUNT}/{relative}"


def artifact_object(
    artifact_id: str, *, session_id: str, turn_id: str, environment_id: str, path: str, size_bytes: int,
    created_at: float,
) -> dict[str, Any]:  # fmt: skip
    """The wire object (the SDK's ``SessionArtifact``); ``path`` absolute (:func:`artifact_path`)."""
    return {"id": artifact_id, "object": "agent.session.artifact", "created_at": int(created_at),
            "environment_id": environment_id, "path": path, "session_id": session_id, "size_bytes": size_bytes,
            "turn_id": turn_id}  # fmt: skip


def artifact_deleted(artifact_id: str) -> dict[str, Any]:
    return {"id": artifact_id, "object": "agent.session.artifact.deleted", "deleted": True}


def artifact_not_found(artifact_id: str) -> NotFound:
    return NotFound(f"Artifact with id '{artifact_id}' not found.", param="artifact_id")


def check_artifact_id(value: str) -> str:
    """``value`` if it is shaped as an artifact id; else 400 naming ``artifact_id``."""
    return check_id_format(value, f"{SESSION_ARTIFACT}_", "artifact_id")


def check_environment_filter(value: str | None) -> str | None:
    """A list's ``environment_id`` filter: None, or an environment id (else 400 naming ``environment_id``)."""
    return None if value is None else check_id_format(value, f"{ENVIRONMENT}_", "environment_id")
