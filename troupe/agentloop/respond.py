"""One call: a request, a model and tools in; the response, or its stream, out.

:func:`create_response` and :func:`stream_response` run the whole agent loop in-process, with no
Ray, storage or web server: they validate the request (:func:`~troupe.protocol.parse_create_request`),
:func:`~troupe.agentloop.driver.prepare` it, :func:`~troupe.agentloop.driver.run_loop` it and
frame its events with a :class:`~troupe.agentloop.writer.WireWriter`. Use those three directly
for what these do not offer (the loop's own events and step traces, checkpoints, MCP servers,
``file_search``, ``code_interpreter``, a ``shell`` tool run in containers; its local environment,
whose commands the caller runs, is served here).

Nothing is stored, so ``previous_response_id`` and ``conversation`` are refused; pass the earlier
items as ``history`` instead (a previous response's ``output`` after its input, say).

Example::

    response = await create_response({"model": "sim", "input": "[[say hi]]"}, SimModel())
    async for event in stream_response(request, model, tools={"add": lambda a, b: a + b}): ...
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from troupe.protocol import CreateResponseRequest, InvalidRequest, new_id, parse_create_request

from .driver import LoopSettings, prepare, run_loop
from .model import ModelClient
from .tools import LocalFunctionExecutor, ToolExecutor
from .writer import WireWriter, collect_response

__all__ = ["create_response", "stream_response", "Tools"]

Tools = Sequence[ToolExecutor] | Mapping[str, Callable[..., Any]]
"""Server-side tools: executors, in priority order, or a mapping of tool name → Python callable
taking the call's JSON arguments as keywords (run by a :class:`~.tools.LocalFunctionExecutor`)."""


async def create_response(
    request: CreateResponseRequest | Mapping[str, Any],
    model: ModelClient,
    tools: Tools = (),
    *,
    history: Sequence[dict[str, Any]] = (),
    settings: LoopSettings = LoopSettings(),
    context_window: int | None = None,
) -> dict[str, Any]:
    """Run the agent loop for ``request`` to its end; the final Response (a dict, as the API returns it).

    Args:
        request: a ``POST /v1/responses`` body, or one already validated.
        model: the model client (``SimModel()``, ``OpenAIChatClient(url)``, your own :class:`ModelClient`).
        tools: the server-side tools (:data:`Tools`); the request's own ``function`` tools that
            none of them runs are returned to the caller as ``function_call`` items.
        history: the thread's earlier items, oldest first.
        settings: loop behaviour (:class:`~troupe.agentloop.driver.LoopSettings`).
        context_window: the model's context window in estimated tokens; None: not checked.

    Raises:
        InvalidRequest: the request is not valid, or asks for what needs Troupe's server
            (``previous_response_id``, ``conversation``, a stored ``prompt``, MCP,
            ``file_search`` or ``code_interpreter`` tools, a ``shell`` tool's container environment). A model or tool failure is no exception: the Response
            says it (``status: failed``, or the tool's error given to the model).
    """
    writer, events = _start(request, model, tools, history, settings, context_window)
    async with contextlib.aclosing(events):
        return await collect_response(events, writer)


async def stream_response(
    request: CreateResponseRequest | Mapping[str, Any],
    model: ModelClient,
    tools: Tools = (),
    *,
    history: Sequence[dict[str, Any]] = (),
    settings: LoopSettings = LoopSettings(),
    context_window: int | None = None,
    cancel: asyncio.Event | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """Run the agent loop for ``request``, yielding its Responses stream events as they happen.

    Each event is a dict shaped as the API streams it (``encode_sse`` frames it); the last one
    is terminal (``response.completed``, ``.incomplete`` or ``.failed``) and the final Response
    is its ``response``. Arguments as :func:`create_response`, and ``cancel``: set it to stop
    the loop at its next boundary; the stream then just ends (the API has no cancelled event).

    Raises:
        InvalidRequest: as :func:`create_response`, before the first event.
    """
    writer, events = _start(request, model, tools, history, settings, context_window, cancel)
    async with contextlib.aclosing(events):
        async for event in events:
            for wire_event in writer.write(event):
                yield wire_event


def _start(
    body: CreateResponseRequest | Mapping[str, Any],
    model: ModelClient,
    tools: Tools,
    history: Sequence[dict[str, Any]],
    settings: LoopSettings,
    context_window: int | None,
    cancel: asyncio.Event | None = None,
) -> tuple[WireWriter, AsyncGenerator[Any, None]]:
    request = body if isinstance(body, CreateResponseRequest) else parse_create_request(dict(body))
    for param in ("previous_response_id", "conversation"):
        if getattr(request, param) is not None:
            raise InvalidRequest(
                f"'{param}' needs Troupe's server, which stores responses: pass the earlier items as 'history'.",
                param=param,
                code="unsupported_parameter",
            )
    executors = [LocalFunctionExecutor(dict(tools))] if isinstance(tools, Mapping) else list(tools)
    writer = WireWriter(request, response_id=new_id("resp"), created_at=int(time.time()))
    events = run_loop(
        prepare(request, history, executors),
        model=model,
        executors=executors,
        settings=settings,
        cancel=cancel,
        context_window=context_window,
    )
    return writer, events
