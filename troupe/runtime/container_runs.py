"""Running code in containers: the host's :class:`ContainerRunner` (what the loop's
``code_interpreter`` tool calls), and the :class:`ContainerFleet` its sandboxes run on.

A container is a row and a directory (:mod:`troupe.runtime.containers`, the Containers API)
and, while code runs in it, a :class:`~troupe.sandbox.Sandbox`: a persistent Python kernel
and shell commands under bubblewrap, with ``/mnt/data`` bound to the directory. A *fleet*
keeps one sandbox per container, started on the container's first run:

* :class:`LocalFleet` (here): the sandboxes in this process (the in-process runtime);
* ``RayFleet`` (:mod:`troupe.runtime.ray.containers`): one Ray actor per container, named
  after it, so that every host of the cluster reaches the same kernel; it reserves the
  container's memory and ``ray_cpus``, and ends itself when idle.

One run, as :class:`ContainerRunner` does it::

    mark_active(tenant, id)      the container is the tenant's and running (else ContainerNotFound)
    fleet.run_python(box, code)  the sandbox runs it: logs, figures, changed files, a limit hit
    register_files(tenant, id)   files the code wrote become container files (ids to cite)

What a container's sandbox may use (:class:`~troupe.sandbox.Limits`) comes from its
``memory_limit`` and the ``[containers]`` settings (:func:`box_limits`). A sandbox whose
container is deleted or expires is stopped (:meth:`ContainerFleet.stop`, from
:class:`~troupe.runtime.containers.ContainerService`); one left idle past its container's
expiry stops itself.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import posixpath
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from troupe.agentloop.code_interpreter import CodeRun, ContainerFile, ContainerNotFound
from troupe.agentloop.shell import CommandRun
from troupe.observe import Observer
from troupe.protocol import InvalidRequest, NotFound, ServerError
from troupe.protocol.containers import MEMORY_LIMITS, MOUNT, parse_network_policy
from troupe.runtime.containers import ContainerService
from troupe.runtime.settings import ContainersSettings
from troupe.sandbox import CommandResult, Isolation, Limits, PythonResult, Sandbox, SandboxUnavailable, check_available

__all__ = ["BoxSpec", "ContainerFleet", "ContainerRunner", "LocalFleet", "box_limits", "check_code_tool", "code_run"]

_GiB = 1 << 30
AUTO_NAME = "code_interpreter"
"""The name of a container the tool creates itself (``container: "auto"``)."""


@dataclass(frozen=True, slots=True)
class BoxSpec:
    """What a fleet needs to start a container's sandbox."""

    container_id: str
    directory: str
    """The container's directory on the host (``/mnt/data`` inside)."""
    limits: Limits
    isolation: Isolation
    idle_s: float
    """Idle time after which the sandbox may stop itself (the container's expiry)."""
    bwrap: str = "bwrap"
    """The bubblewrap executable."""
    allowed_domains: tuple[str, ...] | None = None
    """The domains the code may reach (its ``network_policy``'s allowlist); None: none."""
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    """Variables of the code and commands (an Agents API environment's ``env``: secret, so never
    in a repr). They take effect when the sandbox starts: a sandbox already running keeps its own."""

    def sandbox(self) -> dict[str, Any]:
        """The sandbox's settings as plain values (what a container's actor is sent: it imports
        nothing of the runtime)."""
        return {"directory": self.directory, "limits": self.limits, "isolation": self.isolation, "bwrap": self.bwrap,
                "allowed_domains": self.allowed_domains, "idle_s": self.idle_s, "env": dict(self.env)}  # fmt: skip


def box_limits(settings: ContainersSettings, memory_limit: str) -> Limits:
    """A container's limits: its ``memory_limit`` (``"1g"`` … ``"64g"``) and the settings'."""
    gib = int(memory_limit.rstrip("g")) if memory_limit in MEMORY_LIMITS else 1
    return Limits(memory_bytes=gib * _GiB, cpu_seconds=settings.cpu_seconds, max_processes=settings.max_processes,
                  max_disk_bytes=settings.max_disk_bytes)  # fmt: skip


