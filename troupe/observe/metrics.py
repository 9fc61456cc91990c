"""Troupe's metrics: recorded cheaply in each process, gathered for ``/metrics``, exported through Ray.

Each process that runs turns or owns the store keeps one :class:`Registry`
(:func:`process_registry`). Recording is a dict update on the caller's thread, a fraction of
a microsecond: nothing is sent anywhere on a response's path. The registry is read two ways:

* **``GET /metrics``** (:class:`ScrapeView`): the ingress takes a :meth:`Registry.snapshot` of
  its own process and asks each process it depends on for theirs (the storage actor, pooled
  and dedicated hosts: one actor call each per scrape), then sums them. A process that
  restarted, or a dedicated host that exited, has its last snapshot folded into a *retired*
  total, so counters never go back (a host's increments after the last scrape before it died
  are lost, as they would be to Prometheus).
* **Ray's metrics export** (:class:`RayExport`): a daemon thread hands what changed to
  ``ray.util.metrics`` every few seconds; Ray's metrics agent on each node serves it to
  Prometheus with the rest of Ray's metrics, summed over the cluster by PromQL
  (``ray_troupe_…``). Ray's agent rebuilds histograms from bucket counts at the buckets'
  midpoints (``OpenTelemetryMetricRecorder.record_histogram_aggregated_batch``), so handing it
  each bucket's new observations at its midpoint gives the agent exactly what observing every
  value would, at a cost per flush rather than per response.

Example::

    registry = process_registry()
    responses = registry.counter("troupe_responses_total")
    responses.inc(("sim", "completed", "true", ""))
    text = render(registry.snapshot())
"""

from __future__ import annotations

import bisect
import logging
import math
import secrets
import threading
from collections.abc import Callable, Iterable
from typing import Any

from .catalogue import BY_NAME, CATALOGUE, MetricSpec

__all__ = [
    "Counter",
    "Gauge",
    "Histogram",
    "Registry",
    "Snapshot",
    "ScrapeView",
    "RayExport",
    "process_registry",
    "commit_recorder",
    "merge",
    "render",
    "CONTENT_TYPE",
]

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""Prometheus' text exposition format."""

Labels = tuple[str, ...]
Snapshot = dict[str, Any]
"""``{"token": str, "values": {name: {labels: float | [bucket counts…, sum]}}}``: plain, picklable.
A histogram's counts are per bucket (not cumulative), the ``+Inf`` bucket last, then the sum."""


class Counter:
    """A monotonic count per label values (a tuple in the spec's label order)."""

    __slots__ = ("spec", "values", "_functions")

    def __init__(self, spec: MetricSpec) -> None:
        self.spec = spec
        self.values: dict[Labels, float] = {} if spec.labels else {(): 0.0}  # shown from the start
        self._functions: dict[int, tuple[Labels, Callable[[], float]]] = {}

    def inc(self, labels: Labels = (), amount: float = 1.0) -> None:
        values = self.values
        values[labels] = values.get(labels, 0.0) + amount

    def watch(self, labels: Labels, fn: Callable[[], float]) -> Callable[[], None]:
        """Read ``fn()`` as this counter's value for ``labels`` at every snapshot (a count kept
        elsewhere, e.g. by another thread); returns the function that stops it."""
        return _watch(self._functions, labels, fn)

    def read(self) -> dict[Labels, float]:
        return _read(self.values, self._functions)


class Gauge:
    """A value that goes up and down, read from functions at snapshot time (nothing per event)."""

    __slots__ = ("spec", "_functions")

    def __init__(self, spec: MetricSpec) -> None:
        self.spec = spec
        self._functions: dict[int, tuple[Labels, Callable[[], float]]] = {}

    def watch(self, labels: Labels, fn: Callable[[], float]) -> Callable[[], None]:
        """Add ``fn()`` to the value for ``labels`` at every snapshot; returns the function that stops it."""
        return _watch(self._functions, labels, fn)

    def read(self) -> dict[Labels, float]:
        return _read({}, self._functions)


class Histogram:
    """Observations counted into the spec's buckets, per label values."""

    __slots__ = ("spec", "bounds", "series")

    def __init__(self, spec: MetricSpec) -> None:
        self.spec = spec
        self.bounds = spec.buckets
        self.series: dict[Labels, list[float]] = {}

    def observe(self, labels: Labels, value: float) -> None:
        state = self.series.get(labels)
        if state is None:
            state = self.series[labels] = [0] * (len(self.bounds) + 1) + [0.0]
        # bisect_left: a value equal to a bound belongs to that bucket (``le`` is inclusive).
        state[bisect.bisect_left(self.bounds, value)] += 1
        state[-1] += value

    def read(self) -> dict[Labels, list[float]]:
        # list(...) of each state: taken whole under the GIL, so a reader on another thread
        # never sees half an observation.
        return {labels: list(state) for labels, state in list(self.series.items())}


