"""The program that runs inside the sandbox: standard library only, it imports nothing of troupe
(the project is not visible in there; the file is bound alone at /opt/troupe/kernel.py).

Two modes, both first setting the rlimits they are given as JSON (hard = soft, so the code
cannot raise them again; RLIMIT_CPU's hard limit stays open so the REPL can renew the soft one
per call)::

    python kernel.py exec LIMITS -- ARGV...     set the limits, exec ARGV (a shell command)
    python kernel.py repl LIMITS CMD_FD RES_FD  the persistent REPL

The REPL's protocol runs on two dedicated pipes (CMD_FD in, RES_FD out), never on stdin or
stdout, so what user code prints or reads cannot corrupt it. A frame is a 4-byte big-endian
length and that many bytes of UTF-8 JSON. The REPL first sends ``{"ready": true}``; then
for each request ``{"id", "code", "cpu_seconds"}`` it answers ``{"id", "stdout", "stderr",
"error", "images" (base64 PNG), "limit"}``. During a call, file descriptors 1 and 2 point
to unlinked temporary files, so output of C code and child processes is caught as well.
A process forked by the code that returns here exits instead of answering.
"""

import ast
import base64
import builtins
import errno
import io
import json
import linecache
import os
import resource
import signal
import struct
import sys
import tempfile
import traceback

OUTPUT_CAP = 1 << 20  # characters of stdout/stderr kept per call; the rest is cut with a note
RLIMITS = {
    "memory_bytes": resource.RLIMIT_AS,
    "max_processes": resource.RLIMIT_NPROC,
    "max_file_bytes": resource.RLIMIT_FSIZE,
}


def set_limits(limits: dict, cpu_hard: bool) -> None:
    for name, which in RLIMITS.items():
        if limits.get(name) is not None:
            value = int(limits[name])
            resource.setrlimit(which, (value, value))
    if limits.get("cpu_seconds") is not None:
        seconds = max(1, int(limits["cpu_seconds"] + 0.999))
        # The hard limit a second later: at the soft one SIGXCPU comes first (the hard one is SIGKILL).
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1 if cpu_hard else resource.RLIM_INFINITY))


def read_frame(fd: int) -> dict | None:
    head = _read_exactly(fd, 4)
    if head is None:
        return None
    body = _read_exactly(fd, struct.unpack(">I", head)[0])
    return None if body is None else json.loads(body)


def _read_exactly(fd: int, n: int) -> bytes | None:
    parts, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            return None
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def write_frame(fd: int, value: dict) -> None:
    body = json.dumps(value).encode()
    data = struct.pack(">I", len(body)) + body
    while data:
        data = data[os.write(fd, data) :]


class Repl:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.namespace: dict = {"__name__": "__main__", "__builtins__": builtins}
        self.cells = 0
        # sys.stdout/err write to fds 1 and 2, whatever those point to during a call.
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)
        sys.stdin = open(os.devnull)

    def run(self, request: dict) -> dict:
        used = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
        seconds = int(used + request["cpu_seconds"] + 0.999)
        resource.setrlimit(resource.RLIMIT_CPU, (max(1, seconds), resource.RLIM_INFINITY))
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        error = limit = None
        try:
            self.execute(request["code"])
        except BaseException as exc:  # the user's code raised: report it, keep the REPL
            if os.getpid() != self.pid:
                os._exit(1)
            error, limit = self.describe(exc)
        if os.getpid() != self.pid:  # a fork of the kernel made by the code: never answer
            os._exit(0)
        images = self.figures()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except OSError:
                pass
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        return {
            "id": request["id"],
            "stdout": _read_text(out),
            "stderr": _read_text(err),
            "error": error,
            "images": images,
            "limit": limit,
        }

    def execute(self, code: str) -> None:
        self.cells += 1
        name = f"<cell {self.cells}>"
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        tree = ast.parse(code, name, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body[-1].value)
            del tree.body[-1]
        exec(compile(tree, name, "exec"), self.namespace)
        if last is not None:
            value = eval(compile(last, name, "eval"), self.namespace)
            if value is not None:
                self.namespace["_"] = value
                print(repr(value))

    def describe(self, exc: BaseException) -> tuple[str, str | None]:
        # Drop this module's frames: the traceback starts in the user's cell.
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        text = "".join(traceback.format_exception(type(exc), exc, tb))
        limit = None
        seen: BaseException | None = exc
        while seen is not None and limit is None:
            limit = _limit_of(seen)
            seen = seen.__cause__ or seen.__context__
        notes = {
            "memory": "memory limit reached (the sandbox's address space is capped)",
            "file_size": "file size limit reached",
            "processes": "process limit reached: no more processes may be started",
            "disk": "no space left on the sandbox's disk",
        }
        if limit is not None:
            text += f"[sandbox] {notes[limit]}\n"
        return text, limit

    def figures(self) -> list[str]:
        # As a notebook does: every figure open after the call is shown once, then closed.
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None:
            return []
        images = []
        try:
            for number in pyplot.get_fignums():
                buffer = io.BytesIO()
                pyplot.figure(number).savefig(buffer, format="png")
                images.append(base64.b64encode(buffer.getvalue()).decode())
        except Exception:
            traceback.print_exc()
        finally:
            pyplot.close("all")
        return images


