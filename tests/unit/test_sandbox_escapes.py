"""Code that tries to get out of its sandbox or past its limits: each attempt ends in a clear
error in the call's result, and the same Sandbox answers the next call."""

from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path

import pytest

from troupe.sandbox import Sandbox

from .sandbox_support import LIMITS, needs_bwrap, started

pytestmark = needs_bwrap
ROOT = Path(__file__).resolve().parents[2]
SECRET = "troupe-test-secret-6f1c2b"


@pytest.fixture
async def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TROUPE_TEST_SECRET", SECRET)  # in the server's environment when the sandbox starts
    async for sandbox in started(tmp_path):
        yield sandbox


async def still_works(box: Sandbox) -> None:
    result = await box.run_python("21 * 2", timeout_s=10)
    assert (result.stdout, result.error) == ("42\n", None)


async def test_no_network_to_the_hosts_loopback(box: Sandbox) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)"
        result = await box.run_python(code, timeout_s=10)
        assert result.error is not None and "ConnectionRefusedError" in result.error
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever connected
    outside = await box.run_python("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=3)", timeout_s=10)
    assert outside.error is not None and "Network is unreachable" in outside.error
    (shell,) = await box.run_shell(["cat /proc/net/dev | tail -n +3 | cut -d: -f1"], timeout_s=10)
    assert shell.stdout.split() == ["lo"]
    await still_works(box)


async def test_no_file_of_the_server_is_visible(box: Sandbox) -> None:
    storage = box.directory.parent.parent
    targets = [storage / "troupe.duckdb", box.directory.parent / "neighbour.txt", ROOT / "pyproject.toml",
               Path.home() / ".bashrc", Path("/etc/shadow")]  # fmt: skip
    code = "import os\nfor path in %r:\n    print(path, os.path.exists(path))" % [str(t) for t in targets]
    result = await box.run_python(code, timeout_s=10)
    assert result.error is None and result.stdout.count(" False\n") == len(targets), result.stdout
    reads = await box.run_shell([f"cat {storage / 'troupe.duckdb'}", "cat ../neighbour.txt", "ls /mnt"], timeout_s=10)
    assert [r.exit_code for r in reads[:2]] == [1, 1] and "No such file" in reads[0].stderr
    assert reads[2].stdout == "data\n"
    assert "SECRET" not in "".join(r.stdout for r in reads)
    await still_works(box)


async def test_no_variable_of_the_servers_environment(box: Sandbox) -> None:
    assert os.environ["TROUPE_TEST_SECRET"] == SECRET
    code = (
        "import os, glob\n"
        "found = []\n"
        "for p in glob.glob('/proc/*/environ'):\n"
        "    try:\n"
        "        found += [p] if b'SECRET' in open(p, 'rb').read() else []\n"
        "    except PermissionError:\n"
        "        pass  # pid 1 is bwrap's init, root's: not readable either\n"
        "print(sorted(os.environ), found, sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))"
    )
    result = await box.run_python(code, timeout_s=10)
    assert result.error is None and SECRET not in result.stdout and "TROUPE_TEST_SECRET" not in result.stdout
    assert "[] [" in result.stdout  # no process in there has it; and only the sandbox's own pids
    (env,) = await box.run_shell(["env; cat /proc/1/environ /proc/1/cmdline"], timeout_s=10)
    assert SECRET not in env.stdout and "TROUPE" not in env.stdout
    await still_works(box)


@needs_bwrap
async def test_an_environments_variables_reach_code_and_commands_but_no_command_line(tmp_path: Path) -> None:
    """An Agents API environment's ``env``: in the kernel's and each command's environment, on
    no process's command line (anyone on the host may read those), and not above the sandbox's own."""
    box = Sandbox(tmp_path / "cntr_env", LIMITS, env={"API_TOKEN": "tok-7f3a", "PATH": "/nowhere"})
    await box.start()
    try:
        kernel = await box.run_python("import os; print(os.environ['API_TOKEN'], os.environ['PATH'])", timeout_s=10)
        assert kernel.stdout.startswith("tok-7f3a ") and "/usr/bin" in kernel.stdout  # the sandbox's PATH wins
        (command,) = await box.run_shell(['printf %s "$API_TOKEN"; cat /proc/*/cmdline | tr "\\0" " "'], timeout_s=10)
        assert command.stdout.startswith("tok-7f3a") and "tok-7f3a" not in command.stdout[len("tok-7f3a"):]
        (workspace,) = await box.run_shell(["echo hi > /workspace/w.txt; cat /mnt/data/w.txt"], timeout_s=10)
        assert workspace.stdout == "hi\n"  # /workspace is the container's directory
        launcher = box._started()  # what starts bwrap, seen from the host: no value on its command lines
        assert "tok-7f3a" not in " ".join([*launcher.kernel_argv(3, 4), *launcher.shell_argv("true")])
    finally:
        await box.close()


async def test_memory_past_the_limit_is_a_memory_error(box: Sandbox) -> None:
    await box.run_python("kept = 'state'", timeout_s=10)
    result = await box.run_python(f"block = bytearray({LIMITS.memory_bytes})", timeout_s=10)
    assert result.limit == "memory" and result.error is not None and "MemoryError" in result.error
    assert "memory limit" in result.error and not result.restarted
    assert (await box.run_python("kept", timeout_s=10)).stdout == "'state'\n"  # the kernel survived it


