"""Failures over HTTP: a killed conversation host, a restarted storage actor."""

from __future__ import annotations

import json
import os
import signal
import threading

import httpx
import openai
import pytest
import ray
from openai import OpenAI

from tests.mcp_servers import serve_mcp
from tests.servers import PROBE, wait_for
from tests.side_effects import executions
from troupe.runtime.ray.storage_actor import STORAGE_ACTOR_NAME

from .conftest import PLACEMENTS

HOST_ACTOR_PLACEMENTS = ("pooled", "dedicated")
"""Placements whose conversation hosts are actors of their own (with "replica", the host is
the ingress replica itself)."""


def named_actors(prefix: str, *, excluding: tuple[str, ...] = ()) -> list:
    """Live named actors of the e2e apps whose names start with ``prefix`` (and with none of ``excluding``)."""
    found = []
    for actor in ray.util.list_named_actors(all_namespaces=True):
        name = actor["name"]
        if actor["namespace"].startswith("e2e-") and name.startswith(prefix) and not name.startswith(excluding):
            found.append(ray.get_actor(actor["name"], namespace=actor["namespace"]))
    return found


@pytest.fixture(params=PLACEMENTS)
def placement(request) -> str:
    return request.param


@pytest.fixture
def root(placement, troupe_apps) -> str:
    return troupe_apps[placement]


@pytest.fixture(params=HOST_ACTOR_PLACEMENTS)
def actor_root(request, troupe_apps) -> str:
    return troupe_apps[request.param]


def test_killed_host_is_a_clear_500_and_the_next_turn_continues(actor_root):
    client = OpenAI(base_url=f"{actor_root}/v1", api_key="unused", max_retries=0)
    first = client.responses.create(model="sim", input="keep this")
    outcome: dict = {}

    def slow_turn() -> None:
        try:
            client.responses.create(model="sim", input="[[latency ttft=5000]] [[say late]]", previous_response_id=first.id)
        except openai.APIStatusError as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=slow_turn)
    thread.start()
    hosts: list = []
    wait_for(lambda: bool(hosts.extend(_running_hosts()) or hosts), what="the turn running on a host")
    for host in hosts:
        ray.kill(host, no_restart=False)
    thread.join(timeout=30)
    error = outcome["error"]
    assert error.status_code == 500
    assert error.response.headers["x-should-retry"] == "false"
    assert error.body["code"] == "server_error" and "host failed" in error.body["message"]
    follow = client.responses.create(model="sim", input="[[history]]", previous_response_id=first.id)
    assert follow.output_text == "keep this | [[history]]"


def _running_hosts() -> list:
    """The host actors (of every e2e app) running a turn now; one that is restarting (a test
    before killed it) or gone is running none."""
    hosts = named_actors("troupe-host-") + named_actors("troupe-conv-")
    running = []
    for host, ping in [(h, h.ping.remote()) for h in hosts]:
        try:
            if ray.get(ping, timeout=30):
                running.append(host)
        except (ray.exceptions.ActorUnavailableError, ray.exceptions.RayActorError):
            continue
    return running


def test_storage_actor_restart_keeps_every_response(root, placement, troupe_app_settings):
    """Only this app's storage actor is killed: the other apps' next tests must not meet theirs restarting."""
    client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
    old = client.responses.create(model="sim", input="[[say before the restart]]")
    storage = ray.get_actor(STORAGE_ACTOR_NAME, namespace=troupe_app_settings[placement].namespace)
    ray.kill(storage, no_restart=False)  # restarts and reopens the same DuckDB file

    wait_for(lambda: _served(root, old.id), timeout_s=60, what="the old response served again")
    assert client.responses.retrieve(old.id).output_text == "before the restart"
    # The next turn runs on the host (an actor of its own but with "replica"), which had not
    # called the storage actor since it restarted.
    follow = client.responses.create(model="sim", input="[[history]]", previous_response_id=old.id)
    assert follow.output_text == "[[say before the restart]] | [[history]]"


def test_a_turn_that_ends_while_the_storage_actor_restarts_is_stored(root, placement, troupe_app_settings):
    """The storage actor is killed just before a turn: the host's first call after it may reach
    the old process (Ray says "the actor was restarted"). The turn waits for the new one and
    is stored once, not failed as if its host had died."""
    client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
    old = client.responses.create(model="sim", input="[[say before the restart]]")
    storage = ray.get_actor(STORAGE_ACTOR_NAME, namespace=troupe_app_settings[placement].namespace)
    ray.kill(storage, no_restart=False)
    follow = client.responses.create(model="sim", input="[[history]]", previous_response_id=old.id)
    assert follow.output_text == "[[say before the restart]] | [[history]]"
    # A read may itself meet the restart (Ray's ActorUnavailableError on the ingress's first call
    # to the new actor): it answers a 503 with Retry-After, which the SDK retries, never a 500.
    answers: list[httpx.Response] = []
    wait_for(lambda: _read(root, follow.id, answers) == 200, timeout_s=60, what="the turn's response served")
    for refused in answers[:-1]:
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "storage_unavailable"
        assert refused.headers["retry-after"] == "1" and "x-should-retry" not in refused.headers
    patient = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=5)
    assert patient.responses.retrieve(follow.id).output_text == follow.output_text


