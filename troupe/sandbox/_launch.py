"""How a sandboxed process is started: the bubblewrap command line, the minimal /etc, the clean
environment, and the unprivileged uid each container runs as.

The view inside (isolation ``bwrap``)::

    /usr, /lib*, /bin, /sbin     the host's, read-only (/lib and /bin as symlinks into /usr, or bound)
    <base prefix of Python>      the server's base interpreter, read-only, at its own path (its
                                 own site-packages hidden under an empty tmpfs)
    /opt/troupe/kernel.py        _kernel.py, read-only
    /opt/troupe/packages         the sandbox's packages (numpy, pandas, matplotlib), read-only
    /opt/troupe/bin              python, python3: the interpreter above
    /etc                         made here: passwd, group, hosts, nsswitch.conf, hostname, the
                                 linker's cache and Debian's alternatives links; nothing else
    /mnt/data                    the container's directory, the one writable place on disk
    /tmp, /dev/shm               private tmpfs, capped at Limits.tmp_bytes
    /proc, /dev                  the sandbox's own (new pid namespace; a minimal /dev)

Namespaces: mount, pid, net (only its own loopback), ipc, uts, cgroup; a new session (no
TIOCSTI into the server's terminal); bwrap dies with its parent, and with it the whole pid
namespace. As root, bwrap makes no user namespace: the command inside keeps only CAP_SETUID,
CAP_SETGID and CAP_SETPCAP, which ``setpriv`` uses to become the container's own uid and
gid (no groups, no capabilities, an empty bounding set, no_new_privs) before the kernel
starts. Not as root, bwrap makes a user namespace and the code runs as the server's user
there, with no capabilities.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .types import Isolation, Limits, SandboxUnavailable

KERNEL = Path(__file__).with_name("_kernel.py")
INSIDE_DATA = "/mnt/data"
INSIDE_KERNEL = "/opt/troupe/kernel.py"
INSIDE_PACKAGES = "/opt/troupe/packages"
INSIDE_BIN = "/opt/troupe/bin"
INSIDE_EGRESS = "/opt/troupe/egress"
PROXY_PORT = 3128  # the kernel's forwarder (_kernel.PROXY_PORT)
UID_BASE = 200_000
UID_SLOTS = 100_000
_UID_LOCKS = Path("/run/troupe-sandbox/uids") if Path("/run").is_dir() else Path("/tmp/troupe-sandbox-uids")

INSTALL_HINT = (
    "bubblewrap (bwrap) is missing: install it with `apt-get install bubblewrap` (Debian, Ubuntu), "
    "`dnf install bubblewrap` (Fedora, RHEL), `pacman -S bubblewrap` (Arch), `apk add bubblewrap` "
    '(Alpine) or `zypper install bubblewrap` (openSUSE); or set isolation to "none" for trusted '
    "single-user use only (docs/sandbox.md)"
)


def check_available(isolation: Isolation, *, bwrap: str = "bwrap") -> None:
    """Raise SandboxUnavailable unless ``isolation`` can run here.

    ``bwrap`` (a name looked up on PATH, or a path) must be an executable, and so must
    ``setpriv`` (util-linux) when the server runs as root; ``none`` needs nothing.
    """
    if isolation == "none":
        return
    if isolation != "bwrap":
        raise ValueError(f"isolation must be 'bwrap' or 'none', not {isolation!r}")
    if not sys.platform.startswith("linux"):
        raise SandboxUnavailable(f"bubblewrap sandboxes need Linux (this is {sys.platform}); {INSTALL_HINT}")
    if shutil.which(bwrap) is None:
        raise SandboxUnavailable(f"{INSTALL_HINT} (looked for {bwrap!r})")
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        raise SandboxUnavailable("setpriv is missing: install util-linux (`apt-get install util-linux`)")


@functools.cache
def can_disable_userns(bwrap: str) -> bool:
    """Whether this bwrap has --disable-userns (0.8.0 and later; Debian 12 has 0.8.0)."""
    try:
        usage = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "--disable-userns" in usage


class UidLease:
    """A uid of its own for one container while it lives (root only): RLIMIT_NPROC counts the
    processes of a real uid, and two containers' files and processes must not share an owner.

    A slot is held by an flock on a file under /run/troupe-sandbox/uids, so container actors in
    different processes of one machine never pick the same uid, and a crashed process frees
    its slots with its file descriptors.
    """

    def __init__(self, preferred: int | None = None) -> None:
        _UID_LOCKS.mkdir(parents=True, exist_ok=True, mode=0o700)
        start = (preferred - UID_BASE) % UID_SLOTS if preferred is not None else os.getpid() % UID_SLOTS
        for step in range(UID_SLOTS):
            slot = (start + step) % UID_SLOTS
            fd = os.open(_UID_LOCKS / str(UID_BASE + slot), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.uid, self._fd = UID_BASE + slot, fd
            return
        raise SandboxUnavailable("no free sandbox uid")  # 100,000 containers on one machine

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class Launcher:
    """Builds the command lines of one sandbox's processes (the kernel, shell commands)."""

    isolation: Isolation
    directory: Path
    """The container's directory on the host (/mnt/data inside)."""
    scratch: Path
    """A private host directory of this sandbox (its /etc and bin), outside the container's."""
    limits: Limits
    packages: Path | None
    bwrap: str
    uid: int | None
    """The uid the code runs as (root servers); None: the server's own."""
    no_userns: bool = True
    """Stop the code making user namespaces of its own (bwrap ≥ 0.8's --disable-userns)."""
    egress: Path | None = None
    """The host directory holding the egress proxy's socket (``proxy.sock``), bound in at
    /opt/troupe/egress; None: no way out at all (the network policy ``disabled``)."""

    @property
    def python(self) -> Path:
        return Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"

    def prepare(self) -> None:
        """Write the sandbox's /etc and bin into ``scratch``."""
        etc = self.scratch / "etc"
        etc.mkdir(mode=0o755)
        uid = self.uid if self.uid is not None else os.getuid()
        files = {
            "passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{uid}:{uid}:sandbox:/tmp:/bin/sh\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
            "group": f"root:x:0:\nsandbox:x:{uid}:\nnogroup:x:65534:\n",
            "hosts": "127.0.0.1 localhost sandbox\n::1 localhost\n",
            "hostname": "sandbox\n",
            "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
        }
        for name, text in files.items():
            (etc / name).write_text(text)
            (etc / name).chmod(0o644)
        if Path("/etc/ld.so.cache").is_file():  # where the dynamic linker finds multiarch libraries
            shutil.copyfile("/etc/ld.so.cache", etc / "ld.so.cache")
        if Path("/etc/alternatives").is_dir():  # Debian's awk, which, pager...: symlinks only
            shutil.copytree("/etc/alternatives", etc / "alternatives", symlinks=True)
        if Path("/etc/fonts").is_dir():  # fontconfig's configuration (matplotlib asks fc-list)
            shutil.copytree("/etc/fonts", etc / "fonts", symlinks=True)
        (self.scratch / "tmp").mkdir(mode=0o700)  # ``none``'s TMPDIR and HOME
        bin_dir = self.scratch / "bin"
        bin_dir.mkdir(mode=0o755)
        for name in ("python", "python3"):
            (bin_dir / name).symlink_to(self.python)

    def environment(self) -> dict[str, str]:
        """The whole environment inside: built from nothing, none of the server's variables."""
        bwrap = self.isolation == "bwrap"
        tmp = "/tmp" if bwrap else str(self.scratch / "tmp")
        env = {
            "PATH": f"{INSIDE_BIN if bwrap else self.scratch / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            "HOME": tmp,
            "TMPDIR": tmp,
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "USER": "sandbox",
            "LOGNAME": "sandbox",
            "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": f"{tmp}/matplotlib",
            "PYTHONDONTWRITEBYTECODE": "1",
            # One thread per numerical library: the CPU and process limits are the container's.
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        if self.packages is not None:
            env["PYTHONPATH"] = INSIDE_PACKAGES if bwrap else str(self.packages)
        if self.egress is not None and bwrap:
            proxy = f"http://127.0.0.1:{PROXY_PORT}"
            for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
                env[name] = proxy
            env["NO_PROXY"] = env["no_proxy"] = "localhost,127.0.0.1"
        return env

    def kernel_argv(self, cmd_fd: int, res_fd: int) -> list[str]:
        kernel = INSIDE_KERNEL if self.isolation == "bwrap" else str(KERNEL)
        inner = [str(self.python), kernel, "repl", json.dumps(self._rlimits()), str(cmd_fd), str(res_fd)]
        return self._wrap(inner)

    def shell_argv(self, command: str) -> list[str]:
        kernel = INSIDE_KERNEL if self.isolation == "bwrap" else str(KERNEL)
        limits = self._rlimits() | {"cpu_seconds": self.limits.cpu_seconds}
        return self._wrap([str(self.python), kernel, "exec", json.dumps(limits), "--", "/bin/sh", "-c", command])

    def cwd(self) -> Path | None:
        """The host directory to start in (``none`` only; under bwrap the kernel enters /mnt/data itself)."""
        return self.directory if self.isolation == "none" else None

    # What the kernel sets up before any code runs: its rlimits, and the directory it starts in.
    def _rlimits(self) -> dict[str, Any]:
        nproc = self.limits.max_processes
        if self.uid is None:
            # Not root: RLIMIT_NPROC counts every process of the server's user, not just the
            # sandbox's; allow what the user runs now plus the sandbox's own.
            nproc += _processes_of(os.getuid())
        return {
            "memory_bytes": self.limits.memory_bytes,
            "max_processes": nproc,
            "max_file_bytes": self.limits.max_file_bytes,
            "cwd": INSIDE_DATA if self.isolation == "bwrap" else None,
            "egress": f"{INSIDE_EGRESS}/proxy.sock" if self.egress is not None and self.isolation == "bwrap" else None,
        }

    def _wrap(self, inner: Sequence[str]) -> list[str]:
        nice = ["nice", "-n", str(self.limits.niceness)] if self.limits.niceness else []
        if self.isolation == "none":
            return [*nice, *inner]
        return [*nice, *self._bwrap_argv(), "--", *self._drop_privileges(), *inner]

    def _drop_privileges(self) -> list[str]:
        if self.uid is None:
            return []
        uid = str(self.uid)
        argv = ["setpriv", "--reuid", uid, "--regid", uid, "--clear-groups", "--inh-caps=-all",
                "--bounding-set=-all", "--no-new-privs", "--"]  # fmt: skip
        if self.no_userns:
            # A second, unprivileged bwrap over the same view, only to make a user namespace in
            # which no further one may be made: an unprivileged uid could otherwise make its own
            # and reach kernel code (netfilter, mounts) meant for root.
            argv += [self.bwrap, "--unshare-user", "--disable-userns", "--bind", "/", "/",
                     "--dev-bind", "/dev", "/dev", "--chdir", INSIDE_DATA, "--"]  # fmt: skip
        return argv

    def _bwrap_argv(self) -> list[str]:
        tmp = str(self.limits.tmp_bytes)
        argv = [self.bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
                "--unshare-cgroup-try", "--hostname", "sandbox", "--die-with-parent", "--new-session",
                "--cap-drop", "ALL"]  # fmt: skip
        # No --clearenv: bwrap's own environment is built from nothing (Sandbox._process_env:
        # only the extra variables of an environment's ``env``), and its --setenv below win.
        if self.uid is not None:
            # Root without a user namespace: keep just what setpriv needs to become the uid.
            argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
        else:
            argv += ["--unshare-user", *(["--disable-userns"] if self.no_userns else [])]
        argv += ["--ro-bind", "/usr", "/usr"]
        for name in ("lib", "lib32", "lib64", "libx32", "bin", "sbin"):
            host = Path("/") / name
            if host.is_symlink():
                argv += ["--symlink", os.readlink(host), f"/{name}"]
            elif host.is_dir():
                argv += ["--ro-bind", str(host), f"/{name}"]
        prefix = Path(sys.base_prefix)
        if not prefix.is_relative_to("/usr"):
            # Bound at its own path (its shared library is found there); its parents are made
            # here world-readable, as /root's 0700 would otherwise stop the unprivileged uid.
            for parent in reversed(prefix.parents[:-1]):
                argv += ["--perms", "0755", "--dir", str(parent)]
            argv += ["--ro-bind", str(prefix), str(prefix)]
            site = prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
            if site.is_dir():
                argv += ["--tmpfs", str(site)]  # the host's packages stay out of sight
        argv += ["--perms", "0755", "--dir", "/opt", "--perms", "0755", "--dir", "/opt/troupe",
                 "--perms", "0755", "--dir", "/mnt",
                 "--ro-bind", str(self.scratch / "etc"), "/etc",
                 "--ro-bind", str(self.scratch / "bin"), INSIDE_BIN,
                 "--ro-bind", str(KERNEL), INSIDE_KERNEL]  # fmt: skip
        if self.packages is not None:
            argv += ["--ro-bind", str(self.packages), INSIDE_PACKAGES]
        if self.egress is not None:
            argv += ["--bind", str(self.egress), INSIDE_EGRESS]  # the socket only: the directory is root's, 0755
        argv += ["--proc", "/proc", "--dev", "/dev",
                 "--perms", "1777", "--size", tmp, "--tmpfs", "/tmp",
                 "--perms", "1777", "--size", tmp, "--tmpfs", "/dev/shm",
                 "--bind", str(self.directory), INSIDE_DATA,
                 "--symlink", INSIDE_DATA, "/workspace"]  # fmt: skip (/workspace: an Agents API environment's)
        # As root, bwrap has dropped its capabilities by now and cannot enter the directory,
        # which belongs to the container's uid (mode 0700 is fine): the kernel enters it.
        argv += ["--chdir", "/" if self.uid is not None else INSIDE_DATA]
        for key, value in self.environment().items():
            argv += ["--setenv", key, value]
        return argv


def make_scratch() -> Path:
    """A private directory for one sandbox's /etc, bin and (``none``) tmp, readable by its uid."""
    scratch = Path(tempfile.mkdtemp(prefix="troupe-sandbox-"))
    scratch.chmod(0o755)
    return scratch


def _processes_of(uid: int) -> int:
    """The tasks (processes and their threads: what RLIMIT_NPROC counts) ``uid`` runs now."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:
                pass  # gone meanwhile
    return count
