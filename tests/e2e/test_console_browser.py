"""The console in a real browser: headless Chromium loads /console from a running Troupe.

One response runs four parallel tool calls (the ``sim`` model's ``[[call sleep …]]`` cues,
four in one message make one model turn with four calls). Chromium opens the console's page
for it; the DOM it rendered (``--dump-dom``, once the page's fetches are answered under
``--virtual-time-budget``) must hold four overlapping tool bars, read back from their
``data-start``/``data-end`` attributes, not from pixels. A screenshot of the same page is
kept as a test artifact, in ``$TROUPE_TEST_ARTIFACTS`` (default ``tests/artifacts/``).

No Python package drives the browser: Debian's ``chromium`` runs as a subprocess. The test
skips only when no Chromium is installed (``make test`` installs it where it can, as root).
It reuses the session's Serve deployment (tests/e2e/conftest.py), under the replica placement
that ``troupe serve`` uses by default.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from openai import OpenAI

from troupe.cli import cli

REPO = Path(__file__).resolve().parents[2]
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FOUR_SLEEPS = "[[latency ttft=60]] " + " ".join('[[call sleep {"ms": 300}]]' for _ in range(4))
SCREENSHOT = "console-response.png"


@pytest.fixture(scope="module")
def chromium() -> str:
    """The Chromium executable: ``$TROUPE_CHROMIUM``, else the first of :data:`BROWSERS` on the PATH."""
    found = os.environ.get("TROUPE_CHROMIUM") or next(filter(None, map(shutil.which, BROWSERS)), None)
    if not found:
        pytest.skip("no Chromium found (install Debian's chromium package, as `make test` does as root, "
                    "or set TROUPE_CHROMIUM to a Chromium or Chrome executable)")  # fmt: skip
    return found


@pytest.fixture(scope="module")
def artifacts() -> Path:
    directory = Path(os.environ.get("TROUPE_TEST_ARTIFACTS") or REPO / "tests" / "artifacts")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def headless(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run Chromium headless once (a fresh profile; no sandbox, as root in a container)."""
    command = [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
        "--hide-scrollbars", f"--user-data-dir={profile}", "--window-size=1280,1000",
        # Virtual time stops while fetches are pending: the page's JSON is in when it runs out.
        "--virtual-time-budget=15000", *args,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=90, check=True)


class Rendered(HTMLParser):
    """What the dumped DOM holds: the view's state, the Gantt chart's step bars, a session's span bars."""

    def __init__(self) -> None:
        super().__init__()
        self.view: dict[str, str | None] = {}
        self.bars: list[dict[str, str | None]] = []
        self.spans: list[dict[str, str | None]] = []
        self.code_runs = 0
        self.figures: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id") == "view":
            self.view = values
        if tag == "rect" and "step" in (values.get("class") or "").split():
            self.bars.append(values)
        if tag == "rect" and "span" in (values.get("class") or "").split():
            self.spans.append(values)
        if tag == "div" and "code_interpreter_call" in (values.get("class") or "").split():
            self.code_runs += 1
        if tag == "img" and "figure" in (values.get("class") or "").split():
            self.figures.append(values.get("src") or "")


def rendered(chromium: str, tmp_path: Path, url: str) -> Rendered:
    """The page's DOM once its view is drawn (a run that ended first is run again)."""
    for attempt in range(3):
        page = Rendered()
        page.feed(headless(chromium, tmp_path / f"profile-dom-{attempt}", "--dump-dom", url).stdout)
        if page.view.get("data-state") != "loading":
            return page
    raise AssertionError(f"the console never finished loading {url}")


