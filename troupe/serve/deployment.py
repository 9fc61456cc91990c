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

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import random
import signal
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, cast

import ray
from ray import serve

from troupe.runtime.facade import Runtime, SharedActors, start_shared_actors
from troupe.runtime.settings import RuntimeSettings

from ._reuse_addr import patch_direct_ingress_bind
from .app import create_app
from .config import ServerSettings
from .stopping import Stopping

__all__ = [
    "TroupeIngress",
    "build_app",
    "app_builder",
    "run_server",
    "RunningServer",
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

    # Serve awaits an async constructor; mypy requires __init__ to return None, not a coroutine.
    async def __init__(self, server: ServerSettings, runtime: RuntimeSettings) -> None:  # type: ignore[misc]
        # Before Serve starts this replica's HTTP server (after this constructor): its socket
        # must outlive a crash's TIME-WAIT connections (see _reuse_addr).
        patch_direct_ingress_bind()
        self._server = server
        self._loop = asyncio.get_running_loop()
        self._stop: concurrent.futures.Future[bool] | None = None
        self._stop_lock = threading.Lock()
        self._stopping: Stopping | None = None
        self._runtime = await Runtime.on_ray(runtime)
        _register_replica(self)

    def __serve_build_asgi_app__(self) -> Any:
        # Called by Serve after __init__, so the routes can reach this replica's runtime.
        app = create_app(lambda: self._runtime, self._server)
        self._stopping = app.state.stopping
        return app

    async def stop(self, grace_s: float, flush_s: float) -> bool:
        """Refuse new requests; wait up to ``grace_s`` for those in flight (not for those that
        follow a background run, which goes on at the next start); then, within ``flush_s``,
        get every response this replica journaled into DuckDB. Whether the requests finished.
        """
        finished = True
        if self._stopping is not None:
            finished = await self._stopping.stop(grace_s)
        try:
            async with asyncio.timeout(flush_s):
                await self._runtime.store.flush()
        except Exception:  # noqa: BLE001 - what is journaled is durable: the next start stores it
            logger.warning("stopping: the journal was not flushed; the next start stores what it holds", exc_info=True)
        return finished

    def stop_soon(self, grace_s: float, flush_s: float) -> bool | None:
        """Start :meth:`stop` on the replica's event loop, once (from any thread); None while it
        runs, then what it returned."""
        with self._stop_lock:
            if self._stop is None:
                self._stop = asyncio.run_coroutine_threadsafe(self.stop(grace_s, flush_s), self._loop)
        return self._stop.result() if self._stop.done() else None

    async def __del__(self) -> None:
        runtime = getattr(self, "_runtime", None)
        if runtime is not None:
            await runtime.close()


_this_replica: TroupeIngress | None = None
"""The ingress replica of this process, once built (Serve runs one replica per actor process)."""


def _register_replica(replica: TroupeIngress) -> None:
    # A function of this module, not a `global` statement in the class: Serve sends the class
    # to the replica by value (cloudpickle), and its methods' globals are not this module's.
    global _this_replica
    _this_replica = replica


def _stop_this_replica(_actor: Any, grace_s: float, flush_s: float) -> bool | None:
    # Run by ``__ray_call__`` in an ingress replica's process (see _stop_replicas).
    replica = _this_replica
    return True if replica is None else replica.stop_soon(grace_s, flush_s)


def build_app(server: ServerSettings, runtime: RuntimeSettings) -> serve.Application:
    """The bound Serve application (pass it to ``serve.run``).

    Example::

        serve.run(build_app(ServerSettings(), RuntimeSettings()), name="troupe", route_prefix="/")
    """
    # mypy keeps a decorated class's own type: @serve.deployment made TroupeIngress a Deployment.
    deployment = cast(serve.Deployment, TroupeIngress).options(
        num_replicas=server.num_replicas,
        max_ongoing_requests=server.max_ongoing_requests,
        health_check_period_s=HEALTH_CHECK_PERIOD_S,
    )
    if server.max_replicas_per_node is not None:
        deployment = deployment.options(max_replicas_per_node=server.max_replicas_per_node)
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
the replica placement; docs/performance.md) and a fast one under load. A variable already
set in the environment wins. A cluster Troupe joins keeps its own: set the same variables
on every ``ray start`` (docs/cluster.md)."""


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


def run_server(server: ServerSettings, runtime: RuntimeSettings, *, blocking: bool = True) -> RunningServer | None:
    """Start Ray (or join ``server.ray_address``), Serve, and the Troupe application.

    With ``server.ingress == "direct"`` (the default) and a local Ray instance, the replicas
    serve HTTP on ``server.port`` (and up, one port per replica) themselves; Serve's proxy,
    which Serve always starts, listens on a free loopback-side port nobody needs to use.
    With ``"proxy"``, the proxy serves ``server.port``.

    Args:
        server: where to listen; ``ray_address`` joins an existing cluster.
        runtime: the runtime settings every replica builds its :class:`Runtime` from.
        blocking: wait until Ctrl-C or SIGTERM, then stop (:meth:`RunningServer.stop`). With
            False, return the :class:`RunningServer` once the application is up (the caller
            stops it).

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
        extra: dict[str, Any] = {"include_dashboard": server.dashboard} if local else {}
        with _sigint_held_from_children() if local else contextlib.nullcontext():
            ray.init(address=server.ray_address or "local", namespace=runtime.namespace, **extra)
        started_ray = True
    # Before the replicas start: owned by this process, they outlive a replica's crash.
    shared = start_shared_actors(runtime)
    proxy_port = _free_port(server.host) if direct else server.port
    serve.start(http_options={"host": server.host, "port": proxy_port})
    serve.run(build_app(server, runtime), name=APP_NAME, route_prefix="/")
    if direct:
        where = ", ".join(str(p) for p in ports)
        logger.info("Serve's proxy (not in the path) is on port %d", proxy_port)
        logger.info("Troupe is serving on http://%s:%s/v1 (direct ingress)", server.host, where)
    else:
        logger.info("Troupe is serving on http://%s:%d/v1 (through Serve's proxy)", server.host, server.port)
    running = RunningServer(server, shared, started_ray=started_ray)
    if not blocking:
        return running
    try:
        _wait_for_stop_signal()
    finally:
        running.stop()
    return None


