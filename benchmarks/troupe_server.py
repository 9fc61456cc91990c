"""Troupe for the benchmarks: a fresh local Ray instance serving one Serve app per placement.

    python -m benchmarks.troupe_server --port 18500 --sim-url http://127.0.0.1:18501/v1 --data-dir DIR

Starts Ray (``address="local"``: never joins another session on the machine), Ray Serve on
127.0.0.1:PORT, and the Troupe app once per placement, as in the e2e suite: ``/pooled/v1`` and
``/dedicated/v1``, each with its own Ray namespace and DuckDB file in DATA_DIR. Both offer

* ``sim``: the standalone sim server at SIM_URL through Troupe's HTTP model client, the same
  upstream the bare-sim baseline and the peers use;
* ``sim-local``: the in-process sim (no model hop), to separate gateway cost from model I/O;

and the example tools (``sleep`` for the agent-loop scenario). Prints ``READY`` on stdout when
every app answers ``/health``; on SIGTERM or SIGINT it shuts down Serve and the Ray instance it
started (nothing else: never ``ray stop``).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

import httpx

__all__ = ["main", "APPS"]

APPS = {"pooled": {"placement": "pooled"}, "dedicated": {"placement": "dedicated"}}
"""Route prefix → the RuntimeSettings fields that differ from the defaults."""


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--sim-url", required=True, help="the sim server's API root (…/v1)")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--num-cpus", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--pool-size", type=int, default=4)
    parser.add_argument("--idle-timeout", type=float, default=900.0, help="dedicated actors' idle timeout (s)")
    args = parser.parse_args(argv)

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray import serve

    from troupe.actors.settings import ModelSpec, RuntimeSettings
    from troupe.serve.config import ServerSettings
    from troupe.serve.deployment import build_app

    os.makedirs(args.data_dir, exist_ok=True)
    ray.init(address="local", num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False,
             namespace="troupe-bench")
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": args.port})
        models = (
            ModelSpec(name="sim", kind="openai", base_url=args.sim_url, upstream_model="sim"),
            ModelSpec(name="sim-local", kind="sim"),
        )
        for name, fields in APPS.items():
            settings = RuntimeSettings(
                models=models,
                pool_size=args.pool_size,
                idle_timeout_s=args.idle_timeout,
                namespace=f"troupe-bench-{name}",
                storage_path=os.path.join(args.data_dir, f"{name}.duckdb"),
                **fields,
            )
            app = build_app(ServerSettings(port=args.port), settings)
            serve.run(app, name=name, route_prefix=f"/{name}")
        deadline = time.monotonic() + 120
        for name in APPS:
            url = f"http://127.0.0.1:{args.port}/{name}/health"
            while not _healthy(url):
                if time.monotonic() > deadline:
                    print(f"{url} did not answer within 120 s", file=sys.stderr)
                    return 1
                time.sleep(0.1)
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
