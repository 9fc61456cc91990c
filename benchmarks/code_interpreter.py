"""The ``code_interpreter`` tool against a real ``troupe serve``: what a run of code costs.

    .venv/bin/python -m benchmarks.code_interpreter            # about 5 minutes on 2 cores
    .venv/bin/python -m benchmarks.code_interpreter --quick    # a smoke test, results to scratch

Starts ``troupe serve`` on its embedded defaults (:class:`benchmarks.load.ServeLab`: a fresh
local Ray instance, a free port of 127.0.0.1, a fresh DuckDB file under
``benchmarks/scratch/``), drives it with the ``openai`` SDK as a client would, and stops it
(SIGTERM to its process group; never ``ray stop``). Three parts:

1. **Warm ``print(1)`` overhead.** One container (``client.containers.create``), warmed by a
   few runs; then, one request at a time, rounds of three non-streamed requests, the order
   rotating by round, all offering the same tools list ``[{"type": "code_interpreter",
   "container": ID}]`` (so the container check is in every one):

   * ``plain``: ``[[say 1]]``, the sim answers ``1`` in one model turn: the baseline, the same
     request with the same answer and no tool call;
   * ``calculator``: ``[[call calculator {"expression": "1"}]]``, a registered tool call, two
     model turns (the loop's cost of any tool round, without a sandbox);
   * ``print1``: ``[[python]]print(1)[[/python]]``: two model turns and the run in the sandbox.

   ``print1 − plain`` is what the call costs a client (the target: at most +50 ms at p50);
   ``print1 − calculator`` is the sandbox's share of it. Then the same three streamed: the time
   to the answer's first ``response.output_text.delta`` (after the run, for ``print1``).
2. **A new container's first run.** For each of N containers: ``containers.create``, then the
   ``print1`` request (its first run: the actor and the sandbox start), then the same request
   again (warm), then ``containers.delete``. Reported: the create, the first request, create +
   first request, and first − warm (the start's own cost). The target: create + first request
   p50 ≤ 1 s, p95 ≤ 2 s.
3. **8 CPU-bound containers at once.** The TTFT of plain streamed requests (``[[tokens 16]]``, no
   tools, 10 a second on a fixed schedule from 4 workers: a steady low rate, far below what the
   server can take, so the TTFT is the server's latency, not its queue) on the idle server for a while; then 8 warmed containers
   each run a pure-Python loop (about CPU_S seconds of one core, calibrated in a container
   first) through 8 concurrent non-streamed requests, while the same plain load runs. Reported:
   each run's wall time and status, the plain TTFT idle vs under the load, and the nice value of
   the sandbox processes seen during the load (they run at nice 10).

Writes ``benchmarks/results/code_interpreter/<date>-<commit>-code-interpreter.{json,md}``
(``--quick``: ``benchmarks/scratch/results/code_interpreter/``) with the machine, its load and
the commit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from troupe.bench.machine import describe_machine, machine_info
from troupe.bench.stats import percentile

from .load import ServeLab
from .measure import log
from .run import _git, _load_average
from .targets import ROOT

__all__ = ["main", "render"]

SCHEMA = "troupe-code-interpreter/1"
SCRATCH = os.path.join(ROOT, "benchmarks", "scratch")
PLAIN = "[[say 1]]"
CALCULATOR = '[[call calculator {"expression": "1"}]]'
PRINT1 = "[[python]]print(1)[[/python]]"
LOAD_INPUT = "[[tokens 16]]"
CALIBRATE = (
    "import time\nt = time.process_time()\nn = 0\nfor i in range(3_000_000):\n    n += i\n"
    "print(round(3_000_000 / (time.process_time() - t)))"
)
TARGETS = {"warm_overhead_p50_ms": 50.0, "new_container_p50_ms": 1000.0, "new_container_p95_ms": 2000.0}


def cpu_loop(iterations: int) -> str:
    """A pure-Python loop of ITERATIONS additions that prints its CPU time."""
    return (f"[[python]]import time\nt = time.process_time()\nn = 0\nfor i in range({iterations}):\n    n += i\n"
            f"print(f'cpu {{time.process_time() - t:.2f}} s')[[/python]]")  # fmt: skip


def stats(values: list[float]) -> dict[str, Any] | None:
    """count, mean, min, p50, p95, max (ms, rounded) of VALUES (ms)."""
    if not values:
        return None
    return {"count": len(values), "mean": round(sum(values) / len(values), 1), "min": round(min(values), 1),
            "p50": round(percentile(values, 50), 1), "p95": round(percentile(values, 95), 1),
            "max": round(max(values), 1)}  # fmt: skip


def _tools(container: str) -> list[dict[str, Any]]:
    return [{"type": "code_interpreter", "container": container}]


def _text(response: Any) -> str:
    return "".join(part.text for item in response.output if item.type == "message"
                   for part in item.content if part.type == "output_text")  # fmt: skip


async def timed(client: Any, text: str, container: str | None, expect: str | None = None,
                answer: list[str] | None = None) -> tuple[float, str]:
    """One non-streamed request; (ms, "" or what was wrong). Its answer's text is appended to
    ANSWER when given."""
    body: dict[str, Any] = {"model": "sim", "input": text}
    if container is not None:
        body["tools"] = _tools(container)
    begun = time.perf_counter()
    try:
        response = await client.responses.create(**body)
    except Exception as exc:  # noqa: BLE001 - a failed request is a result
        return (time.perf_counter() - begun) * 1000, f"{type(exc).__name__}: {exc}"[:300]
    ms = (time.perf_counter() - begun) * 1000
    if answer is not None:
        answer.append(_text(response))
    wrong = "" if response.status == "completed" else f"status {response.status}"
    calls = [item for item in response.output if item.type == "code_interpreter_call"]
    if any(call.status != "completed" for call in calls):
        wrong = wrong or f"call status {[call.status for call in calls]}"
    if expect is not None and expect not in _text(response):
        wrong = wrong or f"answer {_text(response)[:120]!r}"
    return ms, wrong


async def ttft(client: Any, text: str, container: str | None) -> tuple[float | None, str]:
    """One streamed request; (ms to the first response.output_text.delta, "" or what was wrong)."""
    body: dict[str, Any] = {"model": "sim", "input": text, "stream": True}
    if container is not None:
        body["tools"] = _tools(container)
    begun = time.perf_counter()
    first: float | None = None
    status = None
    try:
        stream = await client.responses.create(**body)
        async for event in stream:
            if first is None and event.type == "response.output_text.delta":
                first = (time.perf_counter() - begun) * 1000
            elif event.type in ("response.completed", "response.failed", "response.incomplete"):
                status = event.response.status
    except Exception as exc:  # noqa: BLE001
        return first, f"{type(exc).__name__}: {exc}"[:300]
    return first, "" if status == "completed" and first is not None else f"status {status}, first delta {first}"


def _errors(kind: str, wrong: list[str]) -> list[str]:
    return [f"{kind}: {w}" for w in wrong if w][:10]


async def warm_overhead(client: Any, args: argparse.Namespace) -> dict[str, Any]:
    box = await client.containers.create(name="bench-warm")
    errors: list[str] = []
    try:
        for _ in range(3):
            _, wrong = await timed(client, PRINT1, box.id, "1")
            errors += _errors("warm-up", [wrong])
        for text in (PLAIN, CALCULATOR):
            await timed(client, text, box.id)
        kinds = {"plain": (PLAIN, "1"), "calculator": (CALCULATOR, "1"), "print1": (PRINT1, "1")}
        e2e: dict[str, list[float]] = {k: [] for k in kinds}
        first: dict[str, list[float]] = {k: [] for k in kinds}
        order = list(kinds)
        for r in range(args.rounds):
            for kind in order[r % 3:] + order[: r % 3]:
                ms, wrong = await timed(client, kinds[kind][0], box.id, kinds[kind][1])
                e2e[kind].append(ms)
                errors += _errors(kind, [wrong])
        for r in range(args.stream_rounds):
            for kind in order[r % 3:] + order[: r % 3]:
                first_ms, wrong = await ttft(client, kinds[kind][0], box.id)
                if first_ms is not None:
                    first[kind].append(first_ms)
                errors += _errors(f"{kind} streamed", [wrong])
    finally:
        await client.containers.delete(box.id)
    out: dict[str, Any] = {"container": box.id, "rounds": args.rounds, "stream_rounds": args.stream_rounds,
                           "e2e_ms": {k: stats(v) for k, v in e2e.items()},
                           "ttft_ms": {k: stats(v) for k, v in first.items()},
                           "samples": {"e2e_ms": e2e, "ttft_ms": first}, "errors": errors}  # fmt: skip
    for what in ("e2e_ms", "ttft_ms"):
        s = out[what]
        if s["plain"] and s["print1"] and s["calculator"]:
            out[f"{what}_diff"] = {
                f"print1-plain_{p}": round(s["print1"][p] - s["plain"][p], 1) for p in ("p50", "p95")
            } | {f"print1-calculator_{p}": round(s["print1"][p] - s["calculator"][p], 1) for p in ("p50", "p95")}
    return out


async def new_containers(client: Any, args: argparse.Namespace) -> dict[str, Any]:
    create, first, warm, total, start = [], [], [], [], []
    errors: list[str] = []
    for i in range(args.containers):
        begun = time.perf_counter()
        box = await client.containers.create(name=f"bench-new-{i}")
        made = (time.perf_counter() - begun) * 1000
        try:
            first_ms, wrong = await timed(client, PRINT1, box.id, "1")
            warm_ms, wrong2 = await timed(client, PRINT1, box.id, "1")
        finally:
            await client.containers.delete(box.id)
        errors += _errors(f"container {i} first", [wrong]) + _errors(f"container {i} warm", [wrong2])
        create.append(made)
        first.append(first_ms)
        warm.append(warm_ms)
        total.append(made + first_ms)
        start.append(first_ms - warm_ms)
        log(f"container {i}: create {made:.0f} ms, first print(1) {first_ms:.0f} ms, warm {warm_ms:.0f} ms")
        await asyncio.sleep(0.5)  # the deleted container's actor ends before the next starts
    return {"containers": args.containers,
            "create_ms": stats(create), "first_request_ms": stats(first), "warm_request_ms": stats(warm),
            "create_plus_first_ms": stats(total), "first_minus_warm_ms": stats(start),
            "samples": {"create_ms": create, "first_request_ms": first, "warm_request_ms": warm}, "errors": errors}  # fmt: skip


async def plain_load(client: Any, stop: asyncio.Event, in_flight: int,
                     rate: float) -> tuple[list[tuple[float, float]], list[str]]:
    """Streamed plain requests until STOP, RATE a second in all from IN_FLIGHT workers (each
    starts one every IN_FLIGHT / RATE seconds, on a fixed schedule, or at once when late): their
    (start time, TTFT ms) and errors."""
    firsts: list[tuple[float, float]] = []
    errors: list[str] = []
    period = in_flight / rate

    async def worker(w: int) -> None:
        due = time.perf_counter() + w * period / in_flight
        while not stop.is_set():
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            due += period
            begun = time.perf_counter()
            first_ms, wrong = await ttft(client, LOAD_INPUT, None)
            if first_ms is not None:
                firsts.append((begun, first_ms))
            if wrong:
                errors.append(wrong)

    await asyncio.gather(*(worker(w) for w in range(in_flight)))
    return firsts, errors[:10]


def _sandbox_nice(lab: ServeLab) -> list[dict[str, Any]]:
    """The processes of the server's tree at a nice above 0 (the sandboxes), with their nice."""
    found: list[dict[str, Any]] = []
    if lab.serve is None:
        return found
    for proc in lab.serve.processes():
        with contextlib.suppress(psutil.Error):
            if proc.nice() > 0:
                times = proc.cpu_times()
                found.append({"pid": proc.pid, "name": proc.name(), "nice": proc.nice(),
                              "cpu_s": round(times.user + times.system, 2)})
    return found


