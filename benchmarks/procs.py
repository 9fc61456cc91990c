"""Processes the benchmark runner starts: launch, wait until ready, measure, stop.

Every server binds 127.0.0.1 on a port picked free here. Each process starts in its own
session (process group), so stopping it reaches its children too (Ray's raylet and workers,
uvicorn workers) and nothing else: SIGTERM to the group, then SIGKILL after a grace period.
CPU and memory are summed over the process and its descendants (psutil), so a figure is the
server's own cost whatever else runs on the machine.

Example::

    sim = Proc.start("sim", [TROUPE, "sim", "--port", str(port)], log_dir)
    sim.wait_http(f"http://127.0.0.1:{port}/health")
    cpu0 = sim.cpu_s(); ...; sim.cpu_s() - cpu0
    sim.stop()
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import psutil

__all__ = ["Proc", "free_port", "wait_until", "http_ok", "role"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    try:
        return httpx.get(url, timeout=timeout_s).status_code < 300
    except httpx.HTTPError:
        return False


def wait_until(condition: Callable[[], bool], *, timeout_s: float, what: str, alive: Callable[[], bool]) -> None:
    """Poll ``condition`` until it holds; raise when ``timeout_s`` passes or the process dies."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if not alive():
            raise RuntimeError(f"{what}: the process exited during start-up")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not ready within {timeout_s:.0f} s")
        time.sleep(0.1)


def role(proc: psutil.Process) -> str:
    """What a process is: Ray's title for its workers without the method running now
    (``ray::ServeController``, not ``ray::ServeController.listen_for_change``), a Python
    process's script or module, else the program's name."""
    cmd = proc.cmdline()
    if cmd and cmd[0].startswith("ray::"):
        return cmd[0].split()[0].split(".")[0]
    if "-m" in cmd[:-1]:
        return cmd[cmd.index("-m") + 1]
    script = next((os.path.basename(a) for a in cmd[1:3] if a.endswith(".py")), None)
    return script or proc.name()


@dataclass(eq=False)
class Proc:
    """A started server process and its descendants."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: str
    _seen: dict[int, psutil.Process] = field(default_factory=dict)
    _gone_cpu: float = 0.0

    @classmethod
    def start(
        cls,
        name: str,
        argv: Sequence[str],
        log_dir: str,
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> Proc:
        """Start ``argv`` in a new session, stdout and stderr to ``log_dir/NAME.log``."""
        os.makedirs(log_dir, exist_ok=True)
        log_path = os.path.join(log_dir, f"{name}.log")
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True,
            )
        return cls(name=name, popen=popen, log_path=log_path)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 5) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return "".join(f.readlines()[-lines:]).strip()
        except OSError:
            return ""

    def wait_http(self, url: str, timeout_s: float = 60.0) -> None:
        wait_until(lambda: http_ok(url), timeout_s=timeout_s, what=f"{self.name} ({url})", alive=self.alive)

    def wait_log(self, text: str, timeout_s: float = 120.0) -> None:
        def found() -> bool:
            try:
                with open(self.log_path, encoding="utf-8", errors="replace") as f:
                    return text in f.read()
            except OSError:
                return False

        wait_until(found, timeout_s=timeout_s, what=f"{self.name} (waiting for {text!r})", alive=self.alive)

    def processes(self) -> list[psutil.Process]:
        """The process and its descendants now (remembered, to account for their CPU)."""
        try:
            root = psutil.Process(self.pid)
            found = [root, *root.children(recursive=True)]
        except psutil.Error:
            found = []
        for proc in found:
            self._seen.setdefault(proc.pid, proc)
        return found

    def cpu_s(self) -> float:
        """CPU seconds (user + system) used so far by the process tree, exited descendants
        included as far as they were seen."""
        self.processes()
        total = 0.0
        for pid, proc in list(self._seen.items()):
            try:
                times = proc.cpu_times()
                total += times.user + times.system
                proc._last_cpu = times.user + times.system  # type: ignore[attr-defined]
            except psutil.Error:
                self._gone_cpu += getattr(proc, "_last_cpu", 0.0)
                del self._seen[pid]
        return total + self._gone_cpu

    def cpu_by_process(self) -> dict[int, tuple[str, float]]:
        """The CPU seconds (user + system) of each live process of the tree, with its role."""
        found = {}
        for proc in self.processes():
            try:
                times = proc.cpu_times()
                found[proc.pid] = (role(proc), times.user + times.system)
            except psutil.Error:
                continue
        return found

    def memory(self) -> dict[str, Any]:
        """Resident memory of the tree: RSS and PSS (shared pages split between sharers), MiB."""
        rss = pss = 0
        count = 0
        for proc in self.processes():
            try:
                info = proc.memory_full_info()
            except psutil.Error:
                continue
            count += 1
            rss += info.rss
            pss += getattr(info, "pss", info.rss)
        return {"processes": count, "rss_mib": round(rss / 2**20, 1), "pss_mib": round(pss / 2**20, 1)}

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM the process group, wait up to ``grace_s``, then SIGKILL what is left of it."""
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)  # stragglers of this group only
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
