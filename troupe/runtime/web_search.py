"""The ``web_search`` tool's searcher: providers, page fetches, robots.txt, text extraction.

Ray-free. :class:`RuntimeWebSearcher` is the :class:`~troupe.agentloop.web_search.WebSearcher` a
host gives the loop (made on the first request that offers the tool; the loop enforces the
request's domains, caches per response and numbers the sources). What it does:

**Search** through the configured provider (``[web_search] provider``), an operator's choice and
so trusted (no URL policy; its key never leaves the request to it):

* ``searxng``: ``GET {url}/search?q=…&format=json`` (the instance must have JSON output on; an
  HTML answer is a failure saying so); allowed domains become ``site:`` terms (one, or an ``OR``
  of several), which SearXNG hands to its engines; the location's country becomes SearXNG's
  ``language`` (``en-US``); results ``results[].url/title/content``.
* ``brave``: ``GET {brave_url}?q=…&count=N&text_decorations=false`` with ``X-Subscription-Token``;
  ``site:`` terms as for SearXNG; ``country`` (upper-case) from the location, and when Brave
  refuses it (422: Brave serves a list of countries) the search is made again without it;
  results ``web.results[].url/title/description`` (no ``web``: no results).
* ``tavily``: ``POST {tavily_url}`` ``{"query", "max_results", "include_domains"}`` with a bearer
  key; results ``results[].url/title/content``.
* ``responses`` (pass-through): ``POST {url}/responses`` to an OpenAI-compatible Responses server
  whose ``model`` has its own ``web_search`` tool: the query as input, the tool required (with the
  allowed domains as its ``filters`` and the location as its ``user_location``), its sources
  included, ``store: false``, the key (optional) as a bearer token. The results are the pages its
  answer cites (``url_citation``), each with the passage citing it as its snippet, then the
  sources it did not cite. An answer that is not ``completed``, or has no ``web_search_call``,
  is a failure. Pages are still opened here, not there.

The key is the provider's ``api_key``, else the environment variable its ``api_key_env`` names
(``TROUPE_WEB_SEARCH_API_KEY`` for the deployment's). A tenant's provider
(``[web_search.tenants.NAME]``) is a searcher of its own (``provider``), opening pages alike.

Any failure (no answer within ``timeout_s``, a non-2xx status, a body that is not the provider's
JSON) is a :class:`~troupe.agentloop.web_search.WebSearchFailed` naming the provider and the
status, never the key: the model is told, and the loop goes on. Titles and snippets are made
plain text (HTML entities decoded, highlighting tags removed).

**Open a page** through the MCP servers' URL policy (:func:`~troupe.runtime.mcp_policy.check_url`:
http(s), public addresses unless ``allowed_urls`` / ``TROUPE_WEB_SEARCH_ALLOWED_URLS`` allow them,
never cloud metadata), over a pinned connection (:func:`~troupe.runtime.mcp_policy.pinned_transport`:
the address checked is the one connected to). Redirects are followed here, at most
:data:`MAX_REDIRECTS`, each new URL checked again (the policy, then robots.txt). Only text pages
(``text/html``, ``application/xhtml+xml``, ``text/plain``) are read: another type fails before its
body is read. The body is read as it comes and the fetch stops past ``max_page_bytes``. The whole
open (robots.txt, redirects, body, extraction) is bounded by ``timeout_s``, and so is each request.

With ``respect_robots``, a host's ``/robots.txt`` is read before its first page (once per host
for this searcher's life, concurrent opens sharing the read, through the same policy) and its
rules for ``user_agent``'s product name decide (``Troupe-WebSearch`` for ``Troupe-WebSearch/1``).
A robots.txt that is missing (4xx) allows everything, and so does one that cannot be read (5xx,
a time-out, a refused address: the page's own fetch will tell); that answer is kept too.

HTML is reduced to its main text and title by ``trafilatura`` (navigation, footers and scripts
left out; all of the page's text when it finds no main text), in a thread. Plain text is taken
as it is, decoded with its declared charset (UTF-8 otherwise).

A page that cannot be opened is a :class:`~troupe.agentloop.web_search.WebSearchFailed` whose
message says why: ``may not be fetched`` (the policy, robots.txt), ``is too large``,
``did not load within``, ``is not a text page``, ``answered HTTP``, ``could not be fetched``,
``redirects more than``.

Example::

    searcher = RuntimeWebSearcher(WebSearchSettings(provider="searxng", url="http://127.0.0.1:8888"))
    hits = await searcher.search("duckdb license", max_results=5, allowed_domains=("duckdb.org",))
    page = await searcher.open_page(hits[0].url)
    await searcher.close()
"""

