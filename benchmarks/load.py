"""Load, overload and soak runs against ``troupe serve`` on its defaults (not part of ``make test``).

    .venv/bin/python -m benchmarks.load conversations             # 1,000 concurrent conversations x 2 turns
    .venv/bin/python -m benchmarks.load overload                  # far past capacity: 429s, no time-outs
    .venv/bin/python -m benchmarks.load soak                      # 30 minutes at c=32, server RSS sampled
    .venv/bin/python -m benchmarks.load soak --duration 120 --smoke   # a 2-minute smoke test of the harness

Each run starts Troupe the way users do (``troupe serve`` on its embedded defaults, no placement
passed: a fresh local Ray instance, the ``sim`` model, the example tools and the default
``replica`` placement, conversations hosted inside the one ingress replica; ``--config FILE``
says otherwise), on a free port of 127.0.0.1 and a fresh DuckDB file under
``benchmarks/scratch/load/``, drives it with ``aiohttp`` (bounded concurrency, bounded counts and
durations), stops it (SIGTERM to its process group, never ``ray stop``) and writes
``benchmarks/results/load/<date>-<commit>-load-<run>.{json,md}`` (the soak adds a ``.png``). A
``--smoke`` run writes to ``benchmarks/scratch/results/load/`` instead. ``--url`` drives a server
you started yourself (nothing is started or stopped; RSS and the log scan need ``--server-pid``).

* ``conversations``: N conversations (default 1,000) all in flight at once; each is
  ``POST /v1/conversations``, two ``POST /v1/responses`` with ``conversation`` (turn 2 asks
  ``[[history]]``, so its answer shows what the host saw of turn 1), then
  ``GET /v1/conversations/{id}/items?order=asc`` which must be exactly user 1, assistant 1, user 2,
  assistant 2 (the assistant items the very output items of the responses). Half of the turns are
  streamed (per conversation: neither, both, only the first, only the second). Then every response
  id is fetched again through the API, and after the server stops the DuckDB file is read to count
  the rows (responses, conversations, conversation items, per conversation in ``seq`` order).
* ``overload``: a reference level (c=16) and then levels far past capacity (default c=512 and
  1,000), half streamed, ``[[latency ttft=50 itl=10]] [[tokens 32]]``, closed loop for a duration.
  Counts 200 / 429 / other / time-outs; every 429 must carry ``Retry-After`` and OpenAI's error
  body with code ``rate_limit_exceeded``; admitted requests' latency p50/p99 against the reference.
  A rejected client waits ``Retry-After`` (capped, ``--retry-cap``) before its next request.
* ``soak``: c=32 mixed traffic (plain, streamed, calculator tool calls, conversations with the
  item order checked, ``previous_response_id`` chains, reads) for ``--duration`` (default 30 min);
  the RSS (and PSS) of the whole server process tree (``troupe serve``, Ray's daemons and every
  worker and actor process it started) every 10 s; "flat after warm-up" is the slope of a linear
  fit over the second half and max − min after warm-up, for the whole tree and for the processes
  that lived through the whole measured window.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import random
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import psutil

from troupe.bench.loadgen import LoopLagMonitor, run_async
from troupe.bench.machine import machine_info
from troupe.bench.stats import summarize

from .measure import log
from .procs import Proc, free_port
from .run import _git, _load_average
from .targets import ROOT, Lab

__all__ = ["main", "ServeLab", "Outcome", "post_response", "linear_fit", "check_items"]

SCHEMA = "troupe-load/1"
RESULTS_DIR = os.path.join(ROOT, "benchmarks", "results", "load")
SCRATCH = os.path.join(ROOT, "benchmarks", "scratch")
OVERLOAD_INPUT = "[[latency ttft=50 itl=10]] [[tokens 32]]"
TOOL_INPUT = '[[call calculator {"expression": "6*7"}]]'
MAX_EXAMPLES = 20


# -- the server ----------------------------------------------------------------------


@dataclass(eq=False)
class ServeLab(Lab):
    """:class:`~benchmarks.targets.Lab` with ``troupe serve`` as users start it (``make run``)."""

    serve: Proc | None = None
    base_url: str = ""
    db_path: str = ""
    argv: list[str] = field(default_factory=list)
    leftovers: list[dict[str, Any]] = field(default_factory=list)
    _tree: dict[int, tuple[float, str]] = field(default_factory=dict)

    def start_serve(self, name: str = "troupe-serve", config: str | None = None, port: int | None = None) -> str:
        """``troupe serve --port P`` (a free one unless given) with ``TROUPE_STORAGE_PATH`` a fresh
        file; its API root."""
        port = port or free_port()
        data = os.path.join(self.scratch, "load")
        os.makedirs(data, exist_ok=True)
        self.db_path = os.path.join(data, f"{name}.duckdb")
        for stale in (self.db_path, self.db_path + ".wal"):
            if os.path.exists(stale):
                os.remove(stale)
        # The embedded defaults: no TROUPE_* setting of this shell leaks in (empty = unset).
        env = {k: "" for k in os.environ if k.startswith("TROUPE_")}
        env.update({"TROUPE_STORAGE_PATH": self.db_path, "RAY_USAGE_STATS_ENABLED": "0"})
        self.argv = [os.path.join(os.path.dirname(sys.executable), "troupe"), "serve", "--port", str(port)]
        if config:
            self.argv += ["--config", os.path.abspath(config)]
        self.serve = self._start(name, self.argv, env=env, cwd=data)
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.serve.wait_http(f"http://127.0.0.1:{port}/health", timeout_s=240)
        return self.base_url

    def remember_tree(self) -> None:
        """Note every process of the server's tree (pid, start time), to check after the stop."""
        if self.serve is None:
            return
        for proc in self.serve.processes():
            with contextlib.suppress(psutil.Error):
                self._tree.setdefault(proc.pid, (proc.create_time(), _label(proc)))

    def close(self) -> None:
        self.remember_tree()
        super().close()
        # Whatever of the tree outlived the group's SIGTERM/SIGKILL (a process in another
        # session): report it and end it by pid; these are processes this run started.
        deadline = time.monotonic() + 10
        for pid, (created, label) in sorted(self._tree.items()):
            try:
                proc = psutil.Process(pid)
                if proc.create_time() != created:
                    continue
                while proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
                    time.sleep(0.2)
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    self.leftovers.append({"pid": pid, "process": label})
                    proc.kill()
            except psutil.Error:
                continue

    def session_dir(self) -> str | None:
        """The Ray session directory of this server (from its raylet's command line)."""
        if self.serve is None:
            return None
        for proc in self.serve.processes():
            with contextlib.suppress(psutil.Error):
                for arg in proc.cmdline():
                    if arg.startswith("--session_dir="):
                        return arg.split("=", 1)[1]
        return None


