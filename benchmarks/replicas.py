"""One ingress replica against two, with the replica placement: does a second replica use the second core?

    .venv/bin/python -m benchmarks.replicas              # about 5 minutes on 2 cores
    .venv/bin/python -m benchmarks.replicas --quick      # a smoke test, results to scratch

Starts one ``troupe sim`` and then, one after the other, ``troupe serve`` with ``[server]
num_replicas = 1`` and ``= 2`` (the ``replica`` placement, each replica on its own port), the
model being the sim server over HTTP (as a real model server would be). The clients are split
evenly over the replicas' ports, as a load balancer over them would split its connections (an
aiohttp client: httpx's would take a third of the machine's CPU). Per
server, ``--rounds`` rounds of:

* ``non-streaming c=32``: stored, zero-latency model, 16 tokens (the server's own throughput);
* ``streaming c=64``: the model streams 64 tokens, 50 ms to the first and 10 ms apart.

With two replicas also the hand-off: chains of two turns (``[[history]]`` second) one at a
time, the second turn sent to the first turn's replica (``same``) or to the other (``other``:
the other replica hands the turn to the thread's replica in one Ray call). Its cost is the
difference of the second turns' p50s.

The target (issue 30): 2 replicas give ≥ 1.5× the non-streaming throughput of 1. Writes
``benchmarks/results/replicas/<date>-<commit>-replicas.{json,md}`` (``--quick``: scratch)
with the machine and the commit, and the server process tree's CPU per response.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from benchmarks.load import ServeLab, post_response
from benchmarks.measure import log
from benchmarks.provenance import run_record
from benchmarks.targets import ROOT
from troupe.bench.machine import describe_machine
from troupe.bench.stats import percentile
from troupe.serve.deployment import free_port_range

__all__ = ["main"]

SCRATCH = os.path.join(ROOT, "benchmarks", "scratch")
LOADS = {  # name: (body, concurrency, requests)
    "non-streaming c=32": ({"input": "[[tokens 16]]", "stream": False}, 32, 640),
    "streaming c=64": ({"input": "[[latency ttft=50 itl=10]] [[tokens 64]]", "stream": True}, 64, 640),
}


async def _split_load(roots: list[str], body: dict[str, Any], concurrency: int, requests: int) -> dict[str, Any]:
    """``requests`` requests, ``concurrency`` in flight (closed loop, after as many not counted),
    client ``w`` always sending to ``roots[w % len(roots)]``. The client is aiohttp
    (:func:`benchmarks.load.post_response`), a fifth of httpx's CPU: it shares the cores."""
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as client:

        async def phase(count: int) -> tuple[list[Any], float]:
            outcomes: list[Any] = []
            left = [count]

            async def worker(w: int) -> None:
                while left[0] > 0:
                    left[0] -= 1
                    outcomes.append(await post_response(
                        client, f"{roots[w % len(roots)]}/v1", {**body, "model": "simhttp"}, timeout_s=120
                    ))  # fmt: skip

            started = time.perf_counter()
            await asyncio.gather(*(worker(w) for w in range(concurrency)))
            return outcomes, time.perf_counter() - started

        await phase(concurrency)
        outcomes, wall = await phase(requests)
    ok = [o for o in outcomes if o.ok]
    ttft = [o.ttft_s * 1000 for o in ok if o.ttft_s is not None]
    e2e = [o.e2e_s * 1000 for o in ok]
    return {
        "ok": len(ok), "errors": len(outcomes) - len(ok), "throughput_rps": round(len(ok) / wall, 1),
        "ttft_p50_ms": round(percentile(ttft, 50), 1) if ttft else None,
        "e2e_p50_ms": round(percentile(e2e, 50), 1) if e2e else None,
    }  # fmt: skip


