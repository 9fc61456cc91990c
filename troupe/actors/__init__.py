"""The Ray layer: conversation hosts, placement, tool tasks, the storage actor, the runtime facade.

- :mod:`.runtime` — :class:`Runtime`, what the HTTP layer calls
- :mod:`.host` — :class:`ConversationHost`, the I/O shell around the agent loop
- :mod:`.placement` — replica / pooled / dedicated / local placement of conversations on hosts
- :mod:`.tool_tasks` — registered Python tools as Ray tasks
- :mod:`.storage_actor` — the single owner of the DuckDB file
- :mod:`.settings` — :class:`RuntimeSettings` and the embedded defaults

Names are imported on first use: a Ray worker that only runs a tool task
(``troupe.actors._tool_runner``) or an example tool must not pay for importing
the whole runtime.
"""

from __future__ import annotations

from troupe._lazy import lazy_exports

_HOMES = {
    ".host": ["ConversationHost"],
    "troupe.protocol.job": ["TurnJob"],
    ".hosting": ["HostFailed"],
    ".runtime": ["Runtime"],
    ".settings": ["RuntimeSettings", "ModelSpec", "ToolSpec", "DEFAULT_TOOLS"],
}
__all__ = [name for names in _HOMES.values() for name in names]
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
