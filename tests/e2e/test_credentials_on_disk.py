"""No MCP credential reaches disk, tried as an attacker with the disk would: `troupe serve` runs
MCP requests with ``authorization`` and ``headers`` (non-streamed, streamed, background, an
approval, a background run resumed after ``kill -9`` of the whole server), stops, and then
every byte of every file it could have written is searched: the DuckDB file, its WAL, the
journal, temp spill files, the server's log, and the Ray session's logs and spill directories.

The server seals runs' credentials with a key (``TROUPE_CREDENTIALS_KEYS``), so that the run
killed mid-call resumes with them; without a key nothing at all is kept
(tests/integration/test_resume_mcp.py covers both ways in process).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI

from tests.mcp_servers import McpTestServer, serve_mcp
from tests.servers import wait_for
from tests.side_effects import executions
from troupe.storage.credentials import new_key

from .test_ingress import _healthy, _kill_9_tree, free_port_range

TOKEN = f"sk-disk-probe-{uuid.uuid4().hex}"
"""The bearer token the MCP server requires (sent as ``authorization``)."""
HEADER = f"hdr-disk-probe-{uuid.uuid4().hex}"
"""A second credential, sent as a header."""
LABEL = f"probe{uuid.uuid4().hex[:8]}"
"""Not a secret: the search must find it (it is echoed and stored), or it proves nothing."""


@pytest.fixture(scope="module")
def guarded_server() -> Iterator[McpTestServer]:
    with serve_mcp(token=TOKEN) as server:
        yield server


@pytest.fixture
def ray_tmpdir() -> Iterator[Path]:
    """The Ray temp dir of the servers this test starts (short: Ray's socket paths must fit in 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="trc", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _start(config: Path, port: int, env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    out = log.open("ab")
    server = subprocess.Popen(
        [sys.executable, "-m", "troupe", "serve", "--port", str(port), "--config", str(config)],
        env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    out.close()
    root = f"http://127.0.0.1:{port}"
    wait_for(lambda: server.poll() is not None or _healthy(root), timeout_s=120, what=f"{root}/health")
    assert server.poll() is None, log.read_text()[-3000:]
    return server, root


def _stop(server: subprocess.Popen) -> None:
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout=90)
    except subprocess.TimeoutExpired:
        _kill_9_tree(server)


def _files_holding(roots: list[Path], needle: bytes) -> tuple[list[str], int]:
    """The files under ``roots`` whose bytes hold ``needle``, and how many files were read."""
    found, read = [], 0
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink() and not path.name.endswith((".sock", "_store")):
                try:
                    data = path.read_bytes()
                except OSError:  # a socket or FIFO Ray left
                    continue
                read += 1
                if needle in data:
                    found.append(str(path))
    return found, read


@pytest.mark.timeout(300)  # two starts of troupe serve, each up to a minute on a loaded 2-core machine
def test_no_credential_is_on_disk_after_every_kind_of_mcp_request_and_a_resumed_run(
    tmp_path: Path, guarded_server: McpTestServer, ray_tmpdir: Path
) -> None:
    db, gate = str(tmp_path / "side.sqlite"), tmp_path / "gate"
    data = tmp_path / "data"
    data.mkdir()
    config = tmp_path / "troupe.toml"
    config.write_text(
        f'[runtime]\nstorage_path = "{data / "troupe.duckdb"}"\npool_size = 1\n\n'
        '[mcp]\nallowed_urls = ["http://127.0.0.1:*"]\n'
    )
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_TMPDIR": str(ray_tmpdir),
           "TROUPE_CREDENTIALS_KEYS": (key := new_key())}  # fmt: skip
    for name in [n for n in env if n.startswith("RAY_SERVE_")]:  # the test session's, not this server's
        del env[name]
    log = tmp_path / "serve.log"

    def tool(**options) -> dict:
        return {"type": "mcp", "server_label": LABEL, "server_url": guarded_server.url, "require_approval": "never",
                "authorization": TOKEN, "headers": {"X-Probe-Key": HEADER}, **options}  # fmt: skip

    add = '[[call add {"a": 2, "b": 40}]]'
    hold = f"[[call hold {json.dumps({'db': db, 'key': 'h', 'path': str(gate)})}]]"
    server, root = _start(config, free_port_range(1), env, log)
    try:
        client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
        # Non-streamed, streamed, background: the server lets each in only with the token.
        assert client.responses.create(model="sim", input=add, tools=[tool()]).output_text == "add -> 42"
        events = list(client.responses.create(model="sim", input=add, tools=[tool()], stream=True))
        assert events[-1].type == "response.completed" and events[-1].response.output_text == "add -> 42"
        background = client.responses.create(model="sim", input=add, tools=[tool()], background=True)
        wait_for(lambda: client.responses.retrieve(background.id).status == "completed", what="the background run")
        # An approval: asked, then approved in a second request that carries the credentials again.
        asked = client.responses.create(model="sim", input=add, tools=[tool(require_approval="always")])
        approval = asked.output[-1]
        assert approval.type == "mcp_approval_request"
        approved = client.responses.create(
            model="sim", previous_response_id=asked.id, tools=[tool(require_approval="always")],
            input=[{"type": "mcp_approval_response", "approval_request_id": approval.id, "approve": True}],
        )  # fmt: skip
        assert approved.output_text == "add -> 42"
        # A background run killed with the whole server during its MCP call.
        lost = client.responses.create(model="sim", input=hold, tools=[tool()], background=True)
        wait_for(lambda: executions(db, "h") == 1, timeout_s=60, what="the MCP call running")
    finally:
        _kill_9_tree(server)
    gate.touch()
    server, root = _start(config, free_port_range(1), env, log)  # the same files, the same key
    try:
        client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
        wait_for(lambda: client.responses.retrieve(lost.id).status != "in_progress", timeout_s=90, what="the resume")
        resumed = client.responses.retrieve(lost.id)
        assert resumed.status == "completed", resumed.error
        assert resumed.output_text == "hold -> h passed"
        assert executions(db, "h") == 2, "resumed with its credentials: the server let the call in again"
    finally:
        _stop(server)

    roots = [tmp_path, ray_tmpdir]  # the database, WAL, journal, temp files, serve.log; Ray's logs and spill
    found, read = _files_holding(roots, LABEL.encode())
    assert read > 50 and any(p.startswith(str(ray_tmpdir)) for p in _files_holding([ray_tmpdir], b"raylet")[0])
    assert any(p.startswith(str(data)) for p in found), "the search finds what is stored in plain text"
    for secret in (TOKEN, HEADER, key):  # the sealing key is a secret too
        holding, _ = _files_holding(roots, secret.encode())
        assert holding == [], f"a credential is on disk in {holding}"
