"""troupe.bench.stats and the run summary: percentiles, summaries, CDFs, ratios, counting."""

from __future__ import annotations

import math
import random

import pytest

from troupe.bench.client import RequestResult
from troupe.bench.loadgen import LoadRun, LoadSpec
from troupe.bench.report import summarize_run
from troupe.bench.stats import Summary, cdf, percentile, ratio, summarize, thin


def test_percentile_interpolates_linearly_like_numpy() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 2.5
    assert percentile(values, 100) == 4.0
    assert percentile(values, 90) == pytest.approx(3.7)
    assert percentile([7.0], 99) == 7.0


def test_percentile_ignores_input_order() -> None:
    data = [random.Random(4).uniform(0, 100) for _ in range(101)]
    shuffled = data[:]
    random.Random(5).shuffle(shuffled)
    assert percentile(data, 99) == percentile(shuffled, 99)
    assert percentile(data, 50) == sorted(data)[50]


def test_percentile_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_summarize() -> None:
    s = summarize(float(v) for v in range(1, 101))
    assert s is not None
    assert (s.count, s.min, s.max, s.mean) == (100, 1.0, 100.0, 50.5)
    assert s.p50 == pytest.approx(50.5)
    assert s.p90 == pytest.approx(90.1)
    assert s.p99 == pytest.approx(99.01)


def test_summarize_nothing_is_none_and_nan_is_dropped() -> None:
    assert summarize([]) is None
    assert summarize([math.nan]) is None
    s = summarize([1.0, math.nan, 3.0])
    assert s is not None and s.count == 2 and s.p50 == 2.0


def test_summary_scaled_and_rounded() -> None:
    s = Summary(count=2, mean=0.0015, min=0.001, p50=0.0015, p90=0.0019, p99=0.00199, max=0.002)
    ms = s.scaled(1000).to_dict(digits=2)
    assert ms == {"count": 2, "mean": 1.5, "min": 1.0, "p50": 1.5, "p90": 1.9, "p99": 1.99, "max": 2.0}


def test_cdf_and_thin() -> None:
    assert cdf([3.0, 1.0, 2.0, 2.0]) == [(1.0, 0.25), (2.0, 0.5), (2.0, 0.75), (3.0, 1.0)]
    points = list(range(1000))
    thinned = thin(points, 11)
    assert len(thinned) == 11 and thinned[0] == 0 and thinned[-1] == 999
    assert thin(points[:5], 11) == points[:5]


def test_ratio() -> None:
    assert ratio(30.0, 10.0) == 3.0
    assert ratio(None, 10.0) is None
    assert ratio(5.0, None) is None
    assert ratio(5.0, 0.0) is None


def _result(i: int, *, e2e: float, ttft: float | None = None, error: str | None = None, **kw: object) -> RequestResult:
    r = RequestResult(index=i, stream=ttft is not None, e2e_s=e2e, ttft_s=ttft, error=error, **kw)  # type: ignore[arg-type]
    return r


def test_summarize_run_counts_errors_throughput_and_usage() -> None:
    ok = [
        _result(i, e2e=0.1 * (i + 1), ttft=0.01, itl_s=[0.002, 0.004], deltas=3, status="completed",
                output_items=["message"], usage={"input_tokens": 2, "output_tokens": 8})
        for i in range(4)
    ]
    bad = [
        _result(4, e2e=0.5, error="http_500", error_message="boom", http_status=500),
        _result(5, e2e=0.6, error="timeout", error_message="slow"),
        _result(6, e2e=0.7, error="http_500", error_message="boom again", http_status=500),
    ]
    run = LoadRun(spec=LoadSpec(concurrency=4, requests=7), results=ok + bad, wall_s=2.0, client_cpu_s=0.07,
                  started_at=1_700_000_000.0)
    s = summarize_run(run)
    assert s["label"] == "concurrency 4" and s["mode"] == "concurrency" and s["concurrency"] == 4
    assert (s["requests"], s["ok"], s["error_count"]) == (7, 4, 3)
    assert s["errors"] == {"http_500": 2, "timeout": 1}
    assert s["error_examples"]["http_500"] == "boom"
    assert s["throughput_rps"] == 2.0  # successes only
    assert s["output_tokens_per_s"] == 16.0
    assert s["e2e_ms"]["count"] == 4 and s["e2e_ms"]["p50"] == pytest.approx(250.0)
    assert s["ttft_ms"]["p50"] == pytest.approx(10.0)
    assert s["itl_ms"]["count"] == 8 and s["itl_ms"]["max"] == pytest.approx(4.0)
    assert s["output_items"] == {"message": 4}
    assert s["usage"] == {"input_tokens": 2.0, "output_tokens": 8.0}
    assert s["client"]["cpu_ms_per_request"] == pytest.approx(10.0)
    assert s["client"]["cpu_share"] == pytest.approx(0.035)
    assert s["samples"]["e2e_ms"] == [100.0, 200.0, 300.0, 400.0]
    assert s["started_at"] == "2023-11-14T22:13:20Z"


def test_summarize_run_of_only_failures_reports_no_latency() -> None:
    run = LoadRun(spec=LoadSpec(rate=5.0, requests=1), results=[_result(0, e2e=0.2, error="transport")], wall_s=1.0)
    s = summarize_run(run)
    assert s["mode"] == "rate" and s["rate"] == 5.0 and s["concurrency"] is None
    assert s["ok"] == 0 and s["throughput_rps"] == 0.0
    assert s["e2e_ms"] is None and s["ttft_ms"] is None


def test_load_spec_needs_a_bound() -> None:
    with pytest.raises(ValueError):
        LoadSpec(requests=None, duration_s=None)
    with pytest.raises(ValueError):
        LoadSpec(concurrency=0)
    assert LoadSpec(requests=None, duration_s=3).label == "concurrency 1"
    assert LoadSpec(rate=2.5).label == "rate 2.5/s"
