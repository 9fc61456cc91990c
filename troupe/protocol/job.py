"""A response to run, as it travels inside Troupe: the validated request, whose it is, its ids.

It crosses the ingress → host hop (pickled by Ray), and the hosts, the runs they keep and the
observer all read it; it lives here, beside the request it carries, so that none of them
imports another to name it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .request import CreateResponseRequest

__all__ = ["TurnJob"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnJob:
    """One response to run; picklable, it crosses the ingress → host hop."""

    tenant: str
    request: CreateResponseRequest
    response_id: str
    created_at: int
    thread_id: str
    """The conversation id, the chain's thread id, or a fresh one."""
    traceparent: str | None = None
    """The request's W3C ``traceparent`` header (kept only with traces on): the parent of its spans."""
    tracestate: str | None = None
