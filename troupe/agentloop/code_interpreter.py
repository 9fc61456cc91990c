"""The ``code_interpreter`` tool: the loop runs the model's Python in a container.

Internal to the loop and Troupe's runtime: not part of :mod:`troupe.agentloop`'s public surface.

A request that offers ``{"type": "code_interpreter", "container": …}`` shows the model one
function tool, ``python(code)`` (:data:`PYTHON`: OpenAI's models know this tool as "the python
tool"). A call of it is run on the server (by :class:`CodeInterpreterTool`, an executor like
the others) and streams as a ``code_interpreter_call`` item, in OpenAI's order::

    response.output_item.added                     status in_progress, code "", container_id
    response.code_interpreter_call.in_progress
    response.code_interpreter_call_code.delta ×N   the code, as the model writes it
    response.code_interpreter_call_code.done       the whole code
    response.code_interpreter_call.interpreting    the code runs
    response.code_interpreter_call.completed       (only when it completed)
    response.output_item.done                      status completed | incomplete | failed

The item's ``outputs`` (``logs``, then one ``image`` per figure) are given only when the
request's ``include`` has ``code_interpreter_call.outputs``; otherwise they are null (with it,
the item opens with ``[]``, as OpenAI's does).

**Status.** Code that raises is a *completed* call: its traceback is in the logs, and the model
reads it and tries again (OpenAI's behaviour). A run a limit stopped (:attr:`CodeRun.limit`: its
time, its memory…) is ``incomplete``. A call that could not run at all (no container could be
had, the runner failed, the arguments hold no code, a host died while it ran) is ``failed``.
In each case the model is told, in the call's output. There is no ``…failed`` or
``…incomplete`` event: the done item says it.

**Containers.** ``container`` is an explicit container id, checked before the response's first
event (an unknown or expired one is a 404 naming ``tools[i].container``), or ``"auto"`` /
``{"type": "auto", "file_ids", "memory_limit", "network_policy"}``. An auto container is
resolved once per response, when the model's first call of the tool starts streaming, by
:meth:`CodeRunner.container_for`: it reuses the container the thread's last
``code_interpreter_call`` (history or input) ran in when that one is still active, and creates
one otherwise. Every call of the response then runs there.

**What the model sees.** The tool's output is the run's logs (stdout, stderr, the traceback;
past :data:`LOGS_SHOWN` characters, their start and end), then what else happened, in brackets: a limit that stopped it, the number of images the user
was shown, and the files the call wrote, each as the ``sandbox:`` link to give the user::

    3.14159
    [Files written, which you can link for the user: sandbox:/mnt/data/pi.csv]

**Citations.** When the answer is done, every mention in its text of a file this response's
calls wrote, by its path (``sandbox:/mnt/data/pi.csv`` or ``/mnt/data/pi.csv``), becomes a
``container_file_citation`` annotation spanning the mention (``start_index`` to ``end_index``,
exclusive, as OpenAI's span a ``sandbox:`` link), with its ``container_id``, ``file_id`` and
``filename``. Files of earlier responses are not cited (the model is not told their ids again).

**In history.** A ``code_interpreter_call`` item replayed to the model becomes the call and its
output again, rebuilt from its ``outputs``; an item stored without them tells the model they
were not kept (:func:`replayed_output`).

What runs code is a :class:`CodeRunner` (the host's reaches container actors); the loop knows
nothing of how.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from troupe.protocol import InvalidRequest, NotFound
from troupe.protocol.containers import MEMORY_LIMITS, parse_network_policy

from .model import ToolCall

__all__ = [
    "PYTHON",
    "INCLUDE_OUTPUTS",
    "ContainerFile",
    "CodeRun",
    "CodeRunner",
    "ContainerNotFound",
    "CodeInterpreterTool",
    "CodeStream",
    "code_of",
    "format_output",
    "item_outputs",
    "citations",
    "replayed_output",
    "last_container",
    "code_interpreter_spec",
]

PYTHON = "python"
"""The function tool the model is shown, and the name its calls carry."""

INCLUDE_OUTPUTS = "code_interpreter_call.outputs"
"""The ``include`` value that puts a call's ``outputs`` in its item."""

