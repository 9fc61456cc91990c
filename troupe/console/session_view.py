"""A session on one timeline: its traces' spans as rows of a nested Gantt chart (pure).

The console's session view (``#/sessions/<id>``) draws what ``GET
/v1/agents/sessions/{id}/traces`` answers: it reads the same OTLP JSON
(:mod:`troupe.observe.session_trace` builds it), so the tree the page shows is the one an OTLP
collector would get. Each span becomes a row, parents before their children (depth first, in
the trace's order), timed in seconds from the earliest span's start, indented by its depth:
the session's turns, under each its responses and their steps, and a subagent's turn under the
``create_subagent`` call that made it, so subagents that ran at once are bars side by side.

Example::

    rows = span_rows([trace["otlp"] for trace in traces_oldest_first])
    [(r["depth"], r["name"], r["start_s"], r["end_s"]) for r in rows]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["span_rows"]

_KIND = {"chat": "model", "execute_tool": "tool", "mcp_call": "tool", "agent.session.turn": "turn",
         "troupe.response": "response"}  # fmt: skip
"""A row's kind (the chart's colour) by its span name's first word."""


def span_rows(traces: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of OTLP JSON ``ExportTraceServiceRequest`` s, one per span, each trace's depth
    first; keys ``span_id``, ``parent_id``, ``trace_id``, ``depth``, ``kind`` (turn, response,
    model, tool), ``name``, ``start_s``, ``end_s``, ``error`` and ``attributes`` (plain values)."""
    spans = [span for otlp in traces for resource in otlp.get("resourceSpans") or ()
             for scope in resource.get("scopeSpans") or () for span in scope.get("spans") or ()]  # fmt: skip
    if not spans:
        return []
    origin = min(int(s["startTimeUnixNano"]) for s in spans)
    children: dict[str | None, list[dict[str, Any]]] = {}
    ids = {s["spanId"] for s in spans}
    for span in spans:
        parent = span.get("parentSpanId")
        children.setdefault(parent if parent in ids else None, []).append(span)
    rows: list[dict[str, Any]] = []

    def visit(span: dict[str, Any], depth: int) -> None:
        name = span["name"]
        rows.append({
            "span_id": span["spanId"], "parent_id": span.get("parentSpanId"), "trace_id": span["traceId"],
            "depth": depth, "kind": _KIND.get(name, _KIND.get(name.split(" ")[0], "tool")), "name": name,
            "start_s": (int(span["startTimeUnixNano"]) - origin) / 1e9,
            "end_s": (int(span["endTimeUnixNano"]) - origin) / 1e9,
            "error": (span.get("status") or {}).get("message"),
            "attributes": {a["key"]: _plain(a["value"]) for a in span.get("attributes") or ()},
        })  # fmt: skip
        for child in children.get(span["spanId"], ()):
            visit(child, depth + 1)

    for root in children.get(None, ()):
        visit(root, 0)
    return rows


def _plain(value: dict[str, Any]) -> Any:
    """An OTLP JSON ``AnyValue`` as a plain value (an ``intValue`` string as an int)."""
    if "intValue" in value:
        return int(value["intValue"])
    return next(iter(value.values()), None)
