"""The SO_REUSEADDR workaround for Serve's direct-ingress replica (``troupe.serve._reuse_addr``).

No Ray runs here: Serve's ``start_asgi_http_server`` is called as the replica calls it, on a
loopback port. These tests fail loudly when a Ray upgrade changes that function, or when
Serve starts setting the flag itself (then the workaround and its note in docs/behaviour.md can go).
"""

from __future__ import annotations

import asyncio
import inspect
import socket
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from ray.serve._private import http_util, replica
from ray.serve.config import HTTPOptions

from tests.servers import wait_until
from troupe.serve._reuse_addr import EXPECTED_PARAMETERS, patch_direct_ingress_bind, with_reuse_addr


async def _hello(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello"})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _serve_once(start: Callable[..., Any]) -> tuple[int, int, str]:
    """Start a server with ``start`` as the replica does; its listening socket's SO_REUSEADDR and
    SO_REUSEPORT, and what it answers."""
    port = _free_port()
    options = HTTPOptions(host="127.0.0.1", port=port)
    task, server = await start(_hello, options, event_loop=asyncio.get_running_loop(), enable_so_reuseport=False)
    try:
        await wait_until(lambda: _started(server, task), timeout_s=10, what="the server started")
        listener = server.servers[0].sockets[0]
        flags = (
            listener.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR),
            listener.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT),
        )
        async with httpx.AsyncClient() as client:
            answer = (await client.get(f"http://127.0.0.1:{port}/", timeout=10)).text
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
    return (*flags, answer)


async def _started(server: Any, task: asyncio.Task[Any]) -> bool:
    if task.done():
        task.result()  # a failed start raises here
    return server.started


def test_serve_starts_the_replica_server_through_the_function_the_patch_replaces() -> None:
    parameters = inspect.signature(http_util.start_asgi_http_server).parameters.values()
    assert tuple((p.name, p.kind, p.default) for p in parameters) == EXPECTED_PARAMETERS
    # The replica looks the function up in its own module's globals when it starts its server.
    assert "start_asgi_http_server(" in inspect.getsource(replica.Replica._maybe_start_direct_ingress_servers)
    assert inspect.unwrap(replica.start_asgi_http_server) is http_util.start_asgi_http_server


async def test_serve_binds_without_so_reuseaddr_and_the_patched_function_with_it() -> None:
    reuse_addr, reuse_port, answer = await _serve_once(http_util.start_asgi_http_server)
    assert answer == "hello"
    assert not reuse_addr, "Serve sets SO_REUSEADDR itself now: drop troupe/serve/_reuse_addr.py and its note in docs/behaviour.md"
    reuse_addr, reuse_port, answer = await _serve_once(with_reuse_addr(http_util.start_asgi_http_server))
    assert (bool(reuse_addr), bool(reuse_port), answer) == (True, False, "hello")


def test_the_patch_goes_in_once_and_leaves_the_module_it_came_from_alone() -> None:
    original = replica.start_asgi_http_server
    try:
        assert patch_direct_ingress_bind()
        patched = replica.start_asgi_http_server
        assert patched is not original and inspect.unwrap(patched) is original
        assert patch_direct_ingress_bind() and replica.start_asgi_http_server is patched, "not wrapped twice"
        assert http_util.start_asgi_http_server is original
        assert http_util.socket is socket
    finally:
        replica.start_asgi_http_server = original


def test_the_patch_leaves_a_function_it_does_not_know_alone(caplog: pytest.LogCaptureFixture) -> None:
    original = replica.start_asgi_http_server

    async def changed(app: Any, http_options: Any, *, event_loop: Any, reuse: bool = False) -> None: ...

    try:
        replica.start_asgi_http_server = changed
        assert not patch_direct_ingress_bind()
        assert replica.start_asgi_http_server is changed
        assert "left alone" in caplog.text
    finally:
        replica.start_asgi_http_server = original
