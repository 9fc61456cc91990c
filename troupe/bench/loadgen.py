"""The load generator: many timed requests at a fixed concurrency or a fixed arrival rate.

Two ways to offer load:

* **closed loop** (``rate=None``): ``concurrency`` workers, each sending its next request as
  soon as the previous one finishes, so exactly ``concurrency`` requests are in flight;
* **open loop** (``rate=R``): a request starts every ``1/R`` seconds whatever the server does
  (at most ``max_in_flight`` at once; a start that had to wait for a slot is late, and the
  lateness is reported), which shows queueing that a closed loop hides.

Warm-up requests (``warmup``) run first, the same way, and are left out of every statistic.
The measured phase ends after ``requests`` requests or ``duration_s`` seconds, whichever
comes first; requests in flight then finish (each bounded by ``timeout_s``).

The generator measures itself too: the CPU time this process spent per request and the
event-loop lag (how late a 5 ms timer fires), so a report can tell a slow server from a
saturated client.

Example::

    spec = LoadSpec(concurrency=16, requests=200, warmup=16)
    run = await run_load("http://127.0.0.1:8000/v1", lambda i: {"model": "sim", "input": "hi"}, spec)
    len(run.results), run.wall_s, run.client_cpu_s
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from .client import RequestResult, send_request
from .stats import Summary, summarize

__all__ = ["LoadSpec", "LoadRun", "run_load", "LoopLagMonitor", "run_async"]

T = TypeVar("T")

BodyFactory = Callable[[int], dict[str, Any]]
"""Makes the body of request ``i`` (warm-up requests are numbered first)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadSpec:
    """How much load, for how long."""

    concurrency: int = 1
    """Closed loop: requests in flight. Open loop: ignored (see ``max_in_flight``)."""
    rate: float | None = None
    """Open loop: requests started per second; None for a closed loop."""
    requests: int | None = 100
    """Measured requests (None: bounded by ``duration_s`` only)."""
    duration_s: float | None = None
    """Longest measured phase, in seconds (None: bounded by ``requests`` only)."""
    warmup: int = 0
    """Requests sent first and left out of the statistics."""
    timeout_s: float = 60.0
    max_in_flight: int = 1024
    """Open loop: most requests in flight at once."""

    def __post_init__(self) -> None:
        if self.requests is None and self.duration_s is None:
            raise ValueError("a load needs a bound: requests, duration_s or both")
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if self.rate is not None and self.rate <= 0:
            raise ValueError("rate must be positive")
        if self.requests is not None and self.requests < 1:
            raise ValueError("requests must be at least 1")

    @property
    def label(self) -> str:
        return f"rate {self.rate:g}/s" if self.rate is not None else f"concurrency {self.concurrency}"


@dataclass(slots=True, kw_only=True)
class LoadRun:
    """The measured phase of one load: every request's result and the client's own cost."""

    spec: LoadSpec
    results: list[RequestResult] = field(default_factory=list)
    warmup_results: list[RequestResult] = field(default_factory=list)
    started_at: float = 0.0
    """Unix time the measured phase started."""
    wall_s: float = 0.0
    """From the first measured request sent to the last one finished."""
    client_cpu_s: float = 0.0
    """CPU time this process used during the measured phase."""
    loop_lag: Summary | None = None
    """How late the client's event loop ran a 5 ms timer (seconds)."""
    start_lag: Summary | None = None
    """Open loop: how late requests started against their schedule (seconds)."""


class LoopLagMonitor:
    """Samples event-loop lag: how much later than asked a short sleep returns."""

    def __init__(self, interval_s: float = 0.005) -> None:
        self.interval_s = interval_s
        self.samples: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(self.interval_s)
            self.samples.append(max(0.0, time.perf_counter() - before - self.interval_s))

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> Summary | None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        return summarize(self.samples)


