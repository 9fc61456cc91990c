"""Write a :mod:`benchmarks.load` run: ``<name>.json`` (everything), ``<name>.md`` (the figures) and,
for a soak, ``<name>.png`` (the server's RSS over time).

Re-render a stored run without running anything::

    .venv/bin/python -m benchmarks.load_report benchmarks/results/load/RUN.json > RUN.md
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from troupe.bench.machine import describe_machine

__all__ = ["write_load_results", "render_load"]


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join("–" if c is None else str(c) for c in r) + " |" for r in rows)]


def _q(summary: dict[str, Any] | None, key: str) -> Any:
    return None if not summary else summary.get(key)


def _n(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _loads(value: Any) -> str:
    return "/".join(f"{v:g}" for v in value) if isinstance(value, list) else "–"


def _latency_rows(latency: dict[str, Any]) -> list[list[Any]]:
    return [[name, _n(_q(s, "count")), _n(_q(s, "p50")), _n(_q(s, "p90")), _n(_q(s, "p99")), _n(_q(s, "max"))]
            for name, s in latency.items()]


def _cost(cost: dict[str, Any] | None) -> str:
    if not cost:
        return "–"
    lag = cost.get("client_loop_lag_ms") or {}
    return (f"server {_n(cost.get('server_cpu_cores'))}, client {_n(cost.get('client_cpu_cores'))} "
            f"(client event-loop lag p99 {_n(lag.get('p99'))} ms, max {_n(lag.get('max'))} ms)")


def _logs(doc: dict[str, Any]) -> list[str]:
    logs = doc.get("server_logs")
    if not logs:
        return []
    out = ["", "## Server logs", "",
           f"{logs['files_scanned']} log files of the server (the driver's and the Ray session's); "
           f"{logs['error_lines']} ERROR lines, {logs['tracebacks']} tracebacks, "
           f"{logs.get('tracebacks_with_troupe_frames', '?')} of them through Troupe's code (`troupe:` below; `ray:` "
           "ones have no Troupe frame, e.g. Ray's dashboard finding its port taken by another Ray instance on the "
           "machine)."]
    for d in logs.get("distinct", []):
        out += ["", f"- {d['count']}× `{d['last_line'][:200]}`", "", "```", d["example"][-3000:], "```"]
    left = (doc.get("server") or {}).get("leftover_processes_after_stop")
    if left:
        out += ["", f"Processes of the server's tree still alive after its process group was stopped (killed by "
                    f"pid): {left}."]
    return out


def _conversations(r: dict[str, Any]) -> list[str]:
    p = r["params"]
    out = [f"{p['conversations']:,} conversations, {p['concurrency']:,} in flight at once, two turns each "
           f"(half of the turns streamed: {p['streamed']}); client time-out {p['timeout_s']:g} s per request; a turn "
           f"answered 429 is sent again after its Retry-After (× U(1, 1.5)), at most "
           f"{p.get('retries_after_429', 0)} times, as the openai SDK would. "
           f"Each conversation: `POST /v1/conversations`, two `POST /v1/responses` with `conversation` "
           "(turn 2 asks `[[history]]`, so its answer must be turn 1's input and its own), then "
           "`GET /v1/conversations/{id}/items?order=asc`, which must hold exactly user 1, assistant 1, user 2, "
           "assistant 2 (the assistant items being the responses' own output items).", ""]
    db = r.get("duckdb") or {}
    ret = r.get("retrieve") or {}
    out += _table(["measure", "value"], [
        ["wall time (s)", _n(r["wall_s"])],
        ["conversations all good", f"{r['conversations_ok']:,} of {p['conversations']:,}"],
        ["responses made / per second", f"{r['responses_made']:,} / {_n(r['responses_per_s'])}"],
        ["HTTP 5xx (all calls, retrieval included)", _n(r["http_5xx"])],
        ["HTTP 429 answered, then sent again after Retry-After", _n(r.get("http_429_retried"))],
        ["conversations that met a 429 / of them all good", f"{_n(r.get('conversations_with_a_429'))} / "
         f"{_n(r.get('conversations_with_a_429_all_good'))}"],
        ["HTTP 429 still after all retries", _n(r.get("http_429_final"))],
        ["client time-outs", _n(r["timeouts"])],
        ["transport errors", _n(r["transport_errors"])],
        ["conversations with a lost item", _n(r["lost_items"])],
        ["conversations with an extra item", _n(r["extra_items"])],
        ["conversations with items out of order", _n(r["misordered"])],
        ["responses retrievable afterwards (GET)", f"{(ret.get('counts') or {}).get('ok', 0):,} of {ret.get('responses', 0):,}"],
        ["DuckDB: responses missing", _n(db.get("responses_missing_count"))],
        ["DuckDB: conversations / with conversation items", f"{_n(db.get('conversations_rows'))} / "
         f"{_n((db.get('expected_conversations') or 0) - (db.get('conversations_without_items') or 0))}"],
        ["DuckDB: conversation item rows", _n(db.get("conversation_items_rows"))],
        ["DuckDB: good conversations without exactly 4 items", _n(db.get("ok_conversations_not_4_items"))],
        ["DuckDB: stored order (seq) differs from the API's", _n(db.get("stored_order_differs_from_api"))],
        ["server tree RSS first / peak / last (MiB)", f"{_n(r['memory']['first_rss_mib'])} / "
         f"{_n(r['memory']['peak_rss_mib'])} / {_n(r['memory']['last_rss_mib'])}"],
        ["load average at start / end of load", f"{_loads(r['load_average']['start'])} / "
         f"{_loads(r['load_average'].get('end_of_load'))}"],
        ["CPU used during the load (cores)", _cost(r.get("cost"))],
    ])
    if db.get("error"):
        out += ["", f"The DuckDB file could not be read: {db['error']}"]
    out += ["", "Latency per step (ms):", "", *_table(["step", "n", "p50", "p90", "p99", "max"],
                                                     _latency_rows(r["latency_ms"]))]
    out += ["", "Outcome counts per step: " + ", ".join(f"`{k}` {v:,}" for k, v in r["counts"].items()) + "."]
    if r["failures"]:
        out += ["", "**Failures** (step:kind → count): " + ", ".join(f"`{k}` {v:,}" for k, v in r["failures"].items())
                + ".", "", "First examples:", "", "```json",
                *(json.dumps(e)[:600] for e in r["failure_examples"][:10]), "```"]
    if ret.get("failures"):
        out += ["", "Retrieval failures: " + ", ".join(f"`{k}` {v:,}" for k, v in ret["failures"].items()), "",
                "```json", *(json.dumps(e)[:400] for e in ret["examples"][:5]), "```"]
    return out


def _overload(r: dict[str, Any]) -> list[str]:
    p = r["params"]
    out = [f"Closed loop: each of c clients sends `{p['input']}` (every other request streamed) for the level's "
           f"duration, client time-out {p['timeout_s']:g} s; after a 429 a client waits min(Retry-After, "
           f"{p['retry_cap_s']:g} s) × U(0.5, 1.5). The first level (c={p['reference_concurrency']}) is the "
           "reference, within capacity. Admitted = HTTP 200. Latencies in ms.", ""]
    rows = []
    for lv in r["levels"]:
        rows.append([f"{lv['concurrency']:,}{' (ref)' if lv['reference'] else ''}", _n(lv["wall_s"]), _n(lv["requests"]),
                     _n(lv["admitted"]), _n(lv["rejected_429"]), _n(lv["http_5xx"]), _n(lv["timeouts"]),
                     _n(lv["other_failures"]), _n(lv["admitted_per_s"]),
                     _n(_q(lv["admitted_e2e_ms"], "p50")), _n(_q(lv["admitted_e2e_ms"], "p99")),
                     _n(_q(lv["admitted_e2e_ms"], "max")), _n(lv.get("admitted_p99_over_reference")),
                     _n(_q(lv["admitted_ttft_ms_stream"], "p99")), _n(_q(lv["rejected_ms"], "p99")),
                     _n(lv["server_cpu_cores"]), f"{_loads(lv['load_average']['start'])} → "
                     f"{_loads(lv['load_average']['end'])}"])
    out += _table(["c", "s", "requests", "200", "429", "5xx", "time-outs", "other failures", "admitted/s",
                   "admitted E2E p50", "p99", "max", "p99 ÷ ref p99", "stream TTFT p99", "429 latency p99",
                   "server CPU (cores)", "load average"], rows)
    out += [""]
    for lv in r["levels"]:
        c429 = lv["contract_429"]
        line = f"- c={lv['concurrency']:,}: by status {lv['by_status']}"
        if c429["checked"]:
            line += (f"; 429 contract checked on {c429['checked']:,}: "
                     + ("all carry `Retry-After` and `rate_limit_exceeded`" if not c429["problems"]
                        else f"problems {c429['problems']}") + f" (Retry-After values {c429['retry_after_values']})")
        line += f"; CPU (cores) {_cost(lv.get('cost'))}"
        line += (f"; admitted E2E p50/p99 plain {_n(_q(lv['admitted_e2e_ms_plain'], 'p50'))}/"
                 f"{_n(_q(lv['admitted_e2e_ms_plain'], 'p99'))}, streamed {_n(_q(lv['admitted_e2e_ms_stream'], 'p50'))}/"
                 f"{_n(_q(lv['admitted_e2e_ms_stream'], 'p99'))}; server RSS peak {_n(lv['memory']['peak_rss_mib'])} MiB.")
        out.append(line)
        if lv["other_examples"]:
            out += ["", "  ```json", *("  " + json.dumps(e)[:400] for e in lv["other_examples"][:5]), "  ```"]
    return out


def _soak(r: dict[str, Any], png: str | None) -> list[str]:
    p = r["params"]
    m = r["memory"]
    out = [f"c={p['concurrency']} for {p['duration_s']:g} s of mixed traffic ({', '.join(f'{k} {v:.0%}' for k, v in p['mix'].items())}: "
           + "; ".join(f"{k}: {v}" for k, v in p["inputs"].items()) + f"). RSS of the server's whole process tree "
           f"every {p['sample_every_s']:g} s; warm-up {p['warmup_s']:g} s.", ""]
    if png:
        out += [f"![RSS over time]({png})", ""]
    if "tree_rss" not in m:
        return [*out, f"Memory: {m.get('verdict')}."]
    out += [f"**Memory: {m['verdict']}** (criterion: {m['criterion']}).", ""]
    rows = []
    for key, label in (("tree_rss", "whole tree RSS"), ("tree_pss", "whole tree PSS"),
                       ("long_lived_rss", f"RSS of the {m['long_lived_rss'].get('processes')} long-lived processes")):
        s = m[key]
        rows.append([label, _n(s["first_mib"]), _n(s["last_mib"]), _n(s["mean_mib"]), _n(s["max_minus_min_mib"]),
                     _n(s["slope_after_warmup_mib_per_min"]), _n(s["slope_second_half_mib_per_min"]),
                     _n(s["r2_second_half"])])
    out += _table(["after warm-up", "first (MiB)", "last", "mean", "max − min", "slope after warm-up (MiB/min)",
                   "slope, second half", "r², second half"], rows)
    out += ["", f"Processes in the tree after warm-up: {m['processes_after_warmup']['min']}–"
                f"{m['processes_after_warmup']['max']}; DuckDB file {m['db_mib']['after_warmup']} MiB after warm-up, "
                f"{m['db_mib']['end']} MiB at the end.", "",
            "Long-lived processes, RSS first → last sample after warm-up (largest changes):", ""]
    out += _table(["process", "pid", "first (MiB)", "last", "change"],
                  [[g["process"], g["pid"], g["first_mib"], g["last_mib"], g["change_mib"]]
                   for g in m["per_process_change"]])
    out += ["", _n(r["operations"]) + f" operations in {_n(r['wall_s'])} s, {r['failed']:,} failed, "
            f"{r['http_5xx']:,} HTTP 5xx, {r['timeouts']:,} time-outs; load average {_loads(r['load_average']['start'])}"
            f" at start, {_loads(r['load_average']['end'])} at the end; CPU (cores) {_cost(r.get('cost'))}.", "",
            "Latency per operation (ms; a conversation's steps separately):", "",
            *_table(["operation", "n", "p50", "p90", "p99", "max"], _latency_rows(r["latency_ms"]))]
    if r["failures"]:
        out += ["", "**Failures**: " + ", ".join(f"`{k}` {v:,}" for k, v in r["failures"].items()) + ".", "",
                "```json", *(json.dumps(e)[:600] for e in r["failure_examples"][:10]), "```"]
    samples = r.get("samples") or []
    step = max(1, len(samples) // 20)
    out += ["", "Samples (every " + (f"{step}th" if step > 1 else "one") + "):", ""]
    out += _table(["t (s)", "RSS (MiB)", "PSS (MiB)", "processes", "ops in the interval", "failed", "E2E p50",
                   "E2E p99", "DuckDB (MiB)", "load average"],
                  [[s["t_s"], s["rss_mib"], s["pss_mib"], s["processes"], s.get("requests"), s.get("failed"),
                    s.get("e2e_p50_ms"), s.get("e2e_p99_ms"), s.get("db_mib"), _loads(s.get("load_average"))]
                   for s in samples[::step]])
    return out


def render_load(doc: dict[str, Any], png_name: str | None = None) -> str:
    run = doc["run"]
    server = doc.get("server") or {}
    title = {"conversations": "concurrent conversations", "overload": "overload", "soak": "soak"}[run]
    lines = [f"# Troupe load test: {title}, {doc['created_at'][:10]}, commit `{doc['commit']}`"
             + (" (worktree dirty)" if doc.get("worktree_dirty") else "") + (" (smoke)" if doc.get("smoke") else ""),
             "",
             f"- Machine: {describe_machine(doc['machine'])}; load average "
             f"{_loads(doc['machine'].get('load_average_before_run'))} when the load started, "
             f"{_loads(doc['machine'].get('load_average_after_run'))} at the end (the machine is shared; the "
             "load generator runs on it too).",
             f"- Server: {server.get('how')}" + (f": `{' '.join(server['argv'])}`" if server.get("argv") else "")
             + (f", up in {server['start_s']} s" if server.get("start_s") else "") + ".",
             f"- Reproduce: `{doc.get('command')}` (this run: {doc.get('wall_s')} s in all).", ""]
    result = doc.get("result") or {}
    if run == "conversations":
        lines += _conversations(result)
    elif run == "overload":
        lines += _overload(result)
    else:
        lines += _soak(result, png_name)
    lines += _logs(doc)
    return "\n".join(lines) + "\n"


def _plot(doc: dict[str, Any], path: str) -> str | None:
    samples = (doc.get("result") or {}).get("samples") or []
    if len(samples) < 2:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s["t_s"] / 60 for s in samples]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    ax1.plot(t, [s["rss_mib"] for s in samples], label="whole tree RSS")
    ax1.plot(t, [s["pss_mib"] for s in samples], label="whole tree PSS")
    names = {p["process"] for s in samples for p in s["per"]}
    groups = {name: [sum(p["rss_mib"] for p in s["per"] if p["process"] == name) for s in samples] for name in names}
    warm_s = (doc["result"].get("memory") or {}).get("warmup_s") or 0
    base_i = next((i for i, s in enumerate(samples) if s["t_s"] >= warm_s), 0)
    change = {name: [v - values[base_i] for v in values] for name, values in groups.items()}
    for name in sorted(change, key=lambda g: -max(abs(v) for v in change[g][base_i:]))[:6]:
        ax2.plot(t, change[name], label=name)
    warm = (doc["result"].get("memory") or {}).get("warmup_s")
    for ax in (ax1, ax2):
        if warm:
            ax.axvline(warm / 60, color="grey", linestyle=":", label="end of warm-up" if ax is ax1 else None)
        ax.set_ylabel("MiB")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    ax1.set_title("Troupe server memory during the soak")
    ax2.set_title("RSS change since the end of warm-up, by process kind (six largest changes)", fontsize=9)
    ax2.set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_load_results(doc: dict[str, Any], out_dir: str, name: str) -> list[str]:
    """Write ``name.json``, ``name.md`` (and ``name.png`` for a soak) into ``out_dir``; their paths."""
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, name)
    paths = []
    png = None
    if doc.get("run") == "soak":
        try:
            png = _plot(doc, base + ".png")
        except Exception as exc:  # noqa: BLE001 - the figures matter more than the chart
            doc.setdefault("notes", []).append(f"The chart could not be drawn: {type(exc).__name__}: {exc}")
    with open(base + ".json", "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    paths.append(base + ".json")
    with open(base + ".md", "w", encoding="utf-8") as f:
        f.write(render_load(doc, os.path.basename(png) if png else None))
    paths.append(base + ".md")
    if png:
        paths.append(png)
    return paths


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    with open(args[0], encoding="utf-8") as f:
        doc = json.load(f)
    png = os.path.splitext(args[0])[0] + ".png"
    sys.stdout.write(render_load(doc, os.path.basename(png) if os.path.exists(png) else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
