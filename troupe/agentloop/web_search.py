"""The ``web_search`` tool: the loop searches the web for the model, opens pages, finds text in them.

Internal to the loop and Troupe's runtime: not part of :mod:`troupe.agentloop`'s public surface.

A request that offers ``{"type": "web_search", ...}`` (or ``web_search_preview``) shows the model
three function tools: ``web_search(query)``, ``web_open_page(url)`` and ``web_find_in_page(url,
pattern)``. Each call is run on the server (by :class:`WebSearchTool`, an executor like the others)
and streams as a ``web_search_call`` item whose ``action`` says what it did (``search``,
``open_page``, ``find_in_page``): added (``in_progress``), ``response.web_search_call.in_progress``,
``…searching`` once it runs, ``…completed`` and done (``failed`` when it could not run; the model is
told why and the loop goes on). ``include: ["web_search_call.action.sources"]`` adds a search's
``sources`` (the URLs it returned) to its action.

**What the model sees.** A search lists its results, best first, each opened by a marker the model
can cite, its title and URL, then its snippet; an opened page is its marker, title and URL, then
its main text (cut to the request's ``search_context_size``); a find lists the page's lines that
hold the pattern::

    【3†Example Domain】 (url: https://example.com/) This domain is for use in examples...

Markers are numbered across the whole thread, as ``file_search``'s are (a result and a page of one
URL share a number within a response). **Citations.** When the answer is done, every marker of a
source the thread's web outputs named becomes a ``url_citation`` annotation of its
``output_text`` (``url``, ``title``, ``start_index`` and ``end_index``: the marker's span in the
text), streamed as ``response.output_text.annotation.added`` before the text is done.

**Policy here, fetching elsewhere.** The request's ``filters.allowed_domains`` is enforced here
whatever the provider does: results of other domains are dropped and such a page is not opened
(a domain allows its subdomains). ``user_location`` is handed to the provider. The same query
twice in one response runs once, and so does the same page (a per-response cache). What searches
and fetches (providers, the URL policy, robots.txt, size and time limits, text extraction) is a
:class:`WebSearcher` (the runtime's, :mod:`troupe.runtime.web_search`); the loop knows nothing of how.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from troupe.protocol import InvalidRequest

from .model import ToolCall
from .tools import parse_arguments

__all__ = [
    "FIND_IN_PAGE",
    "OPEN_PAGE",
    "WEB_SEARCH",
    "WEB_TOOL_NAMES",
    "Page",
    "SearchHit",
    "WebSearchFailed",
    "WebSearchSpec",
    "WebSearchTool",
    "WebSearcher",
    "action_of",
    "domain_allowed",
    "domain_name",
    "next_marker",
    "replayed",
    "sources_of",
    "url_citations",
    "web_search_spec",
]

WEB_SEARCH = "web_search"
OPEN_PAGE = "web_open_page"
FIND_IN_PAGE = "web_find_in_page"
WEB_TOOL_NAMES = (WEB_SEARCH, OPEN_PAGE, FIND_IN_PAGE)
"""The function tools the model is shown for a ``web_search`` tool, and the names its calls carry."""


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One result of a search."""

    url: str
    title: str
    snippet: str = ""


@dataclass(frozen=True, slots=True)
class Page:
    """An opened page: its main text, extracted (no markup)."""

    url: str
    """The page's URL after redirects."""
    title: str
    text: str


class WebSearchFailed(Exception):
    """A search or a fetch that could not be made (the provider failed, the page is refused, too
    large or too slow): its message is what the model is told."""


class WebSearcher(Protocol):
    """Searches the web and opens pages (the runtime's goes through the configured provider)."""

    async def search(
        self, query: str, *, max_results: int, allowed_domains: Sequence[str] = (),
        user_location: dict[str, Any] | None = None,
    ) -> list[SearchHit]:  # fmt: skip
        """The best results for ``query``, best first, at most ``max_results``.

        ``allowed_domains`` (lower-case host names; each allows its subdomains) may be passed on to
        the provider as a hint; the loop filters the results again. ``user_location``: the
        request's (``{"type": "approximate", "city", "region", "country", "timezone"}``), if any.

        Raises:
            WebSearchFailed: the provider could not be asked, or answered with an error.
        """
        ...

    async def open_page(self, url: str) -> Page:
        """Fetch ``url`` and extract its main text.

        Raises:
            WebSearchFailed: the URL is refused (policy, robots.txt), the page is too large, too
                slow, not text, or could not be fetched.
        """
        ...


