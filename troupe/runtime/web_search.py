"""The ``web_search`` tool's searcher: providers, page fetches, robots.txt, text extraction.

Ray-free. :class:`RuntimeWebSearcher` is the :class:`~troupe.agentloop.web_search.WebSearcher` a
host gives the loop (made on the first request that offers the tool; the loop enforces the
request's domains, caches per response and numbers the sources). What it does:

**Search** through the configured provider (``[web_search] provider``), an operator's choice and
so trusted (no URL policy; its key never leaves the request to it):

* ``searxng``: ``GET {url}/search?q=…&format=json`` (the instance must have JSON output on; an
  HTML answer is a failure saying so); allowed domains become ``site:`` terms (one, or an ``OR``
  of several), the location's country SearXNG's ``language`` (``en-US``); results
  ``results[].url/title/content``.
* ``brave``: ``GET {brave_url}?q=…&count=N`` with ``X-Subscription-Token``; ``country`` from the
  location; ``site:`` terms as for SearXNG; results ``web.results[].url/title/description``.
* ``tavily``: ``POST {tavily_url}`` ``{"query", "max_results", "include_domains"}`` with a bearer
  key; results ``results[].url/title/content``.

Any failure (no answer within ``timeout_s``, a non-2xx status, a body that is not the provider's
JSON) is a :class:`~troupe.agentloop.web_search.WebSearchFailed` naming the provider and the
status, never the key: the model is told, and the loop goes on.

**Open a page** through the MCP servers' URL policy (:func:`~troupe.runtime.mcp_policy.check_url`:
http(s), public addresses unless ``allowed_urls`` / ``TROUPE_WEB_SEARCH_ALLOWED_URLS`` allow them,
never cloud metadata), over a pinned connection (:func:`~troupe.runtime.mcp_policy.pinned_transport`:
the address checked is the one connected to). Redirects are followed here, at most
:data:`MAX_REDIRECTS`, each new URL checked again. The body is read as it comes and the fetch
stops past ``max_page_bytes``; the whole fetch is bounded by ``timeout_s``. Only text pages
(``text/html``, ``application/xhtml+xml``, ``text/plain``) are read. With ``respect_robots``, the
host's ``/robots.txt`` is read first (once per host for this searcher's life, through the same
policy) and its rules for ``user_agent``'s product name decide; a robots.txt that is missing
(4xx) allows everything, and so does one that cannot be read (5xx, a time-out: the page's own
fetch will tell). HTML is reduced to its main text and title by ``trafilatura`` (navigation,
footers and scripts left out), in a thread; plain text is taken as it is.

Example::

    searcher = RuntimeWebSearcher(WebSearchSettings(provider="searxng", url="http://127.0.0.1:8888"))
    hits = await searcher.search("duckdb license", max_results=5, allowed_domains=("duckdb.org",))
    page = await searcher.open_page(hits[0].url)
    await searcher.close()
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urljoin, urlsplit
from urllib.robotparser import RobotFileParser

import httpx2

from troupe.agentloop.web_search import Page, SearchHit, WebSearchFailed
from troupe.runtime.mcp_policy import AddressGuard, check_url, pinned_transport, url_guard
from troupe.runtime.settings import WebSearchSettings

__all__ = ["ALLOWED_URLS_ENV", "API_KEY_ENV", "MAX_REDIRECTS", "RuntimeWebSearcher"]

log = logging.getLogger(__name__)

ALLOWED_URLS_ENV = "TROUPE_WEB_SEARCH_ALLOWED_URLS"
API_KEY_ENV = "TROUPE_WEB_SEARCH_API_KEY"
MAX_REDIRECTS = 5
_ALLOWLIST = "allowed page URLs ([web_search] allowed_urls, TROUPE_WEB_SEARCH_ALLOWED_URLS)"
_TEXT_TYPES = ("text/html", "application/xhtml+xml", "text/plain")
_ROBOTS_BYTES = 500_000


class RuntimeWebSearcher:
    """Searches with the configured provider and opens pages under the URL policy (module docstring)."""

    def __init__(self, settings: WebSearchSettings) -> None:
        self.settings = settings
        self._provider: httpx2.AsyncClient | None = None
        self._pages: dict[bool, httpx2.AsyncClient] = {}
        self._robots: dict[str, RobotFileParser | None] = {}
        """scheme://host:port -> its rules (None: everything is allowed)."""

    async def close(self) -> None:
        clients = [*self._pages.values(), *([self._provider] if self._provider is not None else [])]
        self._pages, self._provider = {}, None
        await asyncio.gather(*(c.aclose() for c in clients), return_exceptions=True)

    # -- search ------------------------------------------------------------------------------

    async def search(
        self, query: str, *, max_results: int, allowed_domains: Sequence[str] = (),
        user_location: dict[str, Any] | None = None,
    ) -> list[SearchHit]:  # fmt: skip
        """See :meth:`~troupe.agentloop.web_search.WebSearcher.search`."""
        provider = self.settings.provider
        country = str((user_location or {}).get("country") or "").upper()
        if provider == "searxng":
            params = {"q": _with_sites(query, allowed_domains), "format": "json"}
            if len(country) == 2:
                params["language"] = f"en-{country}"
            body = await self._ask("SearXNG", "GET", self.settings.url.rstrip("/") + "/search", params=params)
            rows, keys = body.get("results"), ("url", "title", "content")
        elif provider == "brave":
            params = {"q": _with_sites(query, allowed_domains), "count": str(min(max_results, 20))}
            if len(country) == 2:
                params["country"] = country.lower()
            body = await self._ask("Brave Search", "GET", self.settings.brave_url, params=params,
                                   headers={"X-Subscription-Token": self._key("brave"), "Accept": "application/json"})  # fmt: skip
            rows, keys = (body.get("web") or {}).get("results"), ("url", "title", "description")
        elif provider == "tavily":
            payload: dict[str, Any] = {"query": query, "max_results": max_results}
            if allowed_domains:
                payload["include_domains"] = list(allowed_domains)
            body = await self._ask("Tavily", "POST", self.settings.tavily_url, json=payload,
                                   headers={"Authorization": f"Bearer {self._key('tavily')}"})  # fmt: skip
            rows, keys = body.get("results"), ("url", "title", "content")
        else:
            raise WebSearchFailed("No search provider is configured ([web_search] provider).")
        if not isinstance(rows, list):
            raise WebSearchFailed(f"The search provider ({provider}) answered without a list of results.")
        url, title, snippet = keys
        hits = [
            SearchHit(url=row[url], title=str(row.get(title) or row[url]), snippet=str(row.get(snippet) or ""))
            for row in rows
            if isinstance(row, dict) and isinstance(row.get(url), str) and row[url].startswith(("http://", "https://"))
        ]
        return hits[:max_results]

    def _key(self, provider: str) -> str:
        key = self.settings.api_key.get_secret_value() if self.settings.api_key is not None else ""
        key = key or os.environ.get(API_KEY_ENV, "")
        if not key:
            raise WebSearchFailed(f"The {provider} search provider needs a key ([web_search] api_key or {API_KEY_ENV}).")
        return key

    async def _ask(self, name: str, method: str, url: str, **kwargs: Any) -> dict[str, Any]:
        """The provider's JSON answer. Raises: WebSearchFailed (naming the provider, never the key)."""
        if self._provider is None:
            self._provider = httpx2.AsyncClient(timeout=self.settings.timeout_s, follow_redirects=True)
        try:
            answer = await self._provider.request(method, url, **kwargs)
        except httpx2.TimeoutException:
            raise WebSearchFailed(f"{name} did not answer within {self.settings.timeout_s:g} s.") from None
        except httpx2.HTTPError as exc:
            raise WebSearchFailed(f"{name} could not be reached ({type(exc).__name__}).") from None
        if answer.status_code != 200:
            raise WebSearchFailed(f"{name} answered HTTP {answer.status_code}.")
        try:
            body = answer.json()
        except ValueError:
            hint = " (is its JSON output on? search.formats in settings.yml)" if name == "SearXNG" else ""
            raise WebSearchFailed(f"{name} answered with something that is not JSON{hint}.") from None
        if not isinstance(body, dict):
            raise WebSearchFailed(f"{name} answered with JSON that is not an object.")
        return body

    # -- pages -------------------------------------------------------------------------------

    async def open_page(self, url: str) -> Page:
        """See :meth:`~troupe.agentloop.web_search.WebSearcher.open_page`."""
        deadline = time.monotonic() + self.settings.timeout_s
        try:
            async with asyncio.timeout(self.settings.timeout_s):
                if self.settings.respect_robots and not await self._robots_allow(url):
                    raise WebSearchFailed(f"{url} may not be fetched: the site's robots.txt disallows it for "
                                          f"{self._agent_name()}.")  # fmt: skip
                final, media, body = await self._fetch(url, max_bytes=self.settings.max_page_bytes)
        except TimeoutError:
            raise WebSearchFailed(f"{url} did not load within {self.settings.timeout_s:g} s.") from None
        if media not in _TEXT_TYPES:
            raise WebSearchFailed(f"{url} is not a text page ({media or 'no content type'}).")
        if media == "text/plain":
            return Page(url=final, title=final, text=body.decode("utf-8", errors="replace").strip())
        left = max(0.1, deadline - time.monotonic())
        try:  # trafilatura finds the page's encoding in its bytes
            title, main = await asyncio.wait_for(asyncio.to_thread(_main_text, body, final), left)
        except TimeoutError:
            raise WebSearchFailed(f"{url} did not load within {self.settings.timeout_s:g} s.") from None
        return Page(url=final, title=title or final, text=main)

    async def _fetch(self, url: str, *, max_bytes: int) -> tuple[str, str, bytes]:
        """``(final URL, media type, body)`` of ``url``, redirects followed under the policy.

        Raises:
            WebSearchFailed: a URL the policy refuses, too many redirects, a non-2xx answer, a
                body past ``max_bytes``, a connection that failed.
        """
        patterns = self._patterns()
        for _ in range(MAX_REDIRECTS + 1):
            why = await asyncio.to_thread(check_url, url, patterns, allowlist=_ALLOWLIST)  # it may resolve the host
            if why is not None:
                raise WebSearchFailed(f"{url} may not be fetched: {why}.")
            client = self._page_client(url_guard(url, patterns).allow_private)
            headers = {"User-Agent": self.settings.user_agent, "Accept": "text/html,application/xhtml+xml,text/plain"}
            try:
                async with client.stream("GET", url, headers=headers) as answer:
                    if answer.status_code in (301, 302, 303, 307, 308) and "location" in answer.headers:
                        url = urljoin(url, answer.headers["location"])
                        continue
                    if not 200 <= answer.status_code < 300:
                        raise WebSearchFailed(f"{url} answered HTTP {answer.status_code}.")
                    declared = answer.headers.get("content-length")
                    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
                        raise WebSearchFailed(f"{url} is too large ({int(declared):,} bytes; the limit is {max_bytes:,}).")
                    chunks, size = [], 0
                    async for chunk in answer.aiter_bytes():
                        size += len(chunk)
                        if size > max_bytes:
                            raise WebSearchFailed(f"{url} is too large (more than {max_bytes:,} bytes).")
                        chunks.append(chunk)
                    media = answer.headers.get("content-type", "").split(";")[0].strip().lower()
                    return str(answer.url), media, b"".join(chunks)
            except httpx2.HTTPError as exc:
                raise WebSearchFailed(f"{url} could not be fetched ({type(exc).__name__}: {exc}).") from None
        raise WebSearchFailed(f"{url} redirects more than {MAX_REDIRECTS} times.")

    async def _robots_allow(self, url: str) -> bool:
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        if origin not in self._robots:
            self._robots[origin] = await self._read_robots(origin)
        rules = self._robots[origin]
        return rules is None or rules.can_fetch(self._agent_name(), url)

    async def _read_robots(self, origin: str) -> RobotFileParser | None:
        """The rules of ``origin``'s robots.txt; None (everything allowed) when it has none or it
        cannot be read."""
        try:
            _, _, body = await self._fetch(origin + "/robots.txt", max_bytes=_ROBOTS_BYTES)
        except WebSearchFailed as exc:
            log.debug("robots.txt of %s not read: %s", origin, exc)
            return None
        rules = RobotFileParser()
        rules.parse(body.decode("utf-8", errors="replace").splitlines())
        return rules

    def _agent_name(self) -> str:
        """The product name robots.txt rules are matched against (``Troupe-WebSearch``)."""
        return self.settings.user_agent.split("/")[0].split()[0] or "*"

    def _patterns(self) -> tuple[str, ...]:
        from_env = [p.strip() for p in os.environ.get(ALLOWED_URLS_ENV, "").split(",")]
        return tuple(self.settings.allowed_urls) + tuple(p for p in from_env if p)

    def _page_client(self, private: bool) -> httpx2.AsyncClient:
        if private not in self._pages:
            self._pages[private] = httpx2.AsyncClient(transport=pinned_transport(AddressGuard(allow_private=private)),
                                                      follow_redirects=False)  # fmt: skip
        return self._pages[private]


def _with_sites(query: str, domains: Sequence[str]) -> str:
    """``query`` with ``site:`` terms for ``domains`` (one, or an ``OR`` of several)."""
    if not domains:
        return query
    sites = " OR ".join(f"site:{d}" for d in domains)
    return f"{query} {sites}" if len(domains) == 1 else f"{query} ({sites})"


def _main_text(html: bytes, url: str) -> tuple[str, str]:
    """``(title, main text)`` of an HTML page (trafilatura; imported here, on first use)."""
    import trafilatura

    document = trafilatura.bare_extraction(html, url=url, with_metadata=True, include_comments=False)
    if document is None:
        return "", ""
    found = document if isinstance(document, dict) else {"title": document.title, "text": document.text}
    return str(found.get("title") or ""), str(found.get("text") or "")
