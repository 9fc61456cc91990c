"""benchmarks/results.py: the before/after against a baseline run (compare, its rendering, the
pick of a baseline), the main Troupe target of a run (``troupe-replica``, ``troupe-pooled`` in runs
from before the replica placement) and benchmarks/run.py's --baseline, on hand-made results with
the structure of a real run's JSON; and the harness's wiring of the main target. Nothing is
measured."""

from __future__ import annotations

import copy
import glob
import json
import os

import pytest

from benchmarks import run
from benchmarks.results import (
    baseline_summary,
    compare,
    load_results,
    main,
    main_target,
    pick_baseline,
    render,
    target_checks,
)
from benchmarks.scenarios import MAIN, MAIN_APP, MAIN_PROXY, POOLED

MACHINE = {"cpu_model": "Test CPU", "cores": 2, "memory_gib": 4.0, "load_average": [0.5, 0.4, 0.3], "os": "Linux 6",
           "python": "3.11.7", "load_average_before_scenarios": [0.6, 0.4, 0.3]}


def _summary(*, ttft: float | None = None, e2e: float = 100.0, rps: float = 10.0) -> dict:
    return {"requests": 8, "error_count": 0, "throughput_rps": rps,
            "e2e_ms": {"p50": e2e, "p90": e2e, "p99": e2e},
            "ttft_ms": None if ttft is None else {"p50": ttft, "p90": ttft, "p99": ttft},
            "itl_ms": None, "client": {"cpu_share": 0.1}}


def _s1_row(target: str, c: int, ttft: float, e2e: float, cpu: float, ratios: dict | None = None) -> dict:
    return {"target": target, "kind": "limit" if target == "sim" else "troupe", "label": target, "concurrency": c,
            "summary": _summary(ttft=ttft, e2e=e2e), "server_cpu_ms_per_response": cpu, "ratios": ratios or {}}


def _s2_row(target: str, c: int, store: bool | None, rps: float, cpu: float, ratios: dict | None = None) -> dict:
    label = "sim" if store is None else f"troupe store={'on' if store else 'off'}"
    return {"target": target, "kind": "limit" if target == "sim" else "troupe", "label": label, "concurrency": c,
            "store": store, "summary": _summary(rps=rps), "server_cpu_ms_per_response": cpu, "ratios": ratios or {}}


def _doc(commit: str = "aaaaaaa", created: str = "2026-11-22T10:00:00Z", *, ttft1: float = 80.0,
         troupe_cpu1: float = 300.0, rps16_on: float = 40.0, cpu16_on: float = 40.0, agent: float = 740.0,
         main: str = MAIN) -> dict:
    """A run whose Troupe (``main``) has the given figures; ``main=POOLED``: a run from before the
    replica placement (no ``main_target`` recorded, no pooled comparison rows). Otherwise Troupe
    pooled is measured beside it, with other figures than the main target's."""
    doc = {
        "schema": "troupe-benchmarks/1", "created_at": created, "commit": commit, "worktree_dirty": False,
        "quick": False, "machine": dict(MACHINE), "definitions": {"streaming_input": "x"}, "command": "run",
        "peers": {}, "idle_cpu_cores": {"sim": 0.0, "troupe": 0.2}, "notes": [], "wall_s": 10.0,
        "scenarios": {
            "1_streaming": {"load_average_at_start": [1.0, 2.0, 3.0], "rows": [
                _s1_row("sim", 1, 50.0, 720.0, 30.0, {"ttft_ms_p50": 1.0, "e2e_ms_p50": 1.0}),
                _s1_row(main, 1, ttft1, 740.0, troupe_cpu1,
                        {"ttft_ms_p50": round(ttft1 / 50.0, 3), "e2e_ms_p50": round(740.0 / 720.0, 3)}),
                _s1_row("sim", 16, 70.0, 730.0, 7.5, {"ttft_ms_p50": 1.0, "e2e_ms_p50": 1.0}),
                _s1_row(main, 16, 200.0, 990.0, 100.0, {"ttft_ms_p50": 2.857, "e2e_ms_p50": 1.356}),
            ]},
            "2_throughput": {"load_average_at_start": [1.5, 2.0, 3.0], "rows": [
                _s2_row("sim", 16, None, 280.0, 2.8, {"throughput": 1.0, "cpu_per_response": 1.0}),
                _s2_row(main, 16, True, rps16_on, cpu16_on,
                        {"throughput": round(rps16_on / 280.0, 3), "cpu_per_response": round(cpu16_on / 2.8, 3)}),
                _s2_row(main, 16, False, 55.0, 28.0, {"throughput": 0.196, "cpu_per_response": 10.0}),
            ]},
            "3_agent_loop": {"load_average_at_start": None,
                             "critical_path": {"turn1": 215.0, "turn2": 262.0, "tool_ms": 200, "critical_path_ms": 677.0},
                             "rows": [{"target": main, "concurrency": 1, "summary": _summary(e2e=agent),
                                       "vs_critical_path": round(agent / 677.0, 3), "breakdown_p50": {}}]},
        },
    }
    if main != POOLED:
        doc["main_target"] = main
        doc["scenarios"]["1_streaming"]["rows"] += [
            _s1_row(POOLED, 1, 95.0, 760.0, 350.0, {"ttft_ms_p50": 1.9, "e2e_ms_p50": 1.056}),
            _s1_row(POOLED, 16, 260.0, 1100.0, 130.0, {"ttft_ms_p50": 3.714, "e2e_ms_p50": 1.507}),
        ]
        doc["scenarios"]["2_throughput"]["rows"] += [
            {**_s2_row(POOLED, 16, True, 25.0, 60.0, {"throughput": 0.089}), "label": "troupe pooled store=on"},
            {**_s2_row(POOLED, 16, False, 30.0, 45.0, {"throughput": 0.107}), "label": "troupe pooled store=off"},
        ]
    return doc


