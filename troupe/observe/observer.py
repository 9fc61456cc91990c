"""The observation layer of a conversation host: one place that turns a turn's events into
metrics, spans and hook events.

A :class:`~troupe.runtime.host.ConversationHost` holds one :class:`Observer` and, for each turn,
asks it for a :class:`TurnObserver`, which it feeds where the host already has the data: the
loop's non-wire events (:class:`~troupe.agentloop.events.StepStarted` and ``StepTraced``, the
timed steps storage keeps as step traces), its storage writes, and the turn's end. Nothing
else on the turn's path is timed for observation. With metrics, traces and hooks all off,
:meth:`Observer.turn` returns None and the host does nothing more than before.

Per event the work is O(1): a dict update for a metric, a list append for a span to be (spans
are built once the response has ended, :mod:`.tracing`), a queue put per hook (:mod:`.hooks`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from troupe.agentloop.events import StepStarted, StepTraced

from . import hooks as h
from .metrics import Histogram, RayExport, Registry, process_registry
from .spans import response_attributes

if TYPE_CHECKING:
    from troupe.protocol.job import TurnJob

    from .settings import TelemetrySettings

__all__ = ["Observer", "TurnObserver", "OTHER_SERVER"]

OTHER_SERVER = "other"
"""The ``server`` label of an MCP server the request brought itself (labels stay bounded)."""

_PENDING_WATCHED: set[str] = set()


class Observer:
    """A host's metrics, tracer and hooks, as ``[telemetry]`` says.

    Args:
        telemetry: the settings.
        host: the host's ``host`` label (``replica``, ``local``, a pooled actor's name,
            ``dedicated``): bounded, never a conversation id.
        mcp_servers: the configured MCP servers' labels (any other is :data:`OTHER_SERVER`).
    """

    def __init__(self, telemetry: TelemetrySettings, *, host: str, mcp_servers: Iterable[str] = ()) -> None:
        self.settings = telemetry
        self.host = host
        self.mcp_servers = frozenset(mcp_servers)
        self.registry: Registry | None = process_registry() if telemetry.metrics else None
        self.tracing = telemetry.traces != "off"
        self._tracer: Any = None
        h.HOOKS.load(telemetry.hooks, queue_size=telemetry.hook_queue_size)
        self.stream_batches: Histogram | None = None
        if self.registry is not None:
            self._bind(self.registry)
            RayExport.start_once(self.registry)

    def _bind(self, r: Registry) -> None:
        self.stream_batches = r.histogram("troupe_stream_batch_events")
        self.responses = r.counter("troupe_responses_total")
        self.ttft = r.histogram("troupe_response_ttft_seconds")
        self.duration = r.histogram("troupe_response_duration_seconds")
        self.tokens_per_s = r.histogram("troupe_response_output_tokens_per_second")
        self.output_tokens = r.counter("troupe_output_tokens_total")
        self.input_tokens = r.counter("troupe_input_tokens_total")
        self.model_calls = r.histogram("troupe_response_model_calls")
        self.model_call = r.histogram("troupe_model_call_duration_seconds")
        self.tool_call = r.histogram("troupe_tool_call_duration_seconds")
        self.mcp_call = r.histogram("troupe_mcp_call_duration_seconds")
        self.approvals_asked = r.counter("troupe_approval_requests_total")
        self.approvals_answered = r.counter("troupe_approval_responses_total")
        self.guardrail_checks = r.counter("troupe_guardrail_checks_total")
        self.container_starts = r.counter("troupe_container_starts_total")
        self.container_limits = r.counter("troupe_container_limit_hits_total")
        self.cache_hits = r.counter("troupe_message_cache_hits_total")
        self.cache_misses = r.counter("troupe_message_cache_misses_total")
        if r.token not in _PENDING_WATCHED:  # one reading per process, however many hosts
            _PENDING_WATCHED.add(r.token)
            asked, answered = self.approvals_asked.values, self.approvals_answered.values
            r.gauge("troupe_approvals_pending").watch((), lambda: max(0.0, sum(asked.values()) - sum(answered.values())))

    def watch_host(
        self, conversations: Callable[[], float], running: Callable[[], float], queued: Callable[[], float]
    ) -> Callable[[], None]:
        """Read the host's gauges at every scrape; returns the function that stops it."""
        if self.registry is None:
            return lambda: None
        labels = (self.host,)
        stops = [
            self.registry.gauge("troupe_host_conversations").watch(labels, conversations),
            self.registry.gauge("troupe_host_turns_running").watch(labels, running),
            self.registry.gauge("troupe_host_turns_queued").watch(labels, queued),
        ]

        def unwatch() -> None:
            for stop in stops:
                stop()

        return unwatch

    def cache(self, hit: bool) -> None:
        """A turn found its thread in the message cache, or read it from storage."""
        if self.registry is not None:
            (self.cache_hits if hit else self.cache_misses).inc()

    def container_run(self, kind: str, *, started: bool, limit: str | None) -> None:
        """A run of code (``python``) or a shell command (``shell``) in a container ended:
        whether it started a kernel, and the limit that stopped it."""
        if self.registry is None:
            return
        if started:
            self.container_starts.inc()
        if limit is not None:
            self.container_limits.inc((kind, limit))

    def tracer(self) -> Any:
        if self._tracer is None:
            from .tracing import tracer_for  # the OpenTelemetry SDK, only now

            s = self.settings
            self._tracer = tracer_for(s.traces, s.otlp_endpoint, s.service_name)
        return self._tracer

    def turn(self, job: TurnJob, *, started: float) -> TurnObserver | None:
        """The observer of one turn; None when nothing observes (metrics, traces, hooks all off)."""
        if self.registry is None and not self.tracing and not h.HOOKS.active:
            return None
        return TurnObserver(self, job, started=started)

    def server_label(self, server: str) -> str:
        return server if server in self.mcp_servers else OTHER_SERVER


