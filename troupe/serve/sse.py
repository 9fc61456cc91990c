"""Server-Sent Events: the answer of a streamed response, framed from the runtime's event batches.

:class:`EventStreamResponse` writes one frame per batch (``event: …`` / ``data: …``, framed
by :func:`troupe.protocol.encode_sse`), ``data: [DONE]`` last, a ``: keepalive`` comment when
nothing was sent for a while, and closes the runtime's iterator (which cancels the turn) when
the client goes away. The routes that stream build it: ``POST /v1/responses`` with
``"stream": true``, and ``GET /v1/responses/{id}?stream=true``.

It is on the streaming hot path: one write per batch, no task per write.

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
        send = self._stall_guard(send)
        beat: asyncio.Task[None] | None = None
        if self._keepalive_s:
            send, beat = self._with_keepalive(send, self._keepalive_s)
        try:
            await self.stream_response(send)
        except (OSError, TimeoutError):  # the client went away (ASGI 2.4 servers raise) or stopped reading
            pass
        finally:
            if beat is not None:
                beat.cancel()

    @staticmethod
    def _with_keepalive(send: Send, interval_s: float) -> tuple[Send, asyncio.Task[None]]:
        """``send``, and a task that sends ``: keepalive`` whenever nothing was sent for ``interval_s``.

        The two take turns through a lock, so a keepalive never lands inside a frame. The
        first one waits for the response's start; after the last body message the task is
        cancelled (a keepalive due meanwhile sees the last send and stays quiet).
        """
        loop = asyncio.get_running_loop()
        lock = asyncio.Lock()
        started = asyncio.Event()
        last = loop.time()

        async def locked(message: Message) -> None:
            nonlocal last
            async with lock:
                await send(message)
                last = loop.time()
            started.set()

        async def beat() -> None:
            nonlocal last
            await started.wait()
            while True:
                await asyncio.sleep(last + interval_s - loop.time())
                async with lock:
                    if loop.time() - last < interval_s:
                        continue  # an event went out meanwhile
                    try:
                        await send({"type": "http.response.body", "body": SSE_KEEPALIVE, "more_body": True})
                    except (OSError, TimeoutError):
                        return  # the stream's own next send meets the same end
                    last = loop.time()

        return locked, asyncio.ensure_future(beat())

    def _stall_guard(self, send: Send) -> Send:
        """``send``, failing with ``TimeoutError`` when one write waits longer than the stall timeout.

        The server's write waits while the client's socket buffer is full, so a client that
        stops reading holds its turn (and the events piling up for it) only this long.
        """
        if self._stall_timeout_s is None:
            return send
        timeout = self._stall_timeout_s

        async def guarded(message: Message) -> None:
            # asyncio.timeout, not wait_for: no task per write on the streaming hot path.
            async with asyncio.timeout(timeout):
                await send(message)

        return guarded

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
