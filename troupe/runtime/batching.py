"""Adaptive batching of a turn's wire events on their way from the loop to the client.

:func:`coalesce` is what every host puts between a running turn and its consumer (the
HTTP stream in the same process, or the Ray streaming generator to an ingress replica).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import TypeVar

__all__ = ["coalesce", "MAX_PENDING_EVENTS"]

T = TypeVar("T")

MAX_PENDING_EVENTS = 4096
"""Events a turn may make ahead of its consumer before it waits for it (a stalled client's bound)."""


async def coalesce(batches: AsyncGenerator[list[T], None], *, max_pending: int = MAX_PENDING_EVENTS) -> AsyncGenerator[list[T], None]:
    """Re-batch a stream so each batch holds everything made since the consumer took the last one.

    Nagle's rule for event streams: a consumer that keeps up gets every batch the moment it is
    made (no added latency, true inter-token gaps); one that falls behind (a loaded ingress,
    a slow hop) gets what piled up meanwhile in one piece, so the cost per hop is paid once per
    batch rather than once per event, and bigger batches come exactly when they help.

    The source runs ahead in its own task, but no further than ``max_pending`` events: past
    that it waits until the consumer takes them, so a consumer that stops taking (a client
    that stops reading) holds at most that many events, not the whole response. Its
    exception, if any, is raised here after the batches it made before it. Closing this
    generator cancels the source and waits for it.
    """
    loop = asyncio.get_running_loop()
    pending: list[T] = []
    # Bare futures made on the loop found once: an asyncio.Event looks the loop up on every
    # wait (a getpid() system call each in Python 3.11), and this runs once per event.
    made: asyncio.Future[None] | None = None  # the consumer's, while it waits for events
    taken: asyncio.Future[None] | None = None  # the source's, while it waits for room

    def wake(waiter: asyncio.Future[None] | None) -> None:
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def pump() -> None:
        nonlocal taken
        async with contextlib.aclosing(batches):
            async for batch in batches:
                pending.extend(batch)
                wake(made)
                while len(pending) >= max_pending:
                    taken = loop.create_future()
                    await taken

    task = asyncio.create_task(pump())
    task.add_done_callback(lambda _: wake(made))
    try:
        while True:
            if not pending and not task.done():
                made = loop.create_future()
                await made
                made = None
            if pending:
                out = pending[:]
                pending.clear()
                wake(taken)
                yield out
            elif task.done():
                task.result()  # the source's error, after everything it made before it
                return
    finally:
        if not task.done():
            task.cancel()
        await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # retrieved (and raised above when it mattered): no "never retrieved" log
