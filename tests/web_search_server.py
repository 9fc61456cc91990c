"""A small web for the ``web_search`` tests: a server that speaks SearXNG's JSON API (and Brave's
and Tavily's) over pages it serves itself, on 127.0.0.1 (served with tests/servers.py ``serve_app``).

* ``GET /search?q=…&format=json``: SearXNG's answer, ``{"query", "results": [{"url", "title",
  "content", "engine"}]}``, the pages holding the most of the query's words first; ``site:DOMAIN``
  terms (one, or ``(site:a OR site:b)``) keep only results whose host is DOMAIN or under it.
  Without ``format=json``, an HTML page (as a SearXNG whose JSON output is off answers).
* ``GET /brave`` (``X-Subscription-Token`` required; a ``country`` outside :data:`BRAVE_COUNTRIES`
  is a 422, as Brave's) and ``POST /tavily`` (a bearer key required; ``include_domains`` narrow
  as ``site:`` terms do): the same results in those providers' shapes.
* ``GET /robots.txt``: disallows ``/pages/private/`` for every agent; or answers
  :attr:`robots_status` when it is not 200.
* ``GET /pages/NAME``: the pages of :data:`PAGES` (HTML with navigation and footer around their
  text), and ``big`` (past any small limit), ``slow`` (answers when the test's
  :meth:`holding` block ends, or after :attr:`slow_s`), ``moved`` (a redirect to ``rocket``),
  ``to-private`` (a redirect to a private address), ``to-secret`` (a redirect to
  ``private/secret``), ``image`` (not text, 1 MB), ``notes.txt`` (plain text in Latin-1),
  ``private/secret`` (disallowed by ``/robots.txt``).
* ``search_status`` / ``search_reply``: answer ``/search`` with this status, or this JSON,
  instead (a provider that fails); ``slow_search``: ``/search`` answers as ``slow`` does.

Result URLs point at the server itself, whose address the test gives (:attr:`base`). Every request
is counted by path (:attr:`hits`); the last query parameters (or JSON body) of each provider
endpoint are kept (:attr:`asked`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

PAGES = {
    "rocket": ("Rocket manual", "The launch code for the rocket is blue seven. It is entered twice before launch."),
    "menu": ("Cafeteria menu", "The cafeteria serves soup on Tuesdays and the rocket salad on Fridays."),
    "cats": ("Office cats", "The office cat is called Pixel. Pixel sleeps on the launch console."),
}
"""name -> (title, text): the pages ``/search`` finds."""

BRAVE_KEY = "brave-test-key"
TAVILY_KEY = "tavily-test-key"
BRAVE_COUNTRIES = frozenset({"US", "GB", "DE", "FR"})
"""The countries this Brave serves (the real one has a longer list, upper-case codes)."""
NOTES = "Caf\u00e9 cr\u00e8me is served at nine."
"""The text of ``/pages/notes.txt`` (sent in Latin-1)."""


class SmallWeb:
    """The ASGI app (module docstring)."""

    def __init__(self) -> None:
        self.base = ""
        """``http://127.0.0.1:PORT``, set by the test once the server is up (result URLs use it)."""
        self.hits: Counter[str] = Counter()
        self.search_status = 200
        self.search_reply: dict[str, Any] | None = None
        """When set, ``/search?format=json`` answers this instead."""
        self.slow_search = False
        self.robots_status = 200
        self.slow_s = 2.5
        """How long ``/pages/slow`` takes to answer outside a :meth:`holding` block."""
        self.asked: dict[str, dict[str, Any]] = {}
        """``/search``, ``/brave``, ``/tavily`` -> the last request's query parameters or JSON body."""
        self._release = threading.Event()
        self.queries: list[str] = []
        self.sites: dict[str, str] = {}
        """page name -> the host its result URL names (default: the server's own)."""

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Slow answers wait until this block ends (not :attr:`slow_s`): a test's time limit is
        what ends them, and the server is not kept busy after the test."""
        self._release = threading.Event()
        try:
            yield
        finally:
            self._release.set()

    async def _slowly(self) -> None:
        release, deadline = self._release, time.monotonic() + self.slow_s
        while not release.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path, query = scope["path"], parse_qs(scope["query_string"].decode())
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.hits[path] += 1
        if path == "/health":
            return await _send(send, 200, b"ok", "text/plain")
        if path == "/robots.txt":
            if self.robots_status != 200:
                return await _send(send, self.robots_status, b"no robots here", "text/plain")
            return await _send(send, 200, b"User-agent: *\nDisallow: /pages/private/\n", "text/plain")
        if path == "/search":
            return await self._search(send, query)
        if path == "/brave":
            self.asked[path] = {k: v[0] for k, v in query.items()}
            if headers.get("x-subscription-token") != BRAVE_KEY:
                return await _send(send, 401, b'{"error": "bad key"}', "application/json")
            if query.get("country", ["US"])[0] not in BRAVE_COUNTRIES:
                return await _send(send, 422, b'{"type": "ErrorResponse"}', "application/json")
            results = self._find(query.get("q", [""])[0], int(query.get("count", ["20"])[0]))
            body = {"web": {"results": [{"url": r["url"], "title": r["title"], "description": r["content"]}
                                        for r in results]}}  # fmt: skip
            return await _send(send, 200, json.dumps(body).encode(), "application/json")
        if path == "/tavily":
            if headers.get("authorization") != f"Bearer {TAVILY_KEY}":
                return await _send(send, 401, b'{"error": "bad key"}', "application/json")
            asked = self.asked[path] = json.loads(await _body(receive))
            sites = asked.get("include_domains") or []
            text = asked["query"] + ("" if not sites else " (" + " OR ".join(f"site:{d}" for d in sites) + ")")
            body = {"results": self._find(text, asked.get("max_results", 5))}
            return await _send(send, 200, json.dumps(body).encode(), "application/json")
        if path.startswith("/pages/"):
            return await self._page(send, path.removeprefix("/pages/"))
        await _send(send, 404, b"not found", "text/plain")

    async def _search(self, send: Any, query: dict[str, list[str]]) -> None:
        if self.search_status != 200:
            return await _send(send, self.search_status, b"engine trouble", "text/plain")
        text = query.get("q", [""])[0]
        self.queries.append(text)
        self.asked["/search"] = {k: v[0] for k, v in query.items()}
        if self.slow_search:
            await self._slowly()
        if query.get("format") != ["json"]:
            return await _send(send, 200, b"<html><body>results</body></html>", "text/html")
        if self.search_reply is not None:
            return await _send(send, 200, json.dumps(self.search_reply).encode(), "application/json")
        body = {"query": text, "number_of_results": 0, "results": self._find(text, 10)}
        await _send(send, 200, json.dumps(body).encode(), "application/json")

    def _find(self, text: str, limit: int) -> list[dict[str, Any]]:
        sites = re.findall(r"site:(\S+?)\)?(?:\s|$)", text)
        words = {w for w in re.sub(r"\(?site:\S+|\bOR\b|[()?]", " ", text).lower().split()}
        scored = []
        for name, (title, body) in PAGES.items():
            host = self.sites.get(name, urlsplit(self.base).hostname or "127.0.0.1")
            url = f"{self.base}/pages/{name}" if name not in self.sites else f"http://{host}/pages/{name}"
            if sites and not any(host == s or host.endswith("." + s) for s in sites):
                continue
            score = len(words & set(re.findall(r"[a-z]+", body.lower())))
            if score:
                scored.append((score, {"url": url, "title": title, "content": body[:60], "engine": "small-web"}))
        return [r for _, r in sorted(scored, key=lambda s: -s[0])][:limit]

    async def _page(self, send: Any, name: str) -> None:
        if name in PAGES:
            title, text = PAGES[name]
            html = (f"<html><head><title>{title} - Small Web</title></head><body><nav><a href='/'>Home</a> | "
                    f"<a href='/about'>About us</a></nav><article><h1>{title}</h1><p>{text}</p><p>{text}</p>"
                    "</article><footer>Copyright 2026 Small Web. All rights reserved.</footer></body></html>")  # fmt: skip
            return await _send(send, 200, html.encode(), "text/html; charset=utf-8")
        if name == "big":
            return await _send(send, 200, b"<html><body><p>" + b"big " * 100_000 + b"</p></body></html>", "text/html")
        if name == "slow":
            await self._slowly()
            return await _send(send, 200, b"<html><body><p>late</p></body></html>", "text/html")
        if name == "moved":
            return await _send(send, 302, b"", "text/plain", [(b"location", b"/pages/rocket")])
        if name == "to-private":
            return await _send(send, 302, b"", "text/plain", [(b"location", b"http://10.0.0.1/pages/rocket")])
        if name == "to-secret":
            return await _send(send, 302, b"", "text/plain", [(b"location", b"/pages/private/secret")])
        if name == "image":  # larger than the tests' limits: refused for its type, before its size
            return await _send(send, 200, b"\x89PNG\r\n\x1a\n" + bytes(1_000_000), "image/png")
        if name == "notes.txt":
            return await _send(send, 200, NOTES.encode("latin-1"), "text/plain; charset=ISO-8859-1")
        if name == "private/secret":
            return await _send(send, 200, b"<html><body><p>not for robots</p></body></html>", "text/html")
        await _send(send, 404, b"not found", "text/plain")


async def _body(receive: Any) -> bytes:
    chunks, more = [], True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)


async def _send(send: Any, status: int, body: bytes, media: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [(b"content-type", media.encode()), (b"content-length", str(len(body)).encode()), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
