"""POST /v1/responses/compact through the ``openai`` SDK and the OpenAI Agents SDK's
compaction session (which only takes OpenAI model names, so the sim serves as ``gpt-4.1``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai import AsyncOpenAI, BadRequestError, OpenAI

from tests.servers import served_local
from troupe.runtime.settings import ModelSpec
from troupe.serve.config import ServerSettings


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    models = (ModelSpec(name="sim", kind="sim"), ModelSpec(name="gpt-4.1", kind="sim"))
    yield from served_local(ServerSettings(), models=models)


def test_compact_a_stored_thread_then_continue_from_its_items(url):
    client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    first = client.responses.create(model="sim", input="My name is Ada.")
    second = client.responses.create(model="sim", input="[[say noted]]", previous_response_id=first.id)
    compacted = client.responses.compact(model="sim", previous_response_id=second.id)
    assert compacted.object == "response.compaction" and compacted.usage.total_tokens > 0
    assert [item.type for item in compacted.output] == ["message", "message", "compaction"]
    after = client.responses.create(
        model="sim", input=[*[item.to_dict() for item in compacted.output], {"role": "user", "content": "[[history]]"}]
    )
    assert after.output_text == "My name is Ada. | [[say noted]] | [[history]]"


async def test_the_agents_sdk_compaction_session_compacts_through_troupe(url):
    from agents import (
        Agent,
        OpenAIResponsesCompactionSession,
        OpenAIResponsesModel,
        Runner,
        SQLiteSession,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    session = OpenAIResponsesCompactionSession("s1", SQLiteSession("s1"), client=client, model="gpt-4.1")
    agent = Agent(name="assistant", model=OpenAIResponsesModel("gpt-4.1", client))
    for text in ("My name is Ada.", "I like tides.", "[[say ok]]"):
        await Runner.run(agent, text, session=session)
    await session.run_compaction({"force": True})
    items = await session.get_items()
    assert [i.get("type", "message") for i in items][-1] == "compaction"
    result = await Runner.run(agent, "[[history]]", session=session)
    assert result.final_output.endswith("[[say ok]] | [[history]]")


def test_context_management_compacts_a_long_thread_as_part_of_the_response(url):
    from troupe.agentloop.compaction import decode_summary

    client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    compacting = [{"type": "compaction", "compact_threshold": 300}]  # the server's tools take about 160
    first = client.responses.create(model="sim", input="[[say noted]] My name is Ada. " + "x" * 2000)
    with client.responses.stream(model="sim", input="[[say fine]]", previous_response_id=first.id,
                                 context_management=compacting) as stream:  # fmt: skip
        events = list(stream)
        response = stream.get_final_response()  # the SDK's own accumulator took the stream
    assert [(e.type, getattr(e, "output_index", None)) for e in events[2:6]] == [
        ("response.output_item.added", 0), ("response.compaction.compacting", 0), ("response.output_item.done", 0),
        ("response.output_item.added", 1),
    ]  # fmt: skip
    assert [item.type for item in response.output] == ["compaction", "message"] and response.output_text == "fine"
    summary = decode_summary(response.output[0].encrypted_content)
    assert summary == "Summary of 3 messages: 2 user, 1 assistant."
    assert response.usage.output_tokens == 8 + 1, "the summary's words count"
    assert client.responses.retrieve(response.id).output[0].id == response.output[0].id
    # The chain goes on from the compacted context: a later summary was sent the earlier one.
    later = client.responses.create(model="sim", input="[[say again]]", previous_response_id=response.id,
                                    context_management=compacting)  # fmt: skip
    assert decode_summary(later.output[0].encrypted_content) == "Summary of 5 messages: 1 system, 3 user, 1 assistant."
    with pytest.raises(BadRequestError) as info:
        client.responses.create(model="sim", input="hi", context_management=[{"type": "truncate"}])
    assert info.value.body["param"] == "context_management[0].type"
