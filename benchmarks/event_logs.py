"""What keeping a plain response's event log costs: none, the events as written, packed.

    .venv/bin/python -m benchmarks.event_logs              # about a minute on 2 cores
    .venv/bin/python -m benchmarks.event_logs --quick      # smoke test: tiny counts, benchmarks/scratch/

Every stored response keeps its event log (``[runtime] event_logs = "all"``, the default), so
that ``GET /v1/responses/{id}?stream=true`` replays it. The log is packed against the Response
stored with it (``troupe.storage.event_log.pack``, in the host, before the record leaves it).
This measures what that costs on the write path ``troupe serve`` uses by default (replica
placement): the record goes through a ``JournalingStoreClient`` (the writer journal on disk,
then batches shipped to the storage actor, which writes them to DuckDB). The driver process
here stands in for the ingress replica.

The payload is one 64-token answer of the ``sim`` model (``[[tokens 64]]``), its events made by
the real loop and ``WireWriter`` in-process: 72 wire events. Three modes, written ``--records``
times each, 16 writers at once, interleaved in rounds (the order rotated) so that drift hits
all three alike:

* ``none``: no event log (``event_logs = "durable"``, a foreground response that ran no tool);
* ``raw``: the events as written (what ``event_logs = "all"`` stored before packing);
* ``packed``: the packed log (now).

For each: the storage actor's CPU per record (its process, psutil), the writing process's CPU
per record (``time.process_time``: packing, the journal's encoding, the hop), the bytes of the
log's JSON, and the time to read a log back (``response_events``: the DuckDB read and the
unpacking, from the driver; p50). Results: ``benchmarks/results/event_logs/<date>-<commit>.{json,md}``
with the machine and the commit (``--quick``: ``benchmarks/scratch/results/``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from troupe.bench.machine import describe_machine, machine_info

ROOT = Path(__file__).resolve().parent.parent
SCRATCH = ROOT / "benchmarks" / "scratch"
MODES = ("none", "raw", "packed")
WRITERS = 16


def log(message: str) -> None:
    print(f"[event_logs {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


async def _answer() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A 64-token sim answer: its Response and its wire events, as a host makes them."""
    from troupe.agentloop.driver import prepare, run_loop
    from troupe.agentloop.events import Checkpoint, StepTraced
    from troupe.agentloop.writer import WireWriter
    from troupe.protocol import new_id, new_response_id, parse_create_request
    from troupe.sim.model import SimModel

    request = parse_create_request({"model": "sim", "input": "[[tokens 64]]"})
    writer = WireWriter(request, response_id=new_response_id(new_id("thread")), created_at=int(time.time()))
    events: list[dict[str, Any]] = []
    async for event in run_loop(prepare(request, [], []), model=SimModel(), executors=[]):
        if not isinstance(event, StepTraced | Checkpoint):
            events.extend(writer.write(event))
    return writer.response, events


def _record(mode: str, response: dict[str, Any], events: list[dict[str, Any]]) -> Any:
    """A fresh record of the answer (a new id, so each is its own row), its log as ``mode`` says."""
    from troupe.protocol import new_id, new_response_id, thread_of_response
    from troupe.storage import ResponseRecord, event_log

    rid = new_response_id(new_id("thread"))
    response = {**response, "id": rid}
    log_ = {"none": None, "raw": events, "packed": None}[mode]
    if mode == "packed":
        log_ = event_log.pack(events, response)
    now = time.time()
    return ResponseRecord(
        tenant="", response=response, input_items=[], thread_id=thread_of_response(rid) or rid,
        started_at=now, ended_at=now, events=log_,
    )  # fmt: skip


async def _write(store: Any, mode: str, pending: Any, response: dict[str, Any], events: list[dict[str, Any]],
                 ids: list[str]) -> None:  # fmt: skip
    """One writer: a record of the answer per item of ``pending``, its log as ``mode`` says."""
    for _ in pending:
        record = _record(mode, response, events)
        ids.append(record.response["id"])
        await store.write_response(record)


