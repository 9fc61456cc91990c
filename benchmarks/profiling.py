"""Profile Troupe where it is far from the limit: py-spy on its processes under load.

Two loads on the main Troupe app (:data:`benchmarks.scenarios.MAIN`, the replica placement) at
its replica's own port (direct ingress), each for a fixed time, with ``py-spy record`` attached
to every Troupe process of the roles that do the work and psutil counting their CPU: Serve's
proxy (out of the path, but listed), the main app's ingress replica (with the replica placement
the agent loop runs there too: there are no conversation host actors in its path) and the
storage actors (every app has one; their processes cannot be told apart by title):

* streaming: scenario 1's input at concurrency 16 (overhead per streamed token);
* non-streaming with ``store`` on: scenario 2's input at concurrency 16 (store-on throughput).

For each load and role it keeps the CPU per response and the hottest frames: the Troupe
frames by cumulative share of samples (where Troupe's own code spends), and the leaf frames
by self share (what is hot underneath). Samples without a Python frame on top are counted
apart as ``native``: py-spy samples threads that are not idle by its reckoning, which
includes a thread waiting for the GIL and uvloop calling back into Python, so ``native`` is
not CPU spent outside Python.

Where Linux's ``perf`` may sample the replica, the ingress replica's on-CPU time is also split
by the code it ran (``perf record``, then ``perf report --sort dso``): the Python interpreter,
the kernel (system calls, the loopback TCP stack), libc, uvloop and the other extension
modules. That is the honest answer to "how much of it is Python".
"""

from __future__ import annotations

import asyncio
import collections
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

from troupe.bench.loadgen import LoadSpec, run_load

from .measure import Ctx, log
from .procs import role as process_role
from .scenarios import MAIN, MAIN_APP

__all__ = ["profile_troupe"]

ROLES = {
    "Serve proxy": "ProxyActor",
    "ingress replica (the loop)": f"ServeReplica:{MAIN_APP}:",
    "storage actor": "StorageService",
}
"""Role → what its processes' titles contain (:func:`benchmarks.procs.role`)."""
_NATIVE = ("threading.py", "concurrent/futures/thread.py", "ray/_private/worker.py")


_PERF_GROUPS = (
    ("Python interpreter", ("libpython",)),
    ("kernel", ("[kernel",)),
    ("libc", ("libc.so", "libm.so", "ld-linux")),
    ("uvloop", ("uvloop", "loop.cpython")),
    ("json", ("_json.",)),
    ("Ray's core (_raylet)", ("_raylet",)),
)
"""perf's shared objects → the group they count for (the rest: "other extension modules")."""


def _perf_split(report: str) -> dict[str, float]:
    """``perf report --sort dso --stdio`` output → percent of on-CPU samples per group."""
    split: collections.Counter[str] = collections.Counter()
    for line in report.splitlines():
        pct, _, dso = line.strip().partition("%")
        try:
            share = float(pct)
        except ValueError:
            continue  # a header, a comment, a blank line
        group = next((name for name, marks in _PERF_GROUPS if any(m in dso for m in marks)), "other extension modules")
        split[group] += share
    return {group: round(share, 1) for group, share in split.most_common()}