# -- the tool ------------------------------------------------------------------------------------

CONTEXT_SIZES = {"low": (3, 2_000), "medium": (5, 6_000), "high": (10, 12_000)}
"""``search_context_size`` → (results per search, characters of an opened page the model sees)."""

_SEARCH_DESCRIPTION = (
    "Search the web. Returns numbered results, best first, each with its title, URL and a snippet; "
    "when you use one, cite it by writing its marker (for example 【0†Example Domain】) right after "
    "the sentence it supports. Open a result with web_open_page to read it whole."
)
_OPEN_DESCRIPTION = "Open a web page (a URL from the search results) and read its main text."
_FIND_DESCRIPTION = "Find the lines of a web page that contain a pattern (plain text, case-insensitive)."
_MARKER = re.compile(r"【(\d+)†[^】]*】")
_SOURCE = re.compile(r"^【(\d+)†([^】]*)】 \(url: (\S+)\)")
_FIND_CONTEXT = 200
_MAX_FINDS = 10


@dataclass(frozen=True, slots=True)
class WebSearchSpec:
    """A request's ``web_search`` tool, checked (:func:`web_search_spec`)."""

    index: int
    allowed_domains: tuple[str, ...] = ()
    user_location: dict[str, Any] | None = None
    context_size: str = "medium"

    @property
    def max_results(self) -> int:
        return CONTEXT_SIZES[self.context_size][0]

    @property
    def page_chars(self) -> int:
        return CONTEXT_SIZES[self.context_size][1]


def web_search_spec(tools: Sequence[dict[str, Any]]) -> WebSearchSpec | None:
    """The request's one ``web_search`` (or ``web_search_preview``) tool, checked; None when it has none.

    Raises:
        InvalidRequest: two of them; a bad ``filters.allowed_domains``, ``search_context_size``
            or ``user_location`` (naming ``tools[i].…``); ``search_content_types`` other than text;
            ``external_web_access: false`` (there is
            no cache to answer from offline).
    """
    found = [(i, t) for i, t in enumerate(tools) if t.get("type") in WEB_SEARCH_TYPES]
    if not found:
        return None
    if len(found) > 1:
        raise InvalidRequest("Only one web_search tool may be given.", param=f"tools[{found[1][0]}]",
                             code="invalid_value")  # fmt: skip
    index, tool = found[0]
    at = f"tools[{index}]"
    size = tool.get("search_context_size") or "medium"
    if size not in CONTEXT_SIZES:
        raise InvalidRequest(f"Invalid value for '{at}.search_context_size': {size!r}. Expected 'low', 'medium' or "
                             "'high'.", param=f"{at}.search_context_size", code="invalid_value")  # fmt: skip
    if tool.get("external_web_access") is False:
        raise InvalidRequest("'external_web_access: false' (cached results only) is not available on this server: "
                             "its searches always go to the provider.", param=f"{at}.external_web_access",
                             code="unsupported_value")  # fmt: skip
    kinds = tool.get("search_content_types")
    if kinds is not None and (not isinstance(kinds, list) or set(kinds) - {"text"}):
        raise InvalidRequest(f"'{at}.search_content_types' may only be [\"text\"] on this server: its searches "
                             "find text, not images.", param=f"{at}.search_content_types",
                             code="unsupported_value")  # fmt: skip
    filters = tool.get("filters") or {}
    domains = filters.get("allowed_domains") if isinstance(filters, dict) else None
    allowed: list[str] = []
    for n, domain in enumerate(domains or []):
        host = domain_name(domain)
        if host is None:
            raise InvalidRequest(f"Invalid '{at}.filters.allowed_domains[{n}]': {domain!r} is not a domain name (such "
                                 "as example.com).", param=f"{at}.filters.allowed_domains[{n}]",
                                 code="invalid_value")  # fmt: skip
        allowed.append(host)
    location = tool.get("user_location")
    if location is not None and not isinstance(location, dict):
        raise InvalidRequest(f"Invalid type for '{at}.user_location': expected an object.",
                             param=f"{at}.user_location", code="invalid_type")  # fmt: skip
    return WebSearchSpec(index, tuple(allowed), location or None, size)


WEB_SEARCH_TYPES = ("web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11")
"""The tool types this serves (the SDK's ``WebSearchToolParam`` and ``WebSearchPreviewToolParam``)."""


