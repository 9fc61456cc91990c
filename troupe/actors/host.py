"""The conversation host: the I/O shell around the pure agent loop.

A :class:`ConversationHost` hosts one conversation (dedicated placement) or
many (pooled placement). Per conversation it owns the *message cache* (the
thread's client transcript, from which the loop's canonical transcript and the
upstream messages are rebuilt) and runs that conversation's turns one after
another: a second request to a busy conversation waits for the first. Different
conversations run concurrently.

It is a plain class: ``troupe.actors.placement`` wraps it with ``ray.remote`` in
one place, and the in-process runtime uses it as it is.

On a cache miss (a new host, a restart, an evicted thread) it rebuilds the
thread from storage: the conversation's items, or the ``previous_response_id``
chain. A finished response is made durable in storage (its journal) *before* its
terminal event is released, so a client that saw ``response.completed`` can
always retrieve the response.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from troupe.agentloop.driver import LoopSettings, prepare, run_loop
from troupe.agentloop.events import StepTraced
from troupe.agentloop.mcp import McpClient, McpServer
from troupe.agentloop.tools import ToolExecutor
from troupe.agentloop.writer import WireWriter
from troupe.protocol import (
    CreateResponseRequest,
    conversation_not_found,
    model_not_found,
    previous_response_not_found,
)
from troupe.storage import ResponseRecord, StepTrace

from .mcp_policy import resolve_mcp_tool
from .models import ModelRegistry
from .settings import RuntimeSettings
from .store_client import StoreClient

__all__ = ["TurnJob", "ConversationHost", "HostClient", "coalesce", "DELTA_TYPES"]

T = TypeVar("T")

DELTA_TYPES = frozenset(
    {"response.output_text.delta", "response.reasoning_text.delta", "response.function_call_arguments.delta"}
)
"""The wire events whose first one marks a response's time to first token."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnJob:
    """One response to run; picklable, it crosses the ingress → host hop."""

    tenant: str
    request: CreateResponseRequest
    response_id: str
    created_at: int
    thread_id: str
    """The conversation id, the chain's thread id, or a fresh one."""


class HostClient(Protocol):
    """How the runtime talks to a host, in-process or through a Ray actor handle."""

    def respond(self, job: TurnJob, *, stream: bool = True) -> AsyncIterator[list[dict[str, Any]]]: ...

    async def add_conversation_items(
        self, tenant: str, conversation_id: str, items: list[dict[str, Any]]
    ) -> list[dict[str, Any]] | None: ...

    async def delete_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> bool: ...

    async def delete_conversation(self, tenant: str, conversation_id: str) -> bool: ...


@dataclass(slots=True)
class _Thread:
    """One conversation's message cache and turn lock."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    history: list[dict[str, Any]] | None = None
    """The thread's client items, oldest first; None until loaded."""
    tip: str | None = None
    """For a previous_response_id chain: the response the history ends with."""