async def run_load(
    base_url: str,
    body_for: BodyFactory,
    spec: LoadSpec,
    *,
    headers: dict[str, str] | None = None,
    on_result: Callable[[RequestResult], None] | None = None,
    client: httpx.AsyncClient | None = None,
    keep_responses: bool = False,
) -> LoadRun:
    """Offer ``spec``'s load to ``base_url`` and time every request.

    Args:
        base_url: the API root (``…/v1``); requests go to ``{base_url}/responses``.
        body_for: the body of request ``i``.
        spec: concurrency or rate, bounds, warm-up.
        headers: sent with every request.
        on_result: called with each result as it finishes (warm-up ones too; see ``warmup``).
        client: an HTTP client to reuse; by default one is made with enough connections.
        keep_responses: keep each final Response in its result.
    """
    own_client = client is None
    if client is None:
        connections = spec.max_in_flight if spec.rate is not None else spec.concurrency
        client = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
            timeout=spec.timeout_s,
        )
    run = LoadRun(spec=spec)
    try:
        sender = _Sender(client, base_url, body_for, spec, headers, on_result, keep_responses)
        if spec.warmup:
            warm = LoadSpec(concurrency=spec.concurrency, rate=spec.rate, requests=spec.warmup,
                            timeout_s=spec.timeout_s, max_in_flight=spec.max_in_flight)
            run.warmup_results = (await sender.phase(warm, first_index=0, warmup=True))[0]
        monitor = LoopLagMonitor()
        monitor.start()
        cpu0 = time.process_time()
        run.started_at = time.time()
        t0 = time.perf_counter()
        run.results, lags = await sender.phase(spec, first_index=spec.warmup, warmup=False)
        run.wall_s = time.perf_counter() - t0
        run.client_cpu_s = time.process_time() - cpu0
        run.loop_lag = await monitor.stop()
        run.start_lag = summarize(lags) if spec.rate is not None else None
    finally:
        if own_client:
            await client.aclose()
    return run


class _Sender:
    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        body_for: BodyFactory,
        spec: LoadSpec,
        headers: dict[str, str] | None,
        on_result: Callable[[RequestResult], None] | None,
        keep: bool,
    ) -> None:
        self.client, self.base_url, self.body_for = client, base_url, body_for
        self.timeout_s, self.headers, self.on_result, self.keep = spec.timeout_s, headers, on_result, keep

    async def one(self, index: int, run_start: float, warmup: bool) -> RequestResult:
        result = await send_request(
            self.client, self.base_url, self.body_for(index), index=index, headers=self.headers,
            timeout_s=self.timeout_s, keep_response=self.keep, run_start=run_start,
        )
        result.warmup = warmup
        if self.on_result is not None:
            self.on_result(result)
        return result

    async def phase(self, spec: LoadSpec, *, first_index: int, warmup: bool) -> tuple[list[RequestResult], list[float]]:
        start = time.perf_counter()
        deadline = start + spec.duration_s if spec.duration_s is not None else None
        limit = spec.requests
        if spec.rate is None:
            return await self._closed(spec, start, deadline, limit, first_index, warmup), []
        return await self._open(spec, start, deadline, limit, first_index, warmup)

    async def _closed(
        self, spec: LoadSpec, start: float, deadline: float | None, limit: int | None, first: int, warmup: bool
    ) -> list[RequestResult]:
        results: list[RequestResult] = []
        counter = iter(range(first, first + limit) if limit is not None else _count_from(first))

        async def worker() -> None:
            for index in counter:
                if deadline is not None and time.perf_counter() >= deadline:
                    return
                results.append(await self.one(index, start, warmup))

        await asyncio.gather(*(worker() for _ in range(spec.concurrency)))
        results.sort(key=lambda r: r.index)
        return results

    async def _open(
        self, spec: LoadSpec, start: float, deadline: float | None, limit: int | None, first: int, warmup: bool
    ) -> tuple[list[RequestResult], list[float]]:
        assert spec.rate is not None
        interval = 1.0 / spec.rate
        slots = asyncio.Semaphore(spec.max_in_flight)
        tasks: list[asyncio.Task[RequestResult]] = []
        lags: list[float] = []

        async def guarded(index: int) -> RequestResult:
            try:
                return await self.one(index, start, warmup)
            finally:
                slots.release()

        n = 0
        while limit is None or n < limit:
            due = start + n * interval
            if deadline is not None and due >= deadline:
                break
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await slots.acquire()
            lags.append(max(0.0, time.perf_counter() - due))
            tasks.append(asyncio.create_task(guarded(first + n)))
            n += 1
        results = list(await asyncio.gather(*tasks))
        return results, lags


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on uvloop when it is installed (it halves the client's cost per streamed
    event), else on the standard asyncio loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def _count_from(first: int) -> Any:
    n = first
    while True:
        yield n
        n += 1