LOGS_SHOWN = 20_000
"""The most characters of a run's logs the model is shown: its start and its end (where a
traceback is), with what was cut said between. The item's ``logs`` keep what the runner gave."""

_DESCRIPTION = (
    "Run Python code in a stateful sandbox (like a Jupyter notebook): variables, imports and files "
    "persist between calls. Files the user provided are in /mnt/data; save files for the user there "
    "and link them as sandbox:/mnt/data/<name>. Figures you show (matplotlib) are returned to the "
    "user as images. Returns what the code printed (stdout, stderr, the traceback of an error)."
)
_PARAMETERS = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": "The Python code to run."}},
    "required": ["code"],
}


class ContainerNotFound(LookupError):
    """A named container does not exist for the caller, or has expired (:class:`CodeRunner`
    raises it; an explicit container the request names is then a 404)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerFile:
    """A container file a run created or changed."""

    file_id: str
    """The container file's id (``cfile_…``), what a ``container_file_citation`` names."""
    filename: str
    """Its name, without directories (``pi.csv``)."""
    path: str
    """Its path inside the container (``/mnt/data/pi.csv``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CodeRun:
    """What one run of code did (:meth:`CodeRunner.run`)."""

    logs: str = ""
    """stdout, stderr and the traceback, in order, as the model and the ``logs`` output see them."""
    images: tuple[str, ...] = ()
    """One URL per image the code displayed (a figure): the runner decides their form."""
    files: tuple[ContainerFile, ...] = ()
    """The container files the run created or changed (for ``container_file_citation``)."""
    failed: bool = False
    """The code raised (its traceback ends ``logs``). The call still completed: the model reads
    the error and may try again."""
    limit: str | None = None
    """The limit that stopped the run (``"timeout"``, ``"memory"``, …), if one did: the call is
    ``incomplete``. The runner says in ``logs`` what became of the interpreter's state."""

    def to_data(self) -> dict[str, Any]:
        """As JSON (a durable run's checkpoint keeps it)."""
        return {"logs": self.logs, "images": list(self.images), "failed": self.failed, "limit": self.limit,
                "files": [[f.file_id, f.filename, f.path] for f in self.files]}  # fmt: skip

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> CodeRun:
        """The inverse of :meth:`to_data`."""
        files = tuple(ContainerFile(file_id=i, filename=n, path=p) for i, n, p in data.get("files") or ())
        return cls(logs=data.get("logs") or "", images=tuple(data.get("images") or ()), files=files,
                   failed=bool(data.get("failed")), limit=data.get("limit"))  # fmt: skip


class CodeRunner(Protocol):
    """Runs code in containers (the host's reaches the container actors). Every method is
    scoped to one caller (tenant): another's container is :class:`ContainerNotFound`."""

    async def container_for(self, spec: str | dict[str, Any], *, reuse: str | None) -> str:
        """The container a response's calls run in.

        Args:
            spec: the tool's ``container``: an explicit container id, or the auto form,
                ``{"type": "auto", "file_ids"?, "memory_limit"?, "network_policy"?}``
                (``"auto"`` arrives as ``{"type": "auto"}``).
            reuse: for the auto form, the container the thread's last ``code_interpreter_call``
                ran in (None: the thread has none). Reuse it when it is still active (adding
                ``file_ids`` it lacks); else create one from ``spec``.

        Returns:
            The container id.

        Raises:
            ContainerNotFound: an explicit container that does not exist or has expired.
            Exception: no container could be had (the runner is down, limits): the call
                fails and the model is told.
        """
        ...

    async def run(self, container_id: str, code: str) -> CodeRun:
        """Run ``code`` in the container's interpreter, whose state persists between runs.

        Code that raises and a limit that stops the run are results, not exceptions
        (:attr:`CodeRun.failed`, :attr:`CodeRun.limit`).

        Raises:
            ContainerNotFound: the container expired or was deleted.
            Exception: the run could not happen; the call fails and the model is told.
        """
        ...


