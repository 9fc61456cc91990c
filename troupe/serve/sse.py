"""Server-Sent Events: the answer of a streamed response, framed from the runtime's event batches.

:class:`EventStreamResponse` writes one frame per batch (``event: …`` / ``data: …``, framed
by :func:`troupe.protocol.encode_sse`), ``data: [DONE]`` last, a ``: keepalive`` comment when
nothing was sent for a while, and closes the runtime's iterator (which cancels the turn) when
the client goes away. The routes that stream build it: ``POST /v1/responses`` with
``"stream": true``, and ``GET /v1/responses/{id}?stream=true``.

It is on the streaming hot path: one write per batch, and nothing per write but two attribute
stores: the keepalive and the stall guard are one timer per stream (:class:`_Watch`), not a
lock and a timeout around every write.

Example::

    return EventStreamResponse(batches, stall_timeout_s=30.0, keepalive_s=15.0, on_close=close_stream)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable

from fastapi.responses import StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from troupe.protocol import SSE_DONE, SSE_KEEPALIVE, SSE_MEDIA_TYPE, encode_sse
from troupe.runtime.facade import EventBatches

__all__ = ["EventStreamResponse"]


class EventStreamResponse(StreamingResponse):
    """SSE over the runtime's event batches (one write per batch, ``data: [DONE]`` last).

    A stream that has sent nothing for ``keepalive_s`` (a long tool call, a slow model) sends
    an SSE comment, ``: keepalive``, which SSE clients skip and which keeps proxies from
    closing an idle connection.

    It races a disconnect listener. When the client goes away the streaming task is
    cancelled once, with plain asyncio (an anyio cancel scope would re-cancel the
    runtime's clean-up awaits), and the runtime's iterator is closed, which cancels the
    turn. Starlette alone does not close it on every path: with ASGI 2.4 servers it
    merely stops iterating when a send fails.
    """

    def __init__(
        self,
        batches: EventBatches,
        *,
        stall_timeout_s: float | None = None,
        keepalive_s: float | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self._batches = batches
        self._stall_timeout_s = stall_timeout_s
        self._keepalive_s = keepalive_s
        self._on_close = on_close
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        # Kept as it is typed (Starlette's body_iterator is only an AsyncIterable): _finish closes it.
        self._frame_stream = self._frames()
        super().__init__(self._frame_stream, media_type=SSE_MEDIA_TYPE, headers=headers)

    async def _frames(self) -> AsyncGenerator[bytes, None]:
        async for batch in self._batches:
            if batch:
                yield b"".join(encode_sse(event) for event in batch)
        yield SSE_DONE

    async def _send_all(self, send: Send) -> None:
        watch = _Watch(send, stall_timeout_s=self._stall_timeout_s, keepalive_s=self._keepalive_s)
        try:
            async with asyncio.timeout(None) as deadline:  # one per stream; the watch moves it when a write stalls
                watch.start(deadline)
                await self.stream_response(watch.send)
        except (OSError, TimeoutError):  # the client went away (ASGI 2.4 servers raise) or stopped reading
            pass
        finally:
            watch.stop()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        streamer = asyncio.ensure_future(self._send_all(send))
        watcher = asyncio.ensure_future(self.listen_for_disconnect(receive))
        try:
            await asyncio.wait({streamer, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
            streamer.cancel()  # no-op when it has finished
            # Shielded: when Serve cancels this request task (client gone), clean-up still completes.
            await asyncio.shield(self._finish(streamer, watcher))
        if not streamer.cancelled() and streamer.exception() is not None:
            raise streamer.exception()  # type: ignore[misc]

    async def _finish(self, *tasks: asyncio.Future[None]) -> None:
        await asyncio.gather(*tasks, return_exceptions=True)
        # `async for` never closes what it iterates, so closing the frame generator leaves
        # the runtime's iterator open: close both (closing a finished one is a no-op).
        for iterator in (self._frame_stream, self._batches):
            with contextlib.suppress(Exception):  # clean-up must reach the runtime's iterator
                await iterator.aclose()
        if self._on_close is not None:
            self._on_close()


class _Watch:
    """A stream's keepalive and stall guard: one timer that looks at the writes, not a layer around each.

    :meth:`send` notes when a write begins and ends, and writes nothing else. The timer, due at
    the next moment either rule can fire, then checks:

    * **stall**: a write still under way ``stall_timeout_s`` after it began (the client stopped
      reading, its socket buffer is full) moves the stream's deadline to now, which cancels the
      stream with ``TimeoutError``;
    * **keepalive**: nothing written for ``keepalive_s`` (and no write under way) writes
      ``: keepalive`` from a task of its own; a frame that comes meanwhile waits for it, so the
      two never interleave. Nothing is sent before the response's start.
    """

    __slots__ = ("_send", "_stall_s", "_keepalive_s", "_loop", "_deadline", "_timer", "_beat", "_writing_since", "_last")

    def __init__(self, send: Send, *, stall_timeout_s: float | None, keepalive_s: float | None) -> None:
        self._send = send
        self._stall_s = stall_timeout_s
        self._keepalive_s = keepalive_s or None
        self._loop = asyncio.get_running_loop()
        self._deadline: asyncio.Timeout | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._beat: asyncio.Task[None] | None = None  # a keepalive being written
        self._writing_since: float | None = None  # when the write under way began
        self._last: float | None = None  # when the last write began; None before the first

    def start(self, deadline: asyncio.Timeout) -> None:
        """Watch the writes, cancelling through ``deadline`` (the stream's, entered) on a stall."""
        self._deadline = deadline
        if self._stall_s is not None or self._keepalive_s is not None:
            self._timer = self._loop.call_at(self._loop.time() + min(self._periods()), self._check)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._beat is not None:
            self._beat.cancel()

    async def send(self, message: Message) -> None:
        while self._beat is not None:  # a keepalive is on its way out: the frame goes after it
            await self._beat
        self._writing_since = self._last = self._loop.time()
        try:
            await self._send(message)
        finally:
            self._writing_since = None

    def _periods(self) -> list[float]:
        return [s for s in (self._stall_s, self._keepalive_s) if s is not None]

    def _check(self) -> None:
        now = self._loop.time()
        since, stall, keepalive = self._writing_since, self._stall_s, self._keepalive_s
        if since is not None:  # a write is under way
            if stall is not None and now - since >= stall:
                assert self._deadline is not None
                self._deadline.reschedule(now)  # the stream ends with TimeoutError
                self._timer = None
                return
            due = since + stall if stall is not None else now + min(self._periods())
        elif keepalive is not None and self._last is not None and now - self._last >= keepalive:
            self._beat = asyncio.ensure_future(self._keepalive())
            due = now + keepalive
        else:
            due = now + min(self._periods())
            if keepalive is not None and self._last is not None:
                due = min(due, self._last + keepalive)
        self._timer = self._loop.call_at(due, self._check)

    async def _keepalive(self) -> None:
        self._writing_since = self._last = self._loop.time()
        try:
            await self._send({"type": "http.response.body", "body": SSE_KEEPALIVE, "more_body": True})
        except (OSError, TimeoutError):
            pass  # the stream's own next write meets the same end
        finally:
            self._writing_since = None
            self._beat = None
