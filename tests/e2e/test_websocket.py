"""WebSocket mode on /v1/responses through the ``openai`` SDK's ``client.responses.connect()``:
in process and on the session's Ray Serve app (direct ingress), and over an app whose model is
the sim behind a recording upstream, to check what a continuation sends the model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai import OpenAI

from tests.servers import RecordingUpstream, recorded_sim, served_local
from troupe.runtime.settings import ModelSpec
from troupe.serve.config import ServerSettings

_ENDS = ("response.completed", "response.failed", "response.incomplete", "response.cancelled")


def _until_end(connection: Any) -> list[Any]:
    """The events of the response under way, through its terminal event."""
    events = []
    for event in connection:
        events.append(event)
        if event.type in _ENDS or (event.type == "error" and event.sequence_number is None):
            return events
    raise AssertionError("the connection closed before the response ended")


def test_a_tool_loop_then_a_continuation_that_sends_only_its_new_input(root: str) -> None:
    client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
    with client.responses.connect() as connection:
        connection.response.create(model="sim", input='my name is Ada [[call calculator {"expression": "6*7"}]]')
        first = _until_end(connection)
        assert [e.sequence_number for e in first] == list(range(len(first)))
        assert first[0].type == "response.created" and first[-1].type == "response.completed"
        done = first[-1].response
        assert [o.type for o in done.output] == ["function_call", "function_call_output", "message"]
        assert done.output_text == "calculator -> 42"

        connection.response.create(model="sim", input="and again [[history]]", previous_response_id=done.id)
        second = _until_end(connection)[-1].response
        said = second.output_text.split(" | ")  # every user message the model got: the thread came with it
        assert [m.split(" [[")[0] for m in said] == ["my name is Ada", "and again"]
    assert client.responses.retrieve(second.id).previous_response_id == done.id


def test_a_bad_event_is_an_error_event_naming_the_parameter_and_the_connection_goes_on(root: str) -> None:
    client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
    with client.responses.connect() as connection:
        connection.send({"type": "response.create", "model": "sim", "input": "x", "temperature": "hot"})
        [error] = _until_end(connection)
        assert error.type == "error" and error.status == 400 and error.error.param == "temperature"
        connection.send({"type": "response.create", "model": "sim", "input": "x", "background": True})
        assert _until_end(connection)[0].error.param == "background"
        connection.send({"type": "response.dance"})
        assert _until_end(connection)[0].error.param == "type"
        connection.response.create(model="sim", input="[[say still here]]")
        assert _until_end(connection)[-1].response.output_text == "still here"


def test_lanes_run_side_by_side_and_their_events_carry_their_stream_id(root: str) -> None:
    client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
    with client.responses.connect() as connection:
        for lane in ("a", "b"):
            connection.send(
                {"type": "response.create", "model": "sim", "input": f"[[say lane {lane}]]", "stream_id": lane}
            )
        ends: dict[str, str] = {}
        for event in connection:
            assert event.stream_id in ("a", "b")
            if event.type == "response.completed":
                ends[event.stream_id] = event.response.output_text
                if len(ends) == 2:
                    break
    assert ends == {"a": "lane a", "b": "lane b"}


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[str, RecordingUpstream]]:
    with recorded_sim() as recorded:
        yield recorded


@pytest.fixture(scope="module")
def keyed(upstream: tuple[str, RecordingUpstream]) -> Iterator[str]:
    models = (ModelSpec(name="m", base_url=upstream[0], upstream_model="sim"),)
    yield from served_local(ServerSettings(api_keys={"sk-ws-key": "acme"}), models=models)


def test_an_unstored_response_is_continued_on_its_connection_with_the_whole_thread_upstream(keyed, upstream) -> None:
    _, recording = upstream
    client = OpenAI(base_url=f"{keyed}/v1", api_key="sk-ws-key", max_retries=0)
    with client.responses.connect() as connection:
        connection.response.create(model="m", input="[[say first answer]] first question", store=False)
        first = _until_end(connection)[-1].response
        since = len(recording.bodies)
        connection.response.create(model="m", input="[[say second answer]] second question", store=False,
                                   previous_response_id=first.id)  # fmt: skip
        second = _until_end(connection)[-1].response
        assert second.status == "completed" and second.output_text == "second answer"
        assert second.previous_response_id == first.id, "the response names what it continued"
        [sent] = recording.bodies[since:]
        said = [(m["role"], m["content"]) for m in sent["messages"]]
        assert said == [("user", "[[say first answer]] first question"), ("assistant", "first answer"),
                        ("user", "[[say second answer]] second question")]  # fmt: skip
    # Over HTTP, or on another connection, an unstored response is not there to continue.
    with client.responses.connect() as other:
        other.response.create(model="m", input="more", previous_response_id=first.id)
        [error] = _until_end(other)
        assert error.type == "error" and (error.status, error.error.code) == (400, "previous_response_not_found")


def test_a_failed_continuation_evicts_the_unstored_response_it_continued(keyed) -> None:
    """The Open Responses rule (its suite's websocket-failed-continuation-evicts-cache)."""
    client = OpenAI(base_url=f"{keyed}/v1", api_key="sk-ws-key", max_retries=0)
    with client.responses.connect() as connection:
        connection.response.create(model="m", input="[[say ok]] remember ember", store=False)
        first = _until_end(connection)[-1].response
        connection.response.create(model="m", store=False, previous_response_id=first.id, input=[
            {"type": "function_call_output", "call_id": "call_missing", "output": "no such call"}])  # fmt: skip
        [refused] = _until_end(connection)
        assert refused.type == "error" and refused.status == 400
        connection.response.create(model="m", store=False, previous_response_id=first.id, input="go on")
        [error] = _until_end(connection)
        assert error.type == "error" and error.error.code == "previous_response_not_found"


def test_the_upgrade_is_refused_without_a_good_key(keyed) -> None:
    client = OpenAI(base_url=f"{keyed}/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(Exception) as caught:  # noqa: PT011 - whatever the SDK raises for an HTTP 401
        with client.responses.connect() as connection:
            connection.response.create(model="m", input="x")
            _until_end(connection)
    assert "401" in str(caught.value)


def test_a_dropped_connection_cancels_its_running_response(keyed) -> None:
    """A 20 s turn of a conversation, its connection closed after the first delta: the turn is
    cancelled (the conversation's next turn, which would wait for it, completes at once) and it
    stored nothing, as when an SSE client leaves."""
    client = OpenAI(base_url=f"{keyed}/v1", api_key="sk-ws-key", max_retries=0, timeout=15)
    conversation = client.conversations.create()
    created = None
    with client.responses.connect() as connection:
        connection.response.create(model="m", input="[[latency itl=100]] [[tokens 200]]", conversation=conversation.id)
        for event in connection:
            if event.type == "response.created":
                created = event.response.id
            if event.type == "response.output_text.delta":
                break  # and the connection closes
    assert created is not None
    follow = client.responses.create(model="m", input="[[say next]]", conversation=conversation.id)
    assert follow.output_text == "next"
    items = client.conversations.items.list(conversation.id, order="asc").data
    assert [item.content[0].text for item in items] == ["[[say next]]", "next"]
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created)


def _steer_run(connection: Any, target: str) -> list[Any]:
    """Events through the successor's terminal event (the steered response's, then its successor's)."""
    events, ends = [], 0
    for event in connection:
        events.append(event)
        if event.type in _ENDS:
            ends += 1
            if ends == 2:
                return events
    raise AssertionError("the connection closed first")


def test_steering_ends_the_response_after_its_tools_and_a_successor_goes_on_with_the_input(keyed, upstream) -> None:
    _, recording = upstream
    client = OpenAI(base_url=f"{keyed}/v1", api_key="sk-ws-key", max_retries=0)
    with client.responses.connect() as connection:
        # The model calls sleep (a second), and would then call calculator in a second round.
        connection.response.create(
            model="m", input='[[call sleep {"ms": 1000}]] [[then calculator {"expression": "1+1"}]]'
        )
        first, events = None, []
        for event in connection:
            events.append(event)
            if event.type == "response.created":
                first = event.response.id
            if event.type == "response.function_call_arguments.done":
                break  # the call is made; it runs for a second
        assert first is not None
        since = len(recording.bodies)
        connection.response.steer(previous_response_id=first, input="change of plan: [[say steered]]")
        events += _steer_run(connection, first)
    kinds = [e.type for e in events]
    accepted = events[kinds.index("response.steer.accepted")]
    assert accepted.steer.previous_response_id == first and accepted.steer.id.startswith("steer_")
    ended = kinds.index("response.incomplete")
    own = [e for e in events[: ended + 1] if e.type != "error"]
    assert [e.sequence_number for e in own] == list(range(len(own)))  # one numbering, the steer event in it
    stopped = events[ended].response
    assert stopped.incomplete_details.reason == "steered"
    assert [o.type for o in stopped.output] == ["function_call", "function_call_output"]  # the tool ran, answered
    successor = events[-1].response
    assert events[ended + 1].type == "response.created" and events[ended + 1].sequence_number == 0
    assert successor.previous_response_id == first and successor.output_text == "steered"
    [sent] = recording.bodies[since:]  # the successor's one call: the thread, then the steering input
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "tool", "user"]
    assert sent["messages"][-1]["content"] == "change of plan: [[say steered]]"


