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
that ``troupe serve`` uses by default; the webhooks view's test serves an in-process app of its
own (``credentials_keys`` and a URL policy that lets local receivers in, as tests/e2e/test_webhooks.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, cast

import pytest
from click.testing import CliRunner
from openai import OpenAI

from tests.servers import WebhookReceiver, serve_app, served_local, wait_for
from troupe.cli import cli
from troupe.runtime.settings import WebhookSettings
from troupe.serve.config import ServerSettings
from troupe.storage.credentials import new_key

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
    """What the dumped DOM holds: the view's state, the Gantt chart's step bars, a session's span bars,
    and the table rows that name a webhook endpoint or delivery (their attributes, and their cells' text
    under ``"cells"``)."""

    def __init__(self) -> None:
        super().__init__()
        self.view: dict[str, str | None] = {}
        self.bars: list[dict[str, str | None]] = []
        self.spans: list[dict[str, str | None]] = []
        self.code_runs = 0
        self.figures: list[str] = []
        self.rows: list[dict[str, Any]] = []
        self._cells: list[str] | None = None  # the cells of the row being read

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id") == "view":
            self.view = values
        if tag == "tr" and ("data-delivery" in values or "data-endpoint" in values):
            self._cells = []
            self.rows.append({**values, "cells": self._cells})
        if tag == "td" and self._cells is not None:
            self._cells.append("")
        if tag == "rect" and "step" in (values.get("class") or "").split():
            self.bars.append(values)
        if tag == "rect" and "span" in (values.get("class") or "").split():
            self.spans.append(values)
        if tag == "div" and "code_interpreter_call" in (values.get("class") or "").split():
            self.code_runs += 1
        if tag == "img" and "figure" in (values.get("class") or "").split():
            self.figures.append(values.get("src") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self._cells = None

    def handle_data(self, data: str) -> None:
        if self._cells:
            self._cells[-1] += data


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


def test_the_webhooks_view_shows_each_endpoints_deliveries_with_their_status_and_error(chromium, tmp_path) -> None:
    ok, refusing = WebhookReceiver(), WebhookReceiver([400])  # a 400 fails a delivery at once
    settings = WebhookSettings(allowed_urls=("http://127.0.0.1:*",))
    with serve_app(ok) as ok_url, serve_app(refusing) as refusing_url:
        server = served_local(ServerSettings(), storage_path=str(tmp_path / "troupe.duckdb"),
                              credentials_keys=(new_key(),), webhooks=settings)  # fmt: skip
        root = next(server)
        try:
            client = OpenAI(base_url=f"{root}/v1", api_key="-", max_retries=0)
            good = client.webhooks.create(name="good hook", url=f"{ok_url}/in", event_types=["response.completed"])
            bad = client.webhooks.create(name="bad hook", url=f"{refusing_url}/in", event_types=["response.completed"])
            client.responses.create(model="sim", input="hello", background=True)  # one event, two deliveries

            def log(endpoint_id: str) -> list[Any]:
                return client.get(f"/webhook_endpoints/{endpoint_id}/deliveries", cast_to=cast(Any, object))["data"]

            wait_for(lambda: all(log(ep.id) and log(ep.id)[0]["status"] != "pending" for ep in (good, bad)),
                     what="both deliveries ended")  # fmt: skip
            [delivered], [failed] = log(good.id), log(bad.id)
            assert (delivered["status"], failed["status"]) == ("delivered", "failed")
            assert failed["last_error"] == "HTTP 400: receiver says no"

            page = rendered(chromium, tmp_path, f"{root}/console#/webhooks")
            assert (page.view.get("data-state"), page.view.get("data-view")) == ("ready", "webhooks"), page.view
            # name, url, event types, signing secret hint, created
            endpoints = {r["data-endpoint"]: r["cells"][:4] for r in page.rows if "data-delivery" not in r}
            assert endpoints == {
                good.id: ["good hook", f"{ok_url}/in", "response.completed", good.signing_secret_hint],
                bad.id: ["bad hook", f"{refusing_url}/in", "response.completed", bad.signing_secret_hint],
            }  # fmt: skip
            rows = {r["data-endpoint"]: r for r in page.rows if "data-delivery" in r}
            assert rows.keys() == {good.id, bad.id}, page.rows
            expected = (
                (good.id, delivered, "200", "", "delivered "),
                (bad.id, failed, "400", failed["last_error"], "gave up "),
            )
            for endpoint_id, entry, code, error, ended in expected:
                row = rows[endpoint_id]
                assert (row["data-delivery"], row["data-status"]) == (entry["id"], entry["status"])
                # created, event type, event, delivery (webhook-id), status, attempts, last status, last error, when
                cells = row["cells"]
                shown = [entry["event_type"], entry["event_id"], entry["id"], entry["status"], "1", code, error]
                assert cells[1:8] == shown, cells
                assert cells[8].startswith(ended), cells

            one = rendered(chromium, tmp_path, f"{root}/console#/webhooks/{bad.id}")
            assert (one.view.get("data-state"), one.view.get("data-view")) == ("ready", "webhook"), one.view
            [only] = one.rows
            assert (only["data-delivery"], only["data-status"]) == (failed["id"], "failed")
            assert only["cells"][7] == "HTTP 400: receiver says no"
        finally:
            server.close()
