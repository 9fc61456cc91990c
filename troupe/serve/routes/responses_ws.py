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
  OpenAI allows on a socket, with the whole thread sent to the model (the response still names
  the ``previous_response_id`` given). A continuation that fails (an ``error`` event, or a
  ``failed`` response) evicts the response it continued, as the Open Responses specification
  asks: continuing it again is a ``previous_response_not_found``.
* The connection closes after ``websocket_idle_timeout_s`` with no message and nothing running.
  When it closes (or drops), the responses still running on it are cancelled and store
  nothing, as an SSE stream's turn is when its client leaves: nobody is left to read them. Use
  ``background`` over HTTP for a run that must outlive its client.

Steering (``response.steer``): input queued for a response running on this connection, as the
SDK's ``ResponseSteerEventParam`` describes. ``response.steer.accepted`` answers it (numbered in
the target's stream, whose later events move up by one); the response ends at its next safe
boundary (its tool calls answered, before it would call the model again) ``incomplete`` with
reason ``steered``, or completes if its turn was the answer; then a successor starts on the
same lane with the queued input, the target's settings and ``previous_response_id`` = the
target. A response that stops for client-owned tool output or an approval keeps the input
queued and says so with ``response.steer.pending`` (after ``response.completed``), whose
``required_input`` stubs name what the client owes; the lane's next ``response.create`` with
that ``previous_response_id`` gets the queued input first. Input that cannot be applied comes
back in ``response.steer.failed`` (its ``error.code`` says why).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse

from troupe.protocol import (
    InvalidRequest,
    ProtocolError,
    decode_json_body,
    parse_create_request,
    validate_input_items,
)
from troupe.protocol.errors import ServerError

from ..dependencies import AppContext, authenticate, context

__all__ = ["router"]

router = APIRouter()

REMEMBERED = 64
"""How many ``store: false`` responses a connection remembers for continuations."""

_FINAL = frozenset({"response.completed", "response.failed", "response.incomplete", "response.cancelled"})
_FINISHED_KEPT = 256
"""How many ended responses a connection remembers, to tell a late steer they have ended."""
_STEER_PARTS = frozenset({"input_text", "input_image", "input_file"})


