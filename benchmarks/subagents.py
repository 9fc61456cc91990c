"""Subagents against a real ``troupe serve``: do a parent's subagents run in parallel?

    .venv/bin/python -m benchmarks.subagents            # about 2 minutes on 2 cores
    .venv/bin/python -m benchmarks.subagents --quick    # a smoke test, results to scratch

Starts ``troupe serve`` on its embedded defaults (:class:`benchmarks.load.ServeLab`), drives it
with the ``openai`` SDK, and stops it. Each round times three session turns, streamed, from the
create request to the ``agent.session.turn.completed`` event, the order rotating by round:

* ``fanout8``: a parent (``multi_agent`` enabled) whose turn creates 8 subagents, each running
  the registered ``sleep`` tool for 400 ms, then waits for them and answers
  (``[[call create_subagent …]]`` ×8 ``[[then wait_for_subagents {}]]``);
* ``fanout1``: the same with one subagent: the critical path of that shape (the parent's three
  model steps, one subagent's turn with its 400 ms tool, the runtime's hand-offs);
* ``direct``: one session running the 400 ms tool itself (what orchestration adds to the tool).

The target (issue 29): ``fanout8`` p50 within ``fanout1`` p50 + 100 ms: eight subagents take
the time of one, not eight. Writes ``benchmarks/results/subagents/<date>-<commit>-subagents.{json,md}``
(``--quick``: ``benchmarks/scratch/results/subagents/``) with the machine and the commit.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from openai import OpenAI

from benchmarks.load import ServeLab
from benchmarks.provenance import run_record
from troupe.bench.machine import describe_machine
from troupe.bench.stats import percentile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRATCH = os.path.join(ROOT, "benchmarks", "scratch")
TOOL_MS = 400
BOUND_MS = 100.0


def log(message: str) -> None:
    print(f"[subagents] {message}", file=sys.stderr, flush=True)


def _task() -> str:
    return json.dumps({"task": f'[[call sleep {{"ms": {TOOL_MS}}}]]'})


SHAPES = {
    "fanout8": ({"model": "sim", "multi_agent": {"enabled": True, "max_concurrent_subagents": 8}},
                " ".join([f"[[call create_subagent {_task()}]]"] * 8) + " [[then wait_for_subagents {}]]"),
    "fanout1": ({"model": "sim", "multi_agent": {"enabled": True}},
                f"[[call create_subagent {_task()}]] [[then wait_for_subagents {{}}]]"),
    "direct": ({"model": "sim"}, f'[[call sleep {{"ms": {TOOL_MS}}}]]'),
}  # fmt: skip


def turn_ms(client: OpenAI, shape: str) -> float:
    """One session's first turn, create request to its ``turn.completed`` event."""
    agent, script = SHAPES[shape]
    begun = time.perf_counter()
    with client.beta.agents.sessions.create(environment={"type": "none"}, agent=agent, input=script,
                                            stream=True) as events:  # fmt: skip
        for event in events:
            if event.type == "agent.session.turn.completed":
                took = (time.perf_counter() - begun) * 1000
                session_id = event.session_id
                break
            if event.type in ("agent.session.turn.failed", "agent.session.turn.cancelled", "error"):
                raise RuntimeError(f"{shape}: {event.type}")
        else:
            raise RuntimeError(f"{shape}: the stream ended before the turn completed")
    client.beta.agents.sessions.delete(session_id)
    return took


def measure(client: OpenAI, rounds: int, warmup: int) -> dict[str, Any]:
    names = list(SHAPES)
    for _ in range(warmup):
        for name in names:
            turn_ms(client, name)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name].append(turn_ms(client, name))
    summary = {name: {"p50_ms": round(percentile(v, 50), 1), "p95_ms": round(percentile(v, 95), 1),
                      "min_ms": round(min(v), 1), "n": len(v)} for name, v in samples.items()}  # fmt: skip
    return {"samples_ms": {k: [round(x, 1) for x in v] for k, v in samples.items()}, "summary": summary}


def verdicts(result: dict[str, Any]) -> list[dict[str, Any]]:
    s = result["summary"]
    extra = round(s["fanout8"]["p50_ms"] - s["fanout1"]["p50_ms"], 1)
    return [{"target": "8 subagents' parent turn p50 − 1 subagent's (the critical path) ≤ 100 ms", "value": extra,
             "bound": BOUND_MS, "met": extra <= BOUND_MS}]  # fmt: skip


def render(doc: dict[str, Any]) -> str:
    s = doc["result"]["summary"]
    lines = [
        f"# Subagents ({doc['created_at']}, commit {doc['commit']})", "",
        f"Machine: {describe_machine(doc['machine'])}. Command: `{doc['command']}`. Each turn is a session's first, "
        f"streamed, from the create request to `agent.session.turn.completed`; {doc['params']['rounds']} rounds, "
        "the order rotating.", "",
        "| shape | p50 ms | p95 ms | min ms | n |", "|---|---|---|---|---|",
        *(f"| {name} | {v['p50_ms']} | {v['p95_ms']} | {v['min_ms']} | {v['n']} |" for name, v in s.items()), "",
        *(f"- {v['target']}: **{v['value']} ms** (bound {v['bound']}): {'met' if v['met'] else 'NOT met'}"
          for v in doc["verdicts"]),
        f"- What orchestration adds to the tool (fanout1 − direct, p50): "
        f"{round(s['fanout1']['p50_ms'] - s['direct']['p50_ms'], 1)} ms: two more parent model steps, a "
        "subagent's session and turn, and the hand-offs.", "",
    ]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke test: 2 rounds, results to scratch")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--placement", choices=("replica", "pooled"), default="replica",
                        help="where conversations run: the ingress replica (the default), or pooled host actors")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.warmup = 2, 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds, so the server is stopped
    doc = run_record("benchmarks.subagents", argv, vars(args))
    commit = doc["commit"]
    log(describe_machine(doc["machine"]))
    lab = ServeLab(scratch=os.path.join(SCRATCH, "subagents"), peers=False)
    try:
        log("starting troupe serve (a fresh local Ray instance, the embedded defaults)")
        config = None
        if args.placement != "replica":
            config = os.path.join(lab.scratch, "placement.toml")
            os.makedirs(lab.scratch, exist_ok=True)
            Path(config).write_text(f'[runtime]\nplacement = "{args.placement}"\n')
        root = lab.start_serve(name="troupe-serve-subagents", config=config)
        client = OpenAI(base_url=root, api_key="unused", max_retries=0)
        doc["result"] = measure(client, args.rounds, args.warmup)
    finally:
        log("stopping the server")
        lab.close()
    doc["machine"]["load_average_after_run"] = list(os.getloadavg())
    doc["verdicts"] = verdicts(doc["result"])
    out_dir = Path(SCRATCH, "results", "subagents") if args.quick else Path(ROOT, "benchmarks", "results", "subagents")
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{datetime.date.today().isoformat()}-{commit}-subagents-{args.placement}"
    Path(f"{stem}.json").write_text(json.dumps(doc, indent=2) + "\n")
    Path(f"{stem}.md").write_text(render(doc))
    log(f"wrote {os.path.relpath(stem, ROOT)}.{{json,md}}")
    for v in doc["verdicts"]:
        log(f"{v['target']}: {v['value']} (bound {v['bound']}) {'met' if v['met'] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
