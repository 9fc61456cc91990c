"""PNG charts of an evaluation run (matplotlib, drawn off-screen; no display needed).

Three files in the chosen directory:

* ``latency.png``: histograms of time to first token and end-to-end latency, p50/p95 marked;
* ``success_by_tag.png``: passed / failed / error samples per tag;
* ``pass_k.png``: pass@k and pass^k against k.

Example::

    paths = write_charts(results, summarize(results), "eval-reports/run-1")
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from troupe._charts import require_matplotlib

from .metrics import ResultLike, Summary

__all__ = ["write_charts"]


def write_charts(
    results: Sequence[ResultLike], summary: Summary, directory: str | os.PathLike[str], *, title: str = ""
) -> list[Path]:
    """Draw the run's charts into ``directory`` (created if missing); the paths written.

    Raises:
        ChartsUnavailable: matplotlib is not installed (``pip install 'troupe[charts]'``).
    """
    require_matplotlib()  # ChartsUnavailable without it
    # Figure (not pyplot): no global state and no GUI backend; savefig uses Agg.
    from matplotlib.figure import Figure

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    prefix = f"{title}: " if title else ""
    written = []

    fig = Figure(figsize=(10, 4), layout="constrained")
    for ax, name, values, q in (
        (fig.add_subplot(1, 2, 1), "time to first token", [r.ttft_s for r in results], summary.ttft_s),
        (fig.add_subplot(1, 2, 2), "end to end", [r.e2e_s for r in results], summary.e2e_s),
    ):
        xs = [v for v in values if v is not None]
        if xs:
            ax.hist(xs, bins=min(30, max(5, len(xs) // 3)), color="#4c72b0")
            for value, label, style in ((q.p50, "p50", "--"), (q.p95, "p95", ":")):
                if value is not None:
                    ax.axvline(value, color="#c44e52", linestyle=style, label=f"{label} {value:.3f} s")
            ax.legend()
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(f"{prefix}{name}")
        ax.set_xlabel("seconds")
        ax.set_ylabel("samples")
    written.append(_save(fig, out / "latency.png"))

    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # passed, failed, errors
    for r in results:
        slot = 0 if r.passed else 2 if r.error_kind else 1
        for tag in r.tags or ["(untagged)"]:
            counts[tag][slot] += 1
    tags = sorted(counts)
    fig = Figure(figsize=(8, max(2.5, 0.4 * len(tags) + 1)), layout="constrained")
    ax = fig.add_subplot()
    left = [0] * len(tags)
    for slot, (label, color) in enumerate((("passed", "#55a868"), ("failed", "#c44e52"), ("error", "#8172b2"))):
        widths = [counts[t][slot] for t in tags]
        ax.barh(tags, widths, left=left, label=label, color=color)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.invert_yaxis()  # alphabetical from the top
    ax.set_xlabel("samples")
    ax.set_title(f"{prefix}outcome by tag")
    ax.legend(loc="lower right")
    written.append(_save(fig, out / "success_by_tag.png"))

    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.add_subplot()
    if summary.pass_k:
        ks = [p.k for p in summary.pass_k]
        ax.plot(ks, [p.pass_at_k for p in summary.pass_k], marker="o", label="pass@k")
        ax.plot(ks, [p.pass_hat_k for p in summary.pass_k], marker="s", label="pass^k")
        ax.set_xticks(ks)
        ax.legend()
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("k")
    ax.set_title(f"{prefix}pass@k and pass^k")
    written.append(_save(fig, out / "pass_k.png"))
    return written


def _save(fig: object, path: Path) -> Path:
    fig.savefig(path, dpi=100)  # type: ignore[attr-defined]
    return path
