"""Observing Troupe: Prometheus metrics, OpenTelemetry traces, and hooks for code.

- :mod:`.catalogue` — every metric Troupe defines (names, labels, buckets)
- :mod:`.metrics` — the per-process registry, ``/metrics`` gathering, Ray's export
- :mod:`.observer` — the hosts' observation layer, fed from the loop's events
- :mod:`.hooks` — subscribing code to loop events (:func:`add_hook`)
- :mod:`.tracing` — a response's spans (imported only with traces on)

Configured by ``[telemetry]`` (:class:`~troupe.runtime.settings.TelemetrySettings`);
docs/observing.md says how to use each.

Names are imported on first use: what only reads the ``[telemetry]`` settings
(:mod:`.settings`, which the runtime's settings import, in every tool and ingestion worker)
pays for none of the rest.
"""

from typing import TYPE_CHECKING

from troupe._lazy import lazy_exports

_HOMES = {
    ".catalogue": ["CATALOGUE", "MetricSpec"],
    ".hooks": [
        "ApprovalRequested", "Hook", "HookEvent", "ModelCallEnded", "ModelCallStarted", "ResponseFinished",
        "ToolCallEnded", "ToolCallStarted", "TurnStarted", "add_hook",
    ],
    ".metrics": ["Registry", "ScrapeView", "process_registry", "render"],
    ".observer": ["Observer", "TurnObserver"],
}  # fmt: skip
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)

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

# The same names again, for type checkers and editors (tests/unit/test_lazy_exports.py keeps the three lists equal).
if TYPE_CHECKING:
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
