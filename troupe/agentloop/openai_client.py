"""A :class:`~troupe.agentloop.model.ModelClient` for any OpenAI-compatible server.

:class:`OpenAIChatClient` POSTs a ``/chat/completions`` request with aiohttp, streaming
unless the request says not to (``ChatRequest.stream``: a call whose tokens nobody watches gets
one JSON completion, recast as one chunk), parses the Server-Sent Events and turns each
upstream chunk into Troupe's small chunk values (``TextChunk``, ``ReasoningChunk``,
``ToolCallStart``, ``ToolCallArgumentsDelta``), ending with exactly one ``TurnEnd`` that
carries the assembled turn. (aiohttp rather than httpx: a 64-token streamed reply costs
~1.7 ms of client CPU with it, ~5.5 ms with httpx.)

Error translation (every failure surfaces as ``ModelError``)::

    upstream / transport failure            ModelError.status   retried?
    ------------------------------------    -----------------   ------------------------
    non-2xx reply (message from body)       upstream status     429, 5xx: yes; others no
    could not connect / pool exhausted      502 / 504           yes
    server dropped the request unanswered   502                 yes
    no reply headers within read timeout    504                 no
    read timeout while streaming            504                 no
    connection lost while streaming         502                 no
    ``error`` object inside the stream      its code, else 502  no
    malformed chunk / stream cut short      502                 no

Retries happen only before the reply body starts: once a 2xx reply is streaming, part of
the turn may already have reached the caller, so a failure is raised, never replayed.

Example::

    async with OpenAIChatClient("http://127.0.0.1:8001/v1", api_key="sk-...") as client:
        async for chunk in client.stream(ChatRequest(model="m", messages=msgs)):
            if isinstance(chunk, TurnEnd):
                print(chunk.text, chunk.usage)
"""

from __future__ import annotations

import asyncio
import codecs
import functools
import json
import os
import random
import ssl
import urllib.parse
import urllib.request
import uuid
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import aiohttp
import certifi

from troupe.agentloop.model import (
    ChatRequest,
    ModelChunk,
    ModelError,
    ReasoningChunk,
    TextChunk,
    TokenUsage,
    ToolCall,
    ToolCallArgumentsDelta,
    ToolCallStart,
    TurnEnd,
)

__all__ = ["OpenAIChatClient", "DEFAULT_TIMEOUT", "DEFAULT_LIMITS"]

DEFAULT_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=70.0, sock_connect=10.0, sock_read=300.0)
"""Connect 10 s (``sock_connect``), and 70 s to get a connection at all (``connect``: up to
60 s waiting for a free one in a full pool, then the connect); read 300 s *between bytes*
(``sock_read``; a slow prefill is still "between bytes"). No limit on the whole call.
aiohttp has no write timeout: the read timeout starts once the request body is sent."""

DEFAULT_LIMITS: MappingProxyType[str, Any] = MappingProxyType({"limit": 1000, "limit_per_host": 0, "keepalive_timeout": 5.0})
"""The connection pool (``aiohttp.TCPConnector`` arguments). Each streaming turn holds a
connection for its whole length, so allow many; an idle one is kept 5 s."""



@functools.cache
def _tls_context() -> ssl.SSLContext:
    """Certificates checked as the httpx client before did: certifi's bundle, unless
    ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` name others (the system's store is not used, so a
    slim container without one still reaches an HTTPS model server). Built once: it costs
    milliseconds."""
    cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    return ssl.create_default_context(cafile=cafile or (None if capath else certifi.where()), capath=capath)


_MAX_BACKOFF_S = 8.0
_DRAIN_S = 1.0
_MAX_RETRY_AFTER_S = 30.0
_MAX_ERROR_TEXT = 2000


