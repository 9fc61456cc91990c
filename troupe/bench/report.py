"""Benchmark reports: one JSON document and a Markdown table per ``troupe bench`` invocation.

A report holds one *run* per load level (e.g. ``--concurrency 1,16,64`` makes three runs).
Each run summary carries the request counts and errors, throughput, and p50/p90/p99 of end-to-end
latency, time to first token and inter-token gaps (milliseconds), the output items and usage
seen, the client's own cost, and the raw per-request latencies (for CDF plots).

Shape (``REPORT_SCHEMA`` names the version)::

    {"schema": "troupe-bench/1", "tool": "troupe bench", "created_at": "…Z",
     "target": {"base_url": …, "model": …, "stream": …}, "machine": {…},
     "runs": [{"label", "mode", "concurrency", "rate", "stream", "requests", "ok",
               "error_count", "errors": {kind: n}, "error_examples": {kind: message},
               "statuses": {status: n}, "wall_s", "throughput_rps", "output_tokens_per_s",
               "e2e_ms": {count, mean, min, p50, p90, p99, max} | null, "ttft_ms": …, "itl_ms": …,
               "output_items": {type: n}, "usage": {"input_tokens": mean, "output_tokens": mean},
               "client": {"cpu_ms_per_request", "cpu_share", "loop_lag_ms": {…}, "start_lag_ms": {…}},
               "samples": {"e2e_ms": [...], "ttft_ms": [...]}}]}

Example::

    report = build_report([run], base_url=url, model="sim", stream=True)
    paths = write_report(report, "out/bench")        # out/bench.json, out/bench.md
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from .loadgen import LoadRun
from .machine import describe_machine, machine_info
from .stats import Summary, summarize

__all__ = ["REPORT_SCHEMA", "summarize_run", "build_report", "render_markdown", "run_table", "write_report", "fmt_ms"]

REPORT_SCHEMA = "troupe-bench/1"
_MAX_SAMPLES = 5000


def _ms(summary: Summary | None) -> dict[str, Any] | None:
    return None if summary is None else summary.scaled(1000).to_dict()


def summarize_run(run: LoadRun, *, label: str | None = None) -> dict[str, Any]:
    """The JSON-ready summary of one measured run (see the module docstring)."""
    results = run.results
    ok = [r for r in results if r.ok]
    errors = Counter(r.error for r in results if r.error is not None)
    examples: dict[str, str] = {}
    for r in results:
        if r.error is not None and r.error not in examples:
            examples[r.error] = (r.error_message or "")[:300]
    output_tokens = sum((r.usage or {}).get("output_tokens") or 0 for r in ok)
    stream = any(r.stream for r in results)

    def mean_usage(key: str) -> float | None:
        raw = [(r.usage or {}).get(key) for r in ok]
        values = [v for v in raw if isinstance(v, int | float)]
        return round(sum(values) / len(values), 2) if values else None

    wall = run.wall_s
    n = len(results)
    return {
        "label": label or run.spec.label,
        "mode": "rate" if run.spec.rate is not None else "concurrency",
        "concurrency": run.spec.concurrency if run.spec.rate is None else None,
        "rate": run.spec.rate,
        "stream": stream,
        "started_at": _iso(run.started_at),
        "requests": n,
        "warmup": len(run.warmup_results),
        "ok": len(ok),
        "error_count": n - len(ok),
        "errors": dict(errors),
        "error_examples": examples,
        "statuses": dict(Counter(r.status or "none" for r in results)),
        "wall_s": round(wall, 4),
        "throughput_rps": round(len(ok) / wall, 3) if wall > 0 else None,
        "output_tokens_per_s": round(output_tokens / wall, 2) if wall > 0 else None,
        "e2e_ms": _ms(summarize(r.e2e_s for r in ok if r.e2e_s is not None)),
        "ttft_ms": _ms(summarize(r.ttft_s for r in ok if r.ttft_s is not None)),
        "itl_ms": _ms(summarize(gap for r in ok for gap in r.itl_s)),
        "deltas_per_response": round(sum(r.deltas for r in ok) / len(ok), 2) if ok and stream else None,
        "output_items": dict(Counter(t for r in ok for t in r.output_items)),
        "usage": {"input_tokens": mean_usage("input_tokens"), "output_tokens": mean_usage("output_tokens")},
        "client": {
            "cpu_ms_per_request": round(run.client_cpu_s * 1000 / n, 4) if n else None,
            "cpu_share": round(run.client_cpu_s / wall, 4) if wall > 0 else None,
            "loop_lag_ms": _ms(run.loop_lag),
            "start_lag_ms": _ms(run.start_lag),
        },
        "samples": {
            "e2e_ms": [round(r.e2e_s * 1000, 3) for r in ok if r.e2e_s is not None][:_MAX_SAMPLES],
            "ttft_ms": [round(r.ttft_s * 1000, 3) for r in ok if r.ttft_s is not None][:_MAX_SAMPLES],
        },
    }


def _iso(unix: float) -> str | None:
    if not unix:
        return None
    return datetime.datetime.fromtimestamp(unix, datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def build_report(
    runs: Iterable[LoadRun | dict[str, Any]],
    *,
    base_url: str,
    model: str | None,
    stream: bool,
    machine: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A whole report from measured runs (or summaries already made by :func:`summarize_run`)."""
    summaries = [r if isinstance(r, dict) else summarize_run(r) for r in runs]
    report: dict[str, Any] = {
        "schema": REPORT_SCHEMA,
        "tool": "troupe bench",
        "version": _version(),
        "created_at": _iso(datetime.datetime.now(datetime.UTC).timestamp()),
        "target": {"base_url": base_url, "model": model, "stream": stream},
        "machine": machine if machine is not None else machine_info(),
        "runs": summaries,
    }
    if extra:
        report.update(extra)
    return report


