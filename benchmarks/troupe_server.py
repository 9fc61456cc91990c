"""Troupe for the benchmarks: a fresh local Ray instance serving one Serve app per configuration.

    python -m benchmarks.troupe_server --port 18500 --sim-url http://127.0.0.1:18501/v1 --data-dir DIR

Starts Ray (``address="local"``: never joins another session on the machine) with the
environment ``troupe serve`` gives its local instance (``LOCAL_RAY_ENV``), Serve's
direct ingress on (:func:`troupe.serve.deployment.direct_ingress_env`, on a free range of
loopback ports), Serve's proxy on 127.0.0.1:PORT, and these Serve apps, one replica each:

* ``replica``, ``pooled``, ``dedicated``: the Troupe app once per placement, each with its own
  Ray namespace and DuckDB file in DATA_DIR. ``replica`` (conversations hosted inside the
  ingress replica itself, no Ray hop per streamed batch; ``troupe serve``'s default) is the
  Troupe the benchmarks measure first (:data:`benchmarks.scenarios.MAIN_APP`); ``pooled`` (K
  host actors) and ``dedicated`` (an actor per conversation) are compared with it;
* ``pooled-task``: pooled, but registered tools run as one Ray task per call
  (``tool_runner="task"``, the behaviour before the per-node tool runner), one host;
* ``serve-floor``: no Troupe at all, the sim server's FastAPI app
  (:func:`troupe.sim.server.create_sim_app`) as the ingress of one Serve deployment: what
  Serve itself costs in front of the same answers.

With ``TROUPE_BENCH_GUARDRAILS=regex`` in its environment (``benchmarks.ab --before HEAD
--after-env TROUPE_BENCH_GUARDRAILS=regex`` measures it side by side), every Troupe app's every
request runs :data:`BENCH_GUARDRAILS`: an input and output ``regex`` set, as a deployment that
redacts e-mail addresses and blocks keys would configure (issue 31's cost target).

Every app is reachable both at its replica's own port (direct ingress, how ``troupe serve``
serves) and through the proxy at ``/<app>``. The Troupe apps offer

* ``sim``: the standalone sim server at SIM_URL through Troupe's HTTP model client, the same
  upstream the bare-sim baseline and the peers use;
* ``sim-local``: the in-process sim (no model hop), to separate gateway cost from model I/O;

and the example tools (``sleep`` for the tool scenarios). Once every app answers ``/health``
both ways it prints one line ``URLS {"<app>": {"direct": …, "proxy": …}, …}`` (JSON: each
app's API root, ``…/v1``), then ``READY``; on SIGTERM or SIGINT it shuts down Serve and the
Ray instance it started (nothing else: never ``ray stop``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from typing import Any

import httpx

__all__ = ["main", "APPS", "FLOOR_APP"]

APPS: dict[str, dict[str, Any]] = {
    "dedicated": {"placement": "dedicated"},
    "pooled": {"placement": "pooled"},
    "pooled-task": {"placement": "pooled", "tool_runner": "task", "pool_size": 1},
    "replica": {"placement": "replica"},
}
"""Troupe's apps: route prefix → the RuntimeSettings fields set for it (the placement always, so
that a change of the default placement changes no app). One replica each, hence one
direct-ingress port each. Started in this order, after the Serve floor: the tool apps of scenario 7
(``pooled-task`` and ``replica``) last, so that their first requests come soon after their own
start, as they would after ``troupe serve`` says it is ready."""
FLOOR_APP = "serve-floor"
"""The Serve floor's app: the sim FastAPI app inside one Serve replica."""


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _sim_asgi_app() -> Any:
    """The Serve floor's ASGI app, built on its replica: the sim server with no default latency."""
    from troupe.sim.model import SimSettings
    from troupe.sim.server import create_sim_app

    return create_sim_app(SimSettings())


class SimFloor:
    """The Serve floor's deployment class: no code of its own, its ingress is the sim app."""


def _bench_guardrails(variant: str | None) -> tuple[dict[str, Any], ...]:
    """The guardrails of ``TROUPE_BENCH_GUARDRAILS``: ``regex`` (:data:`BENCH_GUARDRAILS`), ``keys``
    (those without the e-mail rule), unset: none."""
    if variant == "keys":
        return tuple({**g, "rules": [r for r in g["rules"] if r["category"] != "email"]} for g in BENCH_GUARDRAILS)
    return BENCH_GUARDRAILS if variant == "regex" else ()


def _serve_floor() -> Any:
    """The Serve floor, bound: one replica of a deployment whose ingress is the sim app,
    reserving no CPU and taking as many requests at once as Troupe's ingress does."""
    from ray import serve

    ingress = serve.ingress(_sim_asgi_app)(SimFloor)
    return serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1000)(ingress).bind()


