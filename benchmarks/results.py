"""Write a run's results: ``<name>.json`` (everything), ``<name>.md`` (the tables), ``<name>.png``.

Every Troupe figure appears next to the bare sim server's (the physical limit, measured in
the same run) and as a ratio to it. "Troupe" is the run's main target (:func:`main_target`):
``troupe-replica`` (the replica placement) since it exists, ``troupe-pooled`` in older runs. With
a baseline (an earlier run's JSON, see :func:`compare`), the Markdown also gets a "Before/after"
section, each side read for its own main target.

Render a stored run again, optionally against a baseline, without running anything:

    .venv/bin/python -m benchmarks.results benchmarks/results/RUN.json [--baseline OTHER.json] > RUN.md
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from typing import Any

from troupe.bench.machine import describe_machine
from troupe.bench.report import fmt_ms

from .results_plot import plot_results
from .scenarios import MAIN, POOLED

__all__ = ["write_results", "render", "compare", "baseline_summary", "load_results", "pick_baseline", "target_checks",
           "main_target"]


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


FLOOR = "serve-floor"
"""The Serve floor's target name."""
LEGACY_MAIN = POOLED
"""The main Troupe target of the results from before the replica placement (and of their A/B)."""


def main_target(doc: Any) -> str:
    """The Troupe target a results document holds as *the* Troupe (its Headline, Targets table,
    scenarios 3, 4 and 7's tool runner, and its side of a before/after): the one it records
    (``main_target``), else :data:`~benchmarks.scenarios.MAIN` if it measured that, else
    ``troupe-pooled`` (a run from before the replica placement). Its proxied twin is
    ``<main>-proxy``."""
    if not isinstance(doc, dict):
        return LEGACY_MAIN
    if isinstance(recorded := doc.get("main_target"), str) and recorded:
        return recorded
    if isinstance(targets := doc.get("targets"), dict) and MAIN in targets:
        return MAIN
    sc = doc.get("scenarios") if isinstance(doc.get("scenarios"), dict) else {}
    if any(r.get("target") == MAIN for key in ("1_streaming", "2_throughput") for r in _rows_of(sc, key)):
        return MAIN
    return LEGACY_MAIN


def _x(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in rows)]


def _skipped(section: dict[str, Any]) -> list[str]:
    return [f"SKIPPED: {section['skipped']}", ""] if "skipped" in section else []


def _row(rows: list[dict[str, Any]], target: str, concurrency: int, **match: Any) -> dict[str, Any] | None:
    return next((r for r in rows if r["target"] == target and r["concurrency"] == concurrency
                 and all(r.get(k) == v for k, v in match.items())), None)


def _headline_concurrency(s2: list[dict[str, Any]]) -> int | None:
    """The concurrency of scenario 2 that the headline shows: 16, else the highest measured."""
    levels = {r.get("concurrency") for r in s2} - {None}
    return 16 if 16 in levels else max(levels, default=None)


def _headline(doc: dict[str, Any]) -> list[str]:
    sc = doc.get("scenarios", {})
    s1 = _get(sc, "1_streaming", "rows") or []
    s2 = _get(sc, "2_throughput", "rows") or []
    c2 = _headline_concurrency(s2)
    peers = [p for p, s in doc.get("peers", {}).items() if s.get("status") == "ok"]
    main = main_target(doc)
    proxied = f"{main}-proxy"
    # Troupe pooled beside the main target, when that is another app (runs since the replica placement).
    pooled = [POOLED] if main != POOLED and any(r.get("target") == POOLED for r in (*s1, *s2)) else []
    head = ["measure", "bare sim (limit)", "Serve floor", "Troupe", "Troupe ÷ limit", "Troupe via proxy",
            *(["Troupe pooled", "pooled ÷ limit"] if pooled else []), *peers]
    out = []
    for metric, label in (("ttft_ms", "TTFT p50"), ("e2e_ms", "E2E p50")):
        for c in sorted({r["concurrency"] for r in s1}):
            lim, tr = _row(s1, "sim", c), _row(s1, main, c)
            cells = [f"1 streaming {label} (ms), c={c}", fmt_ms(_get(lim, "summary", metric, "p50")),
                     fmt_ms(_get(_row(s1, FLOOR, c), "summary", metric, "p50")),
                     fmt_ms(_get(tr, "summary", metric, "p50")), _x(_get(tr, "ratios", f"{metric}_p50")),
                     fmt_ms(_get(_row(s1, proxied, c), "summary", metric, "p50"))]
            for p in pooled:
                other = _row(s1, p, c)
                cells += [fmt_ms(_get(other, "summary", metric, "p50")), _x(_get(other, "ratios", f"{metric}_p50"))]
            cells += [fmt_ms(_get(_row(s1, p, c), "summary", metric, "p50")) for p in peers]
            out.append(cells)
    if c2 is not None:
        for store in (True, False):
            lim, tr = _row(s2, "sim", c2), _row(s2, main, c2, store=store)
            via_proxy = _row(s2, proxied, c2, store=store)
            cells = [f"2 non-streaming resp/s, c={c2}, store={'on' if store else 'off'}",
                     fmt_ms(_get(lim, "summary", "throughput_rps")),
                     fmt_ms(_get(_row(s2, FLOOR, c2), "summary", "throughput_rps")),
                     fmt_ms(_get(tr, "summary", "throughput_rps")), _x(_get(tr, "ratios", "throughput")),
                     fmt_ms(_get(via_proxy, "summary", "throughput_rps"))]
            for p in pooled:
                other = _row(s2, p, c2, store=store)
                cells += [fmt_ms(_get(other, "summary", "throughput_rps")), _x(_get(other, "ratios", "throughput"))]
            cells += [fmt_ms(_get(_row(s2, p, c2), "summary", "throughput_rps")) if store else "–" for p in peers]
            out.append(cells)
    s3 = sc.get("3_agent_loop", {})
    for row in s3.get("rows", []):
        out.append([f"3 agent loop E2E p50 (ms), c={row['concurrency']}", f"{fmt_ms(_get(s3, 'critical_path', 'critical_path_ms'))} (critical path)",
                    "–", fmt_ms(_get(row, "summary", "e2e_ms", "p50")), _x(row.get("vs_critical_path")), "–",
                    *["–"] * (2 * len(pooled)), *["–"] * len(peers)])
    return _table(head, out)


