"""Rendering evaluation runs: the report and the comparison of two runs.

Everything here is pure: it takes result records (``troupe.storage.EvalResultRecord``
or anything shaped like :class:`~troupe.eval.metrics.ResultLike`) and returns text.
Charts are in :mod:`troupe.eval.charts`; tables are drawn by :func:`troupe.tables.format_table`.

Example::

    results = store.eval_results("run-1")
    print(render_report(store.get_eval_run("run-1"), summarize(results), results))
    print(render_comparison("run-1", "run-2", store.eval_results("run-1"), store.eval_results("run-2")))
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from troupe.tables import format_table

from .metrics import ResultLike, Summary, quantiles, summarize

__all__ = ["CaseDiff", "compare_runs", "export_parquet", "render_comparison", "render_report"]


def _table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    # The reports' style: "-" for a missing value, seconds and means to the millisecond.
    return format_table(columns, rows, null="-", float_format=".3f")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _section(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    return f"{title}\n{_table(columns, rows)}" if rows else f"{title}\n(none)"


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def render_report(run: Any, summary: Summary, results: Sequence[ResultLike], *, failures: int = 10) -> str:
    """The text report of one run.

    Args:
        run: the run's ``EvalRunRecord`` (None if only results are known).
        summary: :func:`~troupe.eval.metrics.summarize` of ``results``.
        results: the run's results (for the list of failures).
        failures: how many failing samples to list.
    """
    out: list[str] = []
    if run is not None:
        model = run.model or "per case"
        took = (
            f", took {run.finished_at - run.created_at:.1f} s" if run.finished_at is not None else ""
        )
        out.append(
            f"Eval run {run.run_id} ({run.status}): {run.dataset}, {run.cases} cases x {run.samples} "
            f"sample{'s' if run.samples != 1 else ''}, model {model}; started {_when(run.created_at)}{took}"
        )
    s = summary
    overview = [
        ("results", s.results),
        ("cases", s.cases),
        ("passed", s.passed),
        ("failed (graded)", s.failed),
        ("errors", s.errors),
        ("success rate", _pct(s.success_rate)),
        ("nodes", len(s.nodes)),
    ]
    out.append(_section("Summary", ["metric", "value"], overview))
    out.append(
        _section(
            "Success rate by tag",
            ["tag", "results", "passed", "success rate"],
            [(t.tag, t.results, t.passed, _pct(t.rate)) for t in s.by_tag],
        )
    )
    out.append(
        _section(
            "pass@k and pass^k (unbiased estimators, mean over cases)",
            ["k", "cases", "pass@k", "pass^k"],
            [(p.k, p.cases, _pct(p.pass_at_k), _pct(p.pass_hat_k)) for p in s.pass_k],
        )
    )
    latency = [
        (name, q.n, _secs(q.p50), _secs(q.p95), _secs(q.mean), _secs(q.max))
        for name, q in (("time to first token", s.ttft_s), ("end to end", s.e2e_s))
    ]
    out.append(_section("Latency (seconds)", ["", "n", "p50", "p95", "mean", "max"], latency))
    n = max(s.results, 1)
    usage = [
        ("input tokens", s.input_tokens, f"{s.input_tokens / n:.1f}"),
        ("output tokens", s.output_tokens, f"{s.output_tokens / n:.1f}"),
        ("total tokens", s.total_tokens, f"{s.total_tokens / n:.1f}"),
        ("tool calls", s.tool_calls, f"{s.tool_calls / n:.2f}"),
    ]
    out.append(_section("Tokens and tool calls", ["", "total", "per sample"], usage))
    out.append(
        _section(
            "Graders",
            ["grader", "results", "passed", "pass rate"],
            [(g.grader, g.results, g.passed, _pct(g.rate)) for g in s.graders],
        )
    )
    out.append(
        _section(
            "Errors by kind",
            ["kind", "count", "example"],
            [(e.kind, e.count, _clip(e.example, 80)) for e in s.errors_by_kind],
        )
    )
    out.append(_section("Results by Ray node", ["node id", "results"], list(s.nodes.items())))
    failing = [r for r in results if not r.passed]
    if failing and failures > 0:
        rows = [(r.case_id, r.sample, _reason(r)) for r in failing[:failures]]
        more = f" (first {failures} of {len(failing)})" if len(failing) > failures else ""
        out.append(_section(f"Failing samples{more}", ["case", "sample", "why"], rows))
    return "\n\n".join(out)


def _reason(r: ResultLike) -> str:
    if r.error_kind:
        return _clip(f"{r.error_kind}: {r.error_message or ''}", 100)
    failed = [g for g in r.grades or [] if not g.get("passed")]
    if not failed:
        return "the response did not complete"
    return _clip("; ".join(f"{g.get('grader')}: {g.get('detail', '')}" for g in failed), 100)


def _clip(text: str, limit: int) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- comparing two runs -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CaseDiff:
    """One case in two runs: passing samples out of samples in each (None where absent)."""

    case_id: str
    a: tuple[int, int] | None
    b: tuple[int, int] | None
    a_e2e_s: float | None
    b_e2e_s: float | None
    a_tokens: float | None
    b_tokens: float | None

    @property
    def change(self) -> str:
        """``improved``, ``regressed``, ``same``, ``only in A`` or ``only in B`` (by pass rate)."""
        if self.a is None:
            return "only in B"
        if self.b is None:
            return "only in A"
        rate_a, rate_b = self.a[0] / self.a[1], self.b[0] / self.b[1]
        return "improved" if rate_b > rate_a else "regressed" if rate_b < rate_a else "same"


def compare_runs(a: Sequence[ResultLike], b: Sequence[ResultLike]) -> list[CaseDiff]:
    """Per-case differences between two runs' results, by case id."""

    def by_case(results: Sequence[ResultLike]) -> dict[str, list[ResultLike]]:
        grouped: dict[str, list[ResultLike]] = defaultdict(list)
        for r in results:
            grouped[r.case_id].append(r)
        return grouped

    def mean(values: list[float | int | None]) -> float | None:
        xs = [v for v in values if v is not None]
        return sum(xs) / len(xs) if xs else None

    cases_a, cases_b = by_case(a), by_case(b)
    diffs = []
    for case_id in sorted(set(cases_a) | set(cases_b)):
        ra, rb = cases_a.get(case_id), cases_b.get(case_id)
        diffs.append(
            CaseDiff(
                case_id=case_id,
                a=None if ra is None else (sum(r.passed for r in ra), len(ra)),
                b=None if rb is None else (sum(r.passed for r in rb), len(rb)),
                a_e2e_s=None if ra is None else mean([r.e2e_s for r in ra]),
                b_e2e_s=None if rb is None else mean([r.e2e_s for r in rb]),
                a_tokens=None if ra is None else mean([r.total_tokens for r in ra]),
                b_tokens=None if rb is None else mean([r.total_tokens for r in rb]),
            )
        )
    return diffs


