"""What each span of a response is called and carries: pure, no OpenTelemetry.

One place for the span names and attributes (OpenTelemetry's GenAI semantic conventions where
they have one, else ``troupe.…``), used by both ways Troupe gives traces:

- :mod:`.tracing` emits a response's spans through the OpenTelemetry SDK as it ends (with
  ``[telemetry] traces`` on; only that module imports OpenTelemetry);
- :mod:`.session_trace` writes a session's stored step traces as OTLP JSON
  (``GET /v1/agents/sessions/{id}/traces``), with no SDK at all.

So a ``chat sim`` span or an ``execute_tool sleep`` span is the same whichever way it was read.

Example::

    spec = step_span(kind="tool", name="sleep", started_at=1.0, ended_at=1.4, call_id="call_1")
    (spec.name, spec.kind, spec.attributes)
    # ('execute_tool sleep', 'client', {'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'sleep',
    #                                   'gen_ai.tool.call.id': 'call_1'})
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["SpanKind", "SpanSpec", "response_attributes", "step_span"]

SpanKind = Literal["internal", "server", "client"]
"""OpenTelemetry's span kinds that Troupe uses (OTLP's enum: 1, 2, 3)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SpanSpec:
    """One span, as data: what both :mod:`.tracing` and :mod:`.session_trace` make of it."""

    name: str
    kind: SpanKind
    attributes: dict[str, Any]
    """str, int, float or bool values (OTLP's ``stringValue``, ``intValue``, …)."""
    start: float
    """Unix seconds."""
    end: float
    error: str | None = None
    """The span's error status message; None: not an error."""


def step_span(
    *, kind: Literal["model", "tool", "guardrail"], name: str, started_at: float, ended_at: float,
    model: str | None = None, call_id: str | None = None, ttft_s: float | None = None, input_tokens: int = 0,
    output_tokens: int = 0, error: str | None = None, server: str | None = None, detail: dict[str, Any] | None = None,
) -> SpanSpec:  # fmt: skip
    """The span of one step of a response: a model call (``chat <model>``), a tool call
    (``execute_tool <name>``) or an MCP call (``mcp_call <name>``, ``server`` its label).

    ``name`` is the step's (the upstream model, or the tool); ``model`` the model the request
    asked for (``gen_ai.request.model``; the upstream model when not given)."""
    if kind == "model":
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": model or name, "troupe.upstream_model": name,
            "gen_ai.usage.input_tokens": input_tokens, "gen_ai.usage.output_tokens": output_tokens,
        }  # fmt: skip
        if ttft_s is not None:
            attributes["troupe.ttft_s"] = ttft_s
        return SpanSpec(name=f"chat {name}", kind="client", attributes=attributes, start=started_at, end=ended_at,
                        error=error)  # fmt: skip
    if kind == "guardrail":  # Troupe's own: no GenAI convention names a guardrail check
        attributes = {"troupe.guardrail.name": name}
        if detail is not None:
            attributes |= {"troupe.guardrail.stage": detail["stage"], "troupe.guardrail.verdict": detail["verdict"],
                           "troupe.guardrail.categories": list(detail["categories"])}  # fmt: skip
        return SpanSpec(name=f"guardrail {name}", kind="internal", attributes=attributes, start=started_at,
                        end=ended_at, error=error)  # fmt: skip
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
    if call_id:
        attributes["gen_ai.tool.call.id"] = call_id
    if server:
        attributes["troupe.mcp.server_label"] = server
    return SpanSpec(name=f"{'mcp_call' if server else 'execute_tool'} {name}", kind="client", attributes=attributes,
                    start=started_at, end=ended_at, error=error)  # fmt: skip


def response_attributes(
    *, response_id: str, model: str | None, status: str, input_tokens: int, output_tokens: int, model_calls: int,
    conversation_id: str | None = None, ttft_s: float | None = None, stream: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """The attributes of a response's span (``troupe.response``)."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.request.model": model, "gen_ai.response.id": response_id,
        "troupe.status": status, "troupe.stream": stream, "gen_ai.usage.input_tokens": input_tokens,
        "gen_ai.usage.output_tokens": output_tokens, "troupe.model_calls": model_calls,
    }  # fmt: skip
    if ttft_s is not None:
        attributes["troupe.ttft_s"] = ttft_s
    if conversation_id is not None:
        attributes["gen_ai.conversation.id"] = conversation_id
    return attributes
