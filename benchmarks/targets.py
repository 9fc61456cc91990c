"""The servers under test, started on loopback: the bare sim, Troupe, the Serve floor, peers.

:class:`Lab` starts what a run needs and stops all of it (``with Lab(...) as lab``):

* ``sim``: ``troupe sim`` with no default latency (scenarios set it per request with
  ``[[latency …]]``): the physical limit, and the upstream model of everything else;
* ``troupe``: :mod:`benchmarks.troupe_server`, one Ray instance with Serve's direct ingress:
  targets ``troupe-replica`` (the main Troupe, :data:`benchmarks.scenarios.MAIN`: conversations
  hosted in the ingress replica, ``troupe serve``'s default), ``troupe-pooled``,
  ``troupe-dedicated`` and ``troupe-pooled-task`` (pooled, tools as a Ray task per call) at their
  replicas' own ports, the same apps through Serve's proxy as ``troupe-…-proxy``, model ``sim`` =
  the sim server over HTTP; and ``serve-floor``, the sim app itself inside one Serve replica of
  that instance (direct), what Serve alone costs;
* peers: SMG (``smg launch --backend openai`` in front of the sim's ``/v1/responses``) and
  Llama Stack (``remote::vllm`` on the sim's Chat Completions), each installed by its
  ``benchmarks/peers/setup_*.sh`` into its own virtual environment. A peer that cannot be
  installed or started is recorded as skipped with the reason, never faked.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import httpx

from .procs import Proc, free_port, wait_until
from .troupe_server import FLOOR_APP

__all__ = ["Target", "Lab", "ROOT"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BIN = os.path.dirname(sys.executable)


_OLD_APPS = ("pooled", "dedicated")
"""The apps of a benchmark server from before direct ingress, all behind Serve's proxy."""


