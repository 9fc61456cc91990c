"""Run an ASGI app on a real loopback socket for a test, and wait on conditions."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn


def session_pids(sid: int) -> list[int]:
    """Live processes of session ``sid`` (Linux /proc): a server started with
    ``start_new_session=True`` and every process it started, Ray's included (Ray's workers have
    process groups of their own, and outlive a killed parent a moment)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[3]) == sid and fields[0] != "Z":  # a zombie is dead, only not yet reaped
            pids.append(int(stat.parent.name))
    return pids


def kill_session(sid: int) -> None:
    """SIGKILL every process of session ``sid`` (one this test started), and wait until none is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(sid, signal.SIGKILL)

    def gone() -> bool:
        for pid in session_pids(sid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return not session_pids(sid)

    wait_for(gone, timeout_s=30, what=f"the processes of session {sid} to end")


async def until(condition: Callable[[], bool], *, timeout_s: float = 20.0, what: str = "condition") -> None:
    """``wait_for`` inside an event loop: poll ``condition`` without blocking the loop's other work."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not hold within {timeout_s} s")
        await asyncio.sleep(0.02)


def named_actor_exists(name: str, namespace: str) -> bool:
    """Whether a named Ray actor lives (in the test's Ray session)."""
    import ray

    try:
        ray.get_actor(name, namespace=namespace)
    except ValueError:
        return False
    return True


_FIRST_POLL_S, _MOST_POLL_S = 0.01, 0.1
"""Polls start 10 ms apart and back off to 100 ms: a condition that holds soon is seen at once,
and one that takes a server's start (20-30 s) does not take a core from that server on a 2-core
machine (polling a health check every 10 ms did: 0.7 cores of the CI run)."""


def wait_for(condition: Callable[[], bool], *, timeout_s: float = 20.0, what: str = "condition") -> None:
    """Poll ``condition`` until it holds; fail after ``timeout_s`` (a bound, not a wait)."""
    deadline, pause = time.monotonic() + timeout_s, _FIRST_POLL_S
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not hold within {timeout_s} s")
        time.sleep(pause)
        pause = min(pause * 1.5, _MOST_POLL_S)


async def wait_until(
    condition: Callable[[], Awaitable[bool]], *, timeout_s: float = 30.0, what: str = "condition"
) -> None:
    """Await ``condition()`` until it is true; fail after ``timeout_s`` (a bound, not a wait)."""
    deadline, pause = time.monotonic() + timeout_s, _FIRST_POLL_S
    while not await condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not hold within {timeout_s} s")
        await asyncio.sleep(pause)
        pause = min(pause * 1.5, _MOST_POLL_S)


PROBE = httpx.Client(timeout=2, limits=httpx.Limits(max_keepalive_connections=0))
"""The one HTTP client of the tests' probes (health checks, replicas' routes), shared: a client
made per call (``httpx.get``) builds an SSL context, a few milliseconds of CPU each time. Each
request still opens a connection of its own, as ``httpx.get`` did (no connection kept from
one probe to the next: a probe of a server that went away is refused, not a broken read)."""


def direct_ingress_root(app_name: str) -> str:
    """The root URL at which a Serve app's ingress replica serves HTTP itself (direct ingress),
    found in the replica port range of this session (``RAY_SERVE_DIRECT_INGRESS_*_HTTP_PORT``)."""
    from troupe.serve.deployment import direct_ingress_roots

    first = int(os.environ["RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT"])
    end = int(os.environ["RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT"])
    roots = direct_ingress_roots(range(first, end + 1))
    if app_name not in roots:
        raise LookupError(f"no replica in ports {first}-{end} serves the Serve app {app_name!r}")
    return roots[app_name]


def replica_roots(app_name: str, ports: range | None = None) -> list[str]:
    """The root URL of every ingress replica of a Serve app that serves HTTP itself (several
    with ``num_replicas``), in port order; found as :func:`direct_ingress_root` finds one (in
    ``ports``, if given: another Ray instance's replica port range)."""
    if ports is None:
        first = int(os.environ["RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT"])
        ports = range(first, int(os.environ["RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT"]) + 1)
    roots = []
    for port in ports:
        try:
            routes = PROBE.get(f"http://127.0.0.1:{port}/-/routes").json()
        except (httpx.TransportError, ValueError):
            continue
        roots += [f"http://127.0.0.1:{port}{prefix.rstrip('/')}" for prefix, app in routes.items() if app == app_name]
    return roots


