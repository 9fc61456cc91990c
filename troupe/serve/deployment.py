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
import signal
import threading
from typing import Any

import ray
from ray import serve

from troupe.actors.runtime import Runtime
from troupe.actors.settings import RuntimeSettings

from .app import create_app
from .config import ServerSettings

__all__ = ["TroupeIngress", "build_app", "app_builder", "run_server", "APP_NAME"]

APP_NAME = "troupe"

logger = logging.getLogger(__name__)


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1000)
@serve.ingress()
class TroupeIngress:
    """One Serve replica of the HTTP API; owns one :class:`Runtime` (closed on shutdown)."""

    async def __init__(self, server: ServerSettings, runtime: RuntimeSettings) -> None:
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
    )
    return deployment.bind(server, runtime)


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
    import os

    from .config import load_config

    server, runtime = load_config(args.get("config"), env=os.environ)
    return build_app(server, runtime)


LOCAL_RAY_SYSTEM_CONFIG = {"task_events_max_num_task_in_gcs": 10_000}
"""Ray settings of the local instance ``troupe serve`` starts. Ray's GCS keeps a record of
every past task, and each host call and tool call is one: at its default of 100,000 records
it grew by hundreds of MB over a 30-minute soak. A cluster Troupe joins keeps its own settings."""


def run_server(server: ServerSettings, runtime: RuntimeSettings, *, blocking: bool = True) -> None:
    """Start Ray (or join ``server.ray_address``), Serve, and the Troupe application.

    Args:
        server: where to listen; ``ray_address`` joins an existing cluster.
        runtime: the runtime settings every replica builds its :class:`Runtime` from.
        blocking: wait until Ctrl-C or SIGTERM, then tear down what this call started:
            a local Ray instance is shut down entirely; on an existing cluster only the
            ``troupe`` application is deleted and the driver disconnects. With False,
            return once the application is up (the caller shuts down).

    Example::

        run_server(ServerSettings(port=8000), RuntimeSettings())   # http://127.0.0.1:8000/v1
    """
    started_ray = False
    local = server.ray_address is None
    if not ray.is_initialized():
        # "local" forces a fresh instance: plain ray.init() would silently join any Ray
        # cluster already running on this machine, and tearing down would then hit it.
        extra = {"_system_config": LOCAL_RAY_SYSTEM_CONFIG} if local else {}
        ray.init(address=server.ray_address or "local", namespace=runtime.namespace, **extra)
        started_ray = True
    serve.start(http_options={"host": server.host, "port": server.port})
    serve.run(build_app(server, runtime), name=APP_NAME, route_prefix="/")
    logger.info("Troupe is serving on http://%s:%d/v1", server.host, server.port)
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
