"""The operator's console: a web page at ``/console``, its JSON API, and the step timeline.

- :mod:`.timeline` — a response's steps as bars, with the critical path (pure; ``troupe trace`` draws it too)
- :mod:`.api` — the page and ``/v1/troupe/console/...``, a router the API's FastAPI app includes
- ``static/`` — the page itself: HTML, vanilla JavaScript and CSS, drawn with SVG; no build step

Names are imported on first use, so that ``troupe trace`` reads a timeline without
importing FastAPI and the runtime. README "Observing Troupe" shows the console.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Bar", "Viewer", "console_router", "critical_path", "timeline", "traces_from_json"]

_HOMES = {
    "Bar": ".timeline",
    "critical_path": ".timeline",
    "timeline": ".timeline",
    "traces_from_json": ".timeline",
    "Viewer": ".api",
    "console_router": ".api",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name], __name__), name)
