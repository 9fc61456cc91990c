"""A round-robin load balancer over several servers' ports, for tests: each request goes to the next.

It is the balancer that docs/cluster.md puts in front of several ingress replicas: it reads no
body to choose, so the turns of one conversation land on every replica in turn, and each
replica must hand a turn it does not host to the one that does. Bodies and answers pass
through as bytes (streams as they come); a client that leaves closes the upstream request, as a
real proxy's does. Serve it with :func:`tests.servers.serve_app`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

import httpx

_HOP_BY_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade", b"host",
               b"date", b"server"}  # fmt: skip


class RoundRobin:
    """An ASGI app forwarding each HTTP request to the next of ``roots`` (``http://host:port``)."""

    def __init__(self, roots: list[str]) -> None:
        self.roots = roots  # may be replaced (a replica restarted on another port)
        self._turn = itertools.count()
        self._client: httpx.AsyncClient | None = None  # made in the server's loop, on first use

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        root = self.roots[next(self._turn) % len(self.roots)]
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=None)
        query = scope.get("query_string", b"").decode()
        request = self._client.build_request(
            scope["method"], f"{root}{scope['path']}" + (f"?{query}" if query else ""),
            headers=[(k, v) for k, v in scope["headers"] if k.lower() not in _HOP_BY_HOP], content=body,
        )  # fmt: skip
        try:
            upstream = await self._client.send(request, stream=True)
        except httpx.TransportError as exc:
            await send({"type": "http.response.start", "status": 502, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": f"upstream {root}: {exc!r}".encode()})
            return
        relay = asyncio.ensure_future(self._relay(upstream, send))
        left = asyncio.ensure_future(self._disconnected(receive))
        try:
            await asyncio.wait({relay, left}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            left.cancel()
            relay.cancel()
            with contextlib.suppress(BaseException):
                await relay
            await upstream.aclose()  # a client that left closes the upstream request too

    @staticmethod
    async def _relay(upstream: httpx.Response, send: Any) -> None:
        headers = [(k, v) for k, v in upstream.headers.raw if k.lower() not in _HOP_BY_HOP]
        await send({"type": "http.response.start", "status": upstream.status_code, "headers": headers})
        async for chunk in upstream.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    @staticmethod
    async def _disconnected(receive: Any) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
