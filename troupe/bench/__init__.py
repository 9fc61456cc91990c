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

from troupe._lazy import lazy_exports

_HOMES = {
    ".client": ["RequestResult", "send_request"],
    ".loadgen": ["LoadSpec", "LoadRun", "run_load"],
    ".stats": ["Summary", "summarize", "percentile"],
    ".report": ["summarize_run", "build_report", "render_markdown", "write_report"],
    ".plots": ["write_plots"],
    ".machine": ["machine_info"],
    ".runner": ["BenchSpec", "run_bench"],
}
__all__ = [name for names in _HOMES.values() for name in names]
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
