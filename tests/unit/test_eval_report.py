"""The report, the comparison of two runs, the Parquet export, the charts and the progress bar."""

from __future__ import annotations

import io
from pathlib import Path

import duckdb
from rich.console import Console

from troupe.eval.charts import write_charts
from troupe.eval.metrics import summarize
from troupe.eval.progress import Progress
from troupe.eval.report import compare_runs, export_parquet, render_comparison, render_report
from troupe.storage import EvalResultRecord, EvalRunRecord


def result(case: str, sample: int, passed: bool, run: str = "A", **kw: object) -> EvalResultRecord:
    fields: dict[str, object] = {"tags": ["t"], "e2e_s": 0.5, "ttft_s": 0.05, "total_tokens": 10, "node_id": "n1",
                                 "grades": [{"grader": "contains", "passed": passed, "detail": "d"}]}  # fmt: skip
    return EvalResultRecord(run_id=run, case_id=case, sample=sample, passed=passed, **{**fields, **kw})


RUN_A = [result("a", 0, True), result("a", 1, False), result("b", 0, False), result("b", 1, False),
         result("c", 0, False, error_kind="crash", error_message="worker died", grades=[])]  # fmt: skip
RUN_B = [result("a", 0, True, "B"), result("a", 1, True, "B"), result("b", 0, False, "B"),
         result("b", 1, False, "B"), result("d", 0, True, "B")]  # fmt: skip


def test_report_sections() -> None:
    run = EvalRunRecord(run_id="A", created_at=1_760_000_000, dataset="d.jsonl", cases=3, samples=2,
                        status="finished", finished_at=1_760_000_012)  # fmt: skip
    text = render_report(run, summarize(RUN_A), RUN_A)
    for heading in ("Eval run A (finished)", "Summary", "Success rate by tag", "pass@k and pass^k", "Latency",
                    "Tokens and tool calls", "Graders", "Errors by kind", "Results by Ray node", "Failing samples"):
        assert heading in text, heading
    assert "took 12.0 s" in text and "crash: worker died" in text and "40.0%" not in text.split("Summary")[0]


def test_compare_runs() -> None:
    diffs = {d.case_id: d for d in compare_runs(RUN_A, RUN_B)}
    assert {k: d.change for k, d in diffs.items()} == {
        "a": "improved", "b": "same", "c": "only in A", "d": "only in B"
    }  # fmt: skip
    assert diffs["a"].a == (1, 2) and diffs["a"].b == (2, 2)
    text = render_comparison("A", "B", RUN_A, RUN_B)
    assert "1 improved" in text and "1 same" in text and "\nb " not in text  # unchanged cases hidden
    assert "\nb " in render_comparison("A", "B", RUN_A, RUN_B, show_all=True)
    regressed = compare_runs(RUN_B, RUN_A)
    assert next(d for d in regressed if d.case_id == "a").change == "regressed"


def test_export_parquet_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    assert export_parquet(RUN_A, str(path)) == 5
    with duckdb.connect() as conn:
        rows = conn.execute(f"SELECT case_id, sample, passed, tags, error_kind FROM '{path}'").fetchall()
    assert rows[0] == ("a", 0, True, ["t"], None) and rows[-1][4] == "crash" and len(rows) == 5


def test_charts_are_png_files(tmp_path: Path) -> None:
    paths = write_charts(RUN_A, summarize(RUN_A), tmp_path / "charts", title="A")
    assert [p.name for p in paths] == ["latency.png", "success_by_tag.png", "pass_k.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in paths)


def test_progress_bar_counts_and_eta() -> None:
    now = [0.0]
    out = io.StringIO()
    progress = Progress(10, done=2, console=Console(file=out, force_terminal=True, width=150), clock=lambda: now[0])
    now[0] = 2.0
    progress.update(passed=True, error=False)
    progress.update(passed=False, error=False)
    now[0] = 4.0
    progress.update(passed=False, error=True)
    line = progress.render()
    assert "5/10" in line and "passed 1 failed 1 errors 1" in line and "0.8/s" in line and "ETA 0:07" in line
    progress.close()
    # Live on a terminal: rich's bar, left on screen with the final state.
    assert "━" in out.getvalue() and "passed 1 failed 1 errors 1  0.8/s  ETA 0:07" in out.getvalue()
    assert out.getvalue().endswith("\n\x1b[?25h")  # the line ended, the cursor shown again

    logged = io.StringIO()
    quiet = Progress(100, console=Console(file=logged, force_terminal=False))
    for _ in range(100):
        quiet.update(passed=True, error=False)
    quiet.close()
    lines = logged.getvalue().splitlines()
    assert len(lines) == 11  # the first result, then a line per tenth
    assert lines[-1].startswith("[" + "#" * 30 + "] 100/100 100%  passed 100 failed 0 errors 0")


def test_every_eval_module_exports_what_it_names() -> None:
    import importlib

    for name in ("troupe.eval", "troupe.eval.dataset", "troupe.eval.graders", "troupe.eval.grader_specs",
                 "troupe.eval.metrics",
                 "troupe.eval.report", "troupe.eval.charts", "troupe.eval.progress", "troupe.eval.example_graders",
                 "troupe.eval.judge",
                 "troupe.tables", "troupe.progress_bar", "troupe.runtime.ray.eval", "troupe.runtime.ray.eval.worker",
                 "troupe.runtime.ray.eval.dispatcher"):  # fmt: skip
        module = importlib.import_module(name)
        assert module.__doc__, name
        assert [n for n in module.__all__ if not hasattr(module, n)] == [], name


def test_the_report_without_matplotlib_prints_its_tables_and_says_how_to_get_charts(tmp_path: Path) -> None:
    # matplotlib is the charts extra (pip install 'troupe[charts]'), not a core dependency.
    import subprocess
    import sys

    from troupe.storage.duckdb_store import DuckDBStore

    db = tmp_path / "t.duckdb"
    store = DuckDBStore(str(db))
    store.put_eval_run(EvalRunRecord(run_id="A", created_at=1_760_000_000, dataset="d.jsonl", cases=3, samples=2,
                                     status="finished", finished_at=1_760_000_012))  # fmt: skip
    store.write_eval_results(RUN_A)
    store.close()
    charts = tmp_path / "charts"
    blocked = (
        "import sys; sys.modules['matplotlib'] = None; from troupe.cli import main; "
        f"sys.exit(main(['eval', 'report', 'A', '--db', {str(db)!r}, '--charts', {str(charts)!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", blocked], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Eval run A (finished)" in done.stdout and "Success rate by tag" in done.stdout
    assert "charts: none, matplotlib is not installed" in done.stderr and "troupe[charts]" in done.stderr
    assert not charts.exists()
