"""A Ray cluster of two nodes on this machine, for tests/e2e/test_two_nodes.py.

    python -m tests.two_nodes TEMP_DIR

Starts a head node and a second node (two raylets, each with its own object store, one CPU
each: :class:`ray.cluster_utils.Cluster`), prints ``ADDRESS <gcs address>`` once both are up,
and holds them until its standard input closes; then shuts them down and prints ``DOWN``.
The nodes inherit this process's environment: set Serve's direct-ingress variables before
starting it, as on every ``ray start`` of a real cluster (docs/cluster.md).

The second node has the custom resource ``second_node``, the head ``head_node``: a test can
tell them apart.
"""

from __future__ import annotations

import sys


def main(temp_dir: str) -> None:
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False, "resources": {"head_node": 1},
                        "temp_dir": temp_dir},
    )  # fmt: skip
    try:
        cluster.add_node(num_cpus=1, resources={"second_node": 1})
        cluster.wait_for_nodes()
        print("ADDRESS", cluster.address, flush=True)
        sys.stdin.read()
    finally:
        cluster.shutdown()
    print("DOWN", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
