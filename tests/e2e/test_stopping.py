"""A stopping replica over HTTP (``troupe.serve.stopping``), on the in-process app.

What ``troupe serve`` does to each ingress replica on SIGTERM or Ctrl-C, before it stops Ray
(the whole stop is ``tests/e2e/test_ingress.py``): new requests answer 503 with
``Retry-After``, the requests in flight finish within the grace, and a request that only
follows a background run is not waited for.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.servers import LazyRuntime, serve_app, wait_for
from troupe.serve.app import create_app
from troupe.serve.config import ServerSettings


@dataclass
class Served:
    url: str
    app: Any
    runtime: LazyRuntime

    def stop(self, grace_s: float) -> concurrent.futures.Future[bool]:
        """Start the replica's stop on the server's event loop (as ``TroupeIngress.stop`` does)."""
        assert self.runtime.loop is not None, "the app has served a request"
        return asyncio.run_coroutine_threadsafe(self.app.state.stopping.stop(grace_s), self.runtime.loop)


@pytest.fixture
def served() -> Iterator[Served]:
    """A fresh app each time: a stop is for good."""
    runtime = LazyRuntime()
    app = create_app(runtime, ServerSettings())
    with serve_app(app) as url:
        try:
            yield Served(url, app, runtime)
        finally:
            runtime.close()


class Stream:
    """An SSE stream read in a thread; ``started`` once its first event is in."""

    def __init__(self, method: str, url: str, body: dict[str, Any] | None = None) -> None:
        self.lines: list[str] = []
        self.started = threading.Event()
        self.ended = threading.Event()
        self._leave = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(method, url, body), daemon=True)
        self._thread.start()
        assert self.started.wait(30), "the stream started"

    def _read(self, method: str, url: str, body: dict[str, Any] | None) -> None:
        try:
            with httpx.stream(method, url, json=body, timeout=30) as r:
                for line in r.iter_lines():
                    self.lines.append(line)
                    if line.startswith("event: "):
                        self.started.set()
                    if self._leave.is_set():
                        return
        finally:
            self.started.set()
            self.ended.set()

    def close(self) -> None:
        """Leave the stream at its next line (the server then cancels its turn)."""
        self._leave.set()
        self._thread.join(30)

    def events(self) -> list[str]:
        assert self.ended.wait(30), "the stream ended"
        return [line.removeprefix("event: ") for line in self.lines if line.startswith("event: ")]


def test_a_stopping_replica_refuses_new_requests_503_and_lets_a_stream_in_flight_finish(served):
    stream = Stream("POST", f"{served.url}/v1/responses",
                    {"model": "sim", "input": "[[latency itl=20]] [[tokens 40]]", "stream": True})  # fmt: skip
    stopped = served.stop(grace_s=30)
    wait_for(lambda: served.app.state.stopping.stopping, what="the stop begun")
    refused = httpx.post(f"{served.url}/v1/responses", json={"model": "sim", "input": "late"}, timeout=10)
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "server_shutting_down"
    assert int(refused.headers["retry-after"]) >= 1
    assert "x-should-retry" not in refused.headers, "the openai SDK retries it"
    assert httpx.get(f"{served.url}/health", timeout=10).status_code == 503, "a load balancer stops sending"
    assert stream.events()[-1] == "response.completed", "the stream in flight finished"
    assert stopped.result(timeout=30) is True


def test_a_stop_does_not_wait_for_followers_of_background_runs(served):
    slow = {"model": "sim", "input": "[[latency ttft=200 itl=100]] [[tokens 100]]", "stream": True}
    follower = Stream("POST", f"{served.url}/v1/responses", {**slow, "background": True})
    created = next(line for line in follower.lines if line.startswith("data: "))
    response_id = json.loads(created.removeprefix("data: "))["response"]["id"]
    again = Stream("GET", f"{served.url}/v1/responses/{response_id}?stream=true")
    stopped = served.stop(grace_s=30)
    assert stopped.result(timeout=20) is True
    assert not follower.ended.is_set() and not again.ended.is_set(), "both still stream (10 s of tokens)"
    follower.close()
    again.close()


def test_a_stop_gives_a_longer_stream_its_grace_and_no_more(served):
    stream = Stream("POST", f"{served.url}/v1/responses",
                    {"model": "sim", "input": "[[latency itl=100]] [[tokens 300]]", "stream": True})  # fmt: skip
    assert served.stop(grace_s=0.2).result(timeout=20) is False
    assert not stream.ended.is_set(), "troupe serve stops Ray next, which cuts it"
    stream.close()
