"""PNG charts of a benchmark report: latency CDFs and latency against concurrency.

Uses matplotlib with its non-interactive ``Agg`` backend (no display needed). matplotlib is an
optional dependency (``pip install 'troupe[charts]'``); :func:`~troupe._charts.require_matplotlib`
says so plainly when it is missing.

Example::

    paths = write_plots(report, "out/bench")   # out/bench-cdf.png, out/bench-concurrency.png
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from troupe._charts import require_matplotlib

from .stats import cdf, thin

__all__ = ["require_matplotlib", "plot_cdfs", "plot_vs_concurrency", "write_plots"]

_CDF_POINTS = 400


def _cdf_axes(ax: Any, runs: Sequence[dict[str, Any]], key: str, title: str) -> bool:
    drawn = False
    for run in runs:
        values = (run.get("samples") or {}).get(key) or []
        if not values:
            continue
        points = thin(cdf(values), _CDF_POINTS)
        ax.plot([p[0] for p in points], [p[1] for p in points], label=run["label"], drawstyle="steps-post")
        drawn = True
    ax.set_title(title)
    ax.set_xlabel("milliseconds")
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3)
    if drawn:
        ax.legend(fontsize="small")
    return drawn


def plot_cdfs(runs: Sequence[dict[str, Any]], path: str, *, title: str = "") -> str:
    """End-to-end (and, for streams, time-to-first-token) latency CDFs, one line per run."""
    plt = require_matplotlib()
    streaming = any((r.get("samples") or {}).get("ttft_ms") for r in runs)
    fig, axes = plt.subplots(1, 2 if streaming else 1, figsize=(11 if streaming else 6, 4), squeeze=False)
    _cdf_axes(axes[0][0], runs, "e2e_ms", "end-to-end latency")
    if streaming:
        _cdf_axes(axes[0][1], runs, "ttft_ms", "time to first token")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_vs_concurrency(runs: Sequence[dict[str, Any]], path: str, *, title: str = "") -> str:
    """p50 and p99 latency (end to end, and TTFT for streams) against concurrency, log x axis."""
    plt = require_matplotlib()
    points = sorted((r for r in runs if r.get("concurrency")), key=lambda r: r["concurrency"])
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [r["concurrency"] for r in points]
    for key, name, color in (("e2e_ms", "E2E", "tab:blue"), ("ttft_ms", "TTFT", "tab:green")):
        for q, style in (("p50", "-o"), ("p99", "--o")):
            ys = [(r.get(key) or {}).get(q) for r in points]
            if any(y is not None for y in ys):
                ax.plot(xs, [float("nan") if y is None else y for y in ys], style, color=color,
                        label=f"{name} {q}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs or [1])
    ax.set_xticklabels([str(x) for x in xs] or ["1"])
    ax.set_xlabel("concurrency")
    ax.set_ylabel("milliseconds")
    ax.set_title(title or "latency vs concurrency")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(report: dict[str, Any], prefix: str | os.PathLike[str]) -> list[str]:
    """``PREFIX-cdf.png`` always; ``PREFIX-concurrency.png`` when runs differ in concurrency."""
    prefix = os.fspath(prefix)
    folder = os.path.dirname(prefix)
    if folder:
        os.makedirs(folder, exist_ok=True)
    runs = report["runs"]
    title = report["target"]["base_url"]
    paths = [plot_cdfs(runs, f"{prefix}-cdf.png", title=title)]
    if len({r.get("concurrency") for r in runs if r.get("concurrency")}) > 1:
        paths.append(plot_vs_concurrency(runs, f"{prefix}-concurrency.png", title=title))
    return paths
