"""The sandbox's values: its limits, what a call returns, its errors.

Errors::

    SandboxError (RuntimeError)      the sandbox could not start or restart its kernel
    └── SandboxUnavailable           the isolation tool (bubblewrap) or the sandbox's packages are missing

What user code does wrong is never an exception: a call returns a result whose ``error`` and
``limit`` say what happened, and the sandbox stays usable for the next call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "CommandResult",
    "Isolation",
    "LimitHit",
    "Limits",
    "PythonResult",
    "SandboxError",
    "SandboxUnavailable",
]

GiB = 1 << 30
MiB = 1 << 20

Isolation = Literal["bwrap", "none"]
"""``bwrap``: bubblewrap namespaces, an unprivileged uid, rlimits. ``none``: a plain subprocess
with rlimits only, for trusted single-user use (docs/sandbox.md)."""

LimitHit = Literal["timeout", "memory", "cpu", "processes", "file_size", "disk", "crashed"]
"""Which limit ended or spoiled a call; ``crashed`` is the kernel dying on its own (a signal)."""


class SandboxError(RuntimeError):
    """The sandbox could not start (or restart) its kernel: the message says why, with what
    the kernel wrote to its stderr. Picklable: its one argument is the message."""


class SandboxUnavailable(SandboxError):
    """What the sandbox needs is missing on this machine: bubblewrap (the message names the
    package and the command that installs it) or the sandbox's Python packages."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """What one container's code may use. Each is enforced as docs/sandbox.md says: rlimits
    inside the sandbox, the disk and the wall clock by the supervisor that runs the calls."""

    memory_bytes: int = 1 * GiB
    """Address space of each process (RLIMIT_AS): past it, allocations fail (MemoryError)."""
    cpu_seconds: float = 60.0
    """CPU time of one call (RLIMIT_CPU, renewed before each call): past it, SIGXCPU kills the kernel."""
    max_processes: int = 64
    """Processes and threads the sandbox's uid may have at once (RLIMIT_NPROC): fork fails past it."""
    max_file_bytes: int = 256 * MiB
    """Largest file the code may write (RLIMIT_FSIZE): past it, the write fails with EFBIG."""
    max_disk_bytes: int = 1 * GiB
    """Disk use of the whole /mnt/data: a call that grows it past this is killed."""
    tmp_bytes: int = 64 * MiB
    """Size of the private tmpfs /tmp (and /dev/shm); it is memory, so it is kept small."""
    niceness: int = 10
    """How much lower than the server's the code's CPU priority is (``nice -n``): busy
    containers slow each other, not the server that streams the answers."""


@dataclass(slots=True, kw_only=True)
class PythonResult:
    """What one ``run_python`` call did."""

    stdout: str = ""
    """What the code printed, then the repr of its last expression when that is not None (as a notebook shows it)."""
    stderr: str = ""
    """What the code wrote to stderr; a restart's notice is appended here and to ``error``."""
    error: str | None = None
    """The traceback when the code raised (or the notice of what killed it), else None."""
    images: list[bytes] = field(default_factory=list)
    """PNG bytes of each matplotlib figure open after the call (then closed)."""
    limit: LimitHit | None = None
    """The limit the call hit, if any."""
    restarted: bool = False
    """The kernel was killed and started again because of this call: variables are gone, files stay."""
    fresh: bool = False
    """The call was the first of its kernel: the sandbox's first, or the first after a restart."""
    changed_files: list[str] = field(default_factory=list)
    """Regular files under /mnt/data created or modified by the call, relative, sorted."""
    duration_s: float = 0.0
    """Wall-clock time of the call, as the supervisor measured it."""


@dataclass(slots=True, kw_only=True)
class CommandResult:
    """What one shell command of ``run_shell`` did."""

    command: str
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    """The command's exit status (128 + n for signal n, as sh reports it); None when the sandbox killed it."""
    timed_out: bool = False
    limit: LimitHit | None = None