def _read(root: str, response_id: str, answers: list[httpx.Response]) -> int | None:
    """GET the response once, the answer appended to ``answers``; its status (None: no answer)."""
    try:
        answers.append(PROBE.get(f"{root}/v1/responses/{response_id}", timeout=5))
    except httpx.TransportError:
        return None
    return answers[-1].status_code


def _served(root: str, response_id: str) -> bool:
    try:
        return PROBE.get(f"{root}/v1/responses/{response_id}", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def _kill_9(actor) -> None:
    """SIGKILL the process of ``actor`` (Ray restarts a pooled host; a dedicated one stays dead)."""
    pid = ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))
    os.kill(pid, signal.SIGKILL)


def test_a_background_run_survives_kill_9_of_its_host_twice(actor_root, tmp_path):
    """Killed during a tool call, then during the model call after the tools: the run completes
    with the output of an uncrashed run, and no tool that is not idempotent ran twice."""
    client = OpenAI(base_url=f"{actor_root}/v1", api_key="unused", max_retries=0)
    db, gate = str(tmp_path / "side.sqlite"), tmp_path / "gate"
    script = ("[[latency ttft=1500]] " + _call("record", db=db, key="r")
              + " " + _call("gate_again", db=db, key="g", path=str(gate)))  # fmt: skip
    started = client.responses.create(model="sim", input=script, background=True)

    def steps() -> list[str]:
        return _stored_steps(started.id)

    # 1. During the tool step: record's result is stored, gate_again waits for its gate.
    wait_for(lambda: "tool" in steps() and executions(db, "g") == 1, what="record stored, gate_again running")
    for host in _running_hosts():
        _kill_9(host)
    wait_for(lambda: executions(db, "g") == 2, timeout_s=60, what="the run resumed on a new host")
    gate.touch()
    # 2. During the second model call (1.5 s to its first token), once the tool step is stored.
    wait_for(lambda: "tools" in steps(), what="the tool step stored")
    for host in _running_hosts():
        _kill_9(host)
    wait_for(lambda: client.responses.retrieve(started.id).status == "completed", timeout_s=60, what="the run done")
    done = client.responses.retrieve(started.id)
    assert executions(db, "r") == 1, "record (not idempotent) ran exactly once"
    assert executions(db, "g") == 2, "gate_again (idempotent) ran again once, after the first kill"
    assert done.output_text == "record -> recorded r\ngate_again -> g passed"
    uncrashed = client.responses.create(model="sim", input=script)
    assert _shape(done.output) == _shape(uncrashed.output)
    events = list(client.responses.retrieve(started.id, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events))), "no gap, no duplicate"
    added = [e.item.id for e in events if e.type == "response.output_item.added"]
    assert len(added) == len(set(added)) and events[-1].type == "response.completed"
    assert [(e.type, e.response.status) for e in events if e.type in OPENING] == [
        ("response.created", "queued"), ("response.queued", "queued"), ("response.in_progress", "in_progress")
    ], "opened once, queued, through both resumes"
    model_steps = [t for t in _traces(actor_root, started.id) if t["kind"] == "model"]
    assert len(model_steps) == 2, "the first model call was not made again"


def _gated_script(tmp_path) -> tuple[str, str, object]:
    db, gate = str(tmp_path / "side.sqlite"), tmp_path / "gate"
    return _call("gate_again", db=db, key="g", path=str(gate)), db, gate


def _read_in_thread(stream) -> tuple[threading.Thread, list]:
    events: list = []
    thread = threading.Thread(target=lambda: events.extend(stream), daemon=True)
    thread.start()
    return thread, events


def test_a_foreground_stream_whose_host_dies_goes_on_in_the_background(troupe_apps, tmp_path):
    # Pooled only: a dedicated host restarts the same way (the kill -9 test above runs on both).
    client = OpenAI(base_url=f"{troupe_apps['pooled']}/v1", api_key="unused", max_retries=0)
    script, db, gate = _gated_script(tmp_path)
    thread, events = _read_in_thread(client.responses.create(model="sim", input=script, stream=True))
    # gate_again is idempotent: it starts while its turn is being written. Kill once it is stored.
    wait_for(lambda: executions(db, "g") == 1 and bool(events) and "model" in _stored_steps(events[0].response.id),
             what="the tool running, its turn stored")  # fmt: skip
    for host in _running_hosts():
        _kill_9(host)
    thread.join(timeout=60)
    *seen, error, failed = events
    assert error.type == "error" and failed.type == "response.failed", "the client hears of the failure as before"
    last = seen[-1].sequence_number
    assert f"goes on in the background from its last step: retrieve it, or stream it again with starting_after={last}" \
        in error.message  # fmt: skip
    gate.touch()
    response_id = seen[0].response.id
    wait_for(lambda: client.responses.retrieve(response_id).status == "completed", timeout_s=60, what="the resumed turn")
    assert client.responses.retrieve(response_id).output_text == "gate_again -> g passed"
    rest = list(client.responses.retrieve(response_id, stream=True, starting_after=last))
    whole = list(client.responses.retrieve(response_id, stream=True))
    assert [e.sequence_number for e in whole] == list(range(len(whole)))
    assert [e.to_dict() for e in seen + rest] == [e.to_dict() for e in whole], "reconnected, the client misses nothing"


