"""MCP clients for the agent loop: long-lived connection actors on Ray, or in-process sessions.

Both implement :class:`~troupe.agentloop.mcp.McpClient`:

* :class:`RayMcpClient` routes every server to its connection actor, one per (URL or
  command, credentials), named ``troupe-mcp-<digest>`` in the runtime's namespace and
  shared by every host: each keeps one MCP session open for everyone using that server.
  The actors are detached (a host that dies does not take them along) and end when idle.
* :class:`LocalMcpClient` keeps the same :class:`~troupe.runtime.mcp_session.McpSession`
  objects in-process (``Runtime.local``, tests without Ray).

``check_server`` applies the URL policy of :mod:`troupe.runtime.mcp_policy` when the
request arrives, and every session connects through that policy's
:func:`~troupe.runtime.mcp_policy.connect_guard` (checked again at connect time);
:func:`resolve_mcp_tool` turns a request's ``mcp`` tool into an ``McpServer``.

A new connection actor takes a Ray worker's start-up (seconds on a busy machine) before
it can even try the server. So the first listing through a fresh actor races a plain TCP
connect from the caller, through the same guard: a server that refuses connections (or
an address the policy refuses) is reported at once rather than after the actor is up.

Example::

    client = LocalMcpClient(settings)
    server = resolve_mcp_tool(request_tool, settings, index=0)
    client.check_server(server, 0)          # InvalidRequest if it may not be reached
    tools = await client.list_tools(server)
    text = await client.call_tool(server, "add", {"a": 1, "b": 2})
    await client.close()
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable
from typing import Any, TypeVar

from troupe.agentloop.mcp import McpError, McpServer, McpTool
from troupe.runtime.mcp_policy import (
    AddressGuard,
    AddressRefused,
    actor_name,
    check_server,
    connect_guard,
    connection_key,
    resolve_mcp_tool,
    try_connect,
)
from troupe.runtime.mcp_session import McpSession, tool_output
from troupe.runtime.ray.actors import start_actor
from troupe.runtime.ray.calls import ray_result
from troupe.runtime.ray.idle import exit_when_idle
from troupe.runtime.settings import RuntimeSettings

__all__ = [
    "McpConnection",
    "RayMcpClient",
    "LocalMcpClient",
    "McpSession",
    "resolve_mcp_tool",
    "check_server",
    "actor_name",
    "connection_key",
    "tool_output",
]

T = TypeVar("T")

_MAX_SESSIONS = 256
"""In-process sessions kept (least recently used are closed): each distinct credential opens one."""
_RAY_GRACE_S = 30.0
"""Beyond the per-call timeout the actor enforces, how long a Ray call may take (actor start-up)."""


class McpConnection:
    """The connection actor's body: one :class:`McpSession`, shared by every caller of that server.

    Args:
        server: The server (its headers stay inside this object).
        timeout_s: Per-call timeout.
        list_ttl_s: ``tools/list`` cache lifetime.
        idle_exit_s: On Ray, exit after this long without a call (None: never); the
            client creates the actor again on the next call.
        guard: Which addresses the session may connect to (None: a trusted server).
    """

    def __init__(self, server: McpServer, timeout_s: float = 30.0, list_ttl_s: float = 300.0,
                 idle_exit_s: float | None = None, guard: AddressGuard | None = None) -> None:
        self._new_session = lambda sse=False: McpSession(server, timeout_s=timeout_s, list_ttl_s=list_ttl_s,
                                                         guard=guard, sse=sse)
        self._session = self._new_session()
        self._label = server.label
        self._idle_exit_s = idle_exit_s
        self._active = 0
        self._last_active = time.monotonic()
        self._watcher: asyncio.Task[None] | None = None

    def __repr__(self) -> str:  # Ray prints this in logs: the label only, never the headers
        return f"McpConnection({self._label!r})"

    async def list_tools(self, refresh: bool = False) -> list[McpTool]:
        """See :meth:`McpSession.list_tools`."""
        return await self._run(self._session.list_tools(refresh))

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """See :meth:`McpSession.call_tool`."""
        return await self._run(self._session.call_tool(name, arguments))

    async def stats(self) -> dict[str, Any]:
        """Counters: ``sessions_opened``, ``reconnects``, ``calls``, ``list_calls``, ``server_lists``."""
        return dict(self._session.stats)

    async def transport(self) -> str:
        """The transport the server speaks, as far as known (see :attr:`McpSession.transport`)."""
        return self._session.transport

    async def close(self) -> None:
        await self._session.close()

    async def _run(self, work: Awaitable[T]) -> T:
        if self._idle_exit_s is not None and self._watcher is None:
            self._watcher = asyncio.create_task(
                exit_when_idle(
                    self._idle_exit_s,
                    lambda: None if self._active else self._last_active,
                    poll_s=30.0,
                    before_exit=self._close_idle_session,
                )
            )
        self._active += 1
        try:
            return await work
        finally:
            self._active -= 1
            self._last_active = time.monotonic()

    async def _close_idle_session(self) -> bool:
        """Before an idle exit: credentials nobody uses any more must not keep an actor and a
        server session alive. Close the session first (a stdio server must not outlive us);
        calls arriving meanwhile get a fresh session, and if one did, the actor stays."""
        old = self._session
        self._session = self._new_session(sse=old.transport == "sse")  # no streamable attempt again
        await old.close()
        return self._active == 0 and not self._session.stats["sessions_opened"]


class LocalMcpClient:
    """:class:`~troupe.agentloop.mcp.McpClient` with in-process sessions (no Ray).

    Args:
        settings: Allowlist, configured servers, timeouts.

    Use it from one event loop; :meth:`close` it on that loop.
    """

    def __init__(self, settings: RuntimeSettings) -> None:
        self.settings = settings
        self._sessions: OrderedDict[str, McpSession] = OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()

    def check_server(self, server: McpServer, index: int | None = None) -> None:
        """Refuse a server this deployment may not reach (see :func:`~troupe.runtime.mcp_policy.check_server`).

        Raises:
            InvalidRequest: ``param`` ``tools[index].server_url`` (``tools`` without an index).
        """
        check_server(server, self.settings, index)

    def session(self, server: McpServer) -> McpSession:
        """The session for ``server``'s URL or command and credentials (created on first use)."""
        key = connection_key(server)
        session = self._sessions.get(key)
        if session is None:
            session = McpSession(server, timeout_s=self.settings.mcp.timeout_s, list_ttl_s=self.settings.mcp.list_ttl_s,
                                 guard=connect_guard(server, self.settings))
            self._sessions[key] = session
            while len(self._sessions) > _MAX_SESSIONS:
                _, oldest = self._sessions.popitem(last=False)
                closing = asyncio.create_task(oldest.close())
                self._closing.add(closing)  # keep a reference until it is done
                closing.add_done_callback(self._closing.discard)
        self._sessions.move_to_end(key)
        return session

    async def list_tools(self, server: McpServer, refresh: bool = False) -> list[McpTool]:
        """All the server's tools (cached for ``mcp.list_ttl_s``).

        Raises:
            McpError: the server could not be reached, answered with an error, or timed out.
        """
        return await self.session(server).list_tools(refresh)

    async def call_tool(self, server: McpServer, name: str, arguments: dict[str, Any]) -> str:
        """Call a tool; its text output.

        Raises:
            McpError: ``kind="tool"`` when the tool reported an error, else ``http``/``protocol``.
        """
        return await self.session(server).call_tool(name, arguments)

    async def stats(self, server: McpServer) -> dict[str, Any]:
        """The session's counters (see :meth:`McpConnection.stats`)."""
        return dict(self.session(server).stats)

    async def transport(self, server: McpServer) -> str:
        """The transport ``server`` speaks, as far as known (see :attr:`McpSession.transport`)."""
        return self.session(server).transport

    async def close(self) -> None:
        """Close every session."""
        sessions, self._sessions = list(self._sessions.values()), OrderedDict()
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)