def check_code_tool(settings: ContainersSettings, tool: Mapping[str, Any], index: int) -> None:
    """Refuse a request's tool that runs code on this server (``code_interpreter``, ``shell``
    in a container) when this server cannot honour it, before anything runs; a ``shell`` run by
    the client (``local``) is not checked.

    Raises:
        ServerError: bubblewrap (or setpriv) is missing; the message names the package and the
            command that installs it (``param``: ``tools[i]``).
        InvalidRequest: its auto container asks for a network allowlist, which the
            configuration forbids (``param``: ``tools[i].container.network_policy``, or
            ``tools[i].environment.network_policy``).
    """
    if tool.get("type") == "code_interpreter":
        where, container = "container", tool.get("container")
    else:
        where, container = "environment", tool.get("environment")
        if not isinstance(container, Mapping) or container.get("type") not in ("container_auto", "container_reference"):
            return  # the client runs the commands
    try:
        check_available(settings.isolation, bwrap=settings.bwrap)
    except SandboxUnavailable as exc:
        raise ServerError(f"Code cannot run on this server: {exc}.", param=f"tools[{index}]",
                          code="sandbox_unavailable") from exc  # fmt: skip
    if isinstance(container, Mapping) and container.get("network_policy") is not None:
        parse_network_policy(container["network_policy"], param=f"tools[{index}].{where}.network_policy",
                             allowlists=settings.network_allowlists)  # fmt: skip


class ContainerFleet(Protocol):
    """Where containers' sandboxes run: one per container, started on its first run."""

    async def run_python(self, box: BoxSpec, code: str, *, timeout_s: float) -> PythonResult:
        """Run ``code`` in the container's persistent kernel (``Sandbox.run_python``)."""
        ...

    async def run_shell(
        self, box: BoxSpec, commands: Sequence[str], *, timeout_s: float, max_output_length: int | None
    ) -> list[CommandResult]:
        """Run shell commands in the container (``Sandbox.run_shell``)."""
        ...

    async def reserve(self, memory_limit: str) -> str | None:
        """The id a container about to be made with ``memory_limit`` should take, when this
        fleet has a sandbox's process ready for it (a spare); None: make a new id."""
        ...

    async def stop(self, container_id: str) -> None:
        """Stop a container's sandbox, if one runs (its container was deleted or expired)."""
        ...

    async def close(self) -> None:
        """Stop what this fleet started and owns."""
        ...


class LocalFleet:
    """Sandboxes in this process, one per container (the in-process runtime).

    Each is started, and later closed, on this event loop's thread (bubblewrap ends with the
    thread that started it). A sandbox idle past its container's expiry is closed the next
    time any container runs here.
    """

    def __init__(self) -> None:
        self._boxes: dict[str, tuple[Sandbox, BoxSpec]] = {}
        self._last_used: dict[str, float] = {}
        self._busy: dict[str, int] = {}
        self._starting: dict[str, asyncio.Lock] = {}

    async def _box(self, box: BoxSpec) -> Sandbox:
        await self._close_idle(box.container_id)
        lock = self._starting.setdefault(box.container_id, asyncio.Lock())
        async with lock:
            found = self._boxes.get(box.container_id)
            if found is None:
                sandbox = Sandbox(Path(box.directory), box.limits, isolation=box.isolation, bwrap=box.bwrap,
                                  allowed_domains=box.allowed_domains, env=box.env)
                await sandbox.start()
                found = self._boxes[box.container_id] = (sandbox, box)
        self._last_used[box.container_id] = time.monotonic()
        return found[0]

    async def run_python(self, box: BoxSpec, code: str, *, timeout_s: float) -> PythonResult:
        async with self._using(box) as sandbox:
            return await sandbox.run_python(code, timeout_s=timeout_s)

    async def run_shell(
        self, box: BoxSpec, commands: Sequence[str], *, timeout_s: float, max_output_length: int | None
    ) -> list[CommandResult]:
        async with self._using(box) as sandbox:
            return await sandbox.run_shell(commands, timeout_s=timeout_s, max_output_length=max_output_length)

    @contextlib.asynccontextmanager
    async def _using(self, box: BoxSpec) -> AsyncIterator[Sandbox]:
        """The container's sandbox, busy (never closed as idle) while the block runs."""
        cid = box.container_id
        self._busy[cid] = self._busy.get(cid, 0) + 1
        try:
            yield await self._box(box)
        finally:
            self._busy[cid] -= 1
            self._last_used[cid] = time.monotonic()

    async def reserve(self, memory_limit: str) -> str | None:
        """None: a sandbox in this process starts in a tenth of a second, no spare is kept."""
        return None

    async def stop(self, container_id: str) -> None:
        found = self._boxes.pop(container_id, None)
        self._last_used.pop(container_id, None)
        if found is not None:
            await found[0].close()

    async def close(self) -> None:
        for container_id in list(self._boxes):
            await self.stop(container_id)

    async def _close_idle(self, keep: str) -> None:
        now = time.monotonic()
        for container_id, (_, box) in list(self._boxes.items()):
            idle = not self._busy.get(container_id) and now - self._last_used.get(container_id, now) > box.idle_s
            if container_id != keep and idle:
                await self.stop(container_id)