def _by_measure(rows: list[dict]) -> dict[str, dict]:
    return {r["measure"]: r for r in rows}


def test_compare_gives_troupe_the_limit_and_the_ratio_before_and_after() -> None:
    before = _doc(ttft1=100.0, rps16_on=40.0, cpu16_on=40.0, troupe_cpu1=300.0, agent=800.0)
    after = _doc("bbbbbbb", ttft1=65.0, rps16_on=72.0, cpu16_on=20.0, troupe_cpu1=150.0, agent=720.0)
    after["scenarios"]["1_streaming"]["rows"][0]["summary"]["ttft_ms"]["p50"] = 52.0  # the limit moved too
    rows = compare(before, after)
    measures = [r["measure"] for r in rows]
    assert measures == [
        "1 streaming TTFT p50 (ms), c=1", "1 streaming TTFT p50 (ms), c=16",
        "1 streaming E2E p50 (ms), c=1", "1 streaming E2E p50 (ms), c=16",
        "2 non-streaming resp/s, c=16, store=on", "2 non-streaming resp/s, c=16, store=off",
        "3 agent loop E2E p50 (ms), c=1",
        "1 streaming, c=1", "1 streaming, c=16", "2 non-streaming, c=16, store=on", "2 non-streaming, c=16, store=off",
    ]
    by = _by_measure(rows)
    ttft = by["1 streaming TTFT p50 (ms), c=1"]
    assert (ttft["group"], ttft["better"], ttft["before"], ttft["after"]) == ("headline", "lower", 100.0, 65.0)
    assert ttft["change"] == pytest.approx(-0.35)
    assert (ttft["limit_before"], ttft["limit_after"]) == (50.0, 52.0)
    assert (ttft["ratio_before"], ttft["ratio_after"]) == (2.0, 1.3)  # the runs' own stored ratios
    assert ttft["ratio_change"] == pytest.approx(-0.35)
    rps = by["2 non-streaming resp/s, c=16, store=on"]
    assert (rps["better"], rps["before"], rps["after"], rps["limit_after"]) == ("higher", 40.0, 72.0, 280.0)
    assert rps["change"] == pytest.approx(0.8)
    agent = by["3 agent loop E2E p50 (ms), c=1"]
    assert (agent["limit_before"], agent["ratio_after"]) == (677.0, round(720.0 / 677.0, 3))
    cpu1 = by["1 streaming, c=1"]  # no stored ratio for scenario 1's CPU: computed
    assert (cpu1["group"], cpu1["better"], cpu1["before"], cpu1["after"]) == ("cpu", "lower", 300.0, 150.0)
    assert (cpu1["ratio_before"], cpu1["ratio_after"]) == (10.0, 5.0)
    assert by["2 non-streaming, c=16, store=on"]["ratio_after"] == round(20.0 / 2.8, 3)
    json.dumps(rows)  # JSON-ready


