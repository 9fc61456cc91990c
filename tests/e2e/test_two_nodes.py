"""Troupe on a Ray cluster of two nodes: `troupe serve --address` joins it with two ingress
replicas in the replica placement, and Serve puts one on each node.

The cluster is two raylets on this machine (``tests/two_nodes.py``: :class:`ray.cluster_utils.Cluster`),
started with Serve's direct-ingress variables as docs/cluster.md says to start every node: each
replica serves HTTP on its own port, and ``max_replicas_per_node = 1`` puts each on a node. The
storage actor and its DuckDB file are on the head node; the replica there journals its responses
beside them, the one on the second node has no journal and writes through the storage actor. The turns of chains and conversations go to both replicas
in turn, as in tests/e2e/test_replicas.py, which these tests run again here: a turn that lands on
the replica of the other node is handed to its owner across nodes, and a response acknowledged
by one node's replica is read at once on the other's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from tests.mcp_servers import REPO_ROOT
from tests.servers import healthy, kill_session, replica_roots, wait_for
from troupe.runtime.ray.tool_tasks import TOOL_RUNNER_PREFIX
from troupe.serve.deployment import APP_NAME, LOCAL_RAY_ENV, direct_ingress_env, free_port_range

from . import test_replicas as on_one_node
from .test_troupe_serve import TROUPE, _server_env

pytestmark = [
    pytest.mark.timeout(300),
    # Opt-in, not in `make test`: two raylets on one machine share its ports, while Serve hands
    # out the replicas' ports per node, both from the same first port. The second replica to
    # bind is refused and moves to the next port, but in about one start in three here, one
    # replica ended up serving on no port at all (Serve called it healthy). On separate
    # machines the per-node ports do not collide. Run: TROUPE_TWO_NODES=1 make test
    # PYTEST_ARGS=tests/e2e/test_two_nodes.py
    pytest.mark.skipif(os.environ.get("TROUPE_TWO_NODES") != "1", reason="opt-in: TROUPE_TWO_NODES=1"),
]

PORTS = 16
"""The replicas' port range: 16 ports from the first free one."""

CONFIG = """\
[server]
num_replicas = 2
max_replicas_per_node = 1

[runtime]
storage_path = "{db}"
"""

PLACES = """\
import json, sys
import ray
ray.init(address=sys.argv[1], log_to_driver=False)
places = {"replicas": [], "tool_runners": []}
for actor in ray.util.list_named_actors(all_namespaces=True):
    name, kind = actor["name"], None
    if name.startswith("SERVE_REPLICA::") and "TroupeIngress" in name:
        kind = "replicas"
    elif name.startswith(sys.argv[2]):
        kind = "tool_runners"
    if kind is not None:
        handle = ray.get_actor(name, namespace=actor["namespace"])
        places[kind].append(ray.get(handle.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id())))
places["head"] = ray.get_runtime_context().get_node_id()
print(json.dumps(places))
"""
"""A driver that prints the node of each Troupe ingress replica and tool runner, and its own
(the head's: it runs on this machine's head node)."""