class RayMcpClient:
    """:class:`~troupe.agentloop.mcp.McpClient` routing each server to its connection actor.

    Args:
        settings: Allowlist, configured servers, timeouts, the Ray namespace; an idle
            actor exits after ``idle_timeout_s``.
        max_concurrency: Calls one actor runs at once.

    Needs ``ray.init`` (or a Ray worker). Handles are cached; a dead actor is created again.
    """

    def __init__(self, settings: RuntimeSettings, *, max_concurrency: int = 1000) -> None:
        self.settings = settings
        self.max_concurrency = max_concurrency
        self._handles: OrderedDict[str, Any] = OrderedDict()

    def check_server(self, server: McpServer, index: int | None = None) -> None:
        """See :meth:`LocalMcpClient.check_server`."""
        check_server(server, self.settings, index)

    def handle(self, server: McpServer) -> Any:
        """The server's connection actor (created if it does not exist; the handle is cached)."""
        key = connection_key(server)
        handle = self._handles.get(key)
        if handle is None:
            s = self.settings
            handle = start_actor(
                McpConnection,
                server,
                s.mcp.timeout_s,
                s.mcp.list_ttl_s,
                s.idle_timeout_s,
                connect_guard(server, s),
                name=actor_name(server),
                namespace=s.namespace,
                max_concurrency=self.max_concurrency,
                # Detached: it serves every host, so it must not die with the one that happened
                # to start it (a host killed mid-turn took other hosts' calls down with it, and
                # a resumed run waited for a new actor). It ends when idle (idle_timeout_s).
                lifetime="detached",
            )
            self._handles[key] = handle
            while len(self._handles) > 10_000:
                self._handles.popitem(last=False)
        self._handles.move_to_end(key)
        return handle

    async def list_tools(self, server: McpServer, refresh: bool = False) -> list[McpTool]:
        """See :meth:`LocalMcpClient.list_tools`."""
        guard = connect_guard(server, self.settings)
        if guard is None or connection_key(server) in self._handles:
            return await self._call(server, "list_tools", refresh)
        # A fresh actor: race its start-up with a plain connect (see the module docstring).
        # Only for a listing, which may run anyway: the probe never decides a tool call.
        listing = asyncio.ensure_future(self._call(server, "list_tools", refresh))
        probe = asyncio.ensure_future(_probe(server, guard, self.settings.mcp.timeout_s))
        try:
            await asyncio.wait({listing, probe}, return_when=asyncio.FIRST_COMPLETED)
            failure = None if listing.done() else await probe
            if failure is not None:
                listing.cancel()  # the actor's own attempt fails the same way; nobody waits for it
                raise failure
            return await listing
        finally:
            probe.cancel()
            if not listing.done():
                listing.cancel()
            listing.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved: no warning

    async def call_tool(self, server: McpServer, name: str, arguments: dict[str, Any]) -> str:
        """See :meth:`LocalMcpClient.call_tool`."""
        return await self._call(server, "call_tool", name, arguments)

    async def stats(self, server: McpServer) -> dict[str, Any]:
        """The connection actor's counters."""
        return await self._call(server, "stats")

    async def transport(self, server: McpServer) -> str:
        """The transport the connection actor found ``server`` speaks (see :attr:`McpSession.transport`)."""
        return await self._call(server, "transport")

    async def close(self) -> None:
        """Forget the handles; the actors serve every host and exit when idle."""
        self._handles.clear()

    async def _call(self, server: McpServer, method: str, *args: Any) -> Any:
        import ray

        for attempt in range(2):
            handle = self.handle(server)
            try:
                async with asyncio.timeout(self.settings.mcp.timeout_s + _RAY_GRACE_S):
                    return await ray_result(getattr(handle, method).remote(*args), own=McpError)
            except TimeoutError as exc:
                raise McpError(f"MCP server {server.label!r}: the connection actor did not answer") from exc
            except ray.exceptions.RayTaskError as exc:
                raise McpError(f"MCP server {server.label!r}: the connection failed "
                               f"({type(exc.cause).__name__})") from None
            except ray.exceptions.RayActorError as exc:
                self._handles.pop(connection_key(server), None)
                # A listing is safe to repeat. A call is repeated only when the actor was
                # killed on purpose (idle exit, which waits for running calls), so it never ran.
                if attempt == 0 and (method != "call_tool" or "ray.kill" in str(exc)):
                    continue
                raise McpError(f"MCP server {server.label!r}: the connection actor died") from None
        raise AssertionError("unreachable")  # pragma: no cover


async def _probe(server: McpServer, guard: AddressGuard, timeout_s: float) -> McpError | None:
    """The error if ``server`` refuses a plain TCP connection (through ``guard``), else None.

    None also when the probe cannot tell (a timeout: the server may be slow rather than
    gone; the session's own timeout decides then).
    """
    import httpcore2

    try:
        await try_connect(server.url or "", guard, timeout_s)
    except AddressRefused as exc:
        return McpError(f"MCP server {server.label!r}: {exc.reason}")
    except httpcore2.ConnectError as exc:
        return McpError(f"MCP server {server.label!r}: could not connect ({exc or type(exc).__name__})")
    except Exception:  # noqa: BLE001 - a timeout or anything else: no verdict, the actor's answer stands
        return None
    return None