def _s0(s: dict[str, Any]) -> list[str]:
    rows = [[r["loop"], str(r["concurrency"]), str(r["summary"]["requests"]),
             fmt_ms(_get(r, "summary", "client", "cpu_ms_per_request"), 2), fmt_ms(r.get("client_cpu_us_per_event")),
             fmt_ms(_get(r, "summary", "client", "cpu_share"), 2), fmt_ms(_get(r, "summary", "client", "loop_lag_ms", "p99"), 2),
             fmt_ms(_get(r, "summary", "e2e_ms", "p50"), 2)] for r in s.get("rows", [])]
    return _table(["event loop", "concurrency", "n", "client CPU/req (ms)", "client CPU/event (µs)",
                   "client CPU share (cores)", "loop lag p99 (ms)", "E2E p50 (ms)"], rows)


def _s1(s: dict[str, Any]) -> list[str]:
    rows = []
    for r in s.get("rows", []):
        sm = r["summary"]
        rows.append([str(r["concurrency"]), r["target"], str(sm["requests"]), str(sm["error_count"]),
                     *(fmt_ms(_get(sm, "ttft_ms", q)) for q in ("p50", "p90", "p99")),
                     *(fmt_ms(_get(sm, "e2e_ms", q)) for q in ("p50", "p90", "p99")),
                     fmt_ms(_get(sm, "itl_ms", "p50"), 2),
                     _x(_get(r, "ratios", "ttft_ms_p50")), _x(_get(r, "ratios", "ttft_ms_p99")),
                     _x(_get(r, "ratios", "e2e_ms_p50")), _x(_get(r, "ratios", "e2e_ms_p99")),
                     fmt_ms(r.get("server_cpu_ms_per_response")), _x(_get(r, "ratios", "cpu_per_response")),
                     fmt_ms(_get(sm, "client", "cpu_share"), 2)])
    return _table(["c", "target", "n", "err", "TTFT p50", "p90", "p99", "E2E p50", "p90", "p99", "ITL p50",
                   "TTFT p50 ÷ limit", "TTFT p99 ÷ limit", "E2E p50 ÷ limit", "E2E p99 ÷ limit",
                   "server CPU/resp (ms)", "÷ limit", "client CPU (cores)"], rows)


def _s2(s: dict[str, Any]) -> list[str]:
    rows = []
    for r in s.get("rows", []):
        sm = r["summary"]
        rows.append([str(r["concurrency"]), r["label"], str(sm["requests"]), str(sm["error_count"]),
                     fmt_ms(sm.get("throughput_rps")), _x(_get(r, "ratios", "throughput")),
                     fmt_ms(_get(sm, "e2e_ms", "p50")), fmt_ms(_get(sm, "e2e_ms", "p99")),
                     fmt_ms(r.get("server_cpu_ms_per_response")), _x(_get(r, "ratios", "cpu_per_response")),
                     fmt_ms(r.get("sim_cpu_ms_per_response"))])
    return _table(["c", "target", "n", "err", "resp/s", "÷ limit", "E2E p50", "E2E p99", "server CPU/resp (ms)",
                   "÷ limit", "sim CPU/resp (ms)"], rows)


def _s3(s: dict[str, Any]) -> list[str]:
    cp = s.get("critical_path", {})
    out = [f"Critical path, measured on the bare sim: model turn 1 {fmt_ms(cp.get('turn1'))} ms + longest tool "
           f"{cp.get('tool_ms')} ms + model turn 2 {fmt_ms(cp.get('turn2'))} ms = **{fmt_ms(cp.get('critical_path_ms'))} ms**.", ""]
    rows = []
    for r in s.get("rows", []):
        sm, b = r["summary"], r.get("breakdown_p50", {})
        rows.append([str(r["concurrency"]), str(sm["requests"]), str(sm["error_count"]),
                     fmt_ms(_get(sm, "e2e_ms", "p50")), fmt_ms(_get(sm, "e2e_ms", "p99")), _x(r.get("vs_critical_path")),
                     fmt_ms(b.get("model_calls_ms")), fmt_ms(b.get("tool_window_ms")), fmt_ms(b.get("tool_overhead_ms")),
                     fmt_ms(b.get("other_ms"))])
    out += _table(["c", "n", "err", "E2E p50", "E2E p99", "÷ critical path", "model calls (traces)",
                   "tool window (traces)", "tool overhead beyond 200 ms", "rest (ingress, hops, storage)"], rows)
    out += ["", "The last four columns are p50s over up to 5 responses of the row, each computed per response "
            "from its stored step traces (the rest: the client's end to end minus model calls and tool window)."]
    if s.get("peers"):
        out += ["", f"Peers: {s['peers']}."]
    return out


