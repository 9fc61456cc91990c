"""Run an ASGI app on a real loopback socket for a test, and wait on conditions."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import uvicorn


def wait_for(condition: Callable[[], bool], *, timeout_s: float = 20.0, what: str = "condition") -> None:
    """Poll ``condition`` until it holds; fail after ``timeout_s`` (a bound, not a wait)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not hold within {timeout_s} s")
        time.sleep(0.01)


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