def _printed_urls(proc: Proc) -> dict[str, dict[str, str]]:
    """The app URLs a benchmark server printed (its ``URLS {json}`` line); empty if none."""
    with open(proc.log_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("URLS "):
                return json.loads(line.removeprefix("URLS "))
    return {}


def _responds(base_url: str, model: str) -> bool:
    try:
        reply = httpx.post(f"{base_url}/responses", json={"model": model, "input": "[[say ok]]"}, timeout=10)
    except httpx.HTTPError:
        return False
    return reply.status_code == 200


@dataclass(eq=False)
class Target:
    """A Responses API endpoint under test."""

    name: str
    base_url: str
    model: str
    kind: str
    """``limit`` (the bare sim), ``floor`` (the sim app inside a Serve replica), ``troupe`` or ``peer``."""
    proc: Proc | None = None
    """Its own processes, for CPU and memory (None: measured elsewhere)."""


@dataclass(eq=False)
class Lab:
    """Starts the servers of one run; :meth:`close` (or leaving ``with``) stops them all."""

    scratch: str
    peers: bool = True
    procs: list[Proc] = field(default_factory=list)
    targets: dict[str, Target] = field(default_factory=dict)
    peer_status: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()

    @property
    def logs(self) -> str:
        return os.path.join(self.scratch, "logs")

    def _start(self, name: str, argv: list[str], **kwargs: Any) -> Proc:
        proc = Proc.start(name, argv, self.logs, **kwargs)
        self.procs.append(proc)
        return proc

    # -- the servers -----------------------------------------------------------------

    def start_sim(self) -> Target:
        port = free_port()
        proc = self._start("sim", [os.path.join(_BIN, "troupe"), "sim", "--host", "127.0.0.1", "--port", str(port),
                                   "--log-level", "warning"])
        proc.wait_http(f"http://127.0.0.1:{port}/health")
        target = Target("sim", f"http://127.0.0.1:{port}/v1", "sim", "limit", proc)
        self.targets["sim"] = target
        return target

    def start_troupe(
        self, sim_url: str, *, name: str = "troupe", checkout: str = ROOT, extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        """Troupe from ``checkout`` (another commit's worktree runs on this environment, its
        own code first on ``PYTHONPATH``). Each Troupe app becomes target ``<name>-<app>`` at its
        direct-ingress URL and ``<name>-<app>-proxy`` through Serve's proxy; the Serve floor
        becomes ``serve-floor`` (direct). A checkout whose server prints no URLs (from before
        direct ingress) gives ``<name>-pooled`` and ``<name>-dedicated`` through the proxy.
        ``env`` is set in the server's environment (and so in its Ray processes) over this one's."""
        port = free_port()
        data = os.path.join(self.scratch, f"{name}-data")
        if os.path.isdir(data):  # fresh databases every run
            for stale in os.listdir(data):  # a database, its WAL, its journal directory
                if ".duckdb" in stale:
                    path = os.path.join(data, stale)
                    shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        proc = self._start(
            name,
            [sys.executable, "-m", "benchmarks.troupe_server", "--port", str(port), "--sim-url", sim_url,
             "--data-dir", data, *extra_args],
            cwd=checkout, env={**(env or {}), **({} if checkout == ROOT else {"PYTHONPATH": checkout})},
        )
        proc.wait_log("READY", timeout_s=300)
        urls = _printed_urls(proc) or {app: {"proxy": f"http://127.0.0.1:{port}/{app}/v1"} for app in _OLD_APPS}
        for app, ways in urls.items():
            if app == FLOOR_APP:
                self.targets[app] = Target(app, ways["direct"], "sim", "floor", proc)
                continue
            target = f"{name}-{app}"
            self.targets[target] = Target(target, ways.get("direct", ways["proxy"]), "sim", "troupe", proc)
            if "direct" in ways:
                self.targets[f"{target}-proxy"] = Target(f"{target}-proxy", ways["proxy"], "sim", "troupe", proc)

    def start_peers(self, sim_root: str) -> None:
        """Install (if needed) and start SMG and Llama Stack; record why one is skipped."""
        if not self.peers:
            for peer in ("smg", "llama-stack"):
                self.peer_status[peer] = {"status": "skipped", "reason": "peers disabled (--no-peers)"}
            return
        for peer, starter in (("smg", self._start_smg), ("llama-stack", self._start_llama_stack)):
            try:
                self.peer_status[peer] = {"status": "ok", **starter(sim_root)}
            except Exception as exc:  # noqa: BLE001 - any failure is a reported skip
                self.peer_status[peer] = {"status": "skipped", "reason": f"{type(exc).__name__}: {exc}"[:500]}

    def _setup(self, script: str) -> str:
        """Run a peer's setup script; the path it prints (its command). Raises with its reason."""
        done = subprocess.run(
            ["bash", os.path.join(ROOT, "benchmarks", "peers", script)],
            capture_output=True, text=True, timeout=1800,
            env={**os.environ, "TROUPE_PEERS_DIR": os.path.join(self.scratch, "peers")},
        )
        if done.returncode != 0:
            reasons = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("WARNING:")]
            raise RuntimeError(f"{script} failed: {reasons[-1] if reasons else 'exit ' + str(done.returncode)}")
        return done.stdout.strip().splitlines()[-1]

    def _version(self, python: str, package: str) -> str | None:
        done = subprocess.run([python, "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
                              capture_output=True, text=True, timeout=60)
        return done.stdout.strip() or None

    def _start_smg(self, sim_root: str) -> dict[str, Any]:
        smg = self._setup("setup_smg.sh")
        port, metrics = free_port(), free_port()
        proc = self._start("smg", [
            smg, "launch", "--backend", "openai", "--worker-urls", sim_root,
            "--host", "127.0.0.1", "--port", str(port),
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics),
            "--log-level", "warn",
        ])
        # Its /v1/models lists nothing for an openai backend: ready is when a response comes back.
        wait_until(lambda: _responds(f"http://127.0.0.1:{port}/v1", "sim"), timeout_s=90,
                   what="smg (POST /v1/responses)", alive=proc.alive)
        self.targets["smg"] = Target("smg", f"http://127.0.0.1:{port}/v1", "sim", "peer", proc)
        version = self._version(os.path.join(os.path.dirname(smg), "python"), "smg")
        return {"version": version, "how": "smg launch --backend openai, in front of troupe sim's /v1/responses"}

    def _start_llama_stack(self, sim_root: str) -> dict[str, Any]:
        llama = self._setup("setup_llama_stack.sh")
        home = os.path.dirname(os.path.dirname(os.path.dirname(llama)))  # …/peers/llama-stack
        port = free_port()
        store = os.path.join(self.scratch, "llama-stack-data")
        os.makedirs(store, exist_ok=True)
        for name in os.listdir(store):  # a fresh store each run
            if name.endswith(".db"):
                os.remove(os.path.join(store, name))
        proc = self._start(
            "llama-stack",
            [llama, "stack", "run", os.path.join(ROOT, "benchmarks", "peers", "llama_stack.yaml"), "--port", str(port)],
            env={
                "VLLM_URL": f"{sim_root}/v1",
                "SQLITE_STORE_DIR": store,
                "TIKTOKEN_CACHE_DIR": os.path.join(home, "tiktoken-cache"),
                "LLAMA_STACK_DISABLE_VERSION_CHECK": "1",
                "OTEL_SDK_DISABLED": "true",
            },
            cwd=store,
        )
        wait_until(lambda: _responds(f"http://127.0.0.1:{port}/v1", "vllm/sim"), timeout_s=180,
                   what="llama-stack (POST /v1/responses)", alive=proc.alive)
        self.targets["llama-stack"] = Target("llama-stack", f"http://127.0.0.1:{port}/v1", "vllm/sim", "peer", proc)
        version = self._version(os.path.join(os.path.dirname(llama), "python"), "llama_stack")
        return {"version": version, "how": "llama stack run (remote::vllm on troupe sim's Chat Completions)"}
