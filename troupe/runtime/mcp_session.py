"""One long-lived MCP client session per server.

:class:`McpSession` keeps a session to one server open across calls: streamable HTTP
(falling back to the older HTTP+SSE transport, :mod:`~troupe.runtime.mcp_sse`, when the
server answers the streamable handshake's POST with 400, 404 or 405, as the MCP spec's
backwards-compatibility section describes; never on 401/403, an auth failure is not an old
transport), or stdio for a configured command. A session remembers that its server speaks
HTTP+SSE, and reconnects with it at once (back to streamable HTTP only if the URL stops
answering as an event stream). With an :class:`~troupe.runtime.mcp_policy.AddressGuard`
every HTTP connection goes through :func:`~troupe.runtime.mcp_policy.pinned_transport`:
only to addresses the URL policy allows, checked when connecting; the message endpoint an
HTTP+SSE server announces must stay on its URL's origin and pass the same URL policy. The
credentials (the server's headers) are default headers of the one httpx client each
connection uses, so they go on every request of either transport. The ``mcp`` SDK's transports
are anyio context managers that must be entered and exited by one task, so each session
has an *owner task* that opens them, publishes the connected client and then waits to be
told to close; calls from any task share the client (JSON-RPC ids keep them apart).

A session that fails at the connection level (or times out three requests running) is
dropped and the next call opens a new one (``reconnects``); a request that provably never
reached the server (connection refused, or the server had forgotten the session) is resent
once. ``tools/list`` answers are cached for ``list_ttl_s``. SDK errors become
:class:`~troupe.agentloop.mcp.McpError` here; headers never appear in errors, logs or reprs.
The Ray actor body, :class:`~troupe.runtime.ray.mcp.McpConnection`, wraps one session.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, TypeVar

from troupe.agentloop.mcp import McpError, McpServer, McpTool
from troupe.runtime.mcp_policy import AddressGuard, AddressRefused, pinned_transport
from troupe.runtime.mcp_sse import EndpointRefused, SseStreamEnded, sse_transport

__all__ = ["McpSession", "tool_output"]

log = logging.getLogger(__name__)
T = TypeVar("T")

_SSE_READ_TIMEOUT_S = 300.0  # how long an idle event stream may stay silent (the SDK's default)
# What the SDK's streamable HTTP transport reports in place of an HTTP error status, and of
# a 404 on a session the server no longer knows (it restarted).
_HTTP_STAND_INS = {"Server returned an error response", "Not Found"}
_STALE_SESSION = "Session terminated"
_MAX_PAGES = 100
_MAX_TIMEOUTS = 3  # consecutive timed-out requests after which a session is presumed wedged
# The streamable POST statuses that mean "an older server: try its SSE endpoint" (MCP's
# backwards-compatibility rule names 404 and 405; some older servers answer 400).
_SSE_FALLBACK_STATUSES = frozenset({400, 404, 405})


@dataclass(eq=False)
class _Live:
    """One opened (or opening) session: its owner task and what the owner publishes."""

    ready: asyncio.Future[Any]
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    client: Any = None
    http_status: int | None = None  # the last POST's status if an error (the transport hides it behind a stand-in)
    broken: bool = False
    session_lost: bool = False  # a request got 404: the server dropped the session and ran nothing
    end: BaseException | None = None  # what ended the owner task, if it ended on its own
    in_flight: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)  # set while no request runs
    timeouts: int = 0  # consecutive requests that timed out

    def __post_init__(self) -> None:
        self.idle.set()

    def usable(self) -> bool:
        return not self.broken and self.end is None and not (self.ready.done() and self.ready.exception())

    def count(self, delta: int) -> None:
        self.in_flight += delta
        (self.idle.clear if self.in_flight else self.idle.set)()


def _leaves(exc: BaseException) -> list[BaseException]:
    return [leaf for sub in exc.exceptions for leaf in _leaves(sub)] if isinstance(exc, BaseExceptionGroup) else [exc]


def _cause(exc: BaseException) -> BaseException:
    """The most telling leaf of an exception (group): an SDK error first, then a transport error."""
    from mcp.shared.exceptions import MCPError

    leaves = _leaves(exc)
    return next((e for e in leaves if isinstance(e, MCPError)), None) or next(
        (e for e in leaves if not isinstance(e, asyncio.CancelledError)), leaves[0]
    )


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes (httpx re-raises httpcore's errors ``from`` them)."""
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return seen


