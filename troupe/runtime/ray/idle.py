"""Actors that end themselves when idle: conversation hosts (dedicated placement) and MCP
connections. Their next caller starts a fresh one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

__all__ = ["exit_when_idle"]


async def exit_when_idle(
    idle_s: float,
    idle_since: Callable[[], float | None],
    *,
    poll_s: float,
    before_exit: Callable[[], Awaitable[bool]] | None = None,
) -> None:
    """Kill the current Ray actor once it has been idle for ``idle_s`` seconds (run as a task).

    Args:
        idle_s: how long the actor may stay idle.
        idle_since: the ``time.monotonic()`` at which the actor last became idle, or None
            while it is busy.
        poll_s: the longest pause between two looks (a quarter of ``idle_s`` if shorter).
        before_exit: clean-up to await first; the actor exits only if it returns True (work
            that arrived meanwhile keeps it alive).
    """
    import ray

    while True:
        await asyncio.sleep(min(idle_s / 4, poll_s))
        since = idle_since()
        if since is None or time.monotonic() - since <= idle_s:
            continue
        if before_exit is None or await before_exit():
            ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
