"""Credentials a request carries never reach disk in plain text.

A durable run keeps its create request in ``runs`` (:class:`~troupe.storage.RunRecord`), so that
a run lost with its server can be resumed. Its credentials (today the ``headers`` and
``authorization`` of its ``mcp`` tools, :data:`~troupe.protocol.MCP_SECRET_KEYS`) are taken out
of the request before it is stored (:func:`withhold`), and kept one of two ways:

* **in memory only** (the default): the runtime that started the run holds the request, so a
  run whose host died is resumed with its credentials by that runtime's watcher. A run resumed
  by another process (the server was restarted) has no credentials to call its MCP servers
  with: it is stored ``failed`` with :data:`CREDENTIALS_NOT_KEPT` and the output its checkpoints
  hold, and the client sends the request again.
* **sealed** with a key from the configuration (``credentials_keys``, ``TROUPE_CREDENTIALS_KEYS``):
  Fernet (AES-128-CBC with HMAC-SHA256, from ``cryptography``), so that a run resumed after a
  restart keeps its credentials. The key never sits beside the database: it is read from the
  environment or the configuration file, and the runs row holds only the token. Several keys
  rotate: the first seals, every one of them opens.

The row says which (:attr:`RunRecord.credentials`): None, the request carried none;
:data:`IN_MEMORY`, withheld; ``fernet:<token>``, sealed.

Example::

    keys = CredentialKeys([new_key()])
    stored, secrets = withhold(request)        # request: the create body as JSON
    kept = keys.keep(secrets)                  # "fernet:…" (IN_MEMORY without a key)
    assert restore(stored, keys.open(kept)) == request
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from troupe.protocol import MCP_SECRET_KEYS

__all__ = [
    "CREDENTIALS_NOT_KEPT",
    "IN_MEMORY",
    "CredentialKeys",
    "CredentialsUnavailable",
    "new_key",
    "restore",
    "withhold",
]

IN_MEMORY = "in-memory"
""":attr:`RunRecord.credentials` of a run whose credentials were kept in memory only."""

_SEALED = "fernet:"

CREDENTIALS_NOT_KEPT = (
    "The run was interrupted by a server restart, and its MCP credentials (headers, authorization) are not kept "
    "across restarts: send the request again. (Set credentials_keys to keep them, encrypted, for resumption.)"
)
"""The error of a run that could not be resumed for want of its credentials."""

Secrets = dict[str, dict[str, Any]]
"""A request's credentials: ``{"<index in tools>": {"headers": …, "authorization": …}}``."""


class CredentialsUnavailable(Exception):
    """A run's credentials cannot be had: kept in memory by a process that is gone, or sealed
    with a key this server does not have."""


def withhold(request: dict[str, Any]) -> tuple[dict[str, Any], Secrets]:
    """``request`` (a create body as JSON) without its credentials, and the credentials.

    ``request`` is not changed. A request that carries none gives ``(request, {})``.
    """
    secrets: Secrets = {}
    tools = request.get("tools")
    if not isinstance(tools, list):
        return request, secrets
    kept = []
    for index, tool in enumerate(tools):
        if isinstance(tool, dict) and tool.get("type") == "mcp" and MCP_SECRET_KEYS & tool.keys():
            secrets[str(index)] = {k: tool[k] for k in MCP_SECRET_KEYS if k in tool}
            tool = {k: v for k, v in tool.items() if k not in MCP_SECRET_KEYS}
        kept.append(tool)
    if not secrets:
        return request, secrets
    return {**request, "tools": kept}, secrets


def restore(request: dict[str, Any], secrets: Secrets) -> dict[str, Any]:
    """The inverse of :func:`withhold`: ``request`` with ``secrets`` put back (a new dict)."""
    if not secrets:
        return request
    restored = copy.deepcopy(request)
    for index, values in secrets.items():
        restored["tools"][int(index)].update(values)
    return restored


def new_key() -> str:
    """A new random key for ``credentials_keys`` (url-safe base64 of 32 bytes)."""
    return Fernet.generate_key().decode()


class CredentialKeys:
    """The keys credentials are sealed with: the first seals, each opens (rotation).

    Args:
        keys: Fernet keys (url-safe base64 of 32 random bytes, as :func:`new_key` makes).

    Raises:
        ValueError: a key that is not a Fernet key.
    """

    def __init__(self, keys: Sequence[str]) -> None:
        self._fernet = MultiFernet([Fernet(key) for key in keys]) if keys else None

    def __repr__(self) -> str:  # never the keys
        return f"CredentialKeys({'set' if self._fernet else 'none'})"

    @property
    def sealing(self) -> bool:
        """True when there is a key, so credentials are kept (sealed) for resumption."""
        return self._fernet is not None

    def keep(self, secrets: Secrets) -> str | None:
        """What a run's row keeps of ``secrets``: None when there are none, the sealed token
        with a key, else :data:`IN_MEMORY` (the row then holds nothing of them)."""
        if not secrets:
            return None
        if self._fernet is None:
            return IN_MEMORY
        return _SEALED + self._fernet.encrypt(json.dumps(secrets).encode()).decode()

    def open(self, kept: str | None) -> Secrets:
        """The credentials a row keeps (``{}`` for None).

        Raises:
            CredentialsUnavailable: they were kept in memory only, or sealed with a key this
                server does not have.
        """
        if kept is None:
            return {}
        if not kept.startswith(_SEALED):
            raise CredentialsUnavailable("kept in memory only")
        if self._fernet is None:
            raise CredentialsUnavailable("sealed, and no credentials_keys are set")
        try:
            return json.loads(self._fernet.decrypt(kept[len(_SEALED) :].encode()))
        except InvalidToken as exc:
            raise CredentialsUnavailable("sealed with a key that is not in credentials_keys") from exc
