"""What machine a benchmark ran on: CPU model, cores, memory, load average, Python.

Read from ``/proc`` where it exists (Linux) with portable fall-backs, so a report always
says what it was measured on. Nothing here identifies the host (no hostname, no user).

Example::

    >>> info = machine_info()
    >>> sorted(info)[:3]
    ['cores', 'cpu_model', 'load_average']
"""

from __future__ import annotations

import os
import platform
from typing import Any

__all__ = ["machine_info", "describe_machine"]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _memory_bytes() -> tuple[int | None, int | None]:
    """(total, available) physical memory in bytes, when known."""
    try:
        fields: dict[str, int] = {}
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                name, _, rest = line.partition(":")
                fields[name] = int(rest.split()[0]) * 1024
        return fields.get("MemTotal"), fields.get("MemAvailable")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        memory = psutil.virtual_memory()
        return memory.total, memory.available
    except ImportError:
        return None, None


def machine_info() -> dict[str, Any]:
    """A JSON-ready description of this machine, right now."""
    total, available = _memory_bytes()
    try:
        load = [round(v, 2) for v in os.getloadavg()]
    except OSError:
        load = None
    return {
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": None if total is None else round(total / 2**30, 1),
        "memory_available_gib": None if available is None else round(available / 2**30, 1),
        "load_average": load,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }


def describe_machine(info: dict[str, Any]) -> str:
    """One line for a report, e.g. ``AMD EPYC, 2 cores, 23.5 GiB, load 0.4/0.6/0.9 at start``."""
    parts = [str(info.get("cpu_model") or "unknown CPU"), f"{info.get('cores')} cores"]
    if info.get("memory_gib") is not None:
        parts.append(f"{info['memory_gib']} GiB memory")
    if info.get("load_average"):
        parts.append("load average " + "/".join(f"{v:g}" for v in info["load_average"]) + " at start")
    parts.append(f"{info.get('os')}, Python {info.get('python')}")
    return ", ".join(parts)
