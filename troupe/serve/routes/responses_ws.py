"""WebSocket mode on ``/v1/responses``: one connection for a whole agent session.

Route::

    GET (WebSocket)  /v1/responses   ``response.create`` events in; the response's events out

The ``openai`` SDK's ``client.responses.connect()`` is the client. The upgrade request is
authenticated as an HTTP request is (its bearer key); a refused one gets the HTTP error
(401, or 429 past the tenant's streams) instead of a socket. On the socket:

* ``{"type": "response.create", ...}`` carries the body of ``POST /v1/responses`` (``stream``
  is implicit; ``background`` is refused, as OpenAI refuses it there), validated the same way.
  Its events come back as the SSE stream's, one message each, in order. A bad event is answered
  by an ``error`` event (``status``, and OpenAI's error body naming the parameter), and the
  connection stays open.
* ``stream_id`` names a lane: a lane's responses run one after another, in the order sent, and
  their events carry its ``stream_id``; lanes run side by side. Without it, the one default lane.
* A continuation sends only its new input with ``previous_response_id``. A stored response's
  thread is its host's, as over HTTP; one made with ``store: false`` on this connection is
  remembered by the connection (its last 64), so that a continuation of it works here, as
  OpenAI allows on a socket, with the whole thread sent to the model.
* The connection closes after ``websocket_idle_timeout_s`` with no message and nothing running.
  When it closes (or drops), the responses still running on it are cancelled and store
  nothing, as an SSE stream's turn is when its client leaves: nobody is left to read them. Use
  ``background`` over HTTP for a run that must outlive its client.

Not yet: ``response.steer`` (answered with ``response.steer.failed``), which issue 32 adds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import OrderedDict
from typing import Any

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse

from troupe.protocol import InvalidRequest, ProtocolError, decode_json_body, parse_create_request
from troupe.protocol.errors import ServerError

from ..dependencies import AppContext, authenticate, context

__all__ = ["router"]

router = APIRouter()

REMEMBERED = 64
"""How many ``store: false`` responses a connection remembers for continuations."""

_FINAL = frozenset({"response.completed", "response.failed", "response.incomplete", "response.cancelled"})


@router.websocket("/v1/responses")
async def responses_socket(websocket: WebSocket) -> None:
    app = context(websocket)
    try:
        who = authenticate(websocket)
        close_slot = app.tenant_limits.open_stream(who)
    except ProtocolError as exc:
        await _refuse(websocket, exc)
        return
    try:
        await websocket.accept()
        await _Connection(app, who, websocket).serve()
    finally:
        close_slot()


async def _refuse(websocket: WebSocket, exc: ProtocolError) -> None:
    """The upgrade refused with the HTTP error, where the server can send one; else closed (1008)."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(JSONResponse(exc.to_body(), status_code=exc.status))
    else:
        await websocket.close(code=1008, reason=exc.message[:120])


