"""Live SQL: a read-only query over a running server's history, through its storage actor.

While ``troupe serve`` runs, its storage actor holds the DuckDB file, and DuckDB lets no
other process open it. So the actor leaves an *owner file* beside the database when it
opens it, ``<path>.owner.json``::

    {"address": "192.0.2.2:45557", "namespace": "troupe", "pid": 4242, "auth_mode": "token"}

(its Ray cluster's GCS address, its Ray namespace, its process id, and whether the cluster
wants Ray's auth token: Ray sends the token, from ``~/.ray/auth_token``, only to a cluster it
is told needs one when the address is given). ``troupe sql``, finding
the file locked (:class:`~troupe.storage.base.StoreLocked` names the process holding it),
reads the owner file with :func:`read_owner`, which trusts it only if the process holding the
lock is the one it names, and calls :func:`query_server`: it joins that Ray cluster as a
driver of its own, calls the actor's ``run_sql`` (read-only, with a timeout and a row limit,
on the store's thread between two write batches), and leaves. It creates no actor, and
leaving only disconnects it: ``ray.shutdown()`` in a driver that joined a cluster stops
nothing of the cluster.

A server that stops leaves its owner file behind (Ray kills the actor; nothing closes it).
That is harmless: the file is read only when the database is locked, and trusted only when
the lock holder is the process it names.

Example::

    owner = read_owner("troupe.duckdb", holder_pid=4242)   # None: not a running server's
    result = query_server(owner.address, owner.namespace, "SELECT count(*) FROM responses")
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from troupe.storage.base import DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT_S, QueryResult, StorageError

__all__ = ["OWNER_SUFFIX", "NoServer", "Owner", "owner_path", "query_server", "read_owner", "write_owner"]

OWNER_SUFFIX = ".owner.json"
"""The owner file's name is the database's with this appended."""


class NoServer(Exception):
    """No running Troupe storage actor could be reached at the address given; the message says why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Owner:
    """Who holds a DuckDB file: a storage actor, and how to reach it."""

    address: str
    """The GCS address of the actor's Ray cluster (``host:port``), what ``ray.init(address=…)`` takes."""
    namespace: str
    """The Ray namespace the actor is named in."""
    pid: int
    """The actor's process id (the process that holds the file's lock)."""
    auth_mode: str | None = None
    """The cluster's ``RAY_AUTH_MODE`` (``"token"``, Ray's default for a local instance), or None."""


def owner_path(database_path: str) -> str:
    """Where the owner file of the DuckDB file at ``database_path`` is."""
    return database_path + OWNER_SUFFIX


def write_owner(database_path: str, owner: Owner) -> None:
    """Write the owner file of ``database_path`` atomically (a reader never sees half of it).

    Raises:
        OSError: the directory is not writable.
    """
    target = owner_path(database_path)
    fd, temporary = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(target)), prefix=".owner-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(asdict(owner), f)
        os.replace(temporary, target)
    except BaseException:
        os.unlink(temporary)
        raise


def read_owner(database_path: str, holder_pid: int | None) -> Owner | None:
    """The owner of the locked DuckDB file ``database_path``, if its owner file names the process
    holding the lock (``holder_pid``; when that is unknown, a process that is alive); else None."""
    try:
        with open(owner_path(database_path), encoding="utf-8") as f:
            owner = Owner(**json.load(f))
    except (OSError, ValueError, TypeError):  # missing, or not an owner file
        return None
    if holder_pid is not None:
        return owner if owner.pid == holder_pid else None
    import psutil

    return owner if psutil.pid_exists(owner.pid) else None


def query_server(
    address: str,
    namespace: str,
    sql: str,
    *,
    max_rows: int = DEFAULT_MAX_ROWS,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    auth_mode: str | None = None,
) -> QueryResult:
    """Run a read-only query through the storage actor of the Troupe server on a Ray cluster.

    Joins the cluster at ``address`` (unless this process is connected to Ray already, which
    it then uses), finds the actor in ``namespace``, runs the query, and disconnects.

    Args:
        address: the cluster's GCS address (``host:port``), or ``auto``, or ``ray://…``.
        namespace: the Ray namespace of the server (its ``runtime.namespace``).
        sql, max_rows, timeout_s: as :meth:`~troupe.storage.contract.Console.run_sql` takes them.
        auth_mode: the cluster's ``RAY_AUTH_MODE`` (:attr:`Owner.auth_mode`), for joining it
            unless this process's environment says otherwise (or it has loaded Ray already).

    Raises:
        NoServer: nothing answers at ``address``, or no storage actor is in ``namespace``.
        QueryError, QueryTimeout, StorageError: as :meth:`~troupe.storage.contract.Console.run_sql`.
    """
    # A dead address fails the same whether or not this process is connected to Ray already.
    _check_listening(address)
    # Ray reads RAY_AUTH_MODE when it is first imported: set it before (the CLI's case).
    mode = None if "RAY_AUTH_MODE" in os.environ else auth_mode
    with _environment(RAY_AUTH_MODE=mode):
        import ray

        joined = not ray.is_initialized()
        if joined:
            try:
                # Quiet: the user reads the query's result, not Ray's start-up log.
                ray.init(address=address, namespace=namespace, log_to_driver=False, logging_level=logging.ERROR)
            except Exception as exc:  # ConnectionError, AuthenticationError, …: Ray's, translated here
                raise NoServer(f"cannot join the Ray cluster at {address}: {exc}{_auth_hint(exc)}") from exc

    from troupe.runtime.ray.actors import STORAGE_ACTOR_NAME
    from troupe.runtime.ray.calls import ray_result_sync

    try:
        try:
            handle = ray.get_actor(STORAGE_ACTOR_NAME, namespace=namespace)
        except ValueError as exc:
            raise NoServer(
                f"no Troupe storage actor in the Ray namespace {namespace!r} at {address} "
                "(the server's runtime.namespace: give its --config)"
            ) from exc
        ref: ray.ObjectRef[Any] = handle.call.remote("run_sql", (sql,), {"max_rows": max_rows, "timeout_s": timeout_s})
        return ray_result_sync(ref, own=StorageError)
    finally:
        if joined:
            ray.shutdown()  # a driver that joined a cluster only disconnects


@contextlib.contextmanager
def _environment(**values: str | None) -> Iterator[None]:
    """The environment with ``values`` set (those not None), as it was afterwards."""
    given = {name: value for name, value in values.items() if value is not None}
    saved = {name: os.environ.get(name) for name in given}
    os.environ.update(given)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _auth_hint(exc: BaseException) -> str:
    """What to do when Ray was refused for want of its auth token (the reason is in the causes)."""
    cause: BaseException | None = exc
    while cause is not None:
        if "InvalidAuthToken" in str(cause):
            return (
                "; the cluster wants Ray's auth token, which Ray sends to an address given only "
                "with RAY_AUTH_MODE=token (the token is in ~/.ray/auth_token)"
            )
        cause = cause.__cause__
    return ""


def _check_listening(address: str, timeout_s: float = 3.0) -> None:
    """Fail fast when nothing listens at a ``host:port`` address: ``ray.init`` would retry for minutes."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return  # "auto", "ray://…": Ray's own resolution
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise NoServer(f"no Ray cluster answers at {address}: {exc.strerror or exc}") from exc
