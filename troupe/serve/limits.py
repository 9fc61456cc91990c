"""Backpressure: answer ``429`` with ``Retry-After`` before latency collapses.

Three limits, each answered with OpenAI's ``rate_limit_exceeded`` error body and a
``Retry-After`` header (the ``openai`` SDK waits that long and retries by itself):

* **Admission per ingress replica** (:class:`Admission`, on by default): at most
  ``max_active`` writes run at once in one replica; up to ``max_waiting`` more wait for
  a slot for at most ``max_wait_s``; anything beyond is refused at once. Queues stay
  bounded, so an admitted request's latency does too. It is an ASGI middleware around
  every ``POST`` under ``/v1/`` (a response, its stream included; a conversation or its
  items): the reads are cheap and are never refused.
* **Requests per minute per tenant** (:class:`TenantLimits`, off by default): a token
  bucket per tenant, refilled continuously.
* **Concurrent streams per tenant** (:class:`TenantLimits`, off by default).

All three count per ingress replica: with ``num_replicas = N`` a tenant may get up to N
times its limit. The defaults and how they were measured are in docs/behaviour.md, "Limits".

Example::

    admission = Admission(max_active=64, max_waiting=256, max_wait_s=2.0)
    app.add_middleware(AdmissionMiddleware, admission=admission)
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Receive, Scope, Send

from troupe.protocol import ProtocolError

__all__ = ["RetryLater", "RateLimited", "Admission", "AdmissionMiddleware", "TenantLimits"]


class RetryLater(ProtocolError):
    """A refusal that says when to come back: ``retry_after_s`` becomes the ``Retry-After`` header."""

    def __init__(self, message: str, *, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        """Seconds the client should wait before retrying (rounded up on the wire)."""

    @property
    def retry_after_header(self) -> str:
        return str(max(1, math.ceil(self.retry_after_s)))


class RateLimited(RetryLater):
    """429 ``rate_limit_exceeded``."""

    default_status = 429
    default_type = "rate_limit_error"
    default_code = "rate_limit_exceeded"


class Admission:
    """A bounded number of running responses, and a bounded, time-limited queue in front.

    Args:
        max_active: responses that may run at once.
        max_waiting: requests that may wait for a slot; more are refused at once.
        max_wait_s: the longest a request waits for a slot before it is refused.
    """

    def __init__(self, *, max_active: int, max_waiting: int, max_wait_s: float) -> None:
        self.max_active = max_active
        self.max_waiting = max_waiting
        self.max_wait_s = max_wait_s
        self.active = 0
        """Responses running now."""
        self.waiting = 0
        """Requests waiting for a slot now."""
        self.refused = 0
        """Requests refused since start."""
        self._released = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold a slot for the ``with`` body; raises :class:`RateLimited` when none comes in time."""
        await self._acquire()
        try:
            yield
        finally:
            async with self._released:
                self.active -= 1
                self._released.notify()

    async def _acquire(self) -> None:
        if self.active < self.max_active and not self.waiting:
            self.active += 1
            return
        if self.waiting >= self.max_waiting:
            raise self._refuse("the server is at capacity")
        self.waiting += 1
        try:
            async with self._released:
                await asyncio.wait_for(
                    self._released.wait_for(lambda: self.active < self.max_active), self.max_wait_s
                )
                self.active += 1
        except TimeoutError:
            raise self._refuse(f"no capacity became free within {self.max_wait_s:g} s") from None
        finally:
            self.waiting -= 1

    def _refuse(self, why: str) -> RateLimited:
        self.refused += 1
        return RateLimited(
            f"Too many requests: {why} ({self.max_active} responses running, {self.waiting} waiting). "
            "Retry after the time in the Retry-After header.",
            retry_after_s=1.0,
        )


class AdmissionMiddleware:
    """Runs every ``POST /v1/…`` (its whole body, streams included) inside an admission slot."""

    def __init__(self, app: ASGIApp, *, admission: Admission, render: Callable[[ProtocolError], ASGIApp]) -> None:
        self.app = app
        self.admission = admission
        self.render = render

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        try:
            slot = self.admission.slot()
            await slot.__aenter__()
        except RateLimited as refused:
            await self.render(refused)(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            await slot.__aexit__(None, None, None)


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class TenantLimits:
    """Per-tenant limits; ``0`` turns a limit off.

    Example::

        limits = TenantLimits(requests_per_minute=60, max_streams=4)
        limits.check_request("alice")          # raises RateLimited past 60/min
        release = limits.open_stream("alice")  # raises RateLimited past 4 open streams
        release()                              # when the stream ends
    """

    requests_per_minute: int = 0
    max_streams: int = 0
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[str, _Bucket] = field(default_factory=dict)
    _streams: dict[str, int] = field(default_factory=dict)

    def check_request(self, tenant: str) -> None:
        """Take one request from ``tenant``'s bucket, or raise :class:`RateLimited`."""
        if not self.requests_per_minute:
            return
        rate = self.requests_per_minute / 60.0
        now = self.clock()
        bucket = self._buckets.setdefault(tenant, _Bucket(tokens=float(self.requests_per_minute), at=now))
        bucket.tokens = min(float(self.requests_per_minute), bucket.tokens + (now - bucket.at) * rate)
        bucket.at = now
        if bucket.tokens < 1:
            raise RateLimited(
                f"Rate limit reached: {self.requests_per_minute} requests per minute for this API key.",
                retry_after_s=(1 - bucket.tokens) / rate,
            )
        bucket.tokens -= 1

    def open_stream(self, tenant: str) -> Callable[[], None]:
        """Count one open stream for ``tenant``; returns the function that closes it (idempotent)."""
        if not self.max_streams:
            return lambda: None
        if self._streams.get(tenant, 0) >= self.max_streams:
            raise RateLimited(f"Too many concurrent streams: at most {self.max_streams} per API key.")
        self._streams[tenant] = self._streams.get(tenant, 0) + 1
        closed = False

        def close() -> None:
            nonlocal closed
            if not closed:
                closed = True
                self._streams[tenant] -= 1
                if not self._streams[tenant]:
                    del self._streams[tenant]

        return close