from __future__ import annotations

import asyncio
import html
import logging
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit
from urllib.robotparser import RobotFileParser

import httpx2

from troupe.agentloop.web_search import Page, SearchHit, WebSearchFailed
from troupe.runtime.mcp_policy import AddressGuard, check_url, pinned_transport, url_guard
from troupe.runtime.settings import WebSearchProvider, WebSearchSettings

__all__ = ["ALLOWED_URLS_ENV", "API_KEY_ENV", "MAX_REDIRECTS", "RuntimeWebSearcher"]

log = logging.getLogger(__name__)

ALLOWED_URLS_ENV = "TROUPE_WEB_SEARCH_ALLOWED_URLS"
API_KEY_ENV = "TROUPE_WEB_SEARCH_API_KEY"
MAX_REDIRECTS = 5
_ALLOWLIST = "allowed page URLs ([web_search] allowed_urls, TROUPE_WEB_SEARCH_ALLOWED_URLS)"
_TEXT_TYPES = ("text/html", "application/xhtml+xml", "text/plain")
_ROBOTS_BYTES = 500_000
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_HIGHLIGHT = re.compile(r"</?(?:strong|b|em|mark)>", re.IGNORECASE)
_PASS_THROUGH_INSTRUCTIONS = ("Search the web for the user's query. Answer with what the best results say, one "
                              "short passage per result, citing each result the passage comes from.")
