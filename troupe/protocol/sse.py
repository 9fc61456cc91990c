"""Server-sent-event framing for Responses streams: one atomic frame per event.

Each event is written as one atomic frame::

    event: response.output_text.delta
    data: {"type":"response.output_text.delta",...}
    <blank line>

with LF line endings only (the Open Responses parser sees no events with CRLF),
``event:`` equal to the JSON ``type``, and the JSON on a single line. A stream
ends with :data:`SSE_DONE`.

Example::

    >>> encode_sse({"type": "response.in_progress", "sequence_number": 1})
    b'event: response.in_progress\\ndata: {"type":"response.in_progress","sequence_number":1}\\n\\n'
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["SSE_DONE", "SSE_KEEPALIVE", "SSE_MEDIA_TYPE", "encode_sse"]

SSE_DONE = b"data: [DONE]\n\n"
"""The terminal sentinel frame, sent after the terminal ``response.*`` event."""

SSE_KEEPALIVE = b": keepalive\n\n"
"""A comment frame: keeps proxies from closing an idle stream; clients ignore it."""

SSE_MEDIA_TYPE = "text/event-stream"
"""The ``Content-Type`` of a stream."""


def encode_sse(event: Mapping[str, Any]) -> bytes:
    """Frame one stream event as ``event: <type>\\ndata: <json>\\n\\n`` (UTF-8).

    Args:
        event: a JSON-ready stream event; must carry a string ``type``.

    Returns:
        The frame bytes, ready to write in one piece.

    Raises:
        ValueError: the event has no string ``type``.
    """
    kind = event.get("type")
    if not isinstance(kind, str) or not kind or "\n" in kind or "\r" in kind:
        raise ValueError(f"an SSE event needs a one-line string 'type', got {kind!r}")
    # json.dumps escapes every control character inside strings, so the payload is
    # always one line; compact separators keep frames small.
    data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    return f"event: {kind}\ndata: {data}\n\n".encode()
