"""The Ray Serve application: the HTTP API as a Serve deployment over ``Runtime.on_ray``.

:class:`TroupeIngress` is a Serve deployment whose ASGI app is
:func:`troupe.serve.app.create_app`. Its routes need the replica's :class:`Runtime`,
which only exists once the replica has started, so the ingress is *late-bound*:
``@serve.ingress()`` without an app, and Serve calls ``__serve_build_asgi_app__``
after the (async) constructor has built the runtime. Replicas reserve no CPU: the
ingress only awaits the conversation hosts and frames events.

Example::

    server, runtime = load_config("troupe.toml")
    run_server(server, runtime)            # blocks until Ctrl-C / SIGTERM

    # or, inside a Ray driver you manage yourself:
    serve.run(build_app(server, runtime), name="troupe", route_prefix="/")
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Iterable
from typing import Any

import ray
from ray import serve

from troupe.actors.runtime import Runtime, start_shared_actors
from troupe.actors.settings import RuntimeSettings

from ._reuse_addr import patch_direct_ingress_bind
from .app import create_app
from .config import ServerSettings

__all__ = [
    "TroupeIngress",
    "build_app",
    "app_builder",
    "run_server",
    "direct_ingress_env",
    "direct_ingress_roots",
    "free_port_range",
    "PortInUse",
    "APP_NAME",
    "HEALTH_CHECK_PERIOD_S",
    "LOCAL_RAY_ENV",
]

APP_NAME = "troupe"

logger = logging.getLogger(__name__)


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1000)
@serve.ingress()
class TroupeIngress:
    """One Serve replica of the HTTP API; owns one :class:`Runtime` (closed on shutdown)."""

    async def __init__(self, server: ServerSettings, runtime: RuntimeSettings) -> None:
        # Before Serve starts this replica's HTTP server (after this constructor): its socket
        # must outlive a crash's TIME-WAIT connections (see _reuse_addr).
        patch_direct_ingress_bind()
        self._server = server
        self._runtime = await Runtime.on_ray(runtime)

    def __serve_build_asgi_app__(self) -> Any:
        # Called by Serve after __init__, so the routes can reach this replica's runtime.
        return create_app(lambda: self._runtime, self._server)

    async def __del__(self) -> None:
        runtime = getattr(self, "_runtime", None)
        if runtime is not None:
            await runtime.close()


def build_app(server: ServerSettings, runtime: RuntimeSettings) -> serve.Application:
    """The bound Serve application (pass it to ``serve.run``).

    Example::

        serve.run(build_app(ServerSettings(), RuntimeSettings()), name="troupe", route_prefix="/")
    """
    deployment = TroupeIngress.options(
        num_replicas=server.num_replicas,
        max_ongoing_requests=server.max_ongoing_requests,
        health_check_period_s=HEALTH_CHECK_PERIOD_S,
    )
    return deployment.bind(server, runtime)


HEALTH_CHECK_PERIOD_S = 1.0
"""How often Serve's controller checks each ingress replica. Serve learns that a replica's
process died only from its next check: at Serve's default of 10 s, a crashed replica's port
stayed closed that long before Serve even began to restart it."""


def app_builder(args: dict[str, str]) -> serve.Application:
    """The Serve application from a Serve config's ``args``: the entry point for a RayService.

    ``args`` may name ``config`` (a TOML file on the cluster); ``TROUPE_*`` environment
    variables of the Serve replicas apply as with ``troupe serve``. Host and port come from
    the Serve config's ``http_options``, not from here.

    Example (a KubeRay RayService ``serveConfigV2``)::

        applications:
          - name: troupe
            route_prefix: /
            import_path: troupe.serve.deployment:app_builder
            args: {config: /etc/troupe/troupe.toml}
    """
    from .config import load_config

    server, runtime = load_config(args.get("config"), env=os.environ)
    return build_app(server, runtime)


LOCAL_RAY_ENV = {
    # Serve's controller reconciles every 0.1 s by default, which is a third of an idle
    # server's CPU; once a second costs about a second per step of a (re)deploy.
    "RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "1",
    "RAY_SERVE_METRICS_EXPORT_INTERVAL_MS": "1000",
    # Every Ray process reports each task it runs to the GCS, for `ray list tasks` and the
    # dashboard's task view, which Troupe does not use; each host call and tool call is a
    # task. The GCS keeps the last records and, per job, the ids of those it dropped: over a
    # 60-minute soak it took 720,000 reports and grew by 20 MB in doubling steps. 0 turns the
    # reports off. (Ray 2.60 has no `enable_task_events`: RAY_enable_task_events=0 did nothing.)
    "RAY_task_events_report_interval_ms": "0",
    # Ray's log monitor rescans the log directory often; new log files may show 5 s late.
    "RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0",
    "LOG_NAME_UPDATE_INTERVAL_S": "5",
    # Serve's documented high-throughput mode: the app runs on the replica's own event loop
    # (no thread hop per ASGI message), access-log lines are written in batches and not
    # copied to the console (they stay in Ray's logs, logs/serve/). Stream TTFT at c=16:
    # 30-53 ms before, 18-21 after; non-streaming c=1 10.3 -> 8 ms (with the line below).
    "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
    # Ray runs its workers at nice 15, behind every other process of the machine: the
    # replica is the server here, and it lost the CPU to the model server and the clients.
    "RAY_worker_niceness": "0",
}
"""The environment of the local Ray instance ``troupe serve`` starts: a quiet server at rest
(measured on 2 cores: 0.16 idle cores before; after, 0.12 with pooled hosts and 0.08 with
the replica placement; README "Performance") and a fast one under load. A variable already
set in the environment wins. A cluster Troupe joins keeps its own: set the same variables
on every ``ray start`` (README, "On a cluster")."""


def direct_ingress_env(first_port: int, num_ports: int) -> dict[str, str]:
    """The environment under which Serve runs ingress replicas with their own HTTP servers.

    Serve reads these variables when its controller and replicas start, so they must be in
    the environment of the Ray instance (set before ``ray.init`` starts one, or on every
    ``ray start`` of a cluster). Replicas take ports from ``first_port`` up, one each. The
    draining period, which Serve keeps so that an external load balancer notices a replica
    going away, defaults to none here, and so does the quarantine of a stopped replica's port;
    set ``RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S`` and ``RAY_SERVE_PORT_QUARANTINE_S``
    yourself when a balancer sits in front.

    Example::

        os.environ.update(direct_ingress_env(8000, 1))   # then ray.init(), serve.run(...)
    """
    return {
        "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1",
        "RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT": str(first_port),
        "RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT": str(first_port + num_ports),
        "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": os.environ.get(
            "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S", "0"
        ),
        # A replica's port is held back for minutes after it stops, for a balancer's sake; a
        # replica restarted after a crash then finds no free port and waits it out (~165 s).
        "RAY_SERVE_PORT_QUARANTINE_S": os.environ.get("RAY_SERVE_PORT_QUARANTINE_S", "0"),
    }


def run_server(server: ServerSettings, runtime: RuntimeSettings, *, blocking: bool = True) -> None:
    """Start Ray (or join ``server.ray_address``), Serve, and the Troupe application.

    With ``server.ingress == "direct"`` (the default) and a local Ray instance, the replicas
    serve HTTP on ``server.port`` (and up, one port per replica) themselves; Serve's proxy,
    which Serve always starts, listens on a free loopback-side port nobody needs to use.
    With ``"proxy"``, the proxy serves ``server.port``.

    Args:
        server: where to listen; ``ray_address`` joins an existing cluster.
        runtime: the runtime settings every replica builds its :class:`Runtime` from.
        blocking: wait until Ctrl-C or SIGTERM, then tear down what this call started:
            a local Ray instance is shut down entirely; on an existing cluster only the
            ``troupe`` application is deleted and the driver disconnects. With False,
            return once the application is up (the caller shuts down).

    Raises:
        PortInUse: a port the API needs is taken by another process.

    Example::

        run_server(ServerSettings(port=8000), RuntimeSettings())   # http://127.0.0.1:8000/v1
    """
    started_ray = False
    local = server.ray_address is None
    direct = local and server.ingress == "direct"
    ports = range(server.port, server.port + (server.num_replicas if direct else 1))
    if local:
        _check_free(server.host, ports)
    if not ray.is_initialized():
        # Inherited by the processes Ray starts: the Serve controller and the replicas.
        if direct:
            os.environ.update(direct_ingress_env(server.port, server.num_replicas))
        if local:
            for name, value in LOCAL_RAY_ENV.items():
                os.environ.setdefault(name, value)
        # "local" forces a fresh instance: plain ray.init() would silently join any Ray
        # cluster already running on this machine, and tearing down would then hit it.
        extra = {"include_dashboard": server.dashboard} if local else {}
        ray.init(address=server.ray_address or "local", namespace=runtime.namespace, **extra)
        started_ray = True
    # Before the replicas start: owned by this process, they outlive a replica's crash.
    shared = start_shared_actors(runtime)  # noqa: F841 - held while the server runs
    proxy_port = _free_port(server.host) if direct else server.port
    serve.start(http_options={"host": server.host, "port": proxy_port})
    serve.run(build_app(server, runtime), name=APP_NAME, route_prefix="/")
    if direct:
        where = ", ".join(str(p) for p in ports)
        logger.info("Serve's proxy (not in the path) is on port %d", proxy_port)
        logger.info("Troupe is serving on http://%s:%s/v1 (direct ingress)", server.host, where)
    else:
        logger.info("Troupe is serving on http://%s:%d/v1 (through Serve's proxy)", server.host, server.port)
    if not blocking:
        return
    try:
        _wait_for_stop_signal()
    finally:
        if local:
            serve.shutdown()
        else:
            serve.delete(APP_NAME)
        if started_ray:
            ray.shutdown()


class PortInUse(OSError):
    """A port ``troupe serve`` must listen on is taken; the message names it."""


def _check_free(host: str, ports: range) -> None:
    # A replica that cannot bind its port would be restarted by Serve forever; say so at once.
    for port in ports:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            try:
                sock.bind((host, port))
            except OSError as exc:
                raise PortInUse(f"cannot listen on {host}:{port}: {exc.strerror}") from exc


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def free_port_range(count: int, host: str = "127.0.0.1", *, tries: int = 100) -> int:
    """The first of ``count`` consecutive ports free on ``host`` right now (for a replica port range).

    Raises:
        RuntimeError: no such range was found in ``tries`` attempts.
    """
    for _ in range(tries):
        first = _free_port(host)
        try:
            _check_free(host, range(first, first + count))
        except (PortInUse, OverflowError):
            continue
        return first
    raise RuntimeError(f"no {count} consecutive free ports on {host}")


def direct_ingress_roots(ports: Iterable[int], host: str = "127.0.0.1") -> dict[str, str]:
    """The root URL of each Serve application served by an ingress replica on one of ``ports``.

    Each replica's own HTTP server answers Serve's ``GET /-/routes`` with the application it
    serves and its route prefix; a port that does not answer is skipped.

    Example::

        direct_ingress_roots(range(8000, 8002))   # {"troupe": "http://127.0.0.1:8000"}
    """
    import httpx

    roots = {}
    for port in ports:
        try:
            routes = httpx.get(f"http://{host}:{port}/-/routes", timeout=2).json()
        except (httpx.TransportError, ValueError):
            continue
        for prefix, app in routes.items():
            roots[app] = f"http://{host}:{port}{prefix.rstrip('/')}"
    return roots


def _wait_for_stop_signal() -> None:
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        # Short waits keep the main thread responsive to SIGINT (KeyboardInterrupt).
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