class OpenAIChatClient:
    """Streams chat turns from an OpenAI-compatible ``/chat/completions`` endpoint.

    One instance owns one connection pool (an ``aiohttp.ClientSession``), created on first
    use inside the running event loop and shared by every call; :meth:`aclose` closes it.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8001/v1``.
        api_key: sent as ``Authorization: Bearer <key>`` when given.
        timeout: per-request timeouts (a float sets connect, sock_connect and sock_read
            alike); see :data:`DEFAULT_TIMEOUT`.
        max_retries: retries after the first attempt for connection errors, 429 and 5xx.
        backoff_base_s: first backoff delay; doubles per retry (with jitter, capped at 8 s).
            A ``Retry-After`` header (capped at 30 s) takes precedence.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: aiohttp.ClientTimeout | float = DEFAULT_TIMEOUT,
        max_retries: int = 2,
        backoff_base_s: float = 0.25,
    ) -> None:
        self._base_url = base_url.rstrip("/")
        self._url = self._base_url + "/chat/completions"
        self._headers = {"Accept": "text/event-stream"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._post_headers = {**self._headers, "Content-Type": "application/json"}
        if not isinstance(timeout, aiohttp.ClientTimeout):
            timeout = aiohttp.ClientTimeout(connect=timeout, sock_connect=timeout, sock_read=timeout)
        self._timeout = timeout
        self._max_retries = max(0, max_retries)
        self._backoff_base_s = backoff_base_s
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        # The sleep used between attempts; a seam for tests that check the delays.
        self._sleep = asyncio.sleep

    def _http(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("OpenAIChatClient is closed")
        if self._session is None:
            # Here, not in __init__: a session belongs to the event loop running when it is made.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=_tls_context(), **DEFAULT_LIMITS),
                timeout=self._timeout,
                proxy=_env_proxy(self._base_url),
            )
        return self._session

    async def warm(self, timeout_s: float = 2.0) -> None:
        """Make the first model call as fast as the next: create the session and open a
        pooled connection with ``GET /models``.

        Never raises: a server that is down or refuses is the first call's business.
        """
        timeout = aiohttp.ClientTimeout(connect=timeout_s, sock_connect=timeout_s, sock_read=timeout_s)
        try:
            async with self._http().get(
                self._base_url + "/models", headers=self._headers, timeout=timeout, allow_redirects=False
            ) as response:
                await response.read()  # read to the end, so the connection goes back to the pool
        except (aiohttp.ClientError, TimeoutError, RuntimeError):
            pass

    async def aclose(self) -> None:
        """Close the connection pool. Idempotent."""
        self._closed = True
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def __aenter__(self) -> OpenAIChatClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def stream(self, request: ChatRequest) -> AsyncGenerator[ModelChunk, None]:
        """Run one model call, streamed from upstream unless ``request.stream`` is False.

        Args:
            request: the upstream payload for this turn.

        Returns:
            An async iterator of chunks ending with exactly one ``TurnEnd``. Closing it
            early (or cancelling the consuming task) closes the HTTP response at once.

        Raises:
            ModelError: the call failed; see the module docstring for the mapping.
            RuntimeError: the client was closed.
        """
        session = self._http()
        body = _dumps(request.to_payload())
        attempt = 0
        while True:
            retry_delay = 0.0
            try:
                response = await session.post(
                    self._url, data=body, headers=self._post_headers, allow_redirects=False
                )
            except (aiohttp.ClientError, TimeoutError) as exc:
                # Only errors raised before the reply headers reach this point: errors while
                # streaming are translated inside _read_turn. Those that certainly left the
                # request unanswered are safe to repeat; a read timeout before the headers
                # (or a ``total`` one, if the caller set it) means the server may still be
                # working on it, so it is not repeated.
                retryable = isinstance(exc, aiohttp.ClientError) and not isinstance(exc, aiohttp.SocketTimeoutError)
                if attempt < self._max_retries and retryable:
                    retry_delay = self._delay(attempt, None)
                else:
                    raise _transport_error(exc) from exc
            else:
                if not 200 <= response.status < 300:
                    try:
                        error = await _error_from_reply(response)
                    finally:
                        response.release()  # back to the pool if read to its end, else closed
                    if attempt < self._max_retries and _should_retry(response):
                        retry_delay = self._delay(attempt, response)
                    else:
                        raise error
                else:
                    # From here on, never retry: chunks may already be with the caller.
                    try:
                        async with aclosing(_read_turn(response)) as chunks:
                            async for chunk in chunks:
                                yield chunk
                    finally:
                        # A reply read to its end has already given its connection back to
                        # the pool (aiohttp does so at the end of the body). Otherwise (closed
                        # early, cancelled, failed, or kept open after [DONE]) this drops the
                        # connection now, unread.
                        response.close()
                    return
            attempt += 1
            await self._sleep(retry_delay)

    def _delay(self, attempt: int, response: aiohttp.ClientResponse | None) -> float:
        hinted = _retry_after_s(response) if response is not None else None
        if hinted is not None:
            return min(hinted, _MAX_RETRY_AFTER_S)
        backoff = min(self._backoff_base_s * 2**attempt, _MAX_BACKOFF_S)
        # Jitter so that many conversations hit by one outage do not retry in lockstep.
        return backoff * random.uniform(0.75, 1.0)


@dataclass(slots=True)
class _PendingCall:
    call_id: str = ""
    name: str = ""
    arguments: str = ""
    started: bool = False
    sent: int = 0
    """How much of ``arguments`` was already yielded as deltas."""


class _TurnAssembler:
    """Folds Chat Completions chunk objects into Troupe chunks and the final TurnEnd."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, _PendingCall] = {}
        self.finish_reason: str | None = None
        self.usage = TokenUsage()

    def feed(self, obj: dict[str, Any]) -> list[ModelChunk]:
        if error := obj.get("error"):
            raise _stream_error(error if isinstance(error, dict) else {"message": str(error)})
        if obj.get("object") == "error":  # vLLM's older, flat shape
            raise _stream_error(obj)
        if isinstance(usage := obj.get("usage"), dict):
            self.usage = _usage(usage)
        out: list[ModelChunk] = []
        for choice in obj.get("choices") or ():
            if choice.get("index", 0) != 0:  # we always ask for n=1
                continue
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self.reasoning.append(reasoning)
                out.append(ReasoningChunk(text=reasoning))
            if isinstance(content := delta.get("content"), str) and content:
                self.text.append(content)
                out.append(TextChunk(text=content))
            for fragment in delta.get("tool_calls") or ():
                out.extend(self._tool_fragment(fragment))
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return out

    def _tool_fragment(self, fragment: dict[str, Any]) -> list[ModelChunk]:
        index = fragment.get("index")
        if not isinstance(index, int):
            index = self._guess_index(fragment.get("id"))
        call = self.calls.setdefault(index, _PendingCall())
        function = fragment.get("function") or {}
        # id and name come once; servers that repeat them send the same value again.
        if fragment.get("id") and not call.call_id:
            call.call_id = fragment["id"]
        if function.get("name") and not call.name:
            call.name = function["name"]
        if isinstance(arguments := function.get("arguments"), str):
            call.arguments += arguments
        out: list[ModelChunk] = []
        if not call.started and call.name:
            call.started = True
            call.call_id = call.call_id or f"call_{uuid.uuid4().hex[:24]}"
            out.append(ToolCallStart(index=index, call_id=call.call_id, name=call.name))
        # Arguments that arrived before the name are held back until the start is known.
        if call.started and len(call.arguments) > call.sent:
            out.append(ToolCallArgumentsDelta(index=index, delta=call.arguments[call.sent :]))
            call.sent = len(call.arguments)
        return out

    def _guess_index(self, call_id: str | None) -> int:
        # A few servers omit ``index``: a known id continues its call, a new id starts
        # the next one, and a fragment with neither continues the latest call.
        for index, call in self.calls.items():
            if call_id and call.call_id == call_id:
                return index
        if call_id or not self.calls:
            return len(self.calls)
        return max(self.calls)

    def end(self) -> TurnEnd:
        if nameless := [i for i, c in self.calls.items() if not c.started]:
            raise ModelError(f"upstream tool call {nameless[0]} has no function name", 502)
        return TurnEnd(
            text="".join(self.text),
            reasoning="".join(self.reasoning),
            tool_calls=tuple(
                ToolCall(call_id=c.call_id, name=c.name, arguments=c.arguments)
                for _, c in sorted(self.calls.items())
            ),
            finish_reason=self.finish_reason or "stop",
            usage=self.usage,
        )


