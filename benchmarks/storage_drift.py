"""The storage actor's work in one plain process, and its memory beside DuckDB's own count.

Writes batches of 24 responses through :class:`~troupe.storage.duckdb_store.DuckDBStore`
(each with an input and an output item and two step traces; every fifth in a new
conversation; a writer-journal position per batch) and reads after each batch (a response,
input items, a conversation's items), as the storage actor does under the soak. Every
``--every`` responses it prints the process RSS, DuckDB's ``duckdb_memory()`` total, the
difference (memory DuckDB does not count: its unmanaged allocations, Python), the file size
and DuckDB's larger tags. ``--row-group-rows`` overrides ``ROW_GROUP_ROWS`` to compare.

    .venv/bin/python -m benchmarks.storage_drift --responses 300000 --row-group-rows 16384

Measured on the 2-core machine (two runs side by side, 128MB limit), RSS − DuckDB from 50,000
to 300,000 responses: 107 → 139 MiB with 2,048 rows per group, 104 → 122 with 16,384,
102 → 115 with 32,768, 112 → 127 with 122,880 (docs/performance.md, "Load, overload and soak").
``--reopen-every N`` closes and reopens the store every N responses: with 16,384 rows per
group, reopening at 100,000 and 200,000 gave back DuckDB's counted cache (71 → 9 MiB) but
none of the memory it does not count (about 100 MiB before and after), so reopening the
file now and then would not bound it.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import psutil

from troupe.storage import duckdb_store
from troupe.storage.base import ResponseRecord, StepTrace
from troupe.storage.duckdb_store import connection

SCRATCH = Path(__file__).resolve().parent / "scratch"


def _message(item_id: str, role: str, text: str) -> dict:
    kind = "input_text" if role == "user" else "output_text"
    return {"type": "message", "id": item_id, "role": role, "status": "completed",
            "content": [{"type": kind, "text": text}]}  # fmt: skip


def _record(rid: str, conversation: str | None, pad: str) -> ResponseRecord:
    output = [_message(f"msg_{rid}_out", "assistant", pad)]
    response = {"id": rid, "object": "response", "created_at": 1_700_000_000, "status": "completed",
                "model": "sim", "output": output, "conversation": {"id": conversation} if conversation else None,
                "previous_response_id": None, "usage": None}  # fmt: skip
    traces = [StepTrace(response_id=rid, seq=i, kind="model", name="sim", started_at=1.0, duration_s=0.1)
              for i in range(2)]  # fmt: skip
    return ResponseRecord(
        tenant="", response=response, input_items=[_message(f"msg_{rid}_in", "user", pad + rid)],
        thread_id=conversation or rid, started_at=1.0, ended_at=1.1, ttft_s=0.01, traces=traces,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--responses", type=int, default=300_000)
    parser.add_argument("--every", type=int, default=25_000, help="print a line every this many responses")
    parser.add_argument("--row-group-rows", type=int, default=duckdb_store.ROW_GROUP_ROWS)
    parser.add_argument("--memory-limit", default="128MB")
    parser.add_argument("--reopen-every", type=int, default=0,
                        help="close and reopen the store every this many responses (0: never)")
    args = parser.parse_args()

    connection.ROW_GROUP_ROWS = args.row_group_rows  # read (there) when the file is attached
    SCRATCH.mkdir(exist_ok=True)
    path = SCRATCH / f"storage-drift-{args.row_group_rows}.duckdb"
    for leftover in (path, Path(f"{path}.wal")):
        leftover.unlink(missing_ok=True)
    store = duckdb_store.DuckDBStore(str(path), memory_limit=args.memory_limit)
    process, pad, written, lsn, started = psutil.Process(), "lorem ipsum " * 20, 0, 0, time.monotonic()
    conversation = None  # the newest
    while written < args.responses:
        batch = []
        for _ in range(24):
            written += 1
            in_conversation = written % 5 == 0
            if in_conversation:
                conversation = f"conv_{written:09d}"
                store.create_conversation("", {"id": conversation, "object": "conversation",
                                               "created_at": 1_700_000_000, "metadata": {}}, [])  # fmt: skip
            batch.append(_record(f"resp_{written:09d}", conversation if in_conversation else None, pad))
        if args.reopen_every and written % args.reopen_every < 24 and written > 24:
            store.close()
            store = duckdb_store.DuckDBStore(str(path), memory_limit=args.memory_limit)
            print(f"{written:8d} responses  reopened", flush=True)
        lsn += len(batch)
        store.write_responses(batch, journal_lsn=lsn, journal="w-drift")
        store.get_response("", f"resp_{written - 7:09d}")
        store.list_input_items("", f"resp_{written - 3:09d}")
        if conversation:
            store.list_conversation_items("", conversation)
        if written % args.every < 24:
            tags = dict(store.query("SELECT tag, memory_usage_bytes FROM duckdb_memory()")[1])
            counted, rss = sum(tags.values()) / 2**20, process.memory_info().rss / 2**20
            big = " ".join(f"{k}={v / 2**20:.0f}" for k, v in tags.items() if v > 2**20)
            print(f"{written:8d} responses  RSS {rss:5.0f} MiB  DuckDB {counted:5.0f}  RSS - DuckDB {rss - counted:5.0f}"
                  f"  file {os.path.getsize(path) / 2**20:5.0f}  {time.monotonic() - started:4.0f} s  {big}", flush=True)  # fmt: skip
    store.close()


if __name__ == "__main__":
    main()
