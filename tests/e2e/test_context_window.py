"""The context window through the ``openai`` SDK: OpenAI's 400, and truncation "auto"."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from openai import OpenAI

from tests.servers import served_local
from troupe.runtime.settings import ModelSpec
from troupe.serve.config import ServerSettings


@pytest.fixture(scope="module")
def client() -> Iterator[OpenAI]:
    models = (ModelSpec(name="sim-small", kind="sim", context_window=400),)
    for url in served_local(ServerSettings(), models=models):
        yield OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def test_an_input_past_the_window_is_openais_400(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="sim-small", input="word " * 300, stream=True)
    assert (err.value.body["code"], err.value.body["param"]) == ("context_length_exceeded", "input")


def test_truncation_auto_sends_only_the_newest_turns(client):
    conversation = client.conversations.create()
    for i in range(6):
        client.responses.create(model="sim-small", input=f"turn {i} " + "x" * 150, conversation=conversation.id,
                                truncation="auto")  # fmt: skip
    heard = client.responses.create(model="sim-small", input="[[history]]", conversation=conversation.id,
                                    truncation="auto").output_text  # fmt: skip
    assert heard.startswith("turn ") and "turn 5" in heard and "turn 0" not in heard
