"""Scenario 5: the replica, pooled and dedicated placements.

For each placement, new conversations are opened one after another (a first turn each, no
``previous_response_id``), and each stays live: replica, as an entry in the message cache of the
host inside the ingress replica; pooled, as an entry in a host actor's message cache;
dedicated, as its own Ray actor (the benchmark server's idle timeout outlasts the run). The
scenario records

* the first-turn latency (dedicated includes creating the conversation's actor),
* a warm second turn on a few of them, for comparison,
* the server's memory (PSS of Troupe's process tree) before and after, hence the memory per
  live conversation, and from it the most live conversations the machine would hold.

It is bounded: it stops at the placement's cap, or once the server grew by the memory budget,
or once the machine has less than the minimum available memory, whichever comes first; the
ceiling beyond that is an extrapolation, and says so.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import psutil

from troupe.bench.client import send_request
from troupe.bench.stats import summarize

from .measure import Ctx, log

__all__ = ["placement"]

_RESOLUTION_MIB = 32.0


async def _one_placement(ctx: Ctx, name: str, cap: int) -> dict[str, Any]:
    target = ctx.target(f"troupe-{name}")
    if target is None or target.proc is None:
        return {"skipped": "Troupe did not start"}
    defs = ctx.defs
    before = target.proc.memory()
    available0 = psutil.virtual_memory().available / 2**20
    first, warm, ids, stop_reason = [], [], [], f"reached the cap of {cap} conversations"
    samples = [{"conversations": 0, **before}]
    started = time.perf_counter()
    async with httpx.AsyncClient() as http:
        for i in range(cap):
            body = {"model": target.model, "input": defs.placement_input, "stream": True}
            result = await send_request(http, target.base_url, body, timeout_s=120)
            if not result.ok:
                stop_reason = f"conversation {i + 1} failed: {result.error}: {(result.error_message or '')[:160]}"
                break
            first.append(result.e2e_s * 1000)  # type: ignore[operator]
            ids.append(result.response_id)
            if (i + 1) % max(1, cap // 8) == 0 or i + 1 == cap:
                memory = target.proc.memory()
                samples.append({"conversations": i + 1, **memory})
                available = psutil.virtual_memory().available / 2**20
                if memory["pss_mib"] - before["pss_mib"] > defs.placement_memory_budget_mib:
                    stop_reason = f"the server grew past the {defs.placement_memory_budget_mib:.0f} MiB budget"
                    break
                if available < defs.placement_min_available_mib:
                    stop_reason = f"the machine had under {defs.placement_min_available_mib:.0f} MiB available"
                    break
        for response_id in ids[:5]:
            body = {"model": target.model, "input": defs.placement_input, "stream": True,
                    "previous_response_id": response_id}
            result = await send_request(http, target.base_url, body, timeout_s=120)
            if result.ok and result.e2e_s is not None:
                warm.append(result.e2e_s * 1000)
    after = samples[-1]
    live = after["conversations"]
    grown = after["pss_mib"] - before["pss_mib"]
    per_conv = grown / live if live else None
    usable = available0 - defs.placement_min_available_mib
    # Below the noise of a process tree's memory (a few MiB either way) there is nothing to divide by.
    measurable = grown > _RESOLUTION_MIB
    ceiling = int(usable / per_conv) if per_conv and measurable else None
    s_first, s_warm = summarize(first), summarize(warm)
    return {
        "conversations_measured": live,
        "stopped_because": stop_reason,
        "wall_s": round(time.perf_counter() - started, 1),
        "first_turn_ms": s_first.to_dict(2) if s_first else None,
        "warm_turn_ms": s_warm.to_dict(2) if s_warm else None,
        "memory_samples": samples,
        "memory_per_conversation_mib": None if per_conv is None else round(per_conv, 3),
        "estimated_max_live": ceiling,
        "estimate_basis": (
            f"{usable:.0f} MiB available at start beyond a {defs.placement_min_available_mib:.0f} MiB reserve, "
            "divided by the memory per conversation (extrapolated, not measured)" if measurable else
            f"the server grew by {grown:.1f} MiB for {live} conversations, within the {_RESOLUTION_MIB:.0f} MiB "
            "noise of its memory: no ceiling can be extrapolated; a replica or pooled host keeps up to cache_size "
            "threads and rebuilds evicted ones from storage, so no process per conversation limits them"),
    }


async def placement(ctx: Ctx) -> dict[str, Any]:
    """5. Replica vs pooled vs dedicated: first-turn latency, memory per live conversation, ceiling."""
    out = {}
    for name, cap in (("replica", ctx.defs.placement_pooled_cap), ("pooled", ctx.defs.placement_pooled_cap),
                      ("dedicated", ctx.defs.placement_dedicated_cap)):
        log(f"5 placement: {name}, up to {cap} new conversations")
        out[name] = await _one_placement(ctx, name, cap)
    replica, pooled, dedicated = out.get("replica", {}), out.get("pooled", {}), out.get("dedicated", {})
    if dedicated.get("first_turn_ms") and pooled.get("first_turn_ms"):
        out["dedicated_over_pooled_first_turn_p50"] = round(
            dedicated["first_turn_ms"]["p50"] / pooled["first_turn_ms"]["p50"], 2)
    if pooled.get("first_turn_ms") and replica.get("first_turn_ms"):
        out["pooled_over_replica_first_turn_p50"] = round(
            pooled["first_turn_ms"]["p50"] / replica["first_turn_ms"]["p50"], 2)
    return out
