"""Hooks: code that subscribes to the agent loop's events, off the loop's path.

An embedding application or an eval grader registers a *hook*, a function of one
:data:`HookEvent`, and gets every event of every turn run in the processes it is registered
in: a turn started, a model call started or ended, a tool call started or ended, an approval
requested, a response finished, each with the step's data (timings, tokens, arguments,
output, the final Response).

Two ways to register one:

* in the configuration, by import path: ``[telemetry] hooks = ["mypackage.graders:on_event"]``;
  every process that runs turns (hosts, eval workers, the ingress replica) imports it;
* in code, for the hosts of this process (``Runtime.local``, or the ``replica`` placement
  embedded in your own Serve app): :func:`add_hook`.

A hook runs on a thread of its own with a bounded queue (``hook_queue_size``): the loop only
puts the event in the queue. A slow hook falls behind and, once its queue is full, misses
events (counted in ``troupe_hook_events_dropped_total``); a hook that raises is logged and
counted (``troupe_hook_errors_total``) and gets the next event. Neither delays nor fails a
response. An ``async`` hook is awaited on the hook's thread's own event loop. Events reach a
hook in the order they happened within a turn; hooks in different processes see their own
processes' turns.

Example::

    from troupe.observe import add_hook, ToolCallEnded

    def on_event(event):
        if isinstance(event, ToolCallEnded) and event.error:
            print("tool failed:", event.name, event.error)

    remove = add_hook(on_event)
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import logging
import queue
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "TurnStarted",
    "ModelCallStarted",
    "ModelCallEnded",
    "ToolCallStarted",
    "ToolCallEnded",
    "ApprovalRequested",
    "ResponseFinished",
    "HookEvent",
    "Hook",
    "HookBus",
    "HOOKS",
    "add_hook",
    "import_hook",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnStarted:
    """A turn has its conversation's turn and starts its loop."""

    type: Literal["turn.started"] = "turn.started"
    response_id: str
    tenant: str
    thread_id: str
    """The conversation id, the chain's thread id, or a fresh one."""
    model: str
    stream: bool
    background: bool
    at: float
    """Unix seconds."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCallStarted:
    type: Literal["model_call.started"] = "model_call.started"
    response_id: str
    model: str
    """The model name sent upstream."""
    at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCallEnded:
    type: Literal["model_call.ended"] = "model_call.ended"
    response_id: str
    model: str
    started_at: float
    ended_at: float
    ttft_s: float | None
    input_tokens: int
    output_tokens: int
    error: str | None
    """The failure's message; None when the call succeeded."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallStarted:
    type: Literal["tool_call.started"] = "tool_call.started"
    response_id: str
    name: str
    call_id: str | None
    arguments: str | None
    """The JSON arguments the model gave."""
    server: str | None
    """An MCP call's server label; None for a server-side Python tool."""
    at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallEnded:
    type: Literal["tool_call.ended"] = "tool_call.ended"
    response_id: str
    name: str
    call_id: str | None
    server: str | None
    started_at: float
    ended_at: float
    output: str | None
    """What the model is shown (an error's text too); None for a call cut short by a cancel."""
    error: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequested:
    """An MCP call waits for approval: its response ends with this ``mcp_approval_request``."""

    type: Literal["approval.requested"] = "approval.requested"
    response_id: str
    approval_request_id: str
    server: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseFinished:
    """The response ended (stored when it is to be stored)."""

    type: Literal["response.finished"] = "response.finished"
    response_id: str
    status: str
    """completed, incomplete, failed, cancelled, requires_action; ``disconnected``: the client
    went away before it ended (``response`` is then the Response as it stood)."""
    response: dict[str, Any]
    """The final Response object (read it, do not change it)."""
    started_at: float
    ended_at: float
    ttft_s: float | None


HookEvent = (
    TurnStarted | ModelCallStarted | ModelCallEnded | ToolCallStarted | ToolCallEnded | ApprovalRequested | ResponseFinished
)
Hook = Callable[[HookEvent], None | Awaitable[None]]

