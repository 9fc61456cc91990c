"""``troupe bench``: a load generator and latency report for any Responses-API server.

- :mod:`.client` — one timed request (:func:`send_request`, :class:`RequestResult`)
- :mod:`.loadgen` — fixed concurrency or fixed arrival rate, warm-up, bounds (:func:`run_load`)
- :mod:`.stats` — percentiles, summaries, CDFs
- :mod:`.report` — the JSON report and its Markdown table
- :mod:`.plots` — PNG charts (matplotlib, optional)
- :mod:`.progress` — the live progress bar
- :mod:`.machine` — what the benchmark ran on
- :mod:`.runner` — one ``troupe bench`` invocation: its load levels in turn (:func:`~.runner.run_bench`)

The command itself (options, output files, exit status) is ``troupe.cli.bench``.
It talks HTTP only, so it measures Troupe, OpenAI, or any other gateway the same way.
Names are imported on first use, so ``troupe --help`` does not pay for httpx or rich.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "RequestResult",
    "send_request",
    "LoadSpec",
    "LoadRun",
    "run_load",
    "Summary",
    "summarize",
    "percentile",
    "summarize_run",
    "build_report",
    "render_markdown",
    "write_report",
    "write_plots",
    "machine_info",
    "BenchSpec",
    "run_bench",
]

_HOMES = {
    "RequestResult": ".client",
    "send_request": ".client",
    "LoadSpec": ".loadgen",
    "LoadRun": ".loadgen",
    "run_load": ".loadgen",
    "Summary": ".stats",
    "summarize": ".stats",
    "percentile": ".stats",
    "summarize_run": ".report",
    "build_report": ".report",
    "render_markdown": ".report",
    "write_report": ".report",
    "write_plots": ".plots",
    "machine_info": ".machine",
    "BenchSpec": ".runner",
    "run_bench": ".runner",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name], __name__), name)
