"""Untrusted code for one container, Ray-free and DuckDB-free: a persistent Python kernel and
shell commands in a bubblewrap sandbox, bounded by the container's limits (docs/sandbox.md).

- :mod:`.sandbox` — Sandbox: start, run_python, run_shell, close
- :mod:`.types` — Limits, PythonResult, CommandResult, the errors (SandboxError, SandboxUnavailable)
- :mod:`._launch` — the bwrap command line, the sandbox's /etc and environment, per-container uids
- :mod:`._kernel` — the REPL that runs inside (standard library only)
- :mod:`._files` — the container's directory from the host: changed files, disk use

It imports nothing of troupe: the container actor (runtime/) builds one Sandbox per container.
"""

from ._launch import check_available
from .sandbox import DEFAULT_PACKAGES, Sandbox
from .types import CommandResult, Isolation, LimitHit, Limits, PythonResult, SandboxError, SandboxUnavailable

__all__ = [
    "DEFAULT_PACKAGES",
    "CommandResult",
    "Isolation",
    "LimitHit",
    "Limits",
    "PythonResult",
    "Sandbox",
    "SandboxError",
    "SandboxUnavailable",
    "check_available",
]
