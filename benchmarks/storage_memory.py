"""What big requests leave the storage actor holding: its memory after each, and once idle.

Starts its own local Ray instance (never touches another one), runs the Ray runtime
(``Runtime.on_ray``) with a DuckDB file under ``benchmarks/scratch/``, and sends
requests to the ``sim`` model whose input is one message of ``--mb`` megabytes, all
in one conversation (the sim echoes the input, so each stores about 5x that as JSON:
the response, its input and output items, and the conversation's copy). It prints
the storage actor's RSS and USS (private memory: Ray's shared object store pages
are in RSS, not in USS) after each request, then after ``--idle`` seconds.

    .venv/bin/python -m benchmarks.storage_memory --mb 10 --requests 8

Measured on the 2-core machine (10 MB, 8 requests), USS in MB: 60 at start; before
the allocator fix 247 after the first request, 600 after the eighth and still 600
idle; after it, 222 / 390 right after a request and 105 after 3 s idle.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from pathlib import Path

import psutil

SCRATCH = Path(__file__).resolve().parent / "scratch"


def _storage_pid() -> int:
    """The storage actor's worker process: a descendant of this driver (which started Ray)."""
    for child in psutil.Process().children(recursive=True):
        try:
            if "StorageService" in " ".join(child.cmdline()):
                return child.pid
        except psutil.Error:
            continue
    raise RuntimeError("no storage actor process found")


def _memory(pid: int) -> str:
    info = psutil.Process(pid).memory_full_info()
    return f"rss={info.rss / 2**20:.0f} MB uss={info.uss / 2**20:.0f} MB"


async def _run(args: argparse.Namespace, path: Path) -> None:
    from troupe.protocol import parse_create_request
    from troupe.runtime import Runtime, RuntimeSettings

    namespace = f"storage-memory-{uuid.uuid4().hex[:8]}"
    runtime = await Runtime.on_ray(RuntimeSettings(storage_path=str(path), namespace=namespace, pool_size=1))
    pid = _storage_pid()
    print("start", _memory(pid), flush=True)
    conversation = await runtime.create_conversation("")
    for i in range(args.requests):
        body = {"model": "sim", "input": "y" * int(args.mb * 2**20), "conversation": conversation["id"]}
        started = time.monotonic()
        response = await runtime.respond("", parse_create_request(body))
        print(f"request {i}: {response['status']} in {time.monotonic() - started:.1f} s,", _memory(pid), flush=True)
    time.sleep(args.idle)
    print(f"idle {args.idle:g} s", _memory(pid), flush=True)
    await runtime.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=10.0, help="input size of each request (default 10)")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--idle", type=float, default=3.0, help="seconds to wait before the last reading")
    args = parser.parse_args()

    import ray

    SCRATCH.mkdir(exist_ok=True)
    path = SCRATCH / f"storage-memory-{os.getpid()}.duckdb"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        asyncio.run(_run(args, path))
    finally:
        ray.shutdown()  # only the instance started above
        for suffix in ("", ".wal"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