@dataclass(slots=True)
class CodeInterpreterTool:
    """The executor of ``python`` calls for one response.

    Args:
        runner: runs the code.
        container: the tool's ``container``, checked (:func:`code_interpreter_spec`).
        param: where the request names it (``tools[i].container``), for errors.
        reuse: the container the thread's last ``code_interpreter_call`` ran in
            (:func:`last_container`).
    """

    runner: CodeRunner
    container: str | dict[str, Any]
    param: str = "tools[0].container"
    reuse: str | None = None
    container_id: str | None = None
    """The container this response's calls run in, once resolved."""
    runs: dict[str, tuple[str, CodeRun]] = field(default_factory=dict)
    """call_id -> (the container it ran in, what it did): for its item and citations."""
    _resolving: asyncio.Lock = field(default_factory=asyncio.Lock)
    _running: asyncio.Lock = field(default_factory=asyncio.Lock)

    def definitions(self) -> list[dict[str, Any]]:
        return [{"type": "function", "name": PYTHON, "description": _DESCRIPTION, "parameters": _PARAMETERS,
                 "strict": False}]  # fmt: skip

    def can_execute(self, call: ToolCall) -> bool:
        return call.name == PYTHON

    def is_idempotent(self, call: ToolCall) -> bool:
        return False  # code changes the interpreter's state and the files: never run twice

    @property
    def known_container(self) -> str:
        """The container id as far as it is known (for an item that opens before it is resolved)."""
        if self.container_id is not None:
            return self.container_id
        return self.container if isinstance(self.container, str) else ""

    async def resolve(self) -> str:
        """The response's container, resolved on first use (:meth:`CodeRunner.container_for`).
        A failure is not kept: the next call tries again."""
        async with self._resolving:
            if self.container_id is None:
                reuse = None if isinstance(self.container, str) else self.reuse
                self.container_id = await self.runner.container_for(self.container, reuse=reuse)
            return self.container_id

    async def check(self) -> None:
        """Before the response's first event: an explicit container exists.

        Raises:
            NotFound: it does not, or has expired (``param``: ``tools[i].container``).
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
        code = code_of(call.arguments)
        if not code.strip():
            raise ValueError(f"{PYTHON} needs a non-empty 'code' string.")
        container_id = await self.resolve()
        async with self._running:  # one interpreter: the response's calls run one at a time, in order
            run = await self.runner.run(container_id, code)
        self.runs[call.call_id] = (container_id, run)
        return format_output(run)


def code_of(arguments: str) -> str:
    """The code of a ``python`` call's arguments: ``{"code": …}``, or, from a model that sends
    the code itself (not JSON), the arguments as they are; "" when there is none."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return "" if arguments.lstrip().startswith("{") else arguments
    if isinstance(value, dict):
        code = value.get("code")
        return code if isinstance(code, str) else ""
    return value if isinstance(value, str) else ""


_CODE_OPENS = re.compile(r'\s*\{\s*"code"\s*:\s*"')


class CodeStream:
    """The code of a call whose arguments stream in, told as deltas as soon as it is sure.

    ``{"code": "…`` streams the string's characters as they arrive (an escape only once it
    is whole); code sent as the arguments themselves streams as it is; anything else (another
    key first) is told whole when the call ends (:meth:`rest`).
    """

    __slots__ = ("arguments", "sent")

    def __init__(self) -> None:
        self.arguments = ""
        self.sent = ""
        """The code told so far."""

    def feed(self, delta: str) -> str:
        """Take an arguments delta; return the code it adds ("" for none yet)."""
        self.arguments += delta
        code = _code_prefix(self.arguments)
        if code is None or not code.startswith(self.sent):
            return ""
        new, self.sent = code[len(self.sent) :], code
        return new

    def rest(self, code: str) -> str:
        """What of the final ``code`` is still to tell (all of it after a delta it does not
        extend, which a well-formed call never gives)."""
        return code[len(self.sent) :] if code.startswith(self.sent) else ""


def _code_prefix(arguments: str) -> str | None:
    """The code the arguments so far surely begin with; None when that is not yet known."""
    stripped = arguments.lstrip()
    if not stripped:
        return None
    if stripped.startswith('"'):
        return None  # a JSON string: told whole when it ends
    if not stripped.startswith("{"):
        return arguments  # the code itself (code_of takes it as it is)
    opened = _CODE_OPENS.match(arguments)
    if opened is None:
        return None
    return json_string_prefix(arguments, opened.end())[0]


def json_string_prefix(text: str, start: int) -> tuple[str | None, int | None]:
    """The JSON string whose body starts at ``text[start]`` (after its opening quote), as far as
    it has streamed: what of it is sure, decoded (an escape only once it is whole; None: nothing
    decodes), and the index after its closing quote (None: not closed yet)."""
    i = start
    while i < len(text) and text[i] != '"':
        if text[i] != "\\":
            i += 1
        elif i + 1 >= len(text):
            break
        elif text[i + 1] != "u":
            i += 2
        elif i + 6 > len(text):
            break
        elif text[i + 2 : i + 4].lower() in ("d8", "d9", "da", "db"):  # a high surrogate: wait for its pair
            if i + 12 > len(text):
                break
            i += 12 if text[i + 6 : i + 8] == "\\u" else 6
        else:
            i += 6
    try:
        decoded: str = json.loads('"' + text[start:i] + '"', strict=False)
    except ValueError:
        return None, None
    return decoded, (i + 1 if i < len(text) and text[i] == '"' else None)


def format_output(run: CodeRun) -> str:
    """What the model is shown for a run: its logs, then what else happened (module docstring)."""
    logs = run.logs.rstrip("\n")
    if len(logs) > LOGS_SHOWN:
        half = LOGS_SHOWN // 2
        logs = f"{logs[:half]}\n[… {len(logs) - 2 * half} characters of output cut …]\n{logs[-half:]}"
    lines = [logs if logs.strip() else "(The code printed nothing.)"]
    if run.limit:
        lines.append(f"[The run was stopped: it hit its {run.limit} limit.]")
    if run.images:
        n = len(run.images)
        lines.append(f"[{n} image{'s' if n > 1 else ''} shown to the user.]")
    if run.files:
        links = ", ".join(f"sandbox:{f.path}" for f in run.files)
        lines.append(f"[Files written, which you can link for the user: {links}]")
    return "\n".join(lines)


def item_outputs(run: CodeRun) -> list[dict[str, Any]]:
    """A run's ``outputs``, as the item gives them: its logs (when it printed any), then its
    images (``response_code_interpreter_tool_call.OutputLogs`` / ``OutputImage``)."""
    outputs: list[dict[str, Any]] = [{"logs": run.logs, "type": "logs"}] if run.logs else []
    return outputs + [{"type": "image", "url": url} for url in run.images]


def citations(text: str, runs: Iterable[tuple[str, CodeRun]]) -> list[dict[str, Any]]:
    """The ``container_file_citation`` annotations of ``text``: one per mention of a file the
    ``runs`` (container id, run) wrote, by its path, with or without ``sandbox:``; the latest
    run's file wins a path, a longer path wins over one it starts with. In text order."""
    files = {f.path: (container_id, f) for container_id, run in runs for f in run.files if f.path}
    taken: list[tuple[int, int]] = []
    found = []
    for path in sorted(files, key=len, reverse=True):
        container_id, file = files[path]
        for match in re.finditer(r"(?<![\w/.:-])(?:sandbox:)?" + re.escape(path) + r"(?![\w/-]|\.\w)", text):
            start, end = match.span()
            if any(start < e and s < end for s, e in taken):
                continue
            taken.append((start, end))
            found.append({"container_id": container_id, "end_index": end, "file_id": file.file_id,
                          "filename": file.filename, "start_index": start, "type": "container_file_citation"})  # fmt: skip
    return sorted(found, key=lambda a: a["start_index"])


def replayed_output(item: Mapping[str, Any]) -> str:
    """What the model is shown, in a later turn, for a ``code_interpreter_call`` item of history."""
    outputs = item.get("outputs")
    status = item.get("status")
    if not isinstance(outputs, list):
        told = "The output of this call was not kept (the request did not include code_interpreter_call.outputs)."
    else:
        logs = "".join(o["logs"] for o in outputs if isinstance(o, dict) and isinstance(o.get("logs"), str))
        images = sum(1 for o in outputs if isinstance(o, dict) and o.get("type") == "image")
        told = format_output(CodeRun(logs=logs, images=("",) * images))
    if status == "failed":
        return "Error: this call failed. " + told
    if status == "incomplete":
        return told + "\n[The run was stopped before it finished.]"
    return told


def last_container(items: Iterable[Mapping[str, Any]]) -> str | None:
    """The container the last ``code_interpreter_call`` or ``shell_call`` (in a container) of
    ``items`` ran in (None: none did): what an auto container of either tool reuses."""
    found = None
    for item in items:
        container_id: Any = None
        if item.get("type") == "code_interpreter_call":
            container_id = item.get("container_id")
        elif item.get("type") == "shell_call" and isinstance(env := item.get("environment"), dict):
            container_id = env.get("container_id") if env.get("type") == "container_reference" else None
        if isinstance(container_id, str) and container_id:
            found = container_id
    return found


def code_interpreter_spec(tools: Sequence[dict[str, Any]]) -> tuple[int, str | dict[str, Any]] | None:
    """The request's one ``code_interpreter`` tool: its index and its ``container``, checked
    (``"auto"`` as ``{"type": "auto"}``); None when it offers none.

    Raises:
        InvalidRequest: a second such tool, or a ``container`` OpenAI would refuse (param
            ``tools[i].container…``).
    """
    found = [(i, t) for i, t in enumerate(tools) if t.get("type") == "code_interpreter"]
    if not found:
        return None
    if len(found) > 1:
        raise InvalidRequest("Only one code_interpreter tool may be given.", param=f"tools[{found[1][0]}]",
                             code="invalid_value")  # fmt: skip
    i, tool = found[0]
    param = f"tools[{i}].container"
    container = tool.get("container")
    if container is None:
        raise InvalidRequest(f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")
    if container == "auto":
        return i, {"type": "auto"}
    if isinstance(container, str):
        if not container.strip():
            raise InvalidRequest(f"Invalid '{param}': expected a container id or 'auto'.", param=param,
                                 code="invalid_value")  # fmt: skip
        return i, container
    if not isinstance(container, dict):
        raise InvalidRequest(f"Invalid type for '{param}': expected a string or an object.", param=param,
                             code="invalid_type")  # fmt: skip
    if container.get("type") != "auto":
        raise InvalidRequest(f"Invalid value for '{param}.type': expected 'auto'.", param=f"{param}.type",
                             code="invalid_value")  # fmt: skip
    file_ids = container.get("file_ids")
    if file_ids is not None and (not isinstance(file_ids, list) or not all(isinstance(f, str) and f for f in file_ids)):
        raise InvalidRequest(f"Invalid value for '{param}.file_ids': expected a list of file ids.",
                             param=f"{param}.file_ids", code="invalid_value")  # fmt: skip
    limit = container.get("memory_limit")
    if limit is not None and limit not in MEMORY_LIMITS:
        raise InvalidRequest(f"Invalid value for '{param}.memory_limit': expected one of {', '.join(MEMORY_LIMITS)}.",
                             param=f"{param}.memory_limit", code="invalid_value")  # fmt: skip
    if container.get("network_policy") is not None:
        container = {**container, "network_policy": parse_network_policy(container["network_policy"],
                                                                          param=f"{param}.network_policy")}  # fmt: skip
    return i, dict(container)