async def _read_turn(response: aiohttp.ClientResponse) -> AsyncGenerator[ModelChunk, None]:
    """Yield the turn's chunks from a 2xx reply, translating mid-stream failures."""
    turn = _TurnAssembler()
    try:
        if "text/event-stream" not in response.headers.get("Content-Type", "text/event-stream"):
            # A server that ignored ``stream: true`` and answered with one JSON completion.
            for chunk in turn.feed(_as_chunk(_json(await response.read()))):
                yield chunk
        else:
            done = False
            async with aclosing(_sse_events(response)) as events:
                async for event, data in events:
                    if data == "[DONE]":
                        done = True
                        break
                    obj = _json(data)
                    if event == "error" and "error" not in obj:
                        obj = {"error": obj}
                    for chunk in turn.feed(obj):
                        yield chunk
            if done:
                await _drain(response)
            # A stream cut off before [DONE] and before any finish_reason is a lost turn.
            if not done and turn.finish_reason is None:
                raise ModelError("upstream stream ended before the turn finished", 502)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise _transport_error(exc) from exc
    yield turn.end()


async def _drain(response: aiohttp.ClientResponse) -> None:
    """Read what follows ``[DONE]`` to the end of the reply, so that aiohttp returns the
    connection to the pool (a reply closed unread closes its connection, and every model
    call would pay a new TCP and TLS handshake). A server that keeps the reply open is
    given ``_DRAIN_S``; then the connection is dropped as before."""
    try:
        async with asyncio.timeout(_DRAIN_S):
            while await response.content.readany():
                pass
    except aiohttp.ClientError:
        raise  # a transport failure (also aiohttp's read timeout) is the caller's to translate
    except TimeoutError:
        pass


