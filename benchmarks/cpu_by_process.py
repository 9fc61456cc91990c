"""CPU per response by process, under a non-streaming load: where a server's CPU goes.

    .venv/bin/python -m benchmarks.cpu_by_process ROOT PID [--requests N] [--concurrency C]

ROOT is a Responses API root (``…/v1``), PID the process whose tree serves it: for
``python -m benchmarks.troupe_server`` (started with ``setsid``), that process, whose
descendants are Ray's daemons and every worker. Sends 100 requests to warm up, then N at
concurrency C (``{"model": "sim", "input": "[[tokens 16]]"}``, stored, as scenario 2 at c=16;
``CPU_BY_PROCESS_BODY='{"store": false}'`` in the environment merges more fields in), and
prints the throughput and each process kind's CPU per response (``ray::`` titles kept;
background CPU included, not subtracted). Two commits side by side: start each one's
``benchmarks.troupe_server`` in turn (an older one from a ``git worktree`` with ``PYTHONPATH``
pointing at it, as :mod:`benchmarks.ab` does) and run this against each, twice or more.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import time

import httpx
import psutil

__all__ = ["main"]

BODY = {"model": "sim", "input": "[[tokens 16]]", **json.loads(os.environ.get("CPU_BY_PROCESS_BODY", "{}"))}


def _tree(pid: int) -> dict[int, tuple[str, float]]:
    """Each live process of ``pid``'s tree: its kind (the ``ray::`` title, or the name) and CPU seconds."""
    root = psutil.Process(pid)
    out = {}
    for proc in [root, *root.children(recursive=True)]:
        try:
            command, times = proc.cmdline(), proc.cpu_times()
            kind = command[0] if command and command[0].startswith("ray::") else proc.name()
            out[proc.pid] = (kind, times.user + times.system)
        except psutil.Error:
            continue  # gone meanwhile
    return out


async def _load(root: str, pid: int, requests: int, concurrency: int) -> tuple[dict, dict, float]:
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=2 * concurrency)) as http:

        async def one() -> None:
            async with gate:
                reply = await http.post(f"{root}/responses", json=BODY)
                reply.raise_for_status()

        await asyncio.gather(*(one() for _ in range(100)))
        before, began = _tree(pid), time.monotonic()
        await asyncio.gather(*(one() for _ in range(requests)))
        return before, _tree(pid), time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", help="the API root, …/v1")
    parser.add_argument("pid", type=int, help="the process whose tree serves it")
    parser.add_argument("--requests", type=int, default=1600)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    before, after, took = asyncio.run(_load(args.root, args.pid, args.requests, args.concurrency))
    by_kind: collections.Counter[str] = collections.Counter()
    for pid, (kind, cpu) in after.items():
        by_kind[kind] += cpu - before.get(pid, (kind, 0.0))[1]
    n = args.requests
    print(f"{n} responses in {took:.1f} s: {n / took:.0f}/s; the tree's CPU {1000 * sum(by_kind.values()) / n:.2f} ms a response")
    for kind, cpu in by_kind.most_common(12):
        print(f"  {1000 * cpu / n:6.3f} ms  {kind}")


if __name__ == "__main__":
    main()
