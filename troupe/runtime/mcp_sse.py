"""The client side of MCP's older HTTP+SSE transport (protocol version 2024-11-05), on our own httpx client.

The server's URL answers ``GET`` with an event stream whose first event, ``endpoint``,
names where to ``POST`` the client's messages (``/messages/?session_id=…`` for the
``mcp`` SDK's ``SseServerTransport``); every answer comes back on the stream as a
``message`` event. :func:`sse_transport` is an ``mcp`` SDK transport (an async context
manager yielding the read and write streams ``mcp.Client`` takes), like the SDK's own
``mcp.client.sse.sse_client``, with what Troupe needs that one lacks:

* The ``endpoint`` URL (and any redirect of the ``GET``) must stay on the origin of the
  URL that was checked, scheme, host and port, and pass ``check``, the URL policy that
  checked it (:meth:`~troupe.runtime.mcp_policy.AddressGuard.why_not_url`); else
  connecting fails at once with :class:`EndpointRefused`, saying why. (The SDK's client
  refuses another origin too, but then waits forever for a stream nobody reads: a
  request hung until its timeout and was reported as the streamable POST's 405.)
* A ``POST`` the server answers with an error status fails the request it carried, with
  the stand-in JSON-RPC errors of the SDK's streamable HTTP transport (``Server returned
  an error response``; ``Session terminated`` for a 404: the server forgot the session,
  nothing ran), instead of ending the writer and leaving every later request to time out.
* The event stream ending, or a ``POST`` failing below HTTP, ends the transport with an
  error, so the session that owns it knows to reconnect.

Every request goes through the ``httpx2.AsyncClient`` it is given, so credentials (its
default headers) are sent on the ``GET`` and on every ``POST`` alike, and the pinned
transport of :mod:`troupe.runtime.mcp_policy` checks every address connected to. Nothing
here logs a URL's query (the session id) or a header.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urljoin

import anyio
import httpx2

__all__ = ["EndpointRefused", "SseStreamEnded", "origin", "shown", "sse_transport"]

_MAX_REDIRECTS = 5
_STREAM_HEADERS = {"Accept": "text/event-stream", "Cache-Control": "no-store"}

Check = Callable[[str], Awaitable[str | None]]
"""URL → why it may not be reached (a sentence), or None."""


class EndpointRefused(Exception):
    """The server named an endpoint (or redirected to a URL) that Troupe will not send to."""


class SseStreamEnded(Exception):
    """The server closed the event stream: the session is over (its answers have nowhere to go)."""


def origin(url: str | httpx2.URL) -> str:
    """``scheme://host[:port]``, the default port left out (httpx normalises it away)."""
    parsed = httpx2.URL(str(url))
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
    return f"{parsed.scheme}://{host}" + (f":{parsed.port}" if parsed.port is not None else "")


def shown(url: str | httpx2.URL) -> str:
    """A URL to show in an error: its origin and path, without userinfo, query (a session id) or fragment."""
    return origin(url) + httpx2.URL(str(url)).path


def _same_origin(a: str | httpx2.URL, b: str | httpx2.URL) -> bool:
    x, y = httpx2.URL(str(a)), httpx2.URL(str(b))
    return (x.scheme, x.host, x.port) == (y.scheme, y.host, y.port)


async def _admit(url: str | httpx2.URL, server_url: str, check: Check | None, what: str) -> None:
    """Refuse ``url`` unless it is on ``server_url``'s origin and passes ``check``."""
    if not _same_origin(url, server_url):
        raise EndpointRefused(
            f"{what} is on another origin ({origin(url)}) than the server URL ({origin(server_url)}); "
            "Troupe sends nothing there"
        )
    why = None if check is None else await check(str(url))
    if why is not None:
        raise EndpointRefused(f"{what} ({shown(url)}) may not be reached: {why}")


