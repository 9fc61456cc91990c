"""OpenTelemetry spans of a response, made after the fact from its step traces.

Imported only when ``[telemetry] traces`` is on: with traces off, Troupe never imports the
OpenTelemetry SDK. A response's spans are built once it has ended, from the timings the loop
measured anyway (its :class:`~troupe.agentloop.events.StepTraced` events and the host's storage
writes), each with its explicit start and end: nothing is timed twice, and nothing is done for
tracing while the response runs. The tree::

    troupe.response                  (child of the request's W3C ``traceparent``, if any)
    ├── chat <model>                 one per model call: time to first token, tokens
    ├── execute_tool <name>          one per server-side tool call; parallel calls overlap
    ├── mcp_call <name>              one per MCP tool call
    └── troupe.storage.<write>       the response's store write, each checkpoint

Attribute names follow OpenTelemetry's GenAI semantic conventions where they have one
(``gen_ai.request.model``, ``gen_ai.usage.output_tokens``, ``gen_ai.tool.name`` …), else
``troupe.…``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from troupe.agentloop.events import StepTraced

__all__ = ["tracer_for", "emit_response"]

_PROPAGATOR = TraceContextTextMapPropagator()


@functools.cache
def tracer_for(mode: str, endpoint: str | None = None, service_name: str | None = None) -> Tracer:
    """This process's tracer for ``[telemetry] traces = mode`` (one provider per process).

    ``"otlp"``: a provider of Troupe's own (not installed as the global one, which stays the
    application's) exporting in batches over OTLP/HTTP; the ``OTEL_EXPORTER_OTLP_*`` and
    ``OTEL_TRACES_SAMPLER`` variables apply as usual. ``"application"``: the global provider.
    """
    if mode == "application":
        return trace.get_tracer("troupe")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    name = service_name or os.environ.get("OTEL_SERVICE_NAME") or "troupe"
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider.get_tracer("troupe")


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def emit_response(
    tracer: Tracer,
    *,
    traceparent: str | None,
    tracestate: str | None,
    attributes: dict[str, Any],
    started: float,
    ended: float,
    steps: Sequence[StepTraced],
    writes: Sequence[tuple[str, float, float]],
    error: str | None,
) -> None:
    """Emit one response's spans (see the module docstring). ``writes``: (name, start, end) of
    its storage writes; ``error``: the response's failure, if any."""
    carrier = {"traceparent": traceparent} if traceparent else {}
    if carrier and tracestate:
        carrier["tracestate"] = tracestate
    parent = _PROPAGATOR.extract(carrier) if carrier else None
    root = tracer.start_span(
        "troupe.response", context=parent, kind=SpanKind.SERVER, start_time=_ns(started), attributes=attributes
    )
    if error is not None:
        root.set_status(Status(StatusCode.ERROR, error))
    inside = trace.set_span_in_context(root)
    model = attributes.get("gen_ai.request.model")
    for step in steps:
        if step.kind == "model":
            name = f"chat {step.name}"
            attrs: dict[str, Any] = {
                "gen_ai.operation.name": "chat", "gen_ai.request.model": model or step.name,
                "troupe.upstream_model": step.name,
                "gen_ai.usage.input_tokens": step.input_tokens, "gen_ai.usage.output_tokens": step.output_tokens,
            }  # fmt: skip
            if step.ttft_s is not None:
                attrs["troupe.ttft_s"] = step.ttft_s
        else:
            name = f"{'mcp_call' if step.server else 'execute_tool'} {step.name}"
            attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": step.name}
            if step.call_id:
                attrs["gen_ai.tool.call.id"] = step.call_id
            if step.server:
                attrs["troupe.mcp.server_label"] = step.server
        span = tracer.start_span(name, context=inside, kind=SpanKind.CLIENT, start_time=_ns(step.started_at),
                                 attributes=attrs)  # fmt: skip
        if step.error is not None:
            span.set_status(Status(StatusCode.ERROR, step.error))
        span.end(end_time=_ns(step.ended_at))
    for name, start, end in writes:
        span = tracer.start_span(f"troupe.storage.{name}", context=inside, kind=SpanKind.CLIENT, start_time=_ns(start))
        span.end(end_time=_ns(end))
    root.end(end_time=_ns(ended))
