"""A small MCP server to try Troupe's MCP tools with: `python examples/mcp_server.py --port 8765`.

Tools: `add(a, b)`, `word_count(text)`, `slow_echo(text, ms)`. Serves the streamable
HTTP transport at http://127.0.0.1:PORT/mcp, the older HTTP+SSE transport at
http://127.0.0.1:PORT/sse with --sse (messages are POSTed to /messages/), or stdio with
--stdio. With --token T, every HTTP request must carry `Authorization: Bearer T` (else 401):
to try vaults (docs/vaults.md). Written with the `mcp` SDK, which Troupe already depends on.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from mcp.server.mcpserver import MCPServer

server = MCPServer("troupe-example")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def word_count(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())


@server.tool()
async def slow_echo(text: str, ms: int = 500) -> str:
    """Wait `ms` milliseconds, then return `text` (to watch parallel calls overlap)."""
    await asyncio.sleep(ms / 1000)
    return text


def require_token(app: Any, token: str) -> Any:
    """ASGI wrapper: HTTP requests without ``Authorization: Bearer <token>`` get 401."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await app(scope, receive, send)

    return guarded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--stdio", action="store_true", help="serve over stdin/stdout instead of HTTP")
    parser.add_argument("--sse", action="store_true", help="serve the older HTTP+SSE transport (GET /sse)")
    parser.add_argument("--token", default=None, help="require this bearer token on every HTTP request")
    args = parser.parse_args()
    if args.stdio:
        server.run("stdio")
        return
    import uvicorn

    app = server.sse_app() if args.sse else server.streamable_http_app()
    if args.token:
        app = require_token(app, args.token)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
