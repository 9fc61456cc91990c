"""Loop guards through the ``openai`` SDK, in process and on the session's Ray Serve app: a
request's guard stops the sim's scripted loop, streamed and not, and a bad one is a 400."""

from __future__ import annotations

import openai
import pytest
from openai import OpenAI


def _client(root: str) -> OpenAI:
    return OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)


def test_a_requests_guard_stops_a_loop_that_alternates_streamed_and_not(root: str) -> None:
    client = _client(root)
    guards = {"loop_guards": {"alternate": 2}}
    stopped = client.responses.create(model="sim", input="[[cycle calculator now]]", extra_body=guards)
    assert stopped.status == "incomplete" and stopped.incomplete_details is not None
    assert stopped.incomplete_details.reason == "max_messages"
    assert stopped.incomplete_details.model_extra == {"loop_guard": "alternate"}
    calls = [o.name for o in stopped.output if o.type == "function_call"]
    assert calls == ["calculator", "now", "calculator", "now"] and stopped.output[-1].type == "message"
    assert client.responses.retrieve(stopped.id).incomplete_details == stopped.incomplete_details

    # The SDK's stream helper waits for response.completed; the raw stream shows the end as sent.
    events = list(
        client.responses.create(model="sim", input="[[cycle calculator now]]", stream=True, extra_body=guards)
    )
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.model_extra == {"loop_guard": "alternate"}


def test_a_bad_loop_guard_is_a_400_naming_it(root: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        _client(root).responses.create(model="sim", input="x", extra_body={"loop_guards": {"repeat": 1}})
    assert caught.value.body["param"] == "loop_guards.repeat"
