"""Which process a client talks to: the ingress replica itself (direct ingress), or Serve's proxy
(``troupe serve`` as users run it, through a stop and crashes: tests/e2e/test_troupe_serve.py).

The proof is the TCP connection: while a stream is open, the server end of the
client's socket belongs to some process on this machine, and its title (Ray sets it) names
the actor: ``ray::ServeReplica:…`` for the replica, ``ray::ProxyActor`` for the proxy.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse

import httpx
import psutil
import pytest
from openai import OpenAI

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
