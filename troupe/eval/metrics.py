"""Evaluation metrics: success rate, pass@k and pass^k, latency percentiles, tokens, errors.

For a case run ``n`` times with ``c`` passing samples, the standard unbiased
estimators (over the ``C(n, k)`` ways to pick ``k`` of the ``n`` samples) are:

* **pass@k** = ``1 - C(n - c, k) / C(n, k)``: the chance that at least one of
  ``k`` samples passes (Chen et al., 2021, "Evaluating Large Language Models
  Trained on Code");
* **pass^k** = ``C(c, k) / C(n, k)``: the chance that all ``k`` samples pass
  (Yao et al., 2024, τ-bench), the consistency an agent needs in production.

A run's pass@k and pass^k are the means over the cases with at least ``k``
samples. A sample that ended in an error counts as a failed sample.

Percentiles interpolate linearly between the closest ranks (numpy's default).

Example::

    pass_at_k(5, 2, 2)    # 0.7
    pass_hat_k(5, 2, 2)   # 0.1
    summary = summarize(results)   # results: EvalResultRecord-like objects
    summary.success_rate, summary.pass_k[0].pass_at_k
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from troupe.bench import stats

__all__ = [
    "ErrorStat",
    "GraderStat",
    "PassK",
    "Quantiles",
    "ResultLike",
    "Summary",
    "TagStat",
    "default_ks",
    "pass_at_k",
    "pass_hat_k",
    "percentile",
    "quantiles",
    "summarize",
]


class ResultLike(Protocol):
    """What the metrics read of a result (``troupe.storage.EvalResultRecord`` has it all).

    Read-only members (properties), so that a frozen record satisfies it.
    """

    @property
    def case_id(self) -> str: ...
    @property
    def sample(self) -> int: ...
    @property
    def passed(self) -> bool: ...
    @property
    def tags(self) -> list[str]: ...
    @property
    def grades(self) -> list[dict[str, Any]]: ...
    @property
    def ttft_s(self) -> float | None: ...
    @property
    def e2e_s(self) -> float | None: ...
    @property
    def input_tokens(self) -> int | None: ...
    @property
    def output_tokens(self) -> int | None: ...
    @property
    def total_tokens(self) -> int | None: ...
    @property
    def tool_calls(self) -> int: ...
    @property
    def node_id(self) -> str | None: ...
    @property
    def error_kind(self) -> str | None: ...
    @property
    def error_message(self) -> str | None: ...


def _check(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for ``c`` passing samples of ``n``: ``1 - C(n-c, k) / C(n, k)``.

    Raises:
        ValueError: unless ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    _check(n, c, k)
    if n - c < k:
        return 1.0  # every choice of k samples includes a passing one
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k for ``c`` passing samples of ``n``: ``C(c, k) / C(n, k)``.

    Raises:
        ValueError: unless ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    _check(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def default_ks(samples: int) -> list[int]:
    """The k values a report shows for ``samples`` per case: 1, the powers of two below it, and itself."""
    ks = {1, samples} | {2**i for i in range(1, samples.bit_length()) if 2**i < samples}
    return sorted(k for k in ks if k >= 1)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0–100) with linear interpolation (:func:`troupe.bench.stats.percentile`);
    None for no values."""
    return stats.percentile(values, q) if values else None


@dataclass(frozen=True, slots=True)
class Quantiles:
    """Distribution of one latency: how many values, p50, p95, mean, max (None without values)."""

    n: int
    p50: float | None
    p95: float | None
    mean: float | None
    max: float | None


def quantiles(values: Iterable[float | None]) -> Quantiles:
    xs = [v for v in values if v is not None]
    if not xs:
        return Quantiles(0, None, None, None, None)
    return Quantiles(len(xs), percentile(xs, 50), percentile(xs, 95), sum(xs) / len(xs), max(xs))


@dataclass(frozen=True, slots=True)
class TagStat:
    tag: str
    results: int
    passed: int

    @property
    def rate(self) -> float:
        return self.passed / self.results if self.results else 0.0


@dataclass(frozen=True, slots=True)
class PassK:
    k: int
    cases: int
    """Cases with at least k samples (the ones averaged)."""
    pass_at_k: float
    pass_hat_k: float


@dataclass(frozen=True, slots=True)
class ErrorStat:
    kind: str
    count: int
    example: str
    """One of the messages, for orientation."""


