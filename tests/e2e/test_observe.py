"""Observing Troupe end to end: ``GET /metrics`` after a scripted tool loop, the spans of a
response (an in-memory OpenTelemetry exporter), and hooks that get the loop's events.

The metrics test runs on the shared Serve apps (``replica``: the loop in the ingress replica;
``pooled`` and ``dedicated``: the loop in host actors, whose metrics the ingress gathers by actor
calls). The
span and hook tests run the in-process runtime under uvicorn: the spans and the hook calls
happen in this process, where the test can see them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import httpx
import pytest
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

from tests.servers import served_local, wait_for
from troupe.observe import hooks as h
from troupe.observe.settings import TelemetrySettings
from troupe.serve.config import ServerSettings

TWO_SLEEPS = '[[call sleep {"ms": 150}]] [[call sleep {"ms": 150}]]'
"""One model turn asking for two parallel tool calls, then a second turn that answers."""

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(root: str) -> Samples:
    response = httpx.get(f"{root}/metrics", timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):  # also checks the format
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


def idle(root: str) -> bool:
    """No turn running or waiting on any host of the app (nothing else can move the counts)."""
    samples = scrape(root)
    return total(samples, "troupe_host_turns_running") == 0 and total(samples, "troupe_host_turns_queued") == 0


@pytest.mark.parametrize("placement", ["replica", "pooled", "dedicated"])
def test_metrics_count_what_a_tool_loop_did(troupe_apps, placement):
    root = troupe_apps[placement]
    client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
    mcp = {"type": "mcp", "server_label": "stdio-calc"}  # configured in conftest

    def mcp_answers() -> bool:
        # Its connection actor and stdio process start on first use; under load that may take
        # longer than the 6 s listing timeout (the listing item then shows the error, and the
        # call is an unknown tool). What is measured below starts from a warm connection.
        warm = client.responses.create(model="sim", input='[[call add {"a": 1, "b": 2}]]', tools=[mcp])
        return warm.output_text == "add -> 3"

    wait_for(mcp_answers, timeout_s=60, what="the stdio MCP server answering")
    wait_for(lambda: idle(root), what="no turn in flight")
    before = scrape(root)

    # One conversation: under the dedicated placement, one host actor to start, not three.
    conversation = client.conversations.create().id
    response = client.responses.create(model="sim", input=TWO_SLEEPS, conversation=conversation)
    assert [item.type for item in response.output][-1] == "message"
    with client.responses.stream(model="sim", input="[[tokens 16]]", conversation=conversation) as stream:
        for _ in stream:
            pass
    added = client.responses.create(
        model="sim", input='[[call add {"a": 20, "b": 22}]]', tools=[mcp], conversation=conversation
    )
    assert added.output_text == "add -> 42"

    after = scrape(root)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("troupe_responses_total", model="sim", status="completed", stream="false") == 2
    assert delta("troupe_responses_total", model="sim", status="completed", stream="true") == 1
    # The tool loop: 2 model calls, 2 tool calls of `sleep`, both ok; the stream: 1 model call;
    # the MCP loop: 2 model calls and 1 MCP call, counted apart from the server-side tools.
    assert delta("troupe_model_call_duration_seconds_count", model="sim", outcome="ok") == 5
    assert delta("troupe_tool_call_duration_seconds_count", tool="sleep", outcome="ok") == 2
    assert delta("troupe_mcp_call_duration_seconds_count", server="stdio-calc", outcome="ok") == 1
    assert delta("troupe_tool_call_duration_seconds_count", tool="add", outcome="ok") == 0
    assert delta("troupe_tool_call_duration_seconds_sum", tool="sleep", outcome="ok") >= 0.28
    assert delta("troupe_tool_call_duration_seconds_bucket", tool="sleep", outcome="ok", le="0.1") == 0
    assert delta("troupe_tool_call_duration_seconds_bucket", tool="sleep", outcome="ok", le="+Inf") == 2
    assert delta("troupe_response_model_calls_count", model="sim") == 3
    assert delta("troupe_response_model_calls_sum", model="sim") == 5  # 2 + 1 + 2
    assert delta("troupe_response_ttft_seconds_count", model="sim", stream="false") == 2
    assert delta("troupe_response_ttft_seconds_count", model="sim", stream="true") == 1
    assert delta("troupe_response_duration_seconds_count", model="sim", stream="false") == 2
    assert delta("troupe_response_duration_seconds_sum", model="sim", stream="false") >= 0.14
    assert delta("troupe_output_tokens_total", model="sim") == (
        response.usage.output_tokens + 16 + added.usage.output_tokens
    )
    # The streamed answer's 16 deltas and its framing went out in at least one batch, all counted.
    batches = delta("troupe_stream_batch_events_count")
    assert batches >= 1 and delta("troupe_stream_batch_events_sum") >= 16 + 2
    # Storage: each response made durable through a group commit of the journal.
    assert delta("troupe_storage_commit_batch_size_sum", writer="journal") == 3
    assert delta("troupe_storage_commit_duration_seconds_count", writer="journal") >= 1
    # A pooled host's gauges come from its own process, labelled with its name.
    hosts = {dict(labels)["host"] for (name, labels) in after if name == "troupe_host_conversations"}
    expected = {"replica": {"replica"}, "pooled": {"troupe-host-0", "troupe-host-1"}, "dedicated": {"dedicated"}}
    assert hosts == expected[placement]
    assert total(after, "troupe_host_conversations") >= 1
    # The second and third turns found the conversation in their host's message cache.
    assert delta("troupe_message_cache_hits_total") == 2


# -- spans ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spans():
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # what an application embedding Troupe does
    return exporter


@pytest.fixture(scope="module")
def traced_url(spans) -> Iterator[str]:
    yield from served_local(ServerSettings(), telemetry=TelemetrySettings(traces="application"))


def test_the_span_tree_of_a_response_with_parallel_tools(traced_url, spans):
    client = OpenAI(base_url=f"{traced_url}/v1", api_key="unused", max_retries=0)
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    response = client.responses.create(
        model="sim", input=TWO_SLEEPS, extra_headers={"traceparent": f"00-{trace_id}-{parent_id}-01"}
    )
    # Spans are made as the response ends, before its answer is sent.
    mine = [
        s for s in spans.get_finished_spans()
        if format(s.context.trace_id, "032x") == trace_id and s.instrumentation_scope.name == "troupe"
    ]  # (FastAPI traces its requests too, in the same trace, when a tracer provider is installed)
    by_name: dict[str, list] = {}
    for span in mine:
        by_name.setdefault(span.name, []).append(span)
    root = by_name["troupe.response"][0]
    # The response span continues the caller's trace, as a child of the caller's span.
    assert format(root.parent.span_id, "016x") == parent_id and root.parent.is_remote
    assert root.attributes["gen_ai.response.id"] == response.id
    assert root.attributes["troupe.status"] == "completed"
    assert root.attributes["troupe.model_calls"] == 2
    models, tools = by_name["chat sim"], by_name["execute_tool sleep"]
    assert len(models) == 2 and len(tools) == 2
    assert {s.name for s in mine} == {"troupe.response", "chat sim", "execute_tool sleep",
                                      "troupe.storage.write_response", "troupe.storage.checkpoint"}
    for span in mine:
        if span is not root:
            assert span.parent.span_id == root.context.span_id, f"{span.name} is a child of the response"
            assert root.start_time <= span.start_time <= span.end_time <= root.end_time
    assert all(s.attributes["gen_ai.usage.output_tokens"] > 0 for s in models)
    assert all("troupe.ttft_s" in s.attributes for s in models)
    # The two tool calls ran in parallel: their spans overlap, between the two model calls.
    first, second = sorted(tools, key=lambda s: s.start_time)
    assert first.end_time > second.start_time, "parallel tool calls overlap"
    model_one, model_two = sorted(models, key=lambda s: s.start_time)
    assert model_one.end_time <= first.start_time and second.end_time <= model_two.start_time
    assert {s.attributes["gen_ai.tool.call.id"] for s in tools} == {
        item.call_id for item in response.output if item.type == "function_call"
    }


def test_without_traceparent_a_response_joins_the_applications_own_span(traced_url, spans):
    client = OpenAI(base_url=f"{traced_url}/v1", api_key="unused", max_retries=0)
    response = client.responses.create(model="sim", input="[[say hi]]")
    finished = spans.get_finished_spans()
    root = next(s for s in finished if s.attributes.get("gen_ai.response.id") == response.id)
    # In-process, the request's own span (FastAPI's, under the application's provider) is current.
    parent = next(s for s in finished if s.context.span_id == root.parent.span_id)
    assert parent.instrumentation_scope.name == "fastapi"


# -- hooks ---------------------------------------------------------------------------------------


@pytest.fixture
def hooked_url() -> Iterator[str]:
    yield from served_local(ServerSettings())


def test_a_hook_gets_the_events_of_a_tool_loop_in_order(hooked_url):
    events: list[h.HookEvent] = []
    remove = h.add_hook(events.append)
    try:
        client = OpenAI(base_url=f"{hooked_url}/v1", api_key="unused", max_retries=0)
        response = client.responses.create(model="sim", input=TWO_SLEEPS)
        wait_for(lambda: any(e.type == "response.finished" for e in events), what="the last event")
    finally:
        remove()
    mine = [e for e in events if e.response_id == response.id]
    assert [e.type for e in mine] == [
        "turn.started",
        "model_call.started", "model_call.ended",
        "tool_call.started", "tool_call.started", "tool_call.ended", "tool_call.ended",
        "model_call.started", "model_call.ended",
        "response.finished",
    ]  # fmt: skip
    started, ended = mine[3:5], mine[5:7]
    calls = [item for item in response.output if item.type == "function_call"]
    assert [(e.name, e.call_id, json.loads(e.arguments)) for e in started] == [
        ("sleep", c.call_id, {"ms": 150}) for c in calls
    ]
    assert [(e.call_id, e.output, e.error) for e in ended] == [
        (c.call_id, "slept 150 ms", None) for c in calls
    ]
    assert all(e.ended_at - e.started_at >= 0.14 for e in ended)  # (asyncio.sleep may wake a hair early)
    assert mine[2].output_tokens > 0 and mine[2].ttft_s is not None and mine[2].error is None
    finished = mine[-1]
    assert finished.status == "completed" and finished.response["id"] == response.id
    assert finished.response["output"][-1]["type"] == "message"
    assert mine[0].model == "sim" and mine[0].stream is False


def test_a_failing_or_blocked_hook_neither_delays_nor_fails_a_response(hooked_url):
    release, entered = threading.Event(), threading.Event()
    got: list[h.HookEvent] = []

    def blocked(event: h.HookEvent) -> None:
        entered.set()
        release.wait(60)
        got.append(event)

    def failing(event: h.HookEvent) -> None:
        raise RuntimeError("a grader with a bug")

    removals = [h.HOOKS.add(blocked, name="blocked", queue_size=2), h.HOOKS.add(failing, name="failing")]
    try:
        client = OpenAI(base_url=f"{hooked_url}/v1", api_key="unused", max_retries=0)
        response = client.responses.create(model="sim", input=TWO_SLEEPS)
        # The response came back complete while the blocked hook still holds its first event.
        assert response.status == "completed" and response.output_text
        assert entered.is_set() and not release.is_set()
        metrics = scrape(hooked_url)
        dropped = value(metrics, "troupe_hook_events_dropped_total", hook="blocked")
        assert dropped >= 1, "the blocked hook's full queue dropped events instead of waiting"
        wait_for(lambda: value(scrape(hooked_url), "troupe_hook_errors_total", hook="failing") == 10,
                 what="the failing hook was called with each of the 10 events")  # fmt: skip
        release.set()
        # It gets what fitted in its queue, in order, once it is free again.
        wait_for(lambda: len(got) == 10 - dropped, what="the blocked hook's queued events")
        assert got[0].type == "turn.started"
    finally:
        release.set()
        for remove in removals:
            remove()
