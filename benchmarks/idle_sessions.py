"""Idle agent sessions against idle conversations: what each costs a running ``troupe serve``.

    .venv/bin/python -m benchmarks.idle_sessions            # about 4 minutes on 2 cores
    .venv/bin/python -m benchmarks.idle_sessions --quick    # 100 of each, results to scratch

Two fresh ``troupe serve`` instances on their embedded defaults (:class:`benchmarks.load.ServeLab`),
one after the other, each driven with the ``openai`` SDK from 8 threads:

* ``conversations``: N conversations, each with one turn (``responses.create`` with
  ``conversation``, the sim's ``[[say hi]]``): what N idle conversations are today;
* ``sessions``: N agent sessions (inline agent, no environment), each with one turn (the same
  answer), waited until idle.

Measured on each server before and after: the resident memory (RSS) of its processes by role
(the ingress replica, which hosts the conversations on the default ``replica`` placement and runs
the sessions' service; the storage actor; the rest of the tree), and the DuckDB file's size.
The target (issue 29): N idle sessions cost no more memory than N idle conversations.
Writes ``benchmarks/results/idle_sessions/<date>-<commit>-idle-sessions.{json,md}``
(``--quick``: ``benchmarks/scratch/results/idle_sessions/``) with the machine and the commit.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
from openai import OpenAI

from benchmarks.load import ServeLab, _label
from benchmarks.provenance import run_record
from benchmarks.subagents import ROOT, SCRATCH
from troupe.bench.machine import describe_machine

ROLES = {"ingress replica": "ServeReplica", "storage actor": "StorageService"}
TOLERANCE = 1.10
"""Sessions may cost this much of what conversations do (RSS moves by a few MB between runs)."""


def log(message: str) -> None:
    print(f"[idle_sessions] {message}", file=sys.stderr, flush=True)


def memory(lab: ServeLab) -> dict[str, float]:
    """RSS in MiB of the server's processes, by role, and the database file's size."""
    by_role = {role: 0.0 for role in [*ROLES, "other"]}
    assert lab.serve is not None
    for proc in lab.serve.processes():
        try:
            rss = proc.memory_info().rss / 2**20
            label = _label(proc)
        except psutil.Error:
            continue
        role = next((r for r, marker in ROLES.items() if marker in label), "other")
        by_role[role] += rss
    size = sum(os.path.getsize(p) for p in (lab.db_path, lab.db_path + ".wal") if os.path.exists(p)) / 2**20
    return {**{k: round(v, 1) for k, v in by_role.items()}, "total": round(sum(by_role.values()), 1),
            "duckdb_file": round(size, 1)}  # fmt: skip


def fill(client: OpenAI, kind: str, n: int) -> None:
    def conversation(_: int) -> None:
        conv = client.conversations.create()
        client.responses.create(model="sim", input="[[say hi]]", conversation=conv.id)

    def session(_: int) -> str:
        made = client.beta.agents.sessions.create(environment={"type": "none"}, agent={"model": "sim"},
                                                  input="[[say hi]]")  # fmt: skip
        return made.id

    with ThreadPoolExecutor(8) as pool:
        if kind == "conversations":
            list(pool.map(conversation, range(n)))
            return
        ids = list(pool.map(session, range(n)))
        for session_id in ids:  # every one idle (its turn answered) before measuring
            while client.beta.agents.sessions.retrieve(session_id).status != "idle":
                time.sleep(0.05)


def measure(kind: str, n: int, settle_s: float) -> dict[str, Any]:
    lab = ServeLab(scratch=os.path.join(SCRATCH, "idle_sessions"), peers=False)
    try:
        client = OpenAI(base_url=lab.start_serve(name=f"troupe-serve-{kind}"), api_key="unused", max_retries=0)
        fill(client, kind, 5)  # first use of every path
        time.sleep(settle_s)
        before = memory(lab)
        begun = time.perf_counter()
        fill(client, kind, n)
        took = time.perf_counter() - begun
        time.sleep(settle_s)  # idle: nothing runs; what stays is what idle ones cost
        after = memory(lab)
    finally:
        lab.close()
    grew = {k: round(after[k] - before[k], 1) for k in after}
    log(f"{kind}: {n} in {took:.0f} s; grew {grew}")
    return {"before": before, "after": after, "grew": grew, "fill_s": round(took, 1)}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100 of each, results to scratch")
    parser.add_argument("-n", type=int, default=1000)
    parser.add_argument("--settle-s", type=float, default=5.0)
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.settle_s = 100, 2.0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds, so the server is stopped
    doc = run_record("benchmarks.idle_sessions", argv, vars(args))
    commit = doc["commit"]
    log(describe_machine(doc["machine"]))
    doc["result"] = {kind: measure(kind, args.n, args.settle_s) for kind in ("conversations", "sessions")}
    conv, sess = doc["result"]["conversations"]["grew"], doc["result"]["sessions"]["grew"]
    bound = round(max(conv["total"], 0.0) * TOLERANCE + 5.0, 1)  # 5 MiB: what RSS moves between runs alone
    doc["verdicts"] = [{"target": f"{args.n} idle sessions' RSS growth ≤ {args.n} idle conversations' (× {TOLERANCE} "
                                  "+ 5 MiB)", "value": sess["total"], "bound": bound, "met": sess["total"] <= bound}]  # fmt: skip
    out_dir = (Path(SCRATCH, "results", "idle_sessions") if args.quick
               else Path(ROOT, "benchmarks", "results", "idle_sessions"))  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{datetime.date.today().isoformat()}-{commit}-idle-sessions"
    Path(f"{stem}.json").write_text(json.dumps(doc, indent=2) + "\n")
    lines = [f"# Idle sessions against idle conversations ({doc['created_at']}, commit {commit})", "",
             f"Machine: {describe_machine(doc['machine'])}. Command: `{doc['command']}`. N = {args.n}; each kind on a "
             "fresh `troupe serve`, RSS (MiB) by role before and after, the DuckDB file (MiB).", "",
             "| kind | fill s | ingress replica | storage actor | other | total | DuckDB file |", "|---|---|---|---|---|---|---|",
             *(f"| {kind} | {r['fill_s']} | +{r['grew']['ingress replica']} | +{r['grew']['storage actor']} | "
               f"+{r['grew']['other']} | +{r['grew']['total']} | +{r['grew']['duckdb_file']} |"
               for kind, r in doc["result"].items()), "",
             *(f"- {v['target']}: **{v['value']} MiB** (bound {v['bound']}): {'met' if v['met'] else 'NOT met'}"
               for v in doc["verdicts"]), ""]  # fmt: skip
    Path(f"{stem}.md").write_text("\n".join(lines))
    log(f"wrote {os.path.relpath(stem, ROOT)}.{{json,md}}")
    for v in doc["verdicts"]:
        log(f"{v['target']}: {v['value']} (bound {v['bound']}) {'met' if v['met'] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
