"""Scenarios 0–4, all over HTTP with ``troupe.bench``: client overhead, streaming, throughput,
the agent loop, and history growth. Each returns a JSON-ready dict of rows.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from troupe.bench.client import send_request
from troupe.bench.loadgen import LoadSpec, run_load
from troupe.bench.report import summarize_run
from troupe.bench.stats import ratio, summarize

from .measure import Ctx, add_ratios, log, measure
from .scenarios import MAIN, MAIN_PROXY, POOLED, SLEEP_MS
from .targets import Target

__all__ = ["client_overhead", "streaming", "throughput", "agent_loop", "history", "model_only", "breakdown"]


COMPARED = ("sim", "serve-floor", MAIN, MAIN_PROXY, POOLED)
"""Scenarios 1 and 2, before the peers: the bare sim (the limit), the Serve floor (the sim app
inside one Serve replica, direct), the main Troupe (the replica placement) direct, how ``troupe
serve`` serves, the same app through Serve's proxy, and Troupe pooled direct (host actors: a Ray
hop per streamed batch), for comparison."""


def _order(ctx: Ctx, *names: str) -> list[Target]:
    """The named targets that are up, then the peers."""
    found = [t for n in names if (t := ctx.target(n)) is not None]
    return found + ctx.peers()


async def client_overhead(ctx: Ctx) -> dict[str, Any]:
    """0. The load generator against the bare sim at zero latency: its CPU per request and per
    streamed event, and its event-loop lag; with the standard asyncio loop (before) and uvloop
    (after, what ``troupe bench`` uses when installed)."""
    sim = ctx.target("sim")
    assert sim is not None
    body = {"input": ctx.defs.overhead_input, "stream": True}
    rows = [await measure(ctx, sim, body, level, label="bare sim, uvloop") for level in ctx.defs.overhead_levels]
    for row in rows:
        row["loop"] = "uvloop"
    # "Before": the same load on the standard event loop, in a thread of its own.
    for level in ctx.defs.overhead_levels:
        spec = LoadSpec(concurrency=level.concurrency, requests=level.requests, warmup=level.warmup)
        run = await asyncio.to_thread(
            asyncio.run, run_load(sim.base_url, lambda _i: {**body, "model": "sim"}, spec)
        )
        rows.append({"target": "sim", "label": "bare sim, asyncio", "loop": "asyncio",
                     "concurrency": level.concurrency, "summary": summarize_run(run, label="bare sim, asyncio")})
    for row in rows:
        s = row["summary"]
        deltas = s.get("deltas_per_response") or 0
        events = deltas + 8  # created, in_progress, item added/done, part added/done, text done, completed
        row["client_cpu_us_per_event"] = round(s["client"]["cpu_ms_per_request"] * 1000 / events, 1) if events else None
    return {"rows": rows}


async def streaming(ctx: Ctx) -> dict[str, Any]:
    """1. Single-turn streaming text: TTFT and total at several concurrencies, against the limit."""
    body = {"input": ctx.defs.streaming_input, "stream": True}
    rows = []
    for level in ctx.defs.streaming_levels:
        for target in _order(ctx, *COMPARED):
            log(f"1 streaming: {target.name} c={level.concurrency}")
            rows.append(await measure(ctx, target, body, level, label=target.name))
    add_ratios(rows)
    return {"rows": rows}


def _throughput_variants(ctx: Ctx) -> list[tuple[Target, bool | None, str]]:
    """Scenario 2's (target, store, label) triples: the limit and the floor (stateless, no
    store), the main Troupe direct with store on and off, through the proxy with it on, Troupe
    pooled direct with store on and off, and the peers with it on."""
    found: list[tuple[Target, bool | None, str]] = []
    if (sim := ctx.target("sim")) is not None:
        found.append((sim, None, "sim"))
    if (floor := ctx.target("serve-floor")) is not None:
        found.append((floor, None, "serve floor"))
    if (troupe := ctx.target(MAIN)) is not None:
        found += [(troupe, True, "troupe store=on"), (troupe, False, "troupe store=off")]
    if (proxied := ctx.target(MAIN_PROXY)) is not None:
        found.append((proxied, True, "troupe via proxy store=on"))
    if (pooled := ctx.target(POOLED)) is not None:
        found += [(pooled, True, "troupe pooled store=on"), (pooled, False, "troupe pooled store=off")]
    return found + [(peer, True, f"{peer.name} store=on") for peer in ctx.peers()]


async def throughput(ctx: Ctx) -> dict[str, Any]:
    """2. Non-streaming, zero-latency sim: responses per second and CPU per response, store on/off."""
    rows = []
    for level in ctx.defs.throughput_levels:
        for target, store, label in _throughput_variants(ctx):
            body: dict[str, Any] = {"input": ctx.defs.throughput_input, "stream": False}
            if store is not None:
                body["store"] = store
            log(f"2 throughput: {label} c={level.concurrency}")
            row = await measure(ctx, target, body, level, label=label)
            row["store"] = store
            rows.append(row)
    add_ratios(rows)
    return {"rows": rows}


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


async def model_only(ctx: Ctx, sim: Target, text: str, sleep_ms: int, *, connect_first: bool = False) -> dict[str, Any]:
    """A tool round's two model turns sent straight to the bare sim: the model's share of the
    critical path. Turn 1 is ``text`` (which asks for the tool calls), turn 2 sees the calls and
    their outputs; each is sent ``agent_model_samples`` times. The p50 of each turn, the tools'
    ``sleep_ms`` and the critical path: turn 1 + ``sleep_ms`` + turn 2.

    ``connect_first``: turn 1 opens a new connection each time, as a client does after an idle
    gap (the server closed the last one; the request measured against it opens one too), and
    turn 2 reuses it. Otherwise both reuse one warm connection (a client under load)."""
    async with httpx.AsyncClient() as http:
        probe = await send_request(http, sim.base_url, {"model": "sim", "input": text}, keep_response=True)
    calls = [i for i in (probe.response or {}).get("output", []) if i.get("type") == "function_call"]
    second_input = [{"role": "user", "content": text}]
    for call in calls:
        second_input.append({"type": "function_call", "call_id": call["call_id"], "name": call["name"],
                             "arguments": call["arguments"]})
    second_input += [{"type": "function_call_output", "call_id": c["call_id"], "output": f"slept {sleep_ms} ms"}
                     for c in calls]
    turns: dict[str, list[float]] = {"turn1": [], "turn2": []}

    async def both_turns(http: httpx.AsyncClient) -> None:
        for key, body in (("turn1", {"input": text}), ("turn2", {"input": second_input})):
            result = await send_request(http, sim.base_url, {**body, "model": "sim", "stream": True})
            if result.ok and result.e2e_s is not None:
                turns[key].append(result.e2e_s * 1000)

    async with httpx.AsyncClient() as warm:
        for _ in range(ctx.defs.agent_model_samples):
            if connect_first:
                async with httpx.AsyncClient() as fresh:
                    await both_turns(fresh)
            else:
                await both_turns(warm)
    out = {k: (s.p50 if (s := summarize(v)) else None) for k, v in turns.items()}
    out["tool_ms"] = sleep_ms
    out["connect_first"] = connect_first
    out["critical_path_ms"] = (None if None in (out["turn1"], out["turn2"])
                               else round(out["turn1"] + sleep_ms + out["turn2"], 2))  # type: ignore[operator]
    return out


async def breakdown(target: Target, e2e_by_id: dict[str, float], sleep_ms: int = SLEEP_MS) -> dict[str, Any]:
    """Where a Troupe response with tool calls spent its time, from its stored step traces: per
    response, the model calls, the tool window (first tool start to last tool end), the longest
    tool's time beyond its ``sleep_ms``, and the rest of the client's end to end; p50 of each
    over up to 5 responses."""
    parts: dict[str, list[float]] = {"model_calls_ms": [], "tool_window_ms": [], "tool_overhead_ms": [],
                                     "other_ms": []}
    async with httpx.AsyncClient() as http:
        for response_id, e2e_ms in list(e2e_by_id.items())[:5]:
            reply = await http.get(f"{target.base_url}/responses/{response_id}/step_traces", timeout=10)
            if reply.status_code != 200:
                continue
            traces = reply.json()
            tools = [t for t in traces if t["kind"] == "tool"]
            if not tools:
                continue
            model = sum(t["duration_s"] for t in traces if t["kind"] == "model") * 1000
            window = (max(t["started_at"] + t["duration_s"] for t in tools) - min(t["started_at"] for t in tools)) * 1000
            parts["model_calls_ms"].append(model)
            parts["tool_window_ms"].append(window)
            parts["tool_overhead_ms"].append(max(t["duration_s"] for t in tools) * 1000 - sleep_ms)
            parts["other_ms"].append(e2e_ms - model - window)
    return {k: (round(s.p50, 2) if (s := summarize(v)) else None) for k, v in parts.items()}


async def agent_loop(ctx: Ctx) -> dict[str, Any]:
    """3. Two model turns around four parallel server-side tool calls, against the critical path,
    on the main Troupe."""
    troupe, sim = ctx.target(MAIN), ctx.target("sim")
    if troupe is None or sim is None:
        return {"skipped": "Troupe or the sim server did not start"}
    ideal = await model_only(ctx, sim, ctx.defs.agent_input, SLEEP_MS)
    rows = []
    body = {"input": ctx.defs.agent_input, "stream": True}
    for level in ctx.defs.agent_levels:
        log(f"3 agent loop: {troupe.name} c={level.concurrency}")
        row = await measure(ctx, troupe, body, level, label=troupe.name)
        e2e = (row["summary"].get("e2e_ms") or {}).get("p50")
        row["vs_critical_path"] = _r(ratio(e2e, ideal["critical_path_ms"]))
        row["breakdown_p50"] = await breakdown(troupe, row["response_e2e_ms"])
        rows.append(row)
    return {"critical_path": ideal, "rows": rows,
            "peers": "not run: the peers have no server-side Python tools to run as the sleep tool"}


async def _session(http: httpx.AsyncClient, target: Target, mode: str, turns: int, text: str) -> list[dict[str, Any]]:
    """One conversation of ``turns`` turns; each turn's latencies (ms) or error."""
    out: list[dict[str, Any]] = []
    conversation = previous = None
    history: list[dict[str, Any]] = []
    if mode == "conversation":
        reply = await http.post(f"{target.base_url}/conversations", json={}, timeout=30)
        if reply.status_code != 200:
            return [{"turn": 1, "error": f"POST /conversations: HTTP {reply.status_code} {reply.text[:160]}"}]
        conversation = reply.json()["id"]
    for turn in range(1, turns + 1):
        message = {"role": "user", "content": text.format(turn=turn)}
        body: dict[str, Any] = {"model": target.model, "stream": True}
        if mode == "stateless":
            body["input"] = history + [message]
        else:
            body["input"] = [message]
            if conversation is not None:
                body["conversation"] = conversation
            if previous is not None:
                body["previous_response_id"] = previous
        result = await send_request(http, target.base_url, body, keep_response=True, timeout_s=60)
        if not result.ok:
            out.append({"turn": turn, "error": f"{result.error}: {(result.error_message or '')[:160]}"})
            break
        if mode == "chain":
            previous = result.response_id
        if mode == "stateless":
            answer = "".join(p.get("text", "") for item in (result.response or {}).get("output", [])
                             if item.get("type") == "message" for p in item.get("content", []))
            history += [message, {"role": "assistant", "content": answer}]
        out.append({"turn": turn, "e2e_ms": result.e2e_s * 1000 if result.e2e_s else None,
                    "ttft_ms": result.ttft_s * 1000 if result.ttft_s else None,
                    "input_tokens": (result.usage or {}).get("input_tokens")})
    return out