_STOP = object()


class _Runner:
    """One hook: its queue and its thread (started with the first event)."""

    def __init__(self, hook: Hook, name: str, queue_size: int) -> None:
        self.hook = hook
        self.name = name
        self.queue: queue.Queue[Any] = queue.Queue(queue_size)
        self.dropped = 0
        self.errors = 0
        self.delivered = 0
        self.closed = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def offer(self, event: HookEvent) -> None:
        if self._thread is None:
            self._start()
        try:
            self.queue.put_nowait(event)
        except queue.Full:
            self.dropped += 1

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"troupe-hook-{self.name}", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        """Stop once what is queued is delivered (never waits: a blocked hook's thread stays blocked)."""
        self.closed = True
        if self._thread is not None:
            with contextlib.suppress(queue.Full):
                self.queue.put_nowait(_STOP)  # a full queue: the thread stops once it is empty

    def _run(self) -> None:
        loop: asyncio.AbstractEventLoop | None = None
        while (event := self.queue.get()) is not _STOP:
            try:
                result = self.hook(event)
                if inspect.isawaitable(result):
                    loop = loop or asyncio.new_event_loop()
                    loop.run_until_complete(result)
            except Exception:  # noqa: BLE001 - a hook's failure is its own
                self.errors += 1
                if self.errors == 1 or self.errors % 1000 == 0:
                    log.exception("hook %s failed (%d failures so far)", self.name, self.errors)
            self.delivered += 1
            if self.closed and self.queue.empty():
                break
        if loop is not None:
            loop.close()


class HookBus:
    """The hooks of one process: each event goes to every hook's queue."""

    def __init__(self) -> None:
        self._runners: tuple[_Runner, ...] = ()
        self._paths: set[str] = set()
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        """Whether any hook listens (no events are built otherwise)."""
        return bool(self._runners)

    def emit(self, event: HookEvent) -> None:
        for runner in self._runners:
            runner.offer(event)

    def add(self, hook: Hook, *, name: str | None = None, queue_size: int = 1024) -> Callable[[], None]:
        """Subscribe ``hook``; returns the function that unsubscribes it (after the events queued for it)."""
        name = name or getattr(hook, "__qualname__", None) or repr(hook)
        runner = _Runner(hook, name, queue_size)
        with self._lock:
            self._runners = (*self._runners, runner)
        from .metrics import process_registry

        registry = process_registry()
        unwatch = [
            registry.counter("troupe_hook_events_dropped_total").watch((name,), lambda: runner.dropped),
            registry.counter("troupe_hook_errors_total").watch((name,), lambda: runner.errors),
        ]

        def remove() -> None:
            with self._lock:
                self._runners = tuple(r for r in self._runners if r is not runner)
            runner.stop()
            for stop in unwatch:
                stop()

        return remove

    def load(self, paths: tuple[str, ...], *, queue_size: int = 1024) -> None:
        """Subscribe the hooks named by import path (``module:function``), each once per process.

        Raises:
            ImportError, AttributeError: a path that names nothing importable.
        """
        for path in paths:
            with self._lock:
                if path in self._paths:
                    continue
                self._paths.add(path)
            self.add(import_hook(path), name=path, queue_size=queue_size)


def import_hook(path: str) -> Hook:
    """The function ``package.module:function`` names."""
    module, _, name = path.partition(":")
    hook = getattr(importlib.import_module(module), name)
    if not callable(hook):
        raise TypeError(f"hook {path!r} is not callable")
    return hook


HOOKS = HookBus()
"""This process's hooks."""


def add_hook(hook: Hook, *, queue_size: int = 1024) -> Callable[[], None]:
    """Subscribe ``hook`` to the loop events of every turn run in this process; returns the
    function that unsubscribes it. See the module docstring."""
    return HOOKS.add(hook, queue_size=queue_size)
