"""Troupe's metrics through Ray's own export: what a registry records reaches the node's
metrics agent as ``ray_troupe_…``, histograms bucket for bucket."""

from __future__ import annotations

import uuid

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.servers import wait_for
from troupe.observe.metrics import RayExport, Registry


def test_a_registry_reaches_rays_metrics_agent(ray_session):
    import ray

    registry = Registry()
    tool = f"export-{uuid.uuid4().hex[:8]}"  # this test's own series, whatever else the session exports
    registry.counter("troupe_output_tokens_total").inc(("sim", tool), 3)
    durations = registry.histogram("troupe_tool_call_duration_seconds")
    for seconds in (0.07, 0.08, 3.0):
        durations.observe((tool, "ok"), seconds)
    export = RayExport(registry)
    export.flush()
    export.flush()  # nothing changed: nothing sent twice

    node_id = ray.get_runtime_context().get_node_id()
    node = next(n for n in ray.nodes() if n["NodeID"] == node_id)
    url = f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"

    def exported() -> dict[str, float]:
        try:
            text = httpx.get(url, timeout=5).text
        except httpx.TransportError:
            return {}
        found = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.labels.get("tool") == tool or s.labels.get("tenant") == tool:
                    key = s.name + ("" if "le" not in s.labels else f"[le={s.labels['le']}]")
                    found[key] = found.get(key, 0.0) + s.value
        return found

    # Ray's agent takes what each process reports every metrics_report_interval_ms (10 s by default).
    wait_for(lambda: exported().get("ray_troupe_tool_call_duration_seconds_count") == 3, timeout_s=60,
             what="the histogram in Ray's export")  # fmt: skip
    got = exported()
    assert got["ray_troupe_output_tokens_total"] == 3
    assert got["ray_troupe_tool_call_duration_seconds_bucket[le=0.05]"] == 0
    assert got["ray_troupe_tool_call_duration_seconds_bucket[le=0.1]"] == 2
    assert got["ray_troupe_tool_call_duration_seconds_bucket[le=2.5]"] == 2
    assert got["ray_troupe_tool_call_duration_seconds_bucket[le=5.0]"] == 3
