"""Container actors on a real Ray: one detached, named actor per container owns its sandbox
(real bubblewrap); a second fleet (another host) reaches the same kernel; stopping a container
kills its sandbox's processes; an idle one ends itself."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest
import ray

from tests.servers import named_actor_exists, until, wait_for
from troupe.runtime.container_runs import BoxSpec
from troupe.runtime.ray.containers import RayFleet, container_actor_name
from troupe.runtime.settings import ContainersSettings, RuntimeSettings
from troupe.sandbox import Limits

pytestmark = pytest.mark.usefixtures("ray_session")


def shared(tmp_path: Path, **containers: Any) -> RuntimeSettings:
    """A namespace of its own, and the containers' directory named (as a filesystem every node
    shares): no storage actor is needed to place the actors beside it."""
    directory = ContainersSettings(directory=str(tmp_path), **containers)
    return RuntimeSettings(namespace=f"ci-{uuid.uuid4().hex[:6]}", containers=directory)


def box(tmp_path: Path, *, idle_s: float = 600.0) -> BoxSpec:
    container_id = f"cntr_{uuid.uuid4().hex[:12]}"
    directory = tmp_path / container_id
    directory.mkdir(mode=0o700)
    return BoxSpec(container_id, str(directory), Limits(), "bwrap", idle_s)


def kernels_of(directory: str) -> list[psutil.Process]:
    """The sandbox processes bound to ``directory`` (bwrap's command line names it)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "bwrap" in (cmdline[:1] or [""])[0] and directory in cmdline:
            found.append(process)
    return found


async def test_two_fleets_reach_one_kernel_and_stop_kills_it(tmp_path: Path) -> None:
    settings = shared(tmp_path)
    spec = box(tmp_path)
    first, second = RayFleet(settings), RayFleet(settings)  # two hosts' fleets
    made = await first.run_python(spec, "x = 6 * 7\nopen('out.txt', 'w').write('hi')", timeout_s=30)
    assert made.fresh and made.error is None and made.changed_files == ["out.txt"]
    again = await second.run_python(spec, "print(x)", timeout_s=30)
    assert (again.stdout, again.fresh) == ("42\n", False)
    shell = await second.run_shell(spec, ["cat out.txt", "exit 3"], timeout_s=30, max_output_length=None)
    assert [(r.stdout, r.exit_code) for r in shell] == [("hi", 0), ("", 3)]
    assert kernels_of(spec.directory), "the sandbox runs"

    await first.stop(spec.container_id)
    wait_for(lambda: not named_actor_exists(container_actor_name(spec.container_id), settings.namespace), what="the actor gone")
    wait_for(lambda: not kernels_of(spec.directory), what="the sandbox's processes gone")
    await first.stop(spec.container_id)  # stopping a stopped container is nothing
    assert (Path(spec.directory) / "out.txt").read_text() == "hi", "its files stay"


async def test_an_idle_container_actor_ends_itself(tmp_path: Path) -> None:
    settings = shared(tmp_path)
    spec = box(tmp_path, idle_s=1.0)
    fleet = RayFleet(settings)
    assert (await fleet.run_python(spec, "print('once')", timeout_s=30)).stdout == "once\n"
    wait_for(lambda: not named_actor_exists(container_actor_name(spec.container_id), settings.namespace), timeout_s=30,
             what="the idle actor gone")  # fmt: skip
    wait_for(lambda: not kernels_of(spec.directory), what="its sandbox's processes gone")
    # The next run starts a fresh actor and kernel over the same directory.
    later = await RayFleet(settings).run_python(spec, "print(open('/mnt/data/x', 'w').write('ab'))", timeout_s=30)
    assert (later.stdout, later.fresh) == ("2\n", True)
    await fleet.stop(spec.container_id)


async def test_a_container_no_node_has_room_for_fails_clearly(tmp_path: Path) -> None:
    settings = shared(tmp_path, start_timeout_s=2.0)
    spec = dataclasses.replace(box(tmp_path), limits=Limits(memory_bytes=1 << 40))  # a TiB: no node here has it
    with pytest.raises(RuntimeError, match="no node of the cluster had 1024 GiB of memory"):
        await RayFleet(settings).run_python(spec, "print(1)", timeout_s=30)
    assert not named_actor_exists(container_actor_name(spec.container_id), settings.namespace)


async def test_a_cancelled_run_is_cancelled_in_its_actor(tmp_path: Path) -> None:
    settings = shared(tmp_path)
    spec = box(tmp_path)
    fleet = RayFleet(settings)
    endless = asyncio.ensure_future(fleet.run_python(spec, "open('started', 'w').close()\nwhile True:\n    pass",
                                                     timeout_s=600))  # fmt: skip
    await until(lambda: (Path(spec.directory) / "started").exists(), what="the code running")
    endless.cancel()
    with pytest.raises(asyncio.CancelledError):
        await endless
    # Had the actor's call run on, this would wait its 600 s: a bound, not a speed.
    after = await asyncio.wait_for(fleet.run_python(spec, "print(1)", timeout_s=30), 30)
    assert (after.stdout, after.fresh) == ("1\n", True)
    await fleet.stop(spec.container_id)


async def test_a_fleet_keeps_one_spare_actor_that_the_next_container_runs_in(tmp_path: Path) -> None:
    settings = shared(tmp_path)
    fleet = RayFleet(settings)
    assert await fleet.reserve("4g") is None  # a spare is for the default memory limit only
    assert await fleet.reserve("1g") is None  # none yet: this starts one
    first_spare = fleet._spare
    assert first_spare is not None
    await until(lambda: first_spare.started.done(), timeout_s=60, what="the spare up")
    first = await fleet.reserve("1g")
    assert first == first_spare.container_id
    # Three more at once: each waits a little for the spare on its way, or goes without (None);
    # none is handed out twice, and none is left behind unused.
    more = [await fleet.reserve("1g") for _ in range(3)]
    taken = [first, *(c for c in more if c is not None)]
    assert len(set(taken)) == len(taken)
    spare = fleet._spare
    assert spare is not None
    await until(lambda: spare.started.done(), timeout_s=60, what="the last spare up")

    def named() -> set[str]:
        listed = ray.util.list_named_actors(all_namespaces=True)
        return {a["name"] for a in listed if a["namespace"] == settings.namespace}

    everyone = [*taken, spare.container_id]
    assert named() == {container_actor_name(c) for c in everyone}, "no orphan spare"
    # A container that took a reserved id runs in the spare's process.
    spare_id = ray.get_actor(container_actor_name(first), namespace=settings.namespace)._actor_id
    ran = await fleet.run_python(dataclasses.replace(box(tmp_path), container_id=first), "print(6 * 7)", timeout_s=30)
    assert (ran.stdout, ran.fresh) == ("42\n", True)
    assert ray.get_actor(container_actor_name(first), namespace=settings.namespace)._actor_id == spare_id
    for container_id in everyone:
        await fleet.stop(container_id)
    wait_for(lambda: not named(), what="every actor gone")
