"""A session turn's trace as OTLP JSON, from what its responses stored: pure, no OpenTelemetry.

``GET /v1/agents/sessions/{id}/traces`` answers one ``agent.session.trace`` per root turn of a
session; its ``otlp`` is an OTLP JSON ``ExportTraceServiceRequest`` (the JSON the OTLP/HTTP
exporters send, and collectors accept) whose spans are this tree::

    agent.session.turn                   SERVER   the root turn: troupe.session.id, troupe.turn.id, …
    ├── troupe.response                  INTERNAL one per response of the turn (invoke_agent attributes)
    │   ├── chat <model>                 CLIENT   one per step trace of the response:
    │   ├── execute_tool <name>          CLIENT   the same names and attributes as the spans
    │   └── mcp_call <name>              CLIENT   :mod:`.tracing` emits (:func:`.spans.step_span`)
    └── troupe.response                           the next response, after the turn's subagent calls
    … and under the response that made them:
        execute_tool create_subagent     CLIENT   a subagent call, run by the session between two
        │                                         responses (from the end of one to the next's start)
        └── agent.session.turn           INTERNAL the subagent's turn that call started, with its
            └── troupe.response …                 own responses and steps, recursively

So a parent and its subagents sit on one timeline: two subagents' ``execute_tool sleep`` spans
overlap in time when they ran at once. A subagent's turn hangs under the call that started it
(its ``create_subagent``, or a ``send_subagent_input`` naming it, the last one started before
the turn was), else under the root turn's span.

What is shown is what is stored when it is read: a running response's steps are those its
checkpoints stored (:class:`ResponseRun`), and its span ends at its last step's end; nothing
waits for the rest.

Ids are deterministic, so a trace read twice has the same ids: the trace id is the first 16
bytes of sha256 of the root turn's id; a span id, the first 8 bytes of sha256 of what it stands
for (``turn:<id>``, the response id, ``<response id>/<seq>`` for a step, ``<response id>/<call
id>`` for a subagent call).

Example::

    otlp = session_trace(TurnRun(session_id="sess_1", subagent_id=None, agent_id="agent_1",
                                 turn_id="turn_1", created_at=t0, status="completed",
                                 responses=(ResponseRun(...),), children=()))
    otlp["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"]   # 'agent.session.turn'
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from troupe.protocol.subagents import CREATE, SEND, SUBAGENT_TOOL_NAMES, subagent_of_call
from troupe.storage import StepTrace

from .spans import SpanSpec, response_attributes, step_span

__all__ = ["KINDS", "ResponseRun", "TraceSpan", "TurnRun", "otlp_request", "session_trace", "turn_spans"]

KINDS = {"internal": 1, "server": 2, "client": 3}
"""OTLP's ``Span.SpanKind`` numbers."""

