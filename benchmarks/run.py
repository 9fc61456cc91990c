"""Run every benchmark scenario and write ``benchmarks/results/<date>-<commit>.{json,md,png}``.

    .venv/bin/python -m benchmarks.run            # the full run (a few minutes on 2 cores)
    .venv/bin/python -m benchmarks.run --quick    # a smoke test of the harness (about a minute)

Starts everything it needs on 127.0.0.1 (the sim server, Troupe's apps and the Serve floor on
their own local Ray instance, the peers SMG and Llama Stack, an MCP server), sends scenario 7's first
requests as soon as Troupe is ready, runs the scenarios of :mod:`benchmarks.scenarios` in
order, stops everything it started, and writes the results. Scratch data (logs, DuckDB files,
the peers' virtual environments) goes to ``benchmarks/scratch/``, which git ignores;
``--out-dir`` puts the results elsewhere (a quick run writes to the scratch directory).

Before/after: the Markdown compares the run with a baseline, an earlier results JSON
(``--baseline PATH``). By default (``--baseline auto``) a full run takes the newest full run in
``benchmarks/results/`` whose commit differs from the current one; a ``--quick`` run takes none
unless given one; ``--baseline none`` turns the comparison off.

"Troupe" in the results is the main target, ``troupe-replica`` (:data:`benchmarks.scenarios.MAIN`,
the replica placement), recorded as the document's ``main_target``; ``troupe-pooled`` is
measured beside it in scenarios 1 and 2. A baseline from before the replica placement is read
for its own main target, ``troupe-pooled``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

from troupe.bench.loadgen import run_async
from troupe.bench.machine import machine_info

from . import profiling, scenario_http, scenario_placement, scenario_tools
from .measure import Ctx, idle_cores, log
from .procs import Proc, free_port
from .results import baseline_summary, load_results, pick_baseline, target_checks, write_results
from .scenarios import MAIN, definitions
from .targets import ROOT, Lab

__all__ = ["main"]

SCENARIOS = ("0", "1", "2", "P", "3", "7", "4", "5", "6")
"""In run order; P profiles the main Troupe (:data:`benchmarks.scenarios.MAIN`) with py-spy.
Scenario 7's first requests are sent as soon as Troupe is ready, before everything else; its
idle-gap requests run after scenario 3."""


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except OSError:
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def _load_average() -> list[float] | None:
    """The machine's 1/5/15-minute load average: other work on it shows here."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def _wait_quiet(most_s: float) -> None:
    cores = os.cpu_count() or 1
    deadline = time.monotonic() + most_s
    while (load := _load_average()) and load[0] >= cores and time.monotonic() < deadline:
        log(f"waiting for a quieter machine: load average {load[0]:g} on {cores} cores")
        time.sleep(10)


def _mcp(ctx: Ctx, scratch: str) -> dict[str, Any]:
    """6. Run :mod:`benchmarks.mcp_bench` against its own MCP server (both in subprocesses)."""
    try:
        import troupe.runtime.ray.mcp  # noqa: F401 - MCP support may not have landed
    except ImportError as exc:
        return {"skipped": f"MCP support is not available in this checkout ({exc})"}
    port = free_port()
    server = Proc.start("mcp-server", [sys.executable, "-m", "benchmarks.mcp_bench", "serve", "--port", str(port)],
                        os.path.join(scratch, "logs"), cwd=ROOT)
    try:
        server.wait_http(f"http://127.0.0.1:{port}/health", timeout_s=60)
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.mcp_bench", "measure", "--url", f"http://127.0.0.1:{port}/mcp",
             "--calls", str(ctx.defs.mcp_calls)],
            cwd=ROOT, capture_output=True, text=True, timeout=600,
        )
        if done.returncode != 0:
            tail = [line for line in done.stderr.splitlines() if line.strip()][-3:]
            return {"skipped": "the MCP measurement failed: " + " | ".join(tail)[:500]}
        return json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        server.stop()


async def _scenarios(ctx: Ctx, chosen: set[str], scratch: str) -> dict[str, Any]:
    steps: list[tuple[str, str, Callable[[Ctx], Awaitable[dict[str, Any]]]]] = [
        ("0", "0_client_overhead", scenario_http.client_overhead),
        ("1", "1_streaming", scenario_http.streaming),
        ("2", "2_throughput", scenario_http.throughput),
        ("P", "profile", lambda c: profiling.profile_troupe(c, c.defs.profile_seconds)),
        ("3", "3_agent_loop", scenario_http.agent_loop),
        ("7", "7_idle_tools", scenario_tools.idle_tools),
        ("4", "4_history", scenario_http.history),
        ("5", "5_placement", scenario_placement.placement),
    ]
    results: dict[str, Any] = {}
    for key, name, step in steps:
        if key not in chosen:
            continue
        log(f"scenario {name}")
        started = time.perf_counter()
        load = _load_average()
        try:
            results[name] = await step(ctx)
        except Exception as exc:  # noqa: BLE001 - one broken scenario must not lose the others
            traceback.print_exc()
            results[name] = {"skipped": f"the scenario failed: {type(exc).__name__}: {exc}"[:500]}
        results[name]["seconds"] = round(time.perf_counter() - started, 1)
        results[name]["load_average_at_start"] = load
    if "6" in chosen:
        log("scenario 6_mcp")
        started = time.perf_counter()
        load = _load_average()
        results["6_mcp"] = await asyncio.to_thread(_mcp, ctx, scratch)
        results["6_mcp"]["seconds"] = round(time.perf_counter() - started, 1)
        results["6_mcp"]["load_average_at_start"] = load
    return results


