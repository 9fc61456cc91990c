"""`troupe bench` against a live Troupe on Ray Serve (both placements): the report's fields.

A few requests each; the checks are about what the report holds, never about how fast.
"""

from __future__ import annotations

import json

import pytest

from troupe.cli import main

from .conftest import PART_PLACEMENTS


@pytest.mark.parametrize("placement", PART_PLACEMENTS)
def test_bench_streaming_report(troupe_apps, placement, tmp_path, capsys) -> None:
    url = f"{troupe_apps[placement]}/v1"
    prefix = tmp_path / "bench"
    status = main([
        "bench", "--url", url, "--input", "[[tokens 6]]", "--concurrency", "1,2", "--requests", "3",
        "--warmup", "1", "--quiet", "--out", str(prefix),
    ])
    assert status == 0
    printed = capsys.readouterr().out
    assert "| concurrency 1 | 3 | 0 |" in printed and "| concurrency 2 | 3 | 0 |" in printed

    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["tool"] == "troupe bench" and report["target"] == {"base_url": url, "model": "sim", "stream": True}
    assert report["machine"]["cores"] >= 1 and report["request"]["input"] == "[[tokens 6]]"
    assert [r["concurrency"] for r in report["runs"]] == [1, 2]
    for run in report["runs"]:
        assert (run["requests"], run["warmup"], run["ok"], run["error_count"], run["errors"]) == (3, 1, 3, 0, {})
        assert run["statuses"] == {"completed": 3} and run["stream"] is True
        assert run["output_items"] == {"message": 3}
        assert run["usage"]["output_tokens"] == 6.0
        assert run["deltas_per_response"] == 6
        for metric in ("ttft_ms", "e2e_ms", "itl_ms"):
            summary = run[metric]
            assert set(summary) == {"count", "mean", "min", "p50", "p90", "p99", "max"}
            assert summary["min"] <= summary["p50"] <= summary["p90"] <= summary["p99"] <= summary["max"]
        assert run["ttft_ms"]["p50"] <= run["e2e_ms"]["p50"]
        assert run["throughput_rps"] > 0 and run["client"]["cpu_ms_per_request"] >= 0
        assert len(run["samples"]["e2e_ms"]) == 3
    markdown = (tmp_path / "bench.md").read_text()
    assert markdown.startswith(f"# troupe bench: {url}") and "| concurrency 2 | 3 | 0 |" in markdown


def test_bench_non_streaming_rate_tools_and_errors(troupe_apps, tmp_path) -> None:
    url = f"{troupe_apps['pooled']}/v1"
    status = main([
        "bench", "--url", url, "--no-stream", "--rate", "20", "--requests", "4", "--warmup", "0", "--quiet",
        "--input", '[[call calculator {"expression": "6 * 7"}]]', "--body", '{"store": false}',
        "--out", str(tmp_path / "tools"),
    ])
    assert status == 0
    run = json.loads((tmp_path / "tools.json").read_text())["runs"][0]
    assert run["mode"] == "rate" and run["rate"] == 20.0 and run["stream"] is False
    assert run["ok"] == 4 and run["ttft_ms"] is None and run["e2e_ms"]["count"] == 4
    assert run["output_items"] == {"function_call": 4, "function_call_output": 4, "message": 4}
    assert run["client"]["start_lag_ms"]["count"] == 4

    # A model that does not exist: every request fails, the report counts them, the exit status says so.
    status = main(["bench", "--url", url, "--model", "nope", "--requests", "2", "--warmup", "0", "--quiet",
                   "--out", str(tmp_path / "errors")])
    assert status == 1
    run = json.loads((tmp_path / "errors.json").read_text())["runs"][0]
    assert run["ok"] == 0 and run["error_count"] == 2 and run["errors"] == {"http_404": 2}
    assert "nope" in run["error_examples"]["http_404"]


def test_bench_plots(troupe_apps, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    status = main(["bench", "--url", f"{troupe_apps['pooled']}/v1", "--concurrency", "1,2", "--requests", "2",
                   "--warmup", "0", "--quiet", "--plot", "--out", str(tmp_path / "p")])
    assert status == 0
    for name in ("p-cdf.png", "p-concurrency.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
