"""Sandbox: one container's untrusted code, run in a persistent Python kernel and in shell
commands, each call bounded by the container's Limits.

The supervisor (this module, in the server's process) owns what the code cannot tamper with:
the wall clock of each call, the disk use of /mnt/data (polled every 150 ms while a call runs),
the changed files (walked on the host before and after), and killing. Everything else is
enforced by the kernel (the sandbox's, and the rlimits set inside before user code runs).

A call that the kernel survives returns its error as data (``error``, ``limit``); a call that
kills it (timeout, disk, CPU, a crash; a fork bomb, whose leftover processes must go) kills
the whole sandbox (bwrap's pid namespace), starts a fresh kernel and says so (``restarted``).
Calls on one Sandbox run one at a time (a lock); different Sandboxes are independent. A call
whose caller is cancelled kills what it runs (a Python call's kernel too: the next call starts
a fresh one).

Example::

    async with Sandbox(Path("/srv/troupe/containers/cntr_1"), Limits()) as box:
        await box.run_python("x = 6 * 7", timeout_s=30)
        print((await box.run_python("x", timeout_s=30)).stdout)   # 42

Caveat: bwrap's --die-with-parent follows the *thread* that started it; start sandboxes from
a thread that lives as long as they do (an event loop's thread does).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import struct
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from . import _files
from ._egress import EgressProxy
from ._launch import Launcher, UidLease, can_disable_userns, check_available, make_scratch
from .types import CommandResult, Isolation, LimitHit, Limits, PythonResult, SandboxError, SandboxUnavailable

__all__ = ["DEFAULT_PACKAGES", "Sandbox"]

DEFAULT_PACKAGES = Path(sys.prefix) / "sandbox-packages"
"""Where `make` installs the sandbox's packages: .venv/sandbox-packages of the server's venv."""

DISK_POLL_S = 0.15
START_TIMEOUT_S = 30.0
MAX_FRAME = 256 << 20  # a reply bigger than this (images, output) is taken as a broken kernel
SHELL_OUTPUT_CAP = 1 << 20  # bytes of each command's stdout/stderr kept when no max_output_length

_SIGNAL_LIMITS: dict[int, LimitHit] = {signal.SIGXCPU: "cpu", signal.SIGXFSZ: "file_size"}
_KILL_NOTES: dict[str, str] = {
    "timeout": "the call ran past its {timeout:g} s timeout and was killed",
    "disk": "the call filled /mnt/data past its disk limit ({disk} bytes) and was killed",
    "cpu": "the call used more than its {cpu:g} s of CPU time and was killed",
    "processes": "the call reached the process limit ({procs}); its processes were killed",
}


class _Kernel:
    """One running kernel process and its protocol pipes."""

    def __init__(self, proc: asyncio.subprocess.Process, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.proc, self.reader, self.writer = proc, reader, writer
        self.stderr = bytearray()  # the kernel's own stderr (outside calls): why it failed to start
        self.drain = asyncio.ensure_future(self._drain())
        self.next_id = 0

    async def _drain(self) -> None:
        assert self.proc.stderr is not None
        while chunk := await self.proc.stderr.read(65536):
            self.stderr = (self.stderr + chunk)[-8192:]

    async def send(self, value: dict[str, Any]) -> None:
        body = json.dumps(value).encode()
        self.writer.write(struct.pack(">I", len(body)) + body)
        await self.writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        """The next frame, or None when the kernel closed its end (it died)."""
        try:
            (length,) = struct.unpack(">I", await self.reader.readexactly(4))
            if length > MAX_FRAME:
                return None
            return json.loads(await self.reader.readexactly(length))
        except (asyncio.IncompleteReadError, ValueError, ConnectionError):
            return None

    async def reply(self, call_id: int) -> dict[str, Any] | None:
        # A frame with another id was written by a process the code forked: skip it.
        while (frame := await self.receive()) is not None:
            if frame.get("id") == call_id:
                return frame
        return None

    async def kill(self) -> None:
        _kill_group(self.proc)
        await self.proc.wait()
        self.writer.close()
        # Keep what it wrote to stderr until the end (why it failed to start); a process the
        # code left outside the group (isolation none) may hold the pipe open: do not wait on it.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.drain), 1.0)
        self.drain.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.drain


class Sandbox:
    """One container's sandbox: a persistent Python kernel and shell commands over its directory.

    Args:
        directory: the container's files on the host (made if missing); /mnt/data inside,
            the only writable place on disk.
        limits: what each call may use (Limits).
        isolation: ``bwrap`` (the default) or ``none`` (no isolation: trusted single-user use only).
        packages: a directory of Python packages for the code (bound read-only, on PYTHONPATH);
            DEFAULT_PACKAGES is where `make` installs numpy, pandas, matplotlib; None: none.
        bwrap: the bubblewrap executable (a name on PATH or a path).
        uid: the uid the code runs as when the server is root; None picks a free one
            (200000 + n, held by a lock for this sandbox's life).
        allowed_domains: the domains the code may reach, through the egress proxy
            (:mod:`._egress`; ``HTTP(S)_PROXY`` inside); None: no network at all.
        egress_proxy: what serves that proxy (the tests give one with their own resolver).
        env: variables of the code and commands besides the sandbox's own (an Agents API
            environment's ``env``): given to bwrap in its process environment, never on a
            command line (``/proc/<pid>/environ`` is the owner's only, ``cmdline`` is anyone's)
            nor on disk; the sandbox's own variables (``PATH``, ``HOME``…) win over them.

    Raises (from ``start``): SandboxUnavailable when bwrap or ``packages`` is missing,
    SandboxError when the kernel does not start.
    """

    def __init__(
        self,
        directory: Path,
        limits: Limits = Limits(),
        *,
        isolation: Isolation = "bwrap",
        packages: Path | None = DEFAULT_PACKAGES,
        bwrap: str = "bwrap",
        uid: int | None = None,
        allowed_domains: Sequence[str] | None = None,
        egress_proxy: Callable[[Sequence[str], Path], EgressProxy] = EgressProxy,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.directory = Path(directory).resolve()
        self.limits = limits
        self.isolation = isolation
        self.packages = packages
        self.bwrap = bwrap
        self._uid = uid
        self.allowed_domains = tuple(allowed_domains) if allowed_domains else None
        self._egress_proxy = egress_proxy
        self._env = dict(env or {})
        self._proxy: EgressProxy | None = None
        self._lease: UidLease | None = None
        self._launcher: Launcher | None = None
        self._scratch: Path | None = None
        self._kernel: _Kernel | None = None
        self._command: asyncio.subprocess.Process | None = None  # the shell command running now
        self._closing = False
        self._lock = asyncio.Lock()

    @property
    def uid(self) -> int | None:
        """The uid the code runs as (a root server's bwrap sandboxes), else None (the server's)."""
        return self._lease.uid if self._lease is not None else None

    async def __aenter__(self) -> Sandbox:
        await self.start()
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.close()

    async def start(self) -> None:
        """Check the tools, prepare the sandbox's /etc, start the kernel (ready for its first call)."""
        async with self._lock:
            if self._launcher is not None:
                return
            self._closing = False
            check_available(self.isolation, bwrap=self.bwrap)
            if self.packages is not None and not self.packages.is_dir():
                raise SandboxUnavailable(
                    f"the sandbox's Python packages are missing at {self.packages}: `make install` installs them "
                    "(pip install --target <dir> -c constraints.txt numpy pandas matplotlib)"
                )
            self.directory.mkdir(parents=True, exist_ok=True)
            if self.isolation == "bwrap" and os.geteuid() == 0:
                self._lease = UidLease(self._uid)
                os.lchown(self.directory, self._lease.uid, self._lease.uid)
                await asyncio.to_thread(_files.scan, self.directory, owner=self._lease.uid)
            no_userns = self.isolation == "bwrap" and await asyncio.to_thread(can_disable_userns, self.bwrap)
            self._scratch = make_scratch()
            egress = None
            try:
                if self.allowed_domains is not None and self.isolation == "bwrap":
                    egress = self._scratch / "egress"
                    egress.mkdir(mode=0o755)
                    self._proxy = self._egress_proxy(self.allowed_domains, egress / "proxy.sock")
                    await self._proxy.start()
                launcher = Launcher(isolation=self.isolation, directory=self.directory, scratch=self._scratch,
                                    limits=self.limits, packages=self.packages, bwrap=self.bwrap, uid=self.uid,
                                    no_userns=no_userns, egress=egress)  # fmt: skip
                launcher.prepare()
                self._launcher = launcher
                self._kernel = await self._spawn()
            except BaseException:
                await self._close_proxy()
                self._cleanup()
                raise

    async def close(self) -> None:
        """Kill the kernel and everything the code started, at once (a call under way ends
        as killed, and nothing restarts); the directory stays. Idempotent."""
        self._closing = True
        for proc in (self._kernel.proc if self._kernel else None, self._command):
            if proc is not None:
                _kill_group(proc)
        async with self._lock:
            if self._kernel is not None:
                await self._kernel.kill()
                self._kernel = None
            await self._close_proxy()
            self._cleanup()

    async def _close_proxy(self) -> None:
        if self._proxy is not None:
            await self._proxy.close()
            self._proxy = None

    async def run_python(self, code: str, *, timeout_s: float) -> PythonResult:
        """Run ``code`` in the persistent kernel: its variables stay for the next call.

        Returns what it printed, its error, its figures and the files it changed; a limit
        hit or a crash is in ``limit``, and when the kernel had to be killed it is started
        again (``restarted``). Raises SandboxError only when no kernel can be started at all.
        """
        async with self._lock:
            self._started()
            started = time.monotonic()
            if self._kernel is not None and self._kernel.proc.returncode is not None:
                await self._kernel.kill()  # it died between calls (a process the code left behind)
                self._kernel = None
            if self._kernel is None:  # that, or the last restart failed: start one now
                self._kernel = await self._spawn()
            kernel = self._kernel
            before = await self._scan()
            kernel.next_id += 1
            call_id = kernel.next_id
            reply: dict[str, Any] | None = None
            limit: LimitHit | None = None
            try:
                await kernel.send({"id": call_id, "code": code, "cpu_seconds": self.limits.cpu_seconds})
            except (ConnectionError, RuntimeError):
                pass  # the kernel is gone: its exit status says why, below
            else:
                try:
                    reply, limit = await self._race(kernel.reply(call_id), before.disk_bytes, timeout_s)
                except asyncio.CancelledError:
                    # The caller gave up (a cancelled response): the code must not run on, and
                    # its reply must not be read by the next call. The next call starts a kernel.
                    self._kernel = None
                    await asyncio.shield(kernel.kill())
                    raise
            result = PythonResult()
            result.fresh = call_id == 1
            if reply is not None:
                result.stdout, result.stderr, result.error = reply["stdout"], reply["stderr"], reply["error"]
                result.images = [base64.b64decode(image) for image in reply["images"]]
                result.limit = reply["limit"]
            must_restart = reply is None or result.limit == "processes"
            if must_restart:
                note, result.limit = await self._end_kernel(kernel, limit or result.limit, timeout_s)
                self._kernel = None
                try:
                    if self._closing:
                        raise SandboxError("the sandbox is closing")
                    self._kernel = await self._spawn()
                    result.restarted = True
                    note += ": the Python kernel was restarted (variables are gone; files in /mnt/data stay)"
                except SandboxError as exc:
                    note += f"; the kernel was not restarted: {exc}"
                note = f"[sandbox] {note}\n"
                result.error = (result.error or "") + note
                result.stderr += note
            after = await self._scan()
            result.changed_files = _files.changed(before, after)
            result.duration_s = time.monotonic() - started
            return result

    async def run_shell(
        self, commands: Sequence[str], *, timeout_s: float, max_output_length: int | None = None
    ) -> list[CommandResult]:
        """Run each command with ``/bin/sh -c`` in the sandbox's view (cwd /mnt/data), one
        after another, each with its own ``timeout_s`` and the container's limits. A new
        process tree per command: the kernel's state is not involved. stdout and stderr are
        each cut to ``max_output_length`` characters when it is given."""
        async with self._lock:
            launcher = self._started()
            results = []
            for command in commands:
                if self._closing:
                    break
                before = await self._scan()
                results.append(await self._shell_one(launcher, command, before.disk_bytes, timeout_s))
            for result in results:
                if max_output_length is not None:
                    result.stdout = result.stdout[:max_output_length]
                    result.stderr = result.stderr[:max_output_length]
            return results

    # -- the kernel ---------------------------------------------------------------------------

    def _started(self) -> Launcher:
        if self._launcher is None:
            raise SandboxError("the sandbox is not started (call start()) or is closed")
        return self._launcher

    async def _spawn(self) -> _Kernel:
        launcher = self._started()
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                *launcher.kernel_argv(cmd_r, res_w),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(cmd_r, res_w),
                env=self._process_env(launcher),
                cwd=launcher.cwd(),
                start_new_session=True,
            )
        except BaseException:
            os.close(cmd_w)
            os.close(res_r)
            raise
        finally:  # the child's ends: it has its copies now (or never will)
            os.close(cmd_r)
            os.close(res_w)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MAX_FRAME)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(res_r, "rb", 0))
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, os.fdopen(cmd_w, "wb", 0))
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        kernel = _Kernel(proc, reader, writer)
        try:
            ready = await asyncio.wait_for(kernel.receive(), START_TIMEOUT_S)
        except TimeoutError:
            ready = None
        if not (ready or {}).get("ready"):
            await kernel.kill()
            detail = kernel.stderr.decode(errors="replace").strip() or f"exit status {proc.returncode}"
            raise SandboxError(f"the sandbox's Python kernel did not start: {detail}")
        return kernel

    async def _end_kernel(self, kernel: _Kernel, limit: LimitHit | None, timeout_s: float) -> tuple[str, LimitHit]:
        """Kill (or reap) a kernel that must go; say why, in words and as a LimitHit."""
        if limit is None and kernel.proc.returncode is None:
            # It closed the protocol: it is exiting; give it a moment to, for its status.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(kernel.proc.wait(), 2.0)
        status = kernel.proc.returncode
        await kernel.kill()
        values = {"timeout": timeout_s, "disk": self.limits.max_disk_bytes, "cpu": self.limits.cpu_seconds,
                  "procs": self.limits.max_processes}  # fmt: skip
        if limit is not None:
            return _KILL_NOTES.get(limit, "the call hit its {limit} limit").format(limit=limit, **values), limit
        sig = _signal_of(status)
        if sig in _SIGNAL_LIMITS:
            hit = _SIGNAL_LIMITS[sig]
            return _KILL_NOTES.get(hit, "the kernel hit its file size limit").format(**values), hit
        if status is None:
            how = "stopped answering and was killed"
        else:
            how = f"was killed by {signal.Signals(sig).name}" if sig else f"exited with status {status}"
        return f"the Python kernel {how}", "crashed"

    async def _race(self, work: Any, start_disk: int, timeout_s: float) -> tuple[Any, LimitHit | None]:
        """Run ``work`` against the timeout and the disk watch: its value, or the limit it hit."""
        task = asyncio.ensure_future(work)
        watch = asyncio.ensure_future(self._watch_disk(start_disk))
        try:
            done, _ = await asyncio.wait({task, watch}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
        if task in done:
            return task.result(), None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return None, ("disk" if watch in done else "timeout")

    async def _watch_disk(self, start_disk: int) -> None:
        """Return when /mnt/data grows past the disk limit (and past what it held at the start,
        so that a call may still delete files from a directory that is already over)."""
        ceiling = max(self.limits.max_disk_bytes, start_disk)
        while True:
            await asyncio.sleep(DISK_POLL_S)
            if await asyncio.to_thread(_files.disk_bytes, self.directory) > ceiling:
                return

    async def _scan(self) -> _files.Scan:
        return await asyncio.to_thread(_files.scan, self.directory, owner=self.uid)

    # -- shell commands -----------------------------------------------------------------------

    async def _shell_one(self, launcher: Launcher, command: str, start_disk: int, timeout_s: float) -> CommandResult:
        proc = await asyncio.create_subprocess_exec(
            *launcher.shell_argv(command),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._process_env(launcher),
            cwd=launcher.cwd(),
            start_new_session=True,
        )
        assert proc.stdout is not None and proc.stderr is not None
        self._command = proc
        try:
            return await self._finish_command(proc, command, start_disk, timeout_s)
        except asyncio.CancelledError:
            _kill_group(proc)  # the caller gave up: the command does not run on
            raise
        finally:
            self._command = None

    async def _finish_command(
        self, proc: asyncio.subprocess.Process, command: str, start_disk: int, timeout_s: float
    ) -> CommandResult:
        assert proc.stdout is not None and proc.stderr is not None
        readers = [asyncio.ensure_future(_read_capped(stream)) for stream in (proc.stdout, proc.stderr)]
        status, limit = await self._race(proc.wait(), start_disk, timeout_s)
        if limit is not None:
            _kill_group(proc)
            await proc.wait()
        # Output ends when every process holding the pipes is gone (with bwrap, the whole pid
        # namespace dies with it); under ``none``, an escaped background process may keep it.
        done, pending = await asyncio.wait(readers, timeout=2.0)
        for reader in pending:
            reader.cancel()
        stdout, stderr = (r.result() if r in done else "" for r in readers)
        sig = _signal_of(status)
        if limit is None and sig in _SIGNAL_LIMITS:
            limit = _SIGNAL_LIMITS[sig]
        elif limit is None and status and ("Resource temporarily unavailable" in stderr or "Cannot fork" in stderr):
            limit = "processes"  # fork failed: EAGAIN as libc words it, or dash's own message
        if limit in ("timeout", "disk"):
            note = {"timeout": f"timed out after {timeout_s:g} s", "disk": "/mnt/data is over its disk limit"}[limit]
            stderr += f"\n[sandbox] killed: {note}\n"
        exit_code = None if limit in ("timeout", "disk") else (128 + sig if sig else status)
        return CommandResult(command=command, stdout=stdout, stderr=stderr, exit_code=exit_code,
                             timed_out=limit == "timeout", limit=limit)  # fmt: skip

    # -- helpers ------------------------------------------------------------------------------

    def _process_env(self, launcher: Launcher) -> dict[str, str]:
        # bwrap gets nothing of the server's environment either: only the extra variables, which
        # it passes on; the sandbox's own (its --setenv) win, and an extra PATH is never what
        # finds bwrap and nice.
        own = launcher.environment()
        extra = {key: value for key, value in self._env.items() if key not in own}
        return {**extra, **own} if self.isolation == "none" else extra

    def _cleanup(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
        self._launcher = None


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the process group the sandbox started (bwrap: its pid namespace goes with it)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


def _signal_of(status: int | None) -> int | None:
    """The signal that ended a process: a negative returncode (plain child), or 128 + n
    (bwrap reports its command's death by signal n that way, as sh does)."""
    if status is None:
        return None
    if status < 0:
        return -status
    if 128 < status < 128 + 65:
        return status - 128
    return None


async def _read_capped(stream: asyncio.StreamReader, cap: int = SHELL_OUTPUT_CAP) -> str:
    """Read ``stream`` to its end, keeping the first ``cap`` bytes (the rest is read and dropped,
    so the writer never blocks)."""
    kept = bytearray()
    while chunk := await stream.read(65536):
        if len(kept) < cap:
            kept += chunk[: cap - len(kept)]
    return kept.decode("utf-8", errors="replace")