class TwoNodes:
    """The running cluster and the Troupe on it."""

    def __init__(self, address: str, roots: list[str], db: Path) -> None:
        self.address, self.roots, self.db = address, roots, db

    def places(self) -> dict[str, Any]:
        """Where Troupe's replicas and tool runners run (node ids), and the head node's id."""
        out = subprocess.run([sys.executable, "-c", PLACES, self.address, TOOL_RUNNER_PREFIX], capture_output=True, text=True,
                             timeout=120, cwd=REPO_ROOT, env=_server_env(), check=True)  # fmt: skip
        return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory) -> Iterator[TwoNodes]:
    tmp = tmp_path_factory.mktemp("two-nodes")
    ray_tmp = tempfile.mkdtemp(prefix="trn", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    # The replicas' port range, as wide as the session's (tests/conftest.py): each replica takes
    # the first free port of it, and on a busy machine another process may hold some meanwhile.
    first = free_port_range(PORTS)
    env = {**_server_env(), **LOCAL_RAY_ENV, **direct_ingress_env(first, PORTS)}
    holder = subprocess.Popen(
        [sys.executable, "-m", "tests.two_nodes", ray_tmp], cwd=REPO_ROOT, env=env, start_new_session=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=(tmp / "cluster.log").open("w"), text=True,
    )  # fmt: skip
    server = None
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert line.startswith("ADDRESS "), f"the cluster did not start: {(tmp / 'cluster.log').read_text()[-3000:]}"
        address = line.split()[1]
        db = tmp / "troupe.duckdb"
        (tmp / "troupe.toml").write_text(CONFIG.format(db=db))
        with (tmp / "serve.log").open("w") as log:
            server = subprocess.Popen(
                [*TROUPE, "serve", "--address", address, "--port", str(free_port_range(1)),
                 "--config", str(tmp / "troupe.toml")],
                cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        ports = range(first, first + PORTS + 1)

        def both_serve() -> bool:
            assert server is not None and server.poll() is None, (tmp / "serve.log").read_text()[-3000:]
            roots = replica_roots(APP_NAME, ports)
            return len(roots) == 2 and all(map(healthy, roots))

        try:
            wait_for(both_serve, timeout_s=180, what="two ingress replicas serving")
        except TimeoutError as exc:
            found = replica_roots(APP_NAME, ports)
            raise TimeoutError(f"{exc}: serving {found} in ports {first}-{first + PORTS}; troupe serve said:\n"
                               f"{(tmp / 'serve.log').read_text()[-2000:]}") from None  # fmt: skip
        yield TwoNodes(address, replica_roots(APP_NAME, ports), db)
    finally:  # stopped as a user would (SIGTERM, the cluster shut down); then whatever is left, killed
        if server is not None:
            server.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(timeout=30)
            kill_session(server.pid)
        assert holder.stdin is not None
        holder.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            holder.wait(timeout=60)
        kill_session(holder.pid)
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def roots(two_nodes) -> list[str]:
    return two_nodes.roots


def test_the_two_replicas_run_on_two_nodes_and_only_the_head_nodes_keeps_a_journal(two_nodes):
    for root in two_nodes.roots:  # a tool call through each replica, in a thread each one hosts
        client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
        done = client.responses.create(model="sim", input='[[call calculator {"expression": "6*7"}]]')
        assert done.output_text == "calculator -> 42"
    places = two_nodes.places()
    assert len(places["replicas"]) == 2 and len(set(places["replicas"])) == 2, places
    assert places["head"] in places["replicas"], places
    assert set(places["tool_runners"]) == set(places["replicas"]), "each node runs its hosts' tools"
    journals = [p.name for p in Path(f"{two_nodes.db}.journal").iterdir() if p.name.startswith("w-")]
    assert len(journals) == 1, f"only the head node's replica journals beside the file: {journals}"


# The suite of two replicas on one node, again on two nodes: every turn and read below goes to
# both replicas in turn, so half of them cross from one node to the other.
test_a_chain_whose_turns_alternate_replicas = on_one_node.test_a_chain_whose_turns_alternate_replicas
test_a_response_is_read_at_once_on_the_replica_that_did_not_make_it = (
    on_one_node.test_a_response_is_read_at_once_on_the_replica_that_did_not_make_it
)
test_a_streamed_turn_sent_to_the_other_replica_arrives_whole_and_in_order = (
    on_one_node.test_a_streamed_turn_sent_to_the_other_replica_arrives_whole_and_in_order
)
test_a_client_that_leaves_a_handed_off_stream_cancels_its_turn_on_the_owner = (
    on_one_node.test_a_client_that_leaves_a_handed_off_stream_cancels_its_turn_on_the_owner
)
test_a_conversation_whose_turns_alternate_replicas = on_one_node.test_a_conversation_whose_turns_alternate_replicas
test_each_thread_is_cached_by_one_replica_only = on_one_node.test_each_thread_is_cached_by_one_replica_only
test_every_answer_about_a_thread_names_its_replica_so_a_balancer_can_route_by_header = (
    on_one_node.test_every_answer_about_a_thread_names_its_replica_so_a_balancer_can_route_by_header
)
