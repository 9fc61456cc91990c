"""The web_search tool in the loop (troupe/agentloop/web_search.py), with the sim model and an
in-process stand-in for the web (tests/fakes.py ``PagesWebSearcher``); the e2e tests search a
SearXNG-compatible server over HTTP with the runtime's searcher (tests/e2e/test_web_search.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes import PagesWebSearcher
from tests.loop_harness import check_stream, history_of, run
from troupe.agentloop.web_search import WEB_SEARCH, WEB_TOOL_NAMES, url_citations
from troupe.protocol import InvalidRequest
from troupe.sim.model import SimModel

PAGES = {
    "https://docs.example.com/rocket": ("Rocket manual", "The launch code for the rocket is blue seven."),
    "https://www.example.com/menu": ("Menu", "The cafeteria serves soup on Tuesdays. The rocket cafe is closed."),
    "https://elsewhere.org/rocket": ("Rocket blog", "A rocket launch code should never be blue seven."),
}


def body(question: str, **extra: Any) -> dict[str, Any]:
    tool = {"type": "web_search", **extra.pop("tool", {})}
    return {"model": "sim", "input": question, "tools": [tool], **extra}


async def test_a_question_is_searched_and_answered_with_a_url_citation_streamed_before_the_text_is_done():
    web = PagesWebSearcher(PAGES)
    outcome = await run(body("What is the rocket launch code?"), SimModel(), web_searcher=web)
    check_stream(outcome)
    call, message = outcome.response["output"]
    assert (call["type"], call["status"], call["action"]) == (
        "web_search_call", "completed", {"type": "search", "query": "What is the rocket launch code?"})  # fmt: skip
    assert call["id"].startswith("ws_")
    part = message["content"][0]
    [citation] = part["annotations"]
    assert citation["type"] == "url_citation" and citation["url"] == "https://docs.example.com/rocket"
    assert citation["title"] == "Rocket manual"
    assert part["text"][citation["start_index"] : citation["end_index"]] == "【0†Rocket manual】"
    kinds = [e["type"] for e in outcome.events]
    assert [k for k in kinds if k.startswith("response.web_search_call.")] == [
        f"response.web_search_call.{s}" for s in ("in_progress", "searching", "completed")]  # fmt: skip
    assert kinds.index("response.output_text.annotation.added") < kinds.index("response.output_text.done")
    assert web.calls == [("search", "What is the rocket launch code?", "5", "", "null")]


async def test_sources_are_included_when_asked_and_the_model_sees_results_with_their_urls():
    request = body("rocket launch code?", include=["web_search_call.action.sources"], tool={"search_context_size": "low"})
    outcome = await run(request, SimModel(), web_searcher=PagesWebSearcher(PAGES), stream=False)
    sources = outcome.response["output"][0]["action"]["sources"]
    assert sources == [{"type": "url", "url": u} for u in ("https://docs.example.com/rocket", "https://elsewhere.org/rocket",
                                                           "https://www.example.com/menu")]  # fmt: skip
    [output] = outcome.prepared.transcript.outputs_of(WEB_SEARCH)
    assert "【0†" in output and "(url: https://" in output, output


async def test_allowed_domains_remove_other_sites_and_refuse_their_pages():
    web = PagesWebSearcher(PAGES)
    script = ('[[call web_search {"query": "rocket launch code"}]] '
              '[[call web_open_page {"url": "https://elsewhere.org/rocket"}]]')  # fmt: skip
    request = body(script, tool={"filters": {"allowed_domains": ["Example.com"]}},
                   include=["web_search_call.action.sources"])  # fmt: skip
    outcome = await run(request, SimModel(), web_searcher=web, stream=False)
    search, opened, _ = outcome.response["output"]
    urls = [s["url"] for s in search["action"]["sources"]]
    assert urls and all(".example.com/" in u for u in urls), "a subdomain of an allowed domain is allowed"
    assert "https://elsewhere.org/rocket" not in urls
    assert opened["status"] == "failed" and opened["action"] == {"type": "open_page", "url": "https://elsewhere.org/rocket"}
    outputs = outcome.prepared.transcript.outputs_of("web_open_page")
    assert "not in the allowed domains" in outputs[0]
    assert ("open", "https://elsewhere.org/rocket") not in web.calls, "the page was never fetched"
    assert web.calls[0][3] == "example.com", "the provider is told the domains too"


async def test_the_same_query_and_the_same_page_run_once_per_response():
    web = PagesWebSearcher(PAGES)
    url = "https://docs.example.com/rocket"
    script = ('[[call web_search {"query": "rocket"}]] [[call web_search {"query": "  Rocket "}]] '
              f'[[call web_open_page {{"url": "{url}"}}]] '
              f'[[call web_find_in_page {{"url": "{url}", "pattern": "BLUE"}}]]')  # fmt: skip
    outcome = await run(body(script), SimModel(), web_searcher=web, stream=False)
    assert [c[0] for c in web.calls] == ["search", "open"]
    statuses = [i["status"] for i in outcome.response["output"] if i["type"] == "web_search_call"]
    assert statuses == ["completed"] * 4
    found = outcome.prepared.transcript.outputs_of("web_find_in_page")[0]
    assert "1 match(es) of 'BLUE'" in found and "blue seven" in found
    opened = outcome.prepared.transcript.outputs_of("web_open_page")[0]
    assert opened.splitlines()[0] == f"【0†Rocket manual】 (url: {url})", "the result and its page share a marker"


async def test_a_provider_that_fails_is_a_failed_item_and_the_model_is_told():
    outcome = await run(body("rocket?"), SimModel(), web_searcher=PagesWebSearcher(PAGES, fail="searxng answered 502"))
    call, message = outcome.response["output"]
    assert call["status"] == "failed"
    assert "searxng answered 502" in outcome.prepared.transcript.outputs_of(WEB_SEARCH)[0]
    assert "searxng answered 502" in message["content"][0]["text"]
    assert outcome.response["status"] == "completed", "the loop goes on"


async def test_a_later_turn_replays_the_calls_without_their_results():
    web = PagesWebSearcher(PAGES)
    first = await run(body("rocket launch code?", include=["web_search_call.action.sources"]), SimModel(),
                      web_searcher=web)  # fmt: skip
    second = await run(body("[[say ok]]"), SimModel(), web_searcher=web, history=history_of(first))
    [replayed] = second.prepared.transcript.outputs_of(WEB_SEARCH)
    assert "were not kept" in replayed and "https://docs.example.com/rocket" in replayed
    calls = [i for i in second.prepared.transcript.items if i["type"] == "function_call"]
    assert json.loads(calls[0]["arguments"]) == {"query": "rocket launch code?"}


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"search_context_size": "huge"}, "tools[0].search_context_size"),
        ({"filters": {"allowed_domains": ["not a domain"]}}, "tools[0].filters.allowed_domains[0]"),
        ({"user_location": "Paris"}, "tools[0].user_location"),
        ({"external_web_access": False}, "tools[0].external_web_access"),
        ({"type": "web_search_preview", "search_content_types": ["text", "image"]}, "tools[0].search_content_types"),
    ],
)
async def test_a_bad_web_search_tool_is_a_400_naming_it(tool: dict[str, Any], param: str):
    with pytest.raises(InvalidRequest) as refused:
        await run(body("hi", tool=tool), SimModel(), web_searcher=PagesWebSearcher(PAGES))
    assert refused.value.param == param


async def test_without_a_searcher_the_tool_is_refused_and_a_clashing_function_too():
    with pytest.raises(InvalidRequest) as refused:
        await run(body("hi"), SimModel())
    assert refused.value.param == "tools[0].type"
    clash = {"model": "sim", "input": "hi", "tools": [
        {"type": "web_search"}, {"type": "function", "name": "web_open_page", "parameters": {}}]}  # fmt: skip
    with pytest.raises(InvalidRequest):
        await run(clash, SimModel(), web_searcher=PagesWebSearcher(PAGES))


async def test_tool_choice_can_force_web_search_and_allowed_tools_name_it():
    forced = body("hello there", tool_choice={"type": "web_search_preview"})  # the SDK has no "web_search" choice
    outcome = await run(forced, SimModel(), web_searcher=PagesWebSearcher(PAGES), stream=False)
    assert outcome.response["output"][0]["type"] == "web_search_call"
    allowed = body("hello", tool_choice={"type": "allowed_tools", "mode": "auto", "tools": [{"type": "web_search"}]})
    outcome = await run(allowed, SimModel(), web_searcher=PagesWebSearcher(PAGES), stream=False)
    assert set(WEB_TOOL_NAMES) <= outcome.prepared.policy.allowed  # type: ignore[operator]


def test_a_marker_of_no_source_is_not_a_citation():
    output = "Web results.\n【2†Doc】 (url: https://a.example/) text"
    assert url_citations("see 【2†Doc】 and 【7†Nope】", [output]) == [
        {"type": "url_citation", "url": "https://a.example/", "title": "Doc", "start_index": 4, "end_index": 11}]  # fmt: skip