def _perf_record(pid: int, seconds: float, out: str) -> subprocess.Popen[bytes] | None:
    """Start ``perf record`` on ``pid`` for ``seconds``; None when perf is missing or refused."""
    perf = shutil.which("perf")
    if perf is None:
        return None
    try:
        return subprocess.Popen([perf, "record", "-F", "499", "-p", str(pid), "-o", out, "--", "sleep", str(int(seconds))],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return None


def _perf_report(out: str) -> dict[str, float]:
    perf = shutil.which("perf")
    if perf is None or not os.path.exists(out):
        return {}
    done = subprocess.run([perf, "report", "-i", out, "--sort", "dso", "--stdio", "-g", "none"],
                          capture_output=True, text=True, timeout=120, check=False)
    return _perf_split(done.stdout) if done.returncode == 0 else {}


def _py_spy() -> str | None:
    found = shutil.which("py-spy")
    local = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return found or (local if os.path.exists(local) else None)


def _aggregate(paths: list[str], top: int = 8) -> dict[str, Any]:
    selfs: collections.Counter[str] = collections.Counter()
    troupe: collections.Counter[str] = collections.Counter()
    total = native = 0
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for line in lines:
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            frames = stack.split(";")
            total += n
            leaf = frames[-1]
            if not leaf.strip() or any(marker in leaf for marker in _NATIVE):
                native += n
            else:
                selfs[leaf] += n
            for frame in set(frames):
                if "troupe/" in frame:
                    troupe[frame] += n
    share = (lambda n: round(100 * n / total, 1)) if total else (lambda n: 0.0)
    return {
        "samples": total,
        "native_pct": share(native),
        "self": [[share(n), f] for f, n in selfs.most_common(top)],
        "troupe_cumulative": [[share(n), f] for f, n in troupe.most_common(top)],
    }


async def _one_load(ctx: Ctx, py_spy: str, name: str, body: dict[str, Any], seconds: float) -> dict[str, Any]:
    target = ctx.target(MAIN)
    assert target is not None and target.proc is not None
    by_role: dict[str, list[Any]] = {role: [] for role in ROLES}
    for proc in target.proc.processes():
        try:
            proc_name = process_role(proc)
        except Exception:  # noqa: BLE001 - it exited
            continue
        for role, marker in ROLES.items():
            if marker in proc_name:
                by_role[role].append(proc)
    cpu0 = {p.pid: sum(p.cpu_times()[:2]) for procs in by_role.values() for p in procs}
    folder = tempfile.mkdtemp(prefix=f"profile-{name}-", dir=os.path.join(ctx.lab.scratch, "logs"))
    spies = []
    for role, procs in by_role.items():
        for proc in procs:
            out = os.path.join(folder, f"{role.replace(' ', '_')}-{proc.pid}.txt")
            spies.append((role, out, subprocess.Popen(
                [py_spy, "record", "--pid", str(proc.pid), "--duration", str(int(seconds)), "--rate", "100",
                 "--format", "raw", "--nonblocking", "-o", out],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
    replicas = by_role["ingress replica (the loop)"]
    perf_out = os.path.join(folder, "replica.perf.data")
    perf = _perf_record(replicas[0].pid, seconds, perf_out) if len(replicas) == 1 else None
    spec = LoadSpec(concurrency=16, requests=None, duration_s=seconds, timeout_s=120)
    run = await run_load(target.base_url, lambda _i: {**body, "model": target.model}, spec)
    for _, _, spy in spies:
        await asyncio.to_thread(spy.wait, 60)
    replica_by_code: dict[str, float] = {}
    if perf is not None:
        await asyncio.to_thread(perf.wait, 60)
        replica_by_code = await asyncio.to_thread(_perf_report, perf_out)
    ok = max(1, sum(1 for r in run.results if r.ok))
    roles = {}
    for role, procs in by_role.items():
        cpu = 0.0
        for p in procs:
            try:
                cpu += sum(p.cpu_times()[:2]) - cpu0[p.pid]
            except Exception:  # noqa: BLE001 - it exited
                pass
        roles[role] = {"processes": len(procs), "cpu_ms_per_response": round(cpu * 1000 / ok, 2),
                       **_aggregate([out for r, out, _ in spies if r == role])}
    return {"load": name, "responses": ok, "seconds": seconds, "roles": roles, "replica_by_code": replica_by_code}


async def profile_troupe(ctx: Ctx, seconds: float = 10.0) -> dict[str, Any]:
    """Profile the two loads; a JSON-ready dict (``skipped`` when py-spy or Troupe is missing)."""
    py_spy = _py_spy()
    if py_spy is None:
        return {"skipped": "py-spy is not installed"}
    if ctx.target(MAIN) is None:
        return {"skipped": "Troupe did not start"}
    loads = []
    for name, body in (
        ("streaming c=16", {"input": ctx.defs.streaming_input, "stream": True}),
        ("non-streaming store=on c=16", {"input": ctx.defs.throughput_input, "stream": False, "store": True}),
    ):
        log(f"profile: {name}, {seconds:.0f} s under py-spy")
        loads.append(await _one_load(ctx, py_spy, name, body, seconds))
    return {"tool": "py-spy record --rate 100 --nonblocking (no --idle)", "target": MAIN, "loads": loads}
