"""A 20-tool-call agent run over one WebSocket against the same run over HTTP+SSE, side by side.

    .venv/bin/python -m benchmarks.websocket              # about two minutes
    .venv/bin/python -m benchmarks.websocket --quick      # smoke test: results under benchmarks/scratch/

A fresh ``troupe serve`` on its embedded defaults (:class:`benchmarks.load.ServeLab`: direct
ingress, the ``replica`` placement, the in-process ``sim``). The agent is the client: its tool
``step`` is a function tool the client runs, so each of the run's 20 steps is one response (the
model calls ``step``: ``[[loop step]]``) and the next one carries only the call's output with
``previous_response_id``, the continuation WebSocket mode is for. The same run two ways, in
alternating order, ``--runs`` times each:

* ``sse``: ``client.responses.create(stream=True, ...)`` for each step, on the SDK's keep-alive
  HTTP connection;
* ``websocket``: one ``client.responses.connect()`` for the whole run, ``response.create`` per
  step.

Measured per run: its wall time (the first request sent to the last response's
``response.completed``), and each step's time to its ``response.completed``; medians over the
runs. The sim answers at once, so what differs is the transport and Troupe's own path. Results:
``benchmarks/results/websocket/<date>-<commit>.{json,md}`` with the machine and the commit.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from openai import OpenAI

from benchmarks.load import ServeLab
from benchmarks.provenance import run_record, write_result
from benchmarks.subagents import SCRATCH
from troupe.bench.machine import describe_machine

__all__ = ["main"]

STEP = {"type": "function", "name": "step", "description": "One step of the agent's work.",
        "parameters": {"type": "object", "properties": {}}}  # fmt: skip
FIRST = "[[loop step]] work through the task"


def _sse_run(client: OpenAI, steps: int) -> tuple[float, list[float]]:
    started, times, previous, given = time.perf_counter(), [], None, FIRST
    for _ in range(steps):
        t = time.perf_counter()
        stream = client.responses.create(model="sim", input=given, tools=[STEP], stream=True,
                                         previous_response_id=previous)  # type: ignore[call-overload]  # fmt: skip
        final = next(e.response for e in stream if e.type == "response.completed")
        times.append(time.perf_counter() - t)
        previous, given = final.id, [_output_of(final)]
    return time.perf_counter() - started, times


def _ws_run(client: OpenAI, steps: int) -> tuple[float, list[float]]:
    started, times, previous, given = time.perf_counter(), [], None, FIRST
    with client.responses.connect() as connection:
        for _ in range(steps):
            t = time.perf_counter()
            body: dict[str, Any] = {"model": "sim", "input": given, "tools": [STEP]}
            if previous is not None:
                body["previous_response_id"] = previous
            connection.send({"type": "response.create", **body})  # type: ignore[arg-type]
            final = next(e.response for e in connection if e.type == "response.completed")  # type: ignore[union-attr]
            times.append(time.perf_counter() - t)
            previous, given = final.id, [_output_of(final)]
    return time.perf_counter() - started, times


def _output_of(response: Any) -> dict[str, Any]:
    [call] = [o for o in response.output if o.type == "function_call"]
    return {"type": "function_call_output", "call_id": call.call_id, "output": "done"}


def _markdown(doc: dict[str, Any]) -> str:
    p, r = doc["params"], doc["results"]
    lines = [
        f"# A {p['steps']}-tool-call agent run: WebSocket against HTTP+SSE, {doc['created_at'][:10]}, "
        f"commit {doc['commit']}",
        "",
        f"Machine: {describe_machine(doc['machine'])}. Command: `{doc['command']}`.",
        "",
        f"`troupe serve` on its defaults (direct ingress, `replica` placement, the in-process sim); {p['runs']} runs "
        "each way, alternating; medians.",
        "",
        "| transport | run (ms) | step p50 (ms) | step p90 (ms) | runs (ms) |",
        "|---|---|---|---|---|",
    ]
    for name in ("sse", "websocket"):
        x = r[name]
        lines.append(f"| {name} | {x['run_ms']:.0f} | {x['step_p50_ms']:.1f} | {x['step_p90_ms']:.1f} | "
                     f"{', '.join(f'{v:.0f}' for v in x['runs_ms'])} |")  # fmt: skip
    change = r["websocket"]["run_ms"] / r["sse"]["run_ms"] - 1
    lines += ["", f"WebSocket run time against HTTP+SSE: {change:+.0%}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.websocket", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs each way (default 10)")
    parser.add_argument("--steps", type=int, default=20, help="tool calls in a run (default 20)")
    parser.add_argument("--quick", action="store_true", help="2 runs each way, results under benchmarks/scratch/")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs = 2
    argv = sys.argv[1:] if argv is None else argv
    doc = run_record("benchmarks.websocket", argv, {k: v for k, v in vars(args).items() if k != "quick"})
    runs: dict[str, list[tuple[float, list[float]]]] = {"sse": [], "websocket": []}
    with ServeLab(scratch=str(SCRATCH), peers=False) as lab:
        client = OpenAI(base_url=lab.start_serve(), api_key="unused", max_retries=0)
        _ws_run(client, 2), _sse_run(client, 2)  # warm both paths (the first turn imports, connects)
        for i in range(args.runs):
            for name in ("sse", "websocket") if i % 2 == 0 else ("websocket", "sse"):
                runs[name].append((_sse_run if name == "sse" else _ws_run)(client, args.steps))
    doc["results"] = {
        name: {
            "run_ms": statistics.median(t for t, _ in done) * 1000,
            "runs_ms": [t * 1000 for t, _ in done],
            "step_p50_ms": statistics.median(s for _, steps in done for s in steps) * 1000,
            "step_p90_ms": statistics.quantiles([s for _, steps in done for s in steps], n=10)[-1] * 1000,
        }
        for name, done in runs.items()
    }
    write_result(doc, "websocket", _markdown(doc), quick=args.quick)


if __name__ == "__main__":
    main()