def _version() -> str | None:
    try:
        return importlib.metadata.version("troupe")
    except importlib.metadata.PackageNotFoundError:
        return None


def fmt_ms(value: float | None, digits: int = 1) -> str:
    """A millisecond figure for a table: ``12.3``, or ``–`` when not measured."""
    if value is None:
        return "–"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def _pick(summary: dict[str, Any] | None, key: str) -> float | None:
    return None if summary is None else summary.get(key)


def run_table(runs: Sequence[dict[str, Any]]) -> str:
    """The Markdown table of run summaries (latencies in ms)."""
    head = (
        "| run | requests | errors | resp/s | TTFT p50 | TTFT p90 | TTFT p99 | E2E p50 | E2E p90 | E2E p99 "
        "| ITL p50 | ITL p99 | client CPU/req (ms) |"
    )
    lines = [head, "|" + "---|" * 13]
    for run in runs:
        ttft, e2e, itl = run.get("ttft_ms"), run.get("e2e_ms"), run.get("itl_ms")
        cells = [
            run["label"],
            str(run["requests"]),
            str(run["error_count"]),
            fmt_ms(run.get("throughput_rps")),
            fmt_ms(_pick(ttft, "p50")), fmt_ms(_pick(ttft, "p90")), fmt_ms(_pick(ttft, "p99")),
            fmt_ms(_pick(e2e, "p50")), fmt_ms(_pick(e2e, "p90")), fmt_ms(_pick(e2e, "p99")),
            fmt_ms(_pick(itl, "p50"), 2), fmt_ms(_pick(itl, "p99"), 2),
            fmt_ms((run.get("client") or {}).get("cpu_ms_per_request"), 3),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: target, machine, the run table, errors."""
    target = report["target"]
    mode = "streaming" if target.get("stream") else "non-streaming"
    out = [
        f"# troupe bench: {target['base_url']}",
        "",
        f"- model `{target.get('model')}`, {mode}, {report.get('created_at')}",
        f"- machine: {describe_machine(report['machine'])}",
        "",
        run_table(report["runs"]),
        "",
        "Latencies in milliseconds. TTFT: time to the first delta event; E2E: to the terminal event "
        "(or the whole body); ITL: gaps between delta events. resp/s counts successful responses.",
    ]
    errors = [(run["label"], kind, n, run["error_examples"].get(kind, ""))
              for run in report["runs"] for kind, n in run["errors"].items()]
    if errors:
        out += ["", "## Errors", "", "| run | kind | count | example |", "|---|---|---|---|"]
        out += [f"| {label} | {kind} | {n} | {msg.replace('|', '/')[:120]} |" for label, kind, n, msg in errors]
    return "\n".join(out) + "\n"


def write_report(report: dict[str, Any], prefix: str | os.PathLike[str]) -> list[str]:
    """Write ``PREFIX.json`` and ``PREFIX.md`` (directories made as needed); their paths."""
    prefix = os.fspath(prefix)
    folder = os.path.dirname(prefix)
    if folder:
        os.makedirs(folder, exist_ok=True)
    json_path, md_path = prefix + ".json", prefix + ".md"
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    with open(md_path, "w", encoding="utf-8") as f:
        f.write(render_markdown(report))
    return [json_path, md_path]
