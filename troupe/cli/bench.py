"""``troupe bench``: load-test a Responses API server, then write and print the report.

The options become a :class:`troupe.bench.runner.BenchSpec`; :func:`troupe.bench.runner.run_bench`
does the work. httpx, rich and matplotlib are imported when the command runs.

Example::

    troupe bench --url http://127.0.0.1:8000/v1 --concurrency 1,16,64 --requests 200 --plot
"""

from __future__ import annotations

import datetime
from typing import Any

import click

from ._common import JsonObject, Numbers, SectionedCommand, fail

__all__ = ["bench"]

_SECTIONS = {
    "Target": ["url", "model", "api_key"],
    "Request": ["input_text", "body", "stream"],
    "Load": ["concurrency", "rate", "requests", "duration", "warmup", "timeout", "max_in_flight"],
    "Output": ["out", "plot", "quiet"],
}


@click.command(
    cls=SectionedCommand,
    sections=_SECTIONS,
    short_help="Load-test a Responses API server: latency percentiles, throughput, errors.",
    epilog="""\b
Examples:
  troupe bench --concurrency 1,16,64 --requests 200 --plot
  troupe bench --url http://127.0.0.1:8001/v1 --no-stream --rate 50 --duration 20
  troupe bench --input '[[latency ttft=50 itl=10]] [[tokens 64]]' --body '{"store": false}'

Exit status: 0 when some request succeeded, 1 when none did, 2 for bad arguments.
""",
)
@click.option("--url", default="http://127.0.0.1:8000/v1", help="API root; requests go to URL/responses.")
@click.option("--model", default="sim", help="The request's model.")
@click.option("--api-key", envvar="TROUPE_BENCH_API_KEY", show_envvar=True, metavar="KEY",
              help="Sent as 'Authorization: Bearer KEY'.")  # fmt: skip
@click.option("--input", "input_text", default="[[tokens 64]]", help="The input text.")
@click.option("--body", type=JsonObject(), metavar="JSON",
              help="More request fields, merged in: a JSON object or @file.json, e.g. '{\"store\": false}'.")  # fmt: skip
@click.option("--stream/--no-stream", default=True, help="Stream the responses.")
@click.option("--concurrency", type=Numbers(int), default="1", metavar="N[,N…]",
              help="Requests in flight (closed loop); several values make one run each.")  # fmt: skip
@click.option("--rate", type=Numbers(float), metavar="R[,R…]",
              help="Requests started per second (open loop), instead of --concurrency.")  # fmt: skip
@click.option("--requests", type=click.IntRange(min=1), metavar="N",
              help="Measured requests per run (default: 100, or unbounded with --duration).")  # fmt: skip
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Longest measured phase per run.")  # fmt: skip
@click.option("--warmup", type=click.IntRange(min=0), metavar="N",
              help="Requests sent first and not measured (default: the concurrency, at most 16).")  # fmt: skip
@click.option("--timeout", type=float, default=60.0, metavar="SECONDS", help="Per-request time-out.")
@click.option("--max-in-flight", type=int, default=1024, metavar="N", help="Open loop: most requests in flight.")
@click.option("--out", metavar="PREFIX", help="Write PREFIX.json and PREFIX.md (default: ./troupe-bench-<UTC time>).")
@click.option("--plot", is_flag=True,
              help="Also write PREFIX-cdf.png and, for several concurrencies, PREFIX-concurrency.png.")  # fmt: skip
@click.option("--quiet", is_flag=True, help="No progress bar.")
def bench(
    url: str, model: str, api_key: str | None, input_text: str, body: dict[str, Any] | None, stream: bool,
    concurrency: tuple[int, ...], rate: tuple[float, ...] | None, requests: int | None, duration: float | None,
    warmup: int | None, timeout: float, max_in_flight: int, out: str | None, plot: bool, quiet: bool,
) -> int:
    """Load-test any server of the OpenAI Responses API (Troupe, OpenAI, another gateway) and
    report time to first token, inter-token gaps and end-to-end latency (p50/p90/p99),
    throughput and errors, at a fixed concurrency (closed loop) or a fixed arrival rate (open
    loop).

    Writes PREFIX.json and PREFIX.md, and with --plot PNG charts; prints the table. The client's
    own cost (CPU per request, event-loop lag) is reported too.
    """
    from troupe.bench.runner import BenchSpec, run_bench

    if plot:
        from troupe._charts import ChartsUnavailable, require_matplotlib

        try:
            require_matplotlib()
        except ChartsUnavailable as exc:
            fail("bench", str(exc), 2)
    spec = BenchSpec(
        url=url, model=model, api_key=api_key, input=input_text, body=body or {}, stream=stream,
        concurrency=concurrency, rate=rate or (), requests=requests, duration_s=duration, warmup=warmup,
        timeout_s=timeout, max_in_flight=max_in_flight, progress=not quiet,
    )  # fmt: skip

    from troupe.bench.loadgen import run_async

    try:
        report = run_async(run_bench(spec))
    except KeyboardInterrupt:
        fail("bench", "interrupted", 130)
    from troupe.bench.report import run_table, write_report

    prefix = out or f"troupe-bench-{datetime.datetime.now(datetime.UTC):%Y%m%d-%H%M%S}"
    paths = write_report(report, prefix)
    if plot:
        from troupe.bench.plots import write_plots

        paths += write_plots(report, prefix)
    click.echo(run_table(report["runs"]))
    for run in report["runs"]:
        for kind, n in run["errors"].items():
            click.echo(f"{run['label']}: {n} × {kind}: {run['error_examples'].get(kind, '')}", err=True)
    click.echo("wrote " + ", ".join(paths))
    return 0 if any(r["ok"] for r in report["runs"]) else 1
