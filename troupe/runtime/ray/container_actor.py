"""The actor of one container (:mod:`troupe.runtime.ray.containers` starts and reaches it).

Its module imports only the sandbox and the idle check, not the runtime: a container's actor
is a new Ray worker process, and what it imports is part of a new container's start.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from troupe.runtime.ray.idle import exit_when_idle
from troupe.sandbox import CommandResult, PythonResult, Sandbox

__all__ = ["ContainerActor"]


class ContainerActor:
    """One container's sandbox, as a Ray actor.

    It may start before its container exists (a spare: ``RayFleet.reserve``): every call brings
    the sandbox's settings, and the first one starts the sandbox with them (the container's
    directory, limits, network). Until then it waits ``idle_s`` for its first call, then its
    container's idle time.
    """

    def __init__(self, idle_s: float) -> None:
        self.idle_s = idle_s
        self.sandbox: Sandbox | None = None
        self._starting = asyncio.Lock()
        self._busy = 0
        self._idle_since = time.monotonic()
        self._watcher: asyncio.Task[None] | None = None

    async def ready(self) -> bool:
        """Answer once the actor runs, watching its idle time from now on."""
        self._watch()
        return True

    def _watch(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
        idle_since = lambda: None if self._busy else self._idle_since  # noqa: E731
        self._watcher = asyncio.create_task(
            exit_when_idle(self.idle_s, idle_since, poll_s=30.0, before_exit=self._close_if_idle)
        )

    async def _started(self, box: dict[str, Any]) -> Sandbox:
        async with self._starting:
            if self.sandbox is None:
                sandbox = Sandbox(Path(box["directory"]), box["limits"], isolation=box["isolation"],
                                  bwrap=box["bwrap"], allowed_domains=box["allowed_domains"],
                                  env=box.get("env"))  # fmt: skip
                await sandbox.start()  # on the actor's event loop thread, which lives as long as the actor
                self.sandbox = sandbox
                self.idle_s = box["idle_s"]
                self._watch()
            return self.sandbox

    async def run_python(self, box: dict[str, Any], code: str, timeout_s: float) -> PythonResult:
        """Run code in the sandbox's kernel (``box``: the sandbox's settings, ``BoxSpec.sandbox``)."""
        self._busy += 1
        try:
            sandbox = await self._started(box)
            return await sandbox.run_python(code, timeout_s=timeout_s)
        finally:
            self._busy -= 1
            self._idle_since = time.monotonic()

    async def run_shell(
        self, box: dict[str, Any], commands: Sequence[str], timeout_s: float, max_output_length: int | None
    ) -> list[CommandResult]:
        self._busy += 1
        try:
            sandbox = await self._started(box)
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