async def _sse_events(response: aiohttp.ClientResponse) -> AsyncGenerator[tuple[str, str], None]:
    """Yield ``(event, data)`` per SSE event; comments and other fields are skipped."""
    encoding = _encoding(response)
    lines = _LineSplitter()
    content = response.content
    event = ""
    data: list[str] = []
    while True:
        block = await content.readany()  # b"" at the end of the reply
        for raw in lines.feed(block):
            line = raw.decode(encoding, "replace")
            if not line:
                if data:
                    yield event, "\n".join(data)
                event, data = "", []
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                data.append(value)
            elif field == "event":
                event = value
        if not block:
            break
    if data:  # the last event, when the server did not end it with a blank line
        yield event, "\n".join(data)


class _LineSplitter:
    """Splits a byte stream into lines ended by ``\\n``, ``\\r\\n`` or ``\\r`` (all three are
    SSE line ends), also when a ``\\r\\n`` is split between two reads."""

    __slots__ = ("_tail", "_after_cr")

    def __init__(self) -> None:
        self._tail: list[bytes] = []
        """The start of an unfinished line, in the pieces it came in."""
        self._after_cr = False
        """The last piece ended with ``\\r``: a ``\\n`` that follows ends no second line."""

    def feed(self, data: bytes) -> list[bytes]:
        """The lines that ``data`` completes, without their line ends. ``b""`` marks the end
        of the stream and returns the unfinished last line, if there is one."""
        if not data:
            last, self._tail = b"".join(self._tail), []
            return [last] if last else []
        if self._after_cr:
            self._after_cr = False
            if data[0] == 0x0A:
                data = data[1:]
        if b"\r" in data:
            self._after_cr = data.endswith(b"\r")
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if b"\n" not in data:
            if data:
                self._tail.append(data)
            return []
        if self._tail:
            self._tail.append(data)
            data, self._tail = b"".join(self._tail), []
        lines = data.split(b"\n")
        if last := lines.pop():
            self._tail.append(last)
        return lines


def _encoding(response: aiohttp.ClientResponse) -> str:
    """The reply's declared charset when Python knows it, else UTF-8."""
    charset = response.charset
    if charset:
        try:
            return codecs.lookup(charset).name
        except LookupError:
            pass
    return "utf-8"


