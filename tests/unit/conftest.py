"""Fixtures of the in-process runtime tests (no Ray)."""

from __future__ import annotations

import pytest

from troupe.runtime import Runtime, RuntimeSettings


@pytest.fixture
async def runtime(tmp_path):
    """``Runtime.local`` over a DuckDB file of its own."""
    rt = Runtime.local(RuntimeSettings(storage_path=str(tmp_path / "t.duckdb")))
    yield rt
    await rt.close()
