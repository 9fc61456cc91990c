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
``troupe.…``; the steps' names and attributes are :func:`.spans.step_span`'s, which a session's
OTLP JSON traces (:mod:`.session_trace`) use too.
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

from .spans import step_span

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
        spec = step_span(kind=step.kind, name=step.name, started_at=step.started_at, ended_at=step.ended_at,
                         model=model, call_id=step.call_id, ttft_s=step.ttft_s, input_tokens=step.input_tokens,
                         output_tokens=step.output_tokens, error=step.error, server=step.server,
                         detail=step.detail)  # fmt: skip
        span = tracer.start_span(spec.name, context=inside, kind=SpanKind.CLIENT, start_time=_ns(spec.start),
                                 attributes=spec.attributes)  # fmt: skip
        if spec.error is not None:
            span.set_status(Status(StatusCode.ERROR, spec.error))
        span.end(end_time=_ns(spec.end))
    for name, start, end in writes:
        span = tracer.start_span(f"troupe.storage.{name}", context=inside, kind=SpanKind.CLIENT, start_time=_ns(start))
        span.end(end_time=_ns(end))
    root.end(end_time=_ns(ended))