def domain_name(value: Any) -> str | None:
    """``value`` as a lower-case host name (a scheme or path given with it is dropped); None if it is none."""
    if not isinstance(value, str):
        return None
    host = value.strip().lower()
    if "://" in host:
        host = urlsplit(host).hostname or ""
    host = host.split("/")[0].strip(".")
    return host if host and all(part and len(part) < 64 for part in host.split(".")) and " " not in host else None


def domain_allowed(url: str, allowed: Sequence[str]) -> bool:
    """``url``'s host is one of ``allowed`` or a subdomain of one (any host when ``allowed`` is empty)."""
    if not allowed:
        return True
    host = (urlsplit(url).hostname or "").lower().rstrip(".")
    return any(host == d or host.endswith("." + d) for d in allowed)


@dataclass(slots=True)
class WebSearchTool:
    """The executor of the web tools' calls for one response.

    Args:
        searcher: runs the searches and fetches.
        spec: the request's ``web_search`` tool.
        next_marker: the first marker this response's sources get (after the thread's, :func:`next_marker`).
    """

    searcher: WebSearcher
    spec: WebSearchSpec
    next_marker: int = 0
    actions: dict[str, dict[str, Any]] = field(default_factory=dict)
    """call_id -> the ``action`` of its ``web_search_call`` item (a search's with its ``sources``)."""
    _searches: dict[str, asyncio.Future[list[SearchHit]]] = field(default_factory=dict)
    _pages: dict[str, asyncio.Future[Page]] = field(default_factory=dict)
    _markers: dict[str, int] = field(default_factory=dict)
    """url -> its marker in this response (a result and its opened page share one)."""

    def definitions(self) -> list[dict[str, Any]]:
        url = {"type": "string", "description": "The page's URL."}
        return [
            _function(WEB_SEARCH, _SEARCH_DESCRIPTION, {"query": {"type": "string", "description": "What to look for."}}),
            _function(OPEN_PAGE, _OPEN_DESCRIPTION, {"url": url}),
            _function(FIND_IN_PAGE, _FIND_DESCRIPTION, {"url": url, "pattern": {"type": "string"}}),
        ]

    def can_execute(self, call: ToolCall) -> bool:
        return call.name in WEB_TOOL_NAMES

    def is_idempotent(self, call: ToolCall) -> bool:
        return True  # reading the web changes nothing here

    async def execute(self, call: ToolCall) -> str:
        action = action_of(call.name, call.arguments)
        self.actions[call.call_id] = action
        if call.name == WEB_SEARCH:
            if not action["query"]:
                raise WebSearchFailed("web_search needs a non-empty 'query' string.")
            hits = await self._search(action["query"])
            action["sources"] = [{"type": "url", "url": h.url} for h in hits]
            return self._format_hits(action["query"], hits)
        url = action.get("url") or ""
        if not url.startswith(("http://", "https://")):
            raise WebSearchFailed(f"{call.name} needs an http(s) 'url'.")
        if not domain_allowed(url, self.spec.allowed_domains):
            raise WebSearchFailed(f"{url} is not in the allowed domains ({', '.join(self.spec.allowed_domains)}).")
        page = await self._open(url)
        if call.name == OPEN_PAGE:
            text = page.text if len(page.text) <= self.spec.page_chars else page.text[: self.spec.page_chars] + " […]"
            return f"{self._source_line(page.url, page.title)}\n{text}"
        return self._format_finds(page, action.get("pattern") or "")

    async def _search(self, query: str) -> list[SearchHit]:
        key = " ".join(query.split()).lower()
        if key not in self._searches:  # the same query twice runs once, concurrent calls too
            self._searches[key] = asyncio.ensure_future(self.searcher.search(
                query, max_results=self.spec.max_results, allowed_domains=self.spec.allowed_domains,
                user_location=self.spec.user_location,
            ))  # fmt: skip
        hits = await asyncio.shield(self._searches[key])
        return [h for h in hits if domain_allowed(h.url, self.spec.allowed_domains)][: self.spec.max_results]

    async def _open(self, url: str) -> Page:
        if url not in self._pages:
            self._pages[url] = asyncio.ensure_future(self.searcher.open_page(url))
        return await asyncio.shield(self._pages[url])

    def _marker(self, url: str) -> int:
        if url not in self._markers:  # no await between the read and the write: one owner
            self._markers[url], self.next_marker = self.next_marker, self.next_marker + 1
        return self._markers[url]

    def _source_line(self, url: str, title: str) -> str:
        return f"【{self._marker(url)}†{_clean(title) or url}】 (url: {''.join(url.split())})"

    def _format_hits(self, query: str, hits: Sequence[SearchHit]) -> str:
        if not hits:
            return f"No web page matched {query!r}."
        lines = [f"Web results for {query!r}, best first. Cite one you use by writing its marker after the sentence "
                 "it supports."]  # fmt: skip
        lines += [f"{self._source_line(h.url, h.title)} {' '.join(h.snippet.split())}".rstrip() for h in hits]
        return "\n".join(lines)

    def _format_finds(self, page: Page, pattern: str) -> str:
        if not pattern.strip():
            raise WebSearchFailed("web_find_in_page needs a non-empty 'pattern'.")
        found: list[str] = []
        lowered, needle = page.text.lower(), pattern.strip().lower()
        start = lowered.find(needle)
        while start >= 0 and len(found) < _MAX_FINDS:
            left, right = max(0, start - _FIND_CONTEXT), min(len(page.text), start + len(needle) + _FIND_CONTEXT)
            found.append("… " + " ".join(page.text[left:right].split()) + " …")
            start = lowered.find(needle, right)
        head = self._source_line(page.url, page.title)
        if not found:
            return f"{head}\n{pattern!r} is not on this page."
        return f"{head}\n{len(found)} match(es) of {pattern!r}:\n" + "\n".join(found)


