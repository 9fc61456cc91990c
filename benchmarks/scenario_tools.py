"""Scenario 7: server-side tools after an idle gap.

One response asks for four parallel ``sleep`` calls of :data:`~benchmarks.scenarios.IDLE_SLEEP_MS`
(zero-latency sim, model ``sim`` over HTTP, streamed), on two Troupe apps: the main one,
``troupe-replica`` (:data:`~benchmarks.scenarios.MAIN`: the replica placement, tools in the
node's tool runner actor, both the defaults) and ``troupe-pooled-task`` (pooled host actors, a
Ray task per call: the behaviour before the tool runner). It is measured

* on the first request after Troupe said it was ready (:func:`first_requests`, which the runner
  calls right after starting Troupe, before any other scenario sends anything), and
* ``idle_tools_gap_s`` after the previous request, several times (:func:`idle_tools`), the apps
  taking turns, so that every request follows an idle gap of the whole server.

Each figure is compared with the critical path: the same two model turns sent straight to the
bare sim (:func:`benchmarks.scenario_http.model_only`) plus the tools' sleep. Each request to
Troupe opens a new connection, as a client does after an idle gap; so does the first turn to
the sim (``connect_first``), the second reusing it. "Over the critical path" is E2E minus that,
in milliseconds.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from troupe.bench.client import send_request
from troupe.bench.stats import summarize

from .measure import Ctx, log
from .scenario_http import breakdown, model_only
from .scenarios import IDLE_SLEEP_MS, MAIN
from .targets import Target

__all__ = ["first_requests", "idle_tools", "APPS", "PLACEMENTS"]

APPS = {MAIN: "actor", "troupe-pooled-task": "task"}
"""The targets measured → their ``tool_runner``."""
PLACEMENTS = {MAIN: "replica", "troupe-pooled-task": "pooled"}
"""The targets measured → their placement."""


def _apps(ctx: Ctx) -> list[Target]:
    return [t for name in APPS if (t := ctx.target(name)) is not None]


async def _one(target: Target, text: str) -> dict[str, Any]:
    """Send the tool request once: its E2E (ms) and response id, or its error."""
    async with httpx.AsyncClient() as http:
        result = await send_request(http, target.base_url, {"model": target.model, "input": text, "stream": True},
                                    timeout_s=60)
    if not result.ok or result.e2e_s is None:
        return {"error": f"{result.error}: {(result.error_message or '')[:200]}"}
    return {"e2e_ms": round(result.e2e_s * 1000, 2), "response_id": result.response_id}


async def first_requests(ctx: Ctx) -> dict[str, dict[str, Any]]:
    """The first request to each tool app, one app after the other; by target name."""
    found = {}
    for target in _apps(ctx):
        log(f"7 idle tools: first request to {target.name}")
        found[target.name] = await _one(target, ctx.defs.idle_tools_input)
    return found


async def _after_gaps(ctx: Ctx, targets: list[Target]) -> dict[str, list[dict[str, Any]]]:
    """``idle_tools_samples`` requests per app, each ``idle_tools_gap_s`` after the previous
    request to any of them."""
    samples: dict[str, list[dict[str, Any]]] = {t.name: [] for t in targets}
    for i in range(ctx.defs.idle_tools_samples):
        for target in targets:
            log(f"7 idle tools: {target.name}, sample {i + 1} after {ctx.defs.idle_tools_gap_s:g} s idle")
            await asyncio.sleep(ctx.defs.idle_tools_gap_s)
            samples[target.name].append(await _one(target, ctx.defs.idle_tools_input))
    return samples


def _over(e2e_ms: float | None, critical_path_ms: float | None) -> float | None:
    return None if e2e_ms is None or critical_path_ms is None else round(e2e_ms - critical_path_ms, 2)


async def _row(target: Target, first: dict[str, Any] | None, gaps: list[dict[str, Any]],
               critical_path_ms: float | None) -> dict[str, Any]:
    """One app's figures: the first request and the requests after a gap, each as E2E and over
    the critical path, with where the time went (step traces)."""
    ok = [s for s in gaps if "e2e_ms" in s]
    e2e = summarize(s["e2e_ms"] for s in ok)
    row: dict[str, Any] = {
        "target": target.name, "tool_runner": APPS[target.name], "placement": PLACEMENTS[target.name],
        "after_gap": {
            "n": len(ok), "errors": [s["error"] for s in gaps if "error" in s],
            "samples_ms": [s["e2e_ms"] for s in ok],
            "e2e_ms": {"p50": round(e2e.p50, 2), "max": round(max(s["e2e_ms"] for s in ok), 2)} if e2e else None,
            "over_critical_path_ms": _over(e2e.p50 if e2e else None, critical_path_ms),
            "breakdown_p50": await breakdown(target, {s["response_id"]: s["e2e_ms"] for s in ok if s["response_id"]},
                                             IDLE_SLEEP_MS),
        },
    }
    if first is not None:
        row["first"] = {**first, "over_critical_path_ms": _over(first.get("e2e_ms"), critical_path_ms)}
        if first.get("response_id"):
            row["first"]["breakdown"] = await breakdown(target, {first["response_id"]: first["e2e_ms"]}, IDLE_SLEEP_MS)
    return row


async def idle_tools(ctx: Ctx) -> dict[str, Any]:
    """7. The tool round after an idle gap (and, when the runner measured it, the first request
    after start) on each tool app, against the critical path."""
    sim, targets = ctx.target("sim"), _apps(ctx)
    if sim is None or not targets:
        return {"skipped": "Troupe or the sim server did not start"}
    ideal = await model_only(ctx, sim, ctx.defs.idle_tools_input, IDLE_SLEEP_MS, connect_first=True)
    gaps = await _after_gaps(ctx, targets)
    rows = [await _row(t, ctx.first_tool_requests.get(t.name), gaps[t.name], ideal["critical_path_ms"])
            for t in targets]
    return {"critical_path": ideal, "gap_s": ctx.defs.idle_tools_gap_s, "rows": rows}