def _refused(exc: BaseException | None) -> bool:
    """Whether a failure is a refused connection or a stale session: the request never reached the server."""
    import httpx2

    return exc is not None and any(
        isinstance(leaf, httpx2.ConnectError | ConnectionRefusedError) or getattr(leaf, "message", None) == _STALE_SESSION
        for leaf in _leaves(exc)
    )


def _no_event_stream(exc: BaseException) -> bool:
    """Whether opening a URL as an HTTP+SSE event stream failed because there is none: the GET
    answered 400, 404 or 405, or with something other than an event stream."""
    import httpx2

    cause = _cause(exc)
    if isinstance(cause, httpx2.HTTPStatusError):
        return cause.response.status_code in _SSE_FALLBACK_STATUSES
    return isinstance(cause, httpx2.SSEError) and "content type" in str(cause)


def tool_output(result: Any) -> str:
    """A ``CallToolResult`` as the ``mcp_call`` output: text blocks joined, other blocks as JSON.

    Raises:
        McpError: ``kind="tool"`` with the result's text when ``is_error`` is set.
    """
    parts: list[str] = []
    for block in result.content or ():
        if getattr(block, "type", None) == "text":
            parts.append(block.text)
        else:
            parts.append(json.dumps(block.model_dump(mode="json", by_alias=True, exclude_none=True)))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content))
    text = "\n".join(parts)
    if result.is_error:
        raise McpError(text or "The tool reported an error.", kind="tool")
    return text


def _to_tool(tool: Any) -> McpTool:
    annotations = tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True) if tool.annotations else None
    return McpTool(name=tool.name, input_schema=dict(tool.input_schema or {}), description=tool.description,
                   annotations=annotations)