_ERROR = 2
"""OTLP's ``Status.StatusCode`` ERROR."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseRun:
    """One response of a turn, as stored when read."""

    response: dict[str, Any]
    """The Response (its id, model, status, usage, output, error)."""
    started_at: float
    """Unix seconds: when it was accepted (a queued response waits for its conversation's turn)."""
    ended_at: float | None
    """Unix seconds; None while it runs."""
    steps: Sequence[StepTrace]
    """Its step traces (those its checkpoints stored, while it runs), in ``seq`` order."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnRun:
    """One turn of a session or of a subagent, and the subagents' turns its calls started."""

    session_id: str
    """The session the turn is of (a subagent's turn: the subagent's own session id)."""
    subagent_id: str | None
    """The subagent whose turn it is; None for a turn of the session itself."""
    agent_id: str
    turn_id: str
    created_at: float
    status: str
    """The turn's status (:func:`troupe.protocol.sessions.turn_status`)."""
    responses: Sequence[ResponseRun]
    children: Sequence[TurnRun] = ()
    """Subagents' turns started while this turn ran (each hangs under the call that started it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceSpan:
    """A span of the tree, with its place in it."""

    span_id: str
    """16 lowercase hex digits."""
    parent_id: str | None
    spec: SpanSpec


def _id(text: str, size: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[: 2 * size]


def session_trace(turn: TurnRun) -> dict[str, Any]:
    """The OTLP JSON ``ExportTraceServiceRequest`` of a root turn (the module docstring's tree)."""
    return otlp_request(_id(turn.turn_id, 16), turn_spans(turn))


def turn_spans(turn: TurnRun, parent_id: str | None = None) -> list[TraceSpan]:
    """The spans of ``turn`` and all under it, parents before their children (depth first)."""
    turn_span = _id(f"turn:{turn.turn_id}", 8)
    below: list[TraceSpan] = []
    calls: list[tuple[str, dict[str, Any], SpanSpec]] = []  # (span id, call, span) of the subagent calls
    responses = list(turn.responses)
    for i, run in enumerate(responses):
        response, response_id = run.response, run.response["id"]
        ends = [s.started_at + s.duration_s for s in run.steps]
        end = run.ended_at if run.ended_at is not None else max([run.started_at, *ends])
        usage = response.get("usage") or {}
        error = None
        if response.get("status") == "failed":
            error = (response.get("error") or {}).get("message") or "failed"
        attributes = response_attributes(
            response_id=response_id, model=response.get("model"), status=str(response.get("status")),
            input_tokens=usage.get("input_tokens", 0), output_tokens=usage.get("output_tokens", 0),
            model_calls=sum(s.kind == "model" for s in run.steps),
            conversation_id=(response.get("conversation") or {}).get("id"),
        )  # fmt: skip
        response_span = _id(response_id, 8)
        below.append(TraceSpan(span_id=response_span, parent_id=turn_span, spec=SpanSpec(
            name="troupe.response", kind="internal", attributes=attributes, start=run.started_at, end=end,
            error=error)))  # fmt: skip
        servers = _mcp_servers(response)
        for step in run.steps:
            server = servers.get(step.name, []).pop(0) if step.kind == "tool" and servers.get(step.name) else None
            spec = step_span(kind=step.kind, name=step.name, started_at=step.started_at,
                             ended_at=step.started_at + step.duration_s, model=response.get("model"),
                             call_id=step.call_id, ttft_s=step.ttft_s, input_tokens=step.input_tokens,
                             output_tokens=step.output_tokens, error=step.error, server=server)  # fmt: skip
            below.append(TraceSpan(span_id=_id(f"{response_id}/{step.seq}", 8), parent_id=response_span, spec=spec))
        # The subagent calls the response ended at: run by the session from its end to the next
        # response's start (the turn still running them: to the last child turn's start, at least).
        made = [c for c in response.get("output") or () if c.get("type") == "function_call"
                and c.get("name") in SUBAGENT_TOOL_NAMES and run.ended_at is not None]  # fmt: skip
        for call in made:
            until = responses[i + 1].started_at if i + 1 < len(responses) else None
            if until is None or call["name"] == CREATE:
                started = [_start(c) for c in turn.children if c.subagent_id == subagent_of_call(call)]
                until = min(started) if started and call["name"] == CREATE else until
            spec = step_span(kind="tool", name=call["name"], started_at=end, ended_at=max(end, until or end),
                             call_id=call.get("call_id"))  # fmt: skip
            call_span = _id(f"{response_id}/{call.get('call_id')}", 8)
            calls.append((call_span, call, spec))
            below.append(TraceSpan(span_id=call_span, parent_id=response_span, spec=spec))
    # Each subagent turn right after the call that started it: the list stays depth first.
    nested: dict[str, list[TraceSpan]] = {}
    for child in turn.children:
        starter = _starter(child, calls) or turn_span
        nested.setdefault(starter, []).extend(turn_spans(child, starter))
    below = [s for span in below for s in (span, *nested.pop(span.span_id, ()))] + nested.pop(turn_span, [])
    ends = [s.spec.end for s in below]
    described: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.id": turn.agent_id, "troupe.session.id": turn.session_id,
        "troupe.turn.id": turn.turn_id, "troupe.turn.status": turn.status,
    }  # fmt: skip
    if turn.subagent_id is not None:
        described["troupe.subagent.id"] = turn.subagent_id
    failed = responses[-1].response if turn.status == "failed" and responses else None
    error = None if turn.status != "failed" else ((failed or {}).get("error") or {}).get("message") or "failed"
    root = SpanSpec(name="agent.session.turn", kind="server" if parent_id is None else "internal",
                    attributes=described, start=_start(turn), end=max([_start(turn), *ends]), error=error)  # fmt: skip
    return [TraceSpan(span_id=turn_span, parent_id=parent_id, spec=root), *below]


def _start(turn: TurnRun) -> float:
    """When a turn started: its row is written just after its first response was accepted."""
    return min([turn.created_at, *(r.started_at for r in turn.responses[:1])])


def _mcp_servers(response: dict[str, Any]) -> dict[str, list[str]]:
    """The MCP server labels of a response's ``mcp_call`` items, by tool name, in output order:
    a step trace does not keep its server, its response's item does (the n-th step of a tool
    name is that name's n-th call)."""
    found: dict[str, list[str]] = {}
    for item in response.get("output") or ():
        if item.get("type") == "mcp_call" and item.get("name"):
            found.setdefault(item["name"], []).append(str(item.get("server_label") or ""))
    return found


def _starter(child: TurnRun, calls: list[tuple[str, dict[str, Any], SpanSpec]]) -> str | None:
    """The span of the call that started the subagent turn ``child``: the last create or send
    naming its subagent that started before it did (a moment's slack), else the first."""
    naming = [(span, spec) for span, call, spec in calls
              if call["name"] in (CREATE, SEND) and subagent_of_call(call) == child.subagent_id]  # fmt: skip
    before = [span for span, spec in naming if spec.start <= _start(child) + 0.5]
    return before[-1] if before else naming[0][0] if naming else None



def otlp_request(trace_id: str, spans: Sequence[TraceSpan]) -> dict[str, Any]:
    """An OTLP JSON ``ExportTraceServiceRequest`` of one trace's spans (service ``troupe``)."""
    return {"resourceSpans": [{
        "resource": {"attributes": _attributes({"service.name": "troupe"})},
        "scopeSpans": [{"scope": {"name": "troupe"}, "spans": [_span(trace_id, s) for s in spans]}],
    }]}  # fmt: skip


def _span(trace_id: str, span: TraceSpan) -> dict[str, Any]:
    spec = span.spec
    out: dict[str, Any] = {"traceId": trace_id, "spanId": span.span_id}
    if span.parent_id is not None:
        out["parentSpanId"] = span.parent_id
    out |= {"name": spec.name, "kind": KINDS[spec.kind], "startTimeUnixNano": str(_ns(spec.start)),
            "endTimeUnixNano": str(_ns(spec.end)), "attributes": _attributes(spec.attributes)}  # fmt: skip
    if spec.error is not None:
        out["status"] = {"code": _ERROR, "message": spec.error}
    return out


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _attributes(values: dict[str, Any]) -> list[dict[str, Any]]:
    """OTLP JSON's ``KeyValue`` list (an int as a decimal string, as protobuf's JSON writes int64);
    None values are left out, as OpenTelemetry's SDK drops them."""
    return [{"key": key, "value": _value(value)} for key, value in values.items() if value is not None]


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": str(value)}
