"""The ``file_search`` tool: the loop searches the request's vector stores for the model.

Internal to the loop and Troupe's runtime: not part of :mod:`troupe.agentloop`'s public surface.

A request that offers ``{"type": "file_search", "vector_store_ids": [...], ...}`` shows the
model one function tool, ``file_search(query)``. A call of it is run on the server (by
:class:`FileSearchTool`, an executor like the others) and streams as a ``file_search_call``
item, not a ``function_call``: added (``in_progress``), ``response.file_search_call.in_progress``,
``…searching`` once it runs, ``…completed`` and done with its ``queries`` (and its
``results`` when the request's ``include`` asks for ``file_search_call.results``).

**What the model sees.** The tool's output lists the passages found, best first, each opened
by a marker the model can cite, and the file it came from::

    【3†guide.md】 (file_id: file-abc) The passage text...

Markers are numbered across the whole thread, so a citation names one passage even after
several searches. **Citations.** When the answer is done, every marker of a passage the
thread's searches returned becomes a ``file_citation`` annotation of its ``output_text``
(``file_id``, ``filename``, ``index``: where the marker starts in the text). The markers stay
in the text: the text streamed out as deltas before the annotations were known, and the
deltas must add up to the text. Citations are read from the transcript's ``file_search``
outputs alone (:func:`citations`), so they survive a resumed run and a later turn alike.

**In history.** A ``file_search_call`` item replayed to the model becomes the call and its
output again, rebuilt from its ``results``; an item stored without them (the request did not
include them) tells the model its results were not kept (:func:`replayed_output`).

What runs the search is a :class:`FileSearcher` (the host's reaches the vector stores through
the storage actor); the loop knows nothing of how.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .model import ToolCall
from .tools import parse_arguments

__all__ = [
    "FILE_SEARCH",
    "FileSearcher",
    "FileSearchTool",
    "citations",
    "format_results",
    "replayed_output",
    "parse_results",
]

FILE_SEARCH = "file_search"
"""The function tool the model is shown, and the name its calls carry."""

DEFAULT_MAX_NUM_RESULTS = 10

_DESCRIPTION = (
    "Search the files the user provided for passages relevant to a query. Returns numbered "
    "passages, best first; when you use one, cite it by writing its marker (for example "
    "【0†notes.md】) right after the sentence it supports."
)
_PARAMETERS = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "What to look for, in a few words or a question."}},
    "required": ["query"],
}
_PASSAGE = re.compile(r"^【(\d+)†([^】]*)】 \(file_id: ([^)\s]+)\) ?(.*)$")
_MARKER = re.compile(r"【(\d+)†[^】]*】")


class FileSearcher(Protocol):
    """Searches vector stores (the host's goes through the storage actor)."""

    async def search(
        self,
        vector_store_ids: Sequence[str],
        query: str,
        *,
        max_num_results: int,
        filters: dict[str, Any] | None,
        ranking_options: dict[str, Any] | None,
    ) -> list[dict[str, Any]]:
        """The best passages for ``query``, best first: each ``{"file_id", "filename",
        "score", "text", "attributes"}``.

        Raises:
            Exception: the search failed (a store that does not exist, a bad filter); the
                model is told, and the loop goes on.
        """
        ...


@dataclass(slots=True)
class FileSearchTool:
    """The executor of ``file_search`` calls for one response.

    Args:
        searcher: runs the searches.
        spec: the request's ``file_search`` tool (``vector_store_ids``, ``max_num_results``,
            ``filters``, ``ranking_options``).
        next_marker: the first marker number this response's passages get (after the
            thread's, :func:`next_marker`).
    """

    searcher: FileSearcher
    spec: dict[str, Any]
    next_marker: int = 0
    results: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """call_id -> the results its search returned (for the ``file_search_call`` item)."""

    def definitions(self) -> list[dict[str, Any]]:
        return [{"type": "function", "name": FILE_SEARCH, "description": _DESCRIPTION, "parameters": _PARAMETERS,
                 "strict": False}]  # fmt: skip

    def can_execute(self, call: ToolCall) -> bool:
        return call.name == FILE_SEARCH

    def is_idempotent(self, call: ToolCall) -> bool:
        return True  # a search changes nothing

    async def execute(self, call: ToolCall) -> str:
        query = query_of(call.arguments)
        if not query:
            raise ValueError("file_search needs a non-empty 'query' string.")
        found = await self.searcher.search(
            list(self.spec["vector_store_ids"]),
            query,
            max_num_results=self.spec.get("max_num_results") or DEFAULT_MAX_NUM_RESULTS,
            filters=self.spec.get("filters"),
            ranking_options=self.spec.get("ranking_options"),
        )
        self.results[call.call_id] = found
        first, self.next_marker = self.next_marker, self.next_marker + len(found)  # no await between: one owner
        return format_results(found, first)


def query_of(arguments: str) -> str:
    """The ``query`` of a ``file_search`` call's arguments ("" when it has none)."""
    try:
        query = parse_arguments(arguments).get("query")
    except Exception:  # noqa: BLE001 - malformed arguments: no query
        return ""
    return query.strip() if isinstance(query, str) else ""


def format_results(results: Sequence[dict[str, Any]], first_marker: int) -> str:
    """What the model is shown for a search: one passage per line, best first, each opened by
    its marker and its file id; or that nothing was found."""
    if not results:
        return "No passage of the files matched this query."
    lines = ["Passages found, best first. Cite one you use by writing its marker after the sentence it supports."]
    for n, result in enumerate(results, start=first_marker):
        text = " ".join(str(result.get("text") or "").split())  # one line per passage
        file_id = "".join(str(result.get("file_id") or "unknown").split())
        lines.append(f"【{n}†{_filename(result)}】 (file_id: {file_id}) {text}")
    return "\n".join(lines)


def parse_results(output: str) -> list[tuple[int, str, str, str]]:
    """The passages of a :func:`format_results` output: ``(marker, filename, file_id, text)``."""
    found = []
    for line in output.splitlines():
        match = _PASSAGE.match(line)
        if match:
            found.append((int(match[1]), match[2], match[3], match[4]))
    return found


def next_marker(outputs: Iterable[str]) -> int:
    """The marker number after every one the thread's ``file_search`` outputs used."""
    return max((n + 1 for output in outputs for n, *_ in parse_results(output)), default=0)


def citations(text: str, outputs: Iterable[str]) -> list[dict[str, Any]]:
    """The ``file_citation`` annotations of ``text``: one per marker of a passage the
    ``outputs`` (the thread's ``file_search`` outputs) returned, in text order."""
    passages = {n: (filename, file_id) for output in outputs for n, filename, file_id, _ in parse_results(output)}
    found = []
    for match in _MARKER.finditer(text):
        passage = passages.get(int(match[1]))
        if passage is not None:
            filename, file_id = passage
            found.append({"file_id": file_id, "filename": filename, "index": match.start(), "type": "file_citation"})
    return found


def replayed_output(item: dict[str, Any], first_marker: int) -> str:
    """What the model is shown, in a later turn, for a ``file_search_call`` item of history."""
    results = replayed_results(item)
    if results is None:
        return "The results of this search were not kept (the request did not include them)."
    return format_results(results, first_marker)


def replayed_results(item: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A history ``file_search_call``'s results, as far as they are results (a client may send
    any); None when it has none."""
    results = item.get("results")
    return [r for r in results if isinstance(r, dict)] if isinstance(results, list) else None


def _filename(result: dict[str, Any]) -> str:
    name = str(result.get("filename") or result.get("file_id") or "unknown")
    return name.replace("】", "]").replace("†", "+").replace("\n", " ")