class RunningServer:
    """What :func:`run_server` started, and how it stops (:meth:`stop`)."""

    def __init__(self, server: ServerSettings, shared: SharedActors, *, started_ray: bool) -> None:
        self.server = server
        self.shared = shared
        """The actors the replicas share, owned by this process."""
        self.started_ray = started_ray
        """:func:`run_server` started Ray (a local instance, shut down at the stop) or connected
        to a cluster (disconnected at the stop)."""

    def stop(self) -> None:
        """Stop within about ``shutdown_grace_s`` + 2 s.

        1. Every ingress replica refuses new requests (503 with Retry-After) and lets those in
           flight finish within ``shutdown_grace_s``, save the ones that follow a background
           run; it ships what it journaled to the storage actor.
        2. The storage actor gets every journaled response into DuckDB.
        3. The application is deleted, and its replicas and the pooled hosts are ended at once,
           as a crash would end them: a background run stops where it is, and goes on from its
           last checkpoint at the next start (durable runs). They go first: a host that saw the
           storage actor or a tool runner go away before itself would fail its run.
        4. A local Ray instance is shut down; on a cluster this driver disconnects (the storage
           actor and the tool runners end with it).

        Serve's own ``serve.shutdown()`` is not used: it waits for each replica's graceful
        shutdown (up to 20 s with a stream open), then for its controller, up to 30 s.
        """
        began = time.monotonic()
        grace_s = self.server.shutdown_grace_s
        try:
            finished = _stop_replicas(APP_NAME, grace_s, _FLUSH_S)
            ray.get(self.shared.storage.flush.remote(), timeout=_FLUSH_S)
            logger.info(
                "stopping: %s", "every request finished" if finished else f"requests still ran after {grace_s:g} s"
            )
        except KeyboardInterrupt:  # a second Ctrl-C: stop at once
            pass
        except Exception:  # noqa: BLE001 - the journals are durable: the next start stores what they hold
            logger.warning("stopping: the replicas could not be drained", exc_info=True)
        finally:
            try:
                serve.delete(APP_NAME, _blocking=False)  # so that Serve does not replace what ends next
                _end_at_once([*_ingress_replicas(APP_NAME), *self.shared.hosts])
            finally:
                if self.started_ray:
                    ray.shutdown()
            logger.info("Troupe stopped in %.1f s", time.monotonic() - began)


