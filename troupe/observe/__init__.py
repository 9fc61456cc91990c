"""Observing Troupe: Prometheus metrics, OpenTelemetry traces, and hooks for code.

- :mod:`.catalogue` — every metric Troupe defines (names, labels, buckets)
- :mod:`.metrics` — the per-process registry, ``/metrics`` gathering, Ray's export
- :mod:`.observer` — the hosts' observation layer, fed from the loop's events
- :mod:`.hooks` — subscribing code to loop events (:func:`add_hook`)
- :mod:`.tracing` — a response's spans (imported only with traces on)

Configured by ``[telemetry]`` (:class:`~troupe.runtime.settings.TelemetrySettings`);
docs/observing.md says how to use each.
"""

from .catalogue import CATALOGUE, MetricSpec
from .hooks import (
    ApprovalRequested,
    Hook,
    HookEvent,
    ModelCallEnded,
    ModelCallStarted,
    ResponseFinished,
    ToolCallEnded,
    ToolCallStarted,
    TurnStarted,
    add_hook,
)
from .metrics import Registry, ScrapeView, process_registry, render
from .observer import Observer, TurnObserver

__all__ = [
    "CATALOGUE",
    "MetricSpec",
    "ApprovalRequested",
    "Hook",
    "HookEvent",
    "ModelCallEnded",
    "ModelCallStarted",
    "ResponseFinished",
    "ToolCallEnded",
    "ToolCallStarted",
    "TurnStarted",
    "add_hook",
    "Registry",
    "ScrapeView",
    "process_registry",
    "render",
    "Observer",
    "TurnObserver",
]