class _Connection:
    """One socket: its lanes, what it remembers, and one writer at a time."""

    def __init__(self, app: AppContext, who: str, websocket: WebSocket) -> None:
        self.app, self.who, self.websocket = app, who, websocket
        self.lanes: dict[str | None, asyncio.Queue[dict[str, Any]]] = {}
        self.workers: list[asyncio.Task[None]] = []
        self.running = 0
        self.sending = asyncio.Lock()
        self.unstored: OrderedDict[str, tuple[str | None, list[Any]]] = OrderedDict()
        """A ``store: false`` response's id → the ``previous_response_id`` it continued (a stored
        one, or None) and its thread since then (input and output items)."""

    async def serve(self) -> None:
        settings = self.app.settings
        try:
            while True:
                try:
                    message = await asyncio.wait_for(self.websocket.receive(), settings.websocket_idle_timeout_s)
                except TimeoutError:
                    if self.running or any(not q.empty() for q in self.lanes.values()):
                        continue
                    await self.websocket.close(code=1000, reason="idle")
                    return
                if message["type"] == "websocket.disconnect":
                    return
                await self._receive(message.get("text") or (message.get("bytes") or b"").decode("utf-8", "replace"))
        except WebSocketDisconnect:
            return
        finally:
            for worker in self.workers:  # cancelled with the connection, as a left SSE stream's turn is
                worker.cancel()
            for worker in self.workers:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await worker

    async def _receive(self, text: str) -> None:
        limit = self.app.settings.max_body_bytes
        try:
            if len(text) > limit:
                raise InvalidRequest(f"The event is larger than {limit} bytes.", code="message_too_large")
            event = decode_json_body(text, max_depth=self.app.settings.max_json_depth)
            if not isinstance(event, dict):
                raise InvalidRequest("An event must be a JSON object.", code="invalid_type")
            kind = event.get("type")
            lane = event.get("stream_id")
            if lane is not None and not isinstance(lane, str):
                raise InvalidRequest("'stream_id' must be a string.", param="stream_id", code="invalid_type")
        except ProtocolError as exc:
            await self._error(exc, None)
            return
        if kind == "response.create":
            await self._lane(lane).put(event)
        elif kind == "response.steer":
            await self._send({"type": "response.steer.failed", "previous_response_id": event.get("previous_response_id"),
                              "input": event.get("input"), "error": {"code": "unsupported", "message":
                              "Steering is not served yet: send the input with response.create once the response ends."}})  # fmt: skip
        else:
            shown = kind if isinstance(kind, str) else json.dumps(kind)
            await self._error(InvalidRequest(f"Invalid value for 'type': {shown!r} is not an event this socket takes "
                                             "('response.create').", param="type", code="invalid_value"), lane)  # fmt: skip

    def _lane(self, lane: str | None) -> asyncio.Queue[dict[str, Any]]:
        queue = self.lanes.get(lane)
        if queue is None:
            queue = self.lanes[lane] = asyncio.Queue()
            self.workers.append(asyncio.create_task(self._work(lane, queue)))
        return queue

    async def _work(self, lane: str | None, queue: asyncio.Queue[dict[str, Any]]) -> None:
        """A lane: its responses one after another."""
        while True:
            event = await queue.get()
            self.running += 1
            try:
                await self._respond(lane, event)
            except _Gone:
                return  # the socket is gone: the reader ends the connection
            except ProtocolError as exc:
                await self._error(exc, lane)
            except Exception as exc:  # noqa: BLE001 - one response's failure, not the connection's
                await self._error(ServerError(f"The response could not be run: {exc}"), lane)
            finally:
                self.running -= 1

    async def _respond(self, lane: str | None, event: dict[str, Any]) -> None:
        body = {k: v for k, v in event.items() if k not in ("type", "stream_id")}
        if "stream" in body:
            raise InvalidRequest("Unknown parameter: 'stream' (a socket always streams).", param="stream",
                                 code="unknown_parameter")  # fmt: skip
        if body.get("background"):
            raise InvalidRequest("Invalid value for 'background': a background response is not served over a "
                                 "WebSocket; create it over HTTP.", param="background", code="invalid_value")  # fmt: skip
        body = self._expanded(body)
        request = parse_create_request({**body, "stream": True})
        self.app.tenant_limits.check_request(self.who)
        batches = await self.app.get_runtime().stream(self.who, request)
        final: dict[str, Any] | None = None
        try:
            async for batch in batches:
                for wire in batch:
                    if wire.get("type") in _FINAL:
                        final = wire.get("response")
                    await self._send(wire if lane is None else {**wire, "stream_id": lane})
        finally:
            with contextlib.suppress(Exception):
                await batches.aclose()
        if final is not None and not request.store:
            self._remember(final, request)

    def _expanded(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` continuing a remembered unstored response: its thread in the input, and the
        stored response that thread began from (if any) as ``previous_response_id``."""
        previous = body.get("previous_response_id")
        if not isinstance(previous, str) or previous not in self.unstored:
            return body
        began_from, thread = self.unstored[previous]
        given = body.get("input", [])
        new = [{"role": "user", "content": given}] if isinstance(given, str) else list(given or [])
        expanded = {**body, "input": [*thread, *new]}
        expanded.pop("previous_response_id")
        if began_from is not None:
            expanded["previous_response_id"] = began_from
        return expanded

    def _remember(self, response: dict[str, Any], request: Any) -> None:
        """An unstored response's thread (its input, which holds what it continued, and its
        output), for the next continuation of it on this connection."""
        thread = [*request.input_items(), *response.get("output", [])]
        self.unstored[response["id"]] = (request.previous_response_id, thread)
        while len(self.unstored) > REMEMBERED:
            self.unstored.popitem(last=False)

    async def _error(self, exc: ProtocolError, lane: str | None) -> None:
        event: dict[str, Any] = {"type": "error", "status": exc.status, "error": exc.to_body()["error"]}
        await self._send(event if lane is None else {**event, "stream_id": lane})

    async def _send(self, event: dict[str, Any]) -> None:
        text = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
        async with self.sending:
            try:
                await self.websocket.send_text(text)
            except (WebSocketDisconnect, RuntimeError, OSError):  # closed, or closing: nobody reads
                raise _Gone from None


class _Gone(Exception):
    """The socket closed under a send."""
