"""troupe.bench: the report writer (JSON + Markdown), the plots, the SSE timing client and the
load generator, against in-process servers (no timing thresholds)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.servers import serve_app
from troupe.bench.client import send_request
from troupe.bench.loadgen import LoadSpec, run_load
from troupe.bench.report import REPORT_SCHEMA, build_report, render_markdown, summarize_run, write_report
from troupe.sim.model import SimSettings
from troupe.sim.server import create_sim_app

MACHINE = {"cpu_model": "Test CPU", "cores": 2, "memory_gib": 4.0, "memory_available_gib": 3.0,
           "load_average": [0.5, 0.25, 0.1], "os": "Linux 6", "python": "3.11.7"}


def _run_summary(label: str, *, errors: int = 0) -> dict:
    return {
        "label": label, "mode": "concurrency", "concurrency": 4, "rate": None, "stream": True,
        "requests": 10, "warmup": 2, "ok": 10 - errors, "error_count": errors,
        "errors": {"http_500": errors} if errors else {}, "error_examples": {"http_500": "a | b"} if errors else {},
        "statuses": {"completed": 10 - errors}, "wall_s": 1.0, "throughput_rps": 10.0 - errors,
        "output_tokens_per_s": 80.0,
        "e2e_ms": {"count": 10, "mean": 12.0, "min": 9.0, "p50": 11.5, "p90": 15.0, "p99": 1234.5, "max": 1300.0},
        "ttft_ms": {"count": 10, "mean": 2.0, "min": 1.0, "p50": 2.25, "p90": 3.0, "p99": 4.0, "max": 5.0},
        "itl_ms": None, "deltas_per_response": 8, "output_items": {"message": 10},
        "usage": {"input_tokens": 2.0, "output_tokens": 8.0},
        "client": {"cpu_ms_per_request": 0.5, "cpu_share": 0.1, "loop_lag_ms": None, "start_lag_ms": None},
        "samples": {"e2e_ms": [9.0, 11.5, 1300.0], "ttft_ms": [1.0, 2.25, 5.0]},
    }


def test_build_report_shape() -> None:
    report = build_report([_run_summary("c4")], base_url="http://x/v1", model="sim", stream=True, machine=MACHINE,
                          extra={"request": {"input": "hi"}})
    assert report["schema"] == REPORT_SCHEMA and report["tool"] == "troupe bench"
    assert report["target"] == {"base_url": "http://x/v1", "model": "sim", "stream": True}
    assert report["machine"] == MACHINE and report["request"] == {"input": "hi"}
    assert report["created_at"].endswith("Z")
    json.dumps(report)  # JSON-ready


def test_markdown_has_the_table_machine_and_errors() -> None:
    report = build_report([_run_summary("c4"), _run_summary("c16", errors=2)], base_url="http://x/v1",
                          model="sim", stream=True, machine=MACHINE)
    md = render_markdown(report)
    assert md.startswith("# troupe bench: http://x/v1")
    assert "Test CPU, 2 cores, 4.0 GiB memory, load average 0.5/0.25/0.1 at start" in md
    table = [line for line in md.splitlines() if line.startswith("| c")]
    assert table[0] == "| c4 | 10 | 0 | 10.0 | 2.2 | 3.0 | 4.0 | 11.5 | 15.0 | 1,234 | – | – | 0.500 |"
    assert table[1].startswith("| c16 | 10 | 2 | 8.0 |")
    assert "## Errors" in md and "| c16 | http_500 | 2 | a / b |" in md  # pipes escaped


def test_write_report_files(tmp_path) -> None:
    report = build_report([_run_summary("c4")], base_url="http://x/v1", model="sim", stream=False, machine=MACHINE)
    paths = write_report(report, tmp_path / "sub" / "bench")
    assert [p.rsplit("/", 1)[-1] for p in paths] == ["bench.json", "bench.md"]
    assert json.loads((tmp_path / "sub" / "bench.json").read_text())["runs"][0]["label"] == "c4"
    assert "non-streaming" in (tmp_path / "sub" / "bench.md").read_text()


def test_plots_are_pngs(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from troupe.bench.plots import write_plots

    runs = [_run_summary("c1"), {**_run_summary("c16"), "concurrency": 16}]
    report = build_report(runs, base_url="http://x/v1", model="sim", stream=True, machine=MACHINE)
    paths = write_plots(report, str(tmp_path / "bench"))
    assert [p.rsplit("/", 1)[-1] for p in paths] == ["bench-cdf.png", "bench-concurrency.png"]
    for path in paths:
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sim_url():
    with serve_app(create_sim_app(SimSettings())) as url:
        yield f"{url}/v1"


async def test_send_request_streaming_and_not(sim_url) -> None:
    async with httpx.AsyncClient() as http:
        stream = await send_request(http, sim_url, {"model": "sim", "input": "[[tokens 5]]", "stream": True},
                                    keep_response=True)
        plain = await send_request(http, sim_url, {"model": "sim", "input": "[[tokens 5]]"})
    assert stream.ok and stream.status == "completed" and stream.http_status == 200
    assert stream.deltas == 5 and len(stream.itl_s) == 4
    assert stream.ttft_s is not None and stream.e2e_s is not None and stream.ttft_s <= stream.e2e_s
    assert stream.output_items == ["message"] and stream.usage["output_tokens"] == 5
    assert stream.response["output"][0]["content"][0]["text"] == "alpha bravo charlie delta echo"
    assert plain.ok and plain.ttft_s is None and plain.e2e_s is not None and plain.response is None
    assert plain.output_items == ["message"] and plain.response_id.startswith("resp_")


async def test_send_request_records_errors(sim_url) -> None:
    async with httpx.AsyncClient() as http:
        failed = await send_request(http, sim_url, {"model": "sim", "input": "[[fail 503]]"})
        failed_stream = await send_request(http, sim_url, {"model": "sim", "input": "[[fail 500]]", "stream": True})
        bad = await send_request(http, sim_url, {"model": "sim", "input": "x", "previous_response_id": "resp_1"})
        refused = await send_request(http, "http://127.0.0.1:9/v1", {"model": "sim", "input": "x"}, timeout_s=5)
    assert failed.error == "http_503" and "simulated failure" in failed.error_message
    assert failed_stream.error in ("stream_error", "failed") and failed_stream.status == "failed"
    assert bad.error == "http_400" and "stateless" in bad.error_message
    assert refused.error == "transport" and refused.e2e_s is not None


async def test_run_load_closed_and_open_loop(sim_url) -> None:
    seen = []
    body = {"model": "sim", "input": "[[tokens 3]]", "stream": True}
    closed = await run_load(sim_url, lambda i: body, LoadSpec(concurrency=3, requests=7, warmup=2),
                            on_result=seen.append)
    assert [r.index for r in closed.results] == list(range(2, 9))
    assert len(closed.warmup_results) == 2 and all(r.warmup for r in closed.warmup_results)
    assert len(seen) == 9 and all(r.ok for r in seen)
    assert closed.wall_s > 0 and closed.client_cpu_s >= 0 and closed.loop_lag is not None
    opened = await run_load(sim_url, lambda i: {**body, "stream": False}, LoadSpec(rate=200.0, requests=5))
    assert len(opened.results) == 5 and opened.start_lag is not None and opened.start_lag.count == 5
    summary = summarize_run(opened)
    assert summary["mode"] == "rate" and summary["ok"] == 5 and summary["ttft_ms"] is None


async def test_run_load_duration_bound(sim_url) -> None:
    run = await run_load(sim_url, lambda i: {"model": "sim", "input": "hi"},
                         LoadSpec(concurrency=2, requests=None, duration_s=0.3))
    assert len(run.results) >= 1 and all(r.ok for r in run.results)


async def test_sim_responses_is_one_turn_and_returns_every_call(sim_url) -> None:
    # The stateless sim endpoint: calls come back to the client, declared or not, after one model turn.
    body = {"model": "sim", "input": '[[call sleep {"ms": 1}]] [[call lookup]]', "top_k": 5, "priority": 0}
    async with httpx.AsyncClient() as http:
        result = await send_request(http, sim_url, body, keep_response=True)
    assert result.ok and result.output_items == ["function_call", "function_call"]
    assert [i["name"] for i in result.response["output"]] == ["sleep", "lookup"]
    assert result.response["store"] is False
