"""The ``web_search`` tool with the ``openai`` SDK only, over real HTTP, on an in-process app whose
search provider is a SearXNG-compatible server on loopback (tests/web_search_server.py, reached
through a test-only allowance of the URL policy), and a recording upstream model server: what
the client gets (items, events, citations whose indices point at the cited text, sources) and
what the model is sent (the results as text, with their sources). The providers' and pages'
many cases: tests/unit/test_web_search_providers.py; the loop's: tests/unit/test_loop_web_search.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai import OpenAI

from tests.servers import RecordingUpstream, recorded_sim, serve_app, served_local
from tests.web_search_server import SmallWeb
from troupe.runtime.settings import ModelSpec, WebSearchSettings
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


def test_without_a_provider_the_tool_is_a_400_saying_how_to_set_one() -> None:
    server = served_local(ServerSettings())
    root = next(server)
    try:
        plain = OpenAI(base_url=f"{root}/v1", api_key="-", max_retries=0)
        with pytest.raises(openai.BadRequestError) as refused:
            plain.responses.create(model="sim", input="hi", tools=[{"type": "function", "name": "f", "parameters": {}},
                                                                   {"type": "web_search"}])  # fmt: skip
        body: Any = refused.value.body
        assert body["param"] == "tools[1]" and "[web_search] provider" in body["message"], json.dumps(body)
    finally:
        server.close()
