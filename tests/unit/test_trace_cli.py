"""``troupe trace``: the table and the PNG of a response's steps, read from a DuckDB file.

The PNG's content is checked through the figure the command drew (its bars), not its pixels.
(The HTTP path, against a running server, is tested in tests/e2e/test_console_browser.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import troupe.console.plot
from tests.unit.test_console_timeline import four_parallel_tools
from tests.unit.test_store_contract import make_record
from troupe.cli import cli
from troupe.storage import DuckDBStore


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = tmp_path / "t.duckdb"
    store = DuckDBStore(path)
    store.write_responses([make_record("resp_1", tenant="acme", traces=four_parallel_tools())])
    store.close()
    return str(path)


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list:
    """The figures the command draws."""
    drawn = []
    draw = troupe.console.plot.timeline_figure

    def recording(*args, **kwargs):
        drawn.append(draw(*args, **kwargs))
        return drawn[-1]

    monkeypatch.setattr(troupe.console.plot, "timeline_figure", recording)
    return drawn


def test_png_has_one_bar_per_step(db: str, tmp_path: Path, figures: list) -> None:
    png = tmp_path / "trace.png"
    result = CliRunner().invoke(cli, ["trace", "resp_1", "--db", db, "--png", str(png)])
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (figure,) = figures
    (ax,) = figure.axes
    (bars,) = ax.containers
    steps = four_parallel_tools()
    assert len(bars) == len(steps) == 6
    origin = steps[0].started_at
    for rect, step in zip(bars, steps, strict=True):
        assert rect.get_x() == pytest.approx(step.started_at - origin, abs=1e-6)
        assert rect.get_width() == pytest.approx(step.duration_s, abs=1e-6)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["model · sim"] + ["tool · sleep"] * 4 + ["model · sim"]
    # The critical path (the model calls and the longest tool) is outlined, the failed tool red.
    outlined = [i for i, rect in enumerate(bars) if rect.get_linewidth() and rect.get_edgecolor()[3] > 0]
    assert outlined == [0, 3, 5]
    assert bars[4].get_facecolor()[:3] == pytest.approx((0xE4 / 255, 0x57 / 255, 0x56 / 255))
    # The four tools overlap in time: side by side, on rows of their own.
    tools = bars[1:5]
    assert max(r.get_x() for r in tools) < min(r.get_x() + r.get_width() for r in tools)
    assert len({r.get_y() for r in bars}) == 6


def test_the_table_marks_the_critical_path(db: str, figures: list) -> None:
    result = CliRunner().invoke(cli, ["trace", "resp_1", "--db", db, "--tenant", "acme"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "resp_1: 6 steps over 470.0 ms; critical path 3 steps, 450.0 ms of work (*)"
    rows = [line.split("|") for line in lines[3:]]
    assert [(r[0].strip(), r[1].strip(), r[5].strip()) for r in rows] == [
        ("0", "model", "*"), ("1", "tool", ""), ("2", "tool", ""), ("3", "tool", "*"), ("4", "tool", ""),
        ("5", "model", "*"),
    ]  # fmt: skip
    assert rows[4][6].strip() == "boom"
    assert figures == []  # no --png, no chart


def test_unknown_response_or_file(db: str, tmp_path: Path) -> None:
    missing = CliRunner().invoke(cli, ["trace", "resp_missing", "--db", db])
    assert missing.exit_code == 1 and "no response 'resp_missing'" in missing.output
    other_tenant = CliRunner().invoke(cli, ["trace", "resp_1", "--db", db, "--tenant", "beta"])
    assert other_tenant.exit_code == 1 and "has no step traces" in other_tenant.output
    no_file = CliRunner().invoke(cli, ["trace", "resp_1", "--db", str(tmp_path / "nope.duckdb")])
    assert no_file.exit_code == 1 and "no database at" in no_file.output
