"""What every settings model of Troupe shares: its pydantic config and the ``module:function``
check. A module of its own, below both users: the runtime's settings
(:mod:`troupe.runtime.settings`) and the telemetry settings (:mod:`troupe.observe.settings`)."""

from __future__ import annotations

import re

from pydantic import ConfigDict

SETTINGS_CONFIG = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
"""Every settings model: immutable, unknown keys refused, each field's docstring its description."""

_TARGET = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*\Z")


def import_target(value: str) -> str:
    """Check a ``package.module:function`` reference (a pydantic ``AfterValidator``)."""
    if not _TARGET.match(value):
        raise ValueError(f"must look like 'package.module:function', got {value!r}")
    return value
