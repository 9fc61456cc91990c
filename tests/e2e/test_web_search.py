"""The ``web_search`` tool with the ``openai`` SDK only, over real HTTP, on an in-process app whose
search provider is a SearXNG-compatible server on loopback (tests/web_search_server.py, reached
through a test-only allowance of the URL policy), and a recording upstream model server: what
the client gets (items, events, citations whose indices point at the cited text, sources) and
what the model is sent (the results as text, with their sources). Then a tenant whose provider is
another Responses server with its own ``web_search`` (pass-through: a second in-process Troupe,
whose requests are recorded), beside tenants with the deployment's provider and with none. The
providers' and pages' many cases: tests/unit/test_web_search_providers.py; the loop's: tests/unit/test_loop_web_search.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai import OpenAI

from tests.servers import LazyRuntime, RecordingUpstream, recorded_sim, serve_app, served_local
from tests.web_search_server import SmallWeb
from troupe.runtime.settings import ModelSpec, WebSearchProvider, WebSearchSettings
from troupe.serve.app import create_app
from troupe.serve.config import ServerSettings

QUESTION = "What is the rocket launch code?"


@pytest.fixture(scope="module")
def web() -> Iterator[SmallWeb]:
    small = SmallWeb()
    with serve_app(small) as url:
        small.base = url
        yield small


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[str, RecordingUpstream]]:
    with recorded_sim() as recorded:
        yield recorded


@pytest.fixture(scope="module")
def client(web: SmallWeb, upstream: tuple[str, RecordingUpstream]) -> Iterator[OpenAI]:
    models = (ModelSpec(name="sim", kind="sim"), ModelSpec(name="m", base_url=upstream[0], upstream_model="sim"))
    settings = WebSearchSettings(provider="searxng", url=web.base, allowed_urls=("http://127.0.0.1:*",), timeout_s=2.0)
    server = served_local(ServerSettings(), models=models, web_search=settings)
    root = next(server)
    try:
        yield OpenAI(base_url=f"{root}/v1", api_key="-", max_retries=0)
    finally:
        server.close()


def test_a_streamed_answer_cites_the_page_it_used_and_the_model_was_sent_the_results_with_their_sources(
    client: OpenAI, web: SmallWeb, upstream: tuple[str, RecordingUpstream]
) -> None:
    _, recording = upstream
    since = len(recording.bodies)
    with client.responses.stream(model="m", input=QUESTION, tools=[{"type": "web_search"}],
                                 include=["web_search_call.action.sources"]) as stream:  # fmt: skip
        events = list(stream)
        response = stream.get_final_response()
    call, message = response.output
    assert (call.type, call.status, call.action.type, call.action.query) == ("web_search_call", "completed", "search",
                                                                            QUESTION)  # fmt: skip
    assert [s.url for s in call.action.sources or []][0] == f"{web.base}/pages/rocket"
    part = message.content[0]
    [cite] = part.annotations
    assert (cite.type, cite.url, cite.title) == ("url_citation", f"{web.base}/pages/rocket", "Rocket manual")
    assert part.text[cite.start_index : cite.end_index] == "【0†Rocket manual】"
    assert part.text.startswith("The launch code for the rocket is blue seven")
    kinds = [e.type for e in events]
    assert [k for k in kinds if k.startswith("response.web_search_call")] == [
        "response.web_search_call.in_progress", "response.web_search_call.searching",
        "response.web_search_call.completed"]  # fmt: skip
    assert kinds.index("response.output_text.annotation.added") < kinds.index("response.output_text.done")

    # Upstream: the model was offered the three web tools and sent the results as text with their URLs.
    first, second = recording.bodies[since:]
    assert {t["function"]["name"] for t in first["tools"]} >= {"web_search", "web_open_page", "web_find_in_page"}
    [tool_message] = [m for m in second["messages"] if m["role"] == "tool"]
    assert f"【0†Rocket manual】 (url: {web.base}/pages/rocket) The launch code" in tool_message["content"]
    assert web.queries[-1] == QUESTION


def test_a_page_opened_and_searched_with_a_domain_filter_that_removes_a_result(client: OpenAI, web: SmallWeb) -> None:
    web.sites["cats"] = "pets.example.org"
    try:
        script = (f'[[call web_search {{"query": "launch"}}]] [[call web_open_page {{"url": "{web.base}/pages/rocket"}}]] '
                  f'[[call web_find_in_page {{"url": "{web.base}/pages/rocket", "pattern": "twice"}}]]')  # fmt: skip
        tool = {"type": "web_search_preview", "search_context_size": "low"}
        response = client.responses.create(model="sim", input=script, include=["web_search_call.action.sources"],
                                            tools=[{**tool, "filters": {"allowed_domains": ["127.0.0.1"]}}])  # fmt: skip
    finally:
        web.sites.clear()
    search, opened, found, message = response.output
    assert [s.url for s in search.action.sources or []] == [f"{web.base}/pages/rocket"], "pets.example.org is not allowed"
    assert (opened.action.type, opened.action.url, opened.status) == ("open_page", f"{web.base}/pages/rocket", "completed")
    assert (found.action.type, found.action.pattern, found.status) == ("find_in_page", "twice", "completed")
    assert "entered twice" in message.content[0].text


def test_a_provider_that_fails_and_a_page_too_slow_end_their_items_failed_and_the_model_is_told(
    client: OpenAI, web: SmallWeb
) -> None:
    web.search_status = 503
    try:
        response = client.responses.create(model="sim", input=QUESTION, tools=[{"type": "web_search"}])
    finally:
        web.search_status = 200
    call, message = response.output
    assert call.status == "failed" and response.status == "completed"
    assert "SearXNG answered HTTP 503" in message.content[0].text
    slow = client.responses.create(model="sim", input=f'[[call web_open_page {{"url": "{web.base}/pages/slow"}}]]',
                                   tools=[{"type": "web_search"}])  # fmt: skip
    call, message = slow.output
    assert call.status == "failed" and "did not load within 2 s" in message.content[0].text


def test_bad_web_search_tools_are_400s_naming_them(client: OpenAI) -> None:
    for tool, param in (({"type": "web_search", "search_context_size": "huge"}, "tools[0].search_context_size"),
                        ({"type": "web_search", "filters": {"allowed_domains": ["a b"]}},
                         "tools[0].filters.allowed_domains[0]")):  # fmt: skip
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="sim", input="hi", tools=[tool])
        assert refused.value.body["param"] == param  # type: ignore[index]


@pytest.fixture(scope="module")
def plain() -> Iterator[OpenAI]:
    """A client of a server without a search provider."""
    server = served_local(ServerSettings())
    root = next(server)
    try:
        yield OpenAI(base_url=f"{root}/v1", api_key="-", max_retries=0)
    finally:
        server.close()


def test_without_a_provider_the_tool_is_a_400_saying_how_to_set_one(plain: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        plain.responses.create(model="sim", input="hi", tools=[{"type": "function", "name": "f", "parameters": {}},
                                                               {"type": "web_search"}])  # fmt: skip
    body: Any = refused.value.body
    assert body["param"] == "tools[1]" and "[web_search] provider" in body["message"], json.dumps(body)


def test_a_tenants_own_provider_passes_the_search_to_a_responses_server_with_its_own_web_search(web: SmallWeb) -> None:
    """Three tenants on one server: ``acme`` searches through another Responses server (a Troupe
    whose own web_search asks the small web; it wants a key, so the search proves the key went),
    ``open`` through the deployment's SearXNG, ``closed`` not at all (a 400 naming the tool)."""
    upstream_key = "sk-upstream-acme"
    searcher_runtime = LazyRuntime(web_search=WebSearchSettings(provider="searxng", url=web.base))
    app = create_app(searcher_runtime, ServerSettings(api_keys={upstream_key: "searcher"}))
    searcher = RecordingUpstream(app, path="/v1/responses")
    with serve_app(searcher) as searcher_root:
        tenants = {"acme": WebSearchProvider(provider="responses", url=f"{searcher_root}/v1", model="sim",
                                             api_key=upstream_key),
                   "closed": WebSearchProvider()}  # fmt: skip
        settings = WebSearchSettings(provider="searxng", url=web.base, tenants=tenants,
                                     allowed_urls=("http://127.0.0.1:*",), timeout_s=5.0)  # fmt: skip
        keys = {"sk-acme": "acme", "sk-open": "open", "sk-closed": "closed"}
        server = served_local(ServerSettings(api_keys=keys), web_search=settings)
        root = next(server)
        try:
            def client(key: str) -> OpenAI:
                return OpenAI(base_url=f"{root}/v1", api_key=key, max_retries=0)

            asked = len(web.queries)
            response = client("sk-acme").responses.create(model="sim", input=QUESTION, tools=[{"type": "web_search"}],
                                                          include=["web_search_call.action.sources"])  # fmt: skip
            call, message = response.output
            assert (call.status, call.action.query) == ("completed", QUESTION)
            assert [s.url for s in call.action.sources or []][0] == f"{web.base}/pages/rocket"
            [cite] = message.content[0].annotations
            assert (cite.url, cite.title) == (f"{web.base}/pages/rocket", "Rocket manual")
            assert message.content[0].text.startswith("The launch code for the rocket is blue seven")
            # Upstream: one Responses request, with its key, the tool required, sources asked for, nothing stored.
            [body], [headers] = searcher.bodies, searcher.headers
            assert headers["authorization"] == f"Bearer {upstream_key}"
            assert (body["model"], body["input"], body["tools"], body["tool_choice"], body["store"]) == (
                "sim", QUESTION, [{"type": "web_search"}], "required", False)  # fmt: skip
            assert body["include"] == ["web_search_call.action.sources"]
            assert web.queries[asked:] == [QUESTION], "the small web was asked once: by the upstream"

            opened = client("sk-open").responses.create(model="sim", input=QUESTION, tools=[{"type": "web_search"}])
            assert opened.output[0].status == "completed" and len(searcher.bodies) == 1, "open: the deployment's own"

            with pytest.raises(openai.BadRequestError) as refused:
                client("sk-closed").responses.create(model="sim", input=QUESTION, tools=[{"type": "web_search"}])
            error: Any = refused.value.body
            assert error["param"] == "tools[0]" and "for this request's tenant" in error["message"], error
        finally:
            server.close()
            searcher_runtime.close()