def _limit_of(exc: BaseException) -> str | None:
    if isinstance(exc, MemoryError):
        return "memory"
    if isinstance(exc, OSError):
        return {errno.EFBIG: "file_size", errno.EAGAIN: "processes", errno.ENOSPC: "disk"}.get(exc.errno or 0)
    return None


def _read_text(file) -> str:
    file.seek(0)
    data = file.read(OUTPUT_CAP * 4 + 1)
    text = data.decode("utf-8", errors="replace")
    if len(text) > OUTPUT_CAP or len(data) > OUTPUT_CAP * 4:
        text = text[:OUTPUT_CAP] + "\n[sandbox] output truncated\n"
    file.close()
    return text


PROXY_PORT = 3128
"""Where, inside, the egress proxy is served (HTTP_PROXY, HTTPS_PROXY) when the container may
reach an allowlist of domains."""


def egress_listener():
    """The socket code reaches the egress proxy by, on the sandbox's own loopback."""
    import socket

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", PROXY_PORT))
    listener.listen(64)
    return listener


def forward(listener, proxy_path: str) -> None:
    """Pipe every connection to ``listener`` to the supervisor's egress proxy, a Unix socket
    bound in from outside (the sandbox has no other way out): two threads per connection."""
    import socket
    import threading

    def pipe(source, sink) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    while True:
        try:
            client, _ = listener.accept()
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(proxy_path)
        except OSError:
            continue
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=pipe, args=(source, sink), daemon=True).start()


def serve_egress(proxy_path: str, *, in_thread: bool) -> None:
    """Start the forwarder: a thread of the REPL, or a process beside a shell command (which
    ends with the command's pid namespace)."""
    listener = egress_listener()
    if in_thread:
        import threading

        threading.Thread(target=forward, args=(listener, proxy_path), daemon=True).start()
    elif os.fork() == 0:
        try:
            forward(listener, proxy_path)
        finally:
            os._exit(0)
    else:
        listener.close()


def main() -> None:
    mode, limits = sys.argv[1], json.loads(sys.argv[2])
    if limits.get("cwd"):
        os.chdir(limits["cwd"])  # as the code's own uid: root without capabilities may not enter /mnt/data
    if limits.get("egress"):
        serve_egress(limits["egress"], in_thread=mode != "exec")
    if mode == "exec":
        set_limits(limits, cpu_hard=True)
        # Python ignores SIGPIPE and SIGXFSZ, and exec keeps ignored signals: give the command
        # the defaults a shell expects (`yes | head` ends; a file past the limit kills its writer).
        for number in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(number, signal.SIG_DFL)
        argv = sys.argv[sys.argv.index("--") + 1 :]
        os.execvp(argv[0], argv)
    cmd_fd, res_fd = int(sys.argv[3]), int(sys.argv[4])
    for fd in (cmd_fd, res_fd):
        os.set_inheritable(fd, False)  # the code's child processes must not hold the protocol
    set_limits({k: v for k, v in limits.items() if k != "cpu_seconds"}, cpu_hard=False)
    repl = Repl()
    write_frame(res_fd, {"ready": True})
    while (request := read_frame(cmd_fd)) is not None:
        write_frame(res_fd, repl.run(request))


if __name__ == "__main__":
    main()
