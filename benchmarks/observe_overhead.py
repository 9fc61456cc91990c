"""What observing costs: Troupe with its metrics on (traces off, the default) against the same
build with ``[telemetry] metrics = false``, side by side.

    .venv/bin/python -m benchmarks.observe_overhead              # 3 rounds, about 8 minutes on 2 cores
    .venv/bin/python -m benchmarks.observe_overhead --rounds 1 --quick   # a smoke test, results to scratch

Both sides are this checkout's benchmark server (:mod:`benchmarks.troupe_server`) with only its
``replica`` app (``troupe serve``'s default placement), each on its own local Ray instance, in
front of one ``troupe sim`` server; they differ only in ``--telemetry``. The loads, their
alternation by round and the medians are :mod:`benchmarks.ab`'s (scenario 1 streaming, scenario
2 non-streaming store on and off). Traces stay off on both: with traces off the OpenTelemetry SDK
is never imported, so "tracing with its exporter off" costs what the ``None`` check per turn
costs, which the metrics side includes. Writes
``benchmarks/results/observe/<date>-<commit>-observe.{json,md}`` with the machine and the commit
(``--quick``: the scratch directory).

Throughput on a shared 2-core machine moves by more than 2 % from one minute to the next, so
the run also measures the cost where it is spent, without the noise of the network and of Ray:
**in process**, three ``Runtime.local`` runtimes (in-memory store, the in-process ``sim``),
metrics off, on, and off again (a control: what two identical runtimes differ by), take turns in
blocks of responses in this one process, and the CPU time (``time.process_time``) per response
of each is compared, for a plain answer, a 64-token stream and a tool loop; and the observation
layer alone, the calls a host makes per response in a tight loop (``--in-process-only`` runs only
these, in a few minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import time
from typing import Any

from troupe.bench.machine import describe_machine, machine_info

from .ab import _SCRATCH, _git, _rounds, summarize
from .measure import Ctx, idle_cores, log
from .scenarios import MAIN_APP, definitions
from .targets import ROOT, Lab

__all__ = ["main", "render", "SIDES"]

SIDES = {"before": {"metrics": False}, "after": {"metrics": True}}
"""Each side's ``[telemetry]``: ``before`` has nothing observed, ``after`` is the default."""
BOUND = 0.02
"""Observing may cost at most this share of throughput (responses/s)."""


IN_PROCESS_LOADS = {
    "non-streaming, 16 tokens": ({"input": "[[tokens 16]]"}, False),
    "streaming, 64 tokens": ({"input": "[[tokens 64]]"}, True),
    "tool loop (calculator)": ({"input": '[[call calculator {"expression": "6 * 7"}]]'}, False),
}


async def in_process(*, blocks: int, per_block: int) -> list[dict[str, Any]]:
    """CPU ms per response, metrics off and on, each load's blocks alternating between the two."""
    from troupe.protocol import parse_create_request
    from troupe.runtime.facade import Runtime
    from troupe.runtime.settings import RuntimeSettings, TelemetrySettings

    # "control" is a second runtime with metrics off: on ÷ off − 1 means something only beside
    # control ÷ off − 1, what two identical runtimes differ by in the same process and blocks.
    sides = {"before": SIDES["before"], "control": SIDES["before"], "after": SIDES["after"]}
    runtimes = {
        side: Runtime.local(RuntimeSettings(storage_path=":memory:", telemetry=TelemetrySettings(**telemetry)))
        for side, telemetry in sides.items()
    }

    async def one(runtime: Runtime, body: dict[str, Any], stream: bool) -> None:
        request = parse_create_request({"model": "sim", **body, "stream": stream})
        if stream:
            async for _ in await runtime.stream("", request):
                pass
        else:
            await runtime.respond("", request)

    rows = []
    try:
        for load, (body, stream) in IN_PROCESS_LOADS.items():
            for runtime in runtimes.values():  # warm: imports, first-use allocations
                for _ in range(20):
                    await one(runtime, body, stream)
            cpu: dict[str, list[float]] = {side: [] for side in runtimes}
            for block in range(blocks):
                order = list(runtimes)[block % 3 :] + list(runtimes)[: block % 3]  # each side first in turn
                for side in order:
                    begun = time.process_time()
                    for _ in range(per_block):
                        await one(runtimes[side], body, stream)
                    cpu[side].append((time.process_time() - begun) / per_block * 1000)
            off, on = statistics.median(cpu["before"]), statistics.median(cpu["after"])
            control = statistics.median(cpu["control"])
            rows.append({"load": load, "cpu_ms_off": round(off, 4), "cpu_ms_on": round(on, 4),
                         "change": round(on / off - 1, 4), "cpu_ms_control": round(control, 4),
                         "control_change": round(control / off - 1, 4), "off_blocks": cpu["before"],
                         "on_blocks": cpu["after"], "control_blocks": cpu["control"]})  # fmt: skip
            log(f"in process, {load}: {off:.3f} ms off, {on:.3f} ms on ({on / off - 1:+.1%}), "
                f"{control:.3f} ms off again ({control / off - 1:+.1%})")
    finally:
        for runtime in runtimes.values():
            await runtime.close()
    return rows