def _label(proc: psutil.Process) -> str:
    """A short name for a process of the tree: ``raylet``, ``ray::ConversationHost``, …"""
    try:
        cmd = proc.cmdline()
    except psutil.Error:
        return "?"
    if not cmd:
        return proc.name()
    first = cmd[0]
    if first.startswith("ray::"):  # the title carries the method running now: ray::HostActor.respond
        return first.split(" ")[0].split(".")[0]
    joined = " ".join(cmd)
    for marker in ("gcs_server", "raylet", "dashboard/agent.py", "dashboard.py", "log_monitor", "runtime_env/agent",
                   "monitor.py", "default_worker.py"):
        if marker in joined:
            return marker.split("/")[0] if marker.startswith("dashboard") else marker.removesuffix(".py")
    if "troupe" in joined and "serve" in cmd:
        return "troupe serve"
    return os.path.basename(first)


def tree_memory(serve: Proc) -> dict[str, Any]:
    """RSS and PSS of the whole server tree now, with a per-process breakdown (MiB)."""
    rss = pss = 0
    per: list[dict[str, Any]] = []
    for proc in serve.processes():
        try:
            info = proc.memory_full_info()
            label = _label(proc)
        except psutil.Error:
            continue
        rss += info.rss
        pss += getattr(info, "pss", info.rss)
        per.append({"pid": proc.pid, "process": label, "rss_mib": round(info.rss / 2**20, 1),
                    "pss_mib": round(getattr(info, "pss", info.rss) / 2**20, 1)})
    return {"rss_mib": round(rss / 2**20, 1), "pss_mib": round(pss / 2**20, 1), "processes": len(per), "per": per}


_TRACEBACK_END = re.compile(r"^\s*(?:\(\S+ pid=\d+\)\s*)?(\w+(?:\.\w+)*(?:Error|Exception|Exit|Interrupt)\b.*)$")


def scan_logs(paths: list[str], most: int = 8) -> dict[str, Any]:
    """Tracebacks and ERROR lines in the server's logs: counts and a few distinct examples."""
    tracebacks: Counter[str] = Counter()
    examples: dict[str, str] = {}
    errors = 0
    files = 0
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        files += 1
        i = 0
        while i < len(lines):
            line = lines[i]
            if " ERROR " in line or line.startswith("ERROR"):
                errors += 1
            if "Traceback (most recent call last)" in line:
                block = [line]
                j = i + 1
                while j < len(lines) and j - i < 200:
                    block.append(lines[j])
                    if _TRACEBACK_END.match(lines[j]) and not lines[j].startswith((" ", "\t")):
                        break
                    j += 1
                ours = any("/troupe/" in b and "site-packages" not in b for b in block)
                key = ("troupe: " if ours else "ray: ") + re.sub(r"\d+", "N", _TRACEBACK_END.sub(r"\1", block[-1]).strip())[:300]
                tracebacks[key] += 1
                examples.setdefault(key, f"{os.path.basename(path)}:\n" + "\n".join(block[-40:]))
                i = j
            i += 1
    top = sorted(tracebacks.items(), key=lambda kv: (not kv[0].startswith("troupe: "), -kv[1]))[:most]
    return {"files_scanned": files, "error_lines": errors, "tracebacks": sum(tracebacks.values()),
            "tracebacks_with_troupe_frames": sum(n for k, n in tracebacks.items() if k.startswith("troupe: ")),
            "distinct": [{"last_line": k, "count": n, "example": examples[k]} for k, n in top]}


def server_logs(lab: ServeLab) -> list[str]:
    """The driver's log and the Ray session's worker and Serve logs of this server."""
    paths = [lab.serve.log_path] if lab.serve is not None else []
    session = lab.session_dir()
    if session:
        logs = os.path.join(session, "logs")
        for root, _dirs, names in os.walk(logs):
            paths += [os.path.join(root, n) for n in names if n.endswith((".err", ".log", ".out"))]
    return paths


# -- one request ---------------------------------------------------------------------


@dataclass(slots=True)
class Outcome:
    """One create-response request as the client saw it. Times in seconds."""

    stream: bool
    status: int | None = None
    kind: str = "ok"
    """``ok``, ``http_<status>``, ``timeout``, ``transport``, ``stream_error``, ``failed``,
    ``no_terminal_event``, ``bad_sequence``, ``bad_response``."""
    message: str | None = None
    e2e_s: float = 0.0
    ttft_s: float | None = None
    retry_after: str | None = None
    should_retry: str | None = None
    error_body: dict[str, Any] | None = None
    response: dict[str, Any] | None = None
    events: int = 0

    @property
    def ok(self) -> bool:
        return self.kind == "ok"

    @property
    def response_id(self) -> str | None:
        return (self.response or {}).get("id")


def _error_of(body: bytes) -> dict[str, Any] | None:
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return doc.get("error") if isinstance(doc, dict) and isinstance(doc.get("error"), dict) else None


async def post_response(client: aiohttp.ClientSession, base_url: str, body: dict[str, Any], *,
                        timeout_s: float) -> Outcome:
    """POST /responses (streamed when the body says so) within ``timeout_s`` in all; never raises
    for what the server does. A stream is checked: ``sequence_number`` 0, 1, 2… and a terminal
    event carrying the final Response."""
    stream = bool(body.get("stream"))
    out = Outcome(stream=stream)
    start = time.perf_counter()
    try:
        async with asyncio.timeout(timeout_s):
            async with client.post(f"{base_url}/responses", json=body) as reply:
                out.status = reply.status
                out.retry_after = reply.headers.get("retry-after")
                out.should_retry = reply.headers.get("x-should-retry")
                if reply.status >= 400:
                    out.kind, out.error_body = f"http_{reply.status}", _error_of(await reply.read())
                elif stream:
                    await _stream(reply, out, start)
                else:
                    try:
                        out.response = json.loads(await reply.read())
                    except ValueError:
                        out.kind = "bad_response"
    except TimeoutError:
        out.kind, out.message = "timeout", f"no complete answer within {timeout_s:g} s"
    except aiohttp.ClientError as exc:
        out.kind, out.message = "transport", f"{type(exc).__name__}: {exc}"[:300]
    out.e2e_s = time.perf_counter() - start
    if out.ok and out.response is not None:
        if not isinstance(out.response, dict) or "id" not in out.response:
            out.kind = "bad_response"
        elif out.response.get("status") == "failed":
            out.kind, out.message = "failed", str((out.response.get("error") or {}).get("message"))[:300]
    if out.error_body and not out.message:
        out.message = str(out.error_body.get("message"))[:300]
    return out


async def _stream(reply: aiohttp.ClientResponse, out: Outcome, start: float) -> None:
    buffer = b""
    expected_seq = 0
    async for chunk in reply.content.iter_any():
        buffer += chunk
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        *frames, buffer = buffer.split(b"\n\n")
        for frame in frames:
            data = b"".join(line[5:].lstrip() for line in frame.split(b"\n") if line.startswith(b"data:"))
            if not data or data == b"[DONE]":
                continue
            try:
                event = json.loads(data)
            except ValueError:
                out.kind, out.message = "bad_response", "an event is not JSON"
                continue
            out.events += 1
            kind = event.get("type", "")
            if event.get("sequence_number") != expected_seq and out.kind == "ok":
                out.kind = "bad_sequence"
                out.message = f"sequence_number {event.get('sequence_number')} where {expected_seq} was due"
            expected_seq += 1
            if kind.endswith(".delta") and out.ttft_s is None:
                out.ttft_s = time.perf_counter() - start
            elif kind in ("response.completed", "response.incomplete", "response.failed"):
                out.response = event.get("response")
            elif kind == "error" and out.kind == "ok":
                out.kind, out.message = "stream_error", str(event.get("message"))[:300]
    if out.response is None and out.kind == "ok":
        out.kind, out.message = "no_terminal_event", "the stream ended without a terminal event"


