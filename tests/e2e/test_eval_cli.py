"""``troupe eval`` from the command line, as a user runs it: the sample dataset end to end,
interrupted and resumed.

Each ``troupe eval run`` here is a child process that starts its own local Ray
instance (``ray.init(address="local")``), so these tests do not touch the suite's
shared Ray session. Nothing sleeps: the test waits on the run's progress file.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
from openai import OpenAI

from tests.servers import WebhookReceiver, kill_session, serve_app, served_local, wait_for
from troupe.cli import main
from troupe.runtime.settings import WebhookSettings
from troupe.serve.config import ServerSettings
from troupe.storage.credentials import new_key

ROOT = Path(__file__).parents[2]
SAMPLE = ROOT / "examples" / "eval" / "sample.jsonl"
ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}


def troupe(*args: str) -> list[str]:
    """``python -m troupe ...``: the command line of the code under test (an installed console
    script may still point at an older entry point until ``pip install -e .``)."""
    return [sys.executable, "-m", "troupe", *args]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(troupe(*args), cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300)


def test_the_sample_dataset_interrupted_resumed_and_reported(tmp_path: Path) -> None:
    """The sample dataset (two samples a case) as a user runs it, through an interruption:
    the first run is killed (its whole local Ray instance) after a few results, the same command
    resumes it and runs every other sample exactly once, the run's end reaches a webhook, and the
    report, export, compare and list commands read it. (One test for both: each `eval run` starts
    a Ray instance of its own, seconds of CI each.)"""
    db, progress = str(tmp_path / "eval.duckdb"), tmp_path / "progress.jsonl"
    # One CPU per tool task: on a 2-core machine the tool calls then reuse the two worker
    # processes Ray starts with, instead of starting eight (seconds each on a loaded machine).
    config = tmp_path / "troupe.toml"
    config.write_text('[runtime]\ntool_num_cpus = 1.0\n[webhooks]\nallowed_urls = ["http://127.0.0.1:*"]\n')
    key = new_key()
    env = {**ENV, "TROUPE_CREDENTIALS_KEYS": key}
    args = ("eval", "run", str(SAMPLE), "--run-id", "sample", "--db", db, "--samples", "2", "--config", str(config),
            "--progress-file", str(progress))  # fmt: skip

    def stored() -> list[tuple[str, int]]:
        lines = progress.read_text().splitlines() if progress.exists() else []
        return [(row["case_id"], row["sample"]) for row in map(json.loads, lines)]

    receiver = WebhookReceiver()
    with serve_app(receiver) as hook_url:
        # A webhook endpoint made through a server on the same database, as a user would.
        server = served_local(ServerSettings(), storage_path=db, credentials_keys=(key,),
                              webhooks=WebhookSettings(allowed_urls=("http://127.0.0.1:*",)))  # fmt: skip
        client = OpenAI(base_url=f"{next(server)}/v1", api_key="-", max_retries=0)
        secret = client.webhooks.create(name="evals", url=hook_url, event_types=["eval.run.succeeded"]).signing_secret
        server.close()

        # Its own session, so the kill takes the run's whole local Ray instance with it.
        first = subprocess.Popen(troupe(*args, "--no-progress"), cwd=tmp_path, env=env, start_new_session=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            wait_for(lambda: len(stored()) >= 5 or first.poll() is not None, timeout_s=120, what="5 stored results")
            assert first.poll() is None, "the run ended before it could be interrupted"
        finally:
            kill_session(first.pid)  # the driver, its local Ray, the storage actor holding the DuckDB file
            first.wait()
        before = stored()
        assert 5 <= len(before) < 104

        done = subprocess.run(troupe(*args), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "resuming run sample" in done.stderr and "ETA" in done.stderr  # the progress bar
        assert "run sample finished: 104 results" in done.stdout
        after = stored()[len(before):]
        assert not set(before) & set(after), "a sample stored before the kill ran again"
        # The run's end, delivered before the command ended (its storage actor sends it); the
        # killed run never ended, so it sent nothing.
        [(headers, body)] = receiver.received
        event = client.webhooks.unwrap(body, headers, secret=secret)
        assert (event.type, event.data.id) == ("eval.run.succeeded", "sample")

    report = run("eval", "report", "sample", "--db", db, "--charts", str(tmp_path / "charts"), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    print(report.stdout)  # shown with -s: the report a user sees
    for heading in ("Success rate by tag", "pass@k and pass^k", "Latency (seconds)", "Errors by kind"):
        assert heading in report.stdout
    assert sorted(p.name for p in (tmp_path / "charts").iterdir()) == ["latency.png", "pass_k.png", "success_by_tag.png"]

    # The reading commands need no Ray: run them in this process (quicker than a new one each).
    def cli(*args: str) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(list(args)) == 0
        return out.getvalue()

    summary = json.loads(cli("eval", "report", "sample", "--db", db, "--json", "--no-charts"))
    assert summary["summary"]["results"] == 104 and summary["run"]["status"] == "finished"
    assert {"model_error", "timeout", "invalid_request"} <= set(summary["summary"]["errors_by_kind"])
    assert [p["k"] for p in summary["summary"]["pass_k"]] == [1, 2]

    # Every sample has one result (the progress file may lag the database at the kill); every case meant to pass passed (both samples), every case meant to fail failed.
    cases = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    with duckdb.connect(db, read_only=True) as conn:
        rows = conn.execute("SELECT case_id, bool_and(passed), bool_or(passed), count(*), count(DISTINCT sample) "
                            "FROM eval_results WHERE run_id = 'sample' GROUP BY case_id").fetchall()  # fmt: skip
        linked = conn.execute(
            "SELECT count(*) FROM eval_results e JOIN responses r ON r.id = e.response_id WHERE e.run_id = 'sample'"
        ).fetchone()[0]
    by_case = {case_id: (all_passed, any_passed, n, distinct) for case_id, all_passed, any_passed, n, distinct in rows}
    assert set(by_case) == {c["id"] for c in cases} and all(row[2:] == (2, 2) for row in by_case.values())
    for case in cases:
        if "flaky" in case["tags"]:
            continue  # [[fail 503 once]]: the first sample on each worker fails
        meant_to_fail = "meant-to-fail" in case["tags"]
        assert by_case[case["id"]][:2] == ((False, False) if meant_to_fail else (True, True)), case["id"]
    assert linked >= 2 * sum("meant-to-fail" not in c["tags"] for c in cases)

    assert "wrote 104 results" in cli("eval", "export", "sample", str(tmp_path / "sample.parquet"), "--db", db)
    with duckdb.connect() as conn:
        assert conn.execute(f"SELECT count(*) FROM '{tmp_path / 'sample.parquet'}'").fetchone()[0] == 104
    assert "52 same" in cli("eval", "compare", "sample", "sample", "--db", db)
    listing = cli("eval", "list", "--db", db)
    assert "sample" in listing and "finished" in listing