def test_a_baseline_that_lacks_measures_gives_dashes_and_never_crashes() -> None:
    current = _doc("bbbbbbb")
    current["scenarios"]["1_streaming"]["rows"] += [
        _s1_row("sim", 64, 110.0, 816.0, 6.0, {"ttft_ms_p50": 1.0}),
        _s1_row(MAIN, 64, 1000.0, 3200.0, 85.0, {"ttft_ms_p50": 9.09}),
    ]
    baseline = _doc()
    del baseline["scenarios"]["3_agent_loop"]
    baseline["scenarios"]["2_throughput"] = {"skipped": "the scenario failed: boom"}
    rows = _by_measure(compare(baseline, current))
    new = rows["1 streaming TTFT p50 (ms), c=64"]
    assert (new["before"], new["after"], new["change"], new["ratio_before"], new["ratio_change"]) == (
        None, 1000.0, None, None, None)
    assert rows["3 agent loop E2E p50 (ms), c=1"]["before"] is None
    assert rows["2 non-streaming resp/s, c=16, store=on"]["limit_before"] is None
    assert rows["1 streaming TTFT p50 (ms), c=1"]["change"] == 0.0
    doc = {**current, "baseline": baseline_summary(baseline, current, "old.json", "given")}
    text = render(doc)
    assert "| 1 streaming TTFT p50 (ms), c=64 | lower | – | 1,000 | – | – | 110.0 | – | 9.09× | – |" in text
    assert "| 1 streaming TTFT p50 (ms), c=1 | lower | 80.0 | 80.0 | ±0% |" in text


@pytest.mark.parametrize("baseline", [{}, {"scenarios": None}, {"scenarios": {"1_streaming": {"rows": "junk"}}},
                                      {"scenarios": {"1_streaming": {"rows": [{"target": "troupe-pooled"}]}}},
                                      {"scenarios": {"1_streaming": {"rows": [{"target": MAIN}]}}},
                                      {"main_target": MAIN, "targets": None, "scenarios": {}}])
def test_odd_or_empty_baselines_compare_without_crashing(baseline: dict) -> None:
    rows = compare(baseline, _doc())
    assert rows and all(r["before"] is None for r in rows)
    assert compare(_doc(), {}) == []  # nothing measured now: nothing to show
    render({**_doc(), "baseline": baseline_summary(baseline, _doc(), "old.json", "auto")})


def test_the_section_follows_the_headline_and_names_the_baseline() -> None:
    baseline = _doc(ttft1=100.0, rps16_on=40.0)
    current = _doc("bbbbbbb", "2026-11-23T09:00:00Z", ttft1=65.0, rps16_on=72.0)
    current["machine"]["load_average_before_scenarios"] = [1.9, 1.0, 0.5]
    current["quick"] = True
    current["definitions"] = {"streaming_input": "y"}
    doc = {**current, "baseline": baseline_summary(baseline, current, "benchmarks/results/old.json", "auto")}
    text = render(doc)
    assert text.index("## Headline") < text.index("## Before/after") < text.index("## 0.")
    section = text[text.index("## Before/after"):text.index("## 0.")]
    assert "`benchmarks/results/old.json`" in section and "commit `aaaaaaa`" in section
    assert "2026-11-22 10:00:00 UTC" in section and "commit `bbbbbbb`" in section
    assert "before the scenarios 0.6/0.4/0.3 → 1.9/1/0.5" in section
    assert "scenario 1 start 1/2/3 → 1/2/3" in section and "scenario 3 start – → –" in section
    assert "this run is a quick run" in section and "`streaming_input`" in section
    assert "| 1 streaming TTFT p50 (ms), c=1 | lower | 100.0 | 65.0 | −35% (better) | 50.0 | 50.0 | 2.00× | 1.30× | −35% (better) |" in section
    assert "| 2 non-streaming resp/s, c=16, store=on | higher | 40.0 | 72.0 | +80% (better) |" in section
    assert "**Server CPU per response (ms)**" in section
    assert "| 2 non-streaming, c=16, store=off | lower | 28.0 | 28.0 | ±0% |" in section
    assert "## Before/after" not in render(current)  # no baseline, no section


def test_definitions_read_back_from_json_are_the_same_as_a_runs_own() -> None:
    # A run holds its definitions as asdict() made them (tuples); its baseline's come from JSON (lists).
    from dataclasses import asdict

    from benchmarks.scenarios import definitions

    current = {**_doc("bbbbbbb"), "definitions": asdict(definitions(False))}
    baseline = {**_doc(), "definitions": json.loads(json.dumps(asdict(definitions(False))))}
    assert baseline_summary(baseline, current, "old.json", "auto")["definitions_differ"] == []
    baseline["definitions"]["streaming_levels"][0]["requests"] += 1
    assert baseline_summary(baseline, current, "old.json", "auto")["definitions_differ"] == ["streaming_levels"]


def test_worse_is_called_worse() -> None:
    baseline, current = _doc(ttft1=50.0, rps16_on=80.0), _doc("bbbbbbb", ttft1=75.0, rps16_on=60.0)
    rows = _by_measure(compare(baseline, current))
    text = render({**current, "baseline": baseline_summary(baseline, current, "old.json", "given")})
    assert rows["1 streaming TTFT p50 (ms), c=1"]["change"] == pytest.approx(0.5)
    assert "+50% (worse)" in text and "−25% (worse)" in text