async def test_an_endless_loop_is_killed_at_the_timeout(box: Sandbox) -> None:
    await box.run_python("kept = 1", timeout_s=10)
    result = await box.run_python("while True:\n    pass", timeout_s=1)
    assert result.limit == "timeout" and result.restarted
    assert result.error is not None and "1 s timeout" in result.error and "restarted" in result.error
    assert 1 <= result.duration_s < 5
    gone = await box.run_python("kept", timeout_s=10)
    assert gone.error is not None and "NameError" in gone.error  # fresh state after the restart
    await still_works(box)
    (shell,) = await box.run_shell(["echo start; sleep 30"], timeout_s=1)
    assert shell.timed_out and shell.exit_code is None and shell.limit == "timeout" and shell.stdout == "start\n"


async def test_cpu_time_past_the_limit_kills_the_call(tmp_path: Path) -> None:
    async for box in started(tmp_path, limits=dataclasses.replace(LIMITS, cpu_seconds=1)):
        await box.run_python("import time\nstart = time.process_time()", timeout_s=10)
        # The limit is renewed per call: the CPU the kernel used before does not count.
        result = await box.run_python("while True:\n    pass", timeout_s=30)  # the 1 s of CPU comes first
        assert result.limit == "cpu" and result.restarted and "CPU time" in (result.error or ""), result
        await still_works(box)
        (shell,) = await box.run_shell(["while :; do :; done"], timeout_s=30)
        assert shell.limit == "cpu" and shell.exit_code == 152  # 128 + SIGXCPU


async def test_a_fork_bomb_hits_the_process_limit(box: Sandbox) -> None:
    code = "import os\nwhile True:\n    os.fork()"
    result = await box.run_python(code, timeout_s=20)
    assert result.limit == "processes" and result.restarted, result
    assert "BlockingIOError" in (result.error or "") and "process limit" in (result.error or "")
    await still_works(box)
    (shell,) = await box.run_shell(["for i in $(seq 100); do sleep 5 & done; wait"], timeout_s=20)
    assert shell.limit == "processes" and shell.exit_code != 0, shell
    await still_works(box)


async def test_filling_the_disk_is_stopped(box: Sandbox) -> None:
    too_big = await box.run_python(f"open('one', 'wb').write(b'x' * {LIMITS.max_file_bytes + (1 << 20)})", timeout_s=10)
    assert too_big.limit == "file_size" and "File too large" in (too_big.error or "") and not too_big.restarted
    code = (
        "import time\n"
        "for i in range(1000):\n"
        "    with open(f'fill{i}', 'wb') as f:\n"
        "        f.write(b'x' * (1 << 20))\n"
        "    time.sleep(0.005)"
    )
    result = await box.run_python(code, timeout_s=20)
    assert result.limit == "disk" and result.restarted and "disk" in (result.error or "")
    used = sum(p.stat().st_size for p in box.directory.iterdir())
    assert used < LIMITS.max_disk_bytes * 4  # stopped within a poll or two of the limit
    # Over the limit, a call may still delete files: the watch stops growth, not cleanup.
    cleaned = await box.run_python("import glob, os\nfor p in glob.glob('fill*'): os.remove(p)", timeout_s=10)
    assert cleaned.error is None and cleaned.limit is None
    (shell,) = await box.run_shell(["head -c 20000000 /dev/zero > big"], timeout_s=10)
    assert shell.limit == "file_size" and shell.exit_code == 153  # 128 + SIGXFSZ
    await still_works(box)


async def test_nothing_outside_mnt_data_is_writable(box: Sandbox) -> None:
    parent = box.directory.parent
    targets = ["/usr/x", "/etc/x", "/x", "/mnt/x", "/opt/troupe/x", "/proc/x", f"{parent}/x", "/root/x"]
    code = (
        "import os\n"
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        open(path, 'w').write('x')\n"
        "        print(path, 'WRITTEN')\n"
        "    except OSError as exc:\n"
        "        print(path, type(exc).__name__)\n"
        "n = open('/tmp/private', 'w').write('fine')\n"
        "n = open('/mnt/data/ok', 'w').write('fine')"
    )
    result = await box.run_python(code, timeout_s=10)
    assert result.error is None and "WRITTEN" not in result.stdout, result.stdout
    assert result.stdout.count("\n") == len(targets)
    assert sorted(p.name for p in parent.iterdir()) == ["cntr_test", "neighbour.txt"]
    assert (box.directory / "ok").read_text() == "fine" and not Path("/tmp/private").exists()
    assert result.changed_files == ["ok"]
    await still_works(box)


async def test_no_user_namespace_of_its_own(box: Sandbox) -> None:
    # As an unprivileged uid with a user namespace, the code would reach kernel code meant for root.
    (shell,) = await box.run_shell(["unshare --user --map-root-user id"], timeout_s=10)
    assert shell.exit_code != 0 and "unshare failed" in shell.stderr, shell
    (ident,) = await box.run_shell(["id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status"], timeout_s=10)
    assert ident.stdout.split()[0] != "0" and "CapEff:\t0000000000000000" in ident.stdout
    assert "NoNewPrivs:\t1" in ident.stdout or box.uid is None
