"""Run an evaluation on a local two-node Ray cluster; used by ``test_eval_cluster.py`` in a subprocess.

A :class:`ray.cluster_utils.Cluster` needs a Ray of its own, while the rest of the
integration suite shares one ``ray.init`` session in the pytest process; so the test
runs this module with ``python -m`` in a child process, which starts the cluster,
runs ``troupe eval run --address <the cluster>`` in-process (the CLI's own code
path for joining a cluster), and shuts everything it started down.

Usage: ``python -m tests.integration.eval_cluster_main DATASET DB RUN_ID`` — prints
one JSON line ``{"exit": status, "nodes": [node ids]}``.

It also holds the grader the dataset uses to crash an eval worker.
"""

from __future__ import annotations

import json
import os
import sys


def kill_worker(outcome: object) -> bool:
    """A Python grader that kills the eval worker running it (a crash, as a segfault would be)."""
    os._exit(1)


def main(dataset: str, db: str, run_id: str) -> int:
    import ray
    from ray.cluster_utils import Cluster

    from troupe.cli import main as troupe

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        nodes = [n.node_id for n in cluster.list_all_nodes()]
        # Sequential samples: the crash takes down only its own sample, and the least-busy
        # dispatch still rotates over the workers, one per node (two here).
        status = troupe(
            ["eval", "run", dataset, "--address", cluster.address, "--db", db, "--run-id", run_id,
             "--concurrency", "1", "--no-progress"]
        )  # fmt: skip
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
    print(json.dumps({"exit": status, "nodes": nodes}))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
