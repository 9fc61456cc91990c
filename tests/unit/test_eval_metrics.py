"""pass@k and pass^k against hand-computed values; percentiles; the run summary."""

from __future__ import annotations

import math

import pytest

from troupe.eval.metrics import default_ks, pass_at_k, pass_hat_k, percentile, quantiles, summarize
from troupe.storage import EvalResultRecord


@pytest.mark.parametrize(
    ("n", "c", "k", "at_k", "hat_k"),
    [
        # 1 - C(3,2)/C(5,2) = 1 - 3/10; C(2,2)/C(5,2) = 1/10
        (5, 2, 2, 0.7, 0.1),
        # k = 1: both are the pass rate c/n
        (5, 2, 1, 0.4, 0.4),
        # 1 - C(7,5)/C(10,5) = 1 - 21/252; C(3,5) = 0
        (10, 3, 5, 1 - 21 / 252, 0.0),
        # n - c < k: every choice of k includes a pass; C(3,2)/C(4,2) = 3/6
        (4, 3, 2, 1.0, 0.5),
        # 1 - C(6,3)/C(8,3) = 1 - 20/56; C(2,3) = 0
        (8, 2, 3, 1 - 20 / 56, 0.0),
        # C(6,3)/C(8,3) = 20/56; 1 - C(2,3)/C(8,3) = 1
        (8, 6, 3, 1.0, 20 / 56),
        (3, 0, 2, 0.0, 0.0),
        (3, 3, 3, 1.0, 1.0),
    ],
)
def test_pass_at_k_and_pass_hat_k(n: int, c: int, k: int, at_k: float, hat_k: float) -> None:
    assert math.isclose(pass_at_k(n, c, k), at_k)
    assert math.isclose(pass_hat_k(n, c, k), hat_k)


def test_the_estimators_match_enumerating_every_k_subset() -> None:
    import itertools

    samples = [True, False, True, False, False, True, False]
    n, c = len(samples), sum(samples)
    for k in range(1, n + 1):
        subsets = list(itertools.combinations(samples, k))
        assert math.isclose(pass_at_k(n, c, k), sum(any(s) for s in subsets) / len(subsets))
        assert math.isclose(pass_hat_k(n, c, k), sum(all(s) for s in subsets) / len(subsets))


@pytest.mark.parametrize(("n", "c", "k"), [(5, 2, 0), (5, 2, 6), (5, 6, 1), (5, -1, 1)])
def test_out_of_range_arguments_are_refused(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)
    with pytest.raises(ValueError):
        pass_hat_k(n, c, k)


def test_default_ks() -> None:
    assert default_ks(1) == [1]
    assert default_ks(2) == [1, 2]
    assert default_ks(5) == [1, 2, 4, 5]
    assert default_ks(8) == [1, 2, 4, 8]


def test_percentile_interpolates_linearly() -> None:
    assert percentile([4, 1, 3, 2], 50) == 2.5
    assert math.isclose(percentile([1, 2, 3, 4], 95), 3.85)
    assert percentile([7], 95) == 7
    assert percentile([], 50) is None
    q = quantiles([None, 1.0, 3.0])
    assert (q.n, q.p50, q.mean, q.max) == (2, 2.0, 2.0, 3.0)


def result(case: str, sample: int, passed: bool, **kw: object) -> EvalResultRecord:
    fields: dict[str, object] = {"tags": ["t"], "e2e_s": 1.0, "ttft_s": 0.1, "total_tokens": 10, "input_tokens": 7,
                                 "output_tokens": 3, "tool_calls": 1, "node_id": "n1"}  # fmt: skip
    return EvalResultRecord(run_id="r", case_id=case, sample=sample, passed=passed, **{**fields, **kw})


def test_summarize() -> None:
    results = [
        # case a: 2 of 3 pass; case b: 0 of 3 (one error); case c: 1 sample only (interrupted run)
        result("a", 0, True, tags=["math"], grades=[{"grader": "contains", "passed": True}]),
        result("a", 1, True, tags=["math"], grades=[{"grader": "contains", "passed": True}]),
        result("a", 2, False, tags=["math"], grades=[{"grader": "contains", "passed": False}]),
        result("b", 0, False, tags=["math", "tools"], node_id="n2"),
        result("b", 1, False, tags=["math", "tools"], node_id="n2"),
        result("b", 2, False, tags=["math", "tools"], error_kind="timeout", error_message="slow", e2e_s=None),
        result("c", 0, True, tags=[], ttft_s=None),
    ]
    s = summarize(results)
    assert (s.results, s.cases, s.samples, s.passed, s.errors, s.failed) == (7, 3, 3, 3, 1, 3)
    assert math.isclose(s.success_rate, 3 / 7)
    assert [(t.tag, t.results, t.passed) for t in s.by_tag] == [("(untagged)", 1, 1), ("math", 6, 2), ("tools", 3, 0)]
    by_k = {p.k: p for p in s.pass_k}
    assert sorted(by_k) == [1, 2, 3]
    # k = 1 averages all three cases: (2/3 + 0 + 1) / 3; k = 2, 3 only cases a and b
    assert by_k[1].cases == 3 and math.isclose(by_k[1].pass_at_k, (2 / 3 + 0 + 1) / 3)
    assert by_k[2].cases == 2 and math.isclose(by_k[2].pass_at_k, (pass_at_k(3, 2, 2) + 0) / 2)
    assert math.isclose(by_k[2].pass_hat_k, (pass_hat_k(3, 2, 2) + 0) / 2)
    assert math.isclose(by_k[3].pass_hat_k, 0.0)
    assert (s.e2e_s.n, s.ttft_s.n) == (6, 6)
    assert (s.input_tokens, s.output_tokens, s.total_tokens, s.tool_calls) == (49, 21, 70, 7)
    assert [(e.kind, e.count, e.example) for e in s.errors_by_kind] == [("timeout", 1, "slow")]
    assert [(g.grader, g.results, g.passed) for g in s.graders] == [("contains", 3, 2)]
    assert s.nodes == {"n1": 5, "n2": 2}
    doc = s.to_dict()
    assert doc["errors_by_kind"] == {"timeout": 1} and doc["pass_k"][0]["k"] == 1


def test_summarize_nothing() -> None:
    s = summarize([])
    assert (s.results, s.success_rate, s.pass_k) == (0, None, [])