def _watch(functions: dict[int, tuple[Labels, Callable[[], float]]], labels: Labels, fn: Callable[[], float]):
    key = id(fn)
    functions[key] = (labels, fn)
    return lambda: functions.pop(key, None)


def _read(values: dict[Labels, float], functions: dict[int, tuple[Labels, Callable[[], float]]]) -> dict[Labels, float]:
    out = dict(values)
    for labels, fn in list(functions.values()):
        try:
            out[labels] = out.get(labels, 0.0) + float(fn())
        except Exception:  # noqa: BLE001 - a broken reading must not break the scrape
            log.exception("metric function %r failed", fn)
    return out


class Registry:
    """One process's metrics, every one of :data:`~troupe.observe.catalogue.CATALOGUE`."""

    def __init__(self) -> None:
        self.token = secrets.token_hex(8)
        """Tells this registry from the one a restarted process has (see :class:`ScrapeView`)."""
        self._metrics: dict[str, Counter | Gauge | Histogram] = {}
        kinds: dict[str, type[Counter | Gauge | Histogram]] = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}
        for spec in CATALOGUE:
            self._metrics[spec.name] = kinds[spec.kind](spec)

    def counter(self, name: str) -> Counter:
        metric = self._metrics[name]
        assert isinstance(metric, Counter), f"{name} is a {metric.spec.kind}"
        return metric

    def gauge(self, name: str) -> Gauge:
        metric = self._metrics[name]
        assert isinstance(metric, Gauge), f"{name} is a {metric.spec.kind}"
        return metric

    def histogram(self, name: str) -> Histogram:
        metric = self._metrics[name]
        assert isinstance(metric, Histogram), f"{name} is a {metric.spec.kind}"
        return metric

    def snapshot(self) -> Snapshot:
        """Every metric's values now (a copy; safe to call from any thread)."""
        return {"token": self.token, "values": {name: metric.read() for name, metric in self._metrics.items()}}


_PROCESS: Registry | None = None
_PROCESS_LOCK = threading.Lock()


def process_registry() -> Registry:
    """This process's registry (made on first use)."""
    global _PROCESS
    if _PROCESS is None:
        with _PROCESS_LOCK:
            if _PROCESS is None:
                _PROCESS = Registry()
    return _PROCESS


def commit_recorder(registry: Registry) -> Callable[[str, int, float], None]:
    """The ``on_commit(writer, records, seconds)`` the storage writers report group commits to."""
    sizes = registry.histogram("troupe_storage_commit_batch_size")
    durations = registry.histogram("troupe_storage_commit_duration_seconds")

    def record(writer: str, size: int, seconds: float) -> None:
        sizes.observe((writer,), size)
        durations.observe((writer,), seconds)

    return record


# -- gathering ---------------------------------------------------------------------------


def merge(snapshots: Iterable[Snapshot]) -> dict[str, dict[Labels, Any]]:
    """The sum of several processes' snapshots, series by series."""
    total: dict[str, dict[Labels, Any]] = {spec.name: {} for spec in CATALOGUE}
    for snapshot in snapshots:
        _add(total, snapshot["values"], gauges=True)
    return total


def _add(total: dict[str, dict[Labels, Any]], values: dict[str, dict[Labels, Any]], *, gauges: bool) -> None:
    for name, series in values.items():
        spec = BY_NAME.get(name)
        if spec is None or (spec.kind == "gauge" and not gauges):
            continue
        into = total.setdefault(name, {})
        for labels, value in series.items():
            if spec.kind == "histogram":
                have = into.get(labels)
                into[labels] = list(value) if have is None else [a + b for a, b in zip(have, value, strict=True)]
            else:
                into[labels] = into.get(labels, 0.0) + value


class ScrapeView:
    """What ``/metrics`` shows: the processes' snapshots summed, counters kept monotonic.

    Each scrape hands :meth:`update` the snapshots of the processes it reached, by a stable
    source name (``"storage"``, an actor's name), with None for one that did not answer this
    time (its last snapshot stands in). A source whose token changed (it restarted) or that
    is no longer listed (a dedicated host that exited) has its last counters and histograms
    kept in the retired total.
    """

    def __init__(self) -> None:
        self._last: dict[str, Snapshot] = {}
        self._retired: dict[str, dict[Labels, Any]] = {spec.name: {} for spec in CATALOGUE}

    def update(self, snapshots: dict[str, Snapshot | None]) -> dict[str, dict[Labels, Any]]:
        for source, last in list(self._last.items()):
            now = snapshots.get(source, ...)
            if now is None:
                continue  # did not answer this time: its last snapshot stands
            if now is ... or now["token"] != last["token"]:
                _add(self._retired, last["values"], gauges=False)
                del self._last[source]
        for source, snapshot in snapshots.items():
            if snapshot is not None:
                self._last[source] = snapshot
        total = merge(self._last.values())
        _add(total, self._retired, gauges=False)
        return total