async def cpu_bound(client: Any, lab: ServeLab, args: argparse.Namespace) -> dict[str, Any]:
    boxes = [await client.containers.create(name=f"bench-cpu-{i}") for i in range(args.cpu_containers)]
    try:
        for box in boxes:  # warm: the runs measure CPU contention, not starts
            await timed(client, PRINT1, box.id, "1")
        response = await client.responses.create(model="sim", input=f"[[python]]{CALIBRATE}[[/python]]",
                                                 tools=_tools(boxes[0].id))
        rate = int(_text(response).strip().split()[0])
        iterations = int(rate * args.cpu_s)
        log(f"calibrated: {rate} additions/s alone in a container; {iterations} for about {args.cpu_s:g} s")

        stop = asyncio.Event()
        idle_task = asyncio.create_task(plain_load(client, stop, args.in_flight, args.rate))
        await asyncio.sleep(args.idle_s)
        stop.set()
        idle_timed, idle_errors = await idle_task
        idle = [ms for _, ms in idle_timed]
        log(f"idle: {len(idle)} plain requests, TTFT p50 {(stats(idle) or {}).get('p50')} ms")

        stop = asyncio.Event()
        load_task = asyncio.create_task(plain_load(client, stop, args.in_flight, args.rate))
        await asyncio.sleep(1.0)
        code = cpu_loop(iterations)

        async def run(box: Any) -> dict[str, Any]:
            answer: list[str] = []
            ms, wrong = await timed(client, code, box.id, "cpu ", answer)
            ended.append(time.perf_counter())
            cpu_s = answer[0].split()[1] if answer and answer[0].startswith("cpu ") else None
            return {"container": box.id, "wall_ms": round(ms, 1), "ok": not wrong, "error": wrong or None,
                    "cpu_s": None if cpu_s is None else float(cpu_s)}

        ended: list[float] = []

        begun = time.perf_counter()
        runs_task = asyncio.gather(*(run(box) for box in boxes))
        nice: list[dict[str, Any]] = []
        while not runs_task.done():
            await asyncio.sleep(2.0)
            if not nice:
                nice = _sandbox_nice(lab)
        runs = await runs_task
        wall = (max(ended) - begun) * 1000
        stop.set()
        loaded_timed, loaded_errors = await load_task
        loaded = [ms for at, ms in loaded_timed if begun <= at <= min(ended)]  # every run running
        loaded_any = [ms for at, ms in loaded_timed if begun <= at <= max(ended)]  # any run running
        log(f"{len(boxes)} CPU runs done in {wall / 1000:.1f} s; loaded: {len(loaded)} plain requests, "
            f"TTFT p50 {(stats(loaded) or {}).get('p50')} ms (all running)")
    finally:
        for box in boxes:
            with contextlib.suppress(Exception):
                await client.containers.delete(box.id)
    return {"containers": len(boxes), "cpu_s_each": args.cpu_s, "iterations": iterations, "rate_per_s": rate,
            "runs": runs, "all_completed": all(r["ok"] for r in runs), "runs_wall_ms": round(wall, 1),
            "in_flight": args.in_flight, "rate_per_s_plain": args.rate, "idle_s": args.idle_s,
            "ttft_idle_ms": stats(idle), "ttft_loaded_ms": stats(loaded),
            "ttft_loaded_any_ms": stats(loaded_any), "all_running_s": round(min(ended) - begun, 1),
            "errors_idle": idle_errors, "errors_loaded": loaded_errors, "sandbox_processes_niced": nice,
            "samples": {"ttft_idle_ms": idle, "ttft_loaded_ms": loaded, "ttft_loaded_any_ms": loaded_any}}  # fmt: skip