def test_steering_a_response_waiting_for_a_client_tool_is_pending_then_goes_first(keyed) -> None:
    client = OpenAI(base_url=f"{keyed}/v1", api_key="sk-ws-key", max_retries=0)
    lookup = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}
    with client.responses.connect() as connection:
        connection.response.create(model="m", input="[[latency ttft=1500]] [[call lookup]]", tools=[lookup])
        for event in connection:
            if event.type == "response.created":
                first = event.response.id
                connection.response.steer(previous_response_id=first, input="and hurry [[history]]")
                break
        events = []
        for event in connection:
            events.append(event)
            if event.type == "response.steer.pending":
                break
        kinds = [e.type for e in events]
        assert kinds.index("response.steer.accepted") < kinds.index("response.completed") < len(kinds) - 1
        pending = events[-1]
        call = next(o for o in events[kinds.index("response.completed")].response.output if o.type == "function_call")
        assert pending.reason == "waiting_for_required_input"
        assert [(r.type, r.call_id) for r in pending.required_input] == [("function_call_output", call.call_id)]
        answer = {"type": "function_call_output", "call_id": call.call_id, "output": "found"}
        connection.response.create(model="m", input=[answer], previous_response_id=first, tools=[lookup])
        follow = _until_end(connection)[-1].response
    said = follow.output_text.split(" | ")  # the user messages the model got: the first, then the steering input
    assert said == ["[[latency ttft=1500]] [[call lookup]]", "and hurry [[history]]"]