class McpSession:
    """A kept-open MCP client session to one server; safe for concurrent calls from one event loop.

    Args:
        server: The server (URL and headers, or a stdio command).
        timeout_s: Limit on each call or listing, connecting included.
        list_ttl_s: How long a ``tools/list`` answer is reused.
        mode: The SDK's protocol negotiation: ``auto`` (try the 2026 ``server/discover``,
            fall back to the ``initialize`` handshake) or ``legacy`` (handshake only).
        guard: Which addresses HTTP connections may go to (see
            :func:`~troupe.runtime.mcp_policy.connect_guard`); None: any (a trusted server).
        sse: The server is known to speak the HTTP+SSE transport (an earlier session found
            out): connect with it at once.

    Every method must be awaited on the event loop that first used the session.
    """

    def __init__(self, server: McpServer, *, timeout_s: float = 30.0, list_ttl_s: float = 300.0,
                 mode: str = "auto", guard: AddressGuard | None = None, sse: bool = False) -> None:
        self.server = server
        self.timeout_s = timeout_s
        self.list_ttl_s = list_ttl_s
        self.mode = mode
        self.guard = guard
        self.stats = {"sessions_opened": 0, "reconnects": 0, "calls": 0, "list_calls": 0, "server_lists": 0}
        self._live: _Live | None = None
        self._use_sse = sse  # found out on the first connect; kept for every reconnect
        self._tools: list[McpTool] | None = None
        self._tools_until = 0.0
        self._list_lock = asyncio.Lock()  # binds to a loop on first use, not here
        self._closed = False
        self._background: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        return f"McpSession(label={self.server.label!r})"

    @property
    def transport(self) -> str:
        """``stdio``, ``sse`` (HTTP+SSE, found by the fallback) or ``streamable_http`` (tried first)."""
        return "stdio" if self.server.command else "sse" if self._use_sse else "streamable_http"

    # -- public ------------------------------------------------------------------------

    async def list_tools(self, refresh: bool = False) -> list[McpTool]:
        """The server's tools, from the cache unless it is older than ``list_ttl_s`` or ``refresh``.

        Raises:
            McpError: the server could not be reached, answered with an error, or timed out.
        """
        self.stats["list_calls"] += 1
        if not refresh and self._tools is not None and time.monotonic() < self._tools_until:
            return list(self._tools)
        async with self._list_lock:  # one listing at a time; waiters reuse its answer
            if not refresh and self._tools is not None and time.monotonic() < self._tools_until:
                return list(self._tools)
            self.stats["server_lists"] += 1
            tools = await self._request("tools/list", self._list_all, resend_ok=True)
            self._tools, self._tools_until = tools, time.monotonic() + self.list_ttl_s
            return list(tools)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """Call a tool; its output text.

        Raises:
            McpError: ``kind="tool"`` when the tool reported an error; ``http`` for an HTTP
                error status; else ``protocol`` (connection, protocol error, timeout).
        """
        self.stats["calls"] += 1
        result = await self._request(f"tools/call {name!r}", lambda c: c.call_tool(name, arguments), resend_ok=False)
        return tool_output(result)

    async def close(self) -> None:
        """Close the session (the owner task exits its transports); later calls fail."""
        self._closed = True
        live, self._live = self._live, None
        if live is not None:
            await self._retire(live, wait=True)

    # -- requests ----------------------------------------------------------------------

    async def _list_all(self, client: Any) -> list[McpTool]:
        tools: list[McpTool] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):  # bounded: a server paging forever cannot hang the listing
            page = await client.list_tools(cursor=cursor)
            tools += [_to_tool(t) for t in page.tools]
            if not (cursor := page.next_cursor):
                break
        return tools

    async def _request(self, what: str, op: Callable[[Any], Awaitable[T]], *, resend_ok: bool) -> T:
        """Run ``op(client)`` within the timeout, on a live session; resend once where that is safe."""
        live: _Live | None = None
        try:
            async with asyncio.timeout(self.timeout_s):
                for attempt in range(2):
                    live = None  # so a timeout while connecting is not counted against the old session
                    live = await self._session()
                    live.count(+1)
                    try:
                        result = await op(live.client)
                        live.timeouts = 0
                        return result
                    except (McpError, asyncio.CancelledError):
                        raise
                    except Exception as exc:
                        error = self._translate(exc, live)
                        if not self._connection_failed(exc, live):
                            raise error from exc
                        live.broken = True  # the next request opens a new session
                        if attempt == 0 and (resend_ok or live.session_lost or await self._never_sent(exc, live)):
                            log.info("MCP server %r: %s failed on a stale session; retrying once", self.server.label,
                                     what)
                            continue
                        raise error from exc
                    finally:
                        live.count(-1)
        except TimeoutError as exc:
            if live is not None:
                live.timeouts += 1
                if live.timeouts >= _MAX_TIMEOUTS:  # a hung tool times out alone; a wedged server every time
                    live.broken = True
            raise McpError(f"MCP server {self.server.label!r}: {what} timed out after {self.timeout_s:g} s") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _never_sent(self, exc: BaseException, live: _Live) -> bool:
        """Whether resending is safe: the failure, or what ended the session's transport, was a refusal."""
        if _refused(exc):
            return True
        if live.task is not None and not live.task.done():
            # A request fails with "connection closed" a moment before the owner task records why.
            await asyncio.wait({live.task}, timeout=1.0)
        return _refused(live.end)

    def _connection_failed(self, exc: BaseException, live: _Live) -> bool:
        """Whether the session itself is unusable (as opposed to one request being refused)."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED

        if live.session_lost or live.end is not None or (live.task is not None and live.task.done()):
            return True
        cause = _cause(exc)
        if isinstance(cause, MCPError):
            if cause.message in _HTTP_STAND_INS and live.http_status in (401, 403):
                return False  # refused for want of credentials: a new session would be refused alike
            return cause.code == CONNECTION_CLOSED or cause.message in _HTTP_STAND_INS | {_STALE_SESSION}
        return True

    def _translate(self, exc: BaseException, live: _Live | None) -> McpError:
        """An SDK or transport failure as an :class:`McpError` (never quoting headers)."""
        import httpx2
        from mcp.shared.exceptions import MCPError
        from pydantic import ValidationError

        label = self.server.label
        cause = _cause(exc)
        status = cause.response.status_code if isinstance(cause, httpx2.HTTPStatusError) else None
        if isinstance(cause, MCPError) and live is not None and status is None:
            if cause.message in _HTTP_STAND_INS:
                status = live.http_status  # the streamable transport's stand-in for an HTTP error status
            elif live.http_status in (401, 403):
                status = live.http_status  # a JSON-RPC error sent with an auth failure: the status says more
        if isinstance(cause, McpError):
            return cause
        if status:
            return McpError(f"MCP server {label!r} answered HTTP {status}", kind="http", code=status)
        if isinstance(cause, MCPError):
            return McpError(f"MCP server {label!r}: {cause.message}", code=cause.code)
        refused = next((e for e in _chain(cause) if isinstance(e, AddressRefused)), None)
        if refused is not None:
            return McpError(f"MCP server {label!r}: {refused.reason}")
        if isinstance(cause, EndpointRefused | SseStreamEnded | httpx2.SSEError):
            return McpError(f"MCP server {label!r}: {cause}")
        if isinstance(cause, httpx2.ConnectError | ConnectionError):
            why = str(cause) or type(cause).__name__
            return McpError(f"MCP server {label!r}: could not connect ({why})")
        if isinstance(cause, httpx2.TimeoutException | TimeoutError):
            return McpError(f"MCP server {label!r}: the connection timed out")
        if isinstance(cause, ValidationError):
            return McpError(f"MCP server {label!r}: invalid response from the server")
        if isinstance(cause, OSError):
            return McpError(f"MCP server {label!r}: {type(cause).__name__}: {cause.strerror or cause}")
        return McpError(f"MCP server {label!r}: the connection failed ({type(cause).__name__})")

    # -- the session's lifecycle -------------------------------------------------------

    async def _session(self) -> _Live:
        """The live session, opening one (owned by a new task) when there is none or it failed."""
        if self._closed:
            raise McpError(f"MCP server {self.server.label!r}: the client is closed")
        live = self._live
        if live is None or not live.usable():
            if live is not None:
                retiring = asyncio.create_task(self._retire(live, wait=False))
                self._background.add(retiring)
                retiring.add_done_callback(self._background.discard)
            # No await between the check and the assignment: concurrent callers share one attempt.
            live = _Live(ready=asyncio.get_running_loop().create_future())
            live.ready.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved: no warning
            live.task = asyncio.create_task(self._own(live), name=f"mcp-session-{self.server.label}")
            self._live = live
        await asyncio.shield(live.ready)  # a caller's timeout must not cancel a shared connect
        return live

    async def _own(self, live: _Live) -> None:
        """The owner task: enter the transports, publish the client, hold them open until told to stop."""
        try:
            async with AsyncExitStack() as stack:
                async with asyncio.timeout(self.timeout_s):  # a server that accepts but never answers
                    live.client = await self._connect(stack, live)
                if self.stats["sessions_opened"]:
                    self.stats["reconnects"] += 1
                self.stats["sessions_opened"] += 1
                log.info("MCP server %r: session opened%s", self.server.label, " (SSE)" if self._use_sse else "")
                live.ready.set_result(None)
                await live.stop.wait()
        except asyncio.CancelledError:
            if not live.ready.done():  # closed while connecting: waiters get an error, not a cancellation
                live.ready.set_exception(McpError(f"MCP server {self.server.label!r}: the session was closed"))
            raise
        except Exception as exc:  # the transport failed: tell a waiting opener, else just end the session
            live.end = exc
            if not live.ready.done():
                live.ready.set_exception(self._translate(exc, live))
            else:
                log.info("MCP server %r: session ended (%s)", self.server.label, type(_cause(exc)).__name__)

    async def _connect(self, stack: AsyncExitStack, live: _Live) -> Any:
        if self.server.command:
            from mcp.client.stdio import StdioServerParameters, stdio_client

            command = self.server.command
            params = StdioServerParameters(command=command[0], args=list(command[1:]))
            return await stack.enter_async_context(self._client(stdio_client(params)))
        if self._use_sse:  # the server spoke HTTP+SSE before: no streamable attempt first
            try:
                return await self._connect_sse(stack, live)
            except Exception as exc:
                if not _no_event_stream(exc):
                    raise
                # Its URL has no event stream any more: perhaps upgraded to streamable HTTP.
                await stack.aclose()
                self._use_sse = False
                return await self._connect_http(stack, live)
        try:
            return await self._connect_http(stack, live)
        except Exception as exc:
            status = live.http_status
            # The MCP spec's backwards-compatibility rule: the streamable POST (initialize)
            # refused with 400, 404 or 405 means an older server; open its URL as an HTTP+SSE
            # event stream. Any other status (401 and 403 above all) is the answer, and is
            # reported as such.
            if status not in _SSE_FALLBACK_STATUSES:
                raise
            await stack.aclose()
            live.http_status = None
            try:
                client = await self._connect_sse(stack, live)
            except Exception as sse_exc:
                if not _no_event_stream(sse_exc):
                    raise  # the SSE attempt's own failure (a 401 on the stream, a refused endpoint) says more
                # No event stream either: not an MCP endpoint of any kind; the POST's status says so.
                live.http_status = status
                raise exc from None
            self._use_sse = True
            log.info("MCP server %r speaks the HTTP+SSE transport", self.server.label)
            return client

    def _recorder(self, live: _Live, *, sse: bool) -> Callable[[Any], Awaitable[None]]:
        """An httpx response hook keeping the last request POST's error status on ``live``."""

        async def record(response: Any) -> None:
            # Only the POSTs carry requests: the GET event stream (retried, and answered 405
            # by servers without one) and the closing DELETE must not overwrite their status.
            if response.request.method != "POST":
                return
            live.http_status = response.status_code if response.status_code >= 400 else None
            if response.status_code == 404 and (sse or "mcp-session-id" in response.request.headers):
                # The server no longer knows the session (it restarted); the spec says start a new one.
                live.session_lost = True

        return record

    async def _connect_http(self, stack: AsyncExitStack, live: _Live) -> Any:
        from mcp.client.streamable_http import streamable_http_client

        http = await stack.enter_async_context(self._http_client(live, sse=False))
        return await stack.enter_async_context(self._client(streamable_http_client(self.server.url or "", http_client=http)))

    async def _connect_sse(self, stack: AsyncExitStack, live: _Live) -> Any:
        """The HTTP+SSE transport (:mod:`~troupe.runtime.mcp_sse`), on the same pinned httpx client:
        the credentials go on the event stream's GET and on every POST, and the message endpoint
        the server announces must stay on its URL's origin and pass the URL policy."""
        guard = self.guard
        check = None
        if guard is not None:
            async def check(url: str) -> str | None:
                return await asyncio.to_thread(guard.why_not_url, url)  # it may resolve the host

        http = await stack.enter_async_context(self._http_client(live, sse=True))
        return await stack.enter_async_context(self._client(
            sse_transport(http, self.server.url or "", check=check, post_timeout_s=self.timeout_s)))

    def _http_client(self, live: _Live, *, sse: bool) -> Any:
        """An httpx client for this server (its headers on every request), through the pinned
        transport when there is a guard; it records the POSTs' error statuses on ``live``."""
        import httpx2

        options: dict[str, Any] = {
            "headers": self.server.headers,
            "timeout": httpx2.Timeout(self.timeout_s, read=_SSE_READ_TIMEOUT_S),
            "event_hooks": {"response": [self._recorder(live, sse=sse)]},
        }
        if self.guard is not None:
            options["transport"] = pinned_transport(self.guard)
        return httpx2.AsyncClient(**options)

    def _client(self, transport: Any) -> Any:
        from mcp import Client
        from mcp_types import Implementation

        # cache=None: listings are cached here, with our own TTL.
        return Client(transport, mode=self.mode, cache=None, client_info=Implementation(name="troupe", version="0.1"))

    async def _retire(self, live: _Live, *, wait: bool) -> None:
        """Close a session: now (``wait``: and wait, bounded), or once its running requests end (bounded)."""
        live.broken = True
        if not wait:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(live.idle.wait(), self.timeout_s)
        live.stop.set()
        if live.task is not None and not live.task.done():
            if not live.ready.done():
                live.task.cancel()
            if wait:
                done, _ = await asyncio.wait({live.task}, timeout=10.0)
                if not done:
                    live.task.cancel()
