"""The progress of an evaluation run: counts, errors, rate and ETA, on stderr.

On a terminal it is a live rich bar, drawn like ``troupe bench``'s
(:func:`troupe.progress_bar.live_bar`); elsewhere (CI logs, pipes) a line is printed
at the first result and at every tenth of the run, so logs stay short.

Example::

    progress = Progress(total=200, done=50)      # 50 already done (a resumed run)
    progress.update(passed=True, error=False)
    progress.close()
    # on a terminal, live:
    # eval ━━━━━━━━━━╺━━━━━━━━━━━━━━━━━━━━━━━━━━━━━  51/200  26% passed 1 failed 0 errors 0  4.2/s  ETA 0:35 0:00:01
    # in a log, a line per tenth of the run:
    # [########......................] 51/200  26%  passed 1 failed 0 errors 0  4.2/s  ETA 0:35
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["Progress"]


class Progress:
    """Counts finished samples and shows them.

    Args:
        total: samples in the run (including those already done).
        done: samples finished before this process started (a resumed run).
        console: where to draw (default: a rich console on stderr); live when it is a terminal.
        label: the bar's title.
        width: characters of the bar in log lines.
        clock: seconds, for the rate and the ETA.
    """

    def __init__(
        self,
        total: int,
        *,
        done: int = 0,
        console: Console | None = None,
        label: str = "eval",
        width: int = 30,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from rich.console import Console

        self.total = total
        self.skipped = done
        self.passed = self.failed = self.errors = 0
        self._console = console if console is not None else Console(stderr=True)
        self._width = width
        self._clock = clock
        self._started = clock()
        self._tenth = -1
        self._bar: Any = None
        if self._console.is_terminal:
            from rich.progress import MofNCompleteColumn, TaskProgressColumn

            from troupe.progress_bar import live_bar

            self._bar = live_bar(MofNCompleteColumn(), TaskProgressColumn(), console=self._console)
            self._task = self._bar.add_task(label, total=total, completed=done, info=self._info())
            self._bar.start()

    @property
    def finished(self) -> int:
        """Samples finished by this process."""
        return self.passed + self.failed + self.errors

    def update(self, *, passed: bool, error: bool) -> None:
        """Count one finished sample and show it (live), or log a line if a tenth more is done."""
        if error:
            self.errors += 1
        elif passed:
            self.passed += 1
        else:
            self.failed += 1
        self._draw()

    def render(self) -> str:
        """The state as one line of text, as logged off a terminal."""
        done = self.skipped + self.finished
        fraction = done / self.total if self.total else 1.0
        filled = int(round(fraction * self._width))
        bar = f"[{'#' * filled}{'.' * (self._width - filled)}]"
        return f"{bar} {done}/{self.total} {100 * fraction:3.0f}%  {self._info()}"

    def close(self) -> None:
        """Show the final state; a live bar stops (and stays on screen)."""
        self._draw(final=True)
        if self._bar is not None:
            self._bar.stop()

    def _info(self) -> str:
        done = self.skipped + self.finished
        elapsed = self._clock() - self._started
        rate = self.finished / elapsed if elapsed > 0 else 0.0
        remaining = self.total - done
        eta = _clock_text(remaining / rate) if rate > 0 and remaining > 0 else ("0:00" if remaining <= 0 else "?")
        return f"passed {self.passed} failed {self.failed} errors {self.errors}  {rate:.1f}/s  ETA {eta}"

    def _draw(self, final: bool = False) -> None:
        done = self.skipped + self.finished
        if self._bar is not None:
            # rich redraws on its own clock (10 times a second); this only hands it the state.
            self._bar.update(self._task, completed=done, info=self._info())
            return
        tenth = int(10 * done / self.total) if self.total else 10
        if tenth > self._tenth or final:
            if not (final and tenth == self._tenth):
                self._console.print(self.render(), highlight=False, markup=False, soft_wrap=True)
            self._tenth = tenth


def _clock_text(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