def _median3(turns: list[dict[str, Any]]) -> float | None:
    summary = summarize(t["e2e_p50_ms"] for t in turns if t["e2e_p50_ms"] is not None)
    return None if summary is None else _r(summary.p50)


async def history(ctx: Ctx) -> dict[str, Any]:
    """4. Latency per turn as history grows: a conversation and a previous_response_id chain on
    the main Troupe (and the peers), against the bare sim fed the whole history."""
    combos: list[tuple[Target, str]] = []
    if (sim := ctx.target("sim")) is not None:
        combos.append((sim, "stateless"))
    if (troupe := ctx.target(MAIN)) is not None:
        combos += [(troupe, "conversation"), (troupe, "chain")]
    combos += [(peer, mode) for peer in ctx.peers() for mode in ("conversation", "chain")]
    series = []
    for target, mode in combos:
        log(f"4 history: {target.name} {mode}")
        started = time.perf_counter()
        sessions: list[list[dict[str, Any]]] = []
        # The limit is cheap to measure: three rounds, so that one hiccup does not make its per-turn p50.
        for _ in range(3 if mode == "stateless" else 1):
            async with httpx.AsyncClient(limits=httpx.Limits(max_connections=ctx.defs.history_sessions)) as http:
                sessions += await asyncio.gather(*(
                    _session(http, target, mode, ctx.defs.history_turns, ctx.defs.history_input)
                    for _ in range(ctx.defs.history_sessions)
                ))
        errors = [t["error"] for s in sessions for t in s if "error" in t]
        per_turn = []
        for turn in range(1, ctx.defs.history_turns + 1):
            done = [t for s in sessions for t in s if t["turn"] == turn and "error" not in t]
            e2e, ttft = summarize(t["e2e_ms"] for t in done if t["e2e_ms"]), summarize(
                t["ttft_ms"] for t in done if t["ttft_ms"])
            per_turn.append({"turn": turn, "n": len(done), "e2e_p50_ms": _r(e2e.p50) if e2e else None,
                             "ttft_p50_ms": _r(ttft.p50) if ttft else None,
                             "input_tokens": max((t["input_tokens"] or 0 for t in done), default=None)})
        series.append({"target": target.name, "kind": target.kind, "mode": mode, "per_turn": per_turn,
                       "errors": errors[:3], "error_count": len(errors),
                       "wall_s": round(time.perf_counter() - started, 2)})
    limit = next((s for s in series if s["mode"] == "stateless"), None)
    for s in series:
        # Ends of the curve as medians of three turns, so that one slow turn does not decide them.
        s["first_turns_p50_ms"] = _median3(s["per_turn"][:3])
        s["last_turns_p50_ms"] = _median3(s["per_turn"][-3:])
        s["growth_last_over_first"] = _r(ratio(s["last_turns_p50_ms"], s["first_turns_p50_ms"]))
        if limit is not None:
            s["ratio_to_limit_per_turn"] = [
                _r(ratio(a["e2e_p50_ms"], b["e2e_p50_ms"])) for a, b in zip(s["per_turn"], limit["per_turn"], strict=True)
            ]
            s["last_turns_over_limit"] = _r(ratio(s["last_turns_p50_ms"], limit["last_turns_p50_ms"]))
    return {"series": series}
