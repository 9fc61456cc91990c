"""One Responses-API request, timed: time to first token, inter-token gaps, end to end.

:func:`send_request` posts one ``POST {base_url}/responses`` body (streaming when the body
says ``"stream": true``) and returns a :class:`RequestResult`. It never raises for what a
server does: HTTP errors, transport errors, time-outs, ``error`` events, ``failed``
responses and streams that end early are all recorded as an ``error`` kind with a message.

Timing, all from :func:`time.perf_counter` on the client:

* ``e2e_s``: from just before the request is sent to the terminal event
  (``response.completed`` / ``incomplete`` / ``failed``) for a stream, or to the whole body
  read for a plain request;
* ``ttft_s``: to the first ``*.delta`` event of a stream (text, reasoning or tool-call
  arguments), as a user would see the first token;
* ``itl_s``: the gaps between consecutive delta events. Events that arrive in one network
  read share an arrival time, so a server that batches deltas shows gaps of 0 inside a batch.

The SSE parser reads raw bytes and takes each event's type from its ``event:`` line when the
server sends one, so delta events are never JSON-decoded: the client's own cost per token
stays small (it is measured: see :mod:`troupe.bench.loadgen`).

Example::

    async with httpx.AsyncClient() as http:
        result = await send_request(http, "http://127.0.0.1:8000/v1",
                                    {"model": "sim", "input": "[[tokens 8]]", "stream": True})
    result.ok, result.ttft_s, result.output_items     # True, 0.004…, ['message']
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

__all__ = ["RequestResult", "send_request", "TERMINAL_EVENTS"]

TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


@dataclass(slots=True, kw_only=True)
class RequestResult:
    """What one request did, as the client saw it. Times in seconds."""

    index: int
    """The request's number in its run (warm-up requests come first)."""
    stream: bool
    started_s: float = 0.0
    """When it was sent, since the start of the run."""
    e2e_s: float | None = None
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    deltas: int = 0
    """Delta events received (tokens, for a server that sends one per token)."""
    events: int = 0
    http_status: int | None = None
    status: str | None = None
    """The Response's ``status`` (``completed``, ``incomplete``, ``failed``…)."""
    error: str | None = None
    """None when it succeeded; else a kind: ``http_<status>``, ``timeout``, ``transport``,
    ``failed``, ``stream_error``, ``no_terminal_event``, ``bad_response``."""
    error_message: str | None = None
    output_items: list[str] = field(default_factory=list)
    """The ``type`` of each output item, in order."""
    usage: dict[str, Any] | None = None
    response_id: str | None = None
    response: dict[str, Any] | None = None
    """The final Response, when the caller asked to keep it."""
    warmup: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        """A compact JSON-ready record (no Response body), times in milliseconds."""

        def ms(v: float | None) -> float | None:
            return None if v is None else round(v * 1000, 3)

        return {
            "index": self.index,
            "started_ms": ms(self.started_s),
            "e2e_ms": ms(self.e2e_s),
            "ttft_ms": ms(self.ttft_s),
            "deltas": self.deltas,
            "http_status": self.http_status,
            "status": self.status,
            "error": self.error,
            "error_message": self.error_message,
            "output_items": self.output_items,
            "output_tokens": (self.usage or {}).get("output_tokens"),
            "response_id": self.response_id,
        }


def _take_response(result: RequestResult, response: Any, *, keep: bool) -> None:
    if not isinstance(response, dict):
        result.error, result.error_message = "bad_response", "the body is not a Response object"
        return
    result.status = response.get("status")
    result.response_id = response.get("id")
    result.usage = response.get("usage")
    result.output_items = [item.get("type", "?") for item in response.get("output") or [] if isinstance(item, dict)]
    if keep:
        result.response = response
    if result.status == "failed" and result.error is None:
        error = response.get("error") or {}
        result.error, result.error_message = "failed", error.get("message") or "the response failed"


def _error_message(body: bytes) -> str:
    try:
        error = json.loads(body).get("error") or {}
        return str(error.get("message") or body[:200].decode(errors="replace"))
    except (ValueError, AttributeError):
        return body[:200].decode(errors="replace")