@dataclass(slots=True)
class _Running:
    """A response under way on this connection: its settings (for a successor), what steering
    has queued for it, and how far its stream's numbers moved for the steering events in it."""

    response_id: str
    lane: str | None
    settings: dict[str, Any]
    """Its ``response.create`` body without ``input`` and ``previous_response_id``."""
    steerable: bool
    offset: int = 0
    last: int = -1
    steers: list[tuple[str, Any]] = field(default_factory=list)
    required: list[dict[str, Any]] = field(default_factory=list)
    """Once it has ended: the stubs of what it waits for from the client (``required_input``)."""


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
        self.under_way: dict[str, _Running] = {}
        """The responses running on this connection, by id."""
        self.finished: OrderedDict[str, str] = OrderedDict()
        """The responses that ended on this connection (their last ones), by id → status."""
        self.owed: dict[str, list[tuple[str, Any]]] = {}
        """Steering input accepted for a response that stopped for client tool output or an
        approval: prepended to the lane's next ``response.create`` that continues it."""

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
        except (WebSocketDisconnect, _Gone):
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
            await self._steer(event)
        else:
            shown = kind if isinstance(kind, str) else json.dumps(kind)
            await self._error(InvalidRequest(f"Invalid value for 'type': {shown!r} is not an event this socket takes "
                                             "('response.create', 'response.steer').", param="type",
                                             code="invalid_value"), lane)  # fmt: skip

    def _lane(self, lane: str | None) -> asyncio.Queue[dict[str, Any]]:
        queue = self.lanes.get(lane)
        if queue is None:
            queue = self.lanes[lane] = asyncio.Queue()
            self.workers.append(asyncio.create_task(self._work(lane, queue)))
        return queue

    async def _work(self, lane: str | None, queue: asyncio.Queue[dict[str, Any]]) -> None:
        """A lane: its responses one after another (and a steered one's successor next)."""
        while True:
            event = await queue.get()
            self.running += 1
            try:
                await self._run(lane, event)
            except _Gone:
                return  # the socket is gone: the reader ends the connection
            finally:
                self.running -= 1

    async def _run(self, lane: str | None, first: dict[str, Any]) -> None:
        """One response.create, and the successors steering asks for after it."""
        event: dict[str, Any] | None = first
        while event is not None:
            try:
                running = await self._respond(lane, event)
            except ProtocolError as exc:
                self._evict(event)
                await self._error(exc, lane)
                return
            except _Gone:
                raise
            except Exception as exc:  # noqa: BLE001 - one response's failure, not the connection's
                self._evict(event)
                await self._error(ServerError(f"The response could not be run: {exc}"), lane)
                return
            event = await self._after(running) if running is not None else None

    async def _respond(self, lane: str | None, event: dict[str, Any]) -> _Running | None:
        body = {k: v for k, v in event.items() if k not in ("type", "stream_id")}
        if "stream" in body:
            raise InvalidRequest("Unknown parameter: 'stream' (a socket always streams).", param="stream",
                                 code="unknown_parameter")  # fmt: skip
        if body.get("background"):
            raise InvalidRequest("Invalid value for 'background': a background response is not served over a "
                                 "WebSocket; create it over HTTP.", param="background", code="invalid_value")  # fmt: skip
        settings = {k: v for k, v in body.items() if k not in ("input", "previous_response_id")}
        previous = body.get("previous_response_id")
        if isinstance(previous, str) and previous in self.owed:  # steering input it was owed goes first
            body = {**body, "input": [*_steer_items(self.owed.pop(previous)), *_items_of(body.get("input"))]}
        body = self._expanded(body)
        # A continuation of an unstored response runs as its thread: the client still sees the id it named.
        echoed = previous if isinstance(previous, str) and previous in self.unstored else None
        request = parse_create_request({**body, "stream": True})
        self.app.tenant_limits.check_request(self.who)
        running: _Running | None = None
        final: dict[str, Any] | None = None
        # An admission slot for each response, as every POST /v1/responses takes one (limits.py).
        async with self.websocket.app.state.admission.slot():
            batches = await self.app.get_runtime().stream(self.who, request)
            try:
                async for batch in batches:
                    for wire in batch:
                        if running is None and wire.get("type") == "response.created":
                            steerable = request.conversation is None and not request.context_management
                            running = _Running(wire["response"]["id"], lane, settings, steerable)
                            self.under_way[running.response_id] = running
                        if wire.get("type") in _FINAL:
                            final = wire.get("response")
                        if echoed is not None and isinstance(wire.get("response"), dict):
                            wire = {**wire, "response": {**wire["response"], "previous_response_id": echoed}}
                        await self._send(wire, running)
            finally:
                with contextlib.suppress(Exception):
                    await batches.aclose()
                if running is not None:
                    self.under_way.pop(running.response_id, None)
        if final is not None:
            if final.get("status") == "failed":  # a continuation that failed evicts what it continued
                self._evict(event)
            self.finished[final["id"]] = final["status"]
            if running is not None:
                running.required = _required_input(final)
            while len(self.finished) > _FINISHED_KEPT:
                self.finished.popitem(last=False)
            if not request.store:
                self._remember(final, request)
        return running if final is not None and running is not None and running.steers else None

    async def _after(self, running: _Running) -> dict[str, Any] | None:
        """What steering asks for once ``running`` has ended: its successor's ``response.create``
        (None when there is none to start)."""
        status = self.finished.get(running.response_id)
        steers, running.steers = running.steers, []
        if status == "completed" and (owed := running.required):
            self.owed[running.response_id] = steers
            for steer_id, _ in steers:
                await self._send({"type": "response.steer.pending", "reason": "waiting_for_required_input",
                                  "required_input": owed, "steer": {"id": steer_id,
                                  "previous_response_id": running.response_id}}, running, inserted=True)  # fmt: skip
            return None
        if status not in ("completed", "incomplete"):
            for steer_id, given in steers:
                await self._steer_failed(running, "response_not_active", f"The response ended {status}: the "
                                         "input was not applied.", given, steer_id)  # fmt: skip
            return None
        successor = {**running.settings, "type": "response.create", "input": _steer_items(steers),
                     "previous_response_id": running.response_id}  # fmt: skip
        try:
            parse_create_request({k: v for k, v in self._expanded(dict(successor)).items() if k != "type"})
        except ProtocolError as exc:
            for steer_id, given in steers:
                await self._steer_failed(running, "successor_creation_failed", exc.message, given, steer_id)
            return None
        return successor if running.lane is None else {**successor, "stream_id": running.lane}

    async def _steer(self, event: dict[str, Any]) -> None:
        target, given = event.get("previous_response_id"), event.get("input")
        extra = sorted(set(event) - {"type", "previous_response_id", "input"})
        running = self.under_way.get(target) if isinstance(target, str) else None
        if extra:
            await self._steer_failed(running, "invalid_input", f"Unknown parameter: '{extra[0]}' (a steer takes only "
                                     "'previous_response_id' and 'input').", given, None, target)  # fmt: skip
            return
        if running is None:
            ended = isinstance(target, str) and target in self.finished
            code = "response_already_completed" if ended else "response_not_found"
            why = "it has ended" if ended else "no such response is running on this connection"
            await self._steer_failed(None, code, f"The response cannot be steered: {why}.", given, None, target)
            return
        if not running.steerable:
            await self._steer_failed(running, "steering_not_supported", "A response bound to a conversation, or "
                                     "that compacts its context, cannot be steered.", given, None)  # fmt: skip
            return
        try:
            _check_steer_input(given)
        except ProtocolError as exc:
            await self._steer_failed(running, "invalid_input", exc.message, given, None)
            return
        steer_id = f"steer_{secrets.token_hex(16)}"
        running.steers.append((steer_id, given))
        await self._send({"type": "response.steer.accepted", "steer": {"id": steer_id,
                          "previous_response_id": running.response_id}}, running, inserted=True)  # fmt: skip
        await self.app.get_runtime().steer_response(self.who, running.response_id)

    async def _steer_failed(
        self, running: _Running | None, code: str, message: str, given: Any, steer_id: str | None,
        target: Any = None,
    ) -> None:  # fmt: skip
        steer: dict[str, Any] = {"input": given, "previous_response_id": running.response_id if running else target}
        if steer_id is not None:
            steer["id"] = steer_id
        event = {"type": "response.steer.failed", "error": {"code": code, "message": message,
                 "type": "invalid_request_error"}, "steer": steer}  # fmt: skip
        await self._send(event, running, inserted=True)

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

    def _evict(self, event: dict[str, Any]) -> None:
        """A continuation that failed (an error, or a ``failed`` response) forgets the unstored
        response it continued, as the Open Responses specification asks: continuing that id again
        on this connection is then a ``previous_response_not_found``."""
        self.unstored.pop(event.get("previous_response_id"), None)  # type: ignore[arg-type]

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

    async def _send(self, event: dict[str, Any], running: _Running | None = None, *, inserted: bool = False) -> None:
        """Send ``event``, on ``running``'s lane and in its stream's numbering: a response's own
        event moved up past the steering events ``inserted`` in it, which take the next number."""
        async with self.sending:
            if running is not None:
                if inserted:
                    running.offset += 1
                    event = {**event, "sequence_number": running.last + 1}
                elif isinstance(event.get("sequence_number"), int):
                    event = {**event, "sequence_number": event["sequence_number"] + running.offset}
                running.last = event.get("sequence_number", running.last)
                if running.lane is not None:
                    event = {**event, "stream_id": running.lane}
            elif inserted:
                event = {**event, "sequence_number": 0}
            text = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
            try:
                await self.websocket.send_text(text)
            except (WebSocketDisconnect, RuntimeError, OSError):  # closed, or closing: nobody reads
                raise _Gone from None