def layer_cost(n: int = 20_000) -> dict[str, float]:
    """The observation layer's own CPU per response, in microseconds, metrics on (no Ray export
    thread, no traces, no hooks), for the events of a plain answer and of a two-tool loop: what
    the host calls, with real events, in a tight loop. Precise where the runs above are not."""
    from troupe.agentloop.events import StepStarted, StepTraced
    from troupe.observe import Observer
    from troupe.observe.settings import TelemetrySettings
    from troupe.protocol import parse_create_request
    from troupe.protocol.job import TurnJob

    observer = Observer(TelemetrySettings(), host="bench")
    job = TurnJob(tenant="", request=parse_create_request({"model": "sim", "input": "x"}), response_id="resp_x",
                  created_at=0, thread_id="t")  # fmt: skip
    model = (StepStarted(kind="model", name="sim", started_at=1.0),
             StepTraced(kind="model", name="sim", started_at=1.0, ended_at=1.1, ttft_s=0.01, output_tokens=16))
    tool = (StepStarted(kind="tool", name="sleep", started_at=1.0, call_id="c", arguments="{}"),
            StepTraced(kind="tool", name="sleep", started_at=1.0, ended_at=1.2, call_id="c", output="ok"))
    response = {"status": "completed", "output": [{"type": "message"}], "usage": {"output_tokens": 32, "input_tokens": 9}}
    shapes = {"plain answer (1 model call)": [model], "tool loop (2 model calls, 2 tools)": [model, tool, tool, model]}
    out = {}
    for shape, steps in shapes.items():
        begun = time.process_time()
        for _ in range(n):
            obs = observer.turn(job, started=1.0)
            assert obs is not None
            obs.accepted([{"type": "message"}])
            for started, ended in steps:
                obs.step_started(started)
                obs.step_ended(ended)
            obs.wrote("write_response", 1.0, 1.01)
            observer.cache(hit=True)
            obs.finished(response, 0.01)
        out[shape] = round((time.process_time() - begun) / n * 1e6, 2)
    return out


