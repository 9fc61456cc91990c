"""Reading a request's body within a size limit: refused (413) as soon as it is over, before
the rest of it is read, whether its ``Content-Length`` says so or its bytes do."""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request

from troupe.protocol import ProtocolError

__all__ = ["read_within"]


async def read_within(request: Request, cap: int, too_large: Callable[[], ProtocolError]) -> bytes:
    """The body's bytes; ``too_large()`` is raised once it passes ``cap`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise too_large()
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise too_large()
        chunks.append(chunk)
    return b"".join(chunks)
