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
    pending: list[T] = []
    made = asyncio.Event()
    taken = asyncio.Event()

    async def pump() -> None:
        async with contextlib.aclosing(batches):
            async for batch in batches:
                pending.extend(batch)
                made.set()
                while len(pending) >= max_pending:
                    taken.clear()
                    await taken.wait()

    task = asyncio.create_task(pump())
    task.add_done_callback(lambda _: made.set())
    try:
        while True:
            if not pending and not task.done():
                await made.wait()
                made.clear()
            if pending:
                out = pending[:]
                pending.clear()
                taken.set()
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
