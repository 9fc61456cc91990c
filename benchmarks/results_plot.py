"""The run's chart: one PNG, a panel per scenario (matplotlib, Agg backend)."""

from __future__ import annotations

from typing import Any

from troupe.bench.plots import require_matplotlib
from troupe.bench.stats import cdf, thin

__all__ = ["plot_results"]


_COLORS = {"sim": "black", "serve-floor": "tab:gray", "serve floor": "tab:gray",
           "troupe-replica-proxy": "tab:purple", "troupe via proxy store=on": "tab:purple",
           "troupe-replica": "tab:blue", "troupe store=on": "tab:blue", "troupe store=off": "tab:cyan",
           "troupe-pooled-proxy": "tab:purple", "troupe-pooled": "tab:olive", "troupe pooled store=on": "tab:olive",
           "troupe pooled store=off": "tab:brown", "troupe-dedicated": "tab:pink",
           "smg": "tab:orange", "llama-stack": "tab:green"}
"""One color per target (scenario 2: per label; its ``troupe store=…`` labels are the main target's)."""


def _color(name: str) -> str | None:
    """One color per server across panels (``smg store=on`` is smg's)."""
    return _COLORS.get(name) or next((c for k, c in _COLORS.items() if name.startswith(k)), None)


def _legend(ax: Any) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="x-small")


def _rows(doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    return (doc.get("scenarios", {}).get(key) or {}).get("rows") or []


def _by_target(rows: list[dict[str, Any]], field: str = "target") -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(row[field], []).append(row)
    return out


def _vs_concurrency(ax: Any, rows: list[dict[str, Any]], metric: str, title: str, field: str = "target") -> None:
    for name, group in _by_target(rows, field).items():
        group = sorted(group, key=lambda r: r["concurrency"])
        ys = [metric_value(r, metric) for r in group]
        ax.plot([r["concurrency"] for r in group], [float("nan") if y is None else y for y in ys], "-o", label=name,
                color=_color(name))
    ax.set_xscale("log", base=2)
    levels = sorted({r["concurrency"] for r in rows})
    ax.set_xticks(levels or [1], [str(x) for x in levels] or ["1"])
    ax.set_xlabel("concurrency")
    ax.set_title(title, fontsize="medium")
    ax.grid(True, alpha=0.3)
    _legend(ax)


def metric_value(row: dict[str, Any], metric: str) -> float | None:
    value: Any = row["summary"]
    for key in metric.split("."):
        value = (value or {}).get(key)
    return value


def plot_results(doc: dict[str, Any], path: str) -> str:
    plt = require_matplotlib()
    fig, axes = plt.subplots(2, 4, figsize=(22, 9.5))
    (a, b, c, d), (e, f, g, h) = axes
    s1 = _rows(doc, "1_streaming")
    _vs_concurrency(a, s1, "ttft_ms.p50", "1 streaming: TTFT p50 (ms)")
    a.set_yscale("log")
    levels = sorted({r["concurrency"] for r in s1})
    mid = 16 if 16 in levels else (levels[len(levels) // 2] if levels else None)
    for row in (r for r in s1 if r["concurrency"] == mid):
        values = row["summary"]["samples"]["e2e_ms"]
        if values:
            points = thin(cdf(values), 300)
            b.plot([p[0] for p in points], [p[1] for p in points], drawstyle="steps-post", label=row["target"],
                   color=_color(row["target"]))
    b.set_title(f"1 streaming: E2E CDF at c={mid} (ms)", fontsize="medium")
    b.set_xlabel("ms")
    b.grid(True, alpha=0.3)
    _legend(b)
    s2 = _rows(doc, "2_throughput")
    _vs_concurrency(c, s2, "throughput_rps", "2 non-streaming: responses/s", field="label")
    s3 = doc.get("scenarios", {}).get("3_agent_loop") or {}
    labels, values = ["critical path"], [(s3.get("critical_path") or {}).get("critical_path_ms") or 0]
    for row in s3.get("rows", []):
        labels.append(f"Troupe c={row['concurrency']}")
        values.append(metric_value(row, "e2e_ms.p50") or 0)
    d.bar(labels, values, color=["tab:gray"] + ["tab:blue"] * (len(labels) - 1))
    d.set_title("3 agent loop: E2E p50 vs critical path (ms)", fontsize="medium")
    d.grid(True, axis="y", alpha=0.3)
    for series in (doc.get("scenarios", {}).get("4_history") or {}).get("series", []):
        turns = series["per_turn"]
        e.plot([t["turn"] for t in turns], [t["e2e_p50_ms"] if t["e2e_p50_ms"] is not None else float("nan")
                                             for t in turns], "--o" if series["mode"] == "chain" else "-o",
               markersize=3, label=f"{series['target']} {series['mode']}", color=_color(series["target"]))
    e.set_yscale("log")
    e.set_title("4 history: E2E p50 per turn (ms)", fontsize="medium")
    e.set_xlabel("turn")
    e.grid(True, alpha=0.3)
    _legend(e)
    s5 = doc.get("scenarios", {}).get("5_placement") or {}
    names = [n for n in ("replica", "pooled", "dedicated") if (s5.get(n) or {}).get("first_turn_ms")]
    for i, q in enumerate(("p50", "p99")):
        f.bar([x + i * 0.38 for x in range(len(names))], [s5[n]["first_turn_ms"][q] for n in names], width=0.38,
              label=q)
    f.set_xticks([x + 0.19 for x in range(len(names))], names)
    f.set_title("5 placement: first-turn latency (ms)", fontsize="medium")
    _legend(f)
    f.grid(True, axis="y", alpha=0.3)
    for n in ("replica", "pooled", "dedicated"):
        samples = (s5.get(n) or {}).get("memory_samples") or []
        if samples:
            g.plot([m["conversations"] for m in samples], [m["pss_mib"] for m in samples], "-o", label=n)
    g.set_title("5 placement: Troupe memory (PSS MiB) vs live conversations", fontsize="medium")
    g.set_xlabel("live conversations")
    g.grid(True, alpha=0.3)
    _legend(g)
    s6 = _rows(doc, "6_mcp")
    ways = list(dict.fromkeys(r["way"] for r in s6))
    for i, conc in enumerate(sorted({r["concurrency"] for r in s6})):
        ys = [next((r["latency_ms"]["p50"] for r in s6 if r["way"] == w and r["concurrency"] == conc
                    and r["latency_ms"]), 0) for w in ways]
        h.bar([x + i * 0.38 for x in range(len(ways))], ys, width=0.38, label=f"c={conc}")
    h.set_xticks([x + 0.19 for x in range(len(ways))], ways)
    h.set_yscale("log")
    h.set_title("6 MCP: call latency p50 (ms)", fontsize="medium")
    _legend(h)
    h.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"Troupe benchmarks {doc.get('created_at', '')[:10]} ({doc.get('commit')}): "
                 f"{doc.get('machine', {}).get('cores')} cores, {doc.get('machine', {}).get('cpu_model')}")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
