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

import importlib
from typing import Any

__all__ = [
    "ConversationHost",
    "TurnJob",
    "HostFailed",
    "Runtime",
    "RuntimeSettings",
    "ModelSpec",
    "ToolSpec",
    "DEFAULT_TOOLS",
]

_HOMES = {
    "ConversationHost": ".host",
    "TurnJob": "troupe.protocol.job",
    "HostFailed": ".placement",
    "Runtime": ".runtime",
    "RuntimeSettings": ".settings",
    "ModelSpec": ".settings",
    "ToolSpec": ".settings",
    "DEFAULT_TOOLS": ".settings",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name], __name__), name)
