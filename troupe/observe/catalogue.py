"""Every metric Troupe defines: name, kind, labels, buckets and what it measures.

One table, read by the registry (:mod:`.metrics`), the Ray export, the metrics list in docs/observing.md
and the test that checks the Grafana dashboard (``docs/grafana/troupe.json``) names only
metrics that exist. Names follow Prometheus' conventions: ``troupe_`` first, the unit last
(``_seconds``), ``_total`` for counters. Labels are bounded: a model is a configured model, a
tool a configured server-side tool, an MCP server a configured label (any other is
``"other"``); no response, conversation or tenant ids. The ``tenant`` label of the
per-response counters is empty, and so left out, unless ``[telemetry] tenant_label = true``.

Through Ray's metrics export every name appears with Ray's prefix: ``ray_troupe_…``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "MetricSpec",
    "CATALOGUE",
    "BY_NAME",
    "LATENCY_BUCKETS",
    "COUNT_BUCKETS",
    "COMMIT_BUCKETS",
    "series_names",
]

MetricKind = Literal["counter", "gauge", "histogram"]

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Seconds, for model calls, tool calls and whole responses."""
COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
"""Seconds, for storage commits."""
COUNT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
"""Sizes: events per streamed batch, records per commit."""
_CALLS = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50, 100)
_RATE = (1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 1000, 2000)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricSpec:
    """One metric."""

    name: str
    """The Prometheus name (``_total`` included for counters)."""
    kind: MetricKind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    """Histograms: the upper bounds (``le``), ascending; ``+Inf`` is implied."""
    group: Literal["request", "loop", "runtime"]


