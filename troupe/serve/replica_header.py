"""The ``Troupe-Replica`` answer header: which ingress replica hosts the thread a request was about.

With several ingress replicas (``[server] num_replicas``), each hosts the threads whose id
hashes to its rank, and a turn that reaches another is handed over (docs/cluster.md). A load
balancer cannot compute that hash, but it can route on a header: every answer about a
conversation or chain says which replica hosts it (``Troupe-Replica: 1``), and a client that
sends the header back with the thread's next requests lets a balancer that maps it to that
replica's port skip the hand-off. Troupe itself ignores the header on requests: a request
sent to the wrong replica is still handed to the right one.

Installed only with several replicas; one replica answers no such header.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from troupe.runtime.hosting import HOSTING_REPLICA

__all__ = ["REPLICA_HEADER", "ReplicaHeaderMiddleware"]

REPLICA_HEADER = "troupe-replica"


class ReplicaHeaderMiddleware:
    """Adds ``Troupe-Replica: <rank>`` to an answer when the request's thread has a hosting replica."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        noted: list[int] = []  # the placement notes the hosting replica's rank here
        token = HOSTING_REPLICA.set(noted)

        async def named(message: Message) -> None:
            if message["type"] == "http.response.start" and noted:
                header = (REPLICA_HEADER.encode(), str(noted[-1]).encode())
                message = {**message, "headers": [*message.get("headers", ()), header]}
            await send(message)

        try:
            await self.app(scope, receive, named)
        finally:
            HOSTING_REPLICA.reset(token)