async def measure(settings: Any, args: argparse.Namespace) -> dict[str, Any]:
    import ray

    from troupe.runtime.ray.storage_actor import JournalingStoreClient, storage_actor
    from troupe.storage import event_log

    response, events = await _answer()
    store = await JournalingStoreClient.connect(settings)
    actor = psutil.Process(ray.get(storage_actor(settings).__ray_call__.remote(lambda self: os.getpid())))
    cpu = {m: {"actor_s": 0.0, "writer_s": 0.0, "records": 0} for m in MODES}
    ids: dict[str, list[str]] = {m: [] for m in MODES}
    per_round = max(1, args.records // args.rounds)
    for round_ in range(args.rounds):
        for mode in MODES[round_ % 3 :] + MODES[: round_ % 3]:
            pending = iter(range(per_round))  # shared by the writers
            actor0, writer0 = actor.cpu_times(), time.process_time()
            await asyncio.gather(*(_write(store, mode, pending, response, events, ids[mode]) for _ in range(WRITERS)))
            await store.get_response("", ids[mode][-1])  # waits for the journal to reach the actor
            actor1 = actor.cpu_times()
            cpu[mode]["actor_s"] += (actor1.user + actor1.system) - (actor0.user + actor0.system)
            cpu[mode]["writer_s"] += time.process_time() - writer0
            cpu[mode]["records"] += per_round
    reads: dict[str, list[float]] = {}
    for mode in ("raw", "packed"):
        for rid in ids[mode][: args.reads]:
            started = time.perf_counter()
            replayed = await store.response_events("", rid)
            reads.setdefault(mode, []).append(time.perf_counter() - started)
            assert replayed is not None and len(replayed) == len(events), "a log did not come back whole"
    await store.close()
    sizes = {"raw": len(json.dumps(events)), "packed": len(json.dumps(event_log.pack(events, response)))}
    return {
        "events": len(events),
        "response_bytes": len(json.dumps(response)),
        "modes": {
            m: {
                "storage_actor_cpu_ms_per_record": 1000 * c["actor_s"] / c["records"],
                "writer_cpu_ms_per_record": 1000 * c["writer_s"] / c["records"],
                "log_bytes": sizes.get(m, 0),
                "read_p50_ms": 1000 * statistics.median(reads[m]) if m in reads else None,
                "records": c["records"],
            }
            for m, c in cpu.items()
        },
    }


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def render(report: dict[str, Any]) -> str:
    rows = [
        f"| {m} | {v['storage_actor_cpu_ms_per_record']:.3f} | {v['writer_cpu_ms_per_record']:.3f} | "
        f"{v['log_bytes']:,} | {_ms(v['read_p50_ms'])} |"
        for m, v in report["results"]["modes"].items()
    ]
    return "\n".join(
        [
            f"# Event logs of plain responses: what they cost — {report['commit']}"
            + (" (dirty)" if report["worktree_dirty"] else ""),
            "",
            f"Machine: {describe_machine(report['machine'])}. Command: `{report['command']}`.",
            "",
            f"One 64-token sim answer ({report['results']['events']} wire events; the Response is "
            f"{report['results']['response_bytes']:,} bytes of JSON), written {report['params']['records']} times per mode "
            f"through a JournalingStoreClient ({WRITERS} writers at once, {report['params']['rounds']} interleaved rounds).",
            "",
            "| log | storage actor CPU, ms/record | writer CPU, ms/record | log JSON, bytes | read back p50, ms |",
            "|---|---:|---:|---:|---:|",
            *rows,
            "",
        ]
    )


def _git(*argv: str) -> str | None:
    done = subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True, timeout=10)
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, help="records per mode (default 3000; --quick 96)")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds (default 6)")
    parser.add_argument("--reads", type=int, default=200, help="logs read back per mode (default 200)")
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny counts, results in benchmarks/scratch/")
    args = parser.parse_args(argv)
    args.records = args.records or (96 if args.quick else 3000)
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    meta = {
        "created_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit,
        "worktree_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "command": " ".join(["python -m benchmarks.event_logs", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine_info(),
        "params": {"records": args.records, "rounds": args.rounds, "reads": args.reads, "writers": WRITERS},
    }
    log(describe_machine(meta["machine"]))
    work = SCRATCH / "event_logs" / f"run-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    from troupe.runtime import RuntimeSettings
    from troupe.serve.deployment import LOCAL_RAY_ENV

    for name, value in LOCAL_RAY_ENV.items():
        os.environ.setdefault(name, value)
    settings = RuntimeSettings(storage_path=str(work / "logs.duckdb"), namespace=f"event-logs-{uuid.uuid4().hex[:8]}")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        results = asyncio.run(measure(settings, args))
    finally:
        ray.shutdown()  # only the instance started above
        shutil.rmtree(work, ignore_errors=True)
    report = {**meta, "results": results}
    out_dir = SCRATCH / "results" if args.quick else ROOT / "benchmarks" / "results" / "event_logs"
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{datetime.date.today().isoformat()}-{commit}"
    Path(f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    markdown = render(report)
    Path(f"{stem}.md").write_text(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