def _in_process_lines(doc: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    if doc.get("in_process"):
        lines += [
            "", "## In process: CPU per response", "",
            "Three `Runtime.local` runtimes (in-memory store, in-process `sim`, no Ray): metrics off, metrics on, "
            "and a control with metrics off again, in blocks taking turns in one process; `time.process_time()` "
            "per response, median over the blocks. The control's change is what two identical runtimes differ by "
            "here: the noise floor of the on/off change.", "",
            "| load | off (ms CPU) | on (ms CPU) | on vs off | control, off again (ms CPU) | control vs off |",
            "|---|---|---|---|---|---|",
        ]
        for row in doc["in_process"]:
            lines.append(f"| {row['load']} | {row['cpu_ms_off']:.3f} | {row['cpu_ms_on']:.3f} | {row['change']:+.1%} | "
                         f"{row.get('cpu_ms_control', float('nan')):.3f} | {row.get('control_change', float('nan')):+.1%} |")
    if doc.get("layer_us"):
        lines += ["", "## The observation layer alone", "",
                  "What the host calls per response, with real events, in a tight loop (metrics on):", ""]
        lines += [f"- {shape}: {us:.1f} µs of CPU per response" for shape, us in doc["layer_us"].items()]
    return lines


def render(doc: dict[str, Any]) -> str:
    def num(v: float | None) -> str:
        return "–" if v is None else f"{v:,.1f}"

    lines = [
        f"# What observing costs, {doc['date']}, commit `{doc['commit']}`",
        "",
        f"- Machine: {describe_machine(doc['machine'])}; load average at the end "
        + "/".join(f"{v:g}" for v in doc["load_average_end"]) + ".",
        f"- Reproduce: `{doc['command']}` ({doc['rounds']} rounds, {doc['seconds']:.0f} s).",
        f"- `off`: `[telemetry] metrics = false`; `on`: the default (metrics on, traces off, no hooks). App "
        f"`{MAIN_APP}` on both, each on its own local Ray instance in front of one `troupe sim`; each load on one then "
        "the other, the order alternating by round; medians over the rounds. Change: on ÷ off − 1.",
        f"- Bound: throughput (responses/s) within {BOUND:.0%}. Worst throughput change: "
        f"{doc['worst_throughput_change']:+.1%} ({doc['verdict']}).",
        "",
        "| load | measure | off | on | change | off, per round | on, per round |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in doc["rows"]:
        unit = f" ({row['unit']})" if row["unit"] else ""
        change = "–" if row["change"] is None else f"{row['change']:+.1%}"
        lines.append(
            f"| {row['load']} | {row['measure']}{unit} | {num(row['before'])} | {num(row['after'])} | {change} | "
            + ", ".join(num(v) for v in row["before_rounds"]) + " | "
            + ", ".join(num(v) for v in row["after_rounds"]) + " |"
        )
    lines += _in_process_lines(doc)
    if doc.get("errors"):
        lines += ["", "Errors: " + "; ".join(doc["errors"])]
    return "\n".join(lines) + "\n"


def render_in_process(doc: dict[str, Any]) -> str:
    """The Markdown of an ``--in-process-only`` run."""
    head = [
        f"# What observing costs, in process, {doc['date']}, commit `{doc['commit']}`", "",
        f"- Machine: {describe_machine(doc['machine'])}; load average at the end "
        + "/".join(f"{v:g}" for v in doc["load_average_end"]) + ".",
        f"- Reproduce: `{doc['command']}` ({doc['blocks']} blocks of {doc['per_block']} responses per side and load).",
    ]  # fmt: skip
    return "\n".join(head + _in_process_lines(doc)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every load on both (default 3)")
    parser.add_argument("--quick", action="store_true", help="small counts (a smoke test); results to scratch")
    parser.add_argument("--out-dir", help="where results go (default: benchmarks/results/observe)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--in-process-only", action="store_true", help="only the in-process CPU comparison")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    started = time.perf_counter()
    machine = machine_info()
    commit = _git("rev-parse", "--short", "HEAD") + ("-dirty" if _git("status", "--porcelain", "--untracked-files=no") else "")
    default_out = os.path.join(_SCRATCH, "results") if args.quick else os.path.join(ROOT, "benchmarks", "results", "observe")
    out_dir = args.out_dir or default_out
    blocks, per_block = (4, 50) if args.quick else (10, 300)
    measured_in_process = asyncio.run(in_process(blocks=blocks, per_block=per_block))
    layer = layer_cost()
    log(f"the observation layer alone: {layer}")
    if args.in_process_only:
        doc = {
            "schema": "troupe-observe-in-process/1", "date": time.strftime("%Y-%m-%d"), "commit": commit,
            "machine": machine, "load_average_end": [round(v, 2) for v in os.getloadavg()],
            "command": "python -m benchmarks.observe_overhead " + " ".join(argv if argv is not None else sys.argv[1:]),
            "blocks": blocks, "per_block": per_block, "in_process": measured_in_process, "layer_us": layer,
        }  # fmt: skip
        os.makedirs(out_dir, exist_ok=True)
        stem = os.path.join(out_dir, f"{doc['date']}-{commit}-observe-in-process")
        with open(stem + ".json", "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
        with open(stem + ".md", "w", encoding="utf-8") as f:
            f.write(render_in_process(doc))
        log(f"wrote {stem}.json, {stem}.md")
        print(render_in_process(doc))
        return 0
    with Lab(scratch=os.path.join(_SCRATCH, "observe-run"), peers=False) as lab:
        log("starting the sim server and Troupe with metrics off and on")
        sim = lab.start_sim()
        sides = {}
        for side, telemetry in SIDES.items():
            name = f"troupe-{side}"
            lab.start_troupe(sim.base_url, name=name, extra_args=("--apps", MAIN_APP, "--telemetry", json.dumps(telemetry)))
            sides[side] = lab.targets[f"{name}-{MAIN_APP}"]
        ctx = Ctx(lab=lab, defs=definitions(quick=args.quick), progress=not args.quiet)
        idle_cores(ctx)
        samples, errors = asyncio.run(_rounds(ctx, sides, args.rounds))
    rows = summarize(samples)
    changes = [row["change"] for row in rows if row["measure"] == "responses/s" and row["change"] is not None]
    worst = min(changes, default=0.0)
    doc = {
        "schema": "troupe-observe/1",
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit,
        "sides": {"before": {"telemetry": SIDES["before"]}, "after": {"telemetry": SIDES["after"]}},
        "rounds": args.rounds,
        "quick": args.quick,
        "machine": machine,
        "load_average_end": [round(v, 2) for v in os.getloadavg()],
        "idle_cpu_cores": ctx.idle_cores,
        "command": "python -m benchmarks.observe_overhead " + " ".join(argv if argv is not None else sys.argv[1:]),
        "seconds": round(time.perf_counter() - started, 1),
        "samples": samples,
        "rows": rows,
        "worst_throughput_change": worst,
        "verdict": "met" if worst >= -BOUND else "not met",
        "errors": errors,
        "in_process": measured_in_process,
        "layer_us": layer,
    }
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.join(out_dir, f"{doc['date']}-{commit}-observe")
    with open(stem + ".json", "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
    with open(stem + ".md", "w", encoding="utf-8") as f:
        f.write(render(doc))
    log(f"wrote {stem}.json, {stem}.md")
    print(render(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
