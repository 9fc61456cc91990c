"""What the code_interpreter's runner makes of a sandbox's run, the limits a container gets,
and the in-process fleet (real sandboxes, no Ray)."""

from __future__ import annotations

import base64
from pathlib import Path

from troupe.runtime.container_runs import BoxSpec, LocalFleet, box_limits, code_run
from troupe.runtime.settings import ContainersSettings
from troupe.sandbox import PythonResult

from .sandbox_support import LIMITS, needs_bwrap

NOTE = "[sandbox] the call ran past its 2 s timeout and was killed: the Python kernel was restarted\n"


def test_a_limit_hit_tells_its_notice_once_after_what_was_printed() -> None:
    result = PythonResult(stdout="started\n", stderr="warning: slow\n" + NOTE, error=NOTE, limit="timeout",
                          images=[b"\x89PNG fake"], restarted=True)  # fmt: skip
    run = code_run(result, [{"id": "cfile_1", "path": "/mnt/data/out/report.csv"}])
    assert run.logs == "started\nwarning: slow\n" + NOTE
    assert (run.failed, run.limit) == (False, "timeout")
    assert run.images == ("data:image/png;base64," + base64.b64encode(b"\x89PNG fake").decode(),)
    [written] = run.files
    assert (written.file_id, written.filename, written.path) == ("cfile_1", "report.csv", "/mnt/data/out/report.csv")


def test_code_that_raised_failed_and_its_traceback_ends_the_logs() -> None:
    traceback = "Traceback (most recent call last):\n  ...\nZeroDivisionError: division by zero\n"
    run = code_run(PythonResult(stdout="1\n", error=traceback), [])
    assert (run.logs, run.failed, run.limit, run.files) == ("1\n" + traceback, True, None, ())


def test_a_containers_limits_are_its_memory_limit_and_the_settings() -> None:
    settings = ContainersSettings(cpu_seconds=5, max_processes=8, max_disk_bytes=1 << 20)
    limits = box_limits(settings, "4g")
    assert (limits.memory_bytes, limits.cpu_seconds, limits.max_processes, limits.max_disk_bytes) == (
        4 << 30, 5, 8, 1 << 20)  # fmt: skip
    assert box_limits(settings, "64g").memory_bytes == 64 << 30


@needs_bwrap
async def test_the_local_fleet_closes_a_sandbox_idle_past_its_time(tmp_path: Path) -> None:
    def spec(name: str, idle_s: float) -> BoxSpec:
        (tmp_path / name).mkdir(mode=0o700)
        return BoxSpec(name, str(tmp_path / name), LIMITS, "bwrap", idle_s)

    fleet = LocalFleet()
    brief, lasting = spec("cntr_brief", 0.0), spec("cntr_lasting", 600.0)
    try:
        assert (await fleet.run_python(brief, "x = 1", timeout_s=30)).fresh
        assert (await fleet.run_python(lasting, "y = 2", timeout_s=30)).fresh  # closes brief: idle past 0 s
        again = await fleet.run_python(brief, "print(x)", timeout_s=30)
        assert again.fresh and "NameError" in (again.error or "")  # a new kernel
        kept = await fleet.run_python(lasting, "print(y)", timeout_s=30)
        assert (kept.stdout, kept.fresh) == ("2\n", False)
    finally:
        await fleet.close()