class TurnObserver:
    """One turn's observation: fed by the host, it records as the turn goes and sums up at its end."""

    __slots__ = ("o", "job", "model", "stream", "started", "calls", "gen_s", "gen_tokens", "steps", "writes",
                 "hooks", "metrics", "done")  # fmt: skip

    def __init__(self, observer: Observer, job: TurnJob, *, started: float) -> None:
        self.o = observer
        self.job = job
        self.model = job.request.model
        self.stream = "true" if job.request.stream else "false"  # a background stream's run is driven unstreamed
        self.started = started
        self.calls = 0
        self.gen_s = 0.0
        self.gen_tokens = 0
        self.metrics = observer.registry is not None
        self.steps: list[StepTraced] | None = [] if observer.tracing else None
        self.writes: list[tuple[str, float, float]] | None = [] if observer.tracing else None
        self.hooks = h.HOOKS if h.HOOKS.active else None
        self.done = False
        if self.hooks is not None:
            request = job.request
            self.hooks.emit(h.TurnStarted(
                response_id=job.response_id, tenant=job.tenant, thread_id=job.thread_id, model=request.model,
                stream=request.stream, background=request.background, at=started,
            ))  # fmt: skip

    def accepted(self, input_items: Sequence[dict[str, Any]]) -> None:
        """The turn's input, as accepted: approval answers are counted."""
        if self.metrics:
            for item in input_items:
                if item.get("type") == "mcp_approval_response":
                    self.o.approvals_answered.inc(("approved" if item.get("approve") else "denied",))

    def step_started(self, event: StepStarted) -> None:
        if self.hooks is None:
            return
        rid = self.job.response_id
        if event.kind == "model":
            self.hooks.emit(h.ModelCallStarted(response_id=rid, model=event.name, at=event.started_at))
        else:
            self.hooks.emit(h.ToolCallStarted(
                response_id=rid, name=event.name, call_id=event.call_id, arguments=event.arguments,
                server=event.server, at=event.started_at,
            ))  # fmt: skip

    def step_ended(self, event: StepTraced) -> None:
        took = event.ended_at - event.started_at
        if event.kind == "guardrail":  # counted; a check is no model or tool call for the hooks
            if self.metrics and event.detail is not None:
                self.o.guardrail_checks.inc((event.name, event.detail["stage"], event.detail["verdict"]))
            if self.steps is not None:
                self.steps.append(event)
            return
        if event.kind == "model":
            self.calls += 1
            if event.error is None and event.output_tokens:
                self.gen_s += took - (event.ttft_s or 0.0)
                self.gen_tokens += event.output_tokens
            if self.metrics:
                self.o.model_call.observe((self.model, "ok" if event.error is None else "error"), took)
        elif self.metrics:
            outcome = "ok" if event.error is None else "cancelled" if event.error == "cancelled" else "error"
            if event.server is None:
                self.o.tool_call.observe((event.name, outcome), took)
            else:
                self.o.mcp_call.observe((self.o.server_label(event.server), outcome), took)
        if self.steps is not None:
            self.steps.append(event)
        if self.hooks is not None:
            self._hook_step(event)

    def _hook_step(self, event: StepTraced) -> None:
        rid = self.job.response_id
        if event.kind == "model":
            self.hooks.emit(h.ModelCallEnded(  # type: ignore[union-attr]
                response_id=rid, model=event.name, started_at=event.started_at, ended_at=event.ended_at,
                ttft_s=event.ttft_s, input_tokens=event.input_tokens, output_tokens=event.output_tokens,
                error=event.error,
            ))  # fmt: skip
        else:
            self.hooks.emit(h.ToolCallEnded(  # type: ignore[union-attr]
                response_id=rid, name=event.name, call_id=event.call_id, server=event.server,
                started_at=event.started_at, ended_at=event.ended_at, output=event.output, error=event.error,
            ))  # fmt: skip

    def wrote(self, name: str, started: float, ended: float) -> None:
        """A storage write of the turn (its response, a checkpoint) took from ``started`` to ``ended``."""
        if self.writes is not None:
            self.writes.append((name, started, ended))

    def finished(self, response: dict[str, Any], ttft_s: float | None) -> None:
        """The response ended (and is stored when it is to be)."""
        self._end(response, response["status"], ttft_s)

    def abandoned(self, response: dict[str, Any], *, failed: bool) -> None:
        """The turn stopped before its response ended: its client went away (``failed``: an error did)."""
        if not self.done:
            self._end(response, "failed" if failed else "disconnected", None)

    def _end(self, response: dict[str, Any], status: str, ttft_s: float | None) -> None:
        self.done = True
        ended = time.time()
        o, model, job = self.o, self.model, self.job
        approvals = [item for item in response.get("output") or () if item.get("type") == "mcp_approval_request"]
        if self.metrics:
            tenant = job.tenant if o.settings.tenant_label else ""
            o.responses.inc((model, status, self.stream, tenant))
            if ttft_s is not None:
                o.ttft.observe((model, self.stream), ttft_s)
            o.duration.observe((model, self.stream), ended - self.started)
            usage = response.get("usage") or {}
            if usage.get("output_tokens"):
                o.output_tokens.inc((model, tenant), usage["output_tokens"])
            if usage.get("input_tokens"):
                o.input_tokens.inc((model, tenant), usage["input_tokens"])
            if self.gen_tokens and self.gen_s > 0:
                o.tokens_per_s.observe((model,), self.gen_tokens / self.gen_s)
            if self.calls:
                o.model_calls.observe((model,), self.calls)
            for item in approvals:
                o.approvals_asked.inc((o.server_label(item.get("server_label", "")),))
        if self.steps is not None:
            self._trace(response, status, ttft_s, ended)
        if self.hooks is not None:
            rid = job.response_id
            for item in approvals:
                self.hooks.emit(h.ApprovalRequested(
                    response_id=rid, approval_request_id=item["id"], server=item.get("server_label", ""),
                    name=item.get("name", ""), arguments=item.get("arguments", ""),
                ))  # fmt: skip
            self.hooks.emit(h.ResponseFinished(
                response_id=rid, status=status, response=response, started_at=self.started, ended_at=ended,
                ttft_s=ttft_s,
            ))  # fmt: skip

    def _trace(self, response: dict[str, Any], status: str, ttft_s: float | None, ended: float) -> None:
        from .tracing import emit_response

        job = self.job
        usage = response.get("usage") or {}
        attributes = response_attributes(
            response_id=job.response_id, model=self.model, status=status, stream=self.stream == "true",
            input_tokens=usage.get("input_tokens", 0), output_tokens=usage.get("output_tokens", 0),
            model_calls=self.calls, ttft_s=ttft_s, conversation_id=job.request.conversation_id,
        )  # fmt: skip
        error = (response.get("error") or {}).get("message") if status == "failed" else None
        emit_response(
            self.o.tracer(), traceparent=job.traceparent, tracestate=job.tracestate, attributes=attributes,
            started=self.started, ended=ended, steps=self.steps or (), writes=self.writes or (),
            error=error or ("failed" if status == "failed" else None),
        )  # fmt: skip
