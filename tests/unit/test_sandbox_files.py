"""The host's walk of a container's directory (troupe/sandbox/_files.py): changed files, disk
use, and handing entries to the container's uid, never through a link the code made."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import troupe.sandbox
from troupe.sandbox import _files


def test_the_package_exports_what_it_names() -> None:
    assert all(hasattr(troupe.sandbox, name) for name in troupe.sandbox.__all__)


def test_changed_files_and_disk_use(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b.txt").write_text("b")
    before = _files.scan(tmp_path)
    (tmp_path / "a.txt").write_text("changed, and longer")
    (tmp_path / "d" / "c.txt").write_bytes(b"x" * 10000)
    after = _files.scan(tmp_path)
    assert _files.changed(before, after) == ["a.txt", "d/c.txt"]
    assert after.disk_bytes >= before.disk_bytes + 10000


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_links_are_neither_followed_nor_chowned_through(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("server's")
    data = tmp_path / "data"
    data.mkdir()
    (data / "to_dir").symlink_to(outside)
    (data / "to_file").symlink_to(outside / "secret")
    (data / "mine").write_text("m")
    result = _files.scan(data, owner=200_123)
    assert set(result.files) == {"mine"}
    assert (data / "mine").stat().st_uid == 200_123
    assert (data / "to_dir").lstat().st_uid == 200_123  # the link itself, not its target
    assert outside.stat().st_uid == 0 and (outside / "secret").stat().st_uid == 0
