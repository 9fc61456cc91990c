"""Semantic loop events: what happened, without wire details.

The driver yields these; :class:`~troupe.agentloop.writer.WireWriter` is the one
place that turns them into Responses stream events (sequence numbers, output and
content indices, the full added → delta → done framing). Keeping them apart lets
the loop be tested without caring about indices, and lets the writer be tested
without running a loop.

Items carried here (``item`` fields) are client-transcript dicts in wire shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .checkpoint import StoredStep
from .model import TokenUsage

__all__ = [
    "ResponseStarted",
    "MessageStarted",
    "MessageDelta",
    "MessageDone",
    "RefusalMessage",
    "ReasoningStarted",
    "ReasoningDelta",
    "ReasoningDone",
    "FunctionCallStarted",
    "FunctionCallArgumentsDelta",
    "FunctionCallDone",
    "McpListStarted",
    "McpListDone",
    "McpCallStarted",
    "McpCallArgumentsDelta",
    "McpCallArgumentsDone",
    "McpCallDone",
    "FileSearchCallStarted",
    "FileSearchCallSearching",
    "FileSearchCallDone",
    "WebSearchCallStarted",
    "WebSearchCallSearching",
    "WebSearchCallDone",
    "CodeInterpreterCallStarted",
    "CodeInterpreterCallCodeDelta",
    "CodeInterpreterCallCodeDone",
    "CodeInterpreterCallInterpreting",
    "CodeInterpreterCallDone",
    "ShellCallStarted",
    "ShellCommandAdded",
    "ShellCommandDelta",
    "ShellCommandDone",
    "ShellCallDone",
    "ShellOutputStarted",
    "ShellOutputDone",
    "CompactionStarted",
    "CompactionSampling",
    "CompactionDone",
    "ItemEmitted",
    "StepStarted",
    "StepTraced",
    "Checkpoint",
    "ResponseFinished",
    "LoopEvent",
    "FinishStatus",
]

FinishStatus = Literal["completed", "incomplete", "failed", "cancelled", "requires_action"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseStarted:
    """The loop began; the writer announces the response (created, in_progress)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageStarted:
    """An assistant message item began."""

    item_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageDelta:
    item_id: str
    delta: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageDone:
    item_id: str
    text: str
    status: Literal["completed", "incomplete"] = "completed"
    annotations: tuple[dict[str, Any], ...] = ()
    """The text's annotations (``file_citation``), known once it is whole."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RefusalMessage:
    """An assistant message whose one part is a refusal (a guardrail refused the input), told
    whole: added, the refusal's one delta and its end."""

    item_id: str
    refusal: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningStarted:
    item_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningDelta:
    item_id: str
    delta: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningDone:
    item_id: str
    text: str
    status: Literal["completed", "incomplete"] = "completed"


@dataclass(frozen=True, slots=True, kw_only=True)
class FunctionCallStarted:
    item_id: str
    call_id: str
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FunctionCallArgumentsDelta:
    item_id: str
    delta: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FunctionCallDone:
    item_id: str
    arguments: str
    status: Literal["completed", "incomplete"] = "completed"


@dataclass(frozen=True, slots=True, kw_only=True)
class McpListStarted:
    item_id: str
    server_label: str


@dataclass(frozen=True, slots=True, kw_only=True)
class McpListDone:
    item_id: str
    tools: list[dict[str, Any]]
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class McpCallStarted:
    item_id: str
    server_label: str
    name: str
    approval_request_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class McpCallArgumentsDelta:
    item_id: str
    delta: str


@dataclass(frozen=True, slots=True, kw_only=True)
class McpCallArgumentsDone:
    item_id: str
    arguments: str


