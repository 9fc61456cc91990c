"""The runtime: conversation hosts around the agent loop, and where they run.

Ray-free (they run in-process as on Ray):

- :mod:`.host` — :class:`ConversationHost`, the I/O shell around the agent loop: a thread's
  message cache, its turns one at a time, durable runs' checkpoints (:mod:`.runs`)
- :mod:`.hosting` — the :class:`~.hosting.Placement` interface and :class:`HostFailed`
- :mod:`.conversations`, :mod:`.prompts`, :mod:`.console_calls` — parts of the facade's API
- :mod:`.store_client` — the store as one async interface (in this process, or the storage actor)
- :mod:`.rag` — files and vector stores: ingestion and search; :mod:`._ingest`, one file's ingestion
- :mod:`.containers` — containers: the Containers API, and what a container's actor asks of its container
- :mod:`.agents` — agents: the Agents API's saved agent definitions
- :mod:`.mcp_policy`, :mod:`.mcp_session`, :mod:`.mcp_sse` — MCP: which servers, one session, the old transport
- :mod:`.settings` — :class:`RuntimeSettings` and the embedded defaults

On Ray (:mod:`.ray`): the placements, the storage actor, tool tasks and runners, MCP
connection actors, live SQL, ingestion tasks, batch evaluation. :mod:`.facade` —
:class:`Runtime`, what the HTTP layer calls — joins both.

Names are imported on first use: a Ray worker that only runs a tool task
(``troupe.runtime._tool_runner``) or an example tool must not pay for importing
the whole runtime.
"""

from __future__ import annotations

from troupe._lazy import lazy_exports

_HOMES = {
    ".host": ["ConversationHost"],
    "troupe.protocol.job": ["TurnJob"],
    ".hosting": ["HostFailed"],
    ".facade": ["Runtime"],
    ".settings": ["RuntimeSettings", "ModelSpec", "ToolSpec", "DEFAULT_TOOLS"],
}
__all__ = [name for names in _HOMES.values() for name in names]
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