CATALOGUE: tuple[MetricSpec, ...] = (
    # -- requests --------------------------------------------------------------------------
    MetricSpec(name="troupe_responses_total", kind="counter", group="request", labels=("model", "status", "stream", "tenant"),
               help="Responses that ended, by model, final status (completed, incomplete, failed, cancelled, "
                    "requires_action; disconnected: the client went away first) and whether they streamed."),
    MetricSpec(name="troupe_response_ttft_seconds", kind="histogram", group="request", labels=("model", "stream"),
               buckets=LATENCY_BUCKETS,
               help="Time to first token: from the turn's start to its first text, reasoning or arguments delta."),
    MetricSpec(name="troupe_response_duration_seconds", kind="histogram", group="request", labels=("model", "stream"),
               buckets=LATENCY_BUCKETS,
               help="End to end: from the turn's start until its response is stored and its last event sent."),
    MetricSpec(name="troupe_response_output_tokens_per_second", kind="histogram", group="request", labels=("model",),
               buckets=_RATE,
               help="Per response: output tokens over the time its model calls spent generating them "
                    "(each call's duration less its time to first token)."),
    MetricSpec(name="troupe_output_tokens_total", kind="counter", group="request", labels=("model", "tenant"),
               help="Output tokens the model produced (rate(): tokens per second)."),
    MetricSpec(name="troupe_input_tokens_total", kind="counter", group="request", labels=("model", "tenant"),
               help="Input tokens sent to the model."),
    # -- the loop -------------------------------------------------------------------------------
    MetricSpec(name="troupe_response_model_calls", kind="histogram", group="loop", labels=("model",), buckets=_CALLS,
               help="Model calls per response (one for a plain answer, one more after each tool round)."),
    MetricSpec(name="troupe_model_call_duration_seconds", kind="histogram", group="loop", labels=("model", "outcome"),
               buckets=LATENCY_BUCKETS,
               help="One model call, from the request upstream to its last chunk; outcome ok or error "
                    "(_count: model calls)."),
    MetricSpec(name="troupe_tool_call_duration_seconds", kind="histogram", group="loop", labels=("tool", "outcome"),
               buckets=LATENCY_BUCKETS,
               help="One server-side tool call (MCP calls apart); outcome ok, error or cancelled "
                    "(_count: tool calls by tool and outcome)."),
    MetricSpec(name="troupe_mcp_call_duration_seconds", kind="histogram", group="loop", labels=("server", "outcome"),
               buckets=LATENCY_BUCKETS,
               help="One MCP tool call, by configured server label (\"other\": a server the request brought); "
                    "outcome ok, error or cancelled (_count: MCP calls)."),
    MetricSpec(name="troupe_approval_requests_total", kind="counter", group="loop", labels=("server",),
               help="MCP calls that stopped their response to ask for approval."),
    MetricSpec(name="troupe_approval_responses_total", kind="counter", group="loop", labels=("decision",),
               help="Approval answers received (mcp_approval_response input items), approved or denied."),
    MetricSpec(name="troupe_guardrail_checks_total", kind="counter", group="loop",
               labels=("guardrail", "stage", "verdict"),
               help="Guardrail checks (docs/guardrails.md) by stage (input, output, tool_call, tool_output) and "
                    "verdict (passed, redacted, blocked); a regex check of streamed output that finds nothing counts once, at its end; each moderation call counts."),
    MetricSpec(name="troupe_approvals_pending", kind="gauge", group="loop",
               help="Approval requests not answered yet, as the hosts saw them since they started."),
    MetricSpec(name="troupe_container_starts_total", kind="counter", group="loop",
               help="Python kernels started in containers to run code: a container's first run, or the first "
                    "after a limit restarted its kernel (the python calls are troupe_tool_call_duration_seconds"
                    "{tool=\"python\"})."),
    MetricSpec(name="troupe_container_limit_hits_total", kind="counter", group="loop", labels=("kind", "limit"),
               help="Runs of code (kind python) and shell commands (kind shell) that a container's limit stopped: "
                    "timeout, memory, cpu, processes, file_size, disk, or crashed."),
    MetricSpec(name="troupe_containers_running", kind="gauge", group="runtime",
               help="Containers running (not expired, not deleted), as the store counts them at the scrape."),
    # -- the runtime ----------------------------------------------------------------------------
    MetricSpec(name="troupe_host_conversations", kind="gauge", group="runtime", labels=("host",),
               help="Conversations whose state a host keeps live (its message cache)."),
    MetricSpec(name="troupe_host_turns_running", kind="gauge", group="runtime", labels=("host",),
               help="Turns running on a host now."),
    MetricSpec(name="troupe_host_turns_queued", kind="gauge", group="runtime", labels=("host",),
               help="Turns accepted by a host and waiting for their conversation's previous turn."),
    MetricSpec(name="troupe_message_cache_hits_total", kind="counter", group="runtime",
               help="Turns that continued a conversation or chain from a host's message cache."),
    MetricSpec(name="troupe_message_cache_misses_total", kind="counter", group="runtime",
               help="Turns that read their conversation or chain back from storage."),
    MetricSpec(name="troupe_storage_commit_batch_size", kind="histogram", group="runtime", labels=("writer",),
               buckets=COUNT_BUCKETS,
               help="Records per group commit: journal (appended, one fdatasync), duckdb (one transaction), "
                    "ship (a writer journal's batch sent to the storage actor), runs (durable runs' steps)."),
    MetricSpec(name="troupe_storage_commit_duration_seconds", kind="histogram", group="runtime", labels=("writer",),
               buckets=COMMIT_BUCKETS, help="One group commit, by writer as above."),
    MetricSpec(name="troupe_stream_batch_events", kind="histogram", group="runtime", buckets=COUNT_BUCKETS,
               help="Wire events per batch a streaming turn hands on (bigger under load: fewer hops)."),
    MetricSpec(name="troupe_hook_events_dropped_total", kind="counter", group="runtime", labels=("hook",),
               help="Loop events a hook did not get because its queue was full (a slow hook)."),
    MetricSpec(name="troupe_hook_errors_total", kind="counter", group="runtime", labels=("hook",),
               help="Hook calls that raised."),
)

BY_NAME: dict[str, MetricSpec] = {spec.name: spec for spec in CATALOGUE}


def series_names() -> set[str]:
    """Every sample name Prometheus shows: each counter and gauge, each histogram's
    ``_bucket``, ``_sum`` and ``_count``."""
    names = set()
    for spec in CATALOGUE:
        if spec.kind == "histogram":
            names |= {f"{spec.name}_bucket", f"{spec.name}_sum", f"{spec.name}_count"}
        else:
            names.add(spec.name)
    return names