BENCH_GUARDRAILS: tuple[dict[str, Any], ...] = (
    {"name": "pii", "kind": "regex", "stages": ["input", "output"], "tenants": ["*"], "rules": [
        {"category": "email", "pattern": r"[\w.+-]+@[\w-]+(\.[\w-]+)+", "action": "redact"},
        {"category": "card_number", "pattern": r"\b(?:\d[ -]?){13,16}\b", "action": "redact"},
        {"category": "api_key", "pattern": r"\bsk-[A-Za-z0-9]{16,}"},
        {"category": "private_key", "pattern": "-----BEGIN [A-Z ]*PRIVATE KEY-----"},
    ]},
)  # fmt: skip
"""The guardrails every request runs under ``TROUPE_BENCH_GUARDRAILS=regex``; under ``=keys``, the
same without the e-mail rule, whose match may begin at any word (so the output gate holds each
word until the next shows it is no address): what the rules that need a telling start cost."""


def _run_apps(args: argparse.Namespace) -> None:
    """``serve.run`` the Serve floor, then every Troupe app, each at ``/<name>``."""
    from ray import serve

    from troupe.runtime.settings import GuardrailSpec, ModelSpec, RuntimeSettings, TelemetrySettings
    from troupe.serve.config import ServerSettings
    from troupe.serve.deployment import build_app

    models = (
        ModelSpec(name="sim", kind="openai", base_url=args.sim_url, upstream_model="sim"),
        ModelSpec(name="sim-local", kind="sim"),
    )
    serve.run(_serve_floor(), name=FLOOR_APP, route_prefix=f"/{FLOOR_APP}")
    guarded = _bench_guardrails(os.environ.get("TROUPE_BENCH_GUARDRAILS"))
    for name, fields in _apps(args).items():
        settings = RuntimeSettings(
            models=models,
            guardrails=tuple(GuardrailSpec(**g) for g in guarded),
            **{"pool_size": args.pool_size, **fields},
            idle_timeout_s=args.idle_timeout,
            namespace=f"troupe-bench-{name}",
            storage_path=os.path.join(args.data_dir, f"{name}.duckdb"),
            telemetry=TelemetrySettings(**json.loads(args.telemetry)),
        )
        serve.run(build_app(ServerSettings(port=args.port), settings), name=name, route_prefix=f"/{name}")


def _apps(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The Troupe apps ``--apps`` asks for (all of :data:`APPS` by default)."""
    wanted = args.apps.split(",") if args.apps else list(APPS)
    return {name: fields for name, fields in APPS.items() if name in wanted}


def _urls(proxy_port: int, ports: range, names: list[str], timeout_s: float = 120.0) -> dict[str, dict[str, str]]:
    """Every app's API roots, direct and through the proxy, once each answers ``/health`` both
    ways. Raises TimeoutError naming what did not answer."""
    from troupe.serve.deployment import direct_ingress_roots

    deadline = time.monotonic() + timeout_s
    while True:
        direct = direct_ingress_roots(ports)
        roots = {n: {"direct": direct.get(n), "proxy": f"http://127.0.0.1:{proxy_port}/{n}"} for n in names}
        waiting = [f"{root}/health" for r in roots.values() for root in r.values()
                   if root is None or not _healthy(f"{root}/health")]
        if not waiting:
            return {n: {way: f"{root}/v1" for way, root in r.items()} for n, r in roots.items()}
        if time.monotonic() > deadline:
            raise TimeoutError(f"not answering within {timeout_s:.0f} s: {', '.join(waiting)}")
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True, help="Serve's proxy")
    parser.add_argument("--sim-url", required=True, help="the sim server's API root (…/v1)")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--num-cpus", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--pool-size", type=int, default=4)
    parser.add_argument("--idle-timeout", type=float, default=900.0, help="dedicated actors' idle timeout (s)")
    parser.add_argument("--apps", help="comma-separated Troupe apps to start (default: all of APPS)")
    parser.add_argument("--telemetry", default="{}", help="the [telemetry] of every app, as JSON (default: {})")
    args = parser.parse_args(argv)

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray import serve

    from troupe.serve.deployment import LOCAL_RAY_ENV, direct_ingress_env, free_port_range

    os.makedirs(args.data_dir, exist_ok=True)
    replicas = len(_apps(args)) + 1  # one replica per Troupe app and the Serve floor's, a direct-ingress port each
    first = free_port_range(replicas + 1)  # Serve's upper bound is inclusive: one port more
    os.environ.update(direct_ingress_env(first, replicas))  # inherited by Serve's controller and replicas
    for name, value in LOCAL_RAY_ENV.items():  # the local instance as `troupe serve` starts it
        os.environ.setdefault(name, value)
    ray.init(address="local", num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False,
             namespace="troupe-bench")
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": args.port})
        _run_apps(args)
        try:
            urls = _urls(args.port, range(first, first + replicas + 1), [*_apps(args), FLOOR_APP])
        except TimeoutError as exc:
            print(exc, file=sys.stderr)
            return 1
        print("URLS " + json.dumps(urls), flush=True)
        print("READY", flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        while not stop.wait(0.5):
            pass
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
