"""The ``[telemetry]`` table: what Troupe tells about itself (docs/observing.md).

Here rather than with the runtime's settings, so that :mod:`troupe.observe` imports nothing of
the runtime; :class:`~troupe.runtime.settings.RuntimeSettings` holds one.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, PositiveInt

from troupe._settings import SETTINGS_CONFIG, import_target

__all__ = ["TelemetrySettings"]


class TelemetrySettings(BaseModel):
    """What Troupe tells about itself: Prometheus metrics, OpenTelemetry traces, and the hooks
    that code subscribes to loop events with (the ``[telemetry]`` table; README "Observing Troupe")."""

    model_config = SETTINGS_CONFIG

    metrics: bool = True
    """Record Troupe's metrics: served at ``GET /metrics`` and exported through Ray's metrics
    agent (``ray_troupe_…``). false: none are recorded and ``/metrics`` answers 404."""
    tenant_label: bool = False
    """Give the per-response metrics a ``tenant`` label (one series per tenant: keep it off
    with many tenants)."""
    traces: Literal["off", "otlp", "application"] = "off"
    """OpenTelemetry spans of every response (its model calls, tool calls, MCP calls and
    storage writes). ``"off"``: none, and the OpenTelemetry SDK is not even imported;
    ``"otlp"``: exported over OTLP/HTTP from every process that runs turns (the endpoint below,
    else the usual ``OTEL_EXPORTER_OTLP_*`` variables); ``"application"``: handed to the
    tracer provider the application embedding Troupe installed
    (``opentelemetry.trace.set_tracer_provider``)."""
    otlp_endpoint: str | None = None
    """For ``traces = "otlp"``: the traces URL, e.g. ``http://127.0.0.1:4318/v1/traces``. None:
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, or ``OTEL_EXPORTER_OTLP_ENDPOINT`` + ``/v1/traces``,
    or ``http://localhost:4318/v1/traces``."""
    service_name: str | None = None
    """The spans' ``service.name``; None: ``OTEL_SERVICE_NAME``, else ``troupe``."""
    hooks: tuple[Annotated[str, AfterValidator(import_target)], ...] = ()
    """Functions called with every loop event (``package.module:function``, sync or async,
    importable wherever turns run): turn started, model call started and ended, tool call
    started and ended, approval requested, response finished (``troupe.observe.hooks``).
    Each runs on a thread of its own, never on the loop's path."""
    hook_queue_size: PositiveInt = 1024
    """Events waiting for a hook; past this, new ones are dropped for it (and counted,
    ``troupe_hook_events_dropped_total``), so a slow hook never holds a response up."""