async def send_request(
    client: httpx.AsyncClient,
    base_url: str,
    body: dict[str, Any],
    *,
    index: int = 0,
    headers: dict[str, str] | None = None,
    timeout_s: float = 60.0,
    keep_response: bool = False,
    run_start: float | None = None,
) -> RequestResult:
    """Send one create-response request and time it (see the module docstring).

    Args:
        client: the shared HTTP client.
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        body: the request body; ``"stream": true`` makes it a stream.
        index: recorded as :attr:`RequestResult.index`.
        headers: extra headers (e.g. ``Authorization``).
        timeout_s: a request taking longer is recorded as ``timeout``.
        keep_response: keep the final Response in :attr:`RequestResult.response`.
        run_start: ``perf_counter`` time the run started (for ``started_s``).
    """
    stream = bool(body.get("stream"))
    result = RequestResult(index=index, stream=stream)
    url = base_url.rstrip("/") + "/responses"
    start = time.perf_counter()
    result.started_s = start - (run_start if run_start is not None else start)
    try:
        if stream:
            await _stream(client, url, body, headers, timeout_s, start, result, keep_response)
        else:
            response = await client.post(url, json=body, headers=headers, timeout=timeout_s)
            result.e2e_s = time.perf_counter() - start
            result.http_status = response.status_code
            if response.status_code >= 400:
                result.error, result.error_message = f"http_{response.status_code}", _error_message(response.content)
            else:
                try:
                    _take_response(result, response.json(), keep=keep_response)
                except ValueError:
                    result.error, result.error_message = "bad_response", "the body is not JSON"
    except httpx.TimeoutException as exc:
        result.error, result.error_message = "timeout", f"no answer within {timeout_s} s ({type(exc).__name__})"
    except httpx.TransportError as exc:
        result.error, result.error_message = "transport", f"{type(exc).__name__}: {exc}"
    if result.error is not None and result.e2e_s is None:
        result.e2e_s = time.perf_counter() - start
    return result


async def _stream(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str] | None,
    timeout_s: float,
    start: float,
    result: RequestResult,
    keep: bool,
) -> None:
    deadline = start + timeout_s
    async with client.stream("POST", url, json=body, headers=headers, timeout=timeout_s) as response:
        result.http_status = response.status_code
        if response.status_code >= 400:
            result.error, result.error_message = f"http_{response.status_code}", _error_message(await response.aread())
            return
        buffer = b""
        last_delta: float | None = None
        async for chunk in response.aiter_raw():
            now = time.perf_counter()
            buffer += chunk
            if b"\r" in buffer:
                buffer = buffer.replace(b"\r\n", b"\n")
            *frames, buffer = buffer.split(b"\n\n")
            for frame in frames:
                kind, data = _parse_frame(frame)
                if kind is None:
                    continue
                result.events += 1
                if kind.endswith(".delta"):
                    result.deltas += 1
                    if last_delta is None:
                        result.ttft_s = now - start
                    else:
                        result.itl_s.append(now - last_delta)
                    last_delta = now
                elif kind in TERMINAL_EVENTS:
                    result.e2e_s = now - start
                    _take_response(result, _json(data).get("response"), keep=keep)
                elif kind == "error" and result.error is None:
                    result.error, result.error_message = "stream_error", str(_json(data).get("message") or "error event")
            if now > deadline:
                raise httpx.ReadTimeout("the stream outlived the request time-out")
    if result.e2e_s is None and result.error is None:
        result.error, result.error_message = "no_terminal_event", "the stream ended without a terminal event"


def _parse_frame(frame: bytes) -> tuple[str | None, bytes]:
    """``(event type, data)`` of one SSE frame; type None for comments, ``[DONE]`` and empties."""
    kind: str | None = None
    data = b""
    for line in frame.split(b"\n"):
        if line.startswith(b"event:"):
            kind = line[6:].strip().decode()
        elif line.startswith(b"data:"):
            data += line[5:].lstrip()
    if not data or data == b"[DONE]":
        return None, b""
    if kind is None:  # a server without `event:` lines: the type is in the JSON
        kind = str(_json(data).get("type") or "")
    return kind or None, data


def _json(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