async def call_json(client: aiohttp.ClientSession, method: str, url: str, *, timeout_s: float,
                    json_body: dict[str, Any] | None = None) -> tuple[str, int | None, Any, float]:
    """``(kind, status, body, seconds)`` of one plain JSON call; kind as :class:`Outcome`'s."""
    start = time.perf_counter()
    try:
        async with asyncio.timeout(timeout_s):
            async with client.request(method, url, json=json_body) as reply:
                status, raw = reply.status, await reply.read()
    except TimeoutError:
        return "timeout", None, None, time.perf_counter() - start
    except aiohttp.ClientError as exc:
        return "transport", None, f"{type(exc).__name__}: {exc}"[:300], time.perf_counter() - start
    seconds = time.perf_counter() - start
    try:
        body = json.loads(raw)
    except ValueError:
        body = raw[:300].decode(errors="replace")
    return ("ok" if status < 400 else f"http_{status}"), status, body, seconds


def output_text(response: dict[str, Any] | None) -> str:
    return "".join(part.get("text", "") for item in (response or {}).get("output") or []
                   if isinstance(item, dict) and item.get("type") == "message"
                   for part in item.get("content") or [] if isinstance(part, dict))


def _message_ids(response: dict[str, Any] | None) -> list[str]:
    return [item.get("id") for item in (response or {}).get("output") or []
            if isinstance(item, dict) and item.get("type") == "message"]


def _item_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def check_items(items: list[dict[str, Any]], expected: list[tuple[str, str, str | None]]) -> list[str]:
    """What is wrong with a conversation's items against ``expected`` ``(role, text, id or None)``
    in order: ``lost`` (an expected item is missing), ``extra`` (an item too many, duplicates
    included), ``misordered`` (the same items in another order), ``wrong_content``. Empty: all good."""
    got = [(item.get("role"), _item_text(item), item.get("id")) for item in items]

    def matches(g: tuple[Any, ...], e: tuple[str, str, str | None]) -> bool:
        return g[0] == e[0] and g[1] == e[1] and (e[2] is None or g[2] == e[2])

    if len(got) == len(expected) and all(matches(g, e) for g, e in zip(got, expected, strict=True)):
        return []
    problems = []
    remaining = list(got)
    found = []
    for e in expected:
        hit = next((g for g in remaining if matches(g, e)), None)
        if hit is None:
            problems.append("lost")
        else:
            remaining.remove(hit)
            found.append(got.index(hit))
    if remaining:
        problems.append("extra")
    if found != sorted(found):
        problems.append("misordered")
    if not problems:
        problems.append("wrong_content")
    return sorted(set(problems))


# -- records and summaries -----------------------------------------------------------


@dataclass
class Tally:
    """Counts, latencies and failure examples of one run (or one level)."""

    counts: Counter[str] = field(default_factory=Counter)
    latencies: dict[str, list[float]] = field(default_factory=dict)
    failures: Counter[str] = field(default_factory=Counter)
    examples: list[dict[str, Any]] = field(default_factory=list)

    def time(self, what: str, seconds: float) -> None:
        self.latencies.setdefault(what, []).append(seconds)

    def fail(self, stage: str, kind: str, **detail: Any) -> None:
        self.failures[f"{stage}:{kind}"] += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append({"stage": stage, "kind": kind, **{k: v for k, v in detail.items() if v is not None}})

    def latency_ms(self) -> dict[str, Any]:
        return {k: _ms(v) for k, v in sorted(self.latencies.items())}


def _ms(values: list[float]) -> dict[str, Any] | None:
    summary = summarize(values)
    return None if summary is None else summary.scaled(1000).to_dict(1)


def linear_fit(points: list[tuple[float, float]]) -> dict[str, float] | None:
    """Least squares ``y = a + b·x`` over ``points``: slope ``b``, intercept and r²; None for < 2."""
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in points)
    syy = sum((y - my) ** 2 for _, y in points)
    slope = sxy / sxx
    r2 = (sxy * sxy) / (sxx * syy) if syy else 1.0
    return {"slope": slope, "intercept": my - slope * mx, "r2": r2}


def _streamed(i: int, turn: int) -> bool:
    """Conversation ``i``'s turn 1 or 2: neither, both, only the first, only the second streamed."""
    return ((False, False), (True, True), (True, False), (False, True))[i % 4][turn - 1]


async def run_conversation(client: aiohttp.ClientSession, base: str, i: int, tally: Tally, *, timeout_s: float,
                           tag: str = "load", streams: tuple[bool, bool] | None = None,
                           retries: int = 0) -> dict[str, Any]:
    """One conversation of two turns, its items checked; what it made (ids) and whether all held.
    A turn answered 429 is sent again after its Retry-After, up to ``retries`` times."""
    record: dict[str, Any] = {"i": i, "ok": False, "responses": []}
    kind, status, body, seconds = await call_json(client, "POST", f"{base}/conversations", timeout_s=timeout_s,
                                                  json_body={"metadata": {"bench": tag, "i": str(i)}})
    tally.time("create_conversation", seconds)
    if kind != "ok" or not isinstance(body, dict) or "id" not in body:
        tally.counts[f"create_conversation:{kind}"] += 1
        tally.fail("create_conversation", kind, status=status, message=_msg(body), i=i)
        return record
    conv = record["conversation"] = body["id"]
    inputs = (f"{tag} conversation {i} turn one [[say reply {i} one]]", f"{tag} conversation {i} turn two [[history]]")
    answers = (f"reply {i} one", f"{inputs[0]} | {inputs[1]}")
    responses = []
    for turn in (1, 2):
        stream = streams[turn - 1] if streams is not None else _streamed(i, turn)
        stage = f"turn{turn}_{'stream' if stream else 'plain'}"
        for attempt in range(retries + 1):
            out = await post_response(client, base, {"model": "sim", "input": inputs[turn - 1], "conversation": conv,
                                                     "stream": stream}, timeout_s=timeout_s)
            if out.status != 429 or attempt == retries:
                break
            # As the openai SDK does: wait Retry-After (here with jitter), send the same request again.
            tally.counts[f"{stage}:429_retried"] += 1
            record["retried_429"] = record.get("retried_429", 0) + 1
            await asyncio.sleep(_retry_after(out) * (1 + 0.5 * random.random()))
        tally.counts[f"{stage}:{out.kind}"] += 1
        tally.time(stage, out.e2e_s)
        if not out.ok:
            tally.fail(stage, out.kind, status=out.status, message=out.message, conversation=conv, i=i,
                       response_id=out.response_id)
            return record
        record["responses"].append(out.response_id)
        if output_text(out.response) != answers[turn - 1]:
            tally.fail(stage, "wrong_answer", conversation=conv, i=i, response_id=out.response_id,
                       got=output_text(out.response)[:300], want=answers[turn - 1][:300])
            return record
        responses.append(out.response)
    kind, status, body, seconds = await call_json(
        client, "GET", f"{base}/conversations/{conv}/items?order=asc&limit=100", timeout_s=timeout_s)
    tally.time("list_items", seconds)
    tally.counts[f"list_items:{kind}"] += 1
    if kind != "ok" or not isinstance(body, dict):
        tally.fail("list_items", kind, status=status, message=_msg(body), conversation=conv, i=i)
        return record
    ids = [_message_ids(r) for r in responses]
    expected = [("user", inputs[0], None), ("assistant", answers[0], ids[0][0] if ids[0] else None),
                ("user", inputs[1], None), ("assistant", answers[1], ids[1][0] if ids[1] else None)]
    items = body.get("data") or []
    problems = check_items(items, expected)
    record["item_ids"] = [item.get("id") for item in items]
    for problem in problems:
        tally.counts[f"items:{problem}"] += 1
        tally.fail("items", problem, conversation=conv, i=i,
                   got=[(it.get("role"), _item_text(it)[:80], it.get("id")) for it in items],
                   want=[(r, t[:80], d) for r, t, d in expected])
    record["ok"] = not problems
    return record