def healthy(url: str) -> bool:
    """Whether ``url/health`` answers 200 now."""
    try:
        return PROBE.get(f"{url}/health", timeout=1).status_code == 200
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
        wait_for(lambda: not thread.is_alive() or healthy(url), what=f"{url}/health")
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
        from troupe.runtime.facade import Runtime
        from troupe.runtime.settings import RuntimeSettings

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


class RecordingUpstream:
    """An ASGI wrapper around the sim app that keeps every Chat Completions body it was sent (or
    another app's requests to another ``path``).

    It checks what goes *upstream*: a transcript bug the sim would tolerate still shows here.
    """

    def __init__(self, app: Any, path: str = "/chat/completions") -> None:
        self.app = app
        self.path = path
        """The requests kept: those whose path ends with it (``/responses``: a Responses server's)."""
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        """Each kept request's headers (lower-case names), beside its body."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].endswith(self.path):
            return await self.app(scope, receive, send)
        self.headers.append({k.decode().lower(): v.decode() for k, v in scope["headers"]})
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        self.bodies.append(json.loads(b"".join(chunks)))
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)


@contextlib.contextmanager
def recorded_sim() -> Iterator[tuple[str, RecordingUpstream]]:
    """The sim server on a free loopback port, every Chat Completions body it gets recorded:
    its API root (``…/v1``) and the recording."""
    from troupe.sim.model import SimSettings
    from troupe.sim.server import create_sim_app

    recording = RecordingUpstream(create_sim_app(SimSettings()))
    with serve_app(recording) as url:
        yield f"{url}/v1", recording


class ScriptedUpstream:
    """A Chat Completions server that answers each call with the next of ``answers`` (text, as
    a model without tool calling writes it), streamed in small pieces or whole as asked, and
    keeps every body it was sent; ``/health`` too. For what the sim does not write: malformed
    answers."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = list(answers)
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        if not scope["path"].endswith("/chat/completions"):
            await _respond(send, 200, b"{}", "application/json")
            return
        body = json.loads(b"".join(chunks))
        self.bodies.append(body)
        text = self.answers.pop(0) if self.answers else "Final Answer: (no answer scripted)"
        usage = {"prompt_tokens": 10, "completion_tokens": len(text.split()), "total_tokens": 10 + len(text.split())}
        if not body.get("stream"):
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            answer = {"id": "chatcmpl-s", "object": "chat.completion", "created": 0, "model": body["model"],
                      "choices": [choice], "usage": usage}  # fmt: skip
            await _respond(send, 200, json.dumps(answer).encode(), "application/json")
            return
        pieces = [text[i : i + 5] for i in range(0, len(text), 5)]
        events = [{"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces]
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage})
        sse = "".join(f"data: {json.dumps({'id': 'chatcmpl-s', 'object': 'chat.completion.chunk', **e})}\n\n"
                      for e in events) + "data: [DONE]\n\n"  # fmt: skip
        await _respond(send, 200, sse.encode(), "text/event-stream")


async def _respond(send: Any, status: int, body: bytes, media: str) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", media.encode())]})
    await send({"type": "http.response.body", "body": body})


class WebhookReceiver:
    """A webhook endpoint for tests: keeps every POST it gets (its headers and body) and answers
    each with the next of ``statuses`` (200 once they run out); ``/health`` answers 200.
    ``statuses`` may be changed while it serves (a receiver that recovers)."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.statuses = list(statuses or [])
        self.received: list[tuple[dict[str, str], bytes]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/health":
            return await _respond(send, 200, b"ok", "text/plain")
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.received.append((headers, b"".join(chunks)))
        status = self.statuses.pop(0) if self.statuses else 200
        await _respond(send, status, b"" if status < 300 else b"receiver says no", "text/plain")
