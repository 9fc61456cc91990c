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
        [sent] = recording.bodies[since:]
        said = [(m["role"], m["content"]) for m in sent["messages"]]
        assert said == [("user", "[[say first answer]] first question"), ("assistant", "first answer"),
                        ("user", "[[say second answer]] second question")]  # fmt: skip
    # Over HTTP, or on another connection, an unstored response is not there to continue.
    with client.responses.connect() as other:
        other.response.create(model="m", input="more", previous_response_id=first.id)
        [error] = _until_end(other)
        assert error.type == "error" and (error.status, error.error.code) == (400, "previous_response_not_found")


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
