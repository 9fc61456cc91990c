"""benchmarks/results.py: the before/after against a baseline run (compare, its rendering, the
pick of a baseline) and benchmarks/run.py's --baseline, on hand-made results with the structure
of a real run's JSON. Nothing is measured."""

from __future__ import annotations

import copy
import glob
import json
import os

import pytest

from benchmarks import run
from benchmarks.results import baseline_summary, compare, load_results, main, pick_baseline, render

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
         troupe_cpu1: float = 300.0, rps16_on: float = 40.0, cpu16_on: float = 40.0, agent: float = 740.0) -> dict:
    return {
        "schema": "troupe-benchmarks/1", "created_at": created, "commit": commit, "worktree_dirty": False,
        "quick": False, "machine": dict(MACHINE), "definitions": {"streaming_input": "x"}, "command": "run",
        "peers": {}, "idle_cpu_cores": {"sim": 0.0, "troupe": 0.2}, "notes": [], "wall_s": 10.0,
        "scenarios": {
            "1_streaming": {"load_average_at_start": [1.0, 2.0, 3.0], "rows": [
                _s1_row("sim", 1, 50.0, 720.0, 30.0, {"ttft_ms_p50": 1.0, "e2e_ms_p50": 1.0}),
                _s1_row("troupe-pooled", 1, ttft1, 740.0, troupe_cpu1,
                        {"ttft_ms_p50": round(ttft1 / 50.0, 3), "e2e_ms_p50": round(740.0 / 720.0, 3)}),
                _s1_row("sim", 16, 70.0, 730.0, 7.5, {"ttft_ms_p50": 1.0, "e2e_ms_p50": 1.0}),
                _s1_row("troupe-pooled", 16, 200.0, 990.0, 100.0, {"ttft_ms_p50": 2.857, "e2e_ms_p50": 1.356}),
            ]},
            "2_throughput": {"load_average_at_start": [1.5, 2.0, 3.0], "rows": [
                _s2_row("sim", 16, None, 280.0, 2.8, {"throughput": 1.0, "cpu_per_response": 1.0}),
                _s2_row("troupe-pooled", 16, True, rps16_on, cpu16_on,
                        {"throughput": round(rps16_on / 280.0, 3), "cpu_per_response": round(cpu16_on / 2.8, 3)}),
                _s2_row("troupe-pooled", 16, False, 55.0, 28.0, {"throughput": 0.196, "cpu_per_response": 10.0}),
            ]},
            "3_agent_loop": {"load_average_at_start": None,
                             "critical_path": {"turn1": 215.0, "turn2": 262.0, "tool_ms": 200, "critical_path_ms": 677.0},
                             "rows": [{"target": "troupe-pooled", "concurrency": 1, "summary": _summary(e2e=agent),
                                       "vs_critical_path": round(agent / 677.0, 3), "breakdown_p50": {}}]},
        },
    }


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
        _s1_row("troupe-pooled", 64, 1000.0, 3200.0, 85.0, {"ttft_ms_p50": 9.09}),
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
                                      {"scenarios": {"1_streaming": {"rows": [{"target": "troupe-pooled"}]}}}])
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