def code_run(result: PythonResult, files: Sequence[Mapping[str, Any]]) -> CodeRun:
    """What the loop is told of a sandbox's run: its logs (stdout, stderr, then the traceback or
    the sandbox's notice), its figures as ``data:`` URLs, and the container files it wrote."""
    error = result.error or ""
    shared = len(os.path.commonprefix([result.stderr[::-1], error[::-1]]))  # the sandbox's notice ends both
    logs = result.stdout + result.stderr[: len(result.stderr) - shared] + error
    images = tuple("data:image/png;base64," + base64.b64encode(png).decode("ascii") for png in result.images)
    written = tuple(
        ContainerFile(file_id=f["id"], filename=posixpath.basename(f["path"]), path=f["path"]) for f in files
    )
    return CodeRun(logs=logs, images=images, files=written, failed=result.error is not None and result.limit is None,
                   limit=result.limit)  # fmt: skip


class ContainerRunner:
    """The loop's :class:`~troupe.agentloop.code_interpreter.CodeRunner` and
    :class:`~troupe.agentloop.shell.ShellRunner` for one tenant: its containers through the
    Containers API's service, their code and commands on a fleet.

    Args:
        containers: the runtime's ``ContainerService`` (the store's containers area).
        fleet: where the sandboxes run.
        tenant: whose containers these are: another tenant's is :class:`ContainerNotFound`.
        observer: the host's metrics (kernels started, limits hit).
    """

    def __init__(
        self, containers: ContainerService, fleet: ContainerFleet, tenant: str, *, observer: Observer | None = None,
        on_files: Callable[[Sequence[str]], Awaitable[None]] | None = None,
    ) -> None:  # fmt: skip
        self.containers = containers
        self.fleet = fleet
        self.tenant = tenant
        self.observer = observer
        self.on_files = on_files
        """Told the paths (relative to ``/mnt/data``) of the files each run wrote, once they are
        registered: a session turn's (:meth:`troupe.runtime.artifacts.ArtifactService.recorder`)."""
        self.settings: ContainersSettings = containers.settings

    async def container_for(self, spec: str | dict[str, Any], *, reuse: str | None) -> str:
        """An explicit container (checked: the tenant's, running) or, for the auto form, the
        thread's last container when it still runs (given the ``file_ids`` it lacks), else a
        new one named ``code_interpreter``."""
        if isinstance(spec, str):
            await self._active(spec)
            return spec
        file_ids = list(spec.get("file_ids") or ())
        if reuse is not None:
            with contextlib.suppress(ContainerNotFound):
                await self._active(reuse)
                await self._add_files(reuse, file_ids)
                return reuse
        body = {key: value for key, value in spec.items() if key != "type"}
        body.setdefault("name", AUTO_NAME)
        made = await self.containers.create_container(self.tenant, body)
        return str(made["id"])

    async def run(self, container_id: str, code: str) -> CodeRun:
        box = await self._box(container_id)
        result = await self.fleet.run_python(box, code, timeout_s=self.settings.call_timeout_s)
        if self.observer is not None:
            self.observer.container_run("python", started=result.fresh, limit=result.limit)
        return code_run(result, await self._register(container_id, result.changed_files))

    async def run_shell(
        self, container_id: str, commands: Sequence[str], *, timeout_ms: int | None, max_output_length: int | None
    ) -> list[CommandRun]:
        """Run shell commands in the container (the ``shell`` tool's
        :class:`~troupe.agentloop.shell.ShellRunner`), each bounded by ``timeout_ms`` (at most
        the configured ``call_timeout_s``); files they wrote become container files."""
        box = await self._box(container_id)
        timeout_s = self.settings.call_timeout_s
        if timeout_ms is not None and timeout_ms > 0:
            timeout_s = min(timeout_s, timeout_ms / 1000)
        results = await self.fleet.run_shell(box, commands, timeout_s=timeout_s, max_output_length=max_output_length)
        if self.observer is not None:
            for result in results:
                self.observer.container_run("shell", started=False, limit=result.limit)
        await self._register(container_id, None)
        return [CommandRun(stdout=r.stdout, stderr=r.stderr, exit_code=r.exit_code, timed_out=r.timed_out)
                for r in results]  # fmt: skip

    async def start(self, container_id: str, env: Mapping[str, str]) -> None:
        """Start the container's sandbox now, with ``env`` among its variables (an Agents API
        environment's, at provisioning): the commands and code run in it later, from any host,
        see them. A sandbox already running is left as it is."""
        box = replace(await self._box(container_id), env=dict(env))
        await self.fleet.run_shell(box, [], timeout_s=self.settings.call_timeout_s, max_output_length=None)

    async def _box(self, container_id: str) -> BoxSpec:
        container = await self._active(container_id)
        try:
            directory = await self.containers.directory(self.tenant, container_id)
        except (NotFound, InvalidRequest) as exc:
            raise ContainerNotFound(container_id) from exc
        limits = box_limits(self.settings, container.get("memory_limit") or "1g")
        idle_s = 60.0 * float(
            (container.get("expires_after") or {}).get("minutes") or self.settings.default_expires_minutes
        )
        policy = container.get("network_policy") or {}
        domains = tuple(policy.get("allowed_domains") or ()) if policy.get("type") == "allowlist" else None
        return BoxSpec(container_id, directory, limits, self.settings.isolation, idle_s, self.settings.bwrap, domains)

    async def _active(self, container_id: str) -> dict[str, Any]:
        try:
            return dict(await self.containers.mark_active(self.tenant, container_id))
        except (NotFound, InvalidRequest) as exc:
            raise ContainerNotFound(container_id) from exc

    async def _register(self, container_id: str, paths: Sequence[str] | None) -> list[dict[str, Any]]:
        if paths is not None and not paths:
            return []
        try:
            registered = list(await self.containers.register_files(self.tenant, container_id, paths))
        except (NotFound, InvalidRequest):
            return []  # deleted or expired while the code ran: its files went with it
        if self.on_files is not None and registered:
            await self.on_files([f["path"].removeprefix(MOUNT + "/") for f in registered])
        return registered

    async def _add_files(self, container_id: str, file_ids: Sequence[str]) -> None:
        """Copy into a reused container the ``file_ids`` whose name it does not hold yet."""
        if not file_ids:
            return
        page = await self.containers.list_files(self.tenant, container_id, limit=100)
        have = {posixpath.basename(f["path"]) for f in page.data}
        for file_id in file_ids:
            found = await self.containers.store.get_file(self.tenant, file_id)
            name = posixpath.basename(str((found or {}).get("filename") or "").replace("\\", "/"))
            if found is None or name not in have:
                await self.containers.create_file(self.tenant, container_id, file_id=file_id)  # raises NotFound
