"""Latency statistics: percentiles, summaries and CDFs, pure and dependency-free.

Percentiles interpolate linearly between the closest ranks (NumPy's default,
``method="linear"``), so ``percentile([1, 2, 3, 4], 50) == 2.5``. A summary of no values
is ``None`` rather than zeros, so a report never shows a latency that was not measured.

Example::

    >>> s = summarize([0.1, 0.2, 0.3, 0.4])
    >>> round(s.p50, 3), s.count
    (0.25, 4)
    >>> cdf([3.0, 1.0, 2.0])
    [(1.0, 0.3333333333333333), (2.0, 0.6666666666666666), (3.0, 1.0)]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Summary", "percentile", "summarize", "cdf", "ratio", "thin"]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) of ``values``, linearly interpolated.

    Raises:
        ValueError: ``values`` is empty or ``q`` is outside 0–100.
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0 and 100, got {q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True, slots=True)
class Summary:
    """Count, mean, extremes and p50/p90/p99 of one measured quantity (in its own unit)."""

    count: int
    mean: float
    min: float
    p50: float
    p90: float
    p99: float
    max: float

    def scaled(self, factor: float) -> Summary:
        """The same summary in another unit (e.g. ``1000`` for seconds to milliseconds)."""
        return Summary(
            count=self.count,
            mean=self.mean * factor,
            min=self.min * factor,
            p50=self.p50 * factor,
            p90=self.p90 * factor,
            p99=self.p99 * factor,
            max=self.max * factor,
        )

    def to_dict(self, digits: int | None = 3) -> dict[str, Any]:
        """A JSON-ready dict; floats rounded to ``digits`` (None keeps them as they are)."""
        out = asdict(self)
        if digits is not None:
            out = {k: (round(v, digits) if isinstance(v, float) else v) for k, v in out.items()}
        return out


def summarize(values: Iterable[float]) -> Summary | None:
    """Summarize ``values``; None when there are none (NaNs are dropped)."""
    data = sorted(v for v in values if v == v)  # v == v drops NaN
    if not data:
        return None
    return Summary(
        count=len(data),
        mean=math.fsum(data) / len(data),
        min=data[0],
        p50=percentile(data, 50),
        p90=percentile(data, 90),
        p99=percentile(data, 99),
        max=data[-1],
    )


def cdf(values: Iterable[float]) -> list[tuple[float, float]]:
    """The empirical CDF: ``(value, fraction of values <= it)`` for each value, ascending."""
    data = sorted(values)
    n = len(data)
    return [(v, (i + 1) / n) for i, v in enumerate(data)]


def thin(points: Sequence[Any], most: int) -> list[Any]:
    """At most ``most`` evenly spaced points of ``points``, always keeping the first and last."""
    if most < 2 or len(points) <= most:
        return list(points)
    step = (len(points) - 1) / (most - 1)
    return [points[round(i * step)] for i in range(most)]


def ratio(value: float | None, limit: float | None) -> float | None:
    """``value / limit`` (how many times the physical limit), or None if either is missing or 0."""
    if value is None or limit is None or limit == 0:
        return None
    return value / limit
