"""The runtime's containers (troupe.runtime.containers.ContainerService) in process, over the
async store: the API's errors, and what a container actor will ask (its directory, marking it
active, registering the files its code wrote, the sweep)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from troupe.protocol import InvalidRequest, NotFound
from troupe.runtime import Runtime, RuntimeSettings
from troupe.runtime.settings import ContainersSettings


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    settings = RuntimeSettings(storage_path=":memory:",
                               containers=ContainersSettings(directory=str(tmp_path / "boxes")))  # fmt: skip
    made = Runtime.local(settings)
    yield made
    await made.close()


async def _clock(runtime: Runtime) -> Clock:
    """The store's clock, made movable (the containers area runs on the files' thread)."""
    await runtime.containers.sweep()  # opens the area
    tables = runtime.store._rag.containers  # type: ignore[attr-defined]
    tables.clock = Clock(tables.clock())
    return tables.clock


async def test_the_directory_is_where_the_settings_say(runtime: Runtime, tmp_path: Path) -> None:
    made = await runtime.containers.create_container("acme", {"name": "n"})
    path = await runtime.containers.directory("acme", made["id"])
    assert Path(path) == tmp_path / "boxes" / made["id"] and Path(path).is_dir()
    with pytest.raises(NotFound) as raised:
        await runtime.containers.directory("other", made["id"])
    assert raised.value.param == "container_id"


async def test_the_caps_come_from_the_settings(runtime: Runtime) -> None:
    with pytest.raises(InvalidRequest) as raised:
        await runtime.containers.create_container("acme", {"name": "n", "memory_limit": "16g"})
    assert (raised.value.param, raised.value.code) == ("memory_limit", "unsupported_value")
    made = await runtime.containers.create_container("acme", {"name": "n", "memory_limit": "4g"})
    assert made["memory_limit"] == "4g"
    with pytest.raises(InvalidRequest) as raised:
        await runtime.containers.create_container("acme", {"name": "n", "expires_after": {"anchor": "last_active_at",
                                                                                         "minutes": 1441}})  # fmt: skip
    assert raised.value.param == "expires_after.minutes"


async def test_a_run_marks_it_active_and_registers_what_the_code_wrote(runtime: Runtime) -> None:
    clock = await _clock(runtime)
    made = await runtime.containers.create_container(
        "acme", {"name": "n", "expires_after": {"anchor": "last_active_at", "minutes": 1}})  # fmt: skip
    cid = made["id"]
    directory = Path(await runtime.containers.directory("acme", cid))
    for _ in range(3):  # runs keep it alive past its minute
        clock.now += 45
        assert (await runtime.containers.mark_active("acme", cid))["status"] == "running"
        (directory / "out.csv").write_text(f"{clock.now}\n")
        [written] = await runtime.containers.register_files("acme", cid, ["out.csv"])
        assert (written["path"], written["source"]) == ("/mnt/data/out.csv", "assistant")
    assert (await runtime.containers.file_content("acme", cid, written["id"]))[1] == f"{clock.now}\n".encode()
    clock.now += 61
    assert await runtime.containers.sweep() == [("acme", cid)]
    assert not directory.exists()
    with pytest.raises(InvalidRequest) as raised:
        await runtime.containers.mark_active("acme", cid)
    assert raised.value.code == "container_expired"
    with pytest.raises(InvalidRequest):
        await runtime.containers.directory("acme", cid)
    assert (await runtime.containers.get_container("acme", cid))["status"] == "expired"
    await runtime.containers.delete_container("acme", cid)
    with pytest.raises(NotFound):
        await runtime.containers.mark_active("acme", cid)


async def test_unknown_ids_are_404s_naming_them(runtime: Runtime) -> None:
    made = await runtime.containers.create_container("acme", {"name": "n"})
    for call, param in (
        (runtime.containers.get_container("acme", "cntr_nope"), "container_id"),
        (runtime.containers.delete_container("acme", "cntr_nope"), "container_id"),
        (runtime.containers.get_file("acme", made["id"], "cfile_nope"), "file_id"),
        (runtime.containers.file_content("acme", made["id"], "cfile_nope"), "file_id"),
        (runtime.containers.delete_file("acme", made["id"], "cfile_nope"), "file_id"),
        (runtime.containers.create_file("acme", made["id"], file_id="file-nope"), "file_id"),
        (runtime.containers.create_container("acme", {"name": "n", "file_ids": ["file-nope"]}), "file_ids"),
    ):
        with pytest.raises(NotFound) as raised:
            await call
        assert raised.value.param == param