def test_four_parallel_tools_are_four_overlapping_bars(chromium, artifacts, troupe_apps, tmp_path) -> None:
    root = troupe_apps["replica"]
    client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
    response = client.responses.create(model="sim", input=FOUR_SLEEPS)
    assert response.status == "completed"
    assert [item.type for item in response.output].count("function_call") == 4

    url = f"{root}/console#/responses/{response.id}"
    page = rendered(chromium, tmp_path, url)
    assert (page.view.get("data-state"), page.view.get("data-view")) == ("ready", "response"), page.view
    tools = [b for b in page.bars if b["data-kind"] == "tool"]
    models = [b for b in page.bars if b["data-kind"] == "model"]
    assert len(tools) == 4 and len(models) == 2, page.bars
    spans = [(float(b["data-start"]), float(b["data-end"])) for b in tools]
    assert all(end - start >= 0.29 for start, end in spans), spans  # each slept 300 ms
    assert max(start for start, _ in spans) < min(end for _, end in spans), f"not overlapping: {spans}"
    assert len({b["y"] for b in tools}) == 4, "each parallel call on a row of its own"
    # The critical path: both model calls and one of the four tools.
    assert [b["data-critical"] for b in models] == ["true", "true"]
    assert sorted(b["data-critical"] for b in tools) == ["false", "false", "false", "true"]

    shot = artifacts / SCREENSHOT
    shot.unlink(missing_ok=True)
    headless(chromium, tmp_path / "profile-shot", f"--screenshot={shot}", url)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # `troupe trace` reads the same steps from the same server, over HTTP.
    png = tmp_path / "trace.png"
    result = CliRunner().invoke(cli, ["trace", response.id, "--url", f"{root}/v1", "--png", str(png)])
    assert result.exit_code == 0, result.output
    assert result.output.count("| tool ") == 4 and png.exists()


def test_a_code_interpreter_call_shows_its_code_and_its_figure(chromium, troupe_apps, tmp_path) -> None:
    root = troupe_apps["replica"]
    client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
    code = "import matplotlib.pyplot as plt\nplt.plot([3, 1, 2])"
    response = client.responses.create(model="sim", input=f"[[python]]{code}[[/python]]",
                                       tools=[{"type": "code_interpreter", "container": {"type": "auto"}}],
                                       include=["code_interpreter_call.outputs"])  # fmt: skip
    call = response.output[0]
    try:
        page = rendered(chromium, tmp_path, f"{root}/console#/responses/{response.id}")
        assert page.code_runs == 1 and len(page.figures) == 1, (page.code_runs, page.figures[:1])
        assert page.figures[0] == call.outputs[-1].url and page.figures[0].startswith("data:image/png;base64,")
        assert [b["data-kind"] for b in page.bars].count("tool") == 1, "the run is a tool step"
    finally:
        client.containers.delete(call.container_id)


def test_a_shell_call_shows_its_commands_and_their_outcomes(chromium, troupe_apps, tmp_path) -> None:
    root = troupe_apps["replica"]
    client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
    response = client.responses.create(model="sim", input="[[shell]]echo shown\nexit 3[[/shell]]",
                                       tools=[{"type": "shell", "environment": {"type": "container_auto"}}])  # fmt: skip
    try:
        dom = headless(chromium, tmp_path / "profile-shell", "--dump-dom",
                       f"{root}/console#/responses/{response.id}").stdout  # fmt: skip
        assert 'class="item shell_call"' in dom and "$ echo shown\n$ exit 3" in dom
        assert 'class="item shell_call_output"' in dom and "shown\n[exit code 0]\n[exit code 3]" in dom
    finally:
        client.containers.delete(response.output[0].environment.container_id)


def test_a_sessions_subagents_are_side_by_side_on_its_timeline(chromium, troupe_apps, tmp_path) -> None:
    root = troupe_apps["replica"]
    client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
    task = '{"task": "[[call sleep {\\"ms\\": 300}]]"}'
    agent = {"model": "sim", "multi_agent": {"enabled": True, "max_concurrent_subagents": 2}}
    script = f"[[call create_subagent {task}]] [[call create_subagent {task}]] [[then wait_for_subagents {{}}]]"
    with client.beta.agents.sessions.create(environment={"type": "none"}, agent=agent, input=script,
                                            stream=True) as events:  # fmt: skip
        for event in events:
            if event.type == "agent.session.turn.completed":
                break
    try:
        page = rendered(chromium, tmp_path, f"{root}/console#/sessions/{event.session_id}")
        assert (page.view.get("data-state"), page.view.get("data-view")) == ("ready", "session"), page.view
        by_id = {b["data-span"]: b for b in page.spans}
        sleeps = [b for b in page.spans if b["data-name"] == "execute_tool sleep"]
        assert len(sleeps) == 2, [b["data-name"] for b in page.spans]
        for sleep in sleeps:  # under a subagent's turn, under the create that made it
            turn = by_id[by_id[sleep["data-parent"]]["data-parent"]]
            assert (turn["data-kind"], by_id[turn["data-parent"]]["data-name"]) == ("turn", "execute_tool create_subagent")
        spans = [(float(b["data-start"]), float(b["data-end"])) for b in sleeps]
        assert max(start for start, _ in spans) < min(end for _, end in spans), f"not overlapping: {spans}"
    finally:
        client.beta.agents.sessions.delete(event.session_id)
