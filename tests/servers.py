"""Run an ASGI app on a real loopback socket for a test, and wait on conditions."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import uvicorn


def wait_for(condition: Callable[[], bool], *, timeout_s: float = 20.0, what: str = "condition") -> None:
    """Poll ``condition`` until it holds; fail after ``timeout_s`` (a bound, not a wait)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not hold within {timeout_s} s")
        time.sleep(0.01)


def free_port_range(count: int) -> int:
    """The first of ``count`` consecutive loopback ports that are free now."""
    for _ in range(100):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            first = sock.getsockname()[1]
        if first + count <= 65536 and all(_free(port) for port in range(first, first + count)):
            return first
    raise RuntimeError(f"no {count} consecutive free ports found")


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def direct_ingress_root(app_name: str, host: str = "127.0.0.1") -> str:
    """The root URL at which a Serve app's ingress replica serves HTTP itself (direct ingress).

    Scans the replica port range of this session (``RAY_SERVE_DIRECT_INGRESS_*_HTTP_PORT``)
    and asks each replica server which application it serves (Serve's ``/-/routes``).
    """
    first = int(os.environ["RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT"])
    end = int(os.environ["RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT"])
    for port in range(first, end):
        try:
            routes = httpx.get(f"http://{host}:{port}/-/routes", timeout=2).json()
        except (httpx.TransportError, ValueError):
            continue
        for prefix, app in routes.items():
            if app == app_name:
                return f"http://{host}:{port}{prefix.rstrip('/')}"
    raise LookupError(f"no replica in ports {first}-{end - 1} serves the Serve app {app_name!r}")


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


@contextlib.contextmanager
def serve_app(app: object) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 on a free port; yields ``http://127.0.0.1:PORT``.

    The socket is bound (port 0) before uvicorn starts, so no other process can
    take the port in between; readiness is ``GET /health`` answering 200.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: not thread.is_alive() or _healthy(url), what=f"{url}/health")
        if not thread.is_alive():
            raise RuntimeError("the server thread exited during start-up")
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


class LazyRuntime:
    """Builds an in-process runtime on first use, inside the server's event loop, and closes it there."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings
        self.runtime: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def __call__(self) -> Any:
        from troupe.actors.runtime import Runtime
        from troupe.actors.settings import RuntimeSettings

        if self.runtime is None:
            self.loop = asyncio.get_running_loop()
            self.runtime = Runtime.local(RuntimeSettings(**{"storage_path": ":memory:", **self.settings}))
        return self.runtime

    def close(self) -> None:
        if self.runtime is not None and self.loop is not None:
            asyncio.run_coroutine_threadsafe(self.runtime.close(), self.loop).result(timeout=10)


def served_local(server_settings: Any, **runtime_settings: Any) -> Iterator[str]:
    """Serve the HTTP app over an in-process runtime on a free loopback port; yields its root URL."""
    from troupe.serve.app import create_app

    runtime = LazyRuntime(**runtime_settings)
    with serve_app(create_app(runtime, server_settings)) as url:
        try:
            yield url
        finally:
            runtime.close()
