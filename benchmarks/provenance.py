"""What every benchmark result records about its run: when, which commit, which machine, how.

Example::

    doc = run_record("benchmarks.subagents", argv, vars(args))
    doc["commit"], doc["machine"], doc["command"]
"""

from __future__ import annotations

import datetime
import json
import subprocess
from pathlib import Path
from typing import Any

from troupe.bench.machine import machine_info

from .targets import ROOT

__all__ = ["git", "run_record", "write_result"]


def git(*args: str) -> str:
    """``git args…`` in the checkout; its output, ``""`` when git is not there or fails."""
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def run_record(module: str, argv: list[str], params: dict[str, Any]) -> dict[str, Any]:
    """The head of a result document: ``created_at`` (UTC), ``commit`` and ``worktree_dirty``,
    ``machine`` (:func:`~troupe.bench.machine.machine_info`, its load average now), the
    ``command`` that reproduces it and its ``params``."""
    return {
        "created_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "commit": git("rev-parse", "--short", "HEAD") or "unknown",
        "worktree_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "machine": machine_info(),
        "command": " ".join([f".venv/bin/python -m {module}", *argv]),
        "params": params,
    }


def write_result(doc: dict[str, Any], kind: str, markdown: str, *, quick: bool = False) -> Path:
    """Write ``doc`` and its ``markdown`` report as ``benchmarks/results/<kind>/<date>-<commit>``
    ``.json`` and ``.md`` (a ``quick`` run's under ``benchmarks/scratch/results/``), print the
    report and where it went; the path without its suffix."""
    out = Path(ROOT) / "benchmarks" / ("scratch/results" if quick else "results") / kind
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{doc['created_at'][:10]}-{doc['commit']}"
    stem.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n")
    stem.with_suffix(".md").write_text(markdown)
    print(markdown)
    print(f"written: {stem}.json, {stem}.md")
    return stem