def _handoff(roots: list[str], chains: int) -> dict[str, Any]:
    """The second turn of two-turn chains, sent to the first turn's replica or to the other."""
    times: dict[str, list[float]] = {"same": [], "other": []}
    with httpx.Client(timeout=60) as http:
        for i in range(chains):
            for where in ("same", "other") if i % 2 == 0 else ("other", "same"):
                first = http.post(f"{roots[0]}/v1/responses", json={"model": "simhttp", "input": "[[say one]]"}).json()
                root = roots[0] if where == "same" else roots[1]
                started = time.perf_counter()
                second = http.post(f"{root}/v1/responses", json={
                    "model": "simhttp", "input": "[[history]]", "previous_response_id": first["id"],
                })  # fmt: skip
                took = (time.perf_counter() - started) * 1000
                if second.status_code != 200 or second.json()["output"][0]["content"][0]["text"] != "[[say one]] | [[history]]":
                    raise SystemExit(f"hand-off {where}: {second.status_code} {second.text[:300]}")
                times[where].append(took)
    return {where: round(statistics.median(values), 2) for where, values in times.items()}


def _serve(lab: ServeLab, sim_url: str, replicas: int) -> list[str]:
    """``troupe serve`` with ``replicas`` ingress replicas; their roots, once each answers."""
    port = free_port_range(replicas)
    config = Path(lab.scratch, f"replicas-{replicas}.toml")
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        f"[server]\nport = {port}\nnum_replicas = {replicas}\n\n"
        f'[[models]]\nname = "simhttp"\nkind = "openai"\nbase_url = "{sim_url}"\n'
    )
    lab.start_serve(name=f"troupe-serve-{replicas}", config=str(config), port=port)
    roots = [f"http://127.0.0.1:{port + i}" for i in range(replicas)]
    for root in roots:
        lab.serve.wait_http(f"{root}/health", timeout_s=240)  # type: ignore[union-attr]
    return roots


def _cores(after: dict[int, tuple[str, float]], before: dict[int, tuple[str, float]], wall: float) -> dict[str, float]:
    """The server tree's CPU use over ``wall`` seconds (cores), by process role, busiest first."""
    roles: dict[str, float] = {}
    for pid, (role, cpu) in after.items():
        roles[role] = roles.get(role, 0.0) + cpu - before.get(pid, (role, 0.0))[1]
    return {role: round(cpu / wall, 2) for role, cpu in sorted(roles.items(), key=lambda kv: -kv[1]) if cpu / wall >= 0.01}


def measure(lab: ServeLab, sim_url: str, rounds: int, chains: int) -> dict[str, Any]:
    found: dict[str, Any] = {}
    sim = lab.targets["sim"].proc
    for replicas in (1, 2):
        log(f"troupe serve with {replicas} replica(s)")
        roots = _serve(lab, sim_url, replicas)
        tree = lab.serve
        per_load: dict[str, list[dict[str, Any]]] = {name: [] for name in LOADS}
        for r in range(rounds):
            for name, (body, concurrency, requests) in LOADS.items():
                cpu0, roles0 = tree.cpu_s(), tree.cpu_by_process()  # type: ignore[union-attr]
                sim0, client0, started = sim.cpu_s(), time.process_time(), time.perf_counter()  # type: ignore[union-attr]
                row = asyncio.run(_split_load(roots, body, concurrency, requests))
                wall = time.perf_counter() - started
                row["server_cpu_ms_per_response"] = round((tree.cpu_s() - cpu0) * 1000 / max(row["ok"], 1), 2)  # type: ignore[union-attr]
                row["cores"] = _cores(tree.cpu_by_process(), roles0, wall)  # type: ignore[union-attr]
                row["cores"]["sim server"] = round((sim.cpu_s() - sim0) / wall, 2)  # type: ignore[union-attr]
                row["cores"]["load generator"] = round((time.process_time() - client0) / wall, 2)
                per_load[name].append(row)
                log(f"  round {r + 1} {name}: {row}")
        found[str(replicas)] = {"loads": per_load}
        if replicas == 2:
            found["2"]["handoff_ms"] = _handoff(roots, chains)
            log(f"  hand-off: {found['2']['handoff_ms']}")
        tree.stop()  # type: ignore[union-attr]
    return found


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [row[key] for row in rows if row.get(key) is not None]
    return round(statistics.median(values), 1) if values else None