RESULTS_DIR = os.path.join(ROOT, "benchmarks", "results")


def _baseline(choice: str, commit: str, quick: bool) -> tuple[str | None, str, dict[str, Any] | None]:
    """The baseline JSON's path (None: no comparison), how it was picked (``auto``/``given``) and
    its contents, read now. Raises ValueError for a given path that is not a results JSON."""
    if choice == "none":
        return None, "none", None
    path = (None if quick else pick_baseline(RESULTS_DIR, commit)) if choice == "auto" else choice
    return path, "auto" if choice == "auto" else "given", None if path is None else load_results(path)


def _shown(path: str) -> str:
    """A path as the results record it: relative to the checkout when it is inside it."""
    full = os.path.abspath(path)
    return os.path.relpath(full, ROOT) if full.startswith(ROOT + os.sep) else full


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke test of the harness")
    parser.add_argument("--only", default=",".join(SCENARIOS), help="scenarios to run, e.g. 0,1,2,P (default: all)")
    parser.add_argument("--no-peers", action="store_true", help="skip SMG and Llama Stack")
    parser.add_argument("--out-dir", help="where results go (default: benchmarks/results, or scratch with --quick)")
    parser.add_argument("--scratch", default=os.path.join(ROOT, "benchmarks", "scratch"))
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                        help="first wait up to this long for the machine's 1-minute load average to fall below "
                             "its core count (a shared machine); the run starts anyway after that")
    parser.add_argument("--baseline", default="auto", metavar="PATH|auto|none",
                        help="an earlier results JSON to compare with (a Before/after section in the Markdown, its "
                             "path and commit in the JSON). auto (the default): the newest full run in "
                             "benchmarks/results whose commit differs from the current one, none with --quick; "
                             "none: no comparison")
    args = parser.parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so every server the run started is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    chosen = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = chosen - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    try:  # before minutes of measuring: a bad --baseline fails now
        baseline_path, picked, baseline = _baseline(args.baseline, commit, args.quick)
    except ValueError as exc:
        parser.error(f"--baseline: {exc}")
    if baseline_path is not None:
        log(f"baseline ({picked}): {_shown(baseline_path)}")
    elif picked == "auto" and not args.quick:
        log("no baseline: no full run of another commit in benchmarks/results")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    defs = definitions(args.quick)
    _wait_quiet(args.wait_quiet)
    started_at = datetime.datetime.now(datetime.UTC)
    document: dict[str, Any] = {
        "schema": "troupe-benchmarks/1",
        "created_at": started_at.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "commit": commit,
        "worktree_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "quick": args.quick,
        "machine": machine_info(),
        "definitions": asdict(defs),
        "command": ".venv/bin/python -m benchmarks.run" + (" --quick" if args.quick else ""),
        "main_target": MAIN,  # the Troupe of the Headline, the Targets table and the before/after
    }
    wall = time.perf_counter()
    with Lab(scratch=args.scratch, peers=not args.no_peers) as lab:
        ctx = Ctx(lab=lab, defs=defs, progress=not args.quiet)
        log("starting the sim server")
        sim = lab.start_sim()
        if chosen - {"0", "6"}:
            log("starting Troupe (a local Ray instance: its apps and the Serve floor)")
            lab.start_troupe(sim.base_url)
            if "7" in chosen:  # before anything else reaches Troupe
                ctx.first_tool_requests = run_async(scenario_tools.first_requests(ctx))
            log("setting up and starting the peers")
            lab.start_peers(sim.base_url.removesuffix("/v1"))
            for peer, status in lab.peer_status.items():
                log(f"  {peer}: {status['status']} {status.get('reason', status.get('version', ''))}")
        document["peers"] = lab.peer_status
        document["targets"] = {n: {"base_url": t.base_url, "model": t.model, "kind": t.kind}
                               for n, t in lab.targets.items()}
        log("measuring each server's CPU use at rest")
        idle = idle_cores(ctx, defs.idle_seconds)
        document["idle_cpu_cores"], document["idle_cpu_by_process"] = idle["cores"], idle["by_process"]
        document["machine"]["load_average_before_scenarios"] = machine_info()["load_average"]
        document["scenarios"] = run_async(_scenarios(ctx, chosen, args.scratch))
        document["notes"] = ctx.notes
    document["wall_s"] = round(time.perf_counter() - wall, 1)
    document["target_checks"] = target_checks(document)
    if baseline_path is not None and baseline is not None:
        try:
            document["baseline"] = baseline_summary(baseline, document, _shown(baseline_path), picked)
        except Exception as exc:  # noqa: BLE001 - the comparison must not lose the run's results
            traceback.print_exc()
            document.setdefault("notes", []).append(
                f"The before/after against {_shown(baseline_path)} failed: {type(exc).__name__}: {exc}")
    out_dir = args.out_dir or (os.path.join(args.scratch, "results") if args.quick
                               else os.path.join(ROOT, "benchmarks", "results"))
    paths = write_results(document, out_dir, f"{started_at:%Y-%m-%d}-{commit}")
    log("wrote " + ", ".join(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