_FLUSH_S = 1.0
"""The longest a stop waits for the journals to reach DuckDB (they are durable already)."""


def _ingress_replicas(app_name: str) -> list[Any]:
    """Handles to the live replica actors of ``app_name``'s ingress deployment (Serve names them
    ``SERVE_REPLICA::<app>#<deployment>#<id>`` in its namespace)."""
    from ray.serve._private.common import DeploymentID, ReplicaID
    from ray.serve._private.constants import SERVE_NAMESPACE

    name = cast(serve.Deployment, TroupeIngress).name  # a Deployment (see build_app)
    prefix = ReplicaID(unique_id="", deployment_id=DeploymentID(name=name, app_name=app_name))
    found = []
    for actor in ray.util.list_named_actors(all_namespaces=True):
        if actor["namespace"] == SERVE_NAMESPACE and actor["name"].startswith(prefix.to_full_id_str()):
            with contextlib.suppress(ValueError):  # gone meanwhile
                found.append(ray.get_actor(actor["name"], namespace=SERVE_NAMESPACE))
    return found


def _end_at_once(actors: list[Any], timeout_s: float = 2.0) -> None:
    """``ray.kill`` every one of ``actors`` (no restart), and wait until they are gone (at most ``timeout_s``)."""
    for actor in actors:
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + timeout_s
    for ready in [actor.__ray_ready__.remote() for actor in actors]:
        with contextlib.suppress(ray.exceptions.RayActorError):
            try:
                ray.get(ready, timeout=max(0.0, deadline - time.monotonic()))
            except ray.exceptions.GetTimeoutError:
                return


def _stop_replicas(app_name: str, grace_s: float, flush_s: float) -> bool:
    """Run :meth:`TroupeIngress.stop` in every ingress replica of ``app_name`` at once; whether
    each one's requests finished within ``grace_s`` (False too when a replica's stop did not end
    within ``grace_s`` + ``flush_s`` and a second).

    The stop runs in the replica's process through ``__ray_call__`` (Serve routes a call to one
    replica of its choosing; this must reach each): the first call starts it, the next ones
    (every 50 ms) ask whether it is over. A replica that is gone has nothing left to finish.
    """
    deadline = time.monotonic() + grace_s + flush_s + 1.0
    pending = _ingress_replicas(app_name)
    finished = True
    while pending:
        calls = [(r, r.__ray_call__.remote(_stop_this_replica, grace_s, flush_s)) for r in pending]
        pending = []
        for replica, call in calls:
            try:
                result = ray.get(call, timeout=max(0.0, deadline - time.monotonic()))
            except ray.exceptions.GetTimeoutError:
                return False
            except ray.exceptions.RayActorError:
                result = True
            if result is None:
                pending.append(replica)
            else:
                finished = finished and result
        if pending:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
    return finished


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


_LOW_PORTS = range(20000, 32000)
"""Where ports to be bound later are picked: below Linux's default ephemeral range (32768-60999),
from which the kernel hands out the ports of every ``bind(0)`` and outgoing connection; room is
left above for a replica port range (:func:`free_port_range`)."""


def _ephemeral_ports() -> range:
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return range(32768, 61000)
    return range(low, high + 1)


def _free_port(host: str) -> int:
    """A port free on ``host`` now, to be bound later (Serve's proxy, a replica's port range).

    Taken below the kernel's ephemeral range where it can: a port ``bind(0)`` returns is one the
    kernel may give the next process that binds port 0 or connects out (a Ray worker's gRPC
    server, say) before ours is bound, and Serve then fails with "Failed to bind to address"."""
    ephemeral = _ephemeral_ports()
    for _ in range(64):
        port = random.choice(_LOW_PORTS)
        if port in ephemeral:
            break  # a machine whose ephemeral range covers them: let the kernel choose
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
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


@contextlib.contextmanager
def _sigint_held_from_children() -> Iterator[None]:
    """SIGINT blocked while Ray starts its processes, which keep it blocked (a signal mask is
    inherited across ``fork`` and ``exec``). Ctrl-C in a terminal signals the whole foreground
    process group, Ray's processes with this one; they would die at once, cutting the requests
    in flight that :meth:`RunningServer.stop` lets finish. This process stops them. A Ctrl-C
    while Ray starts is delivered here once it has started."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


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