def _retry_after(out: Outcome, default: float = 1.0) -> float:
    try:
        return max(0.0, float(out.retry_after)) if out.retry_after is not None else default
    except ValueError:
        return default


def _msg(body: Any) -> str | None:
    if isinstance(body, dict):
        err = body.get("error")
        return str(err.get("message") if isinstance(err, dict) else body)[:300]
    return None if body is None else str(body)[:300]


# -- memory sampling -----------------------------------------------------------------


class Sampler:
    """Samples the server tree's memory (and the load average, the DuckDB file) every ``every_s``."""

    def __init__(self, lab: ServeLab, every_s: float, extra: Callable[[], dict[str, Any]] | None = None) -> None:
        self.lab, self.every_s, self.extra = lab, every_s, extra
        self.samples: list[dict[str, Any]] = []
        self.t0 = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    def take(self) -> dict[str, Any] | None:
        if self.lab.serve is None:
            return None
        began = time.monotonic()
        mem = tree_memory(self.lab.serve)
        self.lab.remember_tree()
        sample = {"t_s": round(began - self.t0, 1), **mem, "load_average": _load_average(),
                  "db_mib": _db_mib(self.lab.db_path), "sample_s": round(time.monotonic() - began, 2)}
        if self.extra:
            sample.update(self.extra())
        self.samples.append(sample)
        return sample

    async def _run(self) -> None:
        due = time.monotonic()
        while True:
            await asyncio.to_thread(self.take)
            due += self.every_s  # a fixed cadence, however long a sample took
            await asyncio.sleep(max(0.0, due - time.monotonic()))

    def start(self) -> None:
        self.t0 = time.monotonic()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await asyncio.to_thread(self.take)

    def brief(self) -> dict[str, Any]:
        """First, peak and last RSS of the tree (MiB), without the per-process lists."""
        rss = [s["rss_mib"] for s in self.samples]
        return {"every_s": self.every_s, "count": len(rss), "first_rss_mib": rss[0] if rss else None,
                "peak_rss_mib": max(rss, default=None), "last_rss_mib": rss[-1] if rss else None,
                "last_processes": self.samples[-1]["processes"] if self.samples else None,
                "series": [{k: s[k] for k in ("t_s", "rss_mib", "pss_mib", "processes", "load_average")}
                           for s in self.samples]}


class Cost:
    """CPU of the client (this process) and of the server tree over a stretch, and the client's
    event-loop lag: a client short of CPU would make the server look slower than it is."""

    def __init__(self, lab: ServeLab) -> None:
        self.lab = lab
        self.lag = LoopLagMonitor(0.05)
        self.client0 = self.server0 = self.wall0 = 0.0

    def start(self) -> None:
        self.wall0, self.client0 = time.perf_counter(), time.process_time()
        self.server0 = self.lab.serve.cpu_s() if self.lab.serve else 0.0
        self.lag.start()

    async def stop(self) -> dict[str, Any]:
        wall = time.perf_counter() - self.wall0
        client = time.process_time() - self.client0
        server = self.lab.serve.cpu_s() - self.server0 if self.lab.serve else None
        lag = await self.lag.stop()
        return {"wall_s": round(wall, 1), "client_cpu_cores": round(client / wall, 2),
                "server_cpu_cores": None if server is None else round(server / wall, 2),
                "client_loop_lag_ms": None if lag is None else lag.scaled(1000).to_dict(1)}


def _db_mib(path: str) -> float | None:
    size = sum(os.path.getsize(p) for p in (path, path + ".wal") if path and os.path.exists(p))
    return round(size / 2**20, 2) if path else None


# -- the runs ------------------------------------------------------------------------


def _client(concurrency: int) -> aiohttp.ClientSession:
    """One session, a connection per request in flight. aiohttp rather than httpx: at 1,000
    requests in flight httpx's connection pool cost the client ~4-7 ms of CPU per request and
    stalled its event loop for seconds (aiohttp: ~0.8 ms, measured against the bare sim), and the
    client shares the machine's two cores with the server. ``asyncio.timeout`` in each call is
    the real time limit."""
    connector = aiohttp.TCPConnector(limit=concurrency + 16, limit_per_host=0)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None), trust_env=False)


async def _warm(base: str) -> None:
    async with _client(4) as client:
        for body in ({"model": "sim", "input": "[[say ok]]"}, {"model": "sim", "input": TOOL_INPUT}):
            out = await post_response(client, base, body, timeout_s=120)
            if not out.ok:
                raise RuntimeError(f"the server does not answer a warm-up request: {out.kind} {out.message}")