@dataclass(frozen=True, slots=True, kw_only=True)
class McpCallDone:
    """The call ran (``output``) or failed or was refused (``error``, the SDK's error object)."""

    item_id: str
    output: str | None = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FileSearchCallStarted:
    """The model called ``file_search``: its ``file_search_call`` item opens (module ``file_search``)."""

    item_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FileSearchCallSearching:
    item_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FileSearchCallDone:
    """The search ran (``completed``) or failed; ``results`` only when the request includes them."""

    item_id: str
    queries: tuple[str, ...]
    status: Literal["completed", "failed"] = "completed"
    results: tuple[dict[str, Any], ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WebSearchCallStarted:
    """The model called a web tool: its ``web_search_call`` item opens with its ``action``
    (module ``web_search``)."""

    item_id: str
    action: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class WebSearchCallSearching:
    item_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WebSearchCallDone:
    """The call ran (``completed``) or could not (``failed``); a search's ``action`` has its
    ``sources`` only when the request includes them."""

    item_id: str
    action: dict[str, Any]
    status: Literal["completed", "failed"] = "completed"


@dataclass(frozen=True, slots=True, kw_only=True)
class CodeInterpreterCallStarted:
    """The model called ``python``: its ``code_interpreter_call`` item opens (module
    ``code_interpreter``), with the container as far as it is known."""

    item_id: str
    container_id: str
    outputs: tuple[dict[str, Any], ...] | None = None
    """``()`` when the request includes the outputs (the item opens with ``[]``), else None."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CodeInterpreterCallCodeDelta:
    item_id: str
    delta: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CodeInterpreterCallCodeDone:
    item_id: str
    code: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CodeInterpreterCallInterpreting:
    """The call's code runs."""

    item_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CodeInterpreterCallDone:
    """The call ran (``completed``), was stopped by a limit (``incomplete``) or could not run
    (``failed``); ``outputs`` only when the request includes them."""

    item_id: str
    container_id: str
    status: Literal["completed", "incomplete", "failed"] = "completed"
    outputs: tuple[dict[str, Any], ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellCallStarted:
    """The model called ``shell``: its ``shell_call`` item opens (module ``shell``), with no
    commands yet."""

    item_id: str
    call_id: str
    environment: dict[str, Any]
    """``{"type": "local"}``, or ``{"container_id", "type": "container_reference"}`` (the
    container as far as it is known)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellCommandAdded:
    """The model began the call's command at ``command_index`` (module ``shell``: ``CommandsStream``)."""

    item_id: str
    command_index: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellCommandDelta:
    item_id: str
    command_index: int
    delta: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellCommandDone:
    item_id: str
    command_index: int
    command: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellCallDone:
    """The call's arguments are whole (its commands told): its item closes (``completed``;
    ``incomplete`` when the turn was cut short)."""

    item_id: str
    action: dict[str, Any]
    """``{"commands", "max_output_length", "timeout_ms"}`` (:func:`~troupe.agentloop.shell.shell_action`)."""
    environment: dict[str, Any] | None = None
    """The environment once the container is known (None: as the item opened)."""
    status: Literal["completed", "incomplete"] = "completed"


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellOutputStarted:
    """A server-run call's commands run: its ``shell_call_output`` item opens, empty."""

    item_id: str
    call_id: str
    max_output_length: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellOutputDone:
    """The commands ran (``completed``: one entry per command, told one by one) or could not
    (``incomplete``, no entries)."""

    item_id: str
    output: tuple[dict[str, Any], ...] = ()
    """``output_entries``: ``{"outcome", "stderr", "stdout"}`` per command."""
    status: Literal["completed", "incomplete"] = "completed"


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionStarted:
    """The loop compacts the thread (``context_management``): its ``compaction`` item opens,
    without content until the model has written the summary (module :mod:`.compaction`)."""

    item_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionSampling:
    """The summary's first content was sampled (``response.compaction.compacting``; once per
    compaction, and only when the summary call produced something)."""

    item_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionDone:
    """The ``compaction`` item is whole: ``encrypted_content`` holds the summary, or is empty
    when the summary call failed or was cancelled (such an item replaces nothing)."""

    item_id: str
    encrypted_content: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemEmitted:
    """A whole item with no deltas (a tool's output): added and done at once."""

    item: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class StepStarted:
    """A model call or a tool call begins; not a wire event (hooks and traces watch these).
    Every one is followed by the :class:`StepTraced` of the same step."""

    kind: Literal["model", "tool"]
    name: str
    """The upstream model, or the tool called."""
    started_at: float
    """Seconds on the loop's clock."""
    call_id: str | None = None
    arguments: str | None = None
    """Tool calls: the JSON arguments the model gave."""
    server: str | None = None
    """MCP calls: the server's label."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTraced:
    """One model call, tool call or guardrail check, timed; not a wire event (storage keeps these)."""

    kind: Literal["model", "tool", "guardrail"]
    name: str
    started_at: float
    """Seconds on the loop's clock (``time.time()`` by default)."""
    ended_at: float
    ttft_s: float | None = None
    """Model calls: seconds from start to the first chunk."""
    input_tokens: int = 0
    output_tokens: int = 0
    call_id: str | None = None
    error: str | None = None
    server: str | None = None
    """MCP calls: the server's label."""
    output: str | None = None
    """Tool calls: what the model is shown."""
    detail: dict[str, Any] | None = None
    """Guardrail checks: ``{"stage", "verdict", "categories"}``; the model turn a loop guard
    asked for: ``{"loop_guard": {"guard", "tools", "rounds"}}`` (``StepTrace.detail``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    """A step boundary, and what a resumed loop needs of the step (:mod:`.checkpoint`); not a
    wire event. A durable run stores it, with the wire events since the previous one, in order
    with the others; when it :attr:`gates`, before it takes the loop's next event."""

    step: StoredStep
    """The step; ``step.to_data()`` is what to store (JSON)."""
    gates: bool = False
    """The loop's next events start tools of which one at least is not idempotent: the step
    must be stored first, so that the loop starts no such call that is not stored. Calls that
    are all idempotent start while their step is being written (run twice, they do no harm)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseFinished:
    """The loop ended; the writer emits the terminal event."""

    status: FinishStatus
    usage: TokenUsage
    error: dict[str, Any] | None = None
    """``{"code", "message"}`` when ``status == "failed"``."""
    incomplete_reason: str | None = None
    moderation: dict[str, Any] | None = None
    """The response's ``moderation`` (``{"input", "output"}``), when the request asked for it."""
    loop_guard: str | None = None
    """The loop guard that stopped the loop (module :mod:`.loop_guards`), if one did."""


LoopEvent = (
    ResponseStarted
    | MessageStarted
    | MessageDelta
    | MessageDone
    | RefusalMessage
    | ReasoningStarted
    | ReasoningDelta
    | ReasoningDone
    | FunctionCallStarted
    | FunctionCallArgumentsDelta
    | FunctionCallDone
    | McpListStarted
    | McpListDone
    | McpCallStarted
    | McpCallArgumentsDelta
    | McpCallArgumentsDone
    | McpCallDone
    | FileSearchCallStarted
    | FileSearchCallSearching
    | FileSearchCallDone
    | WebSearchCallStarted
    | WebSearchCallSearching
    | WebSearchCallDone
    | CodeInterpreterCallStarted
    | CodeInterpreterCallCodeDelta
    | CodeInterpreterCallCodeDone
    | CodeInterpreterCallInterpreting
    | CodeInterpreterCallDone
    | ShellCallStarted
    | ShellCommandAdded
    | ShellCommandDelta
    | ShellCommandDone
    | ShellCallDone
    | ShellOutputStarted
    | ShellOutputDone
    | CompactionStarted
    | CompactionSampling
    | CompactionDone
    | ItemEmitted
    | StepStarted
    | StepTraced
    | Checkpoint
    | ResponseFinished
)