def _function(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "name": name, "description": description, "strict": False,
            "parameters": {"type": "object", "properties": properties, "required": list(properties)}}  # fmt: skip


def _clean(title: str) -> str:
    return " ".join(title.replace("】", "]").replace("†", "+").split())


def action_of(name: str, arguments: str) -> dict[str, Any]:
    """The ``action`` of a ``web_search_call`` for a call of ``name`` with these arguments."""
    try:
        args = parse_arguments(arguments)
    except Exception:  # noqa: BLE001 - malformed arguments: an empty action, and the call fails
        args = {}

    def text(key: str) -> str:
        value = args.get(key)
        return value.strip() if isinstance(value, str) else ""

    if name == WEB_SEARCH:
        return {"type": "search", "query": text("query")}
    if name == OPEN_PAGE:
        return {"type": "open_page", "url": text("url")}
    return {"type": "find_in_page", "url": text("url"), "pattern": text("pattern")}


def sources_of(outputs: Iterable[str]) -> dict[int, tuple[str, str]]:
    """marker -> (title, url) of every source the thread's web outputs named."""
    found: dict[int, tuple[str, str]] = {}
    for output in outputs:
        for line in output.splitlines():
            match = _SOURCE.match(line)
            if match:
                found[int(match[1])] = (match[2], match[3])
    return found


def next_marker(outputs: Iterable[str]) -> int:
    """The marker after every one the thread's web outputs used."""
    return max((n + 1 for n in sources_of(outputs)), default=0)


def url_citations(text: str, outputs: Iterable[str]) -> list[dict[str, Any]]:
    """The ``url_citation`` annotations of ``text``: one per marker of a source the outputs named,
    in text order, each spanning its marker."""
    sources = sources_of(outputs)
    found = []
    for match in _MARKER.finditer(text):
        source = sources.get(int(match[1]))
        if source is not None:
            title, url = source
            found.append({"type": "url_citation", "url": url, "title": title, "start_index": match.start(),
                          "end_index": match.end()})  # fmt: skip
    return found


def replayed(item: dict[str, Any]) -> tuple[str, str, str]:
    """A history ``web_search_call`` as the model is shown it again: ``(tool name, arguments, output)``.
    Its results were not kept (an item holds its action and, at most, the URLs a search returned)."""
    given = item.get("action")
    action: dict[str, Any] = given if isinstance(given, dict) else {}
    kind = action.get("type")
    if kind == "open_page":
        name, args = OPEN_PAGE, {"url": action.get("url") or ""}
    elif kind == "find_in_page":
        name, args = FIND_IN_PAGE, {"url": action.get("url") or "", "pattern": action.get("pattern") or ""}
    else:
        name, args = WEB_SEARCH, {"query": action.get("query") or ""}
    urls = [str(s["url"]) for s in action.get("sources") or [] if isinstance(s, dict) and isinstance(s.get("url"), str)]
    output = "The results of this call were not kept; call it again to read them."
    if urls:
        output += " It returned: " + ", ".join(urls)
    return name, json.dumps(args), output
