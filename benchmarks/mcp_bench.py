"""Scenario 6: an MCP tool call through the long-lived connection actor, against opening a
session per call.

Two processes, both started by the runner:

* ``python -m benchmarks.mcp_bench serve --port P``: a minimal MCP server (the ``mcp`` SDK's
  ``MCPServer``, streamable HTTP on 127.0.0.1) with one tool, ``add``, and ``GET /health``;
* ``python -m benchmarks.mcp_bench measure --url URL --calls N``: starts a fresh local Ray
  instance (2 CPUs; it shuts down only that) and times N sequential ``add`` calls, then N more
  8 at a time, three ways:

  - ``actor``: :class:`troupe.runtime.ray.mcp.RayMcpClient`, the connection actor that keeps one
    session open (one Ray hop per call);
  - ``in-process``: :class:`troupe.runtime.ray.mcp.LocalMcpClient`, the same kept-open session
    without Ray (what the hop costs);
  - ``session per call``: a new :class:`troupe.runtime.mcp_session.McpSession` opened and
    closed around every call (what a gateway without connection reuse pays).

  It prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["main"]


def _serve(port: int) -> None:
    import uvicorn
    from mcp.server.mcpserver import MCPServer
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse

    server = MCPServer("troupe-bench")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.custom_route("/health", methods=["GET"])
    async def health(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=port, log_level="warning")


async def _timed(calls: int, concurrency: int, call: Callable[[int], Awaitable[Any]]) -> dict[str, Any]:
    from troupe.bench.stats import summarize

    latencies: list[float] = []
    errors: list[str] = []
    queue = iter(range(calls))

    async def worker() -> None:
        for i in queue:
            start = time.perf_counter()
            try:
                await call(i)
                latencies.append((time.perf_counter() - start) * 1000)
            except Exception as exc:  # noqa: BLE001 - recorded
                errors.append(f"{type(exc).__name__}: {exc}"[:200])

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - started
    summary = summarize(latencies)
    return {
        "concurrency": concurrency,
        "calls": calls,
        "errors": len(errors),
        "error_example": errors[0] if errors else None,
        "latency_ms": summary.to_dict(3) if summary else None,
        "calls_per_s": round(len(latencies) / wall, 2) if wall > 0 else None,
    }


async def _measure(url: str, calls: int) -> dict[str, Any]:
    from troupe.agentloop.mcp import McpServer
    from troupe.runtime.ray.mcp import LocalMcpClient, McpSession, RayMcpClient
    from troupe.runtime.settings import McpSettings, RuntimeSettings

    # The bench's MCP server is on loopback, which the default URL policy refuses.
    settings = RuntimeSettings(
        namespace="troupe-bench-mcp", storage_path=":memory:", mcp=McpSettings(allowed_urls=("http://127.0.0.1:*",))
    )
    server = McpServer(label="bench", url=url, require_approval="never")
    out: dict[str, Any] = {}

    actor = RayMcpClient(settings)
    start = time.perf_counter()
    await actor.call_tool(server, "add", {"a": 1, "b": 2})  # creates the actor, opens the session
    out["actor_first_call_ms"] = round((time.perf_counter() - start) * 1000, 2)
    local = LocalMcpClient(settings)
    await local.call_tool(server, "add", {"a": 1, "b": 2})

    async def per_call(i: int) -> None:
        session = McpSession(server, timeout_s=settings.mcp.timeout_s)
        try:
            await session.call_tool("add", {"a": i, "b": 1})
        finally:
            await session.close()

    ways: dict[str, Callable[[int], Awaitable[Any]]] = {
        "actor": lambda i: actor.call_tool(server, "add", {"a": i, "b": 1}),
        "in-process": lambda i: local.call_tool(server, "add", {"a": i, "b": 1}),
        "session per call": per_call,
    }
    rows = []
    for concurrency in (1, 8):
        for way, call in ways.items():
            rows.append({"way": way, **await _timed(calls, concurrency, call)})
    out["rows"] = rows
    out["actor_stats"] = await actor.stats(server)
    await local.close()
    await actor.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve")
    serve.add_argument("--port", type=int, required=True)
    measure = sub.add_parser("measure")
    measure.add_argument("--url", required=True)
    measure.add_argument("--calls", type=int, default=60)
    args = parser.parse_args(argv)
    if args.command == "serve":
        _serve(args.port)
        return 0
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        result = asyncio.run(_measure(args.url, args.calls))
    finally:
        ray.shutdown()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
