"""The live progress bar of ``troupe bench`` (rich), or nothing at all.

:class:`Progress` counts finished requests (warm-up ones apart), errors and the rate, on
stderr. Bounded by a request count, the bar fills by requests; bounded only by a duration,
it fills by time. Off a terminal rich draws nothing live, and ``enabled=False`` (``--quiet``)
draws nothing at all. The bar looks like ``troupe eval run``'s (:func:`troupe.progress_bar.live_bar`).

Example::

    with Progress("concurrency 16", total=200, duration_s=None) as bar:
        run = await run_load(url, body_for, spec, on_result=bar.update)
"""

from __future__ import annotations

import time
from typing import Any

from .client import RequestResult

__all__ = ["Progress"]


class Progress:
    """A live bar for one load level; a context manager, fed by :meth:`update`."""

    def __init__(
        self, label: str, *, total: int | None, duration_s: float | None, warmup: int = 0, enabled: bool = True
    ) -> None:
        self.label, self.total, self.duration_s, self.warmup = label, total, duration_s, warmup
        self.enabled = enabled
        self.done = self.errors = self.warm = 0
        self._started = 0.0
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        self._started = time.perf_counter()
        if not self.enabled:
            return self
        from rich.progress import MofNCompleteColumn, TextColumn

        from troupe.progress_bar import live_bar

        counted = MofNCompleteColumn() if self.total is not None else TextColumn("{task.percentage:>3.0f}%")
        self._bar = live_bar(counted)
        self._bar.__enter__()
        total = self.total if self.total is not None else self.duration_s
        self._task = self._bar.add_task(self.label, total=total, info=self._info())
        return self

    def _info(self) -> str:
        elapsed = max(time.perf_counter() - self._started, 1e-9)
        warm = f"warm-up {self.warm}/{self.warmup} " if self.warm < self.warmup else ""
        return f"{warm}errors {self.errors}  {self.done / elapsed:.1f} req/s"

    def update(self, result: RequestResult) -> None:
        """Count one finished request (the load generator's ``on_result``)."""
        if result.warmup:
            self.warm += 1
            if self.warm == self.warmup:  # the measured phase starts now: reset the clock
                self._started = time.perf_counter()
        else:
            self.done += 1
            self.errors += 0 if result.ok else 1
        if self._bar is None:
            return
        if self.total is not None:
            self._bar.update(self._task, completed=self.done, info=self._info())
        else:
            elapsed = time.perf_counter() - self._started if self.warm >= self.warmup else 0.0
            self._bar.update(self._task, completed=min(elapsed, self.duration_s or 0.0), info=self._info())

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            if self.total is None and self.duration_s is not None:
                self._bar.update(self._task, completed=self.duration_s, info=self._info())
            self._bar.__exit__(None, None, None)