# -- the text format -----------------------------------------------------------------------


def render(values: dict[str, dict[Labels, Any]] | Snapshot) -> str:
    """Prometheus' text exposition format (0.0.4) of merged values (or of one snapshot)."""
    merged: dict[str, Any] = values  # by metric name, either shape
    if "token" in merged:  # one snapshot
        merged = merged["values"]
    lines: list[str] = []
    for spec in CATALOGUE:
        series = merged.get(spec.name, {})
        lines.append(f"# HELP {spec.name} {_escape_help(spec.help)}")
        lines.append(f"# TYPE {spec.name} {spec.kind}")
        for labels in sorted(series):
            pairs = [(k, v) for k, v in zip(spec.labels, labels, strict=True) if v != ""]
            value = series[labels]
            if spec.kind != "histogram":
                lines.append(f"{spec.name}{_labels(pairs)} {_number(value)}")
                continue
            cumulative = 0.0
            for bound, count in zip((*spec.buckets, math.inf), value, strict=False):
                cumulative += count
                lines.append(f"{spec.name}_bucket{_labels([*pairs, ('le', _number(bound))])} {_number(cumulative)}")
            lines.append(f"{spec.name}_sum{_labels(pairs)} {_number(value[-1])}")
            lines.append(f"{spec.name}_count{_labels(pairs)} {_number(cumulative)}")
    return "\n".join(lines) + "\n"


def _labels(pairs: list[tuple[str, str]]) -> str:
    if not pairs:
        return ""
    escaped = (v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for _, v in pairs)
    return "{" + ",".join(f'{k}="{v}"' for (k, _), v in zip(pairs, escaped, strict=True)) + "}"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if value == math.inf:
        return "+Inf"
    if float(value).is_integer():
        return f"{value:.1f}"
    return repr(float(value))


# -- Ray's export -------------------------------------------------------------------------------


class RayExport:
    """Hands a registry's changes to ``ray.util.metrics`` every ``interval_s``, on a daemon thread.

    Counters go as their increase since the last flush, gauges as their value, histograms as
    each bucket's new observations at the bucket's midpoint (what Ray's agent does with the
    bucket counts it receives anyway). Start it once per process, inside Ray
    (:meth:`start_once`).
    """

    _started: RayExport | None = None
    _lock = threading.Lock()

    def __init__(self, registry: Registry, *, interval_s: float = 5.0) -> None:
        self.registry = registry
        self.interval_s = interval_s
        self._metrics: dict[str, Any] = {}
        self._sent: dict[str, dict[Labels, Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="troupe-metrics-export", daemon=True)

    @classmethod
    def start_once(cls, registry: Registry) -> RayExport | None:
        """Start this process's export if Ray is up here and it is not started; None outside Ray."""
        import sys

        ray = sys.modules.get("ray")
        if ray is None or not ray.is_initialized():
            return None
        with cls._lock:
            if cls._started is None:
                cls._started = cls(registry)
                cls._started._thread.start()
            return cls._started

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - the next flush tries again
                log.exception("exporting metrics to Ray failed")

    def flush(self) -> None:
        """Send what changed since the last flush."""
        values = self.registry.snapshot()["values"]
        for spec in CATALOGUE:
            series = values.get(spec.name) or {}
            sent = self._sent.setdefault(spec.name, {})
            for labels, value in series.items():
                before = sent.get(labels)
                tags = dict(zip(spec.labels, labels, strict=True))
                if spec.kind == "gauge":
                    self._metric(spec).set(value, tags)
                elif spec.kind == "counter":
                    delta = value - (before or 0.0)
                    if delta > 0:
                        self._metric(spec).inc(delta, tags)
                else:
                    self._observe(spec, tags, value, before)
                sent[labels] = value

    def _observe(self, spec: MetricSpec, tags: dict[str, str], state: list[float], before: list[float] | None) -> None:
        metric = self._metric(spec)
        bounds = spec.buckets
        for i, count in enumerate(state[:-1]):
            new = int(count - (before[i] if before else 0))
            if new <= 0:
                continue
            midpoint = bounds[-1] * 2 if i == len(bounds) else (bounds[i] + (bounds[i - 1] if i else 0.0)) / 2
            for _ in range(new):
                metric.observe(midpoint, tags)

    def _metric(self, spec: MetricSpec) -> Any:
        metric = self._metrics.get(spec.name)
        if metric is None:
            from ray.util import metrics as ray_metrics

            if spec.kind == "counter":
                metric = ray_metrics.Counter(spec.name, spec.help, tag_keys=spec.labels)
            elif spec.kind == "gauge":
                metric = ray_metrics.Gauge(spec.name, spec.help, tag_keys=spec.labels)
            else:
                metric = ray_metrics.Histogram(spec.name, spec.help, boundaries=list(spec.buckets), tag_keys=spec.labels)
            self._metrics[spec.name] = metric
        return metric
