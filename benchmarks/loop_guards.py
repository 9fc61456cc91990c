"""What loop guards save on the sim's scripted loops, and what checking them costs a loop they
never stop.

    .venv/bin/python -m benchmarks.loop_guards            # about a minute
    .venv/bin/python -m benchmarks.loop_guards --quick    # smoke test: tiny counts, benchmarks/scratch/

The loop runs in process (``run_loop`` and the ``WireWriter``, the sim as the model, three
local tools), the way a host runs it, without HTTP or Ray around it: what a guard changes is
the loop's own work and the model calls it makes.

* **Saved.** Three loops that never end by themselves, each run with the guards off (the
  loop's cap stops it: ``max_infer_iters`` = 10 model calls) and on (``repeat = 3``,
  ``alternate = 3``, ``poll = 5``, the example configuration's values or near them): a
  ``repeat`` (``[[cycle calculator {…}]]``, the same call every turn), an ``alternate``
  (``[[cycle calculator now]]``) and a ``poll`` (``[[cycle status {"n": 1}]] … {"n": 7}``). The sim
  answers with latency (``--ttft-ms``, ``--itl-ms``). For each: model calls, tool calls run,
  tokens in and out, and the time to the response's end (p50 of ``--responses``).
* **Cost.** A loop no guard stops (``[[call calculator]] [[then now]]``: two rounds of two
  different calls, then the answer), the sim without latency, run with every guard on and with
  none, interleaved in rounds: the process's CPU per response (``time.process_time``).

Results: ``benchmarks/results/loop_guards/<date>-<commit>.{json,md}`` with the machine and the
commit (``--quick``: ``benchmarks/scratch/results/``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import timeit
from typing import Any

from troupe.agentloop.driver import prepare, run_loop
from troupe.agentloop.loop_guards import LoopGuards, round_of, tripped
from troupe.agentloop.model import ToolCall
from troupe.agentloop.tools import LocalFunctionExecutor
from troupe.agentloop.writer import WireWriter
from troupe.bench.machine import describe_machine
from troupe.protocol import parse_create_request
from troupe.sim.model import SimModel, SimSettings

from .provenance import run_record, write_result

__all__ = ["main"]

GUARDS = LoopGuards(repeat=3, alternate=3, poll=5)
LOOPS = {
    "repeat": '[[cycle calculator {"expression": "6*7"}]]',
    "alternate": '[[cycle calculator {"expression": "6*7"} now]]',
    "poll": "[[cycle " + " ".join(f'status {{"n": {n}}}' for n in range(1, 8)) + "]]",
}
NEVER_STOPPED = '[[call calculator {"expression": "1+1"}]] [[then now]]'
TOOLS = LocalFunctionExecutor({
    "calculator": lambda expression="": "42", "now": lambda: "2026-12-05T10:00:00Z", "status": lambda n=0: "running",
})  # fmt: skip


class _Counted:
    """The sim, counting the model calls it answers."""

    def __init__(self, model: SimModel) -> None:
        self.model, self.calls = model, 0

    def stream(self, request: Any) -> Any:
        self.calls += 1
        return self.model.stream(request)


async def _respond(model: Any, text: str, guards: LoopGuards | None) -> dict[str, Any]:
    request = parse_create_request({"model": "sim", "input": text})
    writer, last = WireWriter(request, response_id="resp_bench", created_at=1), None
    async for event in run_loop(prepare(request, [], [TOOLS]), model=model, executors=[TOOLS], loop_guards=guards):
        for wire in writer.write(event):
            last = wire
    assert last is not None and "response" in last
    return last["response"]


async def _saved(responses: int, ttft_ms: float, itl_ms: float) -> list[dict[str, Any]]:
    rows = []
    for loop, text in LOOPS.items():
        for guarded in (False, True):
            times, response = [], None
            for _ in range(responses):
                model = _Counted(SimModel(SimSettings(ttft_ms=ttft_ms, itl_ms=itl_ms)))
                started = time.perf_counter()
                response = await _respond(model, text, GUARDS if guarded else None)
                times.append(time.perf_counter() - started)
            assert response is not None
            usage = response["usage"]
            rows.append({
                "loop": loop, "guards": "on" if guarded else "off",
                "stopped_by": (response["incomplete_details"] or {}).get("loop_guard") or "max_infer_iters",
                "model_calls": model.calls,
                "tool_calls_run": sum(o["type"] == "function_call_output" for o in response["output"]),
                "input_tokens": usage["input_tokens"], "output_tokens": usage["output_tokens"],
                "p50_ms": round(statistics.median(times) * 1000, 1),
            })  # fmt: skip
    return rows


async def _cost(responses: int, rounds: int) -> dict[str, Any]:
    model = SimModel(SimSettings(ttft_ms=0, itl_ms=0))
    every = LoopGuards(repeat=2, alternate=2, poll=2)
    cpu: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(3):  # warm both paths
        await _respond(model, NEVER_STOPPED, every)
        await _respond(model, NEVER_STOPPED, None)
    for r in range(rounds):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            started = time.process_time()
            for _ in range(responses):
                response = await _respond(model, NEVER_STOPPED, every if mode == "on" else None)
                assert response["status"] == "completed"
            cpu[mode].append((time.process_time() - started) / responses * 1e6)
    off, on = statistics.median(cpu["off"]), statistics.median(cpu["on"])
    # The guards' own work, alone: what a turn adds (its round made, every guard checked).
    calls = [ToolCall(call_id="c1", name="calculator", arguments='{"expression": "1+1"}')]
    history = (round_of([ToolCall(call_id="c0", name="now", arguments="{}")]),)
    per_turn = min(timeit.repeat(lambda: tripped((*history, round_of(calls)), every), number=20_000, repeat=5))
    return {"off_us": round(off, 1), "on_us": round(on, 1), "delta_us": round(on - off, 1), "rounds_us": cpu,
            "guards_per_turn_us": round(per_turn / 20_000 * 1e6, 2)}  # fmt: skip


def _markdown(doc: dict[str, Any]) -> str:
    p = doc["params"]
    lines = [
        f"# Loop guards, {doc['created_at'][:10]}, commit {doc['commit']}",
        "",
        f"Machine: {describe_machine(doc['machine'])}. Command: `{doc['command']}`.",
        "",
        f"## Saved on the sim's scripted loops (sim latency: TTFT {p['ttft_ms']:g} ms, "
        f"{p['itl_ms']:g} ms a token; p50 of {p['responses']} responses)",
        "",
        "Guards on: repeat = 3, alternate = 3, poll = 5. Off: the loop's cap (max_infer_iters = 10) stops it.",
        "",
        "| loop | guards | stopped by | model calls | tool calls run | input tokens | output tokens | time to end (ms) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["saved"]:
        lines.append(
            f"| {r['loop']} | {r['guards']} | {r['stopped_by']} | {r['model_calls']} | {r['tool_calls_run']} | "
            f"{r['input_tokens']} | {r['output_tokens']} | {r['p50_ms']:g} |"
        )
    c = doc["cost"]
    lines += [
        "",
        f"## Cost on a loop no guard stops ({p['cost_responses']} responses × {p['cost_rounds']} rounds, interleaved)",
        "",
        "Two rounds of two different calls, then the answer; every guard on at 2 against none. The "
        "loop's CPU per response, median of the rounds:",
        "",
        f"- off: {c['off_us']:g} µs; on: {c['on_us']:g} µs; difference {c['delta_us']:+g} µs (the rounds: "
        f"off {', '.join(f'{v:.0f}' for v in c['rounds_us']['off'])}; on "
        f"{', '.join(f'{v:.0f}' for v in c['rounds_us']['on'])}).",
        f"- The guards' own work alone (timeit, best of 5): {c['guards_per_turn_us']:g} µs a turn that called tools "
        "(its round made, every guard checked).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.loop_guards", description=__doc__.split("\n\n")[0])
    parser.add_argument("--responses", type=int, default=5, help="responses per loop and setting (default 5)")
    parser.add_argument("--ttft-ms", type=float, default=50.0, help="the sim's time to first token (default 50)")
    parser.add_argument("--itl-ms", type=float, default=5.0, help="the sim's time between tokens (default 5)")
    parser.add_argument("--cost-responses", type=int, default=200, help="responses per round of the cost part")
    parser.add_argument("--cost-rounds", type=int, default=8, help="rounds of the cost part (default 8)")
    parser.add_argument("--quick", action="store_true", help="tiny counts, results under benchmarks/scratch/")
    args = parser.parse_args(argv)
    if args.quick:
        args.responses, args.cost_responses, args.cost_rounds = 1, 10, 2
    argv = sys.argv[1:] if argv is None else argv
    doc = run_record("benchmarks.loop_guards", argv, {k: v for k, v in vars(args).items() if k != "quick"})
    doc["saved"] = asyncio.run(_saved(args.responses, args.ttft_ms, args.itl_ms))
    doc["cost"] = asyncio.run(_cost(args.cost_responses, args.cost_rounds))
    write_result(doc, "loop_guards", _markdown(doc), quick=args.quick)


if __name__ == "__main__":
    main()
