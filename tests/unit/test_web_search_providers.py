"""The runtime's web searcher (troupe/runtime/web_search.py) against a small web on loopback
(tests/web_search_server.py: SearXNG's JSON API, Brave's and Tavily's, and pages), over real
HTTP: providers' requests and answers, failures, and pages opened under the URL policy."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import serve_app
from tests.web_search_server import BRAVE_KEY, NOTES, PAGES, TAVILY_KEY, SmallWeb
from troupe.agentloop.web_search import WebSearchFailed
from troupe.runtime.settings import WebSearchProvider, WebSearchSettings
from troupe.runtime.web_search import ALLOWED_URLS_ENV, API_KEY_ENV, RuntimeWebSearcher, _cited_results
from troupe.serve.config import ConfigError, load_config

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


async def test_a_provider_answer_of_the_wrong_shape_or_too_late_fails_saying_so(web: SmallWeb) -> None:
    s = searcher(web, timeout_s=0.3)
    try:
        web.search_reply = {"answers": ["no results list"]}
        with pytest.raises(WebSearchFailed, match=r"searxng\) answered without a list of results"):
            await s.search("rocket", max_results=3)
        web.search_reply, web.slow_search = None, True
        with web.holding(), pytest.raises(WebSearchFailed, match="SearXNG did not answer within 0.3 s"):
            await s.search("rocket", max_results=3)
    finally:
        web.search_reply, web.slow_search = None, False
        await s.close()


async def test_brave_and_tavily_are_asked_in_their_own_shapes(web: SmallWeb) -> None:
    brave = searcher(web, provider="brave", brave_url=f"{web.base}/brave", api_key=BRAVE_KEY)
    tavily = searcher(web, provider="tavily", tavily_url=f"{web.base}/tavily", api_key=TAVILY_KEY)
    wrong = searcher(web, provider="tavily", tavily_url=f"{web.base}/tavily", api_key="nope")
    try:
        hits = await brave.search("soup", max_results=3, user_location={"type": "approximate", "country": "de"})
        assert [h.title for h in hits] == ["Cafeteria menu"]
        assert web.asked["/brave"] == {"q": "soup", "count": "3", "text_decorations": "false", "country": "DE"}
        assert [h.title for h in await tavily.search("Pixel", max_results=3)] == ["Office cats"]
        assert web.asked["/tavily"] == {"query": "Pixel", "max_results": 3}
        web.sites["cats"] = "pets.example.org"
        narrowed = await tavily.search("launch", max_results=5, allowed_domains=("example.org",))
        assert [h.title for h in narrowed] == ["Office cats"]
        assert web.asked["/tavily"]["include_domains"] == ["example.org"]
        with pytest.raises(WebSearchFailed, match="Tavily answered HTTP 401"):
            await wrong.search("Pixel", max_results=3)
    finally:
        web.sites.clear()
        for s in (brave, tavily, wrong):
            await s.close()


async def test_a_country_brave_does_not_serve_is_dropped_not_failed(web: SmallWeb) -> None:
    brave = searcher(web, provider="brave", brave_url=f"{web.base}/brave", api_key=BRAVE_KEY)
    before = web.hits["/brave"]
    try:
        hits = await brave.search("soup", max_results=3, user_location={"type": "approximate", "country": "KE"})
        assert [h.title for h in hits] == ["Cafeteria menu"]
        assert web.hits["/brave"] == before + 2 and "country" not in web.asked["/brave"]
    finally:
        await brave.close()


async def test_the_key_and_the_allowlist_are_read_from_the_environment_at_call_time(
    web: SmallWeb, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = searcher(web, provider="brave", brave_url=f"{web.base}/brave", allowed_urls=())
    try:
        with pytest.raises(WebSearchFailed, match=API_KEY_ENV):
            await s.search("soup", max_results=3)
        with pytest.raises(WebSearchFailed, match="may not be fetched"):
            await s.open_page(f"{web.base}/pages/menu")
        monkeypatch.setenv(API_KEY_ENV, BRAVE_KEY)
        monkeypatch.setenv(ALLOWED_URLS_ENV, " http://127.0.0.1:* ")
        assert [h.title for h in await s.search("soup", max_results=3)] == ["Cafeteria menu"]
        assert (await s.open_page(f"{web.base}/pages/menu")).title.startswith("Cafeteria menu")
    finally:
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
        notes = await s.open_page(f"{web.base}/pages/notes.txt")
        assert (notes.text, notes.title) == (NOTES, f"{web.base}/pages/notes.txt"), "decoded with its charset"
    finally:
        await s.close()


async def test_pages_refused_too_large_too_slow_or_not_text_fail_saying_why(web: SmallWeb) -> None:
    s = searcher(web, max_page_bytes=50_000, timeout_s=0.5)  # /pages/slow answers when the block ends
    secret_fetches = web.hits["/pages/private/secret"]
    try:
        with web.holding():
            for name, why in (("private/secret", "robots.txt disallows"), ("to-secret", "robots.txt disallows"),
                              ("big", "too large"), ("slow", "did not load within 0.5 s"),
                              ("image", "not a text page (image/png)"), ("to-private", "10.0.0.1")):  # fmt: skip
                with pytest.raises(WebSearchFailed) as failed:
                    await s.open_page(f"{web.base}/pages/{name}")
                assert why in str(failed.value), (name, str(failed.value))
        assert web.hits["/pages/private/secret"] == secret_fetches, "robots.txt is asked first, after a redirect too"
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
        await asyncio.gather(s.open_page(f"{web.base}/pages/menu"), s.open_page(f"{web.base}/pages/rocket"))
        await s.open_page(f"{web.base}/pages/cats")
        assert web.hits["/robots.txt"] == before + 1, "concurrent opens share the read"
    finally:
        await s.close()
    rude = searcher(web, respect_robots=False)
    fetched = web.hits["/pages/private/secret"]
    try:
        await rude.open_page(f"{web.base}/pages/private/secret")
        assert web.hits["/pages/private/secret"] == fetched + 1, "fetched, robots.txt or not"
    finally:
        await rude.close()


@pytest.mark.parametrize("status", [404, 500])
async def test_a_robots_txt_missing_or_unreadable_allows_every_page(web: SmallWeb, status: int) -> None:
    s = searcher(web)
    before = web.hits["/robots.txt"]
    web.robots_status = status
    try:
        assert "not for robots" in (await s.open_page(f"{web.base}/pages/private/secret")).text
        await s.open_page(f"{web.base}/pages/menu")
        assert web.hits["/robots.txt"] == before + 1, "the answer is kept for the host"
    finally:
        web.robots_status = 200
        await s.close()


async def test_a_tenants_provider_has_its_own_key_and_never_the_deployments(
    web: SmallWeb, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(API_KEY_ENV, BRAVE_KEY)  # the deployment's key, in the environment
    monkeypatch.delenv("ACME_BRAVE_KEY", raising=False)
    settings = WebSearchSettings(provider="searxng", url=web.base,
                                 tenants={"acme": WebSearchProvider(provider="brave", brave_url=f"{web.base}/brave",
                                                                    api_key_env="ACME_BRAVE_KEY")})  # fmt: skip
    assert settings.provider_for("other") is settings and settings.provider_for("acme").provider == "brave"
    acme = RuntimeWebSearcher(settings, settings.provider_for("acme"))
    try:
        with pytest.raises(WebSearchFailed, match=r"needs a key \(api_key or ACME_BRAVE_KEY\)"):
            await acme.search("soup", max_results=3)
        monkeypatch.setenv("ACME_BRAVE_KEY", BRAVE_KEY)
        assert [h.title for h in await acme.search("soup", max_results=3)] == ["Cafeteria menu"]
    finally:
        await acme.close()


def test_tenants_providers_are_read_from_the_configuration_file(tmp_path: Path) -> None:
    config = tmp_path / "troupe.toml"
    config.write_text(
        '[web_search]\nprovider = "searxng"\nurl = "http://127.0.0.1:8888"\n'
        '[web_search.tenants.acme]\nprovider = "responses"\nurl = "https://api.openai.com/v1"\nmodel = "gpt-5-mini"\n'
        'api_key_env = "ACME_OPENAI_KEY"\n'
        '[web_search.tenants.closed]\nprovider = "none"\n'
    )
    _, runtime = load_config(config, env={})
    web = runtime.web_search
    assert (web.provider_for("acme").provider, web.provider_for("acme").model) == ("responses", "gpt-5-mini")
    assert web.provider_for("acme").api_key_env == "ACME_OPENAI_KEY"
    assert web.provider_for("closed").provider == "none" and web.provider_for("anyone").provider == "searxng"
    config.write_text('[web_search.tenants.acme]\nprovider = "responses"\nurl = "https://api.openai.com/v1"\n')
    with pytest.raises(ConfigError, match="needs the upstream's model"):
        load_config(config, env={})


def test_a_responses_answer_becomes_its_cited_pages_with_their_passages_then_its_other_sources() -> None:
    """As OpenAI answers: markdown links as citations, a source it did not cite, one page cited twice."""
    text = ("DuckDB is MIT licensed ([duckdb.org](https://duckdb.org/license)). It is embeddable "
            "([duckdb.org](https://duckdb.org/why)).\nThe license is short ([duckdb.org](https://duckdb.org/license)).")  # fmt: skip
    notes = []
    for url, title, occurrence in (("https://duckdb.org/license", "License", 0), ("https://duckdb.org/why", "Why DuckDB", 0),
                                   ("https://duckdb.org/license", "License", 1)):  # fmt: skip
        link = f"([duckdb.org]({url}))"
        start = text.index(link) if occurrence == 0 else text.rindex(link)
        notes.append({"type": "url_citation", "url": url, "title": title, "start_index": start,
                      "end_index": start + len(link)})  # fmt: skip
    body = {"status": "completed", "output": [
        {"type": "web_search_call", "status": "completed",
         "action": {"type": "search", "query": "duckdb license", "sources": [
             {"type": "url", "url": "https://duckdb.org/license"}, {"type": "url", "url": "https://example.org/other"}]}},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": notes}]},
    ]}  # fmt: skip
    assert _cited_results(body) == [
        {"url": "https://duckdb.org/license", "title": "License",
         "content": "DuckDB is MIT licensed … The license is short"},
        {"url": "https://duckdb.org/why", "title": "Why DuckDB", "content": "It is embeddable"},
        {"url": "https://example.org/other", "title": None, "content": ""},
    ]  # fmt: skip
