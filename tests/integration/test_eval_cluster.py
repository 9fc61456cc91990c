"""One evaluation run spread over a local multi-node Ray cluster.

The cluster (``ray.cluster_utils.Cluster``, a head and one more node, one CPU each) runs in a child
process (``tests/integration/eval_cluster_main.py``): it needs a Ray of its own, and
this pytest process may already hold the suite's shared ``ray.init`` session. The
child joins the cluster through ``troupe eval run --address``; this test reads the
DuckDB file it leaves behind.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb

ROOT = Path(__file__).parents[2]

CASES = [
    {"id": f"say-{i}", "input": f"[[say answer {i}]]", "expected": {"equals": f"answer {i}"}} for i in range(6)
] + [
    {"id": f"calc-{i}", "input": f'[[call calculator {{"expression": "{i} * 7"}}]]', "tags": ["tools"],
     "expected": [{"contains": str(i * 7)}, {"tool_called": "calculator"}]}
    for i in range(1, 5)
] + [
    {"id": "model-fails", "input": "[[fail 500]]", "expected": {"contains": "x"}},
    {"id": "worker-crash", "input": "[[say bye]]",
     "expected": {"python": "tests.integration.eval_cluster_main:kill_worker"}},
    {"id": "after-crash", "input": "[[say still here]]", "expected": {"equals": "still here"}},
]  # fmt: skip


def test_one_run_spreads_over_the_nodes_and_every_case_has_a_row(tmp_path: Path) -> None:
    dataset = tmp_path / "cases.jsonl"
    dataset.write_text("".join(json.dumps(c) + "\n" for c in CASES))
    db = tmp_path / "eval.duckdb"
    # A Ray temp dir of its own: a Cluster advertises its address in <temp dir>/ray_current_cluster,
    # where any other `ray.init()` on this machine would otherwise find it and join it.
    # (Short: Ray's Unix socket paths live under it.)
    ray_tmp = tempfile.mkdtemp(prefix="trc-", dir="/tmp")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT), "RAY_TMPDIR": ray_tmp}
    try:
        child = subprocess.run(
            [sys.executable, "-m", "tests.integration.eval_cluster_main", str(dataset), str(db), "cluster-run"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert child.returncode == 0, child.stdout + child.stderr
    report = json.loads(child.stdout.strip().splitlines()[-1])
    assert report["exit"] == 0, child.stderr
    assert len(report["nodes"]) == 2

    with duckdb.connect(str(db), read_only=True) as conn:
        rows = conn.execute(
            "SELECT case_id, passed, node_id, error_kind, response_id FROM eval_results WHERE run_id = 'cluster-run'"
        ).fetchall()
        stored = {r[0] for r in conn.execute("SELECT id FROM responses").fetchall()}
        status = conn.execute("SELECT status FROM eval_runs WHERE run_id = 'cluster-run'").fetchone()[0]
    by_case = {case_id: (passed, node, error, rid) for case_id, passed, node, error, rid in rows}
    assert len(rows) == len(by_case) == len(CASES), "every case has exactly one result row"
    assert set(by_case) == {c["id"] for c in CASES}
    assert status == "finished"

    used = {node for _, node, _, _ in by_case.values()}
    assert used <= set(report["nodes"])
    assert len(used) == 2, f"the cases ran on {len(used)} node(s)"

    assert by_case["model-fails"][2] == "model_error"
    assert by_case["worker-crash"][2] == "crash" and by_case["worker-crash"][0] is False
    healthy = [c["id"] for c in CASES if c["id"] not in ("model-fails", "worker-crash")]
    assert all(by_case[c][0] and by_case[c][2] is None for c in healthy), by_case
    # Each graded result links to its stored response (and so to its step traces).
    assert all(by_case[c][3] in stored for c in healthy)