def test_steering_what_is_not_running_here_fails_saying_why(keyed) -> None:
    client = OpenAI(base_url=f"{keyed}/v1", api_key="sk-ws-key", max_retries=0)
    with client.responses.connect() as connection:
        connection.response.steer(previous_response_id="resp_nothing", input="hello")
        assert next(iter(connection)).error.code == "response_not_found"
        connection.response.create(model="m", input="[[say done]]")
        done = _until_end(connection)[-1].response
        connection.response.steer(previous_response_id=done.id, input="too late")
        failed = next(iter(connection))
        assert failed.type == "response.steer.failed" and failed.error.code == "response_already_completed"
        assert failed.steer.input == "too late"
        connection.response.create(model="m", input="[[latency ttft=1000]] [[say slow]]")
        for event in connection:
            if event.type == "response.created":
                connection.send({"type": "response.steer", "previous_response_id": event.response.id,
                                 "input": [{"role": "assistant", "content": "no"}]})  # fmt: skip
            if event.type == "response.steer.failed":
                assert event.error.code == "invalid_input" and "user role" in event.error.message
                break
        _until_end(connection)


@pytest.mark.parametrize("app", ["replica", "pooled"])
def test_steering_reaches_the_host_that_runs_the_response(troupe_apps, app: str) -> None:
    """In the ingress replica's own host, and on a pooled host actor: the steer goes where the
    response runs. (REPLICAS2's test balancer forwards HTTP only, not WebSockets.)"""
    client = OpenAI(base_url=f"{troupe_apps[app]}/v1", api_key="unused", max_retries=0)
    with client.responses.connect() as connection:
        connection.response.create(model="sim", input='[[call sleep {"ms": 800}]] [[then now]]')
        created = None
        for event in connection:
            if event.type == "response.created":
                created = event.response.id
            if event.type == "response.function_call_arguments.done":
                assert created is not None
                connection.response.steer(previous_response_id=created, input="[[say turned]]")
                break
        events = _steer_run(connection, created)
    ends = [e for e in events if e.type in _ENDS]
    assert [e.type for e in ends] == ["response.incomplete", "response.completed"]
    assert ends[0].response.incomplete_details.reason == "steered" and ends[1].response.output_text == "turned"


def test_a_socket_through_serves_proxy(serve_port, troupe_apps) -> None:
    """The same socket through Serve's HTTP proxy (the app's route prefix), not the replica's port."""
    client = OpenAI(base_url=f"http://127.0.0.1:{serve_port}/replica/v1", api_key="unused", max_retries=0)
    with client.responses.connect() as connection:
        connection.response.create(model="sim", input='[[call calculator {"expression": "2*21"}]]')
        assert _until_end(connection)[-1].response.output_text == "calculator -> 42"


def test_each_response_on_a_socket_takes_a_running_slot() -> None:
    """One slot, none to wait in: a second lane's response while the first runs is a 429 error
    event, as a second POST would be."""
    for root in served_local(ServerSettings(max_active_responses=1, max_waiting_responses=0)):
        client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
        with client.responses.connect() as connection:
            connection.send({"type": "response.create", "model": "sim", "stream_id": "a",
                             "input": "[[latency ttft=1500]] [[say slow]]"})  # fmt: skip
            for event in connection:
                if event.type == "response.created":
                    connection.send({"type": "response.create", "model": "sim", "input": "x", "stream_id": "b"})
                if event.type == "error":
                    assert (event.status, event.stream_id) == (429, "b")
                    break
            assert _until_end(connection)[-1].response.output_text == "slow"
