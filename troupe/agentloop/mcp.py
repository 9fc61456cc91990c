"""The MCP seam: what the loop needs from MCP servers, and nothing about how it connects.

Internal to the loop and Troupe's runtime: not part of :mod:`troupe.agentloop`'s public surface.

A request's ``{"type": "mcp", ...}`` tools become :class:`McpServer` values. The
loop lists a server's tools once per thread (an ``mcp_list_tools`` item), shows
them to the model as function tools, and runs the model's calls through an
:class:`McpClient`. Implementations live in ``troupe.runtime.ray.mcp``: long-lived
connection actors on Ray, or in-process sessions without Ray.

Secrets (``headers``, ``authorization``) travel only inside :class:`McpServer`
and are never put in items, events, traces or storage; its ``repr`` hides them.

Errors::

    McpError               a listing or a call failed; ``kind`` says how
                           (``protocol``: the server or the connection failed;
                            ``tool``: the tool ran and reported an error;
                            ``http``: the server answered with an HTTP error)

A server the request itself names (``server_url``) that cannot be listed fails the whole
request, as at OpenAI: :meth:`McpToolset.prefetch` raises
:class:`~troupe.protocol.errors.ExternalConnectorError` (HTTP 424) before the response
starts (:func:`listing_failed` words it). A configured server that cannot be listed, and
any failing call, are reported on their item instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Literal, Protocol, runtime_checkable

from troupe.protocol.errors import ExternalConnectorError

__all__ = ["McpServer", "McpTool", "McpClient", "McpError", "McpToolset", "ApprovalPolicy", "listing_failed"]

ApprovalPolicy = Literal["always", "never"] | dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class McpServer:
    """One MCP server as a request (or the configuration) names it."""

    label: str
    """``server_label``: how items and the model refer to this server."""
    url: str | None = None
    """Streamable HTTP (or SSE) endpoint; None for a configured stdio server."""
    command: tuple[str, ...] | None = None
    """For a configured stdio server: the command line that starts it."""
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    """HTTP headers for the server, ``authorization`` folded in as ``Authorization``. Secret."""
    allowed_tools: frozenset[str] | None = None
    """Only these tools are listed and may be called; None means all."""
    require_approval: ApprovalPolicy = "always"
    """``always``, ``never``, or ``{"always": {"tool_names": [...]}, "never": {"tool_names": [...]}}``."""
    description: str | None = None
    from_request: bool = False
    """The request gave ``server_url`` (it did not name a configured server): if the server
    cannot be listed, the request fails with a 424 rather than going on without it."""
    param: str | None = None
    """Where the request names this server (``tools[2]``), for errors; None: ``tools``."""

    def needs_approval(self, tool: str) -> bool:
        """Whether a call to ``tool`` waits for the client's approval (OpenAI's default: yes)."""
        policy = self.require_approval
        if policy == "never":
            return False
        if policy == "always":
            return True
        never = set((policy.get("never") or {}).get("tool_names") or [])
        always = set((policy.get("always") or {}).get("tool_names") or [])
        if tool in never:
            return False
        if tool in always:
            return True
        # Unlisted tools: with only an "always" list the list is the exception and the rest
        # run freely; otherwise (a "never" list, or no list) ask, OpenAI's safe default.
        return bool(never) or not always

    def allows(self, tool: str) -> bool:
        return self.allowed_tools is None or tool in self.allowed_tools


@dataclass(frozen=True, slots=True, kw_only=True)
class McpTool:
    """One tool a server offers (``mcp_list_tools.tools[]`` on the wire)."""

    name: str
    input_schema: dict[str, Any]
    description: str | None = None
    annotations: dict[str, Any] | None = None

    def to_item(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "input_schema": self.input_schema,
            "description": self.description,
            "annotations": self.annotations,
        }


class McpError(Exception):
    """A listing or a call failed. Picklable (args go to ``Exception``)."""

    def __init__(self, message: str, kind: Literal["protocol", "tool", "http"] = "protocol", code: int | None = None):
        super().__init__(message, kind, code)
        self.message = message
        self.kind = kind
        self.code = code

    def to_item_error(self) -> dict[str, Any]:
        """The ``mcp_call.error`` object (the SDK's typed shape)."""
        if self.kind == "tool":
            return {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": self.message}]}
        if self.kind == "http":
            return {"type": "http_error", "code": self.code or 500, "message": self.message}
        return {"type": "mcp_protocol_error", "code": self.code or -32000, "message": self.message}

    def __str__(self) -> str:
        return self.message


def listing_failed(server: McpServer, error: BaseException) -> ExternalConnectorError:
    """The 424 for a request's server that could not be listed, worded as OpenAI words it.

    ``param`` is the server's ``tools[i]`` (``tools`` when unknown); an HTTP error status
    is named with its phrase, e.g. ``Http status code: 401 (Unauthorized)``.
    """
    if isinstance(error, McpError) and error.kind == "http" and error.code:
        try:
            phrase = f" ({HTTPStatus(error.code).phrase})"
        except ValueError:
            phrase = ""
        detail = f"Http status code: {error.code}{phrase}"
    else:
        detail = str(error).removeprefix(f"MCP server {server.label!r}: ") or type(error).__name__
        detail = detail[:1].upper() + detail[1:]
    return ExternalConnectorError(
        f"Error retrieving tool list from MCP server: {server.label!r}. {detail}", param=server.param or "tools"
    )


@runtime_checkable
class McpClient(Protocol):
    """Lists and calls tools on MCP servers."""

    def check_server(self, server: McpServer, index: int | None = None) -> None:
        """Refuse a server this deployment may not reach (URL allowlist).

        Args:
            server: the resolved server.
            index: its position in the request's ``tools``, for the error's ``param``.

        Raises:
            InvalidRequest: naming why (e.g. a metadata address); raised before the turn runs.
        """
        ...

    async def list_tools(self, server: McpServer) -> list[McpTool]:
        """The server's tools (all of them; the loop applies ``allowed_tools``).

        Raises:
            McpError: the server could not be reached or answered with an error.
        """
        ...

    async def call_tool(self, server: McpServer, name: str, arguments: dict[str, Any]) -> str:
        """Call a tool; its text output.

        Raises:
            McpError: ``kind="tool"`` when the tool reported an error, else the
                connection or protocol failed (including a timeout).
        """
        ...

    async def close(self) -> None:
        """Close every session this client opened."""
        ...


class McpToolset:
    """A response's MCP servers as one tool executor, plus what the driver needs for mcp items.

    Built per response from the request's servers and the thread's history: a server
    whose tools an ``mcp_list_tools`` item in the history already lists is not listed
    again (dedupe keyed on ``server_label``); the others are listed before the response
    starts (:meth:`prefetch`) and shown by the driver as it starts (:meth:`to_list`,
    :meth:`listing`, :meth:`record_listing`).

    Args:
        client: how to reach the servers.
        servers: the request's MCP servers.
        history: the thread's client items (for earlier listings).
    """

    def __init__(self, client: McpClient, servers: list[McpServer], history: list[dict[str, Any]]) -> None:
        self.client = client
        self.servers = {s.label: s for s in servers}
        self._tools: dict[str, list[McpTool]] = {}
        self._route: dict[str, str] = {}  # tool name -> server label
        self._prefetched: dict[str, list[McpTool] | BaseException] = {}  # label -> answer, until shown
        self.learn(history)

    def learn(self, items: Sequence[dict[str, Any]]) -> None:
        """Take the listings of ``items``' ``mcp_list_tools`` items as known (the thread's, or
        those a resumed response showed before its host died)."""
        for item in items:
            if item.get("type") == "mcp_list_tools" and item.get("server_label") in self.servers and not item.get("error"):
                self._tools[item["server_label"]] = [_tool_from_item(t) for t in item.get("tools") or []]
        self._rebuild_routes()

    def to_list(self) -> list[McpServer]:
        """Servers with no listing in this thread yet."""
        return [s for label, s in self.servers.items() if label not in self._tools]

    async def prefetch(self) -> None:
        """List every server :meth:`to_list` names, all at once, and keep the answers for :meth:`listing`.

        Run before the response's first event, so that a request naming a server that cannot
        be listed fails as an HTTP error rather than as a stream.

        Raises:
            ExternalConnectorError: a server from the request's ``server_url`` could not be
                listed (the first such in ``tools`` order); configured servers' failures are kept.
        """
        servers = self.to_list()
        results = await asyncio.gather(*(self.client.list_tools(s) for s in servers), return_exceptions=True)
        self._prefetched = {s.label: r for s, r in zip(servers, results, strict=True)}
        for server, result in zip(servers, results, strict=True):
            if isinstance(result, Exception) and server.from_request:
                raise listing_failed(server, result) from result

    async def listing(self, server: McpServer) -> list[McpTool]:
        """``server``'s tools: the answer :meth:`prefetch` kept (used once), else a listing now.

        Raises:
            McpError: the server could not be listed.
        """
        kept = self._prefetched.pop(server.label, None)
        if kept is None:
            return await self.client.list_tools(server)
        if isinstance(kept, BaseException):
            raise kept
        return kept

    def record_listing(self, label: str, tools: list[McpTool]) -> list[McpTool]:
        """Keep a fresh listing; returns the tools the item shows (``allowed_tools`` applied)."""
        shown = [t for t in tools if self.servers[label].allows(t.name)]
        self._tools[label] = shown
        self._rebuild_routes()
        return shown

    def _rebuild_routes(self) -> None:
        self._route = {}
        for label, tools in self._tools.items():
            for tool in tools:
                # Two servers offering one name: the first listed keeps it (see docs/agent-loop.md).
                if self.servers[label].allows(tool.name):
                    self._route.setdefault(tool.name, label)

    def label_of(self, name: str) -> str | None:
        """The server label of an MCP tool the model may call, else None."""
        return self._route.get(name)

    # -- ToolExecutor ------------------------------------------------------------

    def definitions(self) -> list[dict[str, Any]]:
        out = []
        for name, label in self._route.items():
            tool = next(t for t in self._tools[label] if t.name == name)
            out.append(
                {
                    "type": "function",
                    "name": name,
                    "description": tool.description or "",
                    "parameters": tool.input_schema or {"type": "object", "properties": {}},
                    "strict": False,
                }
            )
        return out

    restricted_by_allowed_tools = False
    """``tool_choice: allowed_tools`` names function tools; MCP tools follow their server's own ``allowed_tools``."""

    def can_execute(self, call: Any) -> bool:
        return call.name in self._route

    def needs_approval(self, call: Any) -> bool:
        return self.servers[self._route[call.name]].needs_approval(call.name)

    def is_idempotent(self, call: Any) -> bool:
        """Whether the server's listing annotates the tool ``idempotentHint`` (safe to run again
        after a host died during it; module :mod:`~troupe.agentloop.checkpoint`)."""
        label = self._route.get(call.name)
        tool = next((t for t in self._tools.get(label or "", []) if t.name == call.name), None)
        return bool(tool is not None and (tool.annotations or {}).get("idempotentHint"))

    def approval_item(self, call: Any) -> dict[str, Any]:
        from troupe.protocol import new_id

        return {
            "type": "mcp_approval_request",
            "id": new_id("mcpr"),
            "server_label": self._route[call.name],
            "name": call.name,
            "arguments": call.arguments,
        }

    async def execute(self, call: Any) -> str:
        return await self.call(self._route[call.name], call.name, call.arguments)

    async def call(self, label: str, name: str, arguments: str) -> str:
        """Call ``name`` on server ``label`` with JSON ``arguments`` (an approved call names its server)."""
        import json

        try:
            parsed = json.loads(arguments or "{}")
        except json.JSONDecodeError as exc:
            raise McpError(f"arguments are not valid JSON: {exc.msg}", kind="protocol") from exc
        return await self.client.call_tool(self.servers[label], name, parsed)


def _tool_from_item(tool: dict[str, Any]) -> McpTool:
    return McpTool(
        name=tool["name"],
        input_schema=tool.get("input_schema") or {},
        description=tool.get("description"),
        annotations=tool.get("annotations"),
    )