def _s4(s: dict[str, Any]) -> list[str]:
    series_list = s.get("series", [])
    n = max((len(x["per_turn"]) for x in series_list), default=0)
    shown = sorted({t for t in (1, 5, 10, n) if 1 <= t <= n})
    rows = []
    for series in series_list:
        by_turn = {t["turn"]: t for t in series["per_turn"]}
        ratios = series.get("ratio_to_limit_per_turn") or []
        rows.append([series["target"], series["mode"],
                     *(fmt_ms(_get(by_turn.get(t), "e2e_p50_ms")) for t in shown),
                     _x(series.get("growth_last_over_first")), _x(ratios[0] if ratios else None),
                     _x(series.get("last_turns_over_limit")), str(series["error_count"]),
                     (series["errors"][0][:100].replace("|", "/") if series["errors"] else "")])
    out = _table(["target", "mode", *(f"turn {t} E2E p50" for t in shown), "last 3 ÷ first 3 turns",
                  "turn 1 ÷ limit", "last 3 turns ÷ limit", "errors", "first error"], rows)
    return out + ["", "The ends of each curve are medians of three turns' p50s; the limit's sessions ran three "
                      "times over, so that one hiccup of the shared machine does not decide a ratio."]


_PLACEMENTS = ("replica", "pooled", "dedicated")
"""Scenario 5's placements, in the order shown (runs from before the replica placement lack it)."""


def _s5(s: dict[str, Any]) -> list[str]:
    rows = []
    for name in (n for n in _PLACEMENTS if n in s):
        p = s.get(name) or {}
        if "skipped" in p:
            rows.append([name, f"SKIPPED: {p['skipped']}", *[""] * 7])
            continue
        rows.append([name, str(p.get("conversations_measured")), fmt_ms(_get(p, "first_turn_ms", "p50")),
                     fmt_ms(_get(p, "first_turn_ms", "p99")), fmt_ms(_get(p, "warm_turn_ms", "p50")),
                     (fmt_ms(p.get("memory_per_conversation_mib"), 2) if p.get("estimated_max_live")
                      else "below resolution"),
                     str(p.get("estimated_max_live") or "no per-process ceiling"), p.get("stopped_because", ""),
                     str(p.get("wall_s"))])
    out = _table(["placement", "live conversations measured", "first turn p50 (ms)", "first turn p99",
                  "warm turn p50", "memory per conversation (MiB PSS)", "estimated most live conversations",
                  "stopped because", "seconds"], rows)
    for name in _PLACEMENTS:
        if (s.get(name) or {}).get("estimate_basis"):
            out += ["", f"{name}: {s[name]['estimate_basis']}."]
    return out


def _s6(s: dict[str, Any]) -> list[str]:
    rows = [[r["way"], str(r["concurrency"]), str(r["calls"]), str(r["errors"]),
             fmt_ms(_get(r, "latency_ms", "p50"), 2), fmt_ms(_get(r, "latency_ms", "p99"), 2),
             fmt_ms(r.get("calls_per_s"))] for r in s.get("rows", [])]
    out = _table(["way", "concurrency", "calls", "errors", "latency p50 (ms)", "p99", "calls/s"], rows)
    if s.get("actor_first_call_ms") is not None:
        out += ["", f"The connection actor's first call (actor start + session open): {fmt_ms(s['actor_first_call_ms'])} ms."]
    return out


def _sp(s: dict[str, Any]) -> list[str]:
    out = [f"Tool: {s.get('tool')}. Shares are of all samples of that role's processes; `native` is samples "
           "with no Python frame on top (Ray's C++ core, a wait for the GIL, uvloop calling back into Python): "
           "py-spy's, not CPU time outside Python. The line under each table splits the ingress replica's "
           "on-CPU time by the code it ran (`perf record`), where perf may sample it.", ""]
    for load in s.get("loads", []):
        out += [f"**{load['load']}** ({load['responses']} responses in {load['seconds']:.0f} s)", ""]
        rows = []
        for role, r in load["roles"].items():
            hot = "; ".join(f"{pct}% {frame}" for pct, frame in r["troupe_cumulative"][:4])
            leaf = "; ".join(f"{pct}% {frame}" for pct, frame in r["self"][:3])
            rows.append([role, str(r["processes"]), fmt_ms(r["cpu_ms_per_response"], 2), str(r["native_pct"]),
                         hot.replace("|", "/"), leaf.replace("|", "/")])
        out += _table(["role", "processes", "CPU/resp (ms)", "native %", "hottest Troupe frames (cumulative)",
                       "hottest leaf frames (self)"], rows)
        by_code = load.get("replica_by_code")
        if by_code:
            out += ["", "The ingress replica's CPU by code (perf): "
                    + ", ".join(f"{group} {pct}%" for group, pct in by_code.items()) + "."]
        out.append("")
    return out


def _s7(s: dict[str, Any]) -> list[str]:
    cp = s.get("critical_path", {})
    connect = (" (turn 1 on a new connection, as each request to Troupe opens one; turn 2 reusing it)"
               if cp.get("connect_first") else "")
    out = [f"Critical path, measured on the bare sim: model turn 1 {fmt_ms(cp.get('turn1'))} ms + longest tool "
           f"{cp.get('tool_ms')} ms + model turn 2 {fmt_ms(cp.get('turn2'))} ms = **{fmt_ms(cp.get('critical_path_ms'))} "
           f"ms**{connect}. Over: E2E − critical path (ms).", ""]
    rows = []
    for r in s.get("rows", []):
        first, gap = r.get("first") or {}, r.get("after_gap") or {}
        b = gap.get("breakdown_p50") or {}
        errors = [first["error"]] if "error" in first else []
        errors += gap.get("errors") or []
        rows.append([r["target"], r.get("placement") or "pooled", r["tool_runner"], fmt_ms(first.get("e2e_ms")),
                     fmt_ms(first.get("over_critical_path_ms")),
                     str(gap.get("n")), fmt_ms(_get(gap, "e2e_ms", "p50")), fmt_ms(_get(gap, "e2e_ms", "max")),
                     fmt_ms(gap.get("over_critical_path_ms")), fmt_ms(b.get("model_calls_ms")),
                     fmt_ms(b.get("tool_window_ms")), fmt_ms(b.get("tool_overhead_ms")),
                     (errors[0][:100].replace("|", "/") if errors else "")])
    out += _table(["target", "placement", "tool runner", "first request E2E", "over", f"n after {s.get('gap_s', '?')} s idle",
                   "E2E p50", "E2E max", "over (p50)", "model calls (traces)", "tool window (traces)",
                   "longest tool beyond its sleep", "first error"], rows)
    return out + ["", "The first request is each app's first after Troupe said it was ready, sent before any other "
                      "scenario; the trace columns are p50s over the idle-gap requests (see scenario 3)."]


