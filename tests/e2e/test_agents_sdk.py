"""The OpenAI Agents SDK as a client of Troupe (Responses model, function tools, sessions)."""

from __future__ import annotations

import pytest
from agents import Agent, OpenAIConversationsSession, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from .conftest import PART_PLACEMENTS

# The SDK would otherwise export traces to OpenAI; there is no network here and no need.
set_tracing_disabled(True)


@pytest.fixture(params=PART_PLACEMENTS)
async def client(request, troupe_apps):
    client = AsyncOpenAI(base_url=f"{troupe_apps[request.param]}/v1", api_key="unused", max_retries=0)
    yield client
    await client.close()


def agent(client: AsyncOpenAI, **kw) -> Agent:
    return Agent(name="assistant", instructions="Be helpful.", model=OpenAIResponsesModel("sim", client), **kw)


async def test_run_with_a_function_tool(client):
    seen = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        seen.append(city)
        return f"sunny in {city}"

    result = await Runner.run(agent(client, tools=[get_weather]), '[[call get_weather {"city": "Paris"}]]')
    assert seen == ["Paris"], "the Agents SDK ran the tool the model called through Troupe"
    assert result.final_output == "get_weather -> sunny in Paris"


async def test_streamed_run(client):
    result = Runner.run_streamed(agent(client), "[[say streaming through the agents sdk]]")
    deltas = [e async for e in result.stream_events() if e.type == "raw_response_event" and e.data.type == "response.output_text.delta"]
    assert len(deltas) == 5
    assert result.final_output == "streaming through the agents sdk"


async def test_run_with_a_conversations_session(client):
    session = OpenAIConversationsSession(openai_client=client)
    await Runner.run(agent(client), "my name is Ada", session=session)
    result = await Runner.run(agent(client), "[[history]]", session=session)
    assert result.final_output == "my name is Ada | [[history]]"
    items = await session.get_items()
    assert [i.get("role") for i in items] == ["user", "assistant", "user", "assistant"]
