"""Which process a client talks to: the ingress replica itself (direct ingress), or Serve's proxy.

The proof is the TCP connection: while a stream is open, the server end of the client's
socket belongs to some process on this machine, and its title (Ray sets it) names the
actor: ``ray::ServeReplica:…`` for the replica, ``ray::ProxyActor`` for the proxy.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import urllib.parse
from pathlib import Path

import httpx
import psutil
import pytest
from openai import OpenAI

from tests.servers import wait_for
from tests.side_effects import executions
from troupe.serve.deployment import free_port_range

STREAM_BODY = json.dumps({"model": "sim", "input": "[[tokens 32]] [[latency itl=5]]", "stream": True})


def _server_process_of(sock_name: tuple[str, int]) -> psutil.Process:
    """The local process holding the other end of the TCP connection whose client end is ``sock_name``."""
    for conn in psutil.net_connections(kind="tcp"):
        if conn.raddr and (conn.raddr.ip, conn.raddr.port) == sock_name and conn.pid is not None:
            return psutil.Process(conn.pid)
    raise LookupError(f"no local process serves the connection from {sock_name}")


def _title_while_streaming(root: str) -> str:
    """Open a stream at ``root``, read its first event, and name the process serving it."""
    url = urllib.parse.urlsplit(root)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.request("POST", f"{url.path}/v1/responses", STREAM_BODY, {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200
        assert response.readline().startswith(b"event: response.created")
        title = " ".join(_server_process_of(conn.sock.getsockname()).cmdline())
        rest = response.read().decode()
        assert "event: response.completed" in rest and rest.rstrip().endswith("data: [DONE]")
        return title
    finally:
        conn.close()


@pytest.mark.parametrize("placement", ["replica", "pooled", "dedicated"])
def test_a_stream_is_served_by_the_ingress_replica_itself(troupe_apps, placement) -> None:
    title = _title_while_streaming(troupe_apps[placement])
    assert title.startswith(f"ray::ServeReplica:{placement}:TroupeIngress"), title


def test_the_proxy_path_still_serves_the_same_apps(troupe_apps, serve_port) -> None:
    # ingress = "proxy": the same app through Serve's proxy, which is then in the path.
    title = _title_while_streaming(f"http://127.0.0.1:{serve_port}/pooled")
    assert title.startswith("ray::ProxyActor"), title


def test_troupe_serve_as_users_start_it(tmp_path: Path) -> None:
    """`troupe serve` on a fresh local Ray: the API on --port from the replica, proxy elsewhere, clean stop."""
    port = free_port_range(1)
    config = tmp_path / "troupe.toml"
    config.write_text(f'[runtime]\nstorage_path = "{tmp_path / "troupe.duckdb"}"\npool_size = 1\n')
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    # The shared test session's direct-ingress ports are not this server's.
    for name in [n for n in env if n.startswith("RAY_SERVE_")]:
        del env[name]
    # `python -m troupe`: the code under test, whether or not the console script was reinstalled.
    troupe = [sys.executable, "-m", "troupe"]
    server = subprocess.Popen(
        [*troupe, "serve", "--port", str(port), "--config", str(config)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    root = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: server.poll() is not None or _healthy(root), timeout_s=120, what=f"{root}/health")
        assert server.poll() is None, server.stdout.read()
        client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
        events = list(client.responses.create(model="sim", input="[[say served directly]]", stream=True))
        assert events[-1].type == "response.completed"
        assert events[-1].response.output_text == "served directly"
        assert _title_while_streaming(root).startswith("ray::ServeReplica:troupe:TroupeIngress")
        # A second server on the same port is refused with a clear message, before Ray starts.
        clash = subprocess.run(
            [*troupe, "serve", "--port", str(port), "--config", str(config)],
            env=env, capture_output=True, text=True, timeout=60,
        )
        assert clash.returncode == 2
        assert f"cannot listen on 127.0.0.1:{port}" in clash.stderr
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            output, _ = server.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            output, _ = server.communicate()
            pytest.fail(f"troupe serve did not stop on SIGTERM within 90 s:\n{output[-3000:]}")
    assert server.returncode == 0, output[-3000:]
    assert f"Troupe is serving on http://127.0.0.1:{port}/v1 (direct ingress)" in output


def _healthy(root: str) -> bool:
    try:
        return httpx.get(f"{root}/health", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.parametrize("placement", ["replica", "pooled", "dedicated"])
def test_a_client_that_goes_away_cancels_its_turn(troupe_apps, placement) -> None:
    """Through the replica's own server too: turns of a conversation run one after another, so
    a second turn that completes in seconds shows the first, 20 s long, was cancelled."""
    root = troupe_apps[placement]
    client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0, timeout=15)
    conversation = client.conversations.create()
    body = {"model": "sim", "input": "[[latency itl=100]] [[tokens 200]]", "stream": True,
            "conversation": conversation.id}
    with httpx.stream("POST", f"{root}/v1/responses", json=body, timeout=30) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("event: response.output_text.delta"):
                break  # the turn is running; leaving the block closes the connection
    follow = client.responses.create(model="sim", input="[[say next]]", conversation=conversation.id)
    assert follow.output_text == "next"
    # A cancelled turn stores nothing: the conversation holds only the second turn.
    items = client.conversations.items.list(conversation.id, order="asc").data
    assert [item.content[0].text for item in items] == ["[[say next]]", "next"]


def _start_troupe_serve(config: Path, port: int) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    for name in [n for n in env if n.startswith("RAY_SERVE_")]:  # the test session's, not this server's
        del env[name]
    server = subprocess.Popen(
        [sys.executable, "-m", "troupe", "serve", "--port", str(port), "--config", str(config)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    root = f"http://127.0.0.1:{port}"
    wait_for(lambda: server.poll() is not None or _healthy(root), timeout_s=120, what=f"{root}/health")
    assert server.poll() is None, server.stdout.read()
    return server, root


def _kill_9_tree(server: subprocess.Popen) -> None:
    """SIGKILL the server and every process it started (Ray's too), as a crash of the machine's
    Troupe would; then wait until they are all gone (the DuckDB file is free again)."""
    processes = [psutil.Process(server.pid), *psutil.Process(server.pid).children(recursive=True)]
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(processes, timeout=30)
    server.communicate()


def test_a_background_run_completes_after_the_whole_server_is_killed_and_restarted(tmp_path: Path) -> None:
    db, gate = str(tmp_path / "side.sqlite"), tmp_path / "gate"
    config = tmp_path / "troupe.toml"
    config.write_text(
        f'[runtime]\nstorage_path = "{tmp_path / "troupe.duckdb"}"\npool_size = 1\n\n'
        '[[tools]]\nname = "gate_again"\ntarget = "tests.side_effects:gate"\nidempotent = true\n'
    )
    server, root = _start_troupe_serve(config, free_port_range(1))
    try:
        client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
        arguments = json.dumps({"db": db, "key": "g", "path": str(gate)})
        started = client.responses.create(model="sim", input=f"[[call gate_again {arguments}]]", background=True)
        wait_for(lambda: executions(db, "g") == 1, timeout_s=60, what="the tool call running")
    finally:
        _kill_9_tree(server)
    gate.touch()
    server, root = _start_troupe_serve(config, free_port_range(1))  # the same DuckDB file
    try:
        client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
        wait_for(lambda: client.responses.retrieve(started.id).status == "completed", timeout_s=60, what="the run")
        done = client.responses.retrieve(started.id)
        assert done.output_text == "gate_again -> g passed"
        assert executions(db, "g") == 2, "the idempotent call in flight ran again, once"
        events = list(client.responses.retrieve(started.id, stream=True))
        assert [e.sequence_number for e in events] == list(range(len(events))), "no gap, no duplicate"
        assert events[0].type == "response.created" and events[-1].type == "response.completed"
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            _kill_9_tree(server)
