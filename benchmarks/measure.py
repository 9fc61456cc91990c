"""Shared measuring helpers of the scenarios: one load level against one target, with the CPU
its processes (and the sim's) spent, and ratios to the physical limit.

Example::

    row = await measure(ctx, ctx.lab.targets["troupe-replica"], body, Level(16, 48, 16), label="…")
    row["summary"]["ttft_ms"]["p50"], row["server_cpu_ms_per_response"]
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from troupe.bench.loadgen import LoadSpec, run_load
from troupe.bench.progress import Progress
from troupe.bench.report import summarize_run
from troupe.bench.stats import ratio

from .scenarios import Definitions, Level
from .targets import Lab, Target

__all__ = ["Ctx", "measure", "add_ratios", "log", "idle_cores", "settle"]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass(eq=False)
class Ctx:
    """What every scenario gets: the servers, the parameters, where to put findings."""

    lab: Lab
    defs: Definitions
    progress: bool = True
    notes: list[str] = field(default_factory=list)
    idle_cores: dict[str, float] = field(default_factory=dict)
    """Each process tree's CPU use at rest (cores), by process name: subtracted from loads."""
    first_tool_requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Scenario 7's first request to each tool app right after Troupe was ready, by target name."""

    def target(self, name: str) -> Target | None:
        return self.lab.targets.get(name)

    def peers(self) -> list[Target]:
        return [t for t in self.lab.targets.values() if t.kind == "peer"]


async def measure(
    ctx: Ctx,
    target: Target,
    body: dict[str, Any] | Callable[[int], dict[str, Any]],
    level: Level,
    *,
    label: str,
    timeout_s: float = 120.0,
) -> dict[str, Any]:
    """Warm up, then measure one level; the row: target, level, run summary, CPU per response."""
    def body_for(i: int) -> dict[str, Any]:
        return {**(body(i) if callable(body) else body), "model": target.model}

    await settle(ctx)
    if level.warmup:
        warm = LoadSpec(concurrency=level.concurrency, requests=level.warmup, timeout_s=timeout_s)
        await run_load(target.base_url, body_for, warm)
    sim = ctx.lab.targets.get("sim")
    procs = {"server": target.proc, "sim": sim.proc if sim is not None and sim is not target else None}
    cpu0 = {k: p.cpu_s() for k, p in procs.items() if p is not None}
    spec = LoadSpec(concurrency=level.concurrency, requests=level.requests, duration_s=level.max_s,
                    timeout_s=timeout_s)
    started = time.perf_counter()
    with Progress(f"{label} c={level.concurrency}", total=level.requests, duration_s=level.max_s,
                  enabled=ctx.progress) as bar:
        run = await run_load(target.base_url, body_for, spec, on_result=bar.update)
    wall = time.perf_counter() - started
    gross = {k: procs[k].cpu_s() - v for k, v in cpu0.items()}  # type: ignore[union-attr]
    # Net of what the process tree burns at rest (Ray's own daemons poll all the time).
    cpu = {k: max(0.0, v - ctx.idle_cores.get(procs[k].name, 0.0) * wall) for k, v in gross.items()}  # type: ignore[union-attr]
    summary = summarize_run(run, label=label)
    ok = max(summary["ok"], 1)
    row = {
        "target": target.name,
        "kind": target.kind,
        "label": label,
        "concurrency": level.concurrency,
        "summary": summary,
        "server_cpu_ms_per_response": round(cpu["server"] * 1000 / ok, 3) if "server" in cpu else None,
        "sim_cpu_ms_per_response": round(cpu["sim"] * 1000 / ok, 3) if "sim" in cpu else None,
        "server_cpu_gross_ms_per_response": round(gross["server"] * 1000 / ok, 3) if "server" in gross else None,
        "response_e2e_ms": dict([(r.response_id, round(r.e2e_s * 1000, 3)) for r in run.results
                                 if r.ok and r.response_id and r.e2e_s is not None][:8]),
    }
    if summary["error_count"]:
        log(f"  {label} c={level.concurrency}: {summary['error_count']} errors {summary['errors']} "
            f"{next(iter(summary['error_examples'].values()), '')[:200]}")
    return row


def idle_cores(ctx: Ctx, seconds: float = 5.0) -> dict[str, Any]:
    """Measure every started process tree's CPU use at rest (cores) into ``ctx.idle_cores``.

    Returns ``{"cores": {tree: cores}, "by_process": {tree: {role: cores}}}``: the trees' totals
    and, within each, the processes grouped by role (:func:`benchmarks.procs.role`), busiest first, those
    using at least 0.001 cores."""
    procs = {p.name: p for p in ctx.lab.procs}
    before = {name: p.cpu_s() for name, p in procs.items()}
    parts_before = {name: p.cpu_by_process() for name, p in procs.items()}
    time.sleep(seconds)
    ctx.idle_cores = {name: round((p.cpu_s() - before[name]) / seconds, 4) for name, p in procs.items()}
    by_process = {}
    for name, proc in procs.items():
        roles: dict[str, float] = {}
        for pid, (role, cpu) in proc.cpu_by_process().items():
            roles[role] = roles.get(role, 0.0) + (cpu - parts_before[name].get(pid, (role, 0.0))[1]) / seconds
        by_process[name] = {r: round(c, 4) for r, c in sorted(roles.items(), key=lambda kv: -kv[1]) if c >= 0.001}
    return {"cores": ctx.idle_cores, "by_process": by_process}


async def settle(ctx: Ctx, *, margin_cores: float = 0.15, window_s: float = 0.5, most_s: float = 15.0) -> float:
    """Wait until every started server is back near its CPU use at rest (a server that still
    works off the previous load, e.g. writing behind, would slow the next measurement); at most
    ``most_s``. Returns the seconds waited."""
    started = time.perf_counter()
    rest = sum(ctx.idle_cores.values())
    while time.perf_counter() - started < most_s:
        before = sum(p.cpu_s() for p in ctx.lab.procs)
        await asyncio.sleep(window_s)
        busy = (sum(p.cpu_s() for p in ctx.lab.procs) - before) / window_s
        if busy <= rest + margin_cores:
            break
    return time.perf_counter() - started


def _p(row: dict[str, Any], metric: str, q: str) -> float | None:
    return (row["summary"].get(metric) or {}).get(q)


def add_ratios(rows: list[dict[str, Any]], *, limit: str = "sim") -> None:
    """Give every row ``ratios`` (TTFT and E2E p50/p99, throughput, server CPU per response)
    and ``overhead_ms`` (TTFT and E2E p50) against the ``limit`` row of its concurrency."""
    limits = {r["concurrency"]: r for r in rows if r["target"] == limit}
    for row in rows:
        base = limits.get(row["concurrency"])
        if base is None:
            continue
        row["ratios"] = {
            f"{metric}_{q}": _round(ratio(_p(row, metric, q), _p(base, metric, q)))
            for metric in ("ttft_ms", "e2e_ms") for q in ("p50", "p99")
        }
        row["ratios"]["throughput"] = _round(ratio(row["summary"]["throughput_rps"], base["summary"]["throughput_rps"]))
        row["ratios"]["cpu_per_response"] = _round(ratio(row.get("server_cpu_ms_per_response"),
                                                         base.get("server_cpu_ms_per_response")))
        row["overhead_ms"] = {
            f"{metric}_p50": _round(None if _p(row, metric, "p50") is None or _p(base, metric, "p50") is None
                                    else _p(row, metric, "p50") - _p(base, metric, "p50"))  # type: ignore[operator]
            for metric in ("ttft_ms", "e2e_ms")
        }


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)
