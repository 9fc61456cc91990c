"""MCP clients against real MCP servers (tests/mcp_servers.py): in-process sessions over streamable HTTP,
HTTP+SSE and stdio, and the connection actors on Ray."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.mcp_servers import REPO_ROOT, STDIO_COMMAND, McpTestServer, free_port, serve_mcp
from tests.servers import serve_app
from troupe.agentloop.mcp import McpError, McpServer
from troupe.runtime.mcp_policy import AddressGuard, check_url, pinned_transport
from troupe.runtime.ray.mcp import LocalMcpClient, McpSession, RayMcpClient, actor_name, resolve_mcp_tool
from troupe.runtime.settings import McpServerSpec, McpSettings, RuntimeSettings

ALLOW_LOOPBACK = ("http://127.0.0.1:*",)
STDIO = McpServerSpec(label="stdio-test", command=STDIO_COMMAND)


def make_settings(timeout_s: float = 10.0, **overrides: Any) -> RuntimeSettings:
    mcp = McpSettings(allowed_urls=ALLOW_LOOPBACK, servers=(STDIO,), timeout_s=timeout_s)
    return RuntimeSettings(mcp=mcp, **overrides)


@pytest.fixture
def http_server() -> Iterator[McpTestServer]:
    """A fresh server per test: the counters start at zero."""
    with serve_mcp() as server:
        yield server


@pytest.fixture(scope="module")
def sse_server() -> Iterator[McpTestServer]:
    """One HTTP+SSE server for the module (the SDK's SseServerTransport): tests read its counters as deltas."""
    with serve_mcp(sse=True) as server:
        yield server


@pytest.fixture(params=["http", "sse", "stdio"])
def kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(REPO_ROOT)  # STDIO_COMMAND runs `-m tests.mcp_servers` from the working directory
    return request.param


@pytest.fixture
async def client() -> AsyncIterator[LocalMcpClient]:
    local = LocalMcpClient(make_settings())
    yield local
    await local.close()


@pytest.fixture
def target(kind: str, request: pytest.FixtureRequest) -> McpServer:
    """The server under test as a request names it: an HTTP URL (streamable HTTP, or HTTP+SSE found by the
    fallback), or the configured stdio server's label."""
    if kind in ("http", "sse"):
        url = request.getfixturevalue("http_server" if kind == "http" else "sse_server").url
        tool = {"type": "mcp", "server_label": f"{kind}-test", "server_url": url, "require_approval": "never"}
    else:
        tool = {"type": "mcp", "server_label": STDIO.label}
    return resolve_mcp_tool(tool, make_settings(), 0)


async def server_stats(client: LocalMcpClient | RayMcpClient, server: McpServer) -> dict[str, Any]:
    """The server's own counters, read through the server_stats tool (works for stdio too)."""
    return json.loads(await client.call_tool(server, "server_stats", {}))


# -- in-process sessions -------------------------------------------------------------------


async def test_list_and_call(client: LocalMcpClient, target: McpServer) -> None:
    client.check_server(target, 0)
    tools = {t.name: t for t in await client.list_tools(target)}
    assert {"add", "echo_slowly", "always_fail", "hang"} <= tools.keys()
    assert tools["add"].input_schema["properties"].keys() == {"a", "b"}
    assert tools["add"].description == "Add two integers."
    assert await client.call_tool(target, "add", {"a": 40, "b": 2}) == "42"


async def test_failing_tool_is_a_tool_error(client: LocalMcpClient, target: McpServer) -> None:
    with pytest.raises(McpError) as caught:
        await client.call_tool(target, "always_fail", {})
    assert caught.value.kind == "tool" and "always fails" in caught.value.message
    assert caught.value.to_item_error()["type"] == "mcp_tool_execution_error"
    assert await client.call_tool(target, "add", {"a": 1, "b": 1}) == "2"  # the session survives


async def test_hanging_tool_times_out(target: McpServer) -> None:
    # Long enough for a stdio server to start on a loaded machine (3 s was not, at a load of
    # 10 to 20 on 2 cores), short enough for a test; the e2e suite's hang test waits as long.
    local = LocalMcpClient(make_settings(timeout_s=6.0))
    try:
        with pytest.raises(McpError) as caught:
            await local.call_tool(target, "hang", {})
        assert caught.value.kind == "protocol" and "timed out after 6 s" in caught.value.message
        assert await local.call_tool(target, "add", {"a": 2, "b": 3}) == "5"  # the session is still usable
        assert (await local.stats(target))["sessions_opened"] == 1
    finally:
        await local.close()


async def test_concurrent_calls_overlap(client: LocalMcpClient, target: McpServer) -> None:
    import asyncio

    texts = [f"{word}-{uuid.uuid4().hex[:6]}" for word in ("one", "two", "three")]
    results = await asyncio.gather(
        *(client.call_tool(target, "echo_slowly", {"text": t, "ms": 1000}) for t in texts)
    )
    assert results == texts
    echoes = [e for e in (await server_stats(client, target))["echoes"] if e["text"] in texts]
    assert len(echoes) == 3
    # All three were in flight at once: every call started before any of them ended.
    assert max(e["start"] for e in echoes) < min(e["end"] for e in echoes)


async def test_tools_list_is_cached(client: LocalMcpClient, target: McpServer) -> None:
    await server_stats(client, target)  # after a tool's first call, the SDK lists (for its output schema)
    before = (await server_stats(client, target))["methods"]["tools/list"]  # a shared server's count
    first = await client.list_tools(target)
    second = await client.list_tools(target)
    assert [t.name for t in first] == [t.name for t in second]
    assert (await server_stats(client, target))["methods"]["tools/list"] == before + 1
    await client.list_tools(target, refresh=True)
    assert (await server_stats(client, target))["methods"]["tools/list"] == before + 2
    stats = await client.stats(target)
    assert (stats["list_calls"], stats["server_lists"]) == (3, 2)  # the SDK's own listing is not ours


async def test_one_session_across_many_calls(client: LocalMcpClient, target: McpServer) -> None:
    before = (await server_stats(client, target))["sessions"]  # this client's session included
    await client.list_tools(target)
    for i in range(10):
        assert await client.call_tool(target, "add", {"a": i, "b": 1}) == str(i + 1)
    assert (await server_stats(client, target))["sessions"] == before
    stats = await client.stats(target)
    assert (stats["sessions_opened"], stats["reconnects"], stats["calls"]) == (1, 0, 12)


async def test_down_server_is_a_protocol_error(client: LocalMcpClient) -> None:
    nothing = McpServer(label="down", url=f"http://127.0.0.1:{free_port()}/mcp")
    with pytest.raises(McpError) as caught:
        await client.list_tools(nothing)
    assert caught.value.kind == "protocol" and "'down'" in caught.value.message
    missing = McpServer(label="no-such-command", command=("/nonexistent/mcp-server",))
    with pytest.raises(McpError) as caught:
        await client.call_tool(missing, "add", {})
    assert caught.value.kind == "protocol"


async def test_unresponsive_server_times_out() -> None:
    import socket

    # Accepts connections (the kernel's backlog) but never answers a byte.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        server = McpServer(label="silent", url=f"http://127.0.0.1:{silent.getsockname()[1]}/mcp")
        local = LocalMcpClient(make_settings(timeout_s=0.5))
        try:
            for _ in range(2):  # the second call makes a fresh attempt rather than waiting on the stuck one
                with pytest.raises(McpError) as caught:
                    await local.list_tools(server)
                assert caught.value.kind == "protocol" and "timed out" in caught.value.message
        finally:
            await local.close()


async def test_reconnects_after_server_restart(client: LocalMcpClient, http_server: McpTestServer) -> None:
    server = McpServer(label="restarting", url=http_server.url)
    assert await client.call_tool(server, "add", {"a": 1, "b": 2}) == "3"
    http_server.restart()  # same port, new process
    assert await client.call_tool(server, "add", {"a": 2, "b": 2}) == "4"
    http_server.stop()
    with pytest.raises(McpError) as caught:
        await client.call_tool(server, "add", {"a": 0, "b": 0})
    assert caught.value.kind == "protocol"
    http_server.start()
    assert await client.call_tool(server, "add", {"a": 3, "b": 3}) == "6"
    stats = await client.stats(server)
    assert stats["reconnects"] == 1 and stats["sessions_opened"] == 2
    assert http_server.stats()["sessions"] == 1


async def test_stateful_session_is_replaced_after_restart(http_server: McpTestServer) -> None:
    # The handshake-era protocol keeps a server-side session that a restart forgets (HTTP 404):
    # the call is resent on a new session, transparently.
    session = McpSession(McpServer(label="legacy", url=http_server.url), timeout_s=10.0, mode="legacy")
    try:
        assert await session.call_tool("add", {"a": 1, "b": 2}) == "3"
        http_server.restart()
        assert await session.call_tool("add", {"a": 20, "b": 22}) == "42"
        assert (session.stats["sessions_opened"], session.stats["reconnects"]) == (2, 1)
        assert http_server.stats()["methods"]["initialize"] == 1
    finally:
        await session.close()


async def test_http_error_status_and_authorization(client: LocalMcpClient) -> None:
    with serve_mcp(token="t0ken") as guarded:
        anonymous = resolve_mcp_tool({"server_label": "guarded", "server_url": guarded.url}, make_settings())
        with pytest.raises(McpError) as caught:
            await client.list_tools(anonymous)
        assert (caught.value.kind, caught.value.code) == ("http", 401)
        assert "t0ken" not in str(caught.value)
        authorized = resolve_mcp_tool({"server_label": "guarded", "server_url": guarded.url,
                                       "authorization": "t0ken"}, make_settings())
        assert await client.call_tool(authorized, "add", {"a": 5, "b": 5}) == "10"


async def test_a_401_to_tools_list_is_reported_as_401_not_the_event_streams_405(client: LocalMcpClient) -> None:
    # The server's GET event stream answers 405 after the listing's 401 (see tests/mcp_servers.py):
    # the status reported is the listing's own.
    with serve_mcp(list_needs_auth=True) as guarded:
        server = resolve_mcp_tool({"server_label": "guarded", "server_url": guarded.url}, make_settings())
        with pytest.raises(McpError) as caught:
            await client.list_tools(server)
        assert (caught.value.kind, caught.value.code) == ("http", 401), caught.value.message
        assert "405" not in caught.value.message
        # Refused for want of credentials is not a broken session: no second session, no resend.
        assert (await client.stats(server))["sessions_opened"] == 1
        assert guarded.stats()["methods"]["initialize"] == 1


async def test_auth_failure_does_not_fall_back_to_sse(client: LocalMcpClient) -> None:
    with serve_mcp(token="t0ken") as guarded:
        server = McpServer(label="guarded", url=guarded.url)
        with pytest.raises(McpError) as caught:
            await client.list_tools(server)
        assert (caught.value.kind, caught.value.code) == ("http", 401)
        assert await client.transport(server) == "streamable_http"  # a 401 is an answer, not an older server
        assert "GET /mcp" not in guarded.stats()["http"]


# -- the HTTP+SSE transport (MCP 2024-11-05), found by the fallback -----------------------------


def sse_delta(server: McpTestServer, before: dict[str, Any]) -> dict[str, int]:
    """The HTTP requests ``server`` received since ``before`` (a ``stats()["http"]`` snapshot)."""
    after = server.stats()["http"]
    return {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}


async def test_falls_back_to_sse_once_and_keeps_the_credentials_out_of_logs(
    client: LocalMcpClient, sse_server: McpTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    caplog.set_level(logging.DEBUG)  # every logger, the SDK's and httpx's included
    secret = f"sk-sse-{uuid.uuid4().hex}"
    server = resolve_mcp_tool({"server_label": "sse", "server_url": sse_server.url, "authorization": secret,
                               "headers": {"X-Key": secret}}, make_settings())
    before = sse_server.stats()["http"]
    assert "add" in {t.name for t in await client.list_tools(server)}
    for i in range(3):
        assert await client.call_tool(server, "add", {"a": 20, "b": i}) == str(20 + i)
    assert await client.transport(server) == "sse"
    requests = sse_delta(sse_server, before)
    # The spec's order: the streamable POST first (refused: 405), then the event stream, once;
    # every message after that goes to the endpoint it announced, none to the streamable URL again.
    assert requests["POST /sse"] >= 1 and requests["GET /sse"] == 1
    assert requests["POST /messages/"] >= 4  # the handshake, the listing, three calls
    assert (await client.stats(server))["sessions_opened"] == 1
    assert caplog.records, "the logs were captured"
    assert not [r for r in caplog.records if secret in r.getMessage()], "a credential was logged"


async def test_a_configured_server_on_sse_is_named_by_label(sse_server: McpTestServer) -> None:
    # A configured server is trusted (no address guard), but its endpoint must stay on its origin all the same.
    spec = McpServerSpec(label="sse-configured", url=sse_server.url, require_approval="never")
    settings = RuntimeSettings(mcp=McpSettings(servers=(spec,), timeout_s=10.0))
    local = LocalMcpClient(settings)
    server = resolve_mcp_tool({"type": "mcp", "server_label": "sse-configured"}, settings, 0)
    try:
        local.check_server(server, 0)
        assert await local.call_tool(server, "add", {"a": 1, "b": 41}) == "42"
        assert await local.transport(server) == "sse"
    finally:
        await local.close()


async def test_neither_transport_reports_the_posts_status(client: LocalMcpClient, sse_server: McpTestServer) -> None:
    # Nothing there: the POST is answered 404, and so is the GET the fallback makes.
    nowhere = McpServer(label="nowhere", url=f"{sse_server.base}/nothing-here")
    with pytest.raises(McpError) as caught:
        await client.list_tools(nowhere)
    assert (caught.value.kind, caught.value.code) == ("http", 404), caught.value.message


async def test_the_message_endpoint_must_pass_the_url_policy(sse_server: McpTestServer) -> None:
    # The allowlist names the event stream's URL only: the endpoint the server announces
    # (/messages/) is refused by the same policy, before anything is sent there.
    settings = RuntimeSettings(mcp=McpSettings(allowed_urls=(sse_server.url,), timeout_s=10.0))
    local = LocalMcpClient(settings)
    server = resolve_mcp_tool({"server_label": "narrow", "server_url": sse_server.url}, settings, 0)
    local.check_server(server, 0)  # the server's own URL passes
    before = sse_server.stats()["http"]
    try:
        with pytest.raises(McpError) as caught:
            await local.list_tools(server)
    finally:
        await local.close()
    assert caught.value.message == (
        f"MCP server 'narrow': the message endpoint the server announced ({sse_server.base}/messages/) "
        "may not be reached: it does not match the allowed MCP server URLs")
    assert "POST /messages/" not in sse_delta(sse_server, before)


# -- the URL policy at connect time ---------------------------------------------------------


def _host_echo() -> object:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def host(request: Request) -> PlainTextResponse:
        return PlainTextResponse(request.headers["host"])

    return Starlette(routes=[Route("/health", host), Route("/host", host)])


async def test_dns_rebinding_cannot_reach_a_refused_address(http_server: McpTestServer) -> None:
    # The request is checked while "localhost" answers with a public address; by the time the
    # transport connects it answers 127.0.0.1 (as the system resolver does). The connection
    # goes only to an address it checked itself, so it is refused and the server sees nothing.
    answers = iter([["93.184.216.34"]])

    def rebinding(host: str) -> list[str]:
        return next(answers, ["127.0.0.1"])

    url = f"http://localhost:{http_server.port}/mcp"
    assert check_url(url, resolver=rebinding) is None  # the request's check passes
    session = McpSession(McpServer(label="rebind", url=url), timeout_s=5.0, guard=AddressGuard(resolver=rebinding))
    try:
        with pytest.raises(McpError) as caught:
            await session.list_tools()
        assert "localhost resolves to 127.0.0.1, a loopback address" in caught.value.message
    finally:
        await session.close()
    assert http_server.stats()["methods"] == {}, "no MCP request reached the loopback server"


async def test_the_connection_goes_to_the_checked_address_under_the_host_name() -> None:
    import httpx2

    with serve_app(_host_echo()) as base:
        port = base.rsplit(":", 1)[1]
        resolved_on: list[threading.Thread] = []

        def resolver(host: str) -> list[str] | None:
            resolved_on.append(threading.current_thread())
            return {"echo.example": ["127.0.0.1"]}.get(host)

        pinned = AddressGuard(allow_private=True, resolver=resolver)
        async with httpx2.AsyncClient(transport=pinned_transport(pinned)) as http:
            # echo.example exists only in this resolver: the socket went to the checked 127.0.0.1,
            # while the Host header (and TLS SNI, for https) keep the name.
            answer = await http.get(f"http://echo.example:{port}/host")
        assert answer.text == f"echo.example:{port}"
        # Resolved off the loop, but not on an anyio worker thread: those are not daemons and
        # outlive their loop, so a connection actor's process could not exit (orphans seen).
        assert [t.name.startswith("AnyIO worker") for t in resolved_on] == [False]
        strict = AddressGuard(resolver={"echo.example": ["127.0.0.1"]}.get)
        async with httpx2.AsyncClient(transport=pinned_transport(strict)) as http:
            with pytest.raises(httpx2.ConnectError, match="loopback"):
                await http.get(f"http://echo.example:{port}/host")


# -- on Ray ------------------------------------------------------------------------------


@pytest.fixture
def ray_settings(ray_session: None) -> Iterator[RuntimeSettings]:
    yield make_settings(namespace=f"troupe-mcp-test-{uuid.uuid4().hex[:8]}")


def kill_actors(*clients: RayMcpClient) -> None:
    import ray

    for ray_client in clients:
        for handle in list(ray_client._handles.values()):
            ray.kill(handle, no_restart=True)


async def test_ray_client_shares_one_connection_actor(ray_settings: RuntimeSettings,
                                                      http_server: McpTestServer) -> None:
    import ray

    first, second = RayMcpClient(ray_settings), RayMcpClient(ray_settings)  # e.g. two conversation hosts
    server = McpServer(label="ray-http", url=http_server.url, headers={"Authorization": "Bearer not-in-names"})
    try:
        first.check_server(server, 0)
        assert "add" in {t.name for t in await first.list_tools(server)}
        for i in range(3):
            assert await first.call_tool(server, "add", {"a": i, "b": 40}) == str(40 + i)
        assert await second.call_tool(server, "add", {"a": 1, "b": 1}) == "2"
        with pytest.raises(McpError) as caught:
            await second.call_tool(server, "always_fail", {})
        assert caught.value.kind == "tool"  # the error keeps its kind across Ray
        await second.list_tools(server)  # served from the actor's cache
        stats = await second.stats(server)
        assert stats == {"sessions_opened": 1, "reconnects": 0, "calls": 5, "list_calls": 2, "server_lists": 1}
        assert http_server.stats()["sessions"] == 1
        name = actor_name(server)
        assert "not-in-names" not in name
        assert ray.get_actor(name, namespace=ray_settings.namespace) is not None
    finally:
        kill_actors(first, second)


async def test_ray_refused_connection_is_reported_before_the_actor_is_up(ray_settings: RuntimeSettings) -> None:
    import time

    # A fresh connection actor needs a Ray worker's start-up (seconds on a busy machine)
    # before it can try the server; a refused connection must not wait for it.
    ray_client = RayMcpClient(ray_settings)
    down = resolve_mcp_tool({"server_label": "down", "server_url": f"http://127.0.0.1:{free_port()}/mcp"},
                            ray_settings)
    try:
        started = time.monotonic()
        with pytest.raises(McpError) as caught:
            await ray_client.list_tools(down)
        elapsed = time.monotonic() - started
        assert "'down': could not connect" in caught.value.message
        # The contract: a refusal is reported within the configured timeout (the start-up of a
        # worker alone may take seconds; a loaded CI machine is no place for a tighter bound).
        assert elapsed < ray_settings.mcp.timeout_s, f"took {elapsed:.2f} s"
    finally:
        kill_actors(ray_client)


async def test_ray_actor_reconnects_after_restart(ray_settings: RuntimeSettings,
                                                  http_server: McpTestServer) -> None:
    ray_client = RayMcpClient(ray_settings)
    server = McpServer(label="ray-restart", url=http_server.url)
    try:
        assert await ray_client.call_tool(server, "add", {"a": 1, "b": 2}) == "3"
        http_server.stop()
        with pytest.raises(McpError) as caught:
            await ray_client.call_tool(server, "add", {"a": 1, "b": 2})
        assert caught.value.kind == "protocol"
        http_server.start()
        assert await ray_client.call_tool(server, "add", {"a": 40, "b": 2}) == "42"
        stats = await ray_client.stats(server)
        assert (stats["sessions_opened"], stats["reconnects"], stats["calls"]) == (2, 1, 3)
    finally:
        kill_actors(ray_client)


async def test_ray_actor_remembers_the_sse_transport_across_reconnects(ray_settings: RuntimeSettings) -> None:
    ray_client = RayMcpClient(ray_settings)
    with serve_mcp(sse=True) as legacy:
        server = McpServer(label="ray-sse", url=legacy.url)
        try:
            assert await ray_client.call_tool(server, "add", {"a": 1, "b": 2}) == "3"
            assert await ray_client.transport(server) == "sse"
            assert legacy.stats()["http"]["POST /sse"] >= 1  # the streamable attempt, refused (405)
            legacy.restart()  # a new process on the same port: the event stream and the session are gone
            assert await ray_client.call_tool(server, "add", {"a": 40, "b": 2}) == "42"
            # The actor reconnected with HTTP+SSE at once: the new server saw no streamable POST.
            assert legacy.stats()["http"] == {"GET /sse": 1, "POST /messages/": legacy.stats()["http"]["POST /messages/"]}
            stats = await ray_client.stats(server)
            assert (stats["sessions_opened"], stats["reconnects"]) == (2, 1)
        finally:
            kill_actors(ray_client)


async def test_idle_actor_exits_and_comes_back(ray_settings: RuntimeSettings, http_server: McpTestServer) -> None:
    import asyncio

    import ray

    settings = ray_settings.model_copy(update={"idle_timeout_s": 0.5})
    ray_client = RayMcpClient(settings)
    server = McpServer(label="ray-idle", url=http_server.url)
    try:
        assert await ray_client.call_tool(server, "add", {"a": 1, "b": 1}) == "2"
        for _ in range(600):  # until the idle actor has killed itself (bounded)
            try:
                ray.get_actor(actor_name(server), namespace=settings.namespace)
            except ValueError:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the idle connection actor did not exit")
        # The cached handle is dead; the call goes to a new actor, transparently.
        assert await ray_client.call_tool(server, "add", {"a": 2, "b": 2}) == "4"
        assert (await ray_client.stats(server))["calls"] == 1
    finally:
        kill_actors(ray_client)
