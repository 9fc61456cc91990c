"""The one look of Troupe's live progress bars (rich): ``troupe bench`` and ``troupe eval run``.

A row reads: the task's description, the bar, the caller's columns, the task's ``info``
field (counts, rate), the time elapsed. rich is imported on first use, so importing a
module that draws bars costs nothing until one is drawn.

Example::

    from rich.progress import MofNCompleteColumn

    bar = live_bar(MofNCompleteColumn())
    with bar:
        task = bar.add_task("concurrency 16", total=200, info="")
        bar.update(task, completed=1, info="errors 0  12.5 req/s")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, ProgressColumn

__all__ = ["live_bar"]


def live_bar(*columns: ProgressColumn, console: Console | None = None) -> Progress:
    """A rich progress display, not yet started; its tasks need an ``info`` field.

    Args:
        columns: what goes between the bar and the ``info`` text (e.g. ``MofNCompleteColumn()``).
        console: where to draw (default: a console on stderr). Off a terminal, rich draws
            nothing live and prints the final state when the display stops.
    """
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        *columns,
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        console=console if console is not None else Console(stderr=True),
        transient=False,
    )