def test_a_responses_upstream_refusing_the_key_fails_the_call_without_showing_the_key(web: SmallWeb) -> None:
    searcher_runtime = LazyRuntime(web_search=WebSearchSettings(provider="searxng", url=web.base))
    with serve_app(create_app(searcher_runtime, ServerSettings(api_keys={"sk-right": "searcher"}))) as searcher_root:
        settings = WebSearchSettings(provider="responses", url=f"{searcher_root}/v1", model="sim",
                                     api_key="sk-wrong-key-1234")  # fmt: skip
        server = served_local(ServerSettings(), web_search=settings)
        root = next(server)
        try:
            plain = OpenAI(base_url=f"{root}/v1", api_key="-", max_retries=0)
            response = plain.responses.create(model="sim", input=QUESTION, tools=[{"type": "web_search"}])
            call, message = response.output
            assert call.status == "failed" and "The Responses upstream answered HTTP 401" in message.content[0].text
            assert "sk-wrong-key-1234" not in response.model_dump_json()
        finally:
            server.close()
            searcher_runtime.close()


def test_an_agent_with_web_search_searches_in_its_sessions_turns(client: OpenAI, web: SmallWeb) -> None:
    tool = {"type": "web_search", "allowed_domains": ["127.0.0.1"], "context_size": "low"}
    agent = client.beta.agents.create(model="sim", tools=[tool])
    assert agent.tools[0].type == "web_search" and agent.tools[0].mode == "live"
    with client.beta.agents.sessions.create(environment={"type": "none"}, agent_id=agent.id, input=QUESTION,
                                            stream=True) as stream:  # fmt: skip
        events = []
        for event in stream:
            events.append(event)
            if event.type in ("agent.session.idle", "agent.session.failed"):
                break
    assert events[-1].type == "agent.session.idle", [e.type for e in events]
    added = [e.item for e in events if e.type == "agent.session.turn.item.added"]
    assert [i.type for i in added if i.type != "message"] == ["web_search_call"]
    assert events[0].type == "agent.session.created"
    items = client.beta.agents.sessions.items.list(events[0].session.id, order="asc").data
    _, call, answer = items
    assert (call.type, call.status, call.action.type, call.action.query) == ("web_search_call", "completed",
                                                                            "search", QUESTION)  # fmt: skip
    assert answer.content[0].text.startswith("The launch code for the rocket is blue seven")
    assert web.queries[-1] == f"{QUESTION} site:127.0.0.1", "the agent's domains went to the provider"


def test_an_agents_web_search_needs_a_provider_unless_it_is_disabled(plain: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        plain.beta.agents.create(model="sim", tools=[{"type": "web_search"}])
    body: Any = refused.value.body
    assert body["param"] == "tools[0].type" and "search provider" in body["message"], body
    off = plain.beta.agents.create(model="sim", tools=[{"type": "web_search", "mode": "disabled"}])
    assert off.tools[0].mode == "disabled"
