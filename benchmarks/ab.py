"""Before/after on one machine at one time: Troupe at an earlier commit against this checkout.

    .venv/bin/python -m benchmarks.ab --before 80bee0b               # 3 rounds, about 8 minutes
    .venv/bin/python -m benchmarks.ab --before 80bee0b --rounds 1 --quick   # a smoke test
    .venv/bin/python -m benchmarks.ab --before 98ad195 --after f4af663 \
        --only "1 streaming c=64" --requests 640 --rounds 5             # one bisect step

A full run (:mod:`benchmarks.run`) compares itself with an earlier run's file, measured at
another time; on a shared machine the load of the moment moves figures more than many changes
do. This runs both versions side by side from one sim server and alternates them load by load
(before then after, the next round after then before), so that drift in the machine's load
falls on both alike, and reports each figure's median over the rounds.

The earlier commit is checked out with ``git worktree`` into ``benchmarks/scratch/ab/<commit>``
and started by this virtual environment with ``PYTHONPATH`` pointing at it (its own
``benchmarks.troupe_server``, model ``sim`` = the sim server over HTTP), so it must run on the
installed dependencies. Each side measures the app of ``troupe serve``'s default placement,
``replica`` (conversations hosted inside the ingress replica,
:data:`benchmarks.scenarios.MAIN_APP`), when its server offers it, else its ``pooled`` app (a
commit from before the ``replica`` app); the report says which app each side ran, and notes when
they differ. Each side's app is reached as its server says
(:meth:`benchmarks.targets.Lab.start_troupe`): at its replica's own port when the server prints
its URLs (direct ingress), through Serve's proxy for a server from before that. Loads: scenario 1
(streaming, every concurrency) and scenario 2 (non-streaming, every concurrency, store on and
off), as :mod:`benchmarks.scenarios` defines them. Writes
``benchmarks/results/<date>-<commit>-ab-<before>[-<only>][-<requests>].{json,md}`` (``--quick``: the scratch directory),
each side's ``app`` in the JSON's ``before`` and ``after``.

To bisect a change in one load, ``--after`` checks out a second commit the same way (instead of
this checkout), ``--only`` keeps the loads whose name contains the text given, and
``--requests`` measures that many requests per load and round (the defaults are short: 128 at
c=64, two bursts).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from typing import Any

from troupe.bench.machine import describe_machine, machine_info

from .measure import Ctx, idle_cores, log, measure
from .scenarios import MAIN_APP, Level, definitions
from .targets import ROOT, Lab, Target

__all__ = ["main", "summarize", "render"]

_SCRATCH = os.path.join(ROOT, "benchmarks", "scratch")
_APPS = (MAIN_APP, "pooled")
"""The app each side runs: the first of these its server offers (``troupe serve``'s default
placement, else pooled for a server from before the ``replica`` app)."""
_MEASURES = (  # (key, what, unit, better)
    ("ttft_p50", "TTFT p50", "ms", "lower"),
    ("e2e_p50", "E2E p50", "ms", "lower"),
    ("rps", "responses/s", "", "higher"),
    ("cpu", "server CPU per response", "ms", "lower"),
)


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def _worktree(ref: str) -> tuple[str, str]:
    """A checkout of ``ref`` under the scratch directory (made once); its path and short commit."""
    commit = _git("rev-parse", "--short", f"{ref}^{{commit}}")
    path = os.path.join(_SCRATCH, "ab", commit)
    if not os.path.isdir(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _git("worktree", "add", "--detach", path, commit)
    return path, commit


def _start_troupe(
    lab: Lab, name: str, checkout: str, sim_url: str, env: dict[str, str] | None = None
) -> tuple[Target, str]:
    """Start ``checkout``'s benchmark server; the target of the app measured (the first of
    :data:`_APPS` it offers) and that app's name."""
    if not os.path.isfile(os.path.join(checkout, "benchmarks", "troupe_server.py")):
        raise SystemExit(f"{checkout} has no benchmarks/troupe_server.py: pick a commit from after the benchmarks landed")
    lab.start_troupe(sim_url, name=name, checkout=checkout, env=env)
    for app in _APPS:
        if (target := lab.targets.get(f"{name}-{app}")) is not None:
            return target, app
    offered = sorted(t.removeprefix(f"{name}-") for t in lab.targets if t.startswith(f"{name}-"))
    raise SystemExit(f"{checkout}'s benchmark server offers none of {', '.join(_APPS)} (only {', '.join(offered)})")


def _figures(row: dict[str, Any]) -> dict[str, float | None]:
    summary = row["summary"]
    return {
        "ttft_p50": (summary.get("ttft_ms") or {}).get("p50"),
        "e2e_p50": (summary.get("e2e_ms") or {}).get("p50"),
        "rps": summary.get("throughput_rps"),
        "cpu": row.get("server_cpu_ms_per_response"),
    }


