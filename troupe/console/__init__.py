"""The operator's console: a web page at ``/console``, its JSON API, and the step timeline.

- :mod:`.timeline` — a response's steps as bars, with the critical path (pure; ``troupe trace`` draws it too)
- :mod:`.api` — the page and ``/v1/troupe/console/...``, a router the API's FastAPI app includes
- ``static/`` — the page itself: HTML, vanilla JavaScript and CSS, drawn with SVG; no build step

Names are imported on first use, so that ``troupe trace`` reads a timeline without
importing FastAPI and the runtime. docs/observing.md shows the console.
"""

from __future__ import annotations

from troupe._lazy import lazy_exports

_HOMES = {
    ".timeline": ["Bar", "critical_path", "timeline", "traces_from_json"],
    ".api": ["Viewer", "console_router"],
}
__all__ = [name for names in _HOMES.values() for name in names]
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
