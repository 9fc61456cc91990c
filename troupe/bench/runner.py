"""One ``troupe bench`` invocation: its load levels run one after another, then one report.

:class:`BenchSpec` holds what the command line asked for, typed; :func:`run_bench` runs a
:class:`~troupe.bench.loadgen.LoadSpec` per concurrency (or per rate), each with its own
progress bar, and returns the report :func:`~troupe.bench.report.build_report` makes. The
command itself (``troupe.cli.bench``) parses the options and writes and prints the report.

Example::

    spec = BenchSpec(url="http://127.0.0.1:8000/v1", concurrency=(1, 16), requests=200)
    report = run_async(run_bench(spec))
    print(run_table(report["runs"]))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["BenchSpec", "run_bench"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchSpec:
    """What to send, how hard, and for how long."""

    url: str = "http://127.0.0.1:8000/v1"
    """The API root; requests go to ``URL/responses``."""
    model: str = "sim"
    api_key: str | None = None
    """Sent as ``Authorization: Bearer KEY`` when set."""
    input: str = "[[tokens 64]]"
    body: dict[str, Any] = field(default_factory=dict)
    """More request fields, merged into every request (``stream`` excepted)."""
    stream: bool = True
    concurrency: tuple[int, ...] = (1,)
    """Requests in flight (closed loop): one run per value. Ignored when ``rate`` is set."""
    rate: tuple[float, ...] = ()
    """Requests started per second (open loop): one run per value."""
    requests: int | None = None
    """Measured requests per run; None: 100, or unbounded when ``duration_s`` is set."""
    duration_s: float | None = None
    """The longest measured phase per run."""
    warmup: int | None = None
    """Unmeasured requests first; None: the concurrency (4 for a rate), at most 16."""
    timeout_s: float = 60.0
    max_in_flight: int = 1024
    """Open loop: the most requests in flight."""
    progress: bool = True
    """Draw a live progress bar per run (on stderr)."""


async def run_bench(spec: BenchSpec) -> dict[str, Any]:
    """Run every load level of ``spec``, in order; the report of all of them."""
    from .loadgen import LoadSpec, run_load
    from .progress import Progress
    from .report import build_report, summarize_run

    body = {"model": spec.model, "input": spec.input, **spec.body, "stream": spec.stream}
    headers = {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else None
    requests = spec.requests if spec.requests is not None else (None if spec.duration_s is not None else 100)
    levels: list[tuple[int, float | None]] = (
        [(1, r) for r in spec.rate] if spec.rate else [(c, None) for c in spec.concurrency]
    )
    summaries = []
    for concurrency, rate in levels:
        warmup = spec.warmup if spec.warmup is not None else min(concurrency if rate is None else 4, 16)
        load = LoadSpec(
            concurrency=concurrency, rate=rate, requests=requests, duration_s=spec.duration_s, warmup=warmup,
            timeout_s=spec.timeout_s, max_in_flight=spec.max_in_flight,
        )  # fmt: skip
        with Progress(load.label, total=requests, duration_s=spec.duration_s, warmup=warmup,
                      enabled=spec.progress) as bar:  # fmt: skip
            run = await run_load(spec.url, lambda _i: body, load, headers=headers, on_result=bar.update)
        summaries.append(summarize_run(run))
    return build_report(summaries, base_url=spec.url, model=spec.model, stream=spec.stream,
                        extra={"request": {"input": spec.input, "body": spec.body}})  # fmt: skip
