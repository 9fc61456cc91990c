"""The step timeline as a matplotlib figure (``troupe trace --png``), drawn off-screen.

The same bars as the console's Gantt chart (:func:`troupe.console.timeline.timeline`): one
row per step, top to bottom in ``seq`` order, model calls blue, tool calls green, failed
steps red, the critical path outlined in orange.

Example::

    figure = timeline_figure(timeline(traces), title="resp_…")
    figure.savefig("trace.png")
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from troupe._charts import require_matplotlib

from .timeline import Bar

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["COLORS", "timeline_figure"]

COLORS = {"model": "#4c78a8", "tool": "#54a24b", "failed": "#e45756", "critical": "#f58518"}
"""The console's colours (troupe/console/static/console.css)."""


def timeline_figure(bars: Sequence[Bar], *, title: str = "") -> Figure:
    """A Gantt chart of ``bars``: one horizontal bar per step, in the order given.

    The axes hold exactly one :class:`~matplotlib.patches.Rectangle` per bar (in order, in
    one ``BarContainer``), ``x`` its start and ``width`` its duration in seconds.
    """
    require_matplotlib()  # ChartsUnavailable without it
    # Figure (not pyplot): no global state and no GUI backend; savefig uses Agg.
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    figure = Figure(figsize=(10, 1.5 + 0.32 * max(len(bars), 1)), layout="constrained")
    ax = figure.add_subplot()
    rows = list(range(len(bars)))
    ax.barh(
        rows,
        [b.end_s - b.start_s for b in bars],
        left=[b.start_s for b in bars],
        height=0.6,
        color=[COLORS["failed"] if b.error else COLORS[b.kind] for b in bars],
        edgecolor=[COLORS["critical"] if b.critical else "none" for b in bars],
        linewidth=2,
    )
    ax.set_yticks(rows, [f"{b.kind} · {b.name}" for b in bars])
    ax.invert_yaxis()  # the first step on top, as in the console
    ax.set_xlabel("seconds from the first step")
    ax.grid(axis="x", color="#dde2ea")
    ax.set_axisbelow(True)
    if title:
        ax.set_title(title, fontsize=10)
    figure.legend(
        handles=[
            Patch(color=COLORS["model"], label="model call"),
            Patch(color=COLORS["tool"], label="tool call"),
            Patch(color=COLORS["failed"], label="failed"),
            Patch(facecolor="white", edgecolor=COLORS["critical"], linewidth=2, label="critical path"),
        ],
        loc="outside lower center",
        ncols=4,
        fontsize=8,
        frameon=False,
    )
    return figure
