"""Stopping an ingress replica: refuse new requests, let those in flight finish within a grace period.

:class:`Stopping` is one replica's state, kept by :class:`StoppingMiddleware`, which wraps the
whole app: it counts every HTTP request in flight and, once :meth:`Stopping.stop` was called,
answers every new one ``503`` ``server_shutting_down`` with ``Retry-After`` (the ``openai``
SDK waits that long and retries; ``/health`` answers 503 too, for a load balancer).
``stop(grace_s)`` returns once no counted request is in flight, or after ``grace_s``.

A request that only follows a background run (``"background": true, "stream": true``, or
``GET /v1/responses/{id}?stream=true``) is not waited for (:meth:`Stopping.release`): the
run is durable and goes on at the next start, where its client reconnects with
``starting_after``.

Example::

    stopping = Stopping()
    app.add_middleware(StoppingMiddleware, stopping=stopping, render=error_response)
    ...
    finished = await stopping.stop(grace_s=3.0)   # False: requests were still running
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from troupe.protocol import ProtocolError

from .limits import RetryLater

__all__ = ["ShuttingDown", "Stopping", "StoppingMiddleware"]

_TICKET = "troupe.stopping"
"""The scope key under which a counted request keeps its ticket (for :meth:`Stopping.release`)."""


class ShuttingDown(RetryLater):
    """503 ``server_shutting_down``: the replica is stopping; ``Retry-After`` says when to come back."""

    default_status = 503
    default_type = "server_error"
    default_code = "server_shutting_down"


class _Ticket:
    __slots__ = ("counted",)

    def __init__(self) -> None:
        self.counted = True


class Stopping:
    """A replica's requests in flight, and whether it is stopping."""

    def __init__(self) -> None:
        self.stopping = False
        """Set by :meth:`stop`: new requests are refused from then on."""
        self.in_flight = 0
        """Requests running now that a stop waits for."""
        self._idle = asyncio.Event()
        self._idle.set()

    def admit(self, scope: Scope) -> bool:
        """Count the request of ``scope`` in; False (not counted) once the replica is stopping."""
        if self.stopping:
            return False
        scope[_TICKET] = _Ticket()
        self.in_flight += 1
        self._idle.clear()
        return True

    def release(self, scope: Scope) -> None:
        """Stop counting the request of ``scope``: a stop does not wait for it (idempotent)."""
        ticket = scope.get(_TICKET)
        if ticket is not None and ticket.counted:
            ticket.counted = False
            self.in_flight -= 1
            if not self.in_flight:
                self._idle.set()

    async def stop(self, grace_s: float) -> bool:
        """Refuse new requests from now on; return once none counted is in flight (True), or
        after ``grace_s`` (False)."""
        self.stopping = True
        try:
            async with asyncio.timeout(grace_s):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True


class StoppingMiddleware:
    """Counts every HTTP request in flight; refuses each with 503 once the replica is stopping."""

    def __init__(self, app: ASGIApp, *, stopping: Stopping, render: Callable[[ProtocolError], Any]) -> None:
        self.app = app
        self.stopping = stopping
        self.render = render

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not self.stopping.admit(scope):
            refused = ShuttingDown("The server is shutting down; retry the request after the time in Retry-After.")
            await self.render(refused)(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.stopping.release(scope)
