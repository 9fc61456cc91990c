"""What the sandbox tests share: small limits, and a Sandbox started over a container directory
that sits where a server keeps them (beside a fake DuckDB file)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from troupe.sandbox import DEFAULT_PACKAGES, Isolation, Limits, Sandbox

MiB = 1 << 20

# Small enough that the escape tests stay fast and the machine stays fine.
LIMITS = Limits(
    memory_bytes=768 * MiB,
    cpu_seconds=5,
    max_processes=24,
    max_file_bytes=8 * MiB,
    max_disk_bytes=24 * MiB,
    tmp_bytes=16 * MiB,
)

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is missing (`make test` installs it: apt-get install bubblewrap)"
)
needs_packages = pytest.mark.skipif(
    not DEFAULT_PACKAGES.is_dir(), reason=f"the sandbox's packages are missing at {DEFAULT_PACKAGES}: `make install`"
)


def container_dir(tmp_path: Path) -> Path:
    """``<storage>/containers/cntr_test``, with the storage's DuckDB file two levels up; made
    with the modes the store gives them (0700: only the server's user may enter)."""
    storage = tmp_path / "storage"
    (storage / "containers").mkdir(parents=True, mode=0o700)
    (storage / "troupe.duckdb").write_text("SECRET-DUCKDB-CONTENT")
    (storage / "containers" / "neighbour.txt").write_text("SECRET-NEIGHBOUR")
    (storage / "containers" / "cntr_test").mkdir(mode=0o700)
    return storage / "containers" / "cntr_test"


async def started(tmp_path: Path, *, isolation: Isolation = "bwrap", limits: Limits = LIMITS) -> AsyncIterator[Sandbox]:
    packages = DEFAULT_PACKAGES if DEFAULT_PACKAGES.is_dir() else None
    box = Sandbox(container_dir(tmp_path), limits, isolation=isolation, packages=packages)
    await box.start()
    try:
        yield box
    finally:
        await box.close()