# -- the targets: each figure the issue sets a bound for, against that bound ---------------


def _bound(limit: float | None, rule: str, amount: float) -> float | None:
    if rule == "≤":
        return amount
    if limit is None:
        return None
    return limit + amount if rule == "≤ +" else limit * amount


def _check(measure: str, troupe: Any, limit: Any, floor: Any, rule: str, amount: float, target: str) -> dict[str, Any]:
    """One target row: the figures, Troupe ÷ limit and Troupe − limit, the bound and whether it is met."""
    troupe, limit, floor = _num(troupe), _num(limit), _num(floor)
    bound = _bound(limit, rule, amount)
    met = None if troupe is None or bound is None else (troupe >= bound if rule == "≥ ×" else troupe <= bound)
    ratio, over = _div(troupe, limit), None if troupe is None or limit is None else troupe - limit
    return {"measure": measure, "limit": limit, "floor": floor, "troupe": troupe,
            "ratio": None if ratio is None else round(ratio, 3), "over": None if over is None else round(over, 3),
            "target": target, "bound": None if bound is None else round(bound, 3), "met": met}


def _tool_figures(sc: dict[str, Any], main: str) -> tuple[dict[str, Any] | None, float | None]:
    """Scenario 7's row of the main app ``main`` (the tool runner) and the critical path."""
    rows = _rows_of(sc, "7_idle_tools")
    return (next((r for r in rows if r.get("target") == main), None),
            _num(_get(sc, "7_idle_tools", "critical_path", "critical_path_ms")))


