"""The Containers API's wire shapes, pure: the create body, the container and container file
objects, their deleted markers and errors.

A container (``cntr_…``) is a sandbox's place on the server: a directory that the sandbox
mounts at ``/mnt/data`` (:data:`MOUNT`), and the container files in it (``cfile_…``), each
with its path under ``/mnt/data`` and its ``source``: ``user`` (uploaded, or copied from a file
of the Files API) or ``assistant`` (written by code run in the container).

``POST /v1/containers`` takes (:func:`parse_container_create`)::

    {"name": str,                                                  required
     "expires_after": {"anchor": "last_active_at", "minutes": int},   default 20 minutes
     "file_ids": [str, ...],                                       Files API files, copied in
     "memory_limit": "1g" | "4g" | "16g" | "64g",                  default "1g"
     "network_policy": {"type": "disabled"}                        the default: no network
                     | {"type": "allowlist", "allowed_domains": [str, ...]},   those domains only
     "skills": []}                                                 none supported

Status: ``running`` while in use; ``expired`` once idle for ``expires_after.minutes`` since
``last_active_at`` (OpenAI's rule: its metadata stays readable, its files are discarded, and it
cannot be made active again). A deleted container is gone (404), as OpenAI's is.

Example::

    >>> spec = parse_container_create({"name": "analysis"}, max_memory_limit="4g")
    >>> spec.memory_limit, spec.expires_minutes, spec.network_policy
    ('1g', 20, {'type': 'disabled'})
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any, Literal

from .errors import InvalidRequest, NotFound, object_body, show_value, wrong_type
from .ids import CONTAINER, CONTAINER_FILE, new_id

__all__ = [
    "DEFAULT_EXPIRES_MINUTES",
    "MAX_EXPIRES_MINUTES",
    "MEMORY_LIMITS",
    "MOUNT",
    "ContainerSpec",
    "ContainerStatus",
    "FileSource",
    "container_deleted",
    "container_expired",
    "container_file_deleted",
    "container_file_not_found",
    "container_file_object",
    "container_not_found",
    "container_object",
    "new_container_file_id",
    "new_container_id",
    "parse_container_create",
    "parse_container_file_body",
    "parse_network_policy",
    "upload_name",
    "wire_path",
]

MEMORY_LIMITS = ("1g", "4g", "16g", "64g")
"""The memory limits OpenAI names, smallest first."""
MemoryLimit = Literal["1g", "4g", "16g", "64g"]
DEFAULT_EXPIRES_MINUTES = 20
"""A container idle this long expires (OpenAI's default)."""
MAX_EXPIRES_MINUTES = 7 * 24 * 60
"""The longest idle time a container may ask for (the server may allow less)."""
MOUNT = "/mnt/data"
"""Where a container's directory is inside its sandbox; container file paths begin with it."""

ContainerStatus = Literal["running", "expired"]
FileSource = Literal["user", "assistant"]

_CREATE_KEYS = ("name", "expires_after", "file_ids", "memory_limit", "network_policy", "skills")
_MAX_NAME = 256
_MAX_FILE_IDS = 100
_MAX_FILENAME_BYTES = 255


def new_container_id() -> str:
    return new_id(CONTAINER)


def new_container_file_id() -> str:
    return new_id(CONTAINER_FILE)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerSpec:
    """A valid ``POST /v1/containers`` body."""

    name: str
    expires_minutes: int
    """Idle minutes after ``last_active_at`` before it expires."""
    file_ids: tuple[str, ...]
    """Files of the Files API to copy in (each once, in the order given)."""
    memory_limit: MemoryLimit
    network_policy: dict[str, Any]
    """``{"type": "disabled"}``: the one policy supported."""


# -- bodies ------------------------------------------------------------------------------


def parse_container_create(
    body: Any, *, max_memory_limit: str = "64g", default_minutes: int = DEFAULT_EXPIRES_MINUTES,
    max_minutes: int = MAX_EXPIRES_MINUTES, allowlists: bool = True,
) -> ContainerSpec:  # fmt: skip
    """``POST /v1/containers``'s body, checked.

    Args:
        max_memory_limit: the largest ``memory_limit`` the server allows (one of :data:`MEMORY_LIMITS`).
        default_minutes: ``expires_after.minutes`` when it is left out.
        max_minutes: the largest ``expires_after.minutes`` allowed.
        allowlists: whether a ``network_policy`` may be an allowlist (:func:`parse_network_policy`).

    Raises:
        InvalidRequest: naming the field (``name``, ``expires_after.minutes``, ``file_ids[2]``,
            ``memory_limit``, ``network_policy``, ``skills``…). ``memory_limit`` above
            ``max_memory_limit``, an allowlist the server does not allow and ``domain_secrets``
            are ``unsupported_value``; ``skills`` is ``unsupported_parameter``.
    """
    body = object_body(body, "", _CREATE_KEYS)
    if "name" not in body:
        raise InvalidRequest("Missing required parameter: 'name'.", param="name", code="missing_required_parameter")
    name = body["name"]
    if not isinstance(name, str):
        raise wrong_type("name", "a string", name)
    if not name.strip() or len(name) > _MAX_NAME:
        raise InvalidRequest(f"Invalid 'name': expected 1 to {_MAX_NAME} characters, not only white space.",
                             param="name", code="invalid_value")  # fmt: skip
    spec = ContainerSpec(
        name=name,
        expires_minutes=_expires_minutes(body.get("expires_after"), default_minutes, max_minutes),
        file_ids=_file_ids(body.get("file_ids")),
        memory_limit=_memory_limit(body.get("memory_limit"), max_memory_limit),
        network_policy=_network_policy(body.get("network_policy"), allowlists),
    )
    _check_skills(body.get("skills"))
    return spec


def parse_container_file_body(body: Any) -> str:
    """``POST /v1/containers/{id}/files`` as JSON (or a form without a file): ``{"file_id"}``, a
    file of the Files API to copy in; that id.

    Raises:
        InvalidRequest: not an object, unknown keys, ``file_id`` missing or not a string.
    """
    body = object_body(body, "", ("file_id",))
    if "file_id" not in body:
        raise InvalidRequest("Missing required parameter: give a 'file' (a multipart upload) or a 'file_id'.",
                             param="file_id", code="missing_required_parameter")  # fmt: skip
    file_id = body["file_id"]
    if not isinstance(file_id, str) or not file_id:
        raise wrong_type("file_id", "a non-empty string", file_id)
    return file_id


def upload_name(filename: str | None) -> str:
    """The name an uploaded file gets in the container: its last path component (``a/b.csv`` →
    ``b.csv``; a client's directories are not the container's).

    Raises:
        InvalidRequest: naming ``file``: no name left, ``.``/``..``, a NUL, or over 255 bytes.
    """
    name = (filename or "").replace("\\", "/").rpartition("/")[2].strip()
    if name in ("", ".", "..") or "\x00" in name or len(name.encode()) > _MAX_FILENAME_BYTES:
        raise InvalidRequest(f"Invalid file name {show_value(filename or '')}: expected a file name of 1 to "
                             f"{_MAX_FILENAME_BYTES} bytes.", param="file", code="invalid_value")  # fmt: skip
    return name


def wire_path(relative: str) -> str:
    """A container file's ``path``: its path relative to the container's directory, under
    :data:`MOUNT` (``data.csv`` → ``/mnt/data/data.csv``)."""
    return posixpath.join(MOUNT, relative)


def _expires_minutes(value: Any, default: int, most: int) -> int:
    if value is None:
        return default
    value = object_body(value, "expires_after", ("anchor", "minutes"))
    for key in ("anchor", "minutes"):
        if key not in value:
            raise InvalidRequest(f"Missing required parameter: 'expires_after.{key}'.", param=f"expires_after.{key}",
                                 code="missing_required_parameter")  # fmt: skip
    if value["anchor"] != "last_active_at":
        raise InvalidRequest(f"Invalid 'expires_after.anchor': {show_value(value['anchor'])}. Expected "
                             "'last_active_at' (the only anchor).", param="expires_after.anchor", code="invalid_value")  # fmt: skip
    minutes = value["minutes"]
    if isinstance(minutes, bool) or not isinstance(minutes, int):
        raise wrong_type("expires_after.minutes", "an integer", minutes)
    if not 1 <= minutes <= most:
        raise InvalidRequest(f"Invalid 'expires_after.minutes': {minutes}. Expected 1 to {most} minutes.",
                             param="expires_after.minutes", code="invalid_value")  # fmt: skip
    return minutes


def _file_ids(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise wrong_type("file_ids", "an array of file ids", value)
    if len(value) > _MAX_FILE_IDS:
        raise InvalidRequest(f"Invalid 'file_ids': at most {_MAX_FILE_IDS} files, got {len(value)}.",
                             param="file_ids", code="array_above_max_length")  # fmt: skip
    for i, file_id in enumerate(value):
        if not isinstance(file_id, str) or not file_id:
            raise wrong_type(f"file_ids[{i}]", "a file id", file_id)
    return tuple(dict.fromkeys(value))


def _memory_limit(value: Any, most: str) -> MemoryLimit:
    if value is None:
        return "1g"
    if value not in MEMORY_LIMITS:
        raise InvalidRequest(f"Invalid 'memory_limit': {show_value(value)}. Expected one of "
                             f"{', '.join(repr(m) for m in MEMORY_LIMITS)}.", param="memory_limit", code="invalid_value")  # fmt: skip
    if MEMORY_LIMITS.index(value) > MEMORY_LIMITS.index(most):
        raise InvalidRequest(f"Unsupported 'memory_limit': {value!r}. This server allows containers of at most "
                             f"{most!r}.", param="memory_limit", code="unsupported_value")  # fmt: skip
    return value


MAX_ALLOWED_DOMAINS = 100
_DOMAIN = re.compile(r"(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.?")


def parse_network_policy(value: Any, *, param: str = "network_policy", allowlists: bool = True) -> dict[str, Any]:
    """A container's ``network_policy``, checked: ``{"type": "disabled"}`` (the default, for None)
    or ``{"type": "allowlist", "allowed_domains": [...]}`` (domains and their subdomains, through
    the sandbox's egress proxy; ``*.`` before a domain says the same).

    Raises:
        InvalidRequest: naming the field under ``param``; an allowlist where the server allows
            none (``allowlists`` false) and ``domain_secrets`` are ``unsupported_value``.
    """
    if value is None:
        return {"type": "disabled"}
    if not isinstance(value, dict):
        raise wrong_type(param, "an object", value)
    kind = value.get("type")
    if kind == "disabled":
        object_body(value, param, ("type",))
        return {"type": "disabled"}
    if kind != "allowlist":
        raise InvalidRequest(f"Invalid '{param}.type': {show_value(kind)}. Expected 'disabled' or 'allowlist'.",
                             param=f"{param}.type", code="invalid_value")  # fmt: skip
    if not allowlists:
        raise InvalidRequest(f"Unsupported '{param}': this server runs containers without network access, so an "
                             f"'allowlist' cannot be honoured. Leave '{param}' out, or send {{\"type\": \"disabled\"}}.",
                             param=param, code="unsupported_value")  # fmt: skip
    object_body(value, param, ("type", "allowed_domains", "domain_secrets"))
    if value.get("domain_secrets"):
        raise InvalidRequest(f"Unsupported '{param}.domain_secrets': secrets are not injected into a container's "
                             "requests here.", param=f"{param}.domain_secrets", code="unsupported_value")  # fmt: skip
    domains = value.get("allowed_domains")
    where = f"{param}.allowed_domains"
    if not isinstance(domains, list):
        raise wrong_type(where, "an array of domain names", domains)
    if not 1 <= len(domains) <= MAX_ALLOWED_DOMAINS:
        raise InvalidRequest(f"Invalid '{where}': expected 1 to {MAX_ALLOWED_DOMAINS} domains, got {len(domains)}.",
                             param=where, code="invalid_value")  # fmt: skip
    for i, domain in enumerate(domains):
        if not isinstance(domain, str) or len(domain) > 253 or not _DOMAIN.fullmatch(domain.lower()):
            raise InvalidRequest(f"Invalid '{where}[{i}]': {show_value(domain)} is not a domain name.",
                                 param=f"{where}[{i}]", code="invalid_value")  # fmt: skip
    return {"type": "allowlist", "allowed_domains": [d.lower() for d in domains]}


def _network_policy(value: Any, allowlists: bool) -> dict[str, Any]:
    return parse_network_policy(value, allowlists=allowlists)


def _check_skills(value: Any) -> None:
    if value is None or value == []:
        return
    raise InvalidRequest("Unsupported parameter: 'skills'. This server's containers take no skills.",
                         param="skills", code="unsupported_parameter")  # fmt: skip


# -- objects -----------------------------------------------------------------------------


def container_object(
    container_id: str, *, name: str, created_at: float, status: ContainerStatus, expires_minutes: int,
    last_active_at: float, memory_limit: str, network_policy: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """The wire object (the SDK's ``ContainerRetrieveResponse``): ``{"id", "object": "container",
    "name", "created_at", "status", "expires_after", "last_active_at", "memory_limit",
    "network_policy"}``."""
    return {
        "id": container_id, "object": "container", "name": name, "created_at": int(created_at), "status": status,
        "expires_after": {"anchor": "last_active_at", "minutes": expires_minutes},
        "last_active_at": int(last_active_at), "memory_limit": memory_limit, "network_policy": dict(network_policy),
    }  # fmt: skip


def container_file_object(
    file_id: str, *, container_id: str, relative: str, size: int, created_at: float, source: FileSource
) -> dict[str, Any]:
    """The wire object (the SDK's ``FileRetrieveResponse``): ``{"id", "object": "container.file",
    "container_id", "bytes", "created_at", "path", "source"}``; ``relative`` is its path in the
    container's directory."""
    return {
        "id": file_id, "object": "container.file", "container_id": container_id, "bytes": size,
        "created_at": int(created_at), "path": wire_path(relative), "source": source,
    }  # fmt: skip


def container_deleted(container_id: str) -> dict[str, Any]:
    return {"id": container_id, "object": "container.deleted", "deleted": True}


def container_file_deleted(file_id: str) -> dict[str, Any]:
    return {"id": file_id, "object": "container.file.deleted", "deleted": True}


# -- errors ------------------------------------------------------------------------------


def container_not_found(container_id: str) -> NotFound:
    return NotFound(f"Container with id '{container_id}' not found.", param="container_id")


def container_file_not_found(file_id: str, container_id: str) -> NotFound:
    return NotFound(f"Container file with id '{file_id}' not found in container '{container_id}'.", param="file_id")


def container_expired(container_id: str) -> InvalidRequest:
    """What a file operation on an expired container answers: its files were discarded."""
    return InvalidRequest(
        f"Container '{container_id}' is expired: it was idle past its expires_after, and its files were discarded. "
        "Create a new container (and add its files again).",
        param="container_id", code="container_expired",
    )  # fmt: skip