def _write(path: str, doc: dict) -> str:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    return path


def test_pick_baseline_takes_the_newest_full_run_of_another_commit(tmp_path) -> None:
    _write(tmp_path / "a.json", _doc("aaaaaaa", "2026-11-20T10:00:00Z"))
    newest = _write(tmp_path / "b.json", _doc("bbbbbbb", "2026-11-21T10:00:00Z"))
    _write(tmp_path / "c.json", _doc("ccccccc", "2026-11-22T10:00:00Z"))  # the current commit
    _write(tmp_path / "d.json", {**_doc("ddddddd", "2026-11-23T10:00:00Z"), "quick": True})
    _write(tmp_path / "e.json", {"something": "else"})
    (tmp_path / "f.json").write_text("{not json")
    assert pick_baseline(str(tmp_path), "ccccccc") == str(newest)
    assert pick_baseline(str(tmp_path / "empty"), "ccccccc") is None
    with pytest.raises(ValueError):
        load_results(str(tmp_path / "e.json"))


def test_run_picks_and_checks_the_baseline_before_measuring(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(run, "RESULTS_DIR", str(tmp_path))
    old = _write(tmp_path / "old.json", _doc("aaaaaaa"))
    assert run._baseline("none", "ccccccc", False) == (None, "none", None)
    assert run._baseline("auto", "ccccccc", True) == (None, "auto", None)  # --quick: none unless given
    path, picked, doc = run._baseline("auto", "ccccccc", False)
    assert (path, picked, doc["commit"]) == (str(old), "auto", "aaaaaaa")
    assert run._baseline("auto", "aaaaaaa", False)[0] is None  # the same commit is no baseline
    assert run._baseline(str(old), "aaaaaaa", False)[1] == "given"
    with pytest.raises(SystemExit):  # fails at once, before any server starts
        run.main(["--baseline", str(tmp_path / "missing.json")])


def test_render_a_stored_run_against_a_baseline_from_the_command_line(tmp_path, capsys) -> None:
    current = _write(tmp_path / "new.json", _doc("bbbbbbb", ttft1=65.0))
    baseline = _write(tmp_path / "old.json", _doc(ttft1=100.0))
    assert main([str(current), "--baseline", str(baseline)]) == 0
    assert "−35% (better)" in capsys.readouterr().out


def _committed_runs() -> list[str]:
    """The committed full-run results (A/B files of benchmarks.ab, ``*-ab-*.json``, are not runs)."""
    paths = glob.glob(os.path.join(os.path.dirname(run.__file__), "results", "*.json"))
    return sorted(p for p in paths if "-ab-" not in os.path.basename(p))


@pytest.mark.parametrize("path", _committed_runs())
def test_a_committed_run_against_itself_changes_nothing(path: str) -> None:
    doc = load_results(path)
    rows = compare(doc, copy.deepcopy(doc))
    assert rows and all(r["change"] in (0.0, None) and r["ratio_change"] in (0.0, None) for r in rows)
    assert {r["group"] for r in rows} == {"headline", "cpu"}


def test_ab_summary_takes_medians_per_side_and_skips_missing_figures():
    from benchmarks.ab import summarize

    def sample(side, rnd, ttft, cpu):
        return {"load": "1 streaming c=16", "side": side, "round": rnd,
                "figures": {"ttft_p50": ttft, "e2e_p50": None, "rps": 10.0, "cpu": cpu}}

    rows = summarize([
        sample("before", 1, 200.0, 100.0), sample("after", 1, 150.0, 80.0),
        sample("after", 2, 170.0, 60.0), sample("before", 2, 220.0, 120.0),
        sample("before", 3, 400.0, 110.0), sample("after", 3, 160.0, 70.0),
    ])
    by = {r["measure"]: r for r in rows}
    assert "E2E p50" not in by, "a figure no round measured has no row"
    assert (by["TTFT p50"]["before"], by["TTFT p50"]["after"]) == (220.0, 160.0)
    assert by["TTFT p50"]["change"] == round(160 / 220 - 1, 4)
    assert by["TTFT p50"]["before_rounds"] == [200.0, 220.0, 400.0]
    assert by["server CPU per response"]["better"] == "lower"
    assert by["responses/s"]["change"] == 0.0


def _with_targets(doc: dict, main: str = MAIN) -> dict:
    """``doc`` (whose Troupe is ``main``) with what the targets table reads beyond ``_doc``: the
    Serve floor, c=64 and non-streaming c=1, scenario 7 and the per-process CPU at rest."""
    s1, s2 = doc["scenarios"]["1_streaming"]["rows"], doc["scenarios"]["2_throughput"]["rows"]
    s1 += [_s1_row("serve-floor", 16, 72.0, 735.0, 9.0), _s1_row("sim", 64, 110.0, 816.0, 6.0),
           _s1_row(main, 64, 400.0, 1000.0, 90.0)]
    s2 += [_s2_row("sim", 1, None, 300.0, 2.0), _s2_row(main, 1, True, 120.0, 30.0),
           {**_s2_row("serve-floor", 1, None, 250.0, 3.0), "label": "serve floor"},
           {**_s2_row("serve-floor", 16, None, 250.0, 3.0), "label": "serve floor"}]
    for row, e2e in zip(s2[-4:-1], (2.0, 7.5, 3.5), strict=True):
        row["summary"]["e2e_ms"]["p50"] = e2e
    doc["scenarios"]["7_idle_tools"] = {
        "critical_path": {"turn1": 4.0, "turn2": 6.0, "tool_ms": 400, "critical_path_ms": 410.0}, "gap_s": 5.0,
        "rows": [{"target": main, "tool_runner": "actor", "placement": "replica" if main == MAIN else "pooled",
                  "first": {"e2e_ms": 640.0, "over_critical_path_ms": 230.0},
                  "after_gap": {"n": 2, "errors": [], "samples_ms": [430.0, 434.0], "e2e_ms": {"p50": 432.0, "max": 434.0},
                                "over_critical_path_ms": 22.0, "breakdown_p50": {"tool_window_ms": 405.0}}},
                 {"target": "troupe-pooled-task", "tool_runner": "task", "placement": "pooled",
                  "first": {"error": "timeout: slow"},
                  "after_gap": {"n": 1, "errors": ["http_500: boom"], "samples_ms": [1900.0],
                                "e2e_ms": {"p50": 1900.0, "max": 1900.0}, "over_critical_path_ms": 1490.0}}],
    }
    doc["idle_cpu_cores"] = {"sim": 0.001, "troupe": 0.2}
    doc["idle_cpu_by_process"] = {"troupe": {"raylet": 0.1, "ray::ServeReplica:serve-floor:SimFloor": 0.004}}
    return doc


def test_target_checks_hold_each_figure_against_its_bound() -> None:
    rows = {r["measure"]: r for r in target_checks(_with_targets(_doc()))}
    c1 = rows["2 non-streaming E2E p50 (ms), c=1, store on"]
    assert (c1["limit"], c1["floor"], c1["troupe"], c1["over"], c1["bound"], c1["met"]) == (2.0, 3.5, 7.5, 5.5, 8.0, True)
    rps = rows["2 non-streaming resp/s, c=16, store on"]
    assert (rps["limit"], rps["floor"], rps["bound"], rps["ratio"], rps["met"]) == (280.0, 250.0, 140.0, 0.143, False)
    assert rows["1 streaming TTFT p50 (ms), c=16"]["bound"] == 85.0
    assert rows["1 streaming TTFT p50 (ms), c=16"]["floor"] == 72.0
    assert rows["1 streaming E2E p50 (ms), c=16"]["met"] is False
    assert (rows["1 streaming E2E p50 (ms), c=64"]["bound"], rows["1 streaming E2E p50 (ms), c=64"]["met"]) == (
        pytest.approx(1060.8), True)
    cpu = rows["1 server CPU per streamed 64-token response (ms), c=16"]
    assert (cpu["limit"], cpu["troupe"], cpu["bound"], cpu["met"]) == (7.5, 100.0, 30.0, False)
    gap = rows["7 four parallel 400 ms tools, 5 s after the previous request, E2E p50 (ms)"]
    assert (gap["limit"], gap["troupe"], gap["over"], gap["bound"], gap["met"]) == (410.0, 432.0, 22.0, 440.0, True)
    first = rows["7 the same, first request after start, E2E (ms)"]
    assert (first["troupe"], first["bound"], first["met"]) == (640.0, 510.0, False)
    idle = rows["Troupe idle CPU (cores)"]
    assert (idle["limit"], idle["floor"], idle["troupe"], idle["bound"], idle["met"]) == (0.001, 0.004, 0.196, 0.02, False)
    json.dumps(list(rows.values()))


def test_the_targets_table_and_scenario_7_render() -> None:
    doc = _with_targets(_doc())
    text = render(doc)
    assert text.index("## Headline") < text.index("## Targets") < text.index("## 0.")
    targets = text[text.index("## Targets"):text.index("## 0.")]
    assert "| 2 non-streaming E2E p50 (ms), c=1, store on | 2.0 | 3.5 | 7.5 | 3.75× | 5.5 | ≤ limit + 6 ms | yes |" in targets
    assert "| Troupe idle CPU (cores) | 0.001 | 0.004 | 0.196 | 196.00× | 0.195 | ≤ 0.02 cores | **no** |" in targets
    assert "raylet 0.100" in targets
    headline = text[text.index("## Headline"):text.index("## Targets")]
    assert "| 1 streaming TTFT p50 (ms), c=16 | 70.0 | 72.0 | 200.0 | 2.86× | – |" in headline
    section = text[text.index("## 7."):]
    assert "= **410.0 ms**" in section
    assert "| troupe-replica | replica | actor | 640.0 | 230.0 | 2 | 432.0 | 434.0 | 22.0 | – | 405.0 |" in section
    assert "| troupe-pooled-task | pooled | task | – | – | 1 | 1,900 | 1,900 | 1,490 |" in section
    assert "timeout: slow" in section and "`troupe-replica` with tools in the node's tool runner" in section


def test_targets_not_measured_are_neither_met_nor_missed() -> None:
    rows = target_checks(_doc())  # no c=1 non-streaming, no c=64, no scenario 7, no Serve floor
    by = {r["measure"]: r for r in rows}
    assert by["1 streaming TTFT p50 (ms), c=16"]["met"] is False  # measured: judged
    unmeasured = [r for r in rows if r["troupe"] is None]
    assert len(unmeasured) == 4 and all(r["met"] is None for r in unmeasured)
    assert all(r["floor"] is None for r in rows if not r["measure"].startswith("Troupe idle"))
    assert target_checks({}) and all(r["met"] is None for r in target_checks({}))
    assert "| 7 the same, first request after start, E2E (ms) | – | – | – | – | – | ≤ critical path + 100 ms | – |" in render(_doc())


def test_before_after_compares_the_tool_rounds_when_both_runs_have_them() -> None:
    before = _with_targets(_doc())
    after = _with_targets(_doc("bbbbbbb"))
    after["scenarios"]["7_idle_tools"]["rows"][0]["first"]["e2e_ms"] = 480.0
    by = _by_measure(compare(before, after))
    first = by["7 four parallel tools first request after start, E2E (ms)"]
    assert (first["before"], first["after"], first["limit_after"], first["ratio_after"]) == (
        640.0, 480.0, 410.0, round(480 / 410, 3))
    assert by["7 four parallel tools after an idle gap, E2E p50 (ms)"]["change"] == 0.0
    assert "7 four parallel tools first request after start, E2E (ms)" not in _by_measure(compare(_doc(), _doc()))


# -- the main Troupe target: troupe-replica, troupe-pooled in runs from before it -----------


def test_the_main_target_is_recorded_or_found_and_older_runs_are_pooled() -> None:
    assert (MAIN_APP, MAIN, MAIN_PROXY, POOLED) == ("replica", "troupe-replica", "troupe-replica-proxy",
                                                    "troupe-pooled")
    assert main_target(_doc()) == MAIN
    assert main_target(_doc(main=POOLED)) == POOLED  # no main_target, no troupe-replica anywhere
    unrecorded = _doc()
    del unrecorded["main_target"]
    assert main_target(unrecorded) == MAIN  # found among scenario 1's rows
    assert main_target({"targets": {"sim": {}, MAIN: {}, POOLED: {}}}) == MAIN
    assert main_target({"main_target": "troupe-other", "targets": {MAIN: {}}}) == "troupe-other"
    assert main_target({}) == POOLED and main_target(None) == POOLED


def test_an_older_pooled_baseline_is_compared_through_its_own_main_target() -> None:
    baseline = _doc(ttft1=100.0, rps16_on=40.0, agent=800.0, main=POOLED)
    current = _doc("bbbbbbb", ttft1=65.0, rps16_on=72.0, agent=720.0)  # its troupe-pooled rows: 95 ms, 25 resp/s
    rows = _by_measure(compare(baseline, current))
    ttft = rows["1 streaming TTFT p50 (ms), c=1"]
    assert (ttft["before"], ttft["after"], ttft["change"]) == (100.0, 65.0, pytest.approx(-0.35))
    assert (rows["2 non-streaming resp/s, c=16, store=on"]["before"],
            rows["2 non-streaming resp/s, c=16, store=on"]["after"]) == (40.0, 72.0)
    assert rows["1 streaming, c=1"]["after"] == 300.0  # the replica's CPU, not pooled's 350
    assert (rows["3 agent loop E2E p50 (ms), c=1"]["before"], rows["3 agent loop E2E p50 (ms), c=1"]["after"]) == (
        800.0, 720.0)
    summary = baseline_summary(baseline, current, "benchmarks/results/old.json", "given")
    assert (summary["target"], summary["current_target"]) == (POOLED, MAIN)
    text = render({**current, "baseline": summary})
    section = text[text.index("## Before/after"):text.index("## 0.")]
    assert ("- Not the same Troupe: the baseline's is `troupe-pooled`, this run's `troupe-replica` (pooled host "
            "actors → the replica placement)") in section
    assert "| measure | better | Troupe (`troupe-pooled`), baseline | Troupe (`troupe-replica`), this run | change |" in section
    assert "| 1 streaming TTFT p50 (ms), c=1 | lower | 100.0 | 65.0 | −35% (better) |" in section
    same = render({**current, "baseline": baseline_summary(_doc(), current, "old.json", "given")})
    assert "- Troupe is `troupe-replica` in both runs." in same and "Not the same Troupe" not in same
    # A baseline summary stored before it named the targets compared troupe-pooled with itself.
    legacy = {**current, "baseline": {k: v for k, v in summary.items() if k not in ("target", "current_target")}}
    assert "- Troupe is `troupe-pooled` in both runs." in render(legacy)


@pytest.mark.parametrize("path", _committed_runs())
def test_a_committed_run_as_a_baseline_is_read_for_its_own_main_target(path: str) -> None:
    old = load_results(path)
    target = main_target(old)
    assert target == (old.get("main_target") or POOLED)  # runs record it since troupe-replica
    mine = {r["concurrency"]: r for r in old["scenarios"]["1_streaming"]["rows"] if r["target"] == target}
    assert 16 in mine, f"{path} has no {target} row at c=16"
    ttft = _by_measure(compare(old, _doc("bbbbbbb")))["1 streaming TTFT p50 (ms), c=16"]
    assert (ttft["before"], ttft["after"]) == (mine[16]["summary"]["ttft_ms"]["p50"], 200.0)


def test_the_headline_shows_troupe_pooled_beside_the_main_target() -> None:
    doc = _with_targets(_doc())
    doc["scenarios"]["1_streaming"]["rows"].append(_s1_row(MAIN_PROXY, 16, 75.0, 760.0, 110.0))
    text = render(doc)
    headline = text[text.index("## Headline"):text.index("## Targets")]
    assert ("| measure | bare sim (limit) | Serve floor | Troupe | Troupe ÷ limit | Troupe via proxy | Troupe pooled "
            "| pooled ÷ limit |") in headline
    assert "| 1 streaming TTFT p50 (ms), c=16 | 70.0 | 72.0 | 200.0 | 2.86× | 75.0 | 260.0 | 3.71× |" in headline
    assert "| 2 non-streaming resp/s, c=16, store=off | 280.0 | 250.0 | 55.0 | 0.20× | – | 30.0 | 0.11× |" in headline
    assert "| 3 agent loop E2E p50 (ms), c=1 | 677.0 (critical path) | – | 740.0 | 1.09× | – | – | – |" in headline
    assert "**Troupe** (`troupe-replica`) is the app with the replica placement" in text
    old = render(_doc(main=POOLED))
    assert "Troupe pooled" not in old and "**Troupe** (`troupe-pooled`) is the pooled app" in old


def test_the_targets_judge_the_main_target_whichever_it_is() -> None:
    replica = target_checks(_with_targets(_doc()))  # troupe-pooled rows with other figures beside it
    pooled = target_checks(_with_targets(_doc(main=POOLED), POOLED))  # an older run: pooled is the Troupe
    assert [r["troupe"] for r in replica] == [r["troupe"] for r in pooled]
    assert len([r for r in replica if r["troupe"] is not None]) == 9
    assert "Troupe is `troupe-replica` at its replica's own port" in render(_with_targets(_doc()))
    assert "Troupe is `troupe-pooled` at its replica's own port" in render(_with_targets(_doc(main=POOLED), POOLED))


def _placement(first_ms: float) -> dict:
    return {"conversations_measured": 4, "stopped_because": "reached the cap of 4 conversations", "wall_s": 1.0,
            "first_turn_ms": {"p50": first_ms, "p99": first_ms}, "warm_turn_ms": {"p50": first_ms},
            "memory_per_conversation_mib": None, "estimated_max_live": None, "estimate_basis": "within the noise"}


def test_placement_shows_the_replica_first_and_older_runs_without_it() -> None:
    doc = _doc()
    doc["scenarios"]["5_placement"] = {"replica": _placement(9.0), "pooled": _placement(14.0),
                                       "dedicated": _placement(300.0), "pooled_over_replica_first_turn_p50": 1.56}
    text = render(doc)
    section = text[text.index("## 5. Placement: replica vs pooled vs dedicated"):text.index("## 6.")]
    assert section.index("| replica | 4 | 9.0 |") < section.index("| pooled | 4 | 14.0 |") < section.index(
        "| dedicated | 4 | 300.0 |")
    old = _doc(main=POOLED)
    old["scenarios"]["5_placement"] = {"pooled": _placement(14.0), "dedicated": _placement(300.0)}
    text = render(old)
    section = text[text.index("## 5. Placement: pooled vs dedicated"):text.index("## 6.")]
    assert "| pooled | 4 | 14.0 |" in section and "| replica" not in section


def test_the_harness_measures_the_replica_app_as_the_main_troupe(tmp_path) -> None:
    from benchmarks import profiling, scenario_http, scenario_tools, troupe_server
    from benchmarks.measure import Ctx
    from benchmarks.scenarios import QUICK
    from benchmarks.targets import Lab, Target
    from troupe.runtime.settings import RuntimeSettings

    assert troupe_server.APPS[MAIN_APP] == {"placement": "replica"}
    assert {"pooled", "dedicated", "pooled-task"} < set(troupe_server.APPS)
    for fields in troupe_server.APPS.values():  # each app names its placement, and RuntimeSettings takes it
        assert RuntimeSettings(**{"pool_size": 4, **fields}).placement == fields["placement"]
    assert list(troupe_server.APPS)[-2:] == ["pooled-task", MAIN_APP]  # scenario 7's apps start last
    assert profiling.ROLES["ingress replica (the loop)"] == "ServeReplica:replica:"
    assert scenario_tools.APPS == {MAIN: "actor", "troupe-pooled-task": "task"}
    lab = Lab(scratch=str(tmp_path))
    for name, kind in (("sim", "limit"), ("serve-floor", "floor"), ("troupe-dedicated", "troupe"),
                       ("troupe-pooled-proxy", "troupe"), (POOLED, "troupe"), (MAIN_PROXY, "troupe"),
                       (MAIN, "troupe"), ("smg", "peer")):
        lab.targets[name] = Target(name, f"http://127.0.0.1:1/{name}/v1", "sim", kind)
    ctx = Ctx(lab=lab, defs=QUICK, progress=False)
    assert [t.name for t in scenario_http._order(ctx, *scenario_http.COMPARED)] == [
        "sim", "serve-floor", MAIN, MAIN_PROXY, POOLED, "smg"]
    assert [(t.name, store, label) for t, store, label in scenario_http._throughput_variants(ctx)] == [
        ("sim", None, "sim"), ("serve-floor", None, "serve floor"), (MAIN, True, "troupe store=on"),
        (MAIN, False, "troupe store=off"), (MAIN_PROXY, True, "troupe via proxy store=on"),
        (POOLED, True, "troupe pooled store=on"), (POOLED, False, "troupe pooled store=off"),
        ("smg", True, "smg store=on")]


PERF_REPORT = """\
# To display the perf.data header info, please use --header/--header-only options.
#
# Samples: 2K of event 'cpu-clock:pppH'
#
# Overhead  Shared Object
# ........  ..............................................
#
    67.86%  libpython3.11.so.1.0
    16.43%  [kernel.kallsyms]
     5.09%  libc.so.6
     4.97%  loop.cpython-311-x86_64-linux-gnu.so
     1.47%  _json.cpython-311-x86_64-linux-gnu.so
     1.13%  _raylet.so
     0.98%  _asyncio.cpython-311-x86_64-linux-gnu.so
     0.90%  _http_parser.cpython-311-x86_64-linux-gnu.so
"""


def test_the_profile_splits_the_replicas_cpu_by_code_from_perfs_report() -> None:
    from benchmarks.profiling import _perf_split

    split = _perf_split(PERF_REPORT)
    assert split == {"Python interpreter": 67.9, "kernel": 16.4, "libc": 5.1, "uvloop": 5.0,
                     "other extension modules": 1.9, "json": 1.5, "Ray's core (_raylet)": 1.1}
    assert _perf_split("") == {}
    role = {"processes": 1, "cpu_ms_per_response": 14.0, "native_pct": 60.0, "troupe_cumulative": [], "self": []}
    section = {"tool": "py-spy", "loads": [{"load": "streaming c=16", "responses": 200, "seconds": 10.0,
                                            "roles": {"ingress replica (the loop)": role}, "replica_by_code": split}]}
    from benchmarks.results import _sp

    text = "\n".join(_sp(section))
    assert "The ingress replica's CPU by code (perf): Python interpreter 67.9%, kernel 16.4%" in text
    section["loads"][0]["replica_by_code"] = {}  # perf missing or refused: no line
    assert "by code" not in "\n".join(_sp(section))
