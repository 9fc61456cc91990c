"""The ``shell`` tool: the model runs shell commands, in a container or on the client's machine.

Internal to the loop and Troupe's runtime: not part of :mod:`troupe.agentloop`'s public surface.

A request that offers ``{"type": "shell", "environment": …}`` shows the model one function tool,
``shell(commands, timeout_ms?, max_output_length?)`` (:data:`SHELL`). Its ``environment`` says
where the commands run (:func:`shell_spec` checks it):

* absent, or ``{"type": "local"}``: on the client's machine. A call ends the response like a
  client function call: its ``shell_call`` item (``environment: {"type": "local"}``, status
  ``completed``) is the response's last; the client runs the commands and sends back a
  ``shell_call_output`` item (its ``call_id`` and ``output``) in the next request, which the
  transcript pairs with the call (:mod:`.transcript`).
* ``{"type": "container_reference", "container_id": "cntr_…"}``: in that container, checked
  before the response's first event (an unknown or expired one is a 404 naming
  ``tools[i].environment.container_id``).
* ``{"type": "container_auto", "file_ids"?, "memory_limit"?, "network_policy"?}``: in a
  container :meth:`ShellRunner.container_for` gives for ``{"type": "auto", …}``, reusing the
  container of the thread's last ``shell_call`` or ``code_interpreter_call`` when it is still
  active (:func:`last_container`), resolved once per response when the first call opens.

A call run on the server (by :class:`ShellTool`, an executor like the others) streams as two
items, in OpenAI's order::

    response.output_item.added                    shell_call, in_progress, action.commands []
    response.shell_call_command.added   ┐ per command (command_index), as the model writes it
    response.shell_call_command.delta   │ (:class:`CommandsStream`): added as its string opens,
    response.shell_call_command.done    ┘ deltas as it grows, done as it closes
    response.output_item.done                     shell_call, completed
    response.output_item.added                    shell_call_output, in_progress, output []
    response.shell_call_output_content.delta  ┐ per command: its stdout and stderr
    response.shell_call_output_content.done   ┘ per command: its output entry
    response.output_item.done                     shell_call_output, completed | incomplete

A local call streams only the first five.

**Status.** The ``shell_call`` item is ``completed`` once its arguments are whole
(``incomplete`` when the model's turn was cut short; then nothing runs). Its
``shell_call_output`` is ``completed`` when the commands ran, whatever they did: a non-zero
exit code and a timeout are outcomes (``{"type": "exit", "exit_code": n}``,
``{"type": "timeout"}``) the model reads. It is ``incomplete``, with no output entries, when the
commands could not run (no container could be had, the runner failed, the arguments hold no
commands, a host died while they ran): OpenAI's items have no ``failed``. Either way the model
is told, in the call's output. (code_interpreter's ``failed`` is this ``incomplete``.)

**What the model sees** (:func:`format_output`), per command: the command, its stdout, its
stderr, and how it ended; each stream past :data:`OUTPUT_SHOWN` characters (shared between the
commands) is cut in the middle::

    $ ls /mnt/data
    data.csv
    [exit code 0]
    $ cat nope
    [stderr]
    cat: nope: No such file or directory
    [exit code 1]

**In history.** A ``shell_call`` replayed to the model becomes a ``shell`` call of its
``action`` again, and its ``shell_call_output`` the call's output, rebuilt from its ``output``
entries (:func:`replayed_output`); nothing runs again.

What runs commands is a :class:`ShellRunner` (the host's reaches container actors); the loop
knows nothing of how.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from troupe.protocol import InvalidRequest, NotFound

from .code_interpreter import ContainerNotFound, code_interpreter_spec, json_string_prefix, last_container
from .model import ToolCall

__all__ = [
    "SHELL",
    "CommandRun",
    "ShellRunner",
    "ShellTool",
    "CommandsStream",
    "CommandStep",
    "shell_spec",
    "shell_action",
    "format_output",
    "output_entries",
    "runs_of_entries",
    "replayed_output",
    "last_container",
]

SHELL = "shell"
"""The function tool the model is shown, and the name its calls carry."""

OUTPUT_SHOWN = 20_000
"""The most characters of a call's output the model is shown, shared between its commands'
streams: each keeps its start and end, with what was cut said between. The
``shell_call_output`` item keeps what the runner gave."""

_DESCRIPTION = (
    "Run shell commands. Each command runs with /bin/sh, one after another, in the working directory "
    "(/mnt/data in a container, where the user's files are and where files for the user go). Returns each "
    "command's stdout, stderr and exit code (or that it timed out)."
)
_PARAMETERS = {
    "type": "object",
    "properties": {
        "commands": {"type": "array", "items": {"type": "string"}, "description": "The commands to run, in order."},
        "timeout_ms": {"type": "integer", "description": "The most milliseconds each command may run."},
        "max_output_length": {"type": "integer", "description": "The most characters of each command's output to return."},
    },
    "required": ["commands"],
}


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandRun:
    """What one command did (:meth:`ShellRunner.run_shell`)."""

    stdout: str = ""
    """What it wrote to stdout (cut to ``max_output_length`` by the runner, when given)."""
    stderr: str = ""
    """What it wrote to stderr (likewise)."""
    exit_code: int | None = None
    """Its exit code; None: the command was killed (its timeout, or another limit)."""
    timed_out: bool = False
    """It ran past its ``timeout_ms`` and was killed (the outcome ``{"type": "timeout"}``)."""

    def to_data(self) -> dict[str, Any]:
        """As JSON (a durable run's checkpoint keeps it)."""
        return {"stdout": self.stdout, "stderr": self.stderr, "exit_code": self.exit_code, "timed_out": self.timed_out}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> CommandRun:
        """The inverse of :meth:`to_data`."""
        return cls(stdout=data.get("stdout") or "", stderr=data.get("stderr") or "", exit_code=data.get("exit_code"),
                   timed_out=bool(data.get("timed_out")))  # fmt: skip


class ShellRunner(Protocol):
    """Runs shell commands in containers (the host's reaches the container actors). Every
    method is scoped to one caller (tenant): another's container is
    :class:`~troupe.agentloop.code_interpreter.ContainerNotFound`."""

    async def container_for(self, spec: str | dict[str, Any], *, reuse: str | None) -> str:
        """The container a response's calls run in: exactly
        :meth:`~troupe.agentloop.code_interpreter.CodeRunner.container_for`'s contract.

        Args:
            spec: an explicit container id (``container_reference``), or the auto form,
                ``{"type": "auto", "file_ids"?, "memory_limit"?, "network_policy"?}``
                (``container_auto``).
            reuse: for the auto form, the container of the thread's last ``shell_call`` or
                ``code_interpreter_call`` (None: none). Reuse it when it is still active
                (adding ``file_ids`` it lacks); else create one from ``spec``.

        Returns:
            The container id.

        Raises:
            ContainerNotFound: an explicit container that does not exist or has expired.
            Exception: no container could be had: the call cannot run and the model is told.
        """
        ...

    async def run_shell(
        self, container_id: str, commands: Sequence[str], *, timeout_ms: int | None, max_output_length: int | None
    ) -> list[CommandRun]:
        """Run ``commands`` one after another with ``/bin/sh`` in ``/mnt/data`` of the container.

        Args:
            container_id: from :meth:`container_for`.
            commands: the model's commands, in order.
            timeout_ms: the most each command may run (None: the runner's own limit).
            max_output_length: the most characters of each command's output to keep (None:
                the runner's own limit).

        Returns:
            One :class:`CommandRun` per command, in order. A non-zero exit code and a timeout
            are results, not exceptions.

        Raises:
            ContainerNotFound: the container expired or was deleted.
            Exception: the commands could not run; the call's output item is ``incomplete``
                and the model is told.
        """
        ...


@dataclass(slots=True)
class ShellTool:
    """The request's ``shell`` tool for one response, and the executor of its calls when they
    run on the server.

    Args:
        runner: runs the commands (None: the local environment; the client runs them and
            nothing here executes).
        container: for a container environment, its explicit id or its auto spec
            (:func:`shell_spec`).
        param: where the request names the container (``tools[i].environment.container_id``
            or ``tools[i].environment``), for errors.
        reuse: the container of the thread's last ``shell_call`` or ``code_interpreter_call``
            (:func:`last_container`).
    """

    runner: ShellRunner | None = None
    container: str | dict[str, Any] | None = None
    param: str = "tools[0].environment"
    reuse: str | None = None
    container_id: str | None = None
    """The container this response's calls run in, once resolved."""
    runs: dict[str, tuple[str, list[CommandRun]]] = field(default_factory=dict)
    """call_id -> (the container it ran in, what each command did): for its output item."""
    _resolving: asyncio.Lock = field(default_factory=asyncio.Lock)
    _running: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def local(self) -> bool:
        """The client runs the commands (``environment`` absent or ``local``)."""
        return self.runner is None

    def definitions(self) -> list[dict[str, Any]]:
        return [{"type": "function", "name": SHELL, "description": _DESCRIPTION, "parameters": _PARAMETERS,
                 "strict": False}]  # fmt: skip

    def can_execute(self, call: ToolCall) -> bool:
        return self.runner is not None and call.name == SHELL

    def is_idempotent(self, call: ToolCall) -> bool:
        return False  # commands change the container's files: never run twice

    @property
    def known_container(self) -> str:
        """The container id as far as it is known (for an item that opens before it is resolved)."""
        if self.container_id is not None:
            return self.container_id
        return self.container if isinstance(self.container, str) else ""

    def environment(self) -> dict[str, Any]:
        """The ``environment`` of this tool's ``shell_call`` items."""
        if self.local:
            return {"type": "local"}
        return {"container_id": self.known_container, "type": "container_reference"}

    async def resolve(self) -> str:
        """The response's container, resolved on first use (:meth:`ShellRunner.container_for`).
        A failure is not kept: the next call tries again."""
        assert self.runner is not None and self.container is not None, "a local shell has no container"
        async with self._resolving:
            if self.container_id is None:
                reuse = None if isinstance(self.container, str) else self.reuse
                self.container_id = await self.runner.container_for(self.container, reuse=reuse)
            return self.container_id

    async def check(self) -> None:
        """Before the response's first event: an explicit container exists.

        Raises:
            NotFound: it does not, or has expired (``param``: ``tools[i].environment.container_id``).
        """
        if not isinstance(self.container, str):
            return
        try:
            await self.resolve()
        except ContainerNotFound as exc:
            raise NotFound(f"Container with id '{self.container}' not found.", param=self.param) from exc
        except Exception:  # noqa: BLE001 - the runner's trouble: a call tries again, and tells the model
            pass

    async def execute(self, call: ToolCall) -> str:
        action = shell_action(call.arguments, strict=True)
        assert self.runner is not None
        container_id = await self.resolve()
        async with self._running:  # one working directory: the response's calls run one at a time, in order
            runs = await self.runner.run_shell(container_id, action["commands"], timeout_ms=action["timeout_ms"],
                                               max_output_length=action["max_output_length"])  # fmt: skip
        if len(runs) != len(action["commands"]):
            raise RuntimeError(f"the runner answered {len(runs)} results for {len(action['commands'])} commands")
        self.runs[call.call_id] = (container_id, list(runs))
        return format_output(action["commands"], runs)


_COMMANDS_OPEN = re.compile(r'\s*\{\s*"commands"\s*:\s*\[')

CommandStep = tuple[str, int, str]
"""What :class:`CommandsStream` tells: ``("added", i, "")``, ``("delta", i, text)`` or
``("done", i, command)``, for the command at index ``i``."""


class CommandsStream:
    """The commands of a call whose arguments stream in, told as they are written.

    ``{"commands": ["…", "…"`` tells each command as its string opens (added), grows (deltas:
    its characters, an escape only once it is whole) and closes (done). Arguments of any other
    shape (another key first, a string for ``commands``) tell nothing until the call ends, when
    :meth:`rest` tells every command not yet told, whole.
    """

    __slots__ = ("arguments", "sent", "closed")

    def __init__(self) -> None:
        self.arguments = ""
        self.sent: list[str] = []
        """Each command as told so far."""
        self.closed: list[bool] = []
        """Whether each command's done was told."""

    def feed(self, delta: str) -> list[CommandStep]:
        """Take an arguments delta; return what it tells."""
        self.arguments += delta
        steps: list[CommandStep] = []
        for i, (text, closed) in enumerate(_commands_prefix(self.arguments)):
            if i == len(self.sent):
                self.sent.append("")
                self.closed.append(False)
                steps.append(("added", i, ""))
            if self.closed[i] or not text.startswith(self.sent[i]):
                continue
            if len(text) > len(self.sent[i]):
                steps.append(("delta", i, text[len(self.sent[i]) :]))
                self.sent[i] = text
            if closed:
                self.closed[i] = True
                steps.append(("done", i, text))
        return steps

    def rest(self, commands: Sequence[str]) -> list[CommandStep]:
        """What is still to tell of the final ``commands``: every one not yet done, whole."""
        steps: list[CommandStep] = []
        for i, command in enumerate(commands):
            if i == len(self.sent):
                self.sent.append("")
                self.closed.append(False)
                steps.append(("added", i, ""))
            if i >= len(self.closed) or self.closed[i]:
                continue
            if command.startswith(self.sent[i]) and len(command) > len(self.sent[i]):
                steps.append(("delta", i, command[len(self.sent[i]) :]))
            self.sent[i], self.closed[i] = command, True
            steps.append(("done", i, command))
        return steps


def _commands_prefix(arguments: str) -> list[tuple[str, bool]]:
    """The commands the arguments so far surely begin with: each as far as it is sure, and
    whether its string is closed ([] when the arguments are not ``{"commands": [`` strings)."""
    opened = _COMMANDS_OPEN.match(arguments)
    if opened is None:
        return []
    found: list[tuple[str, bool]] = []
    pos = opened.end()
    while True:
        while pos < len(arguments) and arguments[pos] in " \t\r\n":
            pos += 1
        if pos >= len(arguments) or arguments[pos] != '"':
            return found  # not yet, the list's end, or not a string: told at the end
        text, end = json_string_prefix(arguments, pos + 1)
        if text is None:
            return found
        found.append((text, end is not None))
        if end is None:
            return found
        pos = end
        while pos < len(arguments) and arguments[pos] in " \t\r\n":
            pos += 1
        if pos >= len(arguments) or arguments[pos] != ",":
            return found
        pos += 1


def shell_action(arguments: str, *, strict: bool = False) -> dict[str, Any]:
    """A ``shell`` call's arguments as the item's ``action``: ``{"commands", "max_output_length",
    "timeout_ms"}`` (the SDK's field order).

    Args:
        arguments: the call's JSON arguments.
        strict: raise on arguments that cannot run (for :meth:`ShellTool.execute`); otherwise
            what is usable is kept (for the item, which shows what the model wrote).

    Raises:
        ValueError: with ``strict``: not a JSON object, no non-empty ``commands`` list of
            strings, or a limit that is not a positive integer (the model is told).
    """
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        value = None
    if not isinstance(value, dict):
        if strict:
            raise ValueError(f"{SHELL} needs a JSON object with 'commands', a list of strings.")
        value = {}
    commands = value.get("commands")
    if isinstance(commands, str):  # one command, not in a list: what the model meant is plain
        commands = [commands]
    if not isinstance(commands, list) or not all(isinstance(c, str) for c in commands) or not commands:
        if strict:
            raise ValueError(f"{SHELL} needs 'commands': a non-empty list of strings.")
        commands = [c for c in commands if isinstance(c, str)] if isinstance(commands, list) else []
    limits: dict[str, int | None] = {}
    for name in ("max_output_length", "timeout_ms"):
        limit = value.get(name)
        ok = limit is None or (isinstance(limit, int) and not isinstance(limit, bool) and limit > 0)
        if not ok and strict:
            raise ValueError(f"{SHELL}'s '{name}' must be a positive integer.")
        limits[name] = limit if ok else None
    return {"commands": list(commands), **limits}


def _cut(text: str, most: int) -> str:
    if len(text) <= most:
        return text
    half = most // 2
    return f"{text[:half]}\n[… {len(text) - 2 * half} characters cut …]\n{text[-half:]}"


def _ending(run: CommandRun) -> str:
    if run.timed_out:
        return "[timed out]"
    if run.exit_code is None:
        return "[killed: the command hit a limit]"
    return f"[exit code {run.exit_code}]"


def format_output(commands: Sequence[str], runs: Sequence[CommandRun]) -> str:
    """What the model is shown for a call's commands and what they did (module docstring)."""
    most = max(1_000, OUTPUT_SHOWN // max(1, 2 * len(runs)))
    lines: list[str] = []
    for i, run in enumerate(runs):
        lines.append(f"$ {commands[i]}" if i < len(commands) else "$ (a command)")
        if run.stdout:
            lines.append(_cut(run.stdout.rstrip("\n"), most))
        if run.stderr:
            lines += ["[stderr]", _cut(run.stderr.rstrip("\n"), most)]
        lines.append(_ending(run))
    return "\n".join(lines) if lines else "(No command ran.)"


def output_entries(runs: Iterable[CommandRun]) -> list[dict[str, Any]]:
    """The ``shell_call_output`` item's ``output``: one entry per command
    (``response_function_shell_tool_call_output.Output``, in its field order)."""
    return [{"outcome": _outcome(run), "stderr": run.stderr, "stdout": run.stdout} for run in runs]


def _outcome(run: CommandRun) -> dict[str, Any]:
    if run.timed_out or run.exit_code is None:
        # A command killed by another limit has no exit code either: OpenAI's outcomes are these two.
        return {"type": "timeout"}
    return {"exit_code": run.exit_code, "type": "exit"}


def runs_of_entries(output: Any) -> list[CommandRun]:
    """The inverse of :func:`output_entries`, for an item a client sent or history holds:
    whatever it holds (entries that are not objects are skipped; an unknown outcome is a kill)."""
    runs = []
    for entry in output if isinstance(output, list) else ():
        if not isinstance(entry, dict):
            continue
        outcome: dict[str, Any] = entry["outcome"] if isinstance(entry.get("outcome"), dict) else {}
        code = outcome.get("exit_code") if outcome.get("type") == "exit" else None
        stdout, stderr = entry.get("stdout"), entry.get("stderr")
        runs.append(CommandRun(
            stdout=stdout if isinstance(stdout, str) else "", stderr=stderr if isinstance(stderr, str) else "",
            exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
            timed_out=outcome.get("type") == "timeout",
        ))  # fmt: skip
    return runs


def replayed_output(commands: Sequence[str], item: Mapping[str, Any]) -> str:
    """What the model is shown, in a later turn, for a ``shell_call_output`` item (the client's,
    or one the server wrote), the output of a call of ``commands``."""
    runs = runs_of_entries(item.get("output"))
    if not runs:
        if item.get("status") == "incomplete":
            return "Error: the commands could not run."
        return "(No command ran.)"
    told = format_output(commands, runs)
    if item.get("status") == "incomplete":
        return told + "\n[The commands were stopped before they all finished.]"
    return told


def shell_spec(tools: Sequence[dict[str, Any]]) -> tuple[int, str | dict[str, Any] | None] | None:
    """The request's one ``shell`` tool: its index and where its commands run: None (the local
    environment), an explicit container id (``container_reference``), or the auto form
    ``{"type": "auto", …}`` (``container_auto``), checked; None when it offers none.

    Raises:
        InvalidRequest: a second such tool, or an ``environment`` OpenAI would refuse, or one
            with ``skills`` (not served: refused, never ignored); ``param``
            ``tools[i].environment…``.
    """
    found = [(i, t) for i, t in enumerate(tools) if t.get("type") == SHELL]
    if not found:
        return None
    if len(found) > 1:
        raise InvalidRequest("Only one shell tool may be given.", param=f"tools[{found[1][0]}]", code="invalid_value")
    i, tool = found[0]
    param = f"tools[{i}].environment"
    env = tool.get("environment")
    if env is None:
        return i, None
    if not isinstance(env, dict):
        raise InvalidRequest(f"Invalid type for '{param}': expected an object.", param=param, code="invalid_type")
    if env.get("skills"):
        raise InvalidRequest(f"'{param}.skills' is not supported by this server.", param=f"{param}.skills",
                             code="unsupported_value")  # fmt: skip
    kind = env.get("type")
    if kind == "local":
        return i, None
    if kind == "container_reference":
        container_id = env.get("container_id")
        if not isinstance(container_id, str) or not container_id.strip():
            raise InvalidRequest(f"Invalid value for '{param}.container_id': expected a container id.",
                                 param=f"{param}.container_id", code="invalid_value")  # fmt: skip
        return i, container_id
    if kind == "container_auto":
        auto = {k: v for k, v in env.items() if k not in ("type", "skills")}
        # The same checks as code_interpreter's auto container, reported at this tool's place.
        try:
            checked = code_interpreter_spec([{"type": "code_interpreter", "container": {"type": "auto", **auto}}])
        except InvalidRequest as exc:
            where = (exc.param or "").replace("tools[0].container", param, 1)
            raise InvalidRequest(exc.message.replace("tools[0].container", param), param=where, code=exc.code) from exc
        assert checked is not None
        return i, checked[1]
    raise InvalidRequest(f"Invalid value for '{param}.type': expected 'local', 'container_auto' or "
                         "'container_reference'.", param=f"{param}.type", code="invalid_value")  # fmt: skip
