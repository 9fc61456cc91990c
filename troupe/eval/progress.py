"""A live progress bar for evaluation runs: counts, errors, rate and ETA, on one line.

On a terminal the line is redrawn in place (at most every ``min_interval_s``);
elsewhere (CI logs, pipes) a line is printed at the first result and at every tenth of the run, so logs
stay short.

Example::

    progress = Progress(total=200, done=50)      # 50 already done (a resumed run)
    progress.update(passed=True, error=False)
    progress.close()
    # [########........................] 51/200  25%  passed 50 failed 0 errors 1  4.2/s  ETA 0:35
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """Counts finished samples and draws the bar.

    Args:
        total: samples in the run (including those already done).
        done: samples finished before this process started (a resumed run).
        stream: where to draw (default stderr).
        live: redraw in place; default: whether ``stream`` is a terminal.
        width: characters of the bar itself.
    """

    def __init__(
        self,
        total: int,
        *,
        done: int = 0,
        stream: TextIO | None = None,
        live: bool | None = None,
        width: int = 30,
        min_interval_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.skipped = done
        self.passed = self.failed = self.errors = 0
        self._stream = stream if stream is not None else sys.stderr
        self._live = live if live is not None else bool(getattr(self._stream, "isatty", lambda: False)())
        self._width = width
        self._min_interval_s = min_interval_s
        self._clock = clock
        self._started = clock()
        self._drawn_at = float("-inf")
        self._tenth = -1

    @property
    def finished(self) -> int:
        """Samples finished by this process."""
        return self.passed + self.failed + self.errors

    def update(self, *, passed: bool, error: bool) -> None:
        """Count one finished sample and redraw if due."""
        if error:
            self.errors += 1
        elif passed:
            self.passed += 1
        else:
            self.failed += 1
        self._draw()

    def render(self) -> str:
        """The current line."""
        done = self.skipped + self.finished
        fraction = done / self.total if self.total else 1.0
        filled = int(round(fraction * self._width))
        elapsed = self._clock() - self._started
        rate = self.finished / elapsed if elapsed > 0 else 0.0
        remaining = self.total - done
        eta = _clock_text(remaining / rate) if rate > 0 and remaining > 0 else ("0:00" if remaining <= 0 else "?")
        return (
            f"[{'#' * filled}{'.' * (self._width - filled)}] {done}/{self.total} {100 * fraction:3.0f}%  "
            f"passed {self.passed} failed {self.failed} errors {self.errors}  {rate:.1f}/s  ETA {eta}"
        )

    def close(self) -> None:
        """Draw the final state and end the line."""
        self._draw(final=True)
        if self._live:
            self._stream.write("\n")
            self._stream.flush()

    def _draw(self, final: bool = False) -> None:
        now = self._clock()
        if self._live:
            if final or now - self._drawn_at >= self._min_interval_s:
                self._stream.write("\r" + self.render())
                self._stream.flush()
                self._drawn_at = now
            return
        done = self.skipped + self.finished
        tenth = int(10 * done / self.total) if self.total else 10
        if tenth > self._tenth or final:
            if not (final and tenth == self._tenth):
                self._stream.write(self.render() + "\n")
                self._stream.flush()
            self._tenth = tenth


def _clock_text(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