@asynccontextmanager
async def sse_transport(
    http: httpx2.AsyncClient, url: str, *, check: Check | None = None, post_timeout_s: float = 30.0
) -> AsyncIterator[tuple[Any, Any]]:
    """Open the event stream at ``url``, wait for its ``endpoint``, and carry messages both ways.

    Args:
        http: The client every request goes through (credentials in its headers; its
            transport decides which addresses may be connected to). Not closed here.
        url: The server URL (already checked by the URL policy).
        check: The URL policy for the URLs the server names (the endpoint, a redirect),
            which must also stay on ``url``'s origin. None: the origin rule only (a
            configured, trusted server).
        post_timeout_s: Limit on each ``POST`` (the server accepts a message at once and
            answers on the stream).

    Yields:
        ``(read_stream, write_stream)`` for ``mcp.Client``.

    Raises:
        httpx2.HTTPStatusError: the ``GET`` was answered with an error status.
        httpx2.SSEError: the answer is not an event stream.
        EndpointRefused: the endpoint (or a redirect) leaves the origin or the URL policy.
        SseStreamEnded: the stream ended before naming its endpoint (or, from the exit,
            later: the session is over).
    """
    from mcp.shared.message import SessionMessage
    from mcp_types import (
        INTERNAL_ERROR,
        INVALID_REQUEST,
        ErrorData,
        JSONRPCError,
        JSONRPCRequest,
        jsonrpc_message_adapter,
    )

    request = http.build_request("GET", url, headers=_STREAM_HEADERS)
    for _ in range(_MAX_REDIRECTS + 1):
        response = await http.send(request, stream=True, follow_redirects=False)
        target = response.next_request
        if target is None:
            break
        await response.aclose()
        if target.method != "GET":
            break  # not a redirect to follow: reported below as the status it is
        await _admit(target.url, url, check, "the event stream's redirect")
        request = target
    try:
        response.raise_for_status()  # any status but 2xx: a redirect not followed is no event stream either
        events = httpx2.EventSource(response).__aiter__()
        async for event in events:
            if event.event == "endpoint":
                endpoint = urljoin(str(response.url), event.data.strip())
                break
        else:
            raise SseStreamEnded("the server closed its event stream before naming its message endpoint")
        await _admit(endpoint, url, check, "the message endpoint the server announced")

        read_writer, read_stream = anyio.create_memory_object_stream[Any](0)
        write_stream, write_reader = anyio.create_memory_object_stream[Any](0)

        async def answer(request_id: Any, code: int, message: str) -> None:
            error = JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))
            try:
                await read_writer.send(SessionMessage(error))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass  # the session is going away; nobody waits for the answer

        async def read() -> None:
            async with read_writer:
                async for event in events:
                    if event.event != "message" or not event.data:
                        continue  # a repeated endpoint, a keep-alive
                    try:
                        item: Any = SessionMessage(jsonrpc_message_adapter.validate_json(event.data, by_name=False))
                    except ValueError as exc:
                        item = exc  # the session reports it
                    try:
                        await read_writer.send(item)
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        return  # the session closed its end: we are shutting down
            raise SseStreamEnded("the server closed its event stream")

        async def write() -> None:
            # One POST at a time, in order (initialize, then its notification, then requests):
            # the server accepts each at once and answers on the stream.
            async with write_reader:
                async for session_message in write_reader:
                    message = session_message.message
                    posted = await http.post(
                        endpoint, timeout=post_timeout_s,
                        json=message.model_dump(by_alias=True, mode="json", exclude_unset=True),
                    )
                    if posted.status_code < 300 or not isinstance(message, JSONRPCRequest):
                        continue  # accepted (a notification's refusal has nobody to tell)
                    if posted.status_code == 404:  # the server no longer knows the session: nothing ran
                        await answer(message.id, INVALID_REQUEST, "Session terminated")
                    else:  # the session's response hook has the status
                        await answer(message.id, INTERNAL_ERROR, "Server returned an error response")

        async with read_stream, write_stream, anyio.create_task_group() as tasks:
            tasks.start_soon(read)
            tasks.start_soon(write)
            try:
                yield read_stream, write_stream
            finally:
                tasks.cancel_scope.cancel()
    finally:
        await response.aclose()
