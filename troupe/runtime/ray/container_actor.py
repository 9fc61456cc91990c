"""The actor of one container (:mod:`troupe.runtime.ray.containers` starts and reaches it).

Its module imports only the sandbox and the idle check, not the runtime: a container's actor
is a new Ray worker process, and what it imports is part of a new container's start.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

from troupe.runtime.ray.idle import exit_when_idle
from troupe.sandbox import CommandResult, Isolation, Limits, PythonResult, Sandbox

__all__ = ["ContainerActor"]


class ContainerActor:
    """One container's sandbox, as a Ray actor (started on its first run)."""

    def __init__(
        self, directory: str, limits: Limits, isolation: Isolation, idle_s: float, bwrap: str,
        allowed_domains: tuple[str, ...] | None,
    ) -> None:  # fmt: skip
        self.directory, self.limits, self.isolation, self.idle_s = Path(directory), limits, isolation, idle_s
        self.bwrap, self.allowed_domains = bwrap, allowed_domains
        self.sandbox: Sandbox | None = None
        self._starting = asyncio.Lock()
        self._busy = 0
        self._idle_since = time.monotonic()
        self._watcher: asyncio.Task[None] | None = None

    async def _started(self) -> Sandbox:
        async with self._starting:
            if self.sandbox is None:
                sandbox = Sandbox(self.directory, self.limits, isolation=self.isolation, bwrap=self.bwrap,
                                  allowed_domains=self.allowed_domains)
                await sandbox.start()  # on the actor's event loop thread, which lives as long as the actor
                self.sandbox = sandbox
            if self._watcher is None:
                idle_since = lambda: None if self._busy else self._idle_since  # noqa: E731
                watch = exit_when_idle(self.idle_s, idle_since, poll_s=30.0, before_exit=self._close_if_idle)
                self._watcher = asyncio.create_task(watch)
            return self.sandbox

    async def run_python(self, code: str, timeout_s: float) -> PythonResult:
        self._busy += 1
        try:
            sandbox = await self._started()
            return await sandbox.run_python(code, timeout_s=timeout_s)
        finally:
            self._busy -= 1
            self._idle_since = time.monotonic()

    async def run_shell(
        self, commands: Sequence[str], timeout_s: float, max_output_length: int | None
    ) -> list[CommandResult]:
        self._busy += 1
        try:
            sandbox = await self._started()
            return await sandbox.run_shell(commands, timeout_s=timeout_s, max_output_length=max_output_length)
        finally:
            self._busy -= 1
            self._idle_since = time.monotonic()

    async def close(self) -> None:
        """Kill the kernel and every process of the code (before the actor is killed)."""
        if self.sandbox is not None:
            await self.sandbox.close()

    async def _close_if_idle(self) -> bool:
        if self._busy:
            return False
        await self.close()
        return True