def render_comparison(
    run_a: str, run_b: str, a: Sequence[ResultLike], b: Sequence[ResultLike], *, show_all: bool = False
) -> str:
    """Run A against run B: the headline metrics side by side, then the cases that changed."""
    sa, sb = summarize(a), summarize(b)

    def delta(x: float | None, y: float | None, pct: bool = False) -> str:
        if x is None or y is None:
            return "-"
        return f"{100 * (y - x):+.1f} pt" if pct else f"{y - x:+.3f}"

    pass1_a = next((p.pass_at_k for p in sa.pass_k if p.k == 1), None)
    pass1_b = next((p.pass_at_k for p in sb.pass_k if p.k == 1), None)
    e2e_a, e2e_b = quantiles(r.e2e_s for r in a), quantiles(r.e2e_s for r in b)
    ttft_a, ttft_b = quantiles(r.ttft_s for r in a), quantiles(r.ttft_s for r in b)
    headline = [
        ("results", sa.results, sb.results, f"{sb.results - sa.results:+d}"),
        ("success rate", _pct(sa.success_rate), _pct(sb.success_rate), delta(sa.success_rate, sb.success_rate, True)),
        ("pass@1", _pct(pass1_a), _pct(pass1_b), delta(pass1_a, pass1_b, True)),
        ("errors", sa.errors, sb.errors, f"{sb.errors - sa.errors:+d}"),
        ("e2e p50 (s)", _secs(e2e_a.p50), _secs(e2e_b.p50), delta(e2e_a.p50, e2e_b.p50)),
        ("e2e p95 (s)", _secs(e2e_a.p95), _secs(e2e_b.p95), delta(e2e_a.p95, e2e_b.p95)),
        ("ttft p50 (s)", _secs(ttft_a.p50), _secs(ttft_b.p50), delta(ttft_a.p50, ttft_b.p50)),
        ("total tokens", sa.total_tokens, sb.total_tokens, f"{sb.total_tokens - sa.total_tokens:+d}"),
        ("tool calls", sa.tool_calls, sb.tool_calls, f"{sb.tool_calls - sa.tool_calls:+d}"),
    ]
    out = [f"A = {run_a}, B = {run_b}", _table(["", "A", "B", "B - A"], headline)]
    diffs = compare_runs(a, b)
    counts: dict[str, int] = defaultdict(int)
    for d in diffs:
        counts[d.change] += 1
    order = ("improved", "regressed", "same", "only in A", "only in B")
    out.append("Cases: " + ", ".join(f"{counts[c]} {c}" for c in order if counts[c]))
    shown = [d for d in diffs if show_all or d.change != "same"]

    def passes(x: tuple[int, int] | None) -> str:
        return "-" if x is None else f"{x[0]}/{x[1]}"

    rows = [
        (d.case_id, passes(d.a), passes(d.b), d.change, _secs(d.a_e2e_s), _secs(d.b_e2e_s), d.a_tokens, d.b_tokens)
        for d in shown
    ]
    title = "Every case" if show_all else "Cases that changed"
    columns = ["case", "A passed", "B passed", "change", "A e2e (s)", "B e2e (s)", "A tokens", "B tokens"]
    out.append(_section(title, columns, rows))
    return "\n\n".join(out)


def export_parquet(results: Sequence[Any], path: str) -> int:
    """Write result records (``EvalResultRecord``) to a Parquet file with the ``eval_results`` columns.

    Returns:
        How many rows were written.
    """
    from troupe.storage import DuckDBStore

    store = DuckDBStore()  # in memory: the same schema, whichever store the results came from
    try:
        store.write_eval_results(results)
        run_ids = {r.run_id for r in results}
        if len(run_ids) > 1:
            raise ValueError("export one run at a time")
        return store.export_eval_results(next(iter(run_ids), ""), path)
    finally:
        store.close()
