"""Real MCP servers for the tests, written with the ``mcp`` SDK (``MCPServer``, FastMCP's successor).

One server, three ways to run it:

* streamable HTTP on ``127.0.0.1`` in a subprocess: :class:`McpTestServer` /
  :func:`serve_mcp` (a context manager yielding the server; ``.url`` is the MCP endpoint,
  ``.restart()`` brings it back on the same port, ``.stats()`` reads its counters);
* the older HTTP+SSE transport (``sse=True``): the ``mcp`` SDK's ``SseServerTransport`` in a
  Starlette app, as its documentation builds one (``GET /sse`` opens the event stream, which
  announces ``/messages/?session_id=…`` as the ``endpoint`` to ``POST`` to); with
  ``endpoint_origin`` it announces that endpoint on another origin (a server behind a proxy
  that names its inside address), which a client must refuse;
* stdio: :data:`STDIO_COMMAND`, run from the repository root.

Tools: ``add``, ``echo_slowly`` (records when each call starts and ends, so a test can
prove calls overlapped), ``always_fail``, ``hang``, the counted tools of
:mod:`tests.side_effects` (``note``; ``hold``, annotated ``idempotentHint``, and
``hold_once``, which wait for a file), and ``server_stats`` (the counters, for stdio where
there is no HTTP route). ``GET /stats`` returns the same counters: how
many times each MCP method was received (``initialize`` and ``server/discover`` open a
session, ``tools/list``, ``tools/call``), and, under ``http``, the HTTP requests by method
and path (``"POST /sse"``: how often a client tried streamable HTTP first). ``GET /health``
answers once the server is up.

With ``token`` set, every MCP request must carry ``Authorization: Bearer <token>`` or is
answered 401 (the client's header handling and HTTP error mapping).

With ``list_needs_auth`` set the server plays a handshake-era server (no ``server/discover``,
so clients send ``initialize``) that anyone may connect to but whose ``tools/list`` is
answered 401, and which has no GET event stream (405). Its 401 is finished late, in an
order that makes a client that reports the last status it saw say 405 every time: per
session, the GET stream is answered (405) only once the 401's status line is out, and the
401's body only once the client has asked for the stream again (so it has had the 405).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

__all__ = ["McpTestServer", "serve_mcp", "STDIO_COMMAND", "REPO_ROOT", "free_port", "build_server", "sse_app"]

REPO_ROOT = Path(__file__).resolve().parent.parent


def _probe() -> httpx.Client:
    """The tests' shared probe client (imported here only when a test starts a server, not when
    this module runs as the stdio server)."""
    from tests.servers import PROBE

    return PROBE

"""The repository root: the working directory :data:`STDIO_COMMAND` must run in."""

STDIO_COMMAND: tuple[str, ...] = (sys.executable, "-m", "tests.mcp_servers", "--stdio")
"""Runs the test server over stdio (from :data:`REPO_ROOT`, so ``tests`` is importable)."""


# -- the server ---------------------------------------------------------------------


def build_server() -> Any:
    """The test server (an ``MCPServer``) with its counters; imported lazily so tests can import this module cheaply."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse

    from tests import side_effects

    counts: collections.Counter[str] = collections.Counter()
    echoes: list[dict[str, Any]] = []
    in_flight = {"now": 0, "max": 0}

    class CountMethods:
        """Middleware counting every inbound request and notification by method."""

        async def __call__(self, ctx: Any, call_next: Any) -> Any:
            counts[ctx.method] += 1
            return await call_next(ctx)

    server = MCPServer("troupe-test", middleware=[CountMethods()])

    def snapshot() -> dict[str, Any]:
        return {
            "methods": dict(counts),
            # One handshake per client session: legacy clients send initialize, 2026-era ones server/discover.
            "sessions": counts["initialize"] + counts["server/discover"],
            "echoes": list(echoes),
            "max_in_flight": in_flight["max"],
            "pid": os.getpid(),
            "http": dict(HTTP_REQUESTS),
        }

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    async def echo_slowly(text: str, ms: int = 200) -> str:
        """Wait ``ms`` milliseconds, then return ``text``."""
        record: dict[str, Any] = {"text": text, "start": time.monotonic(), "end": None}
        echoes.append(record)
        in_flight["now"] += 1
        in_flight["max"] = max(in_flight["max"], in_flight["now"])
        try:
            await asyncio.sleep(ms / 1000)
        finally:
            in_flight["now"] -= 1
            record["end"] = time.monotonic()
        return text

    @server.tool()
    def always_fail() -> str:
        """Always fails."""
        raise ToolError("this tool always fails")

    @server.tool()
    async def hang() -> str:
        """Never returns."""
        await asyncio.Event().wait()
        return "unreachable"

    # Counted tools (tests.side_effects): each run is a row the tool writes in a SQLite file.
    @server.tool()
    def note(db: str, key: str) -> str:
        """Record that it ran."""
        return side_effects.record(db, key)

    @server.tool(annotations=ToolAnnotations(idempotentHint=True))
    async def hold(db: str, key: str, path: str) -> str:
        """Record that it ran; wait for a file. Safe to run twice."""
        return await side_effects.gate(db, key, path)

    @server.tool()
    async def hold_once(db: str, key: str, path: str) -> str:
        """Record that it ran; wait for a file."""
        return await side_effects.gate(db, key, path)

    @server.tool()
    def server_stats() -> str:
        """The server's counters as JSON."""
        return json.dumps(snapshot())

    @server.custom_route("/health", methods=["GET"])
    async def health(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    @server.custom_route("/stats", methods=["GET"])
    async def stats(request: Request) -> JSONResponse:
        return JSONResponse(snapshot())

    return server


HTTP_REQUESTS: collections.Counter[str] = collections.Counter()
"""This process's HTTP requests by ``"METHOD /path"`` (one server per process)."""


def _count_requests(app: Any) -> Any:
    """ASGI wrapper: count every HTTP request but the test routes (``/health``, ``/stats``)."""

    async def counted(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] not in ("/health", "/stats"):
            HTTP_REQUESTS[f"{scope['method']} {scope['path']}"] += 1
        await app(scope, receive, send)

    return counted


def sse_app(server: Any) -> Any:
    """``server`` on the HTTP+SSE transport: ``SseServerTransport`` in Starlette, as the SDK documents it."""
    from mcp.server.sse import SseServerTransport
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Mount, Route

    transport = SseServerTransport("/messages/")
    lowlevel = server._lowlevel_server  # the MCPServer's protocol server, which runs over any transport

    async def handle_sse(request: Request) -> Response:
        async with transport.connect_sse(request.scope, request.receive, request._send) as (reader, writer):
            await lowlevel.run(reader, writer, lowlevel.create_initialization_options())
        return Response()

    routes = [Route("/sse", endpoint=handle_sse, methods=["GET"]), Mount("/messages/", app=transport.handle_post_message)]
    return Starlette(routes=routes + list(server._custom_starlette_routes))  # + /health and /stats


def _endpoint_on(app: Any, origin: str) -> Any:
    """ASGI wrapper: the event stream's ``endpoint`` event names ``origin`` + its path (another origin)."""

    async def rewritten(scope: dict[str, Any], receive: Any, send: Any) -> None:
        async def send_rewritten(message: dict[str, Any]) -> None:
            body = message.get("body", b"")
            if message["type"] == "http.response.body" and b"event: endpoint" in body:
                message = {**message, "body": body.replace(b"data: /", f"data: {origin}/".encode(), 1)}
            await send(message)

        await app(scope, receive, send_rewritten if scope["type"] == "http" else send)

    return rewritten


def _require_token(app: Any, token: str) -> Any:
    """ASGI wrapper: MCP requests without ``Authorization: Bearer <token>`` get 401."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] not in ("/health", "/stats"):
            if dict(scope["headers"]).get(b"authorization") != expected:
                await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await app(scope, receive, send)

    return guarded


def _list_needs_auth(app: Any) -> Any:
    """ASGI wrapper: see ``list_needs_auth`` in the module docstring."""
    sessions: dict[bytes, dict[str, Any]] = collections.defaultdict(
        lambda: {"gets": 0, "status_sent": asyncio.Event(), "asked_again": asyncio.Event()}
    )

    async def respond(send: Any, status: int, body: bytes, kind: bytes = b"text/plain") -> None:
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", kind)]})
        await send({"type": "http.response.body", "body": body})

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/mcp":
            return await app(scope, receive, send)
        state = sessions[dict(scope["headers"]).get(b"mcp-session-id", b"")]
        if scope["method"] in ("GET", "DELETE"):
            if scope["method"] == "GET":
                state["gets"] += 1
                if state["gets"] == 1:  # bounded waits: a client that never lists still gets its answer
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(state["status_sent"].wait(), 10)
                else:
                    state["asked_again"].set()
            return await respond(send, 405, b"method not allowed")
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        request = json.loads(body or b"{}")
        if request.get("method") == "server/discover":
            error = {"code": -32601, "message": "Method not found"}
            reply = json.dumps({"jsonrpc": "2.0", "id": request.get("id"), "error": error}).encode()
            return await respond(send, 200, reply, b"application/json")
        if request.get("method") == "tools/list":
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"application/json")]})
            state["status_sent"].set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state["asked_again"].wait(), 10)
            await send({"type": "http.response.body", "body": b'{"error": "unauthorized"}'})
            return None
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await app(scope, replay, send)

    return guarded


def _main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The Troupe MCP test server.")
    parser.add_argument("--stdio", action="store_true", help="serve over stdin/stdout")
    parser.add_argument("--sse", action="store_true", help="serve the HTTP+SSE transport instead of streamable HTTP")
    parser.add_argument("--endpoint-origin", default=None, help="(--sse) announce the message endpoint on this origin")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default=None, help="require this bearer token")
    parser.add_argument("--list-needs-auth", action="store_true", help="answer tools/list 401 (see the docstring)")
    args = parser.parse_args(argv)
    server = build_server()
    if args.stdio:
        server.run("stdio")
        return
    import uvicorn

    app = sse_app(server) if args.sse else server.streamable_http_app()
    if args.endpoint_origin:
        app = _endpoint_on(app, args.endpoint_origin)
    if args.token:
        app = _require_token(app, args.token)
    if args.list_needs_auth:
        app = _list_needs_auth(app)
    app = _count_requests(app)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


# -- running it in a subprocess ------------------------------------------------------


def free_port() -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class McpTestServer:
    """The test server in a subprocess on a fixed port; stop and start it at will.

    Args:
        port: The port (default: a free one); kept across :meth:`restart`.
        sse: Serve the HTTP+SSE transport (the URL ends in ``/sse``).
        endpoint_origin: With ``sse``, announce the message endpoint on this origin.
        token: Require this bearer token on MCP requests.
        list_needs_auth: Answer ``tools/list`` 401 (see the module docstring).
    """

    def __init__(self, port: int | None = None, *, sse: bool = False, endpoint_origin: str | None = None,
                 token: str | None = None, list_needs_auth: bool = False) -> None:
        self.port = port or free_port()
        self.sse = sse
        self.endpoint_origin = endpoint_origin
        self.token = token
        self.list_needs_auth = list_needs_auth
        self._process: subprocess.Popen[bytes] | None = None
        self._log = tempfile.TemporaryFile()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The MCP endpoint."""
        return f"{self.base}/sse" if self.sse else f"{self.base}/mcp"

    def start(self, timeout_s: float = 30.0) -> None:
        """Start the server and wait until ``/health`` answers.

        Raises:
            RuntimeError: the process exited or did not come up within ``timeout_s``.
        """
        command = [sys.executable, "-m", "tests.mcp_servers", "--port", str(self.port)]
        if self.sse:
            command.append("--sse")
        if self.endpoint_origin:
            command += ["--endpoint-origin", self.endpoint_origin]
        if self.token:
            command += ["--token", self.token]
        if self.list_needs_auth:
            command.append("--list-needs-auth")
        self._process = subprocess.Popen(
            command, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"MCP test server exited with {self._process.returncode}:\n{self._log_tail()}")
            try:
                if _probe().get(f"{self.base}/health", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.02)  # polling a condition (the health route), not waiting a fixed time
        self.stop()
        raise RuntimeError(f"MCP test server did not come up within {timeout_s} s:\n{self._log_tail()}")

    def stop(self) -> None:
        """Kill the server abruptly (like a crash) and wait until it has exited; idempotent."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGKILL)
            self._process.wait(timeout=30)
        self._process = None

    def restart(self) -> None:
        """Stop, then start again on the same port."""
        self.stop()
        self.start()

    def stats(self) -> dict[str, Any]:
        """The server's counters (see the module docstring)."""
        return httpx.get(f"{self.base}/stats", timeout=5.0).json()

    def _log_tail(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-4000:]

    def close(self) -> None:
        self.stop()
        self._log.close()


@contextlib.contextmanager
def serve_mcp(port: int | None = None, *, sse: bool = False, endpoint_origin: str | None = None,
              token: str | None = None, list_needs_auth: bool = False) -> Iterator[McpTestServer]:
    """Run the test server for the duration of the block.

    Args:
        port: A fixed port (default: a free one).
        sse: Serve the HTTP+SSE transport.
        endpoint_origin: With ``sse``, announce the message endpoint on this origin.
        token: Require this bearer token.
        list_needs_auth: Answer ``tools/list`` 401 (see the module docstring).

    Yields:
        The running :class:`McpTestServer`.
    """
    server = McpTestServer(port, sse=sse, endpoint_origin=endpoint_origin, token=token,
                           list_needs_auth=list_needs_auth)
    server.start()
    try:
        yield server
    finally:
        server.close()


if __name__ == "__main__":
    _main()