async def conversations(lab: ServeLab, args: argparse.Namespace) -> dict[str, Any]:
    base = lab.base_url
    n, concurrency = args.conversations, min(args.concurrency, args.conversations)
    tally = Tally()
    sampler = Sampler(lab, 5.0)
    await _warm(base)
    sampler.start()
    gate = asyncio.Semaphore(concurrency)
    done = 0

    async def one(i: int) -> dict[str, Any]:
        nonlocal done
        async with gate:
            record = await run_conversation(client, base, i, tally, timeout_s=args.timeout, retries=args.retries)
        done += 1
        if done % max(1, n // 10) == 0:
            log(f"  {done}/{n} conversations, {sum(1 for k in tally.failures)} failure kinds so far")
        return record

    log(f"{n} conversations, {concurrency} at once, 2 turns each")
    load = {"start": _load_average()}
    cost = Cost(lab)
    cost.start()
    started = time.perf_counter()
    async with _client(concurrency) as client:
        records = await asyncio.gather(*(one(i) for i in range(n)))
        wall = time.perf_counter() - started
        load["end_of_load"] = _load_average()
        costs = await cost.stop()
        log("fetching every response again through the API")
        retrieve = Tally()
        ids = [(r["conversation"], rid) for r in records for rid in r["responses"]]
        gate2 = asyncio.Semaphore(64)

        async def fetch(conv: str, rid: str) -> None:
            async with gate2:
                kind, status, body, seconds = await call_json(client, "GET", f"{base}/responses/{rid}",
                                                              timeout_s=args.timeout)
            retrieve.time("get_response", seconds)
            retrieve.counts[kind] += 1
            if kind != "ok":
                retrieve.fail("get_response", kind, status=status, message=_msg(body), response_id=rid)
            elif not isinstance(body, dict) or body.get("status") != "completed" or (body.get("conversation") or {}).get(
                    "id", conv) != conv:
                retrieve.fail("get_response", "wrong_body", response_id=rid,
                              status=body.get("status") if isinstance(body, dict) else None)

        await asyncio.gather(*(fetch(c, rid) for c, rid in ids))
    await sampler.stop()
    ok = sum(1 for r in records if r["ok"])
    five = sum(v for k, v in {**tally.counts, **{f"get:{k}": v for k, v in retrieve.counts.items()}}.items()
               if re.search(r":http_5\d\d$", k))
    result = {
        "params": {"conversations": n, "concurrency": concurrency, "turns": 2, "timeout_s": args.timeout,
                   "retries_after_429": args.retries,
                   "streamed": "per conversation i: i%4 = 0 neither, 1 both, 2 only turn 1, 3 only turn 2",
                   "turn_inputs": ["{tag} conversation {i} turn one [[say reply {i} one]]",
                                   "{tag} conversation {i} turn two [[history]]"]},
        "wall_s": round(wall, 1),
        "conversations_ok": ok,
        "conversations_failed": n - ok,
        "responses_made": sum(len(r["responses"]) for r in records),
        "responses_per_s": round(sum(len(r["responses"]) for r in records) / wall, 1),
        "http_5xx": five,
        "http_429_retried": sum(v for k, v in tally.counts.items() if k.endswith(":429_retried")),
        "conversations_with_a_429": sum(1 for r in records if r.get("retried_429")),
        "conversations_with_a_429_all_good": sum(1 for r in records if r.get("retried_429") and r["ok"]),
        "http_429_final": sum(v for k, v in tally.counts.items() if k.endswith(":http_429")),
        "timeouts": sum(v for k, v in tally.counts.items() if k.endswith(":timeout")) + retrieve.counts["timeout"],
        "transport_errors": sum(v for k, v in tally.counts.items() if k.endswith(":transport")),
        "lost_items": tally.counts["items:lost"],
        "extra_items": tally.counts["items:extra"],
        "misordered": tally.counts["items:misordered"],
        "counts": dict(sorted(tally.counts.items())),
        "failures": dict(sorted(tally.failures.items())),
        "failure_examples": tally.examples,
        "latency_ms": tally.latency_ms(),
        "retrieve": {"responses": len(ids), "counts": dict(retrieve.counts), "failures": dict(retrieve.failures),
                     "examples": retrieve.examples, "latency_ms": retrieve.latency_ms()},
        "load_average": load,
        "cost": costs,
        "memory": sampler.brief(),
    }
    result["_records"] = records  # for the DuckDB check after the stop; dropped before writing
    return result


def duckdb_check(db_path: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Count the rows the run should have left in the DuckDB file (read after the server stopped)."""
    import duckdb

    convs = {r["conversation"]: r for r in records if r.get("conversation")}
    out: dict[str, Any] = {"path": os.path.relpath(db_path, ROOT)}
    try:
        con = duckdb.connect(db_path, read_only=True)
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        return {**out, "error": f"{type(exc).__name__}: {exc}"[:300]}
    try:
        out["conversations_rows"] = con.execute("SELECT count(*) FROM conversations").fetchone()[0]
        out["responses_with_conversation"] = con.execute(
            "SELECT count(*) FROM responses WHERE conversation_id IS NOT NULL").fetchone()[0]
        out["responses_by_status"] = dict(con.execute(
            "SELECT coalesce(status, 'null'), count(*) FROM responses WHERE conversation_id IS NOT NULL "
            "GROUP BY ALL").fetchall())
        out["conversation_items_rows"] = con.execute("SELECT count(*) FROM conversation_items").fetchone()[0]
        rows = con.execute("SELECT conversation_id, list(item_id ORDER BY seq), count(*) - count(DISTINCT seq) "
                           "FROM conversation_items GROUP BY conversation_id").fetchall()
        stored = {conv: (ids, dup) for conv, ids, dup in rows}
        want_responses = {rid for r in records for rid in r["responses"]}
        have = {rid for (rid,) in con.execute("SELECT id FROM responses").fetchall()}
    finally:
        con.close()
    missing_conv = [c for c in convs if c not in stored]
    differ = [c for c, r in convs.items() if r.get("item_ids") is not None and c in stored
              and stored[c][0] != r["item_ids"]]
    not_four = [c for c, r in convs.items() if r["ok"] and len(stored.get(c, ([], 0))[0]) != 4]
    out.update({
        "expected_conversations": len(convs),
        "expected_responses": len(want_responses),
        "responses_missing": sorted(want_responses - have)[:MAX_EXAMPLES],
        "responses_missing_count": len(want_responses - have),
        "conversations_without_items": len(missing_conv),
        "conversations_with_seq_ties": sum(1 for _, dup in stored.values() if dup),
        "ok_conversations_not_4_items": len(not_four),
        "stored_order_differs_from_api": len(differ),
        "examples": {"not_4_items": not_four[:5], "order_differs": differ[:5]},
    })
    return out


async def overload(lab: ServeLab, args: argparse.Namespace) -> dict[str, Any]:
    base = lab.base_url
    await _warm(base)
    levels = [args.reference] + [int(c) for c in str(args.levels).split(",") if c.strip()]
    rows = []
    for idx, concurrency in enumerate(levels):
        duration = args.reference_duration if idx == 0 else args.duration
        log(f"overload: c={concurrency} for {duration:g} s{' (reference)' if idx == 0 else ''}")
        rows.append(await _overload_level(lab, concurrency, duration, args, reference=idx == 0))
        await asyncio.sleep(args.pause)
    ref = rows[0]
    for row in rows[1:]:
        p99, ref99 = row["admitted_e2e_ms"] and row["admitted_e2e_ms"]["p99"], ref["admitted_e2e_ms"] and \
            ref["admitted_e2e_ms"]["p99"]
        row["admitted_p99_over_reference"] = round(p99 / ref99, 2) if p99 and ref99 else None
    return {"params": {"input": OVERLOAD_INPUT, "reference_concurrency": args.reference,
                       "reference_duration_s": args.reference_duration, "levels": levels[1:],
                       "duration_s": args.duration, "timeout_s": args.timeout, "retry_cap_s": args.retry_cap,
                       "max_requests_per_level": args.max_requests, "streamed": "every other request"},
            "levels": rows}


async def _overload_level(lab: ServeLab, concurrency: int, duration: float, args: argparse.Namespace, *,
                          reference: bool) -> dict[str, Any]:
    base = lab.base_url
    outcomes: list[Outcome] = []
    sent = 0
    deadline = time.monotonic() + duration
    rng = random.Random(concurrency)
    sampler = Sampler(lab, 5.0)
    sampler.start()
    load0 = _load_average()

    async def worker(w: int) -> None:
        nonlocal sent
        await asyncio.sleep(rng.random() * min(1.0, duration / 10))  # a ramp, not one burst
        while time.monotonic() < deadline and sent < args.max_requests:
            stream = sent % 2 == 1
            sent += 1
            out = await post_response(client, base, {"model": "sim", "input": OVERLOAD_INPUT, "stream": stream},
                                      timeout_s=args.timeout)
            outcomes.append(out)
            if out.status == 429:
                await asyncio.sleep(min(_retry_after(out), args.retry_cap) * (0.5 + rng.random()))
            elif not out.ok:
                await asyncio.sleep(0.1)

    cost = Cost(lab)
    cost.start()
    started = time.perf_counter()
    async with _client(concurrency) as client:
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
    wall = time.perf_counter() - started
    costs = await cost.stop()
    await sampler.stop()
    admitted = [o for o in outcomes if o.status == 200]
    rejected = [o for o in outcomes if o.status == 429]
    by_status = Counter(str(o.status) if o.status is not None else o.kind for o in outcomes)
    bad_429: Counter[str] = Counter()
    examples: list[dict[str, Any]] = []
    for o in rejected:
        problems = []
        if o.retry_after is None:
            problems.append("no Retry-After")
        else:
            try:
                float(o.retry_after)
            except ValueError:
                problems.append("Retry-After not a number of seconds")
        err = o.error_body or {}
        if err.get("code") != "rate_limit_exceeded":
            problems.append(f"code {err.get('code')!r}")
        if not err.get("message"):
            problems.append("no message")
        if err.get("type") not in ("rate_limit_error", "rate_limit_exceeded", "requests", "tokens"):
            problems.append(f"type {err.get('type')!r}")
        if o.should_retry == "false":
            problems.append("x-should-retry: false")
        for p in problems:
            bad_429[p] += 1
        if problems and len(examples) < 5:
            examples.append({"problems": problems, "retry_after": o.retry_after, "error": o.error_body})
    others = [o for o in outcomes if o.status not in (200, 429) or (o.status == 200 and not o.ok)]
    other_examples = [{"kind": o.kind, "status": o.status, "stream": o.stream, "message": o.message}
                      for o in others[:MAX_EXAMPLES]]
    retry_after_values = Counter(o.retry_after for o in rejected)
    return {
        "concurrency": concurrency, "reference": reference, "duration_s": duration, "wall_s": round(wall, 1),
        "requests": len(outcomes), "by_status": dict(sorted(by_status.items())),
        "admitted": len(admitted), "admitted_ok": sum(1 for o in admitted if o.ok),
        "rejected_429": len(rejected),
        "timeouts": sum(1 for o in outcomes if o.kind == "timeout"),
        "http_5xx": sum(1 for o in outcomes if o.status is not None and o.status >= 500),
        "other_failures": len(others), "other_examples": other_examples,
        "admitted_per_s": round(len(admitted) / wall, 1) if wall else None,
        "rejected_per_s": round(len(rejected) / wall, 1) if wall else None,
        "admitted_e2e_ms": _ms([o.e2e_s for o in admitted if o.ok]),
        "admitted_e2e_ms_plain": _ms([o.e2e_s for o in admitted if o.ok and not o.stream]),
        "admitted_e2e_ms_stream": _ms([o.e2e_s for o in admitted if o.ok and o.stream]),
        "admitted_ttft_ms_stream": _ms([o.ttft_s for o in admitted if o.ok and o.stream and o.ttft_s is not None]),
        "rejected_ms": _ms([o.e2e_s for o in rejected]),
        "all_ms": _ms([o.e2e_s for o in outcomes]),
        "contract_429": {"checked": len(rejected), "problems": dict(bad_429), "examples": examples,
                         "retry_after_values": dict(retry_after_values.most_common(5))},
        "server_cpu_cores": costs["server_cpu_cores"], "cost": costs,
        "load_average": {"start": load0, "end": _load_average()},
        "memory": {k: v for k, v in sampler.brief().items() if k != "series"},
    }


# -- the soak ------------------------------------------------------------------------

SOAK_MIX = (("plain", 0.25), ("stream", 0.25), ("tool", 0.15), ("conversation", 0.20), ("chain", 0.10),
            ("read", 0.05))


async def soak(lab: ServeLab, args: argparse.Namespace) -> dict[str, Any]:
    base = lab.base_url
    await _warm(base)
    tally = Tally()
    window: list[tuple[str, float, bool]] = []
    recent_ids: list[str] = []
    totals = Counter()

    def extra() -> dict[str, Any]:
        done = list(window)
        window.clear()
        ok = [s for _, s, good in done if good]
        summ = summarize(ok)
        return {"requests": len(done), "failed": sum(1 for _, _, good in done if not good),
                "e2e_p50_ms": round(summ.p50 * 1000, 1) if summ else None,
                "e2e_p99_ms": round(summ.p99 * 1000, 1) if summ else None}

    sampler = Sampler(lab, args.sample_every, extra)
    deadline = time.monotonic() + args.duration
    kinds, weights = zip(*SOAK_MIX, strict=True)

    def note(kind: str, seconds: float, good: bool) -> None:
        window.append((kind, seconds, good))
        totals[kind] += 1
        tally.time(kind, seconds)
        if not good:
            totals[f"{kind}:failed"] += 1

    async def worker(w: int) -> None:
        rng = random.Random(1000 + w)
        n = 0
        while time.monotonic() < deadline:
            n += 1
            kind = rng.choices(kinds, weights)[0]
            stream = rng.random() < 0.5
            started = time.perf_counter()
            good = True
            if kind == "plain":
                out = await post_response(client, base, {"model": "sim", "input": "[[tokens 16]]"},
                                          timeout_s=args.timeout)
                good = out.ok and (out.response or {}).get("usage", {}).get("output_tokens") == 16
                if out.ok and out.response_id:
                    recent_ids.append(out.response_id)
                    del recent_ids[:-256]
            elif kind == "stream":
                out = await post_response(client, base, {"model": "sim", "input": "[[latency ttft=20 itl=5]] "
                                                         "[[tokens 32]]", "stream": True}, timeout_s=args.timeout)
                good = out.ok and (out.response or {}).get("usage", {}).get("output_tokens") == 32
            elif kind == "tool":
                out = await post_response(client, base, {"model": "sim", "input": TOOL_INPUT, "stream": stream},
                                          timeout_s=args.timeout)
                types = [item.get("type") for item in (out.response or {}).get("output") or []]
                good = out.ok and types == ["function_call", "function_call_output", "message"] and \
                    "42" in output_text(out.response)
            elif kind == "conversation":
                record = await run_conversation(client, base, w * 1_000_000 + n, tally, timeout_s=args.timeout,
                                                tag="soak", streams=(stream, rng.random() < 0.5), retries=3)
                good = record["ok"]
                out = None
            elif kind == "chain":
                first = f"soak chain {w}-{n} [[say first {w}-{n}]]"
                out = await post_response(client, base, {"model": "sim", "input": first, "stream": stream},
                                          timeout_s=args.timeout)
                if out.ok:
                    second = f"soak chain {w}-{n} [[history]]"
                    out = await post_response(client, base, {"model": "sim", "input": second, "stream": not stream,
                                                             "previous_response_id": out.response_id},
                                              timeout_s=args.timeout)
                    good = out.ok and output_text(out.response) == f"{first} | {second}"
                else:
                    good = False
            else:  # read
                rid = rng.choice(recent_ids) if recent_ids else None
                if rid is None:
                    continue
                k, status, body, _s = await call_json(client, "GET", f"{base}/responses/{rid}", timeout_s=args.timeout)
                good = k == "ok" and isinstance(body, dict) and body.get("id") == rid
                out = None
                if not good:
                    tally.fail("read", k, status=status, message=_msg(body), response_id=rid)
            if out is not None and not good:
                tally.fail(kind, out.kind if not out.ok else "wrong_answer", status=out.status, message=out.message,
                           response_id=out.response_id, got=output_text(out.response)[:200] if out.ok else None)
            if out is not None:
                tally.counts[f"{kind}:{out.status if out.status is not None else out.kind}"] += 1
            note(kind, time.perf_counter() - started, good)

    log(f"soak: c={args.concurrency} for {args.duration:g} s, RSS every {args.sample_every:g} s")
    load0 = _load_average()
    sampler.start()
    cost = Cost(lab)
    cost.start()
    started = time.perf_counter()
    progress = asyncio.create_task(_soak_progress(sampler, args.duration))
    async with _client(args.concurrency) as client:
        await asyncio.gather(*(worker(w) for w in range(args.concurrency)))
    wall = time.perf_counter() - started
    costs = await cost.stop()
    progress.cancel()
    await sampler.stop()
    warmup = args.warmup if args.warmup is not None else min(300.0, args.duration / 4)
    return {
        "params": {"concurrency": args.concurrency, "duration_s": args.duration, "sample_every_s": args.sample_every,
                   "warmup_s": warmup, "timeout_s": args.timeout, "mix": dict(SOAK_MIX),
                   "inputs": {"plain": "[[tokens 16]]", "stream": "[[latency ttft=20 itl=5]] [[tokens 32]]",
                              "tool": TOOL_INPUT + " (half streamed)",
                              "conversation": "create, 2 turns (say, history; each streamed or not), list items",
                              "chain": "2 turns with previous_response_id (say, history)",
                              "read": "GET /v1/responses/{a recent id}"}},
        "wall_s": round(wall, 1),
        "requests": {k: v for k, v in sorted(totals.items())},
        "operations": sum(v for k, v in totals.items() if ":" not in k),
        "failed": sum(v for k, v in totals.items() if k.endswith(":failed")),
        "http_5xx": sum(v for k, v in tally.counts.items() if re.search(r":(5\d\d|http_5\d\d)$", k)),
        "timeouts": sum(v for k, v in tally.counts.items() if k.endswith(":timeout")),
        "counts": dict(sorted(tally.counts.items())),
        "failures": dict(sorted(tally.failures.items())),
        "failure_examples": tally.examples,
        "latency_ms": tally.latency_ms(),
        "load_average": {"start": load0, "end": _load_average()},
        "cost": costs,
        "memory": memory_verdict(sampler.samples, warmup),
        "samples": sampler.samples,
    }


async def _soak_progress(sampler: Sampler, duration: float) -> None:
    while True:
        await asyncio.sleep(60)
        if sampler.samples:
            s = sampler.samples[-1]
            log(f"  soak {s['t_s']:.0f}/{duration:.0f} s: RSS {s['rss_mib']:.0f} MiB, {s['processes']} processes, "
                f"load {s['load_average']}")


def memory_verdict(samples: list[dict[str, Any]], warmup_s: float, *, tolerance: float = 0.02) -> dict[str, Any]:
    """Whether the tree's memory is flat after ``warmup_s``: linear fits (MiB per minute) over
    everything after warm-up and over the second half of the run, max − min after warm-up, for
    the whole tree (RSS and PSS) and for the processes alive in every sample after warm-up.

    "Flat" here: the second half's RSS slope, over an hour, stays under ``tolerance`` (2 %) of the
    mean RSS after warm-up (and under 1 MiB/min for the long-lived processes' sum)."""
    after = [s for s in samples if s["t_s"] >= warmup_s]
    if len(after) < 4:
        return {"warmup_s": warmup_s, "verdict": "too few samples after warm-up", "samples_after_warmup": len(after)}
    end = samples[-1]["t_s"]
    half = [s for s in samples if s["t_s"] >= end / 2]
    common = set.intersection(*({p["pid"] for p in s["per"]} for s in after))

    def series(s: dict[str, Any], metric: str, only_common: bool) -> float:
        if not only_common:
            return s[metric]
        return sum(p[metric] for p in s["per"] if p["pid"] in common)

    def stats(metric: str, only_common: bool) -> dict[str, Any]:
        values = [series(s, metric, only_common) for s in after]
        fit_after = linear_fit([(s["t_s"] / 60, series(s, metric, only_common)) for s in after])
        fit_half = linear_fit([(s["t_s"] / 60, series(s, metric, only_common)) for s in half])
        return {"first_mib": round(values[0], 1), "last_mib": round(values[-1], 1),
                "mean_mib": round(sum(values) / len(values), 1),
                "max_minus_min_mib": round(max(values) - min(values), 1),
                "slope_after_warmup_mib_per_min": round(fit_after["slope"], 3) if fit_after else None,
                "slope_second_half_mib_per_min": round(fit_half["slope"], 3) if fit_half else None,
                "r2_second_half": round(fit_half["r2"], 3) if fit_half else None}

    out: dict[str, Any] = {
        "warmup_s": warmup_s, "samples_after_warmup": len(after), "second_half_from_s": round(end / 2, 1),
        "tree_rss": stats("rss_mib", False), "tree_pss": stats("pss_mib", False),
        "long_lived_rss": {**stats("rss_mib", True), "processes": len(common)},
        "processes_after_warmup": {"min": min(s["processes"] for s in after),
                                   "max": max(s["processes"] for s in after)},
        "db_mib": {"after_warmup": after[0].get("db_mib"), "end": samples[-1].get("db_mib")},
    }
    # Who grew: each long-lived process's RSS, first vs last sample after warm-up.
    first = {p["pid"]: p for p in after[0]["per"]}
    last = {p["pid"]: p for p in after[-1]["per"]}
    growth = sorted(({"pid": pid, "process": last[pid]["process"], "first_mib": first[pid]["rss_mib"],
                      "last_mib": last[pid]["rss_mib"], "change_mib": round(last[pid]["rss_mib"] - first[pid]["rss_mib"], 1)}
                     for pid in common), key=lambda g: -abs(g["change_mib"]))
    out["per_process_change"] = growth[:12]
    tree, lived = out["tree_rss"], out["long_lived_rss"]
    slope = tree["slope_second_half_mib_per_min"]
    flat_tree = slope is not None and slope * 60 <= tolerance * tree["mean_mib"]
    flat_lived = lived["slope_second_half_mib_per_min"] is not None and lived["slope_second_half_mib_per_min"] <= 1.0
    out["criterion"] = (f"second-half RSS slope × 60 min ≤ {tolerance:.0%} of the mean RSS after warm-up "
                        "(whole tree), and ≤ 1 MiB/min for the long-lived processes' sum")
    out["flat"] = bool(flat_tree and flat_lived)
    out["verdict"] = "flat after warm-up" if out["flat"] else "NOT flat after warm-up"
    return out


# -- the command line ----------------------------------------------------------------

RUNS: dict[str, Callable[[ServeLab, argparse.Namespace], Awaitable[dict[str, Any]]]] = {
    "conversations": conversations, "overload": overload, "soak": soak,
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.load", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--smoke", action="store_true",
                        help="a smoke test of the harness: results go to benchmarks/scratch/results/load")
    common.add_argument("--out-dir", help="where the results go (default: benchmarks/results/load)")
    common.add_argument("--scratch", default=SCRATCH, help="logs and the DuckDB file (default: benchmarks/scratch)")
    common.add_argument("--suffix", default="", help="appended to the results' file name, e.g. -t300")
    common.add_argument("--config", help="a TOML file for troupe serve --config (default: none, the embedded "
                                         "defaults as with `make run`)")
    common.add_argument("--url", help="drive this running server (…/v1) instead of starting troupe serve")
    common.add_argument("--server-pid", type=int, help="with --url: the server's pid, for RSS and CPU")
    common.add_argument("--timeout", type=float, default=60.0, help="client time-out per request, s (default 60)")
    sub = parser.add_subparsers(dest="run", required=True)
    conv = sub.add_parser("conversations", parents=[common], help="N concurrent conversations x 2 turns")
    conv.add_argument("--conversations", type=int, default=1000)
    conv.add_argument("--concurrency", type=int, default=1000, help="conversations in flight at once")
    conv.add_argument("--retries", type=int, default=10,
                      help="a turn answered 429 is sent again after Retry-After (with jitter), at most this often")
    over = sub.add_parser("overload", parents=[common], help="far past capacity: 429s, no time-outs, bounded p99")
    over.add_argument("--levels", default="512,1000", help="concurrencies past capacity (default 512,1000)")
    over.add_argument("--duration", type=float, default=60.0, help="seconds per level (default 60)")
    over.add_argument("--reference", type=int, default=16, help="the reference level's concurrency (default 16)")
    over.add_argument("--reference-duration", type=float, default=20.0)
    over.add_argument("--max-requests", type=int, default=50_000, help="cap of requests per level")
    over.add_argument("--retry-cap", type=float, default=1.0,
                      help="a rejected client waits min(Retry-After, this) × U(0.5, 1.5) s (default 1)")
    over.add_argument("--pause", type=float, default=5.0, help="seconds between levels")
    soak_p = sub.add_parser("soak", parents=[common], help="c=32 mixed traffic with the server's RSS sampled")
    soak_p.add_argument("--duration", type=float, default=1800.0, help="seconds (default 1800)")
    soak_p.add_argument("--concurrency", type=int, default=32)
    soak_p.add_argument("--sample-every", type=float, default=10.0, help="RSS sample period, s (default 10)")
    soak_p.add_argument("--warmup", type=float, help="seconds before memory must be flat (default min(300, duration/4))")
    return parser


def _command(argv: list[str]) -> str:
    return ".venv/bin/python -m benchmarks.load " + " ".join(argv)


class _External(ServeLab):
    """A server the user runs: nothing is started or stopped."""

    def attach(self, url: str, pid: int | None) -> None:
        self.base_url = url.rstrip("/")
        if pid is not None:
            self.serve = Proc(name="external", popen=_Attached(pid), log_path="")  # type: ignore[arg-type]

    def close(self) -> None:
        self.serve = None


class _Attached:
    def __init__(self, pid: int) -> None:
        self.pid = pid


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds, so the server is stopped
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    started_at = datetime.datetime.now(datetime.UTC)
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "run": args.run,
        "created_at": started_at.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "commit": commit,
        "worktree_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "smoke": args.smoke,
        "machine": machine_info(),
        "command": _command(argv),
    }
    wall = time.perf_counter()
    lab: ServeLab = _External(scratch=args.scratch, peers=False) if args.url else ServeLab(scratch=args.scratch,
                                                                                           peers=False)
    records: list[dict[str, Any]] | None = None
    try:
        if args.url:
            lab.attach(args.url, args.server_pid)  # type: ignore[attr-defined]
            doc["server"] = {"how": f"given: {args.url}", "pid": args.server_pid}
        else:
            log("starting troupe serve (a fresh local Ray instance, the embedded defaults)")
            t0 = time.perf_counter()
            lab.start_serve(config=args.config)
            doc["server"] = {"how": ("troupe serve on its embedded defaults (as `make run`)" if not args.config else
                                     f"troupe serve with {args.config}") + ", on a free port of 127.0.0.1, "
                                    "TROUPE_STORAGE_PATH a fresh file",
                             "config": None if not args.config else open(args.config, encoding="utf-8").read(),
                             "argv": [os.path.basename(lab.argv[0]), *lab.argv[1:]],
                             "start_s": round(time.perf_counter() - t0, 1),
                             "log": os.path.relpath(lab.serve.log_path, ROOT) if lab.serve else None}
            lab.remember_tree()
        doc["machine"]["load_average_before_run"] = _load_average()
        result = run_async(RUNS[args.run](lab, args))
        records = result.pop("_records", None)
        doc["result"] = result
        if lab.serve is not None and lab.serve.log_path:
            doc["server_logs"] = scan_logs(server_logs(lab))
            doc["server"]["processes_at_end"] = tree_memory(lab.serve)["processes"]
    finally:
        log("stopping the server")
        lab.close()
    if not args.url:
        doc["server"]["leftover_processes_after_stop"] = lab.leftovers
        if records is not None and lab.db_path:
            log("reading the DuckDB file")
            doc["result"]["duckdb"] = duckdb_check(lab.db_path, records)
    doc["wall_s"] = round(time.perf_counter() - wall, 1)
    doc["machine"]["load_average_after_run"] = _load_average()
    out_dir = args.out_dir or (os.path.join(args.scratch, "results", "load") if args.smoke else RESULTS_DIR)
    from .load_report import write_load_results

    name = f"{started_at:%Y-%m-%d}-{commit}-load-{args.run}" + args.suffix + ("-smoke" if args.smoke else "")
    paths = write_load_results(doc, out_dir, name)
    log("wrote " + ", ".join(os.path.relpath(p, ROOT) if p.startswith(ROOT) else p for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