def render(doc: dict[str, Any]) -> str:
    one, two = doc["result"]["1"]["loads"], doc["result"]["2"]["loads"]
    lines = [
        f"# One ingress replica against two, {doc['created_at'][:10]} at `{doc['commit']}`", "",
        f"- Machine: {describe_machine(doc['machine'])}.",
        f"- Reproduce: `{doc['command']}`. Medians over {doc['params']['rounds']} rounds; the clients split evenly "
        "over the replicas' ports; the model is `troupe sim` over HTTP.", "",
        "| load | measure | 1 replica | 2 replicas | 2 ÷ 1 |", "|---|---|---|---|---|",
    ]  # fmt: skip
    for name in LOADS:
        for key, what in (("throughput_rps", "responses/s"), ("ttft_p50_ms", "TTFT p50 (ms)"),
                          ("e2e_p50_ms", "E2E p50 (ms)"), ("server_cpu_ms_per_response", "server CPU per response (ms)")):  # fmt: skip
            a, b = _median(one[name], key), _median(two[name], key)
            if a is None or b is None:
                continue
            lines.append(f"| {name} | {what} | {a} | {b} | {b / a:.2f}× |")
    lines += ["", "Where the CPU went (cores, the median round's; the machine has 2):", "",
              "| load | replicas | process | cores |", "|---|---|---|---|"]  # fmt: skip
    for name in LOADS:
        for replicas, loads in (("1", one), ("2", two)):
            rows = sorted(loads[name], key=lambda row: row["throughput_rps"])
            for process, cores in rows[len(rows) // 2].get("cores", {}).items():
                lines.append(f"| {name} | {replicas} | {process} | {cores} |")
    hand = doc["result"]["2"]["handoff_ms"]
    lines += [
        "", f"Hand-off (2 replicas, a chain's second turn, non-streamed, p50 of {doc['params']['chains']}): sent to the "
        f"thread's replica {hand['same']} ms, to the other {hand['other']} ms: **{hand['other'] - hand['same']:+.1f} ms**.",
    ]  # fmt: skip
    for v in doc["verdicts"]:
        lines.append(f"- Target: {v['target']}: {v['value']} (bound {v['bound']}): **{'met' if v['met'] else 'not met'}**.")
    return "\n".join(lines) + "\n"


def verdicts(result: dict[str, Any]) -> list[dict[str, Any]]:
    a = _median(result["1"]["loads"]["non-streaming c=32"], "throughput_rps")
    b = _median(result["2"]["loads"]["non-streaming c=32"], "throughput_rps")
    ratio = round(b / a, 2) if a and b else None
    return [{"target": "2 replicas ÷ 1, non-streaming c=32 throughput", "value": ratio, "bound": "≥ 1.5",
             "met": ratio is not None and ratio >= 1.5}]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke test: 1 round, few chains, results to scratch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chains", type=int, default=40, help="hand-off chains of each kind")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.chains = 1, 4
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds, so the servers are stopped
    doc = run_record("benchmarks.replicas", argv, vars(args))
    commit = doc["commit"]
    log(describe_machine(doc["machine"]))
    lab = ServeLab(scratch=os.path.join(SCRATCH, "replicas"), peers=False)
    try:
        sim = lab.start_sim()
        doc["result"] = measure(lab, sim.base_url, args.rounds, args.chains)
    finally:
        lab.close()
    doc["verdicts"] = verdicts(doc["result"])
    out_dir = Path(SCRATCH, "results", "replicas") if args.quick else Path(ROOT, "benchmarks", "results", "replicas")
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{datetime.date.today().isoformat()}-{commit}-replicas"
    Path(f"{stem}.json").write_text(json.dumps(doc, indent=2) + "\n")
    Path(f"{stem}.md").write_text(render(doc))
    log(f"wrote {os.path.relpath(stem, ROOT)}.{{json,md}}")
    print(render(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