def summarize(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per load and measure: each side's values over the rounds, their medians, and the change.

    ``samples``: one dict per measurement, ``{"load", "side" ("before"|"after"), "round",
    "figures": {measure: value}}``. The change is after ÷ before − 1 of the medians.
    """
    rows = []
    for load in dict.fromkeys(s["load"] for s in samples):
        for key, what, unit, better in _MEASURES:
            values = {
                side: [v for s in samples if s["load"] == load and s["side"] == side
                       if (v := s["figures"].get(key)) is not None]
                for side in ("before", "after")
            }
            if not values["before"] or not values["after"]:
                continue
            before, after = statistics.median(values["before"]), statistics.median(values["after"])
            rows.append({
                "load": load, "measure": what, "unit": unit, "better": better,
                "before": round(before, 3), "after": round(after, 3),
                "change": round(after / before - 1, 4) if before else None,
                "before_rounds": values["before"], "after_rounds": values["after"],
            })
    return rows


def render(doc: dict[str, Any]) -> str:
    def num(v: float | None) -> str:
        return "–" if v is None else f"{v:,.1f}"

    def change(row: dict[str, Any]) -> str:
        c = row["change"]
        if c is None:
            return "–"
        good = (c < 0) == (row["better"] == "lower")
        return f"{c:+.0%}" + ("" if abs(c) < 0.005 else " (better)" if good else " (worse)")

    apps = {side: doc[side].get("app", "pooled") for side in ("before", "after")}  # older files: pooled
    lines = [
        f"# Troupe before/after, {doc['date']}: `{doc['before']['commit']}` → `{doc['after']['commit']}`",
        "",
        f"- Machine: {describe_machine(doc['machine'])}; load average at the end "
        + "/".join(f"{v:g}" for v in doc["load_average_end"]) + ".",
        f"- Reproduce: `{doc['command']}` ({doc['rounds']} rounds"
        + (f" after {doc['warmup_rounds']} not counted" if doc.get("warmup_rounds") else "")
        + f", {doc['seconds']:.0f} s).",
        f"- App measured: before `{apps['before']}`, after `{apps['after']}` (each side runs `{MAIN_APP}`, the "
        "placement `troupe serve` uses by default, when its benchmark server offers it, else `pooled`).",
        *([f"- After side's environment: {', '.join(f'`{k}={v}`' for k, v in doc['after']['env'].items())}."]
          if doc["after"].get("env") else []),
        "- Both versions ran at once, each on its own local Ray instance, in front of one "
        f"`troupe sim` server; each load ran on one then the other, the order alternating by round ({doc.get('first', 'before')} "
        "first in round 1). Figures are "
        "medians over the rounds (the values of each round follow); CPU is each version's process tree net of "
        "its use at rest. Change: after ÷ before − 1.",
        "",
        "| load | measure | before | after | change | before, per round | after, per round |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in doc["rows"]:
        unit = f" ({row['unit']})" if row["unit"] else ""
        lines.append(
            f"| {row['load']} | {row['measure']}{unit} | {num(row['before'])} | {num(row['after'])} | {change(row)} | "
            + ", ".join(num(v) for v in row["before_rounds"]) + " | "
            + ", ".join(num(v) for v in row["after_rounds"]) + " |"
        )
    for note in doc.get("notes", []):
        lines += ["", f"Note: {note}"]
    if doc.get("errors"):
        lines += ["", "Errors: " + "; ".join(doc["errors"])]
    return "\n".join(lines) + "\n"


def _loads(ctx: Ctx, only: str | None, requests: int | None) -> list[tuple[str, dict[str, Any], Level]]:
    """Each load's name, request body and level: scenario 1 and 2's, those whose name contains
    ``only`` (all when None), with ``requests`` measured requests each when given."""
    defs = ctx.defs
    loads: list[tuple[str, dict[str, Any], Level]] = [
        (f"1 streaming c={lv.concurrency}", {"input": defs.streaming_input, "stream": True}, lv)
        for lv in defs.streaming_levels
    ]
    for lv in defs.throughput_levels:
        for store in (True, False):
            body = {"input": defs.throughput_input, "stream": False, "store": store}
            loads.append((f"2 non-streaming c={lv.concurrency} store={'on' if store else 'off'}", body, lv))
    if only is not None:
        loads = [load for load in loads if only in load[0]]
        if not loads:
            raise SystemExit(f"no load's name contains {only!r}")
    if requests is not None:  # time enough for them: the cap is for runaway loads, not these
        loads = [(name, body, replace(lv, requests=requests, max_s=max(lv.max_s, requests / lv.concurrency * 5)))
                 for name, body, lv in loads]
    return loads


async def _rounds(
    ctx: Ctx, sides: dict[str, Target], rounds: int, first: str = "before",
    loads: list[tuple[str, dict[str, Any], Level]] | None = None, warmup_rounds: int = 0,
) -> tuple[list[dict[str, Any]], list[str]]:
    loads = loads if loads is not None else _loads(ctx, None, None)
    for w in range(warmup_rounds):  # measured, then dropped: what a side still does after it starts
        for load, body, level in loads:
            for side in (first, "after" if first == "before" else "before"):
                await measure(ctx, sides[side], body, level, label=f"warm-up {side} {load}")
        log(f"warm-up round {w + 1} of {warmup_rounds} done")
    samples, errors = [], []
    for r in range(rounds):
        second = "after" if first == "before" else "before"
        order = (first, second) if r % 2 == 0 else (second, first)
        for load, body, level in loads:
            for side in order:
                row = await measure(ctx, sides[side], body, level, label=f"{side} {load}")
                errs = row["summary"]["error_count"]
                if errs:
                    errors.append(f"{side} {load} round {r + 1}: {errs} errors")
                samples.append({"load": load, "side": side, "round": r + 1, "figures": _figures(row)})
        log(f"round {r + 1} of {rounds} done")
    return samples, errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the earlier git commit or ref to compare with")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every load on both (default 3)")
    parser.add_argument("--quick", action="store_true", help="small counts (a smoke test); results to scratch")
    parser.add_argument("--out-dir", help="where results go (default: benchmarks/results, or scratch with --quick)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--after", help="a second git commit or ref to run as the after side (default: this checkout)")
    parser.add_argument("--only", help="only the loads whose name contains this text, e.g. \"1 streaming c=64\"")
    parser.add_argument("--requests", type=int, help="measured requests per load and round (default: the scenario's)")
    parser.add_argument("--warmup-rounds", type=int, default=0,
                        help="rounds run first and not counted (default 0): a side that is still "
                             "starting (processes, first collections) weighs on its first round")
    parser.add_argument("--first", choices=("before", "after"), default="before",
                        help="the side each load runs on first in odd rounds (default before): a "
                             "difference that follows the order, not the side, is the harness's")
    parser.add_argument("--after-env", action="append", default=[], metavar="NAME=VALUE",
                        help="set in the after side's environment (repeatable): with --before HEAD, "
                             "measures a setting such as MALLOC_ARENA_MAX=2 against none")
    args = parser.parse_args(argv)
    after_env = dict(item.split("=", 1) for item in args.after_env if "=" in item)
    if len(after_env) != len(args.after_env):
        parser.error("--after-env takes NAME=VALUE")
    # SIGTERM unwinds like Ctrl-C, so the servers started below are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    started = time.perf_counter()
    machine = machine_info()  # its load average is the one at the start
    before_path, before_commit = _worktree(args.before)
    if args.after is not None:
        after_path, after_commit = _worktree(args.after)
    else:
        after_path = ROOT
        after_commit = _git("rev-parse", "--short", "HEAD") + ("-dirty" if _git("status", "--porcelain", "--untracked-files=no") else "")
    out_dir = args.out_dir or (os.path.join(_SCRATCH, "results") if args.quick else os.path.join(ROOT, "benchmarks", "results"))
    scratch = os.path.join(_SCRATCH, "ab-run")
    with Lab(scratch=scratch, peers=False) as lab:
        log("starting the sim server and both versions of Troupe")
        sim = lab.start_sim()
        started_sides = {
            "before": _start_troupe(lab, "troupe-before", before_path, sim.base_url),
            "after": _start_troupe(lab, "troupe-after", after_path, sim.base_url, after_env),
        }
        sides = {side: target for side, (target, _) in started_sides.items()}
        apps = {side: app for side, (_, app) in started_sides.items()}
        log(f"measuring app {apps['before']!r} before, {apps['after']!r} after")
        ctx = Ctx(lab=lab, defs=definitions(quick=args.quick), progress=not args.quiet)
        loads = _loads(ctx, args.only, args.requests)
        idle_cores(ctx)
        samples, errors = asyncio.run(_rounds(ctx, sides, args.rounds, args.first, loads, args.warmup_rounds))
    doc = {
        "date": time.strftime("%Y-%m-%d"),
        "before": {"ref": args.before, "commit": before_commit, "app": apps["before"]},
        "after": {"ref": args.after, "commit": after_commit, "app": apps["after"], "env": after_env},
        "rounds": args.rounds,
        "warmup_rounds": args.warmup_rounds,
        "first": args.first,
        "quick": args.quick,
        "machine": machine,
        "load_average_end": [round(v, 2) for v in os.getloadavg()],
        "idle_cpu_cores": ctx.idle_cores,
        "command": "python -m benchmarks.ab " + " ".join(argv if argv is not None else sys.argv[1:]),
        "seconds": round(time.perf_counter() - started, 1),
        "samples": samples,
        "rows": summarize(samples),
        "errors": errors,
    }
    if apps["before"] != apps["after"]:
        doc["notes"] = [f"the two sides ran different apps (before `{apps['before']}`, after `{apps['after']}`): "
                        "the change includes that of the placement, not only of the code."]
    os.makedirs(out_dir, exist_ok=True)
    parts = (args.only, args.requests, *args.after_env)
    subset = "".join(f"-{re.sub(r'[^a-z0-9]+', '-', str(part).lower()).strip('-')}" for part in parts if part)
    stem = os.path.join(out_dir, f"{doc['date']}-{after_commit}-ab-{before_commit}{subset}")
    with open(stem + ".json", "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
    with open(stem + ".md", "w", encoding="utf-8") as f:
        f.write(render(doc))
    log(f"wrote {stem}.json, {stem}.md")
    print(render(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