def _env_proxy(url: str) -> str | None:
    """The proxy that ``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``ALL_PROXY`` name for ``url``, unless
    ``NO_PROXY`` exempts its host: read once per session, as httpx did. (aiohttp's own
    ``trust_env`` looks them up again on a worker thread for every request, ~0.6 ms of CPU.)"""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or (parts.hostname and urllib.request.proxy_bypass(parts.hostname)):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def _dumps(payload: dict[str, Any]) -> bytes:
    # Compact, UTF-8 and no NaN: the request body httpx sent for ``json=``.
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _json(data: str | bytes) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelError(f"malformed upstream chunk: {str(data)[:200]!r}", 502) from exc
    if not isinstance(obj, dict):
        raise ModelError(f"malformed upstream chunk: {str(data)[:200]!r}", 502)
    return obj


def _as_chunk(completion: dict[str, Any]) -> dict[str, Any]:
    """Recast a non-streaming completion as one streaming chunk."""
    if completion.get("error"):
        return completion
    choices = []
    for choice in completion.get("choices") or ():
        message = dict(choice.get("message") or {})
        message["tool_calls"] = [
            {"index": i, **call} for i, call in enumerate(message.get("tool_calls") or ())
        ]
        choices.append({**choice, "delta": message})
    return {"choices": choices, "usage": completion.get("usage")}


def _usage(usage: dict[str, Any]) -> TokenUsage:
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    return TokenUsage(
        input_tokens=usage.get("prompt_tokens") or 0,
        output_tokens=usage.get("completion_tokens") or 0,
        cached_tokens=prompt_details.get("cached_tokens") or 0,
        reasoning_tokens=completion_details.get("reasoning_tokens") or 0,
    )


def _should_retry(response: aiohttp.ClientResponse) -> bool:
    # A server can veto a retry of a deterministic failure (the openai SDK's convention).
    if response.headers.get("x-should-retry", "").lower() == "false":
        return False
    return response.status == 429 or response.status >= 500


def _retry_after_s(response: aiohttp.ClientResponse) -> float | None:
    if (ms := response.headers.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    if (value := response.headers.get("retry-after")) is None:
        return None
    try:  # the HTTP-date form is not used by model servers; it counts as absent
        return max(0.0, float(value))
    except ValueError:
        return None


async def _error_from_reply(response: aiohttp.ClientResponse) -> ModelError:
    """A ModelError for a non-2xx reply, keeping the upstream message and code."""
    status = response.status
    try:
        body = (await response.read()).decode("utf-8", "replace")
    except aiohttp.ClientError:
        body = ""
    message, code, param = body.strip()[:_MAX_ERROR_TEXT], None, None
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        error = parsed.get("error", parsed)
        if isinstance(error, dict):
            found = error.get("message") or error.get("detail")
            message = found if isinstance(found, str) else message
            code = error.get("code") or error.get("type")
            param = error.get("param") if isinstance(error.get("param"), str) else None
        elif isinstance(error, str):
            message = error
    if not message:
        message = f"upstream replied HTTP {status} {response.reason or ''}".rstrip()
    return ModelError(message, status, str(code) if code is not None else None, param)


def _stream_error(error: dict[str, Any]) -> ModelError:
    """A ModelError for an ``error`` object sent inside a 2xx stream."""
    code = error.get("code")
    status = code if isinstance(code, int) and 400 <= code <= 599 else 502
    message = error.get("message") or json.dumps(error)[:_MAX_ERROR_TEXT]
    code = code if code is not None else error.get("type")
    return ModelError(str(message), status, str(code) if code is not None else None)


def _transport_error(exc: aiohttp.ClientError | TimeoutError) -> ModelError:
    if isinstance(exc, TimeoutError):  # connect, pool, read (aiohttp's are TimeoutErrors too) or total
        return ModelError(f"upstream timed out: {type(exc).__name__} {exc}".strip(), 504, "timeout")
    message = f"upstream connection failed: {type(exc).__name__} {exc}".strip()
    return ModelError(message, 502, "connection_error")