@dataclass(frozen=True, slots=True)
class GraderStat:
    grader: str
    results: int
    passed: int

    @property
    def rate(self) -> float:
        return self.passed / self.results if self.results else 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary:
    """Everything ``troupe eval report`` shows."""

    results: int
    cases: int
    samples: int
    """The most samples any case has."""
    passed: int
    errors: int
    success_rate: float | None
    by_tag: list[TagStat] = field(default_factory=list)
    pass_k: list[PassK] = field(default_factory=list)
    ttft_s: Quantiles = Quantiles(0, None, None, None, None)
    e2e_s: Quantiles = Quantiles(0, None, None, None, None)
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    tool_calls: int = 0
    errors_by_kind: list[ErrorStat] = field(default_factory=list)
    graders: list[GraderStat] = field(default_factory=list)
    nodes: dict[str, int] = field(default_factory=dict)
    """Results per Ray node id."""

    @property
    def failed(self) -> int:
        """Samples that ran and were graded as failing (errors not included)."""
        return self.results - self.passed - self.errors

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (``troupe eval report --json``)."""
        return {
            "results": self.results,
            "cases": self.cases,
            "samples": self.samples,
            "passed": self.passed,
            "failed": self.failed,
            "errors": self.errors,
            "success_rate": self.success_rate,
            "by_tag": [{"tag": t.tag, "results": t.results, "passed": t.passed, "rate": t.rate} for t in self.by_tag],
            "pass_k": [
                {"k": p.k, "cases": p.cases, "pass_at_k": p.pass_at_k, "pass_hat_k": p.pass_hat_k}
                for p in self.pass_k
            ],
            "latency": {
                name: {"n": q.n, "p50": q.p50, "p95": q.p95, "mean": q.mean, "max": q.max}
                for name, q in (("ttft_s", self.ttft_s), ("e2e_s", self.e2e_s))
            },
            "tokens": {"input": self.input_tokens, "output": self.output_tokens, "total": self.total_tokens},
            "tool_calls": self.tool_calls,
            "errors_by_kind": {e.kind: e.count for e in self.errors_by_kind},
            "graders": [{"grader": g.grader, "results": g.results, "passed": g.passed} for g in self.graders],
            "nodes": dict(self.nodes),
        }


def summarize(results: Sequence[ResultLike], ks: Sequence[int] | None = None) -> Summary:
    """Aggregate a run's results (``ks`` default: :func:`default_ks` of the most samples per case)."""
    per_case: dict[str, list[ResultLike]] = defaultdict(list)
    for r in results:
        per_case[r.case_id].append(r)
    samples = max((len(v) for v in per_case.values()), default=0)
    passed = sum(r.passed for r in results)
    errors = [r for r in results if r.error_kind]

    tag_counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in results:
        for tag in r.tags or ["(untagged)"]:
            tag_counts[tag][0] += 1
            tag_counts[tag][1] += bool(r.passed)

    if ks is None:
        ks = default_ks(samples) if samples else []
    pass_k = []
    for k in ks:
        eligible = [(len(v), sum(r.passed for r in v)) for v in per_case.values() if len(v) >= k]
        if eligible:
            at = sum(pass_at_k(n, c, k) for n, c in eligible) / len(eligible)
            hat = sum(pass_hat_k(n, c, k) for n, c in eligible) / len(eligible)
            pass_k.append(PassK(k, len(eligible), at, hat))

    kinds: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for r in errors:
        if r.error_kind:  # always, by the filter above (mypy does not carry it over)
            kinds[r.error_kind] += 1
            examples.setdefault(r.error_kind, r.error_message or "")
    grader_counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in results:
        for g in r.grades or []:
            grader_counts[str(g.get("grader"))][0] += 1
            grader_counts[str(g.get("grader"))][1] += bool(g.get("passed"))

    return Summary(
        results=len(results),
        cases=len(per_case),
        samples=samples,
        passed=passed,
        errors=len(errors),
        success_rate=passed / len(results) if results else None,
        by_tag=[TagStat(tag, n, p) for tag, (n, p) in sorted(tag_counts.items())],
        pass_k=pass_k,
        ttft_s=quantiles(r.ttft_s for r in results),
        e2e_s=quantiles(r.e2e_s for r in results),
        input_tokens=sum(r.input_tokens or 0 for r in results),
        output_tokens=sum(r.output_tokens or 0 for r in results),
        total_tokens=sum(r.total_tokens or 0 for r in results),
        tool_calls=sum(r.tool_calls or 0 for r in results),
        errors_by_kind=[ErrorStat(kind, n, examples[kind]) for kind, n in kinds.most_common()],
        graders=[GraderStat(name, n, p) for name, (n, p) in sorted(grader_counts.items())],
        nodes=dict(Counter(r.node_id or "(none)" for r in results).most_common()),
    )
