"""The agent loop as a library: plain Python, no Ray, no storage, no web server.

The public surface is what this package exports (``__all__``); README "The agent loop as a
library" shows it at work. In one call::

    from troupe.agentloop import create_response, stream_response

    response = await create_response(request, model, tools)      # the final Response
    async for event in stream_response(request, model, tools):   # its stream events
        ...

- ``request``: a ``POST /v1/responses`` body (a dict) or a validated
  :class:`~troupe.protocol.CreateResponseRequest`;
- ``model``: a :class:`ModelClient`: :class:`OpenAIChatClient` for any OpenAI-compatible
  server, ``troupe.sim.SimModel`` for the deterministic ``sim``, or your own (it streams
  :data:`ModelChunk` values: :class:`TextChunk`, :class:`ReasoningChunk`,
  :class:`ToolCallStart`, :class:`ToolCallArgumentsDelta`, then one :class:`TurnEnd`);
- ``tools``: ``{name: callable}``, or :class:`ToolExecutor` values such as
  :class:`LocalFunctionExecutor`.

One level down, the same loop in three steps (what Troupe's server does, and what the
one-call functions are made of): :func:`prepare` a request, :func:`run_loop` it for its
:data:`LoopEvent` values (module ``events``: the loop's semantic events, step traces and
checkpoints), and feed them to a :class:`WireWriter` (or :func:`collect_response`).

The other modules (``chat``, ``checkpoint``, ``code_interpreter``, ``compaction``, ``context``,
``decide``, ``file_search``, ``mcp``, ``shell``, ``transcript``) are the loop's internals, imported by Troupe's own
runtime: their names may change without notice. Names are imported on first use
(:mod:`troupe._lazy`), so a Ray worker that imports ``troupe.agentloop.tools`` does not
import the driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from troupe._lazy import lazy_exports

_HOMES = {
    ".respond": ["create_response", "stream_response", "Tools"],
    ".model": [
        "ModelClient",
        "ChatRequest",
        "ModelChunk",
        "TextChunk",
        "ReasoningChunk",
        "ToolCallStart",
        "ToolCallArgumentsDelta",
        "TurnEnd",
        "ToolCall",
        "TokenUsage",
        "ModelError",
    ],
    ".openai_client": ["OpenAIChatClient"],
    ".tools": ["ToolExecutor", "LocalFunctionExecutor"],
    ".driver": ["prepare", "run_loop", "PreparedTurn", "LoopSettings"],
    ".events": ["LoopEvent"],
    ".writer": ["WireWriter", "collect_response"],
}
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)

__all__ = [
    # one call
    "create_response", "stream_response", "Tools",
    # models
    "ModelClient", "OpenAIChatClient", "ChatRequest", "ModelChunk", "TextChunk", "ReasoningChunk", "ToolCallStart",
    "ToolCallArgumentsDelta", "TurnEnd", "ToolCall", "TokenUsage", "ModelError",
    # tools
    "ToolExecutor", "LocalFunctionExecutor",
    # the loop in three steps
    "prepare", "run_loop", "PreparedTurn", "LoopSettings", "LoopEvent", "WireWriter", "collect_response",
]  # fmt: skip

# The same names again, for type checkers and editors (tests/unit/test_lazy_exports.py keeps the three lists equal).
if TYPE_CHECKING:
    from .driver import LoopSettings, PreparedTurn, prepare, run_loop
    from .events import LoopEvent
    from .model import (
        ChatRequest,
        ModelChunk,
        ModelClient,
        ModelError,
        ReasoningChunk,
        TextChunk,
        TokenUsage,
        ToolCall,
        ToolCallArgumentsDelta,
        ToolCallStart,
        TurnEnd,
    )
    from .openai_client import OpenAIChatClient
    from .respond import Tools, create_response, stream_response
    from .tools import LocalFunctionExecutor, ToolExecutor
    from .writer import WireWriter, collect_response
