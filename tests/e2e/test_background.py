"""Background responses and cancel through the ``openai`` SDK, on every deployment (``url``:
in-process, and Ray Serve with replica and pooled placement; what finds a running response's
host, cancel and follow, on the dedicated placement too)."""

from __future__ import annotations

import threading
import time

import httpx
import openai
import pytest

from tests.servers import wait_for

SLEEP_30_S = '[[call sleep {"ms": 30000}]]'


def status_of(client: openai.OpenAI, response_id: str) -> str:
    return client.responses.retrieve(response_id).status


def test_background_create_answers_queued_then_reads_in_progress_then_completed(client):
    started = client.responses.create(model="sim", input="[[latency ttft=1500]] [[say done in the background]]",
                                      background=True)  # fmt: skip
    assert started.status == "queued" and started.background is True, "OpenAI's create answer is always queued"
    assert started.output == [] and started.completed_at is None and started.usage is None
    wait_for(lambda: status_of(client, started.id) == "in_progress", what="the response in progress")
    wait_for(lambda: status_of(client, started.id) == "completed", what="the background response")
    done = client.responses.retrieve(started.id)
    assert done.output_text == "done in the background" and done.background is True


def test_a_background_stream_opens_queued_then_in_progress(client):
    events = list(client.responses.create(model="sim", input="[[tokens 5]]", background=True, stream=True))
    assert [(e.type, e.response.status) for e in events[:3]] == [
        ("response.created", "queued"), ("response.queued", "queued"), ("response.in_progress", "in_progress")]  # fmt: skip
    assert type(events[1]).__name__ == "ResponseQueuedEvent", "the SDK parses it as its own event type"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.completed"
    replayed = list(client.responses.retrieve(events[0].response.id, stream=True))  # from its stored log
    assert [e.to_dict() for e in replayed] == [e.to_dict() for e in events]


def test_the_sdk_stream_helper_accumulates_a_background_stream(client):
    with client.responses.stream(model="sim", input="[[say one two]]", background=True) as stream:
        types = [event.type for event in stream]
        final = stream.get_final_response()
    assert types[:3] == ["response.created", "response.queued", "response.in_progress"]
    assert final.status == "completed" and final.output_text == "one two" and final.background is True


@pytest.mark.every_placement  # the conversation's own actor is found to cancel or follow it
def test_cancel_a_queued_response_and_it_never_runs(client):
    conversation = client.conversations.create()
    busy = client.responses.create(model="sim", input=SLEEP_30_S, conversation=conversation.id, background=True)
    queued = client.responses.create(model="sim", input="[[say never]]", conversation=conversation.id,
                                     background=True)  # fmt: skip
    assert queued.status == "queued" and status_of(client, queued.id) == "queued", "behind the busy turn"
    assert client.responses.cancel(queued.id).status == "cancelled"
    assert status_of(client, queued.id) == "cancelled"
    client.responses.cancel(busy.id)
    log = list(client.responses.retrieve(queued.id, stream=True))  # to its end: once stored, from its log
    assert [e.type for e in log][:2] == ["response.created", "response.queued"]
    assert not {"response.completed", "response.failed"} & {e.type for e in log}, "it never completed"
    done = client.responses.retrieve(queued.id)
    assert done.status == "cancelled" and done.output == []


@pytest.mark.every_placement  # the conversation's own actor is found to cancel or follow it
def test_cancel_an_in_progress_response_prevents_its_completion(client):
    started = client.responses.create(model="sim", input="[[latency ttft=3000]] [[say never]]", background=True)
    assert started.status == "queued"
    wait_for(lambda: status_of(client, started.id) == "in_progress", what="the response in progress")
    assert client.responses.cancel(started.id).status == "cancelled"
    log = list(client.responses.retrieve(started.id, stream=True))  # to its end
    assert [e.type for e in log][:3] == ["response.created", "response.queued", "response.in_progress"]
    assert "response.completed" not in {e.type for e in log}, "it never completed"
    assert client.responses.retrieve(started.id).status == "cancelled"


def test_background_needs_store(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="sim", input="x", background=True, store=False)
    assert err.value.body["param"] == "background"


@pytest.mark.every_placement  # the conversation's own actor is found to cancel or follow it
def test_cancel_a_running_response_stops_its_tool_call(client):
    started = client.responses.create(model="sim", input=SLEEP_30_S, background=True)

    def tool_running() -> bool:
        return any(item.type == "function_call" for item in client.responses.retrieve(started.id).output)

    wait_for(tool_running, what="the sleep tool call to start")
    before = time.monotonic()
    cancelled = client.responses.cancel(started.id)
    assert cancelled.status == "cancelled"
    assert time.monotonic() - before < 10, "the cancel waited for the 30 s tool"
    wait_for(lambda: status_of(client, started.id) == "cancelled", what="the cancelled response")
    traces = httpx.get(f"{client.base_url}responses/{started.id}/step_traces").json()
    tool = [t for t in traces if t["kind"] == "tool"]
    assert len(tool) == 1 and tool[0]["duration_s"] < 10 and tool[0]["error"] == "cancelled"
    assert client.responses.cancel(started.id).status == "cancelled", "cancelling again answers the same"


def test_cancel_a_finished_response_is_refused(client):
    done = client.responses.create(model="sim", input="[[say hi]]")
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.cancel(done.id)
    assert "'completed'" in err.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_0123456789abcdef")


@pytest.mark.every_placement  # the conversation's own actor is found to cancel or follow it
def test_cancel_a_foreground_stream_from_another_connection(client):
    types: list[str] = []
    first_call = threading.Event()
    response_id: list[str] = []

    def read() -> None:
        with client.responses.stream(model="sim", input=SLEEP_30_S) as stream:
            for event in stream:
                types.append(event.type)
                if event.type == "response.created":
                    response_id.append(event.response.id)
                if event.type == "response.output_item.added":
                    first_call.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert first_call.wait(20), "the stream's tool call did not start"
    assert client.responses.cancel(response_id[0]).status == "cancelled"
    reader.join(15)
    assert not reader.is_alive(), "the stream did not end"
    assert "response.completed" not in types
    wait_for(lambda: status_of(client, response_id[0]) == "cancelled", what="the cancelled response")


@pytest.mark.every_placement  # the conversation's own actor is found to cancel or follow it
def test_background_stream_dropped_and_resumed_equals_the_whole_stream(client):
    first = []
    stream = client.responses.create(model="sim", input="[[latency itl=20]] [[tokens 30]]", background=True,
                                     stream=True)  # fmt: skip
    for event in stream:
        first.append(event)
        if len(first) == 6:
            break
    stream.close()  # the client drops; the run goes on
    response_id = first[0].response.id
    rest = list(client.responses.retrieve(response_id, stream=True, starting_after=first[-1].sequence_number))
    assert rest[-1].type == "response.completed"
    whole = list(client.responses.retrieve(response_id, stream=True))  # finished: replayed from its log
    assert [e.to_dict() for e in first + rest] == [e.to_dict() for e in whole]
    assert [e.sequence_number for e in whole] == list(range(len(whole)))
    assert whole[-1].response.output_text == client.responses.retrieve(response_id).output_text


def test_a_finished_foreground_stream_replays_as_it_was_streamed(client):
    seen = list(client.responses.create(model="sim", input="[[think plan]] [[tokens 40]]", stream=True))
    replayed = list(client.responses.retrieve(seen[-1].response.id, stream=True))  # from its packed log
    assert [e.to_dict() for e in replayed] == [e.to_dict() for e in seen]
    assert len(seen) > 40 and seen[-1].type == "response.completed"
