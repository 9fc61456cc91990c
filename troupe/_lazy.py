"""Names a package exports but imports on first use (PEP 562).

A package whose ``__init__`` imported all its modules would make every importer of one light
module pay for the heavy ones: a Ray worker that only runs a tool task imports
``troupe.agentloop.tools``, not the driver; ``troupe --help`` imports no httpx. Such a package
lists where each name lives and lets this module import it when it is first read::

    __all__ = ["Runtime", "RuntimeSettings"]
    __getattr__, __dir__ = lazy_exports(__name__, {".runtime": ["Runtime"], ".settings": ["RuntimeSettings"]})

Reading one name imports its module and sets all that module's names on the package, so later
reads are plain attribute lookups. A name that is also its module's (``troupe.console.timeline``)
is the function once read through the package; a direct ``import troupe.console.timeline``
before that binds the module to it, as Python binds every submodule it imports.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, homes: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's module ``__getattr__`` and ``__dir__`` for names imported on first use.

    Args:
        package: the package's ``__name__``.
        homes: module (relative to ``package``, e.g. ``".host"``) → the names it exports.

    Returns:
        ``(__getattr__, __dir__)``, to assign at the package's top level.
    """
    homes = {module: tuple(names) for module, names in homes.items()}
    home_of = {name: module for module, names in homes.items() for name in names}

    def __getattr__(name: str) -> Any:  # noqa: N807 - the module hook's name
        home = home_of.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(home, package)
        target = sys.modules[package]
        for exported in homes[home]:
            setattr(target, exported, getattr(module, exported))
        return getattr(module, name)

    def __dir__() -> list[str]:  # noqa: N807
        return sorted({*vars(sys.modules[package]), *home_of})

    return __getattr__, __dir__
