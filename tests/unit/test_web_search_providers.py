"""The runtime's web searcher (troupe/runtime/web_search.py) against a small web on loopback
(tests/web_search_server.py: SearXNG's JSON API, Brave's and Tavily's, and pages), over real
HTTP: providers' requests and answers, failures, and pages opened under the URL policy."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.servers import serve_app
from tests.web_search_server import BRAVE_KEY, PAGES, TAVILY_KEY, SmallWeb
from troupe.agentloop.web_search import WebSearchFailed
from troupe.runtime.settings import WebSearchSettings
from troupe.runtime.web_search import RuntimeWebSearcher

LOOPBACK = ("http://127.0.0.1:*",)


@pytest.fixture(scope="module")
def web() -> Iterator[SmallWeb]:
    small = SmallWeb()
    with serve_app(small) as url:
        small.base = url
        yield small


def searcher(web: SmallWeb, **settings) -> RuntimeWebSearcher:
    defaults = {"provider": "searxng", "url": web.base, "allowed_urls": LOOPBACK, "timeout_s": 5.0}
    return RuntimeWebSearcher(WebSearchSettings(**{**defaults, **settings}))


async def test_searxng_finds_pages_best_first_and_site_terms_narrow_them(web: SmallWeb) -> None:
    s = searcher(web)
    try:
        hits = await s.search("rocket launch code", max_results=5)
        assert [h.title for h in hits] == ["Rocket manual", "Cafeteria menu", "Office cats"]
        assert hits[0].url == f"{web.base}/pages/rocket" and hits[0].snippet.startswith("The launch code")
        assert len(await s.search("rocket", max_results=1)) == 1
        web.sites["cats"] = "pets.example.org"
        narrowed = await s.search("launch", max_results=5, allowed_domains=("example.org",))
        assert [h.title for h in narrowed] == ["Office cats"]
        assert web.queries[-1] == "launch site:example.org", "the domain went to SearXNG as a site: term"
    finally:
        web.sites.clear()
        await s.close()


async def test_a_provider_that_fails_or_answers_html_says_so_without_its_key(web: SmallWeb) -> None:
    s = searcher(web)
    try:
        web.search_status = 502
        with pytest.raises(WebSearchFailed, match="SearXNG answered HTTP 502"):
            await s.search("rocket", max_results=3)
    finally:
        web.search_status = 200
        await s.close()
    html = RuntimeWebSearcher(WebSearchSettings(provider="brave", brave_url=f"{web.base}/search", api_key="k-secret-1"))
    try:
        with pytest.raises(WebSearchFailed) as failed:
            await html.search("rocket", max_results=3)
        assert "not JSON" in str(failed.value) and "k-secret-1" not in str(failed.value)
    finally:
        await html.close()


async def test_brave_and_tavily_are_asked_in_their_own_shapes(web: SmallWeb) -> None:
    brave = searcher(web, provider="brave", brave_url=f"{web.base}/brave", api_key=BRAVE_KEY)
    tavily = searcher(web, provider="tavily", tavily_url=f"{web.base}/tavily", api_key=TAVILY_KEY)
    wrong = searcher(web, provider="tavily", tavily_url=f"{web.base}/tavily", api_key="nope")
    try:
        assert [h.title for h in await brave.search("soup", max_results=3)] == ["Cafeteria menu"]
        assert [h.title for h in await tavily.search("Pixel", max_results=3)] == ["Office cats"]
        with pytest.raises(WebSearchFailed, match="Tavily answered HTTP 401"):
            await wrong.search("Pixel", max_results=3)
    finally:
        for s in (brave, tavily, wrong):
            await s.close()


async def test_a_page_is_its_main_text_and_title_without_navigation(web: SmallWeb) -> None:
    s = searcher(web)
    try:
        page = await s.open_page(f"{web.base}/pages/rocket")
        assert page.title.startswith("Rocket manual")
        assert PAGES["rocket"][1] in page.text
        assert "About us" not in page.text and "All rights reserved" not in page.text
        moved = await s.open_page(f"{web.base}/pages/moved")
        assert moved.url == f"{web.base}/pages/rocket", "a redirect is followed"
    finally:
        await s.close()


async def test_pages_refused_too_large_too_slow_or_not_text_fail_saying_why(web: SmallWeb) -> None:
    s = searcher(web, max_page_bytes=50_000, timeout_s=0.5)  # /pages/slow takes 2.5 s
    try:
        for name, why in (("private/secret", "robots.txt disallows"), ("big", "too large"),
                          ("slow", "did not load within 0.5 s"), ("image", "not a text page"),
                          ("to-private", "10.0.0.1")):  # fmt: skip
            with pytest.raises(WebSearchFailed) as failed:
                await s.open_page(f"{web.base}/pages/{name}")
            assert why in str(failed.value), (name, str(failed.value))
    finally:
        await s.close()
    public_only = searcher(web, allowed_urls=())  # the default policy refuses loopback
    try:
        with pytest.raises(WebSearchFailed, match="may not be fetched"):
            await public_only.open_page(f"{web.base}/pages/rocket")
        with pytest.raises(WebSearchFailed, match="metadata"):
            await public_only.open_page("http://169.254.169.254/latest/meta-data/")
    finally:
        await public_only.close()


async def test_robots_txt_is_read_once_per_host_and_can_be_ignored(web: SmallWeb) -> None:
    s = searcher(web)
    before = web.hits["/robots.txt"]
    try:
        await s.open_page(f"{web.base}/pages/menu")
        await s.open_page(f"{web.base}/pages/cats")
        assert web.hits["/robots.txt"] == before + 1
    finally:
        await s.close()
    rude = searcher(web, respect_robots=False)
    fetched = web.hits["/pages/private/secret"]
    try:
        await rude.open_page(f"{web.base}/pages/private/secret")
        assert web.hits["/pages/private/secret"] == fetched + 1, "fetched, robots.txt or not"
    finally:
        await rude.close()
