"""The real thing: Troupe as a Ray Serve application on a loopback port, for each placement.

Every placement is deployed side by side in the shared Ray session, each as its
own Serve application under its own route prefix, with its own Ray namespace
and DuckDB file. The session runs Serve with direct ingress, as ``troupe serve``
does: tests get the root URL of each app's own replica server and drive it with
real clients. Serve's proxy (``serve_port``) reaches the same apps, for the tests
of that path.

``replicas2`` is the replica placement with two ingress replicas, each serving on its own
port, behind a round-robin balancer (:class:`tests.balancer.RoundRobin`) that reads no body:
consecutive requests, the turns of one conversation among them, land on the two replicas in
turn, so each replica serves threads it hosts and hands the others' turns to their owner.
"""

from __future__ import annotations

import socket
import sys
import uuid
from collections.abc import Iterator

import pytest
from openai import OpenAI

from tests.balancer import RoundRobin
from tests.mcp_servers import REPO_ROOT
from tests.servers import direct_ingress_root, healthy, replica_roots, serve_app, served_local, wait_for
from tests.side_effects import COUNTED_TOOLS
from troupe.runtime.settings import McpServerSpec, McpSettings, RuntimeSettings
from troupe.serve.config import ServerSettings

PLACEMENTS = ("replica", "pooled", "dedicated")
REPLICAS2 = "replicas2"
"""The app of two ingress replicas (the replica placement), reached through a round-robin balancer."""
# The HTTP suite (the `url` and `client` fixtures), the Agents SDK and the part suites (MCP, the
# bench CLI) run in process, in two ingress replicas behind a balancer (which runs every turn
# either in the replica that received it or, handed over, in the other: the one-replica path and
# the hand-off) and on pooled host actors. Dedicated hosts are the pooled ones' class
# (ConversationHost) behind other routing, and start a process per conversation (seconds each on
# 2 cores): the tests of what that routing does differently (a running response found by its
# conversation's actor for cancel and follow, a host's death, idle exit) run on it too, marked
# `every_placement` (the `url` fixture) or parametrized over PLACEMENTS;
# tests/integration/test_runtime_ray.py runs its routing tests on it. One ingress replica alone serves
# the `root` fixture's suites and those parametrized over PLACEMENTS.
PART_PLACEMENTS = (REPLICAS2, "pooled")

# The stdio MCP test server, runnable from any working directory (a Ray worker's may differ).
STDIO_MCP = (
    sys.executable,
    "-c",
    f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r}); from tests.mcp_servers import _main; _main(['--stdio'])",
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def serve_port(ray_session) -> Iterator[int]:
    from ray import serve

    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    yield port
    serve.shutdown()


@pytest.fixture(scope="session")
def troupe_app_settings(tmp_path_factory) -> dict[str, RuntimeSettings]:
    """The runtime settings of each app (its Ray namespace, its DuckDB file), by placement (and REPLICAS2)."""
    return {
        app: RuntimeSettings(
            placement="replica" if app == REPLICAS2 else app,
            ingress_replicas=2 if app == REPLICAS2 else 1,
            pool_size=2,
            namespace=f"e2e-{app}-{uuid.uuid4().hex[:6]}",
            storage_path=str(tmp_path_factory.mktemp(app) / "troupe.duckdb"),
            tools=COUNTED_TOOLS,  # the example tools, and tools that count their runs (crash tests)
            # The MCP test servers run on loopback, which the default policy refuses.
            mcp=McpSettings(
                allowed_urls=("http://127.0.0.1:*",),
                timeout_s=6.0,  # the hang test waits this long; a stdio server must start within it
                servers=(McpServerSpec(label="stdio-calc", command=STDIO_MCP, require_approval="never"),),
            ),
        )
        for app in (*PLACEMENTS, REPLICAS2)
    }


_SHARED_ACTORS: list[object] = []
"""Every app's shared actors' handles, held until the session's Ray goes (after Serve's shutdown)."""


@pytest.fixture(scope="session")
def balancer() -> RoundRobin:
    """REPLICAS2's balancer: its ``roots`` are the replicas' (a test that replaces one updates them)."""
    return RoundRobin([])


@pytest.fixture(scope="session")
def troupe_apps(serve_port, troupe_app_settings, balancer) -> Iterator[dict[str, str]]:
    """Deploy one Troupe app per placement and REPLICAS2; their root URLs (``…/v1`` is the API)
    by placement. REPLICAS2's is its balancer's; :func:`tests.servers.replica_roots` finds its
    replicas' own."""
    from ray import serve

    from troupe.runtime.facade import start_shared_actors
    from troupe.serve.deployment import build_app

    # As `troupe serve` does, this process starts the actors an app's replicas share (storage,
    # tool runners, pooled hosts) and holds them: a replica a test kills takes none along.
    _SHARED_ACTORS.extend(start_shared_actors(settings) for settings in troupe_app_settings.values())
    # All at once: Serve starts their replicas side by side (one after the other took a minute).
    serve.run_many([
        serve.RunTarget(build_app(ServerSettings(port=serve_port, num_replicas=settings.ingress_replicas), settings),
                        name=app, route_prefix=f"/{app}")
        for app, settings in troupe_app_settings.items()
    ])  # fmt: skip
    urls = {app: direct_ingress_root(app) for app in PLACEMENTS}
    for root in urls.values():
        wait_for(lambda root=root: healthy(root), what=f"{root}/health")
    wait_for(lambda: len(replica_roots(REPLICAS2)) == 2 and all(map(healthy, replica_roots(REPLICAS2))),
             what=f"the 2 replicas of {REPLICAS2}")  # fmt: skip
    balancer.roots = replica_roots(REPLICAS2)
    with serve_app(balancer) as url:
        urls[REPLICAS2] = url
        yield urls


@pytest.fixture(scope="module")
def local_url() -> Iterator[str]:
    """The HTTP app over the in-process runtime (authentication off, history in memory)."""
    yield from served_local(ServerSettings())


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test using ``url`` (or ``client``) runs in process and on PART_PLACEMENTS; one marked
    ``every_placement`` on the dedicated placement too."""
    if "url" in metafunc.fixturenames:
        every = metafunc.definition.get_closest_marker("every_placement") is not None
        metafunc.parametrize("url", ["local", *PART_PLACEMENTS, *(["dedicated"] if every else [])], indirect=True)


@pytest.fixture(params=["local", "replica"])
def root(request) -> str:
    """The server root of the in-process app, and of the session's Ray Serve ``replica`` app: for
    a resource's tests that no other placement changes (``url`` runs on more)."""
    if request.param == "local":
        return request.getfixturevalue("local_url")
    return request.getfixturevalue("troupe_apps")[request.param]


LOCAL_ONLY = pytest.mark.parametrize("root", ["local"], indirect=True)
"""For a test of ``root``'s that nothing of the placement changes: the in-process app only."""


@pytest.fixture
def containers_client(root: str) -> Iterator[OpenAI]:
    """A client of ``root`` whose containers are deleted after the test (their sandboxes, and on
    Ray their actors, with them)."""
    client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
    before = {c.id for c in client.containers.list(limit=100)}
    yield client
    for container in client.containers.list(limit=100):
        if container.id not in before:
            client.containers.delete(container.id)


@pytest.fixture
def url(request) -> str:
    """The server root of the in-process app and of each deployment (``/v1`` is appended by the tests)."""
    if request.param == "local":
        return request.getfixturevalue("local_url")
    return request.getfixturevalue("troupe_apps")[request.param]


@pytest.fixture
def client(url: str) -> OpenAI:
    # max_retries=0: a test must see the first answer, not a retried one.
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
