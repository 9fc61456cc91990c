"""Tools whose executions the tests count: each run is a row of a SQLite side table that the
tool itself writes, in a database file named by its arguments (so any process may run it:
the test, a Ray tool runner, a ``troupe serve`` started by the test)."""

from __future__ import annotations

import asyncio
import os
import sqlite3

from troupe.runtime.settings import DEFAULT_TOOLS, ToolSpec

COUNTED_TOOLS = DEFAULT_TOOLS + (
    ToolSpec(name="record", target="tests.side_effects:record", description="Record that it ran."),
    ToolSpec(name="gate", target="tests.side_effects:gate", description="Record that it ran; wait for a file."),
    ToolSpec(name="gate_again", target="tests.side_effects:gate", idempotent=True,
             description="Record that it ran; wait for a file. Safe to run twice."),
)  # fmt: skip
"""The example tools plus these: ``record`` and ``gate`` are not idempotent, ``gate_again`` is."""


def _add(db: str, key: str) -> None:
    with sqlite3.connect(db, timeout=30) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS executions (key TEXT NOT NULL)")
        conn.execute("INSERT INTO executions VALUES (?)", [key])


def executions(db: str, key: str) -> int:
    """How many times a tool ran with ``key``."""
    if not os.path.exists(db):
        return 0
    with sqlite3.connect(db, timeout=30) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS executions (key TEXT NOT NULL)")
        return conn.execute("SELECT count(*) FROM executions WHERE key = ?", [key]).fetchone()[0]


def record(db: str, key: str) -> str:
    _add(db, key)
    return f"recorded {key}"


async def gate(db: str, key: str, path: str) -> str:
    """Record the run, then return once ``path`` exists (the test opens the gate)."""
    await asyncio.to_thread(_add, db, key)
    while not os.path.exists(path):
        await asyncio.sleep(0.02)
    return f"{key} passed"
