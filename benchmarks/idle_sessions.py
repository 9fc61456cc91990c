"""Idle agent sessions against idle conversations: what each costs a running ``troupe serve``.

    .venv/bin/python -m benchmarks.idle_sessions            # about 10 minutes on 2 cores
    .venv/bin/python -m benchmarks.idle_sessions --quick    # 100 of each, results to scratch

Two fresh ``troupe serve`` instances on their embedded defaults (:class:`benchmarks.load.ServeLab`),
one after the other, each driven with the ``openai`` SDK from 8 threads:

* ``conversations``: N conversations, each with one turn (``responses.create`` with
  ``conversation``, the sim's ``[[say hi]]``): what N idle conversations are today;
* ``sessions``: N agent sessions (inline agent, no environment), each with one turn (the same
  answer), waited until idle.

Then N more of the same kind, measured again: past the first N (and the host's message cache of
1,000 threads) the growth is what more idle ones cost, without the allocators' first growth.

Measured on each server before and after: the resident memory (RSS) of its processes by role
(the ingress replica, which hosts the conversations on the default ``replica`` placement and runs
the sessions' service; the storage actor; the rest of the tree), and the DuckDB file's size.
RSS moves by several MiB between runs of the same load (Python's arenas, DuckDB's buffers), so a
second measurement decides what an idle session keeps: the HTTP app in this process (its routes,
the runtime, the sessions' service and the host the ingress replica runs, over
:meth:`~troupe.runtime.Runtime.local`, the store in a thread), filled with the same requests
over loopback, three rounds of N each: the Python heap that stays allocated (``tracemalloc``,
bytes, not pages) per idle conversation and per idle session, and DuckDB's own memory
(``duckdb_memory()``) and the rows' bytes it wrote, beside them.
The target (issue 29): N idle sessions cost no more memory than N idle conversations.
Writes ``benchmarks/results/idle_sessions/<date>-<commit>-idle-sessions.{json,md}``
(``--quick``: ``benchmarks/scratch/results/idle_sessions/``) with the machine and the commit.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import signal
import statistics
import sys
import tempfile
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
from openai import OpenAI

from benchmarks.load import ServeLab, _label
from benchmarks.provenance import run_record
from benchmarks.subagents import ROOT, SCRATCH
from troupe.bench.machine import describe_machine
from troupe.runtime.store_client import AsyncStore

ROLES = {"ingress replica": "ServeReplica", "storage actor": "StorageService"}
TOLERANCE = 1.10
"""Sessions may cost this much of what conversations do (RSS moves by a few MB between runs)."""


TURN = "[[say hi]]"
SESSION = {"environment": {"type": "none"}, "agent": {"model": "sim"}, "input": TURN}
"""A new session: an inline agent on the sim, no environment, one turn."""


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
        client.responses.create(model="sim", input=TURN, conversation=conv.id)

    def session(_: int) -> str:
        return client.beta.agents.sessions.create(**SESSION).id  # type: ignore[arg-type]

    with ThreadPoolExecutor(8) as pool:
        if kind == "conversations":
            list(pool.map(conversation, range(n)))
            return
        ids = list(pool.map(session, range(n)))
        for session_id in ids:  # every one idle (its turn answered) before measuring
            while client.beta.agents.sessions.retrieve(session_id).status != "idle":
                time.sleep(0.05)


def measure(kind: str, n: int, settle_s: float) -> dict[str, Any]:
    """RSS by role on a fresh server, before and after ``n`` idle ones, then after ``n`` more."""
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
        fill(client, kind, n)
        time.sleep(settle_s)
        again = memory(lab)
    finally:
        lab.close()
    grew = {k: round(after[k] - before[k], 1) for k in after}
    grew_again = {k: round(again[k] - after[k], 1) for k in after}
    log(f"{kind}: {n} in {took:.0f} s; grew {grew}; {n} more grew {grew_again}")
    return {"before": before, "after": after, "grew": grew, "fill_s": round(took, 1), "again": again,
            "grew_again": grew_again}  # fmt: skip


def retained(kind: str, n: int, settle_s: float, rounds: int = 3) -> dict[str, Any]:
    """What ``n`` idle ones keep in the process serving them, each of ``rounds`` times: the HTTP app
    (its routes, the runtime, the sessions' service, the host) in this process over
    :meth:`Runtime.local`, filled by :func:`fill` over loopback HTTP. Per one: the Python heap still
    allocated (``tracemalloc``, after a collection) and DuckDB's memory; from the file at the end,
    its rows' bytes (the text of every column). Each round is measured ``settle_s`` after it ends
    (a host keeps an ended run followable for :data:`~troupe.runtime.runs.ENDED_KEPT_S`). The
    first round fills the host's message cache (``cache_size``, 1,000 threads); past it, the least
    recently used idle thread is dropped."""
    from tests.servers import LazyRuntime, serve_app
    from troupe.serve.app import create_app
    from troupe.serve.config import ServerSettings

    def heap() -> int:
        time.sleep(settle_s)
        gc.collect()
        return tracemalloc.get_traced_memory()[0]

    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "troupe.duckdb")
        runtime = LazyRuntime(storage_path=path)
        heap_each: list[int] = []
        with serve_app(create_app(runtime, ServerSettings())) as url:
            try:
                client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
                fill(client, kind, 20)  # first use of every path
                store = runtime.runtime.store
                assert isinstance(store, AsyncStore)  # the DuckDB store, in this process
                tracemalloc.start()
                try:
                    duckdb_before = store.store.memory()
                    before = heap()
                    for _ in range(rounds):
                        fill(client, kind, n)
                        after = heap()
                        heap_each.append(round((after - before) / n))
                        before = after
                finally:
                    tracemalloc.stop()
                duckdb_after = store.store.memory()
            finally:
                runtime.close()
        rows = _row_bytes(path)
    total = n * rounds + 20
    duckdb_each = round((duckdb_after["used_bytes"] - duckdb_before["used_bytes"]) / (n * rounds))
    log(f"{kind}, in one process: heap {heap_each} B each per round, DuckDB memory +{duckdb_each} B each, "
        f"rows {round(sum(rows.values()) / total)} B each")
    return {"heap_bytes_each": heap_each, "duckdb_memory_bytes_each": duckdb_each,
            "row_bytes_each": {table: round(size / total) for table, size in rows.items()}}  # fmt: skip


def _row_bytes(path: str) -> dict[str, int]:
    """Each table's rows' bytes in the DuckDB file at ``path``: every column's text, summed."""
    import duckdb

    with duckdb.connect(path, read_only=True) as conn:
        out = {}
        for (table,) in conn.execute("SELECT table_name FROM duckdb_tables() WHERE table_name != 'schema_version'").fetchall():
            columns = [row[0] for row in conn.execute(f'DESCRIBE "{table}"').fetchall()]
            text = " + ".join(f'coalesce(strlen(CAST("{c}" AS VARCHAR)), 0)' for c in columns)
            size = conn.execute(f'SELECT coalesce(sum({text}), 0) FROM "{table}"').fetchone()
            if size and size[0]:
                out[table] = int(size[0])
        return out


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
    doc["in_process"] = {kind: retained(kind, args.n, args.settle_s) for kind in ("conversations", "sessions")}
    conv, sess = doc["result"]["conversations"]["grew"], doc["result"]["sessions"]["grew"]
    bound = round(max(conv["total"], 0.0) * TOLERANCE + 5.0, 1)  # 5 MiB: what RSS moves between runs alone
    heap = {kind: round(statistics.mean(r["heap_bytes_each"])) for kind, r in doc["in_process"].items()}
    heap_bound = round(heap["conversations"] * TOLERANCE)
    doc["verdicts"] = [
        {"target": f"what an idle session keeps in the process hosting it ≤ an idle conversation (× {TOLERANCE}): "
                   "Python heap bytes each, over the three rounds", "unit": "B",
         "value": heap["sessions"], "bound": heap_bound, "met": heap["sessions"] <= heap_bound},
        {"target": f"{args.n} idle sessions' RSS growth ≤ {args.n} idle conversations' (× {TOLERANCE} + 5 MiB)",
         "unit": "MiB", "value": sess["total"], "bound": bound, "met": sess["total"] <= bound},
    ]  # fmt: skip
    out_dir = (Path(SCRATCH, "results", "idle_sessions") if args.quick
               else Path(ROOT, "benchmarks", "results", "idle_sessions"))  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{datetime.date.today().isoformat()}-{commit}-idle-sessions"
    Path(f"{stem}.json").write_text(json.dumps(doc, indent=2) + "\n")
    lines = [f"# Idle sessions against idle conversations ({doc['created_at']}, commit {commit})", "",
             f"Machine: {describe_machine(doc['machine'])}. Command: `{doc['command']}`. N = {args.n}; each kind on a "
             "fresh `troupe serve`, RSS (MiB) by role before and after, then after N more, the DuckDB file (MiB).", "",
             "| kind | fill s | ingress replica | storage actor | other | total | DuckDB file |", "|---|---|---|---|---|---|---|",
             *(f"| {kind}{label} | {r['fill_s'] if key == 'grew' else ''} | +{r[key]['ingress replica']} | "
               f"+{r[key]['storage actor']} | +{r[key]['other']} | +{r[key]['total']} | +{r[key]['duckdb_file']} |"
               for kind, r in doc["result"].items()
               for key, label in (("grew", ""), ("grew_again", f", {args.n} more"))), "",
             "The HTTP app in one process (over `Runtime.local`), three rounds of N each: the Python heap each one keeps "
             "(`tracemalloc`, per round, measured once the round is idle; the first fills the host's message cache of 1,000 threads), DuckDB's memory (`duckdb_memory()`) per one, and the bytes of its rows "
             "(every column's text) by table.", "",
             "| kind | heap B each (rounds) | DuckDB memory B each | row bytes each |", "|---|---|---|---|",
             *(f"| {kind} | {', '.join(map(str, r['heap_bytes_each']))} | {r['duckdb_memory_bytes_each']} | "
               f"{sum(r['row_bytes_each'].values())}: "
               + ", ".join(f"{t} {b}" for t, b in sorted(r["row_bytes_each"].items(), key=lambda tb: -tb[1])) + " |"
               for kind, r in doc["in_process"].items()), "",
             *(f"- {v['target']}: **{v['value']} {v['unit']}** (bound {v['bound']}): {'met' if v['met'] else 'NOT met'}"
               for v in doc["verdicts"]), ""]  # fmt: skip
    Path(f"{stem}.md").write_text("\n".join(lines))
    log(f"wrote {os.path.relpath(stem, ROOT)}.{{json,md}}")
    for v in doc["verdicts"]:
        log(f"{v['target']}: {v['value']} {v['unit']} (bound {v['bound']}) {'met' if v['met'] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
