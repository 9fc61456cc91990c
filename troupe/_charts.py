"""matplotlib, the one optional dependency of Troupe's charts (``pip install 'troupe[charts]'``).

The eval report's PNG charts, ``troupe trace --png`` and ``troupe bench --plot`` draw with it;
nothing else needs it. Each asks :func:`require_matplotlib` first, so that a missing
matplotlib is one clear error (:class:`ChartsUnavailable`), which the command line reports or,
for the eval report, skips the charts with a note.
"""

from __future__ import annotations

from types import ModuleType

__all__ = ["ChartsUnavailable", "require_matplotlib", "INSTALL_HINT"]

INSTALL_HINT = "pip install 'troupe[charts]' (or matplotlib)"


class ChartsUnavailable(RuntimeError):
    """matplotlib is not installed; the message says how to get it."""


def require_matplotlib() -> ModuleType:
    """``matplotlib.pyplot`` on the non-interactive Agg backend (no display needed).

    Raises:
        ChartsUnavailable: matplotlib is not installed.
    """
    try:
        import matplotlib
    except ImportError as exc:
        raise ChartsUnavailable(f"charts need matplotlib: {INSTALL_HINT}") from exc
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt
