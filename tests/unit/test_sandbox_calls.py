"""The sandbox as a notebook and a shell: state kept between calls, figures, files, commands.
Each test starts real sandboxed processes (bubblewrap), never Ray."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.servers import until
from troupe.sandbox import Sandbox, SandboxUnavailable, check_available

from .sandbox_support import container_dir, needs_bwrap, needs_packages, started

pytestmark = needs_bwrap


@pytest.fixture
async def box(tmp_path: Path):
    async for sandbox in started(tmp_path):
        yield sandbox


async def test_arithmetic_and_state_across_calls(box: Sandbox) -> None:
    first = await box.run_python("x = 6 * 7\nprint('set')", timeout_s=10)
    assert (first.stdout, first.error, first.limit, first.restarted) == ("set\n", None, None, False)
    second = await box.run_python("x", timeout_s=10)  # the last expression's repr, as a notebook shows it
    assert second.stdout == "42\n"
    third = await box.run_python("x + 1\nNone", timeout_s=10)  # only the last expression is shown
    assert third.stdout == ""


async def test_an_exception_is_a_traceback_and_the_kernel_stays(box: Sandbox) -> None:
    await box.run_python("kept = 1", timeout_s=10)
    result = await box.run_python("import sys\nprint('to err', file=sys.stderr)\n1 / 0", timeout_s=10)
    assert result.error is not None and "ZeroDivisionError" in result.error and '<cell 2>", line 3' in result.error
    assert result.stderr == "to err\n" and not result.restarted and result.limit is None
    assert (await box.run_python("kept", timeout_s=10)).stdout == "1\n"


async def test_output_of_c_code_and_child_processes_is_caught(box: Sandbox) -> None:
    result = await box.run_python(
        "import os\nos.write(1, b'raw\\n')\nos.system('echo child; echo e >&2')", timeout_s=10
    )
    assert result.stdout == "raw\nchild\n0\n" and result.stderr == "e\n"


async def test_stdin_is_empty_and_prints_cannot_forge_a_reply(box: Sandbox) -> None:
    code = "import struct, json\nprint(struct.pack('>I', 20) + b'{\"id\": 1, \"x\": 1}')\ninput()"
    result = await box.run_python(code, timeout_s=10)
    assert result.error is not None and "EOFError" in result.error
    assert (await box.run_python("2 + 2", timeout_s=10)).stdout == "4\n"


@needs_packages
async def test_a_matplotlib_figure_comes_back_as_png(box: Sandbox) -> None:
    code = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')"
    result = await box.run_python(code, timeout_s=30)
    assert result.error is None, result.error
    assert len(result.images) == 1 and result.images[0].startswith(b"\x89PNG\r\n\x1a\n")
    again = await box.run_python("1", timeout_s=10)  # shown once, then closed
    assert again.images == []


@needs_packages
async def test_a_csv_written_in_mnt_data_is_read_back_and_reported(box: Sandbox) -> None:
    (box.directory / "input.csv").write_text("a,b\n1,2\n3,4\n")  # a file the server put there (as root)
    code = (
        "import pandas as pd\n"
        "df = pd.read_csv('/mnt/data/input.csv')\n"
        "df['c'] = df.a + df.b\n"
        "df.to_csv('out.csv', index=False)\n"
        "with open('input.csv', 'a') as f: f.write('5,6\\n')\n"
        "import os; os.makedirs('sub', exist_ok=True); open('sub/n.txt', 'w').write('n')\n"
        "os.symlink('/etc/passwd', 'link')\n"
        "int(df.c.sum())"
    )
    result = await box.run_python(code, timeout_s=30)
    assert result.error is None, result.error
    assert result.stdout == "10\n"
    assert result.changed_files == ["input.csv", "out.csv", "sub/n.txt"]  # links are never reported
    assert (box.directory / "out.csv").read_text() == "a,b,c\n1,2,3\n3,4,7\n"
    unchanged = await box.run_python("open('out.csv').read()", timeout_s=10)
    assert "3,4,7" in unchanged.stdout and unchanged.changed_files == []


async def test_shell_commands_exit_codes_and_stderr(box: Sandbox) -> None:
    (box.directory / "f.txt").write_text("hello")
    results = await box.run_shell(
        ["echo out; echo err >&2; exit 3", "cat f.txt && pwd", "id -u", "python3 -c 'print(2 ** 10)'"], timeout_s=10
    )
    assert [(r.stdout, r.stderr, r.exit_code) for r in results[:2]] == [
        ("out\n", "err\n", 3),
        ("hello/mnt/data\n", "", 0),
    ]
    assert results[2].stdout.strip() == str(box.uid if box.uid is not None else os.getuid())
    assert results[3].stdout == "1024\n"
    assert all(not r.timed_out and r.limit is None for r in results)


async def test_shell_output_is_cut_at_max_output_length(box: Sandbox) -> None:
    (result,) = await box.run_shell(
        ["yes | head -c 100000; yes e | head -c 5000 >&2"], timeout_s=10, max_output_length=100
    )
    assert result.stdout == "y\n" * 50 and len(result.stderr) == 100 and result.exit_code == 0


async def test_a_missing_bwrap_is_refused_naming_the_package(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        check_available("bwrap", bwrap=str(tmp_path / "no-such-bwrap"))
    box = Sandbox(container_dir(tmp_path), bwrap=str(tmp_path / "no-such-bwrap"), packages=None)
    with pytest.raises(SandboxUnavailable, match="dnf install bubblewrap"):
        await box.start()
    await box.close()


async def test_isolation_none_runs_the_same_kernel(tmp_path: Path) -> None:
    async for box in started(tmp_path, isolation="none"):
        await box.run_python("y = 5", timeout_s=10)
        result = await box.run_python("import os\nprint(os.getcwd())\ny * 2", timeout_s=10)
        assert result.stdout == f"{box.directory}\n10\n"
        (shell,) = await box.run_shell(["echo $HOME; exit 4"], timeout_s=10)
        assert shell.exit_code == 4 and "troupe-sandbox-" in shell.stdout


async def test_a_crash_restarts_the_kernel_and_says_so(box: Sandbox) -> None:
    (box.directory / "kept.txt").write_text("files stay")
    crash = await box.run_python("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", timeout_s=10)
    assert crash.limit == "crashed" and crash.restarted and "SIGSEGV" in (crash.error or "")
    assert "restarted" in crash.stderr
    exited = await box.run_python("import os\nos._exit(3)", timeout_s=10)
    assert exited.limit == "crashed" and "exited with status 3" in (exited.error or "")
    assert (await box.run_python("open('kept.txt').read()", timeout_s=10)).stdout == "'files stay'\n"


async def test_concurrent_calls_run_one_after_another(box: Sandbox) -> None:
    await box.run_python("n = 0", timeout_s=10)
    step = "import time\nv = n\ntime.sleep(0.05)\nn = v + 1"
    await asyncio.gather(*(box.run_python(step, timeout_s=10) for _ in range(4)))
    assert (await box.run_python("n", timeout_s=10)).stdout == "4\n"


async def test_close_ends_a_call_under_way_at_once(box: Sandbox) -> None:
    call = asyncio.ensure_future(box.run_python("while True:\n    pass", timeout_s=60))
    while not box._lock.locked():  # the call has begun
        await asyncio.sleep(0.01)
    await box.close()
    result = await call
    assert result.limit == "crashed" and not result.restarted and "closing" in (result.error or "")
    assert result.duration_s < 10


async def test_missing_packages_are_refused_naming_make_install(tmp_path: Path) -> None:
    box = Sandbox(container_dir(tmp_path), packages=tmp_path / "no-packages")
    with pytest.raises(SandboxUnavailable, match="make install"):
        await box.start()


async def test_a_cancelled_call_stops_its_code_and_the_next_starts_fresh(box: Sandbox) -> None:
    assert (await box.run_python("kept = 1", timeout_s=10)).fresh
    endless = asyncio.ensure_future(box.run_python("open('started', 'w').close()\nwhile True:\n    pass", timeout_s=600))
    await until(lambda: (box.directory / "started").exists())
    endless.cancel()
    with pytest.raises(asyncio.CancelledError):
        await endless
    after = await asyncio.wait_for(box.run_python("print(1)", timeout_s=10), 20)  # a bound, not a speed
    assert (after.stdout, after.fresh) == ("1\n", True)  # a new kernel: the loop was killed with the old one
    command = asyncio.ensure_future(box.run_shell(["touch begun; sleep 600"], timeout_s=600))
    await until(lambda: (box.directory / "begun").exists())
    command.cancel()
    with pytest.raises(asyncio.CancelledError):
        await command
    [done] = await asyncio.wait_for(box.run_shell(["echo next"], timeout_s=10), 20)
    assert (done.stdout, done.exit_code) == ("next\n", 0)