async def measure(lab: ServeLab, args: argparse.Namespace) -> dict[str, Any]:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=lab.base_url, api_key="unused", max_retries=0, timeout=300)
    try:
        for _ in range(5):  # warm the server's first-use paths
            await timed(client, PLAIN, None)
            await timed(client, CALCULATOR, None)
        log("1: warm print(1) against a plain answer and a calculator call")
        warm = await warm_overhead(client, args)
        log(f"   e2e p50: plain {warm['e2e_ms']['plain']['p50']} ms, calculator {warm['e2e_ms']['calculator']['p50']} "
            f"ms, print1 {warm['e2e_ms']['print1']['p50']} ms")
        log("2: a new container's first run")
        new = await new_containers(client, args)
        log("3: 8 CPU-bound containers at once, plain TTFT beside them")
        cpu = await cpu_bound(client, lab, args)
    finally:
        await client.close()
    return {"warm_print1": warm, "new_container": new, "cpu_bound": cpu}


def verdicts(result: dict[str, Any]) -> list[dict[str, Any]]:
    warm = result["warm_print1"].get("e2e_ms_diff") or {}
    new = result["new_container"]["create_plus_first_ms"] or {}
    cpu = result["cpu_bound"]
    rows = [
        ("warm print(1) − plain answer, p50 (ms)", warm.get("print1-plain_p50"), TARGETS["warm_overhead_p50_ms"]),
        ("new container: create + first print(1), p50 (ms)", new.get("p50"), TARGETS["new_container_p50_ms"]),
        ("new container: create + first print(1), p95 (ms)", new.get("p95"), TARGETS["new_container_p95_ms"]),
    ]
    out = [{"target": name, "value": value, "bound": bound, "met": value is not None and value <= bound}
           for name, value, bound in rows]  # fmt: skip
    out.append({"target": f"{len(cpu['runs'])} CPU-bound runs at once all complete", "value": sum(r["ok"] for r in cpu["runs"]),
                "bound": len(cpu["runs"]), "met": cpu["all_completed"]})
    return out