_CHARSET = re.compile(r"charset\s*=\s*[\"']?([\w.:-]+)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class _Fetched:
    url: str
    """After redirects."""
    media: str
    """The content type without its parameters, lower-case ('' when none was sent)."""
    charset: str | None
    body: bytes


class RuntimeWebSearcher:
    """Searches with the configured provider and opens pages under the URL policy (module docstring)."""

    def __init__(self, settings: WebSearchSettings, provider: WebSearchProvider | None = None) -> None:
        """``provider``: the search engine asked (a tenant's); ``settings``' own when None."""
        self.settings = settings
        self.provider = settings if provider is None else provider
        self._provider: httpx2.AsyncClient | None = None
        self._pages: dict[bool, httpx2.AsyncClient] = {}
        self._robots: dict[str, asyncio.Future[RobotFileParser | None]] = {}
        """scheme://host:port -> the read of its robots.txt (None: everything is allowed), shared
        by concurrent opens; a read goes on when the open that started it times out."""

    async def close(self) -> None:
        """Close the connections, and stop the robots.txt reads in flight."""
        for read in self._robots.values():
            read.cancel()
        clients = [*self._pages.values(), *([self._provider] if self._provider is not None else [])]
        self._pages, self._provider, self._robots = {}, None, {}
        await asyncio.gather(*(c.aclose() for c in clients), return_exceptions=True)

    # -- search ------------------------------------------------------------------------------

    async def search(
        self, query: str, *, max_results: int, allowed_domains: Sequence[str] = (),
        user_location: dict[str, Any] | None = None,
    ) -> list[SearchHit]:  # fmt: skip
        """See :meth:`~troupe.agentloop.web_search.WebSearcher.search`."""
        spec, provider = self.provider, self.provider.provider
        country = str((user_location or {}).get("country") or "").strip().upper()
        if provider == "searxng":
            params = {"q": _with_sites(query, allowed_domains), "format": "json"}
            if len(country) == 2:
                params["language"] = f"en-{country}"
            body = await self._ask("SearXNG", "GET", spec.url.rstrip("/") + "/search", params=params)
            rows, keys = body.get("results"), ("url", "title", "content")
        elif provider == "brave":
            body = await self._ask_brave(_with_sites(query, allowed_domains), max_results, country)
            web = body.get("web", {} if "query" in body else None)  # no web results: no "web"
            rows, keys = (web.get("results", []) if isinstance(web, dict) else None), ("url", "title", "description")
        elif provider == "tavily":
            payload: dict[str, Any] = {"query": query, "max_results": max_results}
            if allowed_domains:
                payload["include_domains"] = list(allowed_domains)
            body = await self._ask("Tavily", "POST", spec.tavily_url, json=payload,
                                   headers={"Authorization": f"Bearer {self._key('tavily')}"})  # fmt: skip
            rows, keys = body.get("results"), ("url", "title", "content")
        elif provider == "responses":
            body = await self._ask_responses(query, allowed_domains, user_location)
            rows, keys = _cited_results(body), ("url", "title", "content")
        else:
            raise WebSearchFailed("No search provider is configured ([web_search] provider).")
        if not isinstance(rows, list):
            raise WebSearchFailed(f"The search provider ({provider}) answered without a list of results.")
        url, title, snippet = keys
        hits = [
            SearchHit(url=row[url], title=_plain(row.get(title)) or row[url], snippet=_plain(row.get(snippet)))
            for row in rows
            if isinstance(row, dict) and isinstance(row.get(url), str) and row[url].startswith(("http://", "https://"))
        ]
        return hits[:max_results]

    def _key(self, provider: str, *, required: bool = True) -> str:
        """The provider's key: ``api_key``, else the variable ``api_key_env`` names ('' when there
        is none and it is not ``required``). Raises: WebSearchFailed (a required key missing)."""
        spec = self.provider
        key = spec.api_key.get_secret_value() if spec.api_key is not None else ""
        key = key or (os.environ.get(spec.api_key_env, "") if spec.api_key_env else "")
        if not key and required:
            where = f"api_key or {spec.api_key_env}" if spec.api_key_env else "api_key or api_key_env"
            raise WebSearchFailed(f"The {provider} search provider needs a key ({where}).")
        return key

    async def _ask_responses(
        self, query: str, allowed_domains: Sequence[str], user_location: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The upstream Responses server's answer to ``query`` with its own ``web_search`` tool
        (the call required, its sources included, nothing stored there). Raises: WebSearchFailed
        (it failed, or answered without searching)."""
        tool: dict[str, Any] = {"type": "web_search"}
        if allowed_domains:
            tool["filters"] = {"allowed_domains": list(allowed_domains)}
        if user_location:
            tool["user_location"] = {"type": "approximate", **{k: v for k, v in user_location.items() if v and k != "type"}}
        payload = {"model": self.provider.model, "input": query, "instructions": _PASS_THROUGH_INSTRUCTIONS,
                   "tools": [tool], "tool_choice": "required", "include": ["web_search_call.action.sources"],
                   "store": False}  # fmt: skip
        key = self._key("Responses", required=False)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        url = self.provider.url.rstrip("/") + "/responses"
        body = await self._ask("The Responses upstream", "POST", url, json=payload, headers=headers)
        if body.get("status") != "completed":
            raise WebSearchFailed(f"The Responses upstream's search ended {body.get('status')!r}, not completed.")
        if not any(isinstance(i, dict) and i.get("type") == "web_search_call" for i in body.get("output") or ()):
            raise WebSearchFailed(f"The Responses upstream's model ({self.provider.model}) answered without searching.")
        return body

    async def _ask_brave(self, query: str, max_results: int, country: str) -> dict[str, Any]:
        """Brave's answer. Its ``country`` is one of a list: when Brave refuses the location's
        (422), the search is made again without it rather than failed. Raises: WebSearchFailed."""
        params = {"q": query, "count": str(min(max(max_results, 1), 20)), "text_decorations": "false"}
        if len(country) == 2:
            params["country"] = country
        headers = {"X-Subscription-Token": self._key("brave"), "Accept": "application/json"}
        answer = await self._request("Brave Search", "GET", self.provider.brave_url, params=params, headers=headers)
        if answer.status_code == 422 and "country" in params:
            log.info("Brave Search refused the country %r: searching without it", params.pop("country"))
            answer = await self._request("Brave Search", "GET", self.provider.brave_url, params=params, headers=headers)
        return _json("Brave Search", answer)

    async def _ask(self, name: str, method: str, url: str, **kwargs: Any) -> dict[str, Any]:
        """The provider's JSON answer. Raises: WebSearchFailed (naming the provider, never the key)."""
        return _json(name, await self._request(name, method, url, **kwargs))

    async def _request(self, name: str, method: str, url: str, **kwargs: Any) -> httpx2.Response:
        """One request to the provider. Raises: WebSearchFailed (no answer in time, no connection)."""
        if self._provider is None:
            self._provider = httpx2.AsyncClient(timeout=self.settings.timeout_s, follow_redirects=True)
        try:
            return await self._provider.request(method, url, **kwargs)
        except httpx2.TimeoutException:
            raise WebSearchFailed(f"{name} did not answer within {self.settings.timeout_s:g} s.") from None
        except httpx2.HTTPError as exc:
            raise WebSearchFailed(f"{name} could not be reached ({type(exc).__name__}).") from None

    # -- pages -------------------------------------------------------------------------------

    async def open_page(self, url: str) -> Page:
        """See :meth:`~troupe.agentloop.web_search.WebSearcher.open_page`."""
        deadline = time.monotonic() + self.settings.timeout_s
        try:
            async with asyncio.timeout(self.settings.timeout_s):
                page = await self._fetch(url, max_bytes=self.settings.max_page_bytes, page=True)
        except TimeoutError:
            raise WebSearchFailed(f"{url} did not load within {self.settings.timeout_s:g} s.") from None
        if page.media == "text/plain":
            return Page(url=page.url, title=page.url, text=_decode(page.body, page.charset).strip())
        left = max(0.1, deadline - time.monotonic())
        try:  # trafilatura finds the page's encoding in its bytes
            title, main = await asyncio.wait_for(asyncio.to_thread(_main_text, page.body, page.url), left)
        except TimeoutError:
            raise WebSearchFailed(f"{url} did not load within {self.settings.timeout_s:g} s.") from None
        return Page(url=page.url, title=title or page.url, text=main)

    async def _fetch(self, url: str, *, max_bytes: int, page: bool) -> _Fetched:
        """``url``'s answer, redirects followed, each URL checked by the policy.

        Args:
            page: a page the model opens: every URL is checked against its host's robots.txt
                (with ``respect_robots``), and only text types are read. False for robots.txt.

        Raises:
            WebSearchFailed: a URL the policy or robots.txt refuses, too many redirects, a
                non-2xx answer, not a text page, a body past ``max_bytes``, a connection that failed.
        """
        patterns = self._patterns()
        for _ in range(MAX_REDIRECTS + 1):
            why = await asyncio.to_thread(check_url, url, patterns, allowlist=_ALLOWLIST)  # it may resolve the host
            if why is not None:
                raise WebSearchFailed(f"{url} may not be fetched: {why}.")
            if page and self.settings.respect_robots and not await self._robots_allow(url):
                raise WebSearchFailed(f"{url} may not be fetched: the site's robots.txt disallows it for "
                                      f"{self._agent_name()}.")  # fmt: skip
            client = self._page_client(url_guard(url, patterns).allow_private)
            headers = {"User-Agent": self.settings.user_agent, "Accept": "text/html,application/xhtml+xml,text/plain"}
            try:
                async with client.stream("GET", url, headers=headers) as answer:
                    if answer.status_code in _REDIRECTS and "location" in answer.headers:
                        url = urljoin(url, answer.headers["location"])
                        continue
                    if not 200 <= answer.status_code < 300:
                        raise WebSearchFailed(f"{url} answered HTTP {answer.status_code}.")
                    media, charset = _content_type(answer.headers.get("content-type", ""))
                    if page and media not in _TEXT_TYPES:
                        raise WebSearchFailed(f"{url} is not a text page ({media or 'no content type'}).")
                    return _Fetched(str(answer.url), media, charset, await _read(answer, url, max_bytes))
            except httpx2.HTTPError as exc:
                raise WebSearchFailed(f"{url} could not be fetched ({type(exc).__name__}: {exc}).") from None
        raise WebSearchFailed(f"{url} redirects more than {MAX_REDIRECTS} times.")

    async def _robots_allow(self, url: str) -> bool:
        parts = urlsplit(url)
        origin = f"{parts.scheme.lower()}://{parts.netloc.lower()}"
        read = self._robots.get(origin)
        if read is None:  # no await since the lookup: one read per host
            read = self._robots[origin] = asyncio.ensure_future(self._read_robots(origin))
        rules = await asyncio.shield(read)  # an open that times out leaves the read to finish
        return rules is None or rules.can_fetch(self._agent_name(), url)

    async def _read_robots(self, origin: str) -> RobotFileParser | None:
        """The rules of ``origin``'s robots.txt; None (everything allowed) when it has none (4xx) or
        it cannot be read (5xx, a time-out, refused by the policy)."""
        try:
            async with asyncio.timeout(self.settings.timeout_s):
                fetched = await self._fetch(origin + "/robots.txt", max_bytes=_ROBOTS_BYTES, page=False)
        except (WebSearchFailed, TimeoutError) as exc:
            log.debug("robots.txt of %s not read (%s): everything is allowed", origin, exc or "a time-out")
            return None
        rules = RobotFileParser()
        rules.parse(_decode(fetched.body, fetched.charset).splitlines())
        return rules

    def _agent_name(self) -> str:
        """The product name robots.txt rules are matched against (``Troupe-WebSearch``)."""
        return self.settings.user_agent.split("/")[0].split()[0] or "*"

    def _patterns(self) -> tuple[str, ...]:
        from_env = [p.strip() for p in os.environ.get(ALLOWED_URLS_ENV, "").split(",")]
        return tuple(self.settings.allowed_urls) + tuple(p for p in from_env if p)

    def _page_client(self, private: bool) -> httpx2.AsyncClient:
        if private not in self._pages:  # each request bounded by timeout_s too (httpx's default is 5 s)
            self._pages[private] = httpx2.AsyncClient(transport=pinned_transport(AddressGuard(allow_private=private)),
                                                      follow_redirects=False, timeout=self.settings.timeout_s)  # fmt: skip
        return self._pages[private]


def _cited_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A Responses answer's search results, in SearXNG's shape (``url``, ``title``, ``content``):
    each page its answer cites, once, in the order of its first citation, with the passage that
    cites it (the text before the citation, back to the previous citation or line); then the
    sources it searched but did not cite (their URL only)."""
    results: dict[str, dict[str, Any]] = {}
    for item in body.get("output") or ():
        if not isinstance(item, dict) or item.get("type") != "message":
            continue
        for part in item.get("content") or ():
            text = part.get("text") if isinstance(part, dict) else None
            if not isinstance(text, str):
                continue
            after = 0  # where the text after the previous citation starts
            for note in part.get("annotations") or ():
                if not isinstance(note, dict) or note.get("type") != "url_citation" or not isinstance(note.get("url"), str):
                    continue
                start, end = note.get("start_index"), note.get("end_index")
                if not (isinstance(start, int) and isinstance(end, int) and 0 <= start <= end <= len(text)):
                    start = end = after
                passage = text[max(after, text.rfind("\n", 0, start) + 1) : start].strip().rstrip("([【").strip().lstrip(".,;:)】 ")
                after = max(after, end)
                seen = results.setdefault(note["url"], {"url": note["url"], "title": note.get("title"), "content": ""})
                if passage and passage not in seen["content"]:
                    seen["content"] = f"{seen['content']} … {passage}" if seen["content"] else passage
    for item in body.get("output") or ():
        if isinstance(item, dict) and item.get("type") == "web_search_call":
            for source in (item.get("action") or {}).get("sources") or ():
                url = source.get("url") if isinstance(source, dict) else None
                if isinstance(url, str) and url not in results:
                    results[url] = {"url": url, "title": None, "content": ""}
    return list(results.values())


def _json(name: str, answer: httpx2.Response) -> dict[str, Any]:
    """A provider's answer as a JSON object. Raises: WebSearchFailed (naming the provider and status)."""
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


async def _read(answer: httpx2.Response, url: str, max_bytes: int) -> bytes:
    """The body, read as it comes. Raises: WebSearchFailed (past ``max_bytes``, declared or read)."""
    declared = answer.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise WebSearchFailed(f"{url} is too large ({int(declared):,} bytes; the limit is {max_bytes:,}).")
    chunks, size = [], 0
    async for chunk in answer.aiter_bytes():
        size += len(chunk)
        if size > max_bytes:
            raise WebSearchFailed(f"{url} is too large (more than {max_bytes:,} bytes).")
        chunks.append(chunk)
    return b"".join(chunks)


def _content_type(header: str) -> tuple[str, str | None]:
    """``(media type, charset)`` of a ``Content-Type`` header."""
    media, _, params = header.partition(";")
    charset = _CHARSET.search(params)
    return media.strip().lower(), (charset[1] if charset else None)


def _decode(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return body.decode("utf-8", errors="replace")


def _plain(value: Any) -> str:
    """A provider's title or snippet as plain text: entities decoded, highlighting tags removed."""
    return " ".join(html.unescape(_HIGHLIGHT.sub("", value)).split()) if isinstance(value, str) else ""


def _with_sites(query: str, domains: Sequence[str]) -> str:
    """``query`` with ``site:`` terms for ``domains`` (one, or an ``OR`` of several)."""
    if not domains:
        return query
    sites = " OR ".join(f"site:{d}" for d in domains)
    return f"{query} {sites}" if len(domains) == 1 else f"{query} ({sites})"


def _main_text(html_page: bytes, url: str) -> tuple[str, str]:
    """``(title, main text)`` of an HTML page (trafilatura, imported here on first use); all of its
    text when trafilatura finds no main text."""
    import trafilatura

    document = trafilatura.bare_extraction(html_page, url=url, with_metadata=True, include_comments=False)
    title = str(getattr(document, "title", None) or "")
    text = str(getattr(document, "text", None) or "")
    return title, text.strip() or trafilatura.html2txt(html_page).strip()