def _idle_figures(doc: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    """CPU at rest (cores): the bare sim's, the Serve floor replica's, and that of Troupe's Ray
    instance without the floor's replica."""
    cores = doc.get("idle_cpu_cores") if isinstance(doc.get("idle_cpu_cores"), dict) else {}
    by_role = _get(doc, "idle_cpu_by_process", "troupe")
    floor = (sum(v for k, v in by_role.items() if f"ServeReplica:{FLOOR}:" in k and _num(v) is not None)
             if isinstance(by_role, dict) else None)
    troupe = _num(cores.get("troupe"))
    return _num(cores.get("sim")), floor, None if troupe is None else round(troupe - (floor or 0.0), 4)


def target_checks(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The run against the issue's targets, each a ratio to (or an offset from) what the bare
    sim did in the same run; for the tool rounds, the critical path. Each row: ``measure``,
    ``limit``, ``floor`` (the Serve floor's figure, None where it has none), ``troupe`` (the
    run's main target, :func:`main_target`, direct), ``ratio`` (Troupe ÷ limit), ``over``
    (Troupe − limit), ``target`` (the rule as text), ``bound`` (the figure the rule allows) and
    ``met`` (None: not measured)."""
    sc = doc.get("scenarios") if isinstance(doc.get("scenarios"), dict) else {}
    s1, s2 = _rows_of(sc, "1_streaming"), _rows_of(sc, "2_throughput")
    main = main_target(doc)

    def fig(rows: list[dict[str, Any]], target: str, c: int, *path: str, **match: Any) -> Any:
        return _get(_find(rows, target, c, **match), *path)

    def s1_check(measure: str, c: int, path: tuple[str, ...], rule: str, amount: float, text: str) -> dict[str, Any]:
        return _check(measure, fig(s1, main, c, *path), fig(s1, "sim", c, *path),
                      fig(s1, FLOOR, c, *path), rule, amount, text)

    e2e, rps = ("summary", "e2e_ms", "p50"), ("summary", "throughput_rps")
    tools, critical_path = _tool_figures(sc, main)
    idle_sim, idle_floor, idle_troupe = _idle_figures(doc)
    return [
        _check("2 non-streaming E2E p50 (ms), c=1, store on", fig(s2, main, 1, *e2e, store=True),
               fig(s2, "sim", 1, *e2e), fig(s2, FLOOR, 1, *e2e), "≤ +", 6, "≤ limit + 6 ms"),
        _check("2 non-streaming resp/s, c=16, store on", fig(s2, main, 16, *rps, store=True),
               fig(s2, "sim", 16, *rps), fig(s2, FLOOR, 16, *rps), "≥ ×", 0.5, "≥ 0.5× limit"),
        s1_check("1 streaming TTFT p50 (ms), c=16", 16, ("summary", "ttft_ms", "p50"), "≤ +", 15, "≤ limit + 15 ms"),
        s1_check("1 streaming E2E p50 (ms), c=16", 16, e2e, "≤ ×", 1.05, "≤ 1.05× limit"),
        s1_check("1 streaming E2E p50 (ms), c=64", 64, e2e, "≤ ×", 1.3, "≤ 1.3× limit"),
        s1_check("1 server CPU per streamed 64-token response (ms), c=16", 16, ("server_cpu_ms_per_response",),
                 "≤ ×", 4, "≤ 4× limit"),
        _check("7 four parallel 400 ms tools, 5 s after the previous request, E2E p50 (ms)",
               _get(tools, "after_gap", "e2e_ms", "p50"), critical_path, None, "≤ +", 30, "≤ critical path + 30 ms"),
        _check("7 the same, first request after start, E2E (ms)", _get(tools, "first", "e2e_ms"), critical_path,
               None, "≤ +", 100, "≤ critical path + 100 ms"),
        _check("Troupe idle CPU (cores)", idle_troupe, idle_sim, idle_floor, "≤", 0.02, "≤ 0.02 cores"),
    ]


def _met(met: bool | None) -> str:
    return "–" if met is None else "yes" if met else "**no**"


def _targets(doc: dict[str, Any]) -> list[str]:
    rows = []
    for r in target_checks(doc):
        digits = 3 if "cores" in r["measure"] else 1
        rows.append([r["measure"], *(fmt_ms(r[k], digits) for k in ("limit", "floor", "troupe")), _x(r["ratio"]),
                     fmt_ms(r["over"], digits), r["target"], _met(r["met"])])
    out = _table(["measure", "limit", "Serve floor", "Troupe", "Troupe ÷ limit", "Troupe − limit", "target", "met"],
                 rows)
    idle = _get(doc, "idle_cpu_by_process", "troupe") or {}
    busiest = ", ".join(f"{k} {v:.3f}" for k, v in list(idle.items())[:6]) if isinstance(idle, dict) else ""
    return out + ["", f"Troupe is `{main_target(doc)}` at its replica's own port (direct ingress). The limit is the "
                      "bare sim measured in the same run; for the tool rounds, the critical path (scenario 7); for idle "
                      "CPU, the bare sim's own. Troupe's idle CPU is its whole Ray instance at rest (Ray's daemons, "
                      "Serve's controller and proxy, every Troupe app of the benchmark server) without the Serve "
                      "floor's replica: more than one `troupe serve` runs."
                  + (f" Its busiest processes at rest (cores): {busiest}." if busiest else "")]


# -- before/after against a baseline run ---------------------------------------------------


def _rows_of(sc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    rows = _get(sc, key, "rows")
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def _find(rows: list[dict[str, Any]], target: str, concurrency: int, **match: Any) -> dict[str, Any] | None:
    return next((r for r in rows if r.get("target") == target and r.get("concurrency") == concurrency
                 and all(r.get(k) == v for k, v in match.items())), None)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _measures(doc: dict[str, Any]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The measures of one run that a before/after compares, in display order: the Headline's
    Troupe rows, then server CPU per response (scenario 1 per c, scenario 2 per c and store).
    Each: label, which direction is better, Troupe's value, the limit's and Troupe ÷ limit.
    Troupe is the run's own main target (:func:`main_target`)."""
    sc = doc.get("scenarios")
    sc = sc if isinstance(sc, dict) else {}
    s1, s2 = _rows_of(sc, "1_streaming"), _rows_of(sc, "2_throughput")
    main = main_target(doc)
    found: dict[tuple[Any, ...], dict[str, Any]] = {}

    def put(key: tuple[Any, ...], group: str, measure: str, better: str, troupe: dict[str, Any] | None,
            value: Any, limit: Any, ratio: Any) -> None:
        if troupe is None:
            return
        value, limit = _num(value), _num(limit)
        ratio = _num(ratio)
        if ratio is None and (computed := _div(value, limit)) is not None:
            ratio = round(computed, 3)
        found[key] = {"group": group, "measure": measure, "better": better, "value": value, "limit": limit,
                      "ratio": ratio}

    levels1 = sorted({r.get("concurrency") for r in s1} - {None})
    for metric, label in (("ttft_ms", "TTFT p50"), ("e2e_ms", "E2E p50")):
        for c in levels1:
            lim, tr = _find(s1, "sim", c), _find(s1, main, c)
            put(("1", metric, c), "headline", f"1 streaming {label} (ms), c={c}", "lower", tr,
                _get(tr, "summary", metric, "p50"), _get(lim, "summary", metric, "p50"),
                _get(tr, "ratios", f"{metric}_p50"))
    if (c2 := _headline_concurrency(s2)) is not None:
        for store in (True, False):
            lim, tr = _find(s2, "sim", c2), _find(s2, main, c2, store=store)
            put(("2", c2, store), "headline", f"2 non-streaming resp/s, c={c2}, store={'on' if store else 'off'}",
                "higher", tr, _get(tr, "summary", "throughput_rps"), _get(lim, "summary", "throughput_rps"),
                _get(tr, "ratios", "throughput"))
    critical_path = _get(sc, "3_agent_loop", "critical_path", "critical_path_ms")
    for row in _rows_of(sc, "3_agent_loop"):
        c = row.get("concurrency")
        put(("3", c), "headline", f"3 agent loop E2E p50 (ms), c={c}", "lower", row,
            _get(row, "summary", "e2e_ms", "p50"), critical_path, row.get("vs_critical_path"))
    tools, tools_path = _tool_figures(sc, main)
    for key, label, path in (("gap", "after an idle gap, E2E p50", ("after_gap", "e2e_ms", "p50")),
                             ("first", "first request after start, E2E", ("first", "e2e_ms"))):
        put(("7", key), "headline", f"7 four parallel tools {label} (ms)", "lower", tools, _get(tools, *path),
            tools_path, None)
    for c in levels1:
        lim, tr = _find(s1, "sim", c), _find(s1, main, c)
        put(("cpu", "1", c), "cpu", f"1 streaming, c={c}", "lower", tr, _get(tr, "server_cpu_ms_per_response"),
            _get(lim, "server_cpu_ms_per_response"), None)
    for c in sorted({r.get("concurrency") for r in s2} - {None}):
        for store in (True, False):
            lim, tr = _find(s2, "sim", c), _find(s2, main, c, store=store)
            put(("cpu", "2", c, store), "cpu", f"2 non-streaming, c={c}, store={'on' if store else 'off'}", "lower",
                tr, _get(tr, "server_cpu_ms_per_response"), _get(lim, "server_cpu_ms_per_response"),
                _get(tr, "ratios", "cpu_per_response"))
    return found


def compare(baseline: dict[str, Any], current: dict[str, Any]) -> list[dict[str, Any]]:
    """Before/after rows: one per measure of ``current`` (the Headline's Troupe rows, then server
    CPU per response of scenarios 1 and 2), with the baseline's figures where it has them. Each
    side's Troupe is its own main target (:func:`main_target`): a run from before the replica
    placement is compared through ``troupe-pooled``.

    Each row: ``group`` (``headline`` or ``cpu``), ``measure``, ``better`` (``lower`` or
    ``higher``), ``before``/``after`` (Troupe), ``limit_before``/``limit_after`` (the bare sim,
    or the agent loop's critical path), ``ratio_before``/``ratio_after`` (Troupe ÷ limit), and
    ``change``/``ratio_change``: after ÷ before − 1 (−0.35: 35 % lower). A figure that a run
    lacks is None; a measure that neither run has a value for is left out.
    """
    before = _measures(baseline if isinstance(baseline, dict) else {})
    rows = []
    for key, now in _measures(current if isinstance(current, dict) else {}).items():
        then = before.get(key, {})
        if now["value"] is None and then.get("value") is None:
            continue
        change, ratio_change = _div(now["value"], then.get("value")), _div(now["ratio"], then.get("ratio"))
        rows.append({
            "group": now["group"], "measure": now["measure"], "better": now["better"],
            "before": then.get("value"), "after": now["value"],
            "change": None if change is None else round(change - 1, 4),
            "limit_before": then.get("limit"), "limit_after": now["limit"],
            "ratio_before": then.get("ratio"), "ratio_after": now["ratio"],
            "ratio_change": None if ratio_change is None else round(ratio_change - 1, 4),
        })
    return rows


def _load_averages(doc: dict[str, Any]) -> dict[str, Any]:
    machine = doc.get("machine") if isinstance(doc.get("machine"), dict) else {}
    scenarios = doc.get("scenarios") if isinstance(doc.get("scenarios"), dict) else {}
    return {"before_scenarios": machine.get("load_average_before_scenarios") or machine.get("load_average"),
            **{key: _get(scenarios, key, "load_average_at_start")
               for key in ("1_streaming", "2_throughput", "3_agent_loop")}}


def baseline_summary(baseline: dict[str, Any], current: dict[str, Any], path: str, picked: str) -> dict[str, Any]:
    """What a results JSON records of its baseline: where it is, its commit, date, machine load,
    the Troupe target each side compares (``target``: the baseline's main target, ``current_target``:
    this run's) and the before/after rows of :func:`compare`. ``picked``: ``auto`` or ``given``."""
    machine = baseline.get("machine") if isinstance(baseline.get("machine"), dict) else {}
    # As JSON holds them: a run's own definitions are tuples in memory, its baseline's lists.
    defs_then, defs_now = (json.loads(json.dumps(doc.get("definitions") or {})) for doc in (baseline, current))
    return {
        "path": path, "picked": picked, "commit": baseline.get("commit"), "created_at": baseline.get("created_at"),
        "target": main_target(baseline), "current_target": main_target(current),
        "worktree_dirty": baseline.get("worktree_dirty"), "quick": baseline.get("quick"),
        "machine": {k: machine.get(k) for k in ("cpu_model", "cores")},
        "load_average": _load_averages(baseline),
        "definitions_differ": sorted(k for k in set(defs_then) | set(defs_now) if defs_then.get(k) != defs_now.get(k)),
        "rows": compare(baseline, current),
    }


_DESCRIBED = {MAIN: "the replica placement", POOLED: "pooled host actors"}
"""How the Markdown names a main target's placement."""


def _change(change: float | None, better: str) -> str:
    """``−35% (better)``: after ÷ before − 1, and whether that is the good direction."""
    if change is None:
        return "–"
    pct = round(change * 100)
    if pct == 0:
        return "±0%"
    good = (pct < 0) == (better == "lower")
    return f"{'+' if pct > 0 else '−'}{abs(pct):,}% ({'better' if good else 'worse'})"


def _loads(value: Any) -> str:
    return "/".join(f"{v:g}" for v in value) if isinstance(value, list) and value else "–"


def _before_after(doc: dict[str, Any]) -> list[str]:
    base = doc["baseline"]
    how = ("the newest results in benchmarks/results of another commit" if base.get("picked") == "auto"
           else "given with --baseline")
    dirty = " (worktree dirty)" if base.get("worktree_dirty") else ""
    now_dirty = " (worktree dirty)" if doc.get("worktree_dirty") else ""
    then_load, now_load = base.get("load_average") or {}, _load_averages(doc)
    out = [f"Baseline: `{base.get('path')}` ({how}), commit `{base.get('commit')}`{dirty}, run "
           f"{str(base.get('created_at') or '?').replace('T', ' ').replace('Z', ' UTC')}; this run: commit "
           f"`{doc.get('commit')}`{now_dirty}, {str(doc.get('created_at') or '?').replace('T', ' ').replace('Z', ' UTC')}.",
           "",
           f"- Load average (1/5/15 min, {(doc.get('machine') or {}).get('cores')} cores), baseline → this run: "
           + "; ".join(f"{where} {_loads(then_load.get(k))} → {_loads(now_load.get(k))}" for k, where in (
               ("before_scenarios", "before the scenarios"), ("1_streaming", "scenario 1 start"),
               ("2_throughput", "scenario 2 start"), ("3_agent_loop", "scenario 3 start"))) + "."]
    # A baseline summary stored before it recorded the targets compared troupe-pooled on both sides.
    then_target, now_target = base.get("target") or LEGACY_MAIN, base.get("current_target") or LEGACY_MAIN
    if then_target == now_target:
        out.append(f"- Troupe is `{then_target}` in both runs.")
    else:
        out.append(f"- Not the same Troupe: the baseline's is `{then_target}`, this run's `{now_target}` "
                   f"({_DESCRIBED.get(then_target, then_target)} → {_DESCRIBED.get(now_target, now_target)}): every "
                   "change below includes the change of target.")
    if bool(base.get("quick")) != bool(doc.get("quick")):
        out.append(f"- Not like for like: {'the baseline' if base.get('quick') else 'this run'} is a quick run "
                   "(smaller counts).")
    machine = doc.get("machine") or {}
    then_machine = base.get("machine") or {}
    if any(then_machine.get(k) is not None and then_machine.get(k) != machine.get(k) for k in ("cpu_model", "cores")):
        out.append(f"- Another machine: baseline {then_machine.get('cpu_model')}, {then_machine.get('cores')} cores.")
    if base.get("definitions_differ"):
        out.append("- Scenario parameters that differ from the baseline's: "
                   + ", ".join(f"`{k}`" for k in base["definitions_differ"]) + ".")
    out += ["", "Change is this run ÷ baseline − 1 (`−35%`: 35 % lower), marked better or worse by the `better` "
            "column (lower for latency and CPU, higher for responses per second). The limit (the bare sim; for the "
            "agent loop, the critical path measured on it) is re-measured in every run, so on a shared machine the "
            "`÷ limit` columns are the fairer comparison. `–`: not measured in that run.", ""]
    head = ["measure", "better", f"Troupe (`{then_target}`), baseline", f"Troupe (`{now_target}`), this run", "change",
            "limit, baseline", "limit, this run", "÷ limit, baseline", "÷ limit, this run", "÷ limit change"]

    def cells(r: dict[str, Any]) -> list[str]:
        return [r["measure"], r["better"], fmt_ms(r["before"]), fmt_ms(r["after"]), _change(r["change"], r["better"]),
                fmt_ms(r["limit_before"]), fmt_ms(r["limit_after"]), _x(r["ratio_before"]), _x(r["ratio_after"]),
                _change(r["ratio_change"], r["better"])]

    rows = base.get("rows") or []
    headline = [cells(r) for r in rows if r.get("group") == "headline"]
    cpu = [cells(r) for r in rows if r.get("group") == "cpu"]
    out += _table(head, headline) if headline else ["No headline measure of this run was measured."]
    out += ["", "**Server CPU per response (ms)**: Troupe's whole process tree (Ray and all its workers), net of its "
            "CPU at rest; the limit is the bare sim's own CPU per response under the same load.", ""]
    out += _table(["load", *head[1:]], cpu) if cpu else ["Not measured in this run."]
    return out


def render(doc: dict[str, Any], png_name: str | None = None) -> str:
    """The results as Markdown."""
    sc = doc.get("scenarios", {})
    defs = doc.get("definitions", {})
    main = main_target(doc)
    if main == POOLED:  # a run from before the replica placement
        troupe = ("**Troupe** (`troupe-pooled`) is the pooled app at its replica's own port, as `troupe serve` served "
                  "then (direct ingress); **Troupe via proxy** (`troupe-pooled-proxy`) is the same app through Serve's "
                  "proxy.")
    else:
        troupe = (f"**Troupe** (`{main}`) is the app with the replica placement (conversations hosted inside its one "
                  "ingress replica: no Ray hop per streamed batch) at its replica's own port, as `troupe serve` serves "
                  f"by default (direct ingress); **Troupe via proxy** (`{main}-proxy`) is the same app through Serve's "
                  f"proxy; **Troupe pooled** (`{POOLED}`, scenarios 1 and 2) hosts conversations on pooled host actors "
                  "(a Ray hop per streamed batch), direct, for comparison.")
    lines = [
        f"# Troupe benchmarks, {doc['created_at'][:10]}, commit `{doc['commit']}`" + (" (quick)" if doc.get("quick") else ""),
        "",
        f"- Machine: {describe_machine(doc['machine'])}.",
        f"- Reproduce: `{doc.get('command')}` (this run: {doc.get('wall_s')} s in all).",
        "- Every server ran on 127.0.0.1 on this one machine, sharing its cores with the load generator; the "
        "**bare sim server** (`troupe sim`'s stateless `/v1/responses`, same wire protocol, no gateway) is the "
        "physical limit, measured in the same run, and `÷ limit` is each figure over the limit's.",
        "- The **Serve floor** (`serve-floor`) is the same sim app as the ingress of one Ray Serve replica in "
        "Troupe's Ray instance, reached at the replica's own port: what Serve alone costs. " + troupe,
        "- Request counts are modest so that a full run takes minutes (each table gives n): percentiles, p99 "
        "above all, are indicative. Latencies in milliseconds.",
    ]
    for peer, status in doc.get("peers", {}).items():
        state = (f"version {status.get('version')}, {status.get('how')}" if status.get("status") == "ok"
                 else f"SKIPPED: {status.get('reason')}")
        lines.append(f"- Peer {peer}: {state}.")
    idle = doc.get("idle_cpu_cores") or {}
    if idle:
        lines.append("- CPU at rest (cores), subtracted from every server CPU figure: "
                     + ", ".join(f"{k} {v:.3f}" for k, v in idle.items()) + ".")
    if png_name:
        lines += ["", f"![charts]({png_name})"]
    lines += ["", "## Headline", "", *_headline(doc), "", "## Targets", "", *_targets(doc)]
    if doc.get("baseline"):
        lines += ["", "## Before/after", "", *_before_after(doc)]
    profiled = _get(sc, "profile", "target") or LEGACY_MAIN  # a profile from before it recorded its target: pooled
    placements = [n for n in _PLACEMENTS if n in (sc.get("5_placement") or {})] or list(_PLACEMENTS)
    sections = [
        ("0_client_overhead", "0. The load generator's own overhead",
         f"`troupe bench` against the bare sim, `{defs.get('overhead_input')}` streamed (one network read per "
         "event, the client's worst case); the same load on the standard asyncio loop (before) and on uvloop "
         "(after: `troupe bench` uses it when installed). E2E includes the sim's own 320 ms of pacing.", _s0),
        ("1_streaming", "1. Single-turn streaming text",
         f"Input `{defs.get('streaming_input')}`: sim time to first token 50 ms, 10 ms per token, 64 tokens.", _s1),
        ("2_throughput", "2. Non-streaming throughput",
         f"Zero-latency sim, `{defs.get('throughput_input')}`; server CPU is the target's own process tree "
         "(Troupe: Ray and all its workers), the sim's is shown apart.", _s2),
        ("profile", "P. Profile of Troupe under load",
         f"py-spy attached to Troupe's processes while `{profiled}` serves scenario 1's streaming load and "
         "scenario 2's store-on load, at concurrency 16.", _sp),
        ("3_agent_loop", "3. Agent loop",
         "Two model turns (50 ms to first token, 10 ms per token) around four parallel server-side `sleep` "
         f"calls of 200 ms, streamed; `{main}` (tools in the node's tool runner).", _s3),
        ("4_history", f"4. History growth ({defs.get('history_turns')} turns)",
         f"{defs.get('history_sessions')} sessions side by side, zero-latency sim, streamed. The limit is the bare "
         "sim fed the whole history statelessly by the client.", _s4),
        ("5_placement", f"5. Placement: {' vs '.join(placements)}",
         "New conversations one after another (a first turn each), all kept live; memory is the PSS of Troupe's "
         "process tree. Bounded by a cap and a memory budget.", _s5),
        ("6_mcp", "6. MCP: connection actor vs a session per call",
         "An `add` tool on a local streamable-HTTP MCP server, through `RayMcpClient` (the long-lived connection "
         "actor), `LocalMcpClient` (the same kept-open session in-process) and a fresh `McpSession` per call.", _s6),
        ("7_idle_tools", "7. Tools after an idle gap",
         f"`{defs.get('idle_tools_input')}` (four parallel 400 ms `sleep` calls, zero-latency sim, streamed), "
         f"{defs.get('idle_tools_gap_s')} s after the previous request and on the first request after start; "
         f"`{main}` with tools in the node's tool runner (the default) and `troupe-pooled-task` (pooled host actors) "
         "with a Ray task per call.", _s7),
    ]
    for key, title, intro, render_section in sections:
        section = sc.get(key)
        lines += ["", f"## {title}", ""]
        if section is None:
            lines.append("Not run.")
            continue
        load = section.get("load_average_at_start")
        where = f" (load average {'/'.join(f'{v:g}' for v in load)} when it started)" if load else ""
        lines += [intro + where, "", *_skipped(section)]
        if "skipped" not in section:
            lines += render_section(section)
    for note in doc.get("notes", []):
        lines += ["", note]
    return "\n".join(lines) + "\n"


def write_results(doc: dict[str, Any], out_dir: str, name: str) -> list[str]:
    """Write ``name.json``, ``name.md`` and ``name.png`` into ``out_dir``; their paths."""
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, name)
    paths = []
    try:
        paths.append(plot_results(doc, base + ".png"))
    except Exception as exc:  # noqa: BLE001 - the tables matter more than the chart
        doc.setdefault("notes", []).append(f"The chart could not be drawn: {type(exc).__name__}: {exc}")
    with open(base + ".json", "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    with open(base + ".md", "w", encoding="utf-8") as f:
        f.write(render(doc, os.path.basename(base + ".png") if paths else None))
    return [base + ".json", base + ".md", *paths]


def load_results(path: str) -> dict[str, Any]:
    """A results JSON of :func:`write_results`; ValueError if it is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("troupe-benchmarks/"):
        raise ValueError(f"{path} is not a benchmarks results JSON (no troupe-benchmarks schema)")
    return doc


def pick_baseline(results_dir: str, commit: str) -> str | None:
    """The newest (by ``created_at``) full run in ``results_dir`` of a commit other than
    ``commit``; None if there is none. Unreadable files and quick runs are passed over."""
    best: tuple[str, str] | None = None
    for path in glob.glob(os.path.join(results_dir, "*.json")):
        try:
            doc = load_results(path)
        except ValueError:
            continue
        if doc.get("quick") or doc.get("commit") == commit:
            continue
        key = (str(doc.get("created_at") or ""), path)
        if best is None or key > best:
            best = key
    return None if best is None else best[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render a results JSON as Markdown on stdout (runs nothing).")
    parser.add_argument("run", help="a results JSON")
    parser.add_argument("--baseline", help="an earlier results JSON: adds the Before/after section "
                                           "(default: the one the run recorded, if any)")
    args = parser.parse_args(argv)
    try:
        doc = load_results(args.run)
        if args.baseline:
            doc["baseline"] = baseline_summary(load_results(args.baseline), doc, args.baseline, "given")
    except ValueError as exc:
        parser.error(str(exc))
    png = os.path.splitext(args.run)[0] + ".png"
    sys.stdout.write(render(doc, os.path.basename(png) if os.path.exists(png) else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