def _row(name: str, s: dict[str, Any] | None) -> str:
    if not s:
        return f"| {name} | – | – | – | – | – |"
    return f"| {name} | {s['count']} | {s['p50']} | {s['p95']} | {s['min']} | {s['max']} |"


def render(doc: dict[str, Any]) -> str:
    r = doc["result"]
    warm, new, cpu = r["warm_print1"], r["new_container"], r["cpu_bound"]
    head = "| | n | p50 ms | p95 ms | min | max |\n|---|---|---|---|---|---|"
    lines = [
        f"# code_interpreter on `troupe serve` — {doc['commit']}{' (dirty)' if doc['worktree_dirty'] else ''}",
        "",
        f"{doc['created_at']}, `{doc['command']}`{' (QUICK: smoke test)' if doc['quick'] else ''}.",
        f"Machine: {describe_machine(doc['machine'])}; load average after the run "
        f"{'/'.join(f'{v:g}' for v in doc['machine'].get('load_average_after_run') or [])}.",
        f"Server: {doc['server']['how']} (started in {doc['server']['start_s']} s).",
        "",
        "## Targets",
        "",
        "| target | value | bound | met |",
        "|---|---|---|---|",
        *(f"| {v['target']} | {v['value']} | ≤ {v['bound']} | {'yes' if v['met'] else '**no**'} |"
          if "runs" not in v["target"] else f"| {v['target']} | {v['value']} of {v['bound']} | all | "
          f"{'yes' if v['met'] else '**no**'} |" for v in doc["verdicts"]),
        "",
        "## 1. Warm `print(1)`",
        "",
        f"One warmed container, {warm['rounds']} rounds of three non-streamed requests one at a time (order rotating),"
        " each offering the same `code_interpreter` tool with the container's id: `plain` `[[say 1]]` (one model"
        " turn, the baseline: the same answer, no call), `calculator` (a registered tool call: two model turns, no"
        " sandbox), `print1` `[[python]]print(1)[[/python]]` (two model turns and the run).",
        "",
        head,
        *(_row(f"{k} e2e", s) for k, s in warm["e2e_ms"].items()),
        *(_row(f"{k} streamed, TTFT (first output_text delta)", s) for k, s in warm["ttft_ms"].items()),
        "",
        "Differences (ms): " + ", ".join(f"e2e {k} {v:+g}" for k, v in (warm.get("e2e_ms_diff") or {}).items())
        + "; " + ", ".join(f"TTFT {k} {v:+g}" for k, v in (warm.get("ttft_ms_diff") or {}).items()) + ".",
        "",
        "## 2. A new container's first run",
        "",
        f"{new['containers']} containers one after another: create, the `print1` request (first run), the same again"
        " (warm), delete.",
        "",
        head,
        _row("containers.create", new["create_ms"]),
        _row("first print1 request", new["first_request_ms"]),
        _row("create + first request", new["create_plus_first_ms"]),
        _row("warm print1 request (same container)", new["warm_request_ms"]),
        _row("first − warm (the start's own cost)", new["first_minus_warm_ms"]),
        "",
        f"## 3. {cpu['containers']} CPU-bound containers at once",
        "",
        f"{cpu['containers']} warmed containers each run a pure-Python loop of {cpu['iterations']:,} additions (about"
        f" {cpu['cpu_s_each']:g} s of one core alone, calibrated at {cpu['rate_per_s']:,}/s) through"
        f" {cpu['containers']} concurrent requests; all done in {cpu['runs_wall_ms'] / 1000:.1f} s. Plain streamed"
        f" requests (`{LOAD_INPUT}`, no tools, {cpu['rate_per_s_plain']:g}/s on a fixed schedule from {cpu['in_flight']} workers) ran for {cpu['idle_s']:g} s on the idle"
        " server first, then throughout the CPU runs (the TTFTs are of the requests started while all of them,"
        f" the first {cpu['all_running_s']:g} s, and while any of them ran).",
        "",
        "| container | wall s | CPU s of the loop | status |",
        "|---|---|---|---|",
        *(f"| {run['container']} | {run['wall_ms'] / 1000:.1f} | {run.get('cpu_s', '–')} |"
          f" {'completed' if run['ok'] else run['error']} |"
          for run in cpu["runs"]),
        "",
        head,
        _row("plain TTFT, idle server", cpu["ttft_idle_ms"]),
        _row(f"plain TTFT, while all {cpu['containers']} CPU runs run", cpu["ttft_loaded_ms"]),
        _row("plain TTFT, while any CPU run runs", cpu["ttft_loaded_any_ms"]),
        "",
        "Sandbox processes seen at a nice above 0 during the runs: "
        + (", ".join(sorted({f"{p['name']} (nice {p['nice']})" for p in cpu["sandbox_processes_niced"]})) or "none")
        + f" ({len(cpu['sandbox_processes_niced'])} processes).",
        "",
    ]
    errors = warm["errors"] + new["errors"] + cpu["errors_idle"] + cpu["errors_loaded"]
    lines += ["## Errors", "", *(f"- {e}" for e in errors)] if errors else ["No request failed.", ""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke test: few requests, results to scratch")
    parser.add_argument("--rounds", type=int, default=60, help="part 1: rounds of plain, calculator, print1")
    parser.add_argument("--stream-rounds", type=int, default=30, help="part 1: streamed rounds")
    parser.add_argument("--containers", type=int, default=20, help="part 2: new containers")
    parser.add_argument("--cpu-containers", type=int, default=8)
    parser.add_argument("--cpu-s", type=float, default=6.0, help="part 3: CPU seconds of each run, alone")
    parser.add_argument("--in-flight", type=int, default=4, help="part 3: plain requests in flight")
    parser.add_argument("--rate", type=float, default=10.0, help="part 3: plain requests a second")
    parser.add_argument("--idle-s", type=float, default=15.0, help="part 3: the idle plain load's duration")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.stream_rounds, args.containers, args.cpu_containers = 5, 3, 3, 2
        args.cpu_s, args.idle_s = 1.0, 3.0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds, so the server is stopped
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "created_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "commit": commit,
        "worktree_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "quick": args.quick,
        "machine": machine_info(),
        "command": " ".join([".venv/bin/python -m benchmarks.code_interpreter", *argv]),
        "params": {k: v for k, v in vars(args).items()},
        "targets": TARGETS,
    }
    log(describe_machine(doc["machine"]))
    lab = ServeLab(scratch=os.path.join(SCRATCH, "code_interpreter"), peers=False)
    try:
        log("starting troupe serve (a fresh local Ray instance, the embedded defaults)")
        begun = time.perf_counter()
        lab.start_serve(name="troupe-serve-ci")
        doc["server"] = {"how": "troupe serve on its embedded defaults (as `make run`), on a free port of 127.0.0.1, "
                                "TROUPE_STORAGE_PATH a fresh file",
                         "start_s": round(time.perf_counter() - begun, 1),
                         "log": os.path.relpath(lab.serve.log_path, ROOT) if lab.serve else None}  # fmt: skip
        lab.remember_tree()
        doc["result"] = asyncio.run(measure(lab, args))
    finally:
        log("stopping the server")
        lab.close()
    doc["server"]["leftover_processes_after_stop"] = lab.leftovers
    doc["machine"]["load_average_after_run"] = _load_average()
    doc["verdicts"] = verdicts(doc["result"])
    out_dir = Path(SCRATCH if args.quick else os.path.join(ROOT, "benchmarks", "results"))
    out_dir = out_dir / ("results/code_interpreter" if args.quick else "code_interpreter")
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{datetime.date.today().isoformat()}-{commit}-code-interpreter"
    Path(f"{stem}.json").write_text(json.dumps(doc, indent=2) + "\n")
    Path(f"{stem}.md").write_text(render(doc))
    log(f"wrote {os.path.relpath(stem, ROOT)}.{{json,md}}")
    for v in doc["verdicts"]:
        log(f"{v['target']}: {v['value']} (bound {v['bound']}) {'met' if v['met'] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