def test_a_background_stream_is_followed_on_through_its_hosts_death(troupe_apps, tmp_path):
    client = OpenAI(base_url=f"{troupe_apps['pooled']}/v1", api_key="unused", max_retries=0)
    script, db, gate = _gated_script(tmp_path)
    thread, events = _read_in_thread(client.responses.create(model="sim", input=script, stream=True, background=True))
    wait_for(lambda: executions(db, "g") == 1, what="the tool running")
    for host in _running_hosts():
        _kill_9(host)
    wait_for(lambda: executions(db, "g") == 2, timeout_s=60, what="the run resumed")
    gate.touch()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert [e for e in events if e.type in ("error", "response.failed")] == []
    whole = list(client.responses.retrieve(events[0].response.id, stream=True))
    assert [e.to_dict() for e in events] == [e.to_dict() for e in whole], "one unbroken stream, as if nothing happened"
    assert [e.type for e in whole[:3]] == list(OPENING) and whole[0].response.status == "queued"
    assert whole[-1].type == "response.completed"


OPENING = ("response.created", "response.queued", "response.in_progress")
"""How a background response's events open (the first two ``queued``)."""


def _host_namespace_storage(response_id: str):
    """The storage actor of the namespace whose host runs ``response_id`` now."""
    for actor in ray.util.list_named_actors(all_namespaces=True):
        if actor["name"] == STORAGE_ACTOR_NAME and actor["namespace"].startswith("e2e-"):
            storage = ray.get_actor(STORAGE_ACTOR_NAME, namespace=actor["namespace"])
            if ray.get(storage.call.remote("get_run", ("", response_id), {})) is not None:
                return storage
    raise LookupError(f"no storage actor knows the run {response_id}")


def _stored_steps(response_id: str) -> list[str]:
    """The kinds of the steps stored of ``response_id``'s run so far (none before its run is)."""
    try:
        storage = _host_namespace_storage(response_id)
    except LookupError:
        return []
    return [s.data["kind"] for s in ray.get(storage.call.remote("run_steps", ("", response_id), {}))]


def _call(name: str, **arguments) -> str:
    return f"[[call {name} {json.dumps(arguments)}]]"


def _shape(output) -> list[tuple]:
    """An output without its ids."""
    return [(i.type, getattr(i, "name", None), getattr(i, "arguments", None), getattr(i, "output", None),
             [p.text for p in getattr(i, "content", None) or []]) for i in output]  # fmt: skip


def _traces(root: str, response_id: str) -> list[dict]:
    return httpx.get(f"{root}/v1/responses/{response_id}/step_traces", timeout=10).json()


def test_a_background_run_keeps_its_mcp_credentials_in_memory_through_its_hosts_death(troupe_apps, tmp_path):
    """A pooled host killed during a call to a server that needs a token: the ingress runtime,
    which holds the request, resumes the run with its credentials (its row keeps none)."""
    token = "sk-held-in-memory-4b1d"
    client = OpenAI(base_url=f"{troupe_apps['pooled']}/v1", api_key="unused", max_retries=0)
    db, gate = str(tmp_path / "side.sqlite"), tmp_path / "gate"
    with serve_mcp(token=token) as server:
        tool = {"type": "mcp", "server_label": "side", "server_url": server.url, "require_approval": "never",
                "authorization": token}  # fmt: skip
        started = client.responses.create(
            model="sim", input=_call("hold", db=db, key="h", path=str(gate)), tools=[tool], background=True
        )
        wait_for(lambda: executions(db, "h") == 1, what="the MCP call running")
        row = ray.get(_host_namespace_storage(started.id).call.remote("get_run", ("", started.id), {}))
        assert token not in json.dumps(row.request) and row.credentials == "in-memory"
        connections = {h._actor_id for h in named_actors("troupe-mcp-")}
        assert connections, "the host reached the server through a connection actor"
        for host in _running_hosts():
            _kill_9(host)
        wait_for(lambda: executions(db, "h") == 2, timeout_s=60, what="the run resumed, the token accepted")
        assert connections <= {h._actor_id for h in named_actors("troupe-mcp-")}, "the connections outlived the host"
        gate.touch()
        wait_for(lambda: client.responses.retrieve(started.id).status != "in_progress", timeout_s=60, what="the run")
    done = client.responses.retrieve(started.id)
    assert done.status == "completed", done.error
    assert done.output_text == "hold -> h passed"
