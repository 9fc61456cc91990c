"""The observation layer's parts with plain values: the registry and its text format, the
``/metrics`` view over several processes, hooks named by import path, the Grafana dashboard."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.servers import wait_for
from troupe.observe import CATALOGUE, Registry, ScrapeView, render
from troupe.observe.catalogue import series_names
from troupe.observe.hooks import HookBus, TurnStarted

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "troupe.json"


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_every_metric_follows_prometheus_naming():
    for spec in CATALOGUE:
        assert re.fullmatch(r"troupe_[a-z0-9_]+", spec.name), spec.name
        assert spec.name.endswith("_total") == (spec.kind == "counter"), spec.name
        assert spec.kind != "histogram" or list(spec.buckets) == sorted(spec.buckets)
        assert "response_id" not in spec.labels and "conversation_id" not in spec.labels


def test_the_text_format_has_cumulative_buckets_inclusive_bounds_and_no_empty_labels():
    registry = Registry()
    tools = registry.histogram("troupe_tool_call_duration_seconds")
    tools.observe(("sleep", "ok"), 0.05)  # exactly a bound: counted in it (le is inclusive)
    tools.observe(("sleep", "ok"), 0.3)
    tools.observe(("sleep", "ok"), 1000.0)  # past the last bound: +Inf only
    registry.counter("troupe_responses_total").inc(("sim", "completed", "true", ""))
    got = samples(render(registry.snapshot()))

    def tool(name: str, **labels: str) -> float:
        return got[(name, frozenset({"tool": "sleep", "outcome": "ok", **labels}.items()))]

    assert tool("troupe_tool_call_duration_seconds_bucket", le="0.025") == 0
    assert tool("troupe_tool_call_duration_seconds_bucket", le="0.05") == 1
    assert tool("troupe_tool_call_duration_seconds_bucket", le="0.5") == 2
    assert tool("troupe_tool_call_duration_seconds_bucket", le="300.0") == 2
    assert tool("troupe_tool_call_duration_seconds_bucket", le="+Inf") == 3
    assert tool("troupe_tool_call_duration_seconds_count") == 3
    assert abs(tool("troupe_tool_call_duration_seconds_sum") - 1000.35) < 1e-9
    # The tenant label is empty (tenant_label off): left out, not shown as tenant="".
    key = ("troupe_responses_total", frozenset({"model": "sim", "status": "completed", "stream": "true"}.items()))
    assert got[key] == 1
    # A counter without labels is there from the start.
    assert got[("troupe_message_cache_hits_total", frozenset())] == 0


def test_gauges_are_read_from_functions_at_snapshot_time():
    registry = Registry()
    live = [3]
    stop = registry.gauge("troupe_host_conversations").watch(("replica",), lambda: live[0])
    live[0] = 5
    assert registry.snapshot()["values"]["troupe_host_conversations"] == {("replica",): 5.0}
    stop()
    assert registry.snapshot()["values"]["troupe_host_conversations"] == {}


def test_the_scrape_view_sums_processes_and_never_lets_a_counter_go_back():
    ingress, host, restarted = Registry(), Registry(), Registry()
    for registry, n in ((ingress, 1), (host, 4)):
        registry.counter("troupe_message_cache_misses_total").inc((), n)
        registry.histogram("troupe_response_model_calls").observe(("sim",), n)
    view = ScrapeView()

    def misses(values) -> float:
        return values["troupe_message_cache_misses_total"][()]

    assert misses(view.update({"ingress": ingress.snapshot(), "host-0": host.snapshot()})) == 5
    # A host that does not answer this time: its last snapshot stands.
    assert misses(view.update({"ingress": ingress.snapshot(), "host-0": None})) == 5
    # It restarted (a new registry): what it had counted is kept, and its new counts added.
    restarted.counter("troupe_message_cache_misses_total").inc((), 2)
    values = view.update({"ingress": ingress.snapshot(), "host-0": restarted.snapshot()})
    assert misses(values) == 1 + 4 + 2
    assert values["troupe_response_model_calls"][("sim",)][-1] == 5  # the histogram's sum too
    # It is gone (a dedicated host that exited): still counted.
    assert misses(view.update({"ingress": ingress.snapshot()})) == 7


RECEIVED: list[object] = []
"""What :func:`record_event` got."""


def record_event(event: object) -> None:
    """A hook, named by its import path below."""
    RECEIVED.append(event)


def test_hooks_named_by_import_path_load_once_and_get_events():
    RECEIVED.clear()
    bus = HookBus()
    bus.load(("tests.unit.test_observe:record_event",))
    bus.load(("tests.unit.test_observe:record_event",))  # a second host in the same process
    event = TurnStarted(response_id="resp_1", tenant="", thread_id="t", model="sim", stream=False, background=False,
                        at=0.0)  # fmt: skip
    assert len(bus._runners) == 1
    bus.emit(event)
    wait_for(lambda: RECEIVED == [event], what="the event")


def test_the_grafana_dashboard_queries_only_metrics_troupe_defines():
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [
        target["expr"] for panel in dashboard["panels"] if panel["type"] != "row" for target in panel["targets"]
    ]
    assert exprs
    # ${prefix} is "" for Troupe's own /metrics and "ray_" for Ray's metrics export.
    prefixes = {option["value"] for v in dashboard["templating"]["list"] if v["name"] == "prefix" for option in v["options"]}
    assert prefixes == {"", "ray_"}
    used = {name for expr in exprs for name in re.findall(r"\$\{prefix\}(troupe_[a-z0-9_]+)", expr)}
    bare = {name for expr in exprs for name in re.findall(r"(?<![\w}])(troupe_[a-z0-9_]+)", expr)}
    assert not bare, f"queries naming a metric without ${{prefix}}: {bare}"
    assert used <= series_names(), f"not defined in troupe/observe/catalogue.py: {used - series_names()}"
    # And every metric has a panel.
    shown = {re.sub(r"_(bucket|sum|count)$", "", name) for name in used}
    assert {spec.name for spec in CATALOGUE} <= shown, {spec.name for spec in CATALOGUE} - shown