class ConversationHost:
    """Runs turns for the conversations placed on it.

    Args:
        settings: the runtime settings (models, limits, batching).
        store: the storage client (group-committing writes).
        executors: the server-side tool executors.
    """

    def __init__(
        self,
        settings: RuntimeSettings,
        *,
        store: StoreClient,
        executors: Sequence[ToolExecutor] = (),
        mcp_client: McpClient | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.executors = list(executors)
        self.mcp_client = mcp_client
        self.models = ModelRegistry(settings.models)
        self.loop_settings = LoopSettings(client_tool_status=settings.client_tool_status)
        self._threads: OrderedDict[tuple[str, str], _Thread] = OrderedDict()
        self.last_active = time.monotonic()
        self.running = 0
        """Turns in progress (the dedicated placement's idle check reads it)."""

    # -- the message cache -------------------------------------------------------

    def _thread(self, tenant: str, thread_id: str) -> _Thread:
        key = (tenant, thread_id)
        thread = self._threads.get(key)
        if thread is None:
            thread = self._threads[key] = _Thread()
        self._threads.move_to_end(key)
        excess = len(self._threads) - self.settings.cache_size
        if excess > 0:
            # Drop the least recently used idle threads; a running turn's thread is never dropped.
            idle = (k for k, t in self._threads.items() if k != key and not t.lock.locked())
            for old_key in list(itertools.islice(idle, excess)):
                del self._threads[old_key]
        return thread

    def forget_thread(self, tenant: str, thread_id: str) -> None:
        """Drop a thread's message cache (a thread that will never be continued)."""
        self._threads.pop((tenant, thread_id), None)

    async def _history(self, job: TurnJob, thread: _Thread) -> list[dict[str, Any]]:
        request, tenant = job.request, job.tenant
        if request.conversation_id is not None:
            if thread.history is None:
                items = await self.store.conversation_items(tenant, request.conversation_id)
                if items is None:
                    raise conversation_not_found(request.conversation_id)
                thread.history = items
            return thread.history
        if request.previous_response_id is not None:
            if thread.history is None or thread.tip != request.previous_response_id:
                items = await self.store.chain_items(tenant, request.previous_response_id)
                if items is None:
                    raise previous_response_not_found(request.previous_response_id)
                thread.history, thread.tip = items, request.previous_response_id
            return thread.history
        return []

    # -- a turn ------------------------------------------------------------------

    async def respond(self, job: TurnJob, *, stream: bool = True) -> AsyncIterator[list[dict[str, Any]]]:
        """Run one response; yields its wire events in batches.

        With ``stream`` each batch holds what the turn produced since the caller took the
        previous one (see :func:`coalesce`); without it only two batches come: the first
        (the turn has started) and the terminal one, which is all a non-streaming caller needs.

        Raises (before the first batch): InvalidRequest / NotFound for input that
        does not fit the thread.
        """
        thread = self._thread(job.tenant, job.thread_id)
        async with thread.lock:  # turns of one conversation never interleave
            self.running += 1
            try:
                async with contextlib.aclosing(coalesce(self._run_turn(job, thread, stream=stream))) as batches:
                    async for batch in batches:
                        yield batch
            finally:
                self.running -= 1
                self.last_active = time.monotonic()

    async def _run_turn(self, job: TurnJob, thread: _Thread, *, stream: bool) -> AsyncIterator[list[dict[str, Any]]]:
        started = time.time()
        request = job.request
        spec = self.settings.model(request.model)
        if spec is None:
            raise model_not_found(request.model)
        servers = self._mcp_servers(request)
        history = await self._history(job, thread)
        prepared = prepare(request, history, self.executors, mcp_client=self.mcp_client, mcp_servers=servers)
        writer = WireWriter(
            request, response_id=job.response_id, created_at=job.created_at, conversation_id=request.conversation_id
        )
        events = run_loop(
            prepared,
            model=self.models.client(spec),
            executors=self.executors,
            settings=self.loop_settings,
            upstream_model=spec.upstream_model or spec.name,
        )
        traces: list[StepTrace] = []
        ttft_s: float | None = None
        started_sent = False
        async with contextlib.aclosing(events):
            async for event in events:
                if isinstance(event, StepTraced):
                    traces.append(_trace(job.response_id, len(traces), event))
                    continue
                wire = writer.write(event)
                if writer.finished:
                    # Durable before the client hears it is done.
                    await self._finish(
                        job, thread, history, prepared.input_items, writer.response, started, ttft_s, traces
                    )
                    yield wire
                    return
                if ttft_s is None and any(e["type"] in DELTA_TYPES for e in wire):
                    ttft_s = time.time() - started
                if stream or not started_sent:
                    started_sent = True
                    yield wire

    def _mcp_servers(self, request: CreateResponseRequest) -> list[McpServer]:
        """The request's ``mcp`` tools, resolved (configured labels, secrets) and checked (URL policy).

        Raises:
            InvalidRequest: a server this deployment may not reach, or an unknown label.
        """
        if self.mcp_client is None:
            return []
        servers = []
        for index, tool in enumerate(request.tools):
            if tool.get("type") == "mcp":
                server = resolve_mcp_tool(tool, self.settings, index)
                self.mcp_client.check_server(server, index)
                servers.append(server)
        return servers

    async def _finish(
        self,
        job: TurnJob,
        thread: _Thread,
        history: list[dict[str, Any]],
        input_items: list[dict[str, Any]],
        response: dict[str, Any],
        started: float,
        ttft_s: float | None,
        traces: list[StepTrace],
    ) -> None:
        if not job.request.store or response["status"] == "cancelled":
            return  # nothing written, and the cache still matches storage
        in_conversation = job.request.conversation_id is not None
        appended = response["status"] != "failed"  # a failed turn does not become conversation history
        record = ResponseRecord(
            tenant=job.tenant,
            response=response,
            input_items=input_items,
            thread_id=job.thread_id,
            started_at=started,
            ended_at=time.time(),
            ttft_s=ttft_s,
            traces=traces,
            append_to_conversation=appended,
        )
        await self.store.write_response(record)
        if not in_conversation:
            thread.history, thread.tip = history + input_items + response["output"], response["id"]
        elif appended:
            thread.history = history + input_items + response["output"]

    # -- conversation item writes (serialized with the conversation's turns) ------

    async def add_conversation_items(
        self, tenant: str, conversation_id: str, items: list[dict[str, Any]]
    ) -> list[dict[str, Any]] | None:
        thread = self._thread(tenant, conversation_id)
        async with thread.lock:
            if not await self.store.add_conversation_items(tenant, conversation_id, items):
                return None
            if thread.history is not None:
                thread.history = thread.history + items
            return items

    async def delete_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> bool:
        thread = self._thread(tenant, conversation_id)
        async with thread.lock:
            thread.history = None  # reload on the next turn
            return await self.store.delete_conversation_item(tenant, conversation_id, item_id)

    async def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        thread = self._thread(tenant, conversation_id)
        async with thread.lock:
            thread.history = None
            return await self.store.delete_conversation(tenant, conversation_id)

    async def warm(self) -> None:
        """Get ready for the first turn: the model clients and their connections."""
        await self.models.warm()

    async def close(self) -> None:
        await self.models.close()
        if self.mcp_client is not None:
            await self.mcp_client.close()


MAX_PENDING_EVENTS = 4096
"""Events a turn may make ahead of its consumer before it waits for it (a stalled client's bound)."""


async def coalesce(batches: AsyncIterator[list[T]], *, max_pending: int = MAX_PENDING_EVENTS) -> AsyncIterator[list[T]]:
    """Re-batch a stream so each batch holds everything made since the consumer took the last one.

    Nagle's rule for event streams: a consumer that keeps up gets every batch the moment it is
    made (no added latency, true inter-token gaps); one that falls behind (a loaded ingress,
    a slow hop) gets what piled up meanwhile in one piece, so the cost per hop is paid once per
    batch rather than once per event, and bigger batches come exactly when they help.

    The source runs ahead in its own task, but no further than ``max_pending`` events: past
    that it waits until the consumer takes them, so a consumer that stops taking (a client
    that stops reading) holds at most that many events, not the whole response. Its
    exception, if any, is raised here after the batches it made before it. Closing this
    generator cancels the source and waits for it.
    """
    pending: list[T] = []
    made = asyncio.Event()
    taken = asyncio.Event()

    async def pump() -> None:
        async with contextlib.aclosing(batches):
            async for batch in batches:
                pending.extend(batch)
                made.set()
                while len(pending) >= max_pending:
                    taken.clear()
                    await taken.wait()

    task = asyncio.create_task(pump())
    task.add_done_callback(lambda _: made.set())
    try:
        while True:
            if not pending and not task.done():
                await made.wait()
                made.clear()
            if pending:
                out = pending[:]
                pending.clear()
                taken.set()
                yield out
            elif task.done():
                task.result()  # the source's error, after everything it made before it
                return
    finally:
        if not task.done():
            task.cancel()
        await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # retrieved (and raised above when it mattered): no "never retrieved" log


def _trace(response_id: str, seq: int, event: StepTraced) -> StepTrace:
    return StepTrace(
        response_id=response_id,
        seq=seq,
        kind=event.kind,
        name=event.name,
        started_at=event.started_at,
        duration_s=event.ended_at - event.started_at,
        call_id=event.call_id,
        ttft_s=event.ttft_s,
        input_tokens=event.input_tokens,
        output_tokens=event.output_tokens,
        error=event.error,
    )