def _items_of(given: Any) -> list[Any]:
    """A request's ``input`` as a list of items."""
    return [{"role": "user", "content": given}] if isinstance(given, str) else list(given or [])


def _steer_items(steers: list[tuple[str, Any]]) -> list[Any]:
    """Queued steering input, in the order it was sent, as input items."""
    return [item for _, given in steers for item in _items_of(given)]


def _required_input(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The stubs of what a completed response waits for from the client: an output for each of
    its function calls that has none (the client runs them) and an answer to each approval
    request (the SDK's ``ResponseSteerRequiredInput``)."""
    output = response.get("output") or []
    answered = {item.get("call_id") for item in output if item.get("type") == "function_call_output"}
    stubs: list[dict[str, Any]] = []
    for item in output:
        if item.get("type") == "function_call" and item.get("call_id") not in answered:
            stubs.append({"type": "function_call_output", "call_id": item["call_id"], "name": item.get("name")})
        elif item.get("type") == "mcp_approval_request":
            stubs.append({"type": "mcp_approval_response", "approval_request_id": item["id"]})
    return stubs


def _check_steer_input(given: Any) -> None:
    """Steering input: a string, or a non-empty array of user messages whose parts are text,
    images or files (the SDK's ``ResponseSteerInputParam``); a 400 naming what is wrong."""
    if isinstance(given, str):
        if not given:
            raise InvalidRequest("Invalid value for 'input': empty.", param="input", code="invalid_value")
        return
    if not isinstance(given, list) or not given:
        raise InvalidRequest("Invalid value for 'input': a string or a non-empty array of user messages.",
                             param="input", code="invalid_value")  # fmt: skip
    for i, item in enumerate(given):
        if not isinstance(item, dict) or item.get("role") != "user" or item.get("type", "message") != "message":
            raise InvalidRequest(f"Invalid value for 'input[{i}]': steering takes only messages of the user role.",
                                 param=f"input[{i}]", code="invalid_value")  # fmt: skip
        content = item.get("content")
        parts = content if isinstance(content, list) else []
        if any(not isinstance(p, dict) or p.get("type") not in _STEER_PARTS for p in parts):
            raise InvalidRequest(f"Invalid value for 'input[{i}].content': text, image or file parts only.",
                                 param=f"input[{i}].content", code="invalid_value")  # fmt: skip
    validate_input_items(given)


class _Gone(Exception):
    """The socket closed under a send."""
