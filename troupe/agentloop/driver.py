"""The driver: one loop for streaming and non-streaming responses.

:func:`prepare` validates what only the loop can judge (tool kinds, the pairing
of tool outputs) and builds the canonical transcript; it raises before anything
is streamed, so a bad request is a clean 400. :func:`run_loop` then performs
what :func:`~troupe.agentloop.decide.decide` asks for, through the injected
model client and tool executors, and yields semantic events
(:mod:`troupe.agentloop.events`); the caller feeds them to a
:class:`~troupe.agentloop.writer.WireWriter` and either streams the wire events
or keeps only the final Response. With ``context_management``, the loop compacts the thread
before a model call whose estimated input passes the request's threshold (module
:mod:`troupe.agentloop.compaction`): a ``compaction`` output item, then the call with the
compacted context.

Example::

    prepared = prepare(request, history=[])
    writer = WireWriter(request, response_id=new_id("resp"), created_at=int(time.time()))
    response = await collect_response(run_loop(prepared, model=SimModel()), writer)

:func:`troupe.agentloop.create_response` and :func:`~troupe.agentloop.stream_response` (module
:mod:`.respond`) are these steps in one call.

The loop's state lives in one object (``_Run``) whose steps share it; the translation to Chat
Completions is in :mod:`.chat`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, assert_never

from troupe.protocol import CreateResponseRequest, InvalidRequest, new_id
from troupe.protocol.ids import CODE_INTERPRETER_CALL, SHELL_CALL, SHELL_CALL_OUTPUT
from troupe.protocol.items import content_text

from . import events as ev
from .chat import chat_response_format, chat_tool_choice, chat_tools, plain, response_error
from .checkpoint import (
    INTERRUPTED,
    ApprovedCallsStep,
    CompactionStep,
    ResumePoint,
    ToolOutputsStep,
    ToolResultStep,
    TurnStep,
    is_idempotent,
)  # fmt: skip
from .code_interpreter import (
    INCLUDE_OUTPUTS,
    PYTHON,
    CodeInterpreterTool,
    CodeRun,
    CodeRunner,
    CodeStream,
    code_interpreter_spec,
    code_of,
    item_outputs,
    last_container,
)  # fmt: skip
from .code_interpreter import citations as container_citations
from .compaction import compact_threshold, encode_summary, summary_messages
from .context import check_fits, estimate_tokens, fit_messages, too_long
from .decide import CallModel, ExecuteTools, Finish, InterruptForApproval, LoopState, decide
from .file_search import FILE_SEARCH, FileSearcher, FileSearchTool, citations, next_marker, parse_results, query_of
from .guardrails import Guardrails, OutputGate, Verdict, moderation_result, refusal_text, withheld_text
from .loop_guards import LoopGuards
from .mcp import McpClient, McpError, McpServer, McpToolset
from .model import (
    ChatRequest,
    ModelClient,
    ReasoningChunk,
    TextChunk,
    TokenUsage,
    ToolCall,
    ToolCallArgumentsDelta,
    ToolCallStart,
    TurnEnd,
)  # fmt: skip
from .shell import (
    SHELL,
    CommandRun,
    CommandsStream,
    CommandStep,
    ShellRunner,
    ShellTool,
    output_entries,
    shell_action,
    shell_spec,
)  # fmt: skip
from .tools import ToolExecutor, ToolPolicy, TurnPlan, find_executor, plan_turn
from .transcript import Transcript, build_transcript
from .web_search import (
    WEB_SEARCH_TYPES,
    WEB_TOOL_NAMES,
    WebSearcher,
    WebSearchTool,
    action_of,
    url_citations,
    web_search_spec,
)
from .web_search import next_marker as next_web_marker

__all__ = ["LoopSettings", "PreparedTurn", "prepare", "run_loop"]

_SUPPORTED_TOOL_TYPES = frozenset({"function", "shell"})  # shell: its local environment always (module shell)

_NOT_RERUN = "interrupted by a host failure; not run again (the tool is not idempotent)"


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopSettings:
    """Server-wide loop behaviour."""

    client_tool_status: Literal["completed", "requires_action"] = "completed"
    """Status of a response that ends on client function calls (Antwort uses ``requires_action``)."""


@dataclass(slots=True, kw_only=True)
class PreparedTurn:
    """A validated request, ready to run."""

    request: CreateResponseRequest
    transcript: Transcript
    """The canonical transcript (history + accepted input); the loop appends to it."""
    input_items: list[dict[str, Any]]
    """This request's input items as accepted (duplicates of history removed), for storage."""
    tool_definitions: list[dict[str, Any]] = field(default_factory=list)
    """Responses-shaped function tools shown to the model."""
    policy: ToolPolicy = field(default_factory=ToolPolicy)
    mcp: McpToolset | None = None
    """The request's MCP servers (listed as the response starts, when not yet in the thread)."""
    file_search: FileSearchTool | None = None
    """The request's ``file_search`` tool, when it offers one (module :mod:`.file_search`)."""
    web_search: WebSearchTool | None = None
    """The request's ``web_search`` tool, when it offers one (module :mod:`.web_search`)."""
    code_interpreter: CodeInterpreterTool | None = None
    """The request's ``code_interpreter`` tool, when it offers one (module :mod:`.code_interpreter`)."""
    shell: ShellTool | None = None
    """The request's ``shell`` tool, when it offers one (module :mod:`.shell`): run here in a
    container, or by the client (its local environment)."""


def prepare(
    request: CreateResponseRequest,
    history: Sequence[dict[str, Any]],
    executors: Sequence[ToolExecutor] = (),
    *,
    mcp_client: McpClient | None = None,
    mcp_servers: Sequence[McpServer] = (),
    file_searcher: FileSearcher | None = None,
    code_runner: CodeRunner | None = None,
    shell_runner: ShellRunner | None = None,
    web_searcher: WebSearcher | None = None,
) -> PreparedTurn:
    """Validate the parts of ``request`` only the loop can judge, and build its transcript.

    Args:
        request: the validated create request.
        history: the thread's earlier client items, oldest first.
        executors: the server-side tool executors.
        mcp_client: how to reach MCP servers (None: MCP tools are refused).
        mcp_servers: the request's ``mcp`` tools, resolved (secrets included).
        file_searcher: searches vector stores (None: ``file_search`` tools are refused).
        code_runner: runs code in containers (None: ``code_interpreter`` tools are refused).
        shell_runner: runs shell commands in containers (None: a ``shell`` tool with a container
            environment is refused; a local one, whose client runs the commands, is always accepted).
        web_searcher: searches the web (None: ``web_search`` tools are refused).

    Returns:
        The prepared turn.

    Raises:
        InvalidRequest: an unsupported tool kind or tool_choice, input items
            that do not fit the history (see :func:`build_transcript`), or a ``prompt``
            not resolved (:attr:`CreateResponseRequest.prelude`: the runtime resolves it).
    """
    if request.prompt is not None and request.prelude is None:
        # The runtime resolves stored prompts (Runtime.resolve_prompt); without it, refused, never ignored.
        raise InvalidRequest("Stored prompts are not served here: 'prompt' needs Troupe's runtime, which resolves "
                             "it from its store.", param="prompt", code="unsupported_value")  # fmt: skip
    tools = [plain(t) for t in (request.tools or [])]
    supported = _SUPPORTED_TOOL_TYPES | ({"mcp"} if mcp_client is not None else set())
    supported |= {"file_search"} if file_searcher is not None else set()
    supported |= {"code_interpreter"} if code_runner is not None else set()
    supported |= set(WEB_SEARCH_TYPES) if web_searcher is not None else set()
    for i, tool in enumerate(tools):
        if tool.get("type") not in supported:
            raise InvalidRequest(
                f"Tool type '{tool.get('type')}' is not supported by this server.",
                param=f"tools[{i}].type",
                code="unsupported_value",
            )
    choice = plain(request.tool_choice)
    choice_types = ("function", "allowed_tools") + (("mcp",) if mcp_client is not None else ())
    choice_types += ("file_search",) if file_searcher is not None else ()
    choice_types += ("code_interpreter",) if code_runner is not None else ()
    choice_types += WEB_SEARCH_TYPES if web_searcher is not None else ()
    choice_types += ("shell",)  # when a shell tool is offered (_shell_tool)
    if isinstance(choice, dict) and choice.get("type") not in choice_types:
        raise InvalidRequest(
            f"tool_choice of type '{choice.get('type')}' is not supported by this server.",
            param="tool_choice",
            code="unsupported_value",
        )
    shell = _shell_tool(tools, shell_runner, choice)
    transcript, accepted = build_transcript(history, request.input_items())
    mcp = None
    if mcp_client is not None and mcp_servers:
        mcp = McpToolset(mcp_client, list(mcp_servers), list(history) + accepted)
    for approved in transcript.approved:
        if mcp is None or approved.get("server_label") not in mcp.servers:
            raise InvalidRequest(
                f"Approving a call to '{approved.get('server_label')}' needs that MCP server in 'tools'.",
                param="tools",
                code="invalid_value",
            )
    file_search = None
    if file_searcher is not None and (spec := _file_search_spec(tools)) is not None:
        file_search = FileSearchTool(file_searcher, spec, next_marker(transcript.outputs_of(FILE_SEARCH)))
    functions = [t for t in tools if t.get("type") == "function"]
    declared: set[str] = {t["name"] for t in functions}
    web_search = None
    if web_searcher is not None and (ws_spec := web_search_spec(tools)) is not None:
        if clash := declared & set(WEB_TOOL_NAMES):  # their calls would be taken for the web tools'
            raise InvalidRequest(f"A function tool named '{min(clash)}' cannot be given with web_search, which the "
                                 "model sees as web_search, web_open_page and web_find_in_page.", param="tools",
                                 code="invalid_value")  # fmt: skip
        web_outputs = [o for name in WEB_TOOL_NAMES for o in transcript.outputs_of(name)]
        web_search = WebSearchTool(web_searcher, ws_spec, next_web_marker(web_outputs))
    code_interpreter = None
    if code_runner is not None and (ci_spec := code_interpreter_spec(tools)) is not None:
        index, container = ci_spec
        if PYTHON in declared:  # its calls would be taken for the code interpreter's
            raise InvalidRequest(
                f"A function tool named '{PYTHON}' cannot be given with code_interpreter, which the model "
                f"sees as '{PYTHON}'.", param="tools", code="invalid_value",
            )  # fmt: skip
        code_interpreter = CodeInterpreterTool(
            code_runner, container, param=f"tools[{index}].container", reuse=last_container([*history, *accepted])
        )
    if shell is not None:
        if SHELL in declared:  # its calls would be taken for the shell tool's
            raise InvalidRequest(f"A function tool named '{SHELL}' cannot be given with the shell tool, which the model "
                                 f"sees as '{SHELL}'.", param="tools", code="invalid_value")  # fmt: skip
        shell.reuse = last_container([*history, *accepted])
    hosted: list[ToolExecutor] = [t for t in (file_search, code_interpreter, web_search) if t is not None]
    offered = hosted + ([shell] if shell is not None else []) + list(executors)
    definitions = functions + [d for ex in offered for d in ex.definitions() if d["name"] not in declared]
    if shell is not None and shell.local:
        declared.add(SHELL)  # the client's to run, as its function calls are
    allowed = None
    if isinstance(choice, dict) and choice["type"] == "allowed_tools":
        hosted_names = {"file_search": (FILE_SEARCH,), "code_interpreter": (PYTHON,), "shell": (SHELL,),
                        **dict.fromkeys(WEB_SEARCH_TYPES, WEB_TOOL_NAMES)}  # fmt: skip
        allowed = frozenset(
            name
            for t in choice.get("tools", [])
            if t.get("type") in ("function", *hosted_names)
            for name in ((t["name"],) if t.get("type") == "function" else hosted_names[t["type"]])
        )
    policy = ToolPolicy(
        declared=frozenset(declared),
        allowed=allowed,
        execute=choice != "none",
        max_tool_calls=request.max_tool_calls,
    )
    return PreparedTurn(
        request=request,
        transcript=transcript,
        input_items=accepted,
        tool_definitions=definitions,
        policy=policy,
        mcp=mcp,
        file_search=file_search,
        web_search=web_search,
        code_interpreter=code_interpreter,
        shell=shell,
    )


def _shell_tool(tools: list[dict[str, Any]], runner: ShellRunner | None, choice: Any) -> ShellTool | None:
    """The request's ``shell`` tool (module :mod:`.shell`); None when it offers none.

    Raises:
        InvalidRequest: an environment :func:`~.shell.shell_spec` refuses; a container
            environment without a runner (``tools[i].environment``, ``unsupported_value``);
            ``tool_choice: {"type": "shell"}`` without a shell tool.
    """
    spec = shell_spec(tools)
    if spec is None:
        if isinstance(choice, dict) and choice.get("type") == "shell":
            raise InvalidRequest("tool_choice 'shell' needs a shell tool in 'tools'.", param="tool_choice",
                                 code="invalid_value")  # fmt: skip
        return None
    index, container = spec
    if container is None:
        return ShellTool()
    if runner is None:
        raise InvalidRequest("The shell tool's container environments are not supported by this server: only "
                             "the local one, whose commands the client runs.", param=f"tools[{index}].environment",
                             code="unsupported_value")  # fmt: skip
    param = f"tools[{index}].environment" + (".container_id" if isinstance(container, str) else "")
    return ShellTool(runner, container, param=param)


def _file_search_spec(tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The request's one ``file_search`` tool, checked; None when it offers none."""
    found = [(i, t) for i, t in enumerate(tools) if t.get("type") == "file_search"]
    if not found:
        return None
    if len(found) > 1:
        raise InvalidRequest("Only one file_search tool may be given.", param=f"tools[{found[1][0]}]", code="invalid_value")
    i, spec = found[0]
    ids = spec.get("vector_store_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(v, str) and v for v in ids):
        raise InvalidRequest(
            "file_search needs 'vector_store_ids': a non-empty list of vector store ids.",
            param=f"tools[{i}].vector_store_ids",
            code="invalid_value",
        )
    limit = spec.get("max_num_results")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 50):
        raise InvalidRequest(
            "max_num_results must be an integer from 1 to 50.", param=f"tools[{i}].max_num_results", code="invalid_value"
        )
    return spec


@dataclass(frozen=True, slots=True)
class _ToolOutcome:
    output: str
    """What the model is shown."""
    started: float
    ended: float
    error: Exception | None = None
    error_text: str | None = None


class _Run:
    """One response's loop: the I/O shell around :func:`decide`."""

    def __init__(
        self,
        prepared: PreparedTurn,
        *,
        model: ModelClient,
        executors: Sequence[ToolExecutor],
        settings: LoopSettings,
        upstream_model: str | None,
        cancel: asyncio.Event,
        clock: Callable[[], float],
        context_window: int | None = None,
        resume: ResumePoint | None = None,
        checkpoints: bool = False,
        live: bool = True,
        guardrails: Guardrails | None = None,
        loop_guards: LoopGuards | None = None,
        steer: asyncio.Event | None = None,
    ) -> None:
        self.p = prepared
        self.steer = steer
        self.rails = guardrails if guardrails else None
        self.moderated: dict[str, dict[str, Any]] = {}  # the request's moderation results, by stage
        self.texts: list[str] = []  # the text of each model turn of this response (resumed ones too)
        self.rails_traced = 0  # the verdicts already told as steps
        self.rails_calls: dict[int, str | None] = {}  # verdict index -> the call it checked (a client's tool output)
        self.resume = resume
        self.checkpoints = checkpoints
        self.live = live
        self.context_window = context_window
        self.threshold: int | None = None
        """The request's ``compact_threshold`` (module :mod:`.compaction`), set as the run starts."""
        self.req = prepared.request
        self.model = model
        self.mcp = prepared.mcp
        self.fs = prepared.file_search
        self.ws = prepared.web_search
        self.ci = prepared.code_interpreter
        self.sh = prepared.shell
        # The MCP servers, file_search, code_interpreter and shell act as executors too, consulted
        # first (a local shell executes nothing: its calls are the client's).
        hosted: list[ToolExecutor] = [t for t in (self.mcp, self.fs, self.ws, self.ci, self.sh) if t is not None]
        self.executors: list[ToolExecutor] = hosted + list(executors)
        self.fs_items: dict[str, str] = {}  # call_id -> open file_search_call item id
        self.ws_items: dict[str, str] = {}  # call_id -> open web_search_call item id
        self.ws_started: dict[str, dict[str, Any]] = {}  # call_id -> the action its item opened with
        self.include_sources = "web_search_call.action.sources" in (self.req.include or [])
        self.include_results = "file_search_call.results" in (self.req.include or [])
        self.ci_items: dict[str, str] = {}  # call_id -> open code_interpreter_call item id
        self.ci_interpreting: set[str] = set()  # code_interpreter_call items whose interpreting event was written
        self.include_outputs = INCLUDE_OUTPUTS in (self.req.include or [])
        self.sh_outputs: dict[str, str] = {}  # call_id -> open shell_call_output item id
        self.upstream_model = upstream_model or self.req.model
        self.cancel = cancel
        self.clock = clock
        self.mcp_items: dict[str, str] = {}  # call_id -> open mcp_call item id
        # A resumed run (module checkpoint): results of the pending tool step already stored,
        # and the calls of that step that may have been running when the host died.
        self.settled: dict[str, _ToolOutcome] = {}
        self.in_flight: frozenset[str] = frozenset()
        self.approved_opened = False
        # MCP calls the client approved in this request's input: they run first, without a model turn.
        approved = tuple(
            ToolCall(call_id=r["id"], name=r["name"], arguments=r.get("arguments") or "{}")
            for r in prepared.transcript.approved
        )
        self.approved_labels = {r["id"]: r["server_label"] for r in prepared.transcript.approved}
        guards = (loop_guards or LoopGuards()).tighter(_request_guards(self.req.loop_guards))
        self.state = LoopState(
            max_infer_iters=self.req.max_infer_iters,
            client_tool_status=settings.client_tool_status,
            output_tokens_left=self.req.max_output_tokens,
            approved_calls=approved,
            guards=guards or None,
        )

    async def run(self) -> AsyncGenerator[ev.LoopEvent, None]:
        # Before the first event: compaction asked for without a threshold, and no window to
        # derive one from, is a 400.
        self.threshold = compact_threshold(self.req, self._budget(), self.upstream_model)
        if self.resume is not None and self.resume.steps:
            # The response was announced, and its servers listed, before the steps it resumes from.
            self._restore(self.resume)
            if self.rails is not None:  # its input passed, redacted: redacted again, its steps told already
                await self._moderate_input()
                await self._check_input()
                self.rails_traced = len(self.rails.verdicts)
        else:
            if self.mcp is not None:
                # Before the first event: a request's MCP server that cannot be listed is an HTTP 424.
                await self.mcp.prefetch()
            if self.ci is not None:
                # Before the first event too: an explicit container that does not exist is an HTTP 404.
                await self.ci.check()
            if self.sh is not None and not self.sh.local:
                await self.sh.check()  # likewise
            budget = self._budget()
            if budget is not None and self.req.truncation != "auto":
                # Before the first event too: a thread that does not fit is OpenAI's HTTP 400.
                check_fits(*self._messages_and_tools(), budget, self.upstream_model)
            yield ev.ResponseStarted()
            if self.rails is not None:
                refused = await self._moderate_input() or await self._check_input()
                moderation = await self._moderation() if refused is not None else None
                for step in self._verdicts():
                    yield step
                if refused is not None:  # no model call: the answer is the refusal
                    yield ev.RefusalMessage(item_id=new_id("msg"), refusal=refusal_text(refused))
                    yield ev.ResponseFinished(status="completed", usage=self.state.usage, moderation=moderation)
                    return
            if self.mcp is not None:
                async for event in self._list_mcp_tools():
                    yield event
        while True:
            if self.cancel.is_set():  # also before the first step: cancelled while it waited its turn
                self.state = replace(self.state, cancelled=True)
            if self.steer is not None and self.steer.is_set() and not self.state.steered:
                self.state = replace(self.state, steered=True)  # decide() ends it at its next safe boundary
            action = decide(self.state)
            match action:
                case CallModel():
                    if self._compacts():
                        async for event in self._compact():
                            yield event
                    if not (self.state.cancelled or self.state.error):  # else the summary failed: Finish next
                        async for event in self._call_model(action):
                            yield event
                case ExecuteTools():
                    async for event in self._execute(action):
                        yield event
                    if not self.state.cancelled:
                        self.state = self.state.after_tools()
                        if self.checkpoints:
                            yield _OUTPUTS_EMITTED
                case InterruptForApproval(pending=pending):
                    for call in pending:
                        executor = find_executor(call, self.executors)
                        yield ev.ItemEmitted(item=executor.approval_item(call))  # type: ignore[union-attr]
                    action = Finish(status="completed")
                case Finish():
                    pass
                case _:
                    assert_never(action)
            if isinstance(action, Finish):
                for item_id in self.mcp_items.values():  # calls never run (tool_choice none, a failure)
                    yield ev.McpCallDone(item_id=item_id, error=McpError("The call was not run.").to_item_error())
                for item_id in self.fs_items.values():
                    yield ev.FileSearchCallDone(item_id=item_id, queries=(), status="failed")
                for call_id, item_id in self.ws_items.items():  # calls never run
                    yield ev.WebSearchCallDone(item_id=item_id, action=self.ws_started[call_id], status="failed")
                for item_id in self.ci_items.values():  # calls never run (tool_choice none, a model failure)
                    yield self._code_interpreter_done(item_id, "", None, "incomplete")
                for item_id in self.sh_outputs.values():  # commands cut short (cancelled)
                    yield ev.ShellOutputDone(item_id=item_id, status="incomplete")
                moderation = await self._moderation() if self.rails is not None else None
                if self.rails is not None:
                    for step in self._verdicts():
                        yield step
                yield ev.ResponseFinished(
                    status=action.status,
                    usage=self.state.usage,
                    error=action.error,
                    incomplete_reason=action.incomplete_reason,
                    moderation=moderation,
                    loop_guard=action.loop_guard,
                )
                return

    # -- guardrails --------------------------------------------------------------

    async def _moderate_input(self) -> Verdict | None:
        """The request's ``moderation`` of its input (its messages' text, whole), recorded; the
        verdict when its policy blocks and the input is flagged (or could not be checked)."""
        assert self.rails is not None
        moderation = self.rails.moderation
        if moderation is None:
            return None
        text = "\n".join(content_text(i.get("content"), sep="\n") for i in self.p.input_items if i.get("type") == "message")
        verdict = await self.rails.classify(moderation.check, "input", text)
        self.moderated["input"] = moderation_result(verdict, moderation.model)
        return verdict if moderation.input == "block" and verdict.blocked else None

    async def _moderation(self) -> dict[str, Any] | None:
        """The Response's ``moderation``, when the request asked for it: the input's result, and
        the output's (its last check while it streamed, else its whole text now)."""
        assert self.rails is not None
        moderation = self.rails.moderation
        if moderation is None:
            return None
        if "output" not in self.moderated:
            last = next((v for v in reversed(self.rails.verdicts)
                         if v.stage == "output" and v.guardrail == moderation.check.name), None)  # fmt: skip
            if last is None or moderation.output == "score":
                last = await self.rails.classify(moderation.check, "output", "\n".join(self.texts))
            self.moderated["output"] = moderation_result(last, moderation.model)
        return {"input": self.moderated.get("input"), "output": self.moderated["output"]}

    async def _check_input(self) -> Verdict | None:
        """The ``input`` stage over each text part of the new input's messages, redacted in
        place (the transcript and the input items stored share the parts, so the model and
        the history see the redacted text); the verdict that refused the input, if one did."""
        assert self.rails is not None
        for item in self.p.input_items:
            for part in item.get("content") or () if item.get("type") == "message" else ():
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    part["text"], refused = await self.rails.check("input", part["text"])
                    if refused is not None:
                        return refused
            if item.get("type") == "function_call_output" and self.rails.at("tool_output"):
                await self._check_client_output(item)
        return None

    async def _check_client_output(self, item: dict[str, Any]) -> None:
        """The ``tool_output`` stage over a client's own tool result (a ``function_call_output``
        input item): redacted in place, or withheld, before the model sees it, as a server-side
        tool's result is. Its steps name the call."""
        assert self.rails is not None
        output, first = item.get("output"), len(self.rails.verdicts)
        parts = [p for p in output if isinstance(p, dict)] if isinstance(output, list) else []
        texts = [output] if isinstance(output, str) else [p["text"] for p in parts if isinstance(p.get("text"), str)]
        checked = []
        for text in texts:
            text, refused = await self.rails.check("tool_output", text)
            if refused is not None:
                item["output"] = withheld_text(refused)
                break
            checked.append(text)
        else:
            if isinstance(output, str):
                item["output"] = checked[0]
            else:
                for part, text in zip((p for p in parts if isinstance(p.get("text"), str)), checked, strict=True):
                    part["text"] = text
        if item.get("output") is not output or isinstance(output, list):
            self.p.transcript.replace_output(item.get("call_id") or "", item["output"])
        self.rails_calls.update(dict.fromkeys(range(first, len(self.rails.verdicts)), item.get("call_id")))

    def _verdicts(self, call_id: str | None = None) -> Iterator[ev.StepTraced]:
        """The guardrails' verdicts not yet told, as steps."""
        assert self.rails is not None
        for i, v in enumerate(self.rails.verdicts[self.rails_traced :], self.rails_traced):
            verdict = "blocked" if v.blocked else "redacted" if v.redacted else "passed"
            yield ev.StepTraced(
                kind="guardrail", name=v.guardrail, started_at=v.started_at, ended_at=v.ended_at,
                call_id=call_id or self.rails_calls.get(i),
                detail={"stage": v.stage, "verdict": verdict, "categories": v.flagged,
                        **({"model": v.model} if v.model is not None else {}),
                        **({"error": v.error} if v.error is not None else {})},
            )  # fmt: skip
        self.rails_traced = len(self.rails.verdicts)

    # -- MCP listing -------------------------------------------------------------

    async def _list_mcp_tools(self) -> AsyncIterator[ev.LoopEvent]:
        assert self.mcp is not None
        servers = self.mcp.to_list()
        item_ids = [new_id("mcpl") for _ in servers]
        for server, item_id in zip(servers, item_ids, strict=True):
            yield ev.McpListStarted(item_id=item_id, server_label=server.label)
        # All servers are listed at once; their items finish in order.
        results = await asyncio.gather(*(self.mcp.listing(server) for server in servers), return_exceptions=True)
        for server, item_id, result in zip(servers, item_ids, results, strict=True):
            if isinstance(result, BaseException):
                # The loop goes on without this server's tools.
                yield ev.McpListDone(item_id=item_id, tools=[], error=str(result))
            else:
                shown = self.mcp.record_listing(server.label, result)
                yield ev.McpListDone(item_id=item_id, tools=[t.to_item() for t in shown])

    # -- model turn --------------------------------------------------------------

    def _messages_and_tools(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The upstream messages (the whole transcript) and tool definitions of the next call."""
        req = self.req
        definitions = list(self.p.tool_definitions)
        if self.mcp is not None:
            known = {d["name"] for d in definitions}
            definitions += [d for d in self.mcp.definitions() if d["name"] not in known]
        if req.prelude is not None:  # a resolved prompt: the instructions are in it
            messages = self.p.transcript.to_chat_messages(prelude=req.prelude)
        else:
            messages = self.p.transcript.to_chat_messages(req.instructions if isinstance(req.instructions, str) else None)
        return messages, chat_tools(definitions, self.p.policy.allowed)

    def _budget(self) -> int | None:
        """The estimated input tokens the next call may send (module ``context``); None: unchecked."""
        if self.context_window is None:
            return None
        return self.context_window - (self.state.output_tokens_left or 0)

    def _fitted(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``messages`` within the context window: as they are, or with the oldest dropped
        (``truncation: "auto"``). Raises ModelError (``context_length_exceeded``) otherwise."""
        budget = self._budget()
        if budget is None or estimate_tokens(messages, tools) <= budget:
            return messages
        keep = len(self.req.prelude) if self.req.prelude is not None else None
        fitted = fit_messages(messages, budget, tools, keep=keep) if self.req.truncation == "auto" else None
        if fitted is None:
            raise too_long(estimate_tokens(messages, tools), budget, self.upstream_model)
        return fitted

    # -- compaction (context_management) -------------------------------------------

    def _compacts(self) -> bool:
        """Whether the next model call compacts the thread first: its estimated input passes the
        request's ``compact_threshold`` and the thread holds something to compact."""
        if self.threshold is None or not self.p.transcript.compactable():
            return False
        return estimate_tokens(*self._messages_and_tools()) > self.threshold

    async def _compact(self) -> AsyncIterator[ev.LoopEvent]:
        """Have the model summarise the thread, emit the ``compaction`` item, and compact the
        transcript (module :mod:`.compaction`). A summary call that fails fails the response,
        as a model call does; one cancelled cancels it. Either way the item closes empty."""
        started, first_at = self.clock(), None
        yield ev.StepStarted(kind="model", name=self.upstream_model, started_at=started)
        item_id = new_id("cmp")
        yield ev.CompactionStarted(item_id=item_id)
        turn: TurnEnd | None = None
        error: dict[str, Any] | None = None
        try:
            messages, _ = self._messages_and_tools()
            chat = ChatRequest(model=self.upstream_model, messages=self._fitted(summary_messages(messages), []))
            async with contextlib.aclosing(self.model.stream(chat)) as chunks:
                async for chunk in chunks:
                    if first_at is None:
                        first_at = self.clock()
                        yield ev.CompactionSampling(item_id=item_id)
                    if isinstance(chunk, TurnEnd):
                        turn = chunk
                    if self.cancel.is_set():
                        break
        except Exception as exc:  # noqa: BLE001 - a failed summary fails the response
            error = response_error(exc)
        summary = turn.text if turn is not None and error is None else ""
        if turn is not None and error is None and not summary.strip():
            error = {"code": "server_error", "message": "The model wrote an empty summary of the thread."}
        done = turn is not None and error is None
        yield ev.CompactionDone(item_id=item_id, encrypted_content=encode_summary(summary) if done else "")
        usage = turn.usage if turn is not None else TokenUsage()
        yield ev.StepTraced(
            kind="model", name=self.upstream_model, started_at=started, ended_at=self.clock(),
            ttft_s=None if first_at is None else first_at - started,
            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
            error=None if error is None else error["message"],
        )  # fmt: skip
        if not done:  # what an empty summary cost still counts
            self.state = replace(self.state.after_compaction(usage), cancelled=error is None, error=error)
            return
        self._fold_compaction(summary, usage)
        if self.checkpoints:
            yield ev.Checkpoint(step=CompactionStep(summary=summary, usage=usage))

    def _fold_compaction(self, summary: str, usage: TokenUsage) -> None:
        """Compact the transcript with ``summary`` and count its call (live, or resuming)."""
        self.p.transcript.compact(summary)
        self.state = self.state.after_compaction(usage)

    def _chat_request(self, action: CallModel) -> ChatRequest:
        req = self.req
        choice = plain(req.tool_choice)
        # Passed through as Chat Completions names them, when the client set them.
        extra = {
            "reasoning_effort": (plain(req.reasoning) or {}).get("effort"),
            "verbosity": (plain(req.text) or {}).get("verbosity"),
        }
        messages, tools = self._messages_and_tools()
        if action.stop is not None:  # told to this call only: the transcript does not keep it
            messages = [*messages, {"role": "system", "content": action.stop.note()}]
        return ChatRequest(
            model=self.upstream_model,
            messages=self._fitted(messages, tools),
            tools=tools,
            tool_choice=chat_tool_choice(choice, action),
            parallel_tool_calls=req.parallel_tool_calls,
            max_tokens=self.state.output_tokens_left,
            temperature=req.temperature,
            top_p=req.top_p,
            response_format=chat_response_format(req.text),
            extra={k: v for k, v in extra.items() if v},
            stream=self.live,
        )

    def _open_call(
        self, index: int, call_id: str, name: str, mcp_item_at: dict[int, str], function_item_at: dict[int, str],
        ci_item_at: dict[int, str], sh_item_at: dict[int, str],
    ) -> ev.LoopEvent | None:
        """Open the item a model's tool call streams as, and remember it by the call's index (in
        ``mcp_item_at``, ``function_item_at``, ``ci_item_at`` or ``sh_item_at``): an ``mcp_call``, a
        ``file_search_call``, a ``code_interpreter_call``, a ``shell_call``, a ``function_call``, or
        nothing for an MCP call that waits for approval (it becomes an approval request once the
        turn ends)."""
        label = self._mcp_streams(name)
        if label is not None:
            mcp_item_at[index] = self.mcp_items[call_id] = new_id("mcp")
            return ev.McpCallStarted(item_id=mcp_item_at[index], server_label=label, name=name)
        if self.mcp is not None and self.mcp.label_of(name) is not None:
            return None
        if self.fs is not None and name == FILE_SEARCH:
            self.fs_items[call_id] = new_id("fs")
            return ev.FileSearchCallStarted(item_id=self.fs_items[call_id])
        if self.ws is not None and name in WEB_TOOL_NAMES:
            self.ws_items[call_id] = new_id("ws")
            self.ws_started[call_id] = action_of(name, "")  # its arguments are still streaming
            return ev.WebSearchCallStarted(item_id=self.ws_items[call_id], action=self.ws_started[call_id])
        if self.ci is not None and name == PYTHON:
            ci_item_at[index] = self.ci_items[call_id] = new_id(CODE_INTERPRETER_CALL)
            return ev.CodeInterpreterCallStarted(
                item_id=ci_item_at[index], container_id=self.ci.known_container,
                outputs=() if self.include_outputs else None,
            )  # fmt: skip
        if self.sh is not None and name == SHELL:
            sh_item_at[index] = new_id(SHELL_CALL)
            return ev.ShellCallStarted(item_id=sh_item_at[index], call_id=call_id, environment=self.sh.environment())
        function_item_at[index] = new_id("fc")
        return ev.FunctionCallStarted(item_id=function_item_at[index], call_id=call_id, name=name)

    async def _before_open(self, name: str) -> None:
        """Before a ``python`` or a server-run ``shell`` call's item opens: resolve the response's
        container, so the item opens with its id (as OpenAI's does). A failure is left for the
        call, which tries again and tells the model."""
        policy = self.p.policy
        tool: CodeInterpreterTool | ShellTool | None = None
        if self.ci is not None and name == PYTHON:
            tool = self.ci
        elif self.sh is not None and name == SHELL and not self.sh.local:
            tool = self.sh
        if tool is None or tool.container_id is not None or not policy.execute:
            return
        if policy.allowed is None or name in policy.allowed:
            with contextlib.suppress(Exception):
                await tool.resolve()

    def _mcp_streams(self, name: str) -> str | None:
        """The server label when a call to ``name`` streams as an ``mcp_call`` item now.

        Calls that wait for approval stream nothing: they become an approval request.
        """
        label = self.mcp.label_of(name) if self.mcp is not None else None
        if label is None or self.mcp.servers[label].needs_approval(name):  # type: ignore[union-attr]
            return None
        return label

    def _over_budget(self, starts: dict[int, ToolCallStart], index: int) -> bool:
        """Whether the call announced at ``index`` falls past ``max_tool_calls``.

        Decided while the call streams, from the calls announced before it (executors
        choose by name), so an ignored call never opens an item; the final plan agrees.
        """
        if self.p.policy.max_tool_calls is None:
            return False
        so_far = [ToolCall(call_id=starts[i].call_id, name=starts[i].name, arguments="") for i in sorted(starts) if i <= index]
        plan = self._plan(so_far)
        return any(call.call_id == starts[index].call_id for call in plan.ignored)

    async def _call_model(self, action: CallModel) -> AsyncIterator[ev.LoopEvent]:
        if action.stop is not None:  # a loop guard tripped: the last turn, told why
            self.state = replace(self.state, stopped_by=action.stop)
        started, first_at = self.clock(), None
        yield ev.StepStarted(kind="model", name=self.upstream_model, started_at=started)
        message_id = reasoning_id = None
        text = reasoning = ""
        # The open reasoning or message item closes before the next item opens, as OpenAI streams
        # them (a reasoning item is done before the answer's message is added; a message before
        # the tool calls that follow it). What is in an item closed early is what it streamed.
        item_text = item_reasoning = ""
        messages = reasonings = 0  # items of each kind this turn opened

        def close_open() -> list[ev.LoopEvent]:
            nonlocal message_id, reasoning_id
            closing: list[ev.LoopEvent] = []
            if reasoning_id is not None:
                closing.append(ev.ReasoningDone(item_id=reasoning_id, text=item_reasoning, status="completed"))
                reasoning_id = None
            # A message stays open under output guardrails: they may hold back its last words.
            if message_id is not None and gate is None:
                closing.append(ev.MessageDone(item_id=message_id, text=item_text, status="completed",
                                              annotations=self._citations(item_text)))  # fmt: skip
                message_id = None
            return closing
        function_item_at: dict[int, str] = {}  # tool-call index -> function_call item id
        mcp_item_at: dict[int, str] = {}  # tool-call index -> mcp_call item id (self.mcp_items: by call id)
        ci_item_at: dict[int, str] = {}  # tool-call index -> code_interpreter_call item id (self.ci_items: by call id)
        code_at: dict[int, CodeStream] = {}  # tool-call index -> its code, as told so far
        sh_item_at: dict[int, str] = {}  # tool-call index -> shell_call item id (closed when the turn ends)
        commands_at: dict[int, CommandsStream] = {}  # tool-call index -> its commands, as told so far
        starts: dict[int, ToolCallStart] = {}
        turn: TurnEnd | None = None
        error: dict[str, Any] | None = None
        gate = OutputGate(self.rails) if self.rails is not None else None
        gate = gate if gate else None  # no guardrail looks at the output
        try:
            chat = self._chat_request(action)  # a thread grown past the context window fails here
            async with contextlib.aclosing(self.model.stream(chat)) as chunks:
                async for chunk in chunks:
                    first_at = first_at or self.clock()
                    match chunk:
                        case ReasoningChunk(text=delta):
                            if reasoning_id is None:
                                for done in close_open():
                                    yield done
                                reasoning_id, item_reasoning, reasonings = new_id("rs"), "", reasonings + 1
                                yield ev.ReasoningStarted(item_id=reasoning_id)
                            reasoning += delta
                            item_reasoning += delta
                            yield ev.ReasoningDelta(item_id=reasoning_id, delta=delta)
                        case TextChunk(text=delta):
                            text += delta
                            if gate is not None:  # what the output guardrails let through, when they do
                                delta = await gate.feed(delta)
                                if gate.verdict is not None:
                                    break  # blocked: nothing more is read or sent
                            if delta:
                                if message_id is None:
                                    for done in close_open():
                                        yield done
                                    message_id, item_text, messages = new_id("msg"), "", messages + 1
                                    yield ev.MessageStarted(item_id=message_id)
                                item_text += delta
                                yield ev.MessageDelta(item_id=message_id, delta=delta)
                        case ToolCallStart(index=index, call_id=call_id, name=name):
                            starts[index] = chunk
                            # A call over max_tool_calls is ignored, as OpenAI does: no item ever opens.
                            if not self._over_budget(starts, index):
                                await self._before_open(name)
                                opened = self._open_call(
                                    index, call_id, name, mcp_item_at, function_item_at, ci_item_at, sh_item_at
                                )
                                if opened is not None:
                                    for done in close_open():
                                        yield done
                                    yield opened
                        case ToolCallArgumentsDelta(index=index, delta=delta):
                            if index in mcp_item_at:
                                yield ev.McpCallArgumentsDelta(item_id=mcp_item_at[index], delta=delta)
                            elif index in function_item_at:
                                yield ev.FunctionCallArgumentsDelta(item_id=function_item_at[index], delta=delta)
                            elif index in ci_item_at:
                                code = code_at.setdefault(index, CodeStream()).feed(delta)
                                if code:
                                    yield ev.CodeInterpreterCallCodeDelta(item_id=ci_item_at[index], delta=code)
                            elif index in sh_item_at:
                                for step in commands_at.setdefault(index, CommandsStream()).feed(delta):
                                    yield _command_event(sh_item_at[index], step)
                        case TurnEnd():
                            turn = chunk
                    if self.cancel.is_set():
                        break
        except Exception as exc:  # noqa: BLE001 - any model failure ends the response as failed
            error = response_error(exc)
        ended = self.clock()
        finished = turn if error is None else None  # the turn, when the model ended it
        if gate is not None and error is None:
            if finished is not None and (rest := await gate.end()):
                if message_id is None:
                    for done in close_open():
                        yield done
                    message_id, messages = new_id("msg"), messages + 1
                    yield ev.MessageStarted(item_id=message_id)
                yield ev.MessageDelta(item_id=message_id, delta=rest)
            if gate.verdict is not None:  # the text stops where it was blocked, and so does the response
                finished = TurnEnd(text=gate.sent, reasoning=reasoning, finish_reason="content_filter",
                                   usage=turn.usage if turn is not None else TokenUsage())  # fmt: skip
            elif finished is not None:
                finished = replace(finished, text=gate.sent)  # redacted, as the client saw it
        item_status: Literal["completed", "incomplete"] = (
            "completed" if finished is not None and finished.finish_reason != "length"
            and (gate is None or gate.verdict is None) else "incomplete"
        )  # fmt: skip
        # Close every item this turn left open, so clients never see a dangling item. The only
        # one of its kind holds the turn's whole text, as the model ended it.
        if reasoning_id is not None:
            whole = finished.reasoning if finished else reasoning
            yield ev.ReasoningDone(item_id=reasoning_id, text=whole if reasonings == 1 else item_reasoning,
                                   status=item_status)  # fmt: skip
        if message_id is not None:
            final = (finished.text if finished else text) if messages == 1 else item_text
            yield ev.MessageDone(item_id=message_id, text=final, status=item_status, annotations=self._citations(final))
        calls = finished.tool_calls if finished else ()
        plan = self._plan(calls)
        ignored = {call.call_id for call in plan.ignored}
        for index, call in enumerate(calls):
            if index not in starts and call.call_id not in ignored:  # a model that did not announce the call
                await self._before_open(call.name)
                opened = self._open_call(
                    index, call.call_id, call.name, mcp_item_at, function_item_at, ci_item_at, sh_item_at
                )
                if opened is not None:
                    yield opened
            if index in mcp_item_at:
                yield ev.McpCallArgumentsDone(item_id=mcp_item_at[index], arguments=call.arguments)
            elif index in function_item_at:
                yield ev.FunctionCallDone(item_id=function_item_at[index], arguments=call.arguments, status=item_status)
            elif index in ci_item_at:
                code = code_of(call.arguments)
                if rest := code_at.setdefault(index, CodeStream()).rest(code):
                    yield ev.CodeInterpreterCallCodeDelta(item_id=ci_item_at[index], delta=rest)
                yield ev.CodeInterpreterCallCodeDone(item_id=ci_item_at[index], code=code)
            elif index in sh_item_at:  # the commands not told as they streamed are told now, whole
                action_ = shell_action(call.arguments)
                for step in commands_at.setdefault(index, CommandsStream()).rest(action_["commands"]):
                    yield _command_event(sh_item_at[index], step)
                environment = self.sh.environment() if self.sh is not None else None
                yield ev.ShellCallDone(item_id=sh_item_at[index], action=action_, environment=environment,
                                       status=item_status)  # fmt: skip
        for index in sorted(set(function_item_at) - set(range(len(calls)))):
            yield ev.FunctionCallDone(item_id=function_item_at[index], arguments="", status="incomplete")
        for index in sorted(set(ci_item_at) - set(range(len(calls)))):  # cut short: never run
            self.ci_items.pop(starts[index].call_id, None)
            sent = code_at[index].sent if index in code_at else ""
            yield ev.CodeInterpreterCallCodeDone(item_id=ci_item_at[index], code=sent)
            yield self._code_interpreter_done(ci_item_at[index], "", None, "incomplete")
        for index in sorted(set(sh_item_at) - set(range(len(calls)))):  # cut short: never run
            stream = commands_at.setdefault(index, CommandsStream())
            for step in stream.rest(list(stream.sent)):  # what was told is what the item says
                yield _command_event(sh_item_at[index], step)
            action_ = {**shell_action(""), "commands": list(stream.sent)}
            yield ev.ShellCallDone(item_id=sh_item_at[index], action=action_, status="incomplete")
        usage = turn.usage if turn is not None else None
        yield ev.StepTraced(
            kind="model", name=self.upstream_model, started_at=started, ended_at=ended,
            ttft_s=None if first_at is None else first_at - started,
            input_tokens=usage.input_tokens if usage else 0, output_tokens=usage.output_tokens if usage else 0,
            error=None if error is None else error["message"],
            detail=None if action.stop is None else {"loop_guard": action.stop.detail()},
        )
        if self.rails is not None:
            for checked in self._verdicts():
                yield checked
        if finished is None:
            cancelled = error is None
            self.state = replace(self.state, cancelled=cancelled, error=error)
            return
        self._fold_turn(finished, plan, had_tools=action.tools_enabled)
        following = decide(self.state) if self.checkpoints else None
        if following is not None and not isinstance(following, Finish):  # the last turn: the end is stored next
            mcp_opened = {c.call_id: self.mcp_items[c.call_id] for c in calls if c.call_id in self.mcp_items}
            searches = {c.call_id: self.fs_items[c.call_id] for c in calls if c.call_id in self.fs_items}
            runs = {c.call_id: self.ci_items[c.call_id] for c in calls if c.call_id in self.ci_items}
            web = {c.call_id: self.ws_items[c.call_id] for c in calls if c.call_id in self.ws_items}
            yield ev.Checkpoint(step=TurnStep(
                turn=finished, had_tools=action.tools_enabled, mcp_items=mcp_opened, fs_items=searches, ci_items=runs,
                ws_items=web,
            ), gates=self._gates(following))  # fmt: skip

    def _plan(self, calls: Sequence[ToolCall]) -> TurnPlan:
        return plan_turn(calls, policy=self.p.policy, executors=self.executors, calls_used=self.state.tool_calls_used)

    def _fold_turn(self, turn: TurnEnd, plan: TurnPlan, *, had_tools: bool) -> None:
        """Add a finished model turn and its plan to the transcript and the loop state (live, or resuming)."""
        ignored = {call.call_id for call in plan.ignored}
        if turn.text:
            self.p.transcript.add_message("assistant", turn.text)
            self.texts.append(turn.text)
        for call in turn.tool_calls:
            if call.call_id not in ignored:  # the model is never told of an ignored call
                self.p.transcript.add_call(call)
        self.state = self.state.after_model(turn, plan, had_tools=had_tools)

    # -- resuming ----------------------------------------------------------------

    def _restore(self, point: ResumePoint) -> None:
        """Fold a durable run's stored steps into this loop (module :mod:`.checkpoint`), as they
        were folded live; the loop then goes on from the last step."""
        if self.mcp is not None:
            self.mcp.learn(point.output)  # the listings the run showed
        for step in point.steps:
            match step:
                case TurnStep(turn=turn):
                    self.mcp_items.update(step.mcp_items)
                    self.fs_items.update(step.fs_items)
                    self.ci_items.update(step.ci_items)
                    self.ws_items.update(step.ws_items)
                    for call in turn.tool_calls:
                        if call.call_id in step.ws_items:
                            self.ws_started[call.call_id] = action_of(call.name, call.arguments)
                    self._fold_turn(turn, self._plan(turn.tool_calls), had_tools=step.had_tools)
                case ApprovedCallsStep():
                    self.mcp_items.update(step.mcp_items)
                    self.approved_opened = True
                    for call in self.state.approved_calls:
                        self.p.transcript.add_call(call)
                case ToolResultStep(error=error):
                    self.settled[step.call_id] = _ToolOutcome(
                        step.output, step.started, step.ended, None if error is None else McpError(error), error
                    )
                    if self.ci is not None and step.detail is not None and "run" in step.detail:
                        self.ci.runs[step.call_id] = (step.detail["container_id"], CodeRun.from_data(step.detail["run"]))
                    if self.sh is not None and step.detail is not None and "commands" in step.detail:
                        runs = [CommandRun.from_data(c) for c in step.detail["commands"]]
                        self.sh.runs[step.call_id] = (step.detail["container_id"], runs)
                case CompactionStep():
                    self._fold_compaction(step.summary, step.usage)
                case ToolOutputsStep():
                    action = decide(self.state)
                    assert isinstance(action, ExecuteTools), "a stored tool step follows its turn"
                    for call, output, _ in self._answers(action, self.settled):
                        self.p.transcript.add_output(call.call_id, output)
                        self.mcp_items.pop(call.call_id, None)
                        self.fs_items.pop(call.call_id, None)
                        self.ws_items.pop(call.call_id, None)
                        self.ci_items.pop(call.call_id, None)
                        self.sh_outputs.pop(call.call_id, None)
                    self.settled = {}
                    self.state = self.state.after_tools()
                case _:
                    assert_never(step)
        pending = decide(self.state)
        if isinstance(pending, ExecuteTools):  # the host died during this tool step
            self.in_flight = frozenset(c.call_id for c in pending.calls) - set(self.settled)
        if self.fs is not None:  # passages found before the restart keep their markers
            outputs = [*self.p.transcript.outputs_of(FILE_SEARCH), *(o.output for o in self.settled.values())]
            self.fs.next_marker = next_marker(outputs)
        if self.ws is not None:  # so do the web's sources
            outputs = [o for name in WEB_TOOL_NAMES for o in self.p.transcript.outputs_of(name)]
            self.ws.next_marker = next_web_marker([*outputs, *(o.output for o in self.settled.values())])
        if self.ci is not None:  # the container the run used goes on, when still active
            for item in point.output:
                if item.get("type") == "code_interpreter_call":
                    self.ci.reuse = item.get("container_id") or self.ci.reuse
                    if item.get("status") == "interpreting":  # its event is in the log already
                        self.ci_interpreting.add(item["id"])
        if self.sh is not None and not self.sh.local:
            for item in point.output:
                if item.get("type") == "shell_call" and isinstance(item.get("environment"), dict):
                    self.sh.reuse = item["environment"].get("container_id") or self.sh.reuse
                elif item.get("type") == "shell_call_output" and item.get("status") == "in_progress":
                    self.sh_outputs[item["call_id"]] = item["id"]  # opened before the host died: closed by this run

    # -- tools -------------------------------------------------------------------

    async def _execute(self, action: ExecuteTools) -> AsyncIterator[ev.LoopEvent]:
        approved_step = self.state.last_turn is None  # the approved calls, before any model turn
        order = action.calls if approved_step else self.state.last_turn.tool_calls  # type: ignore[union-attr]
        if approved_step and not self.approved_opened:
            # Approved calls run now, without a model turn: their mcp_call items open here.
            for call in action.calls:
                item_id = self.mcp_items[call.call_id] = new_id("mcp")
                yield ev.McpCallStarted(
                    item_id=item_id, server_label=self.approved_labels[call.call_id], name=call.name,
                    approval_request_id=call.call_id,
                )
                yield ev.McpCallArgumentsDone(item_id=item_id, arguments=call.arguments)
                self.p.transcript.add_call(call)
            if self.checkpoints:
                opened = {call.call_id: self.mcp_items[call.call_id] for call in action.calls}
                yield ev.Checkpoint(step=ApprovedCallsStep(mcp_items=opened), gates=self._gates(action))
        for call in action.calls:  # a server-run shell call's output item opens as its commands are to run
            if self._runs_shell(call) and call.call_id not in self.sh_outputs:
                yield self._open_shell_output(call)
        results = {c.call_id: self.settled[c.call_id] for c in action.calls if c.call_id in self.settled}
        for call in action.calls:
            if call.call_id in self.in_flight and not is_idempotent(self._executor_of(call), call):
                now = self.clock()  # the host died while it may have run: never run twice
                results[call.call_id] = _ToolOutcome(INTERRUPTED, now, now, McpError(_NOT_RERUN), _NOT_RERUN)
                if self.checkpoints:
                    yield _tool_checkpoint(call, results[call.call_id])
        self.settled, self.in_flight = {}, frozenset()
        to_run = [call for call in action.calls if call.call_id not in results]
        if self.rails is not None and self.rails.at("tool_call"):  # a call a guardrail blocks does not run
            for call in list(to_run):
                _, refused = await self.rails.check("tool_call", call.arguments)
                for step in self._verdicts(call.call_id):
                    yield step
                if refused is not None:
                    to_run.remove(call)
                    now, told = self.clock(), withheld_text(refused)
                    results[call.call_id] = _ToolOutcome(told, now, now, GuardrailBlocked(told), told)
        for call in to_run:
            if call.call_id in self.fs_items:
                yield ev.FileSearchCallSearching(item_id=self.fs_items[call.call_id])
            elif call.call_id in self.ws_items:
                yield ev.WebSearchCallSearching(item_id=self.ws_items[call.call_id])
            elif (ci_item := self.ci_items.get(call.call_id)) is not None and ci_item not in self.ci_interpreting:
                self.ci_interpreting.add(ci_item)
                yield ev.CodeInterpreterCallInterpreting(item_id=ci_item)
        started = self.clock()
        for call in to_run:
            yield ev.StepStarted(
                kind="tool", name=call.name, started_at=started, call_id=call.call_id, arguments=call.arguments,
                server=self._server_of(call),
            )
        tasks: dict[asyncio.Future[Any], ToolCall] = {asyncio.ensure_future(self._run_tool(call)): call for call in to_run}
        pending = dict(tasks)
        if pending:
            waiter = asyncio.ensure_future(self.cancel.wait())
            try:
                while pending:
                    done, _ = await asyncio.wait({*pending, waiter}, return_when=asyncio.FIRST_COMPLETED)
                    if waiter in done:
                        break
                    for task in done:  # each result is a step of its own, kept as it comes
                        call = pending.pop(task)
                        results[call.call_id] = task.result()
                        if self.checkpoints:
                            yield _tool_checkpoint(call, results[call.call_id], self._detail(call))
            finally:  # also when the turn itself is cancelled (its client went away)
                waiter.cancel()
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
            if pending:  # the response was cancelled while tools ran
                ended = self.clock()
                for task, call in tasks.items():  # each call's step, cut short or not
                    outcome = None if task.cancelled() else task.result()
                    yield ev.StepTraced(
                        kind="tool", name=call.name, call_id=call.call_id,
                        started_at=outcome.started if outcome else started, ended_at=outcome.ended if outcome else ended,
                        error=outcome.error_text if outcome else "cancelled", server=self._server_of(call),
                        output=outcome.output if outcome else None,
                    )  # fmt: skip
                self.state = replace(self.state, cancelled=True)
                return
        # Outputs in the model's call order, whichever finished first.
        for call, output, failure in self._answers(action, results, order):
            mcp_item = self.mcp_items.pop(call.call_id, None)
            fs_item = self.fs_items.pop(call.call_id, None)
            ws_item = self.ws_items.pop(call.call_id, None)
            ci_item = self.ci_items.pop(call.call_id, None)
            sh_output = self.sh_outputs.pop(call.call_id, None)
            if sh_output is None and self.sh is not None and call.name == SHELL and call.call_id not in self.approved_labels:
                started_output = self._open_shell_output(call)  # a call answered without running (rejected)
                sh_output = started_output.item_id
                yield started_output
            if self.rails is not None and self.rails.at("tool_output") and call.call_id in results:
                output, refused = await self.rails.check("tool_output", output)
                for step in self._verdicts(call.call_id):
                    yield step
                if refused is not None:
                    output = withheld_text(refused)
            outcome = results.get(call.call_id)
            if outcome is not None and not isinstance(outcome.error, GuardrailBlocked):  # a blocked call never ran
                yield ev.StepTraced(
                    kind="tool", name=call.name, call_id=call.call_id, started_at=outcome.started,
                    ended_at=outcome.ended, error=outcome.error_text, server=self._server_of(call), output=output,
                )
            self.p.transcript.add_output(call.call_id, output)
            if mcp_item is not None:
                if failure is None:
                    yield ev.McpCallDone(item_id=mcp_item, output=output)
                else:
                    error = failure if isinstance(failure, McpError) else McpError(str(failure))
                    yield ev.McpCallDone(item_id=mcp_item, error=error.to_item_error())
            elif fs_item is not None:
                yield self._file_search_done(fs_item, call, output, failure)
            elif ws_item is not None:
                yield self._web_search_done(ws_item, call, failure)
            elif ci_item is not None:
                yield self._code_interpreter_ran(ci_item, call, failure)
            elif sh_output is not None:
                yield self._shell_ran(sh_output, call, failure)
            else:
                yield ev.ItemEmitted(item=_output_item(call, output))

    def _file_search_done(
        self, item_id: str, call: ToolCall, output: str, failure: Exception | None
    ) -> ev.FileSearchCallDone:
        """The end of a ``file_search_call`` item: its query, and its results when the request
        includes them (after a restart, as its stored output lists them)."""
        query = query_of(call.arguments)
        results: tuple[dict[str, Any], ...] | None = None
        if self.include_results and failure is None:
            found = self.fs.results.get(call.call_id) if self.fs is not None else None
            if found is None:
                found = [{"file_id": f, "filename": n, "score": None, "text": t, "attributes": None}
                         for _, n, f, t in parse_results(output)]  # fmt: skip
            results = tuple(found)
        return ev.FileSearchCallDone(
            item_id=item_id, queries=(query,) if query else (), status="failed" if failure else "completed",
            results=results,
        )

    def _web_search_done(self, item_id: str, call: ToolCall, failure: Exception | None) -> ev.WebSearchCallDone:
        """The end of a ``web_search_call`` item: its action (a search's ``sources`` when the
        request includes them, and the search ran here: after a restart they are not known)."""
        self.ws_started.pop(call.call_id, None)
        action = action_of(call.name, call.arguments)
        ran = self.ws.actions.get(call.call_id) if self.ws is not None else None
        if self.include_sources and failure is None and ran is not None and "sources" in ran:
            action["sources"] = ran["sources"]
        return ev.WebSearchCallDone(item_id=item_id, action=action, status="failed" if failure else "completed")

    def _code_interpreter_ran(self, item_id: str, call: ToolCall, failure: Exception | None) -> ev.CodeInterpreterCallDone:
        """The end of a ``code_interpreter_call`` item that was answered: ``completed``, or
        ``incomplete`` when a limit stopped its run, or ``failed`` when it could not run."""
        ran = self.ci.runs.get(call.call_id) if self.ci is not None else None
        if failure is not None or ran is None:
            return self._code_interpreter_done(item_id, "", None, "failed")
        container_id, run = ran
        return self._code_interpreter_done(item_id, container_id, run, "incomplete" if run.limit else "completed")

    def _code_interpreter_done(
        self, item_id: str, container_id: str, run: CodeRun | None, status: Literal["completed", "incomplete", "failed"]
    ) -> ev.CodeInterpreterCallDone:
        """A ``code_interpreter_call`` item's end, with its outputs when the request includes them."""
        outputs = None
        if self.include_outputs:
            outputs = tuple(item_outputs(run)) if run is not None else ()
        known = self.ci.known_container if self.ci is not None else ""
        return ev.CodeInterpreterCallDone(item_id=item_id, container_id=container_id or known, status=status,
                                          outputs=outputs)  # fmt: skip

    def _runs_shell(self, call: ToolCall) -> bool:
        """Whether ``call`` is a ``shell`` call this server runs (a container environment)."""
        return self.sh is not None and not self.sh.local and call.name == SHELL and call.call_id not in self.approved_labels

    def _open_shell_output(self, call: ToolCall) -> ev.ShellOutputStarted:
        """Open a ``shell_call`` 's ``shell_call_output`` item (remembered in ``sh_outputs``)."""
        item_id = self.sh_outputs[call.call_id] = new_id(SHELL_CALL_OUTPUT)
        most = shell_action(call.arguments)["max_output_length"]
        return ev.ShellOutputStarted(item_id=item_id, call_id=call.call_id, max_output_length=most)

    def _shell_ran(self, item_id: str, call: ToolCall, failure: Exception | None) -> ev.ShellOutputDone:
        """The end of a ``shell_call_output`` item: ``completed`` with one entry per command when
        they ran, ``incomplete`` and empty when they could not (module :mod:`.shell`)."""
        ran = self.sh.runs.get(call.call_id) if self.sh is not None else None
        if failure is not None or ran is None:
            return ev.ShellOutputDone(item_id=item_id, status="incomplete")
        return ev.ShellOutputDone(item_id=item_id, output=tuple(output_entries(ran[1])))

    def _detail(self, call: ToolCall) -> dict[str, Any] | None:
        """What a call's checkpoint keeps for its item beyond its output (a code run, a shell
        call's commands)."""
        ran = self.ci.runs.get(call.call_id) if self.ci is not None else None
        if ran is not None:
            return {"container_id": ran[0], "run": ran[1].to_data()}
        commands = self.sh.runs.get(call.call_id) if self.sh is not None else None
        if commands is not None:
            return {"container_id": commands[0], "commands": [c.to_data() for c in commands[1]]}
        return None

    def _citations(self, text: str) -> tuple[dict[str, Any], ...]:
        """The annotations of an answer: ``file_citation`` (module :mod:`.file_search`),
        ``url_citation`` (module :mod:`.web_search`) and ``container_file_citation`` (module
        :mod:`.code_interpreter`), in text order."""
        found: list[dict[str, Any]] = []
        if self.fs is not None and "【" in text:
            found += citations(text, self.p.transcript.outputs_of(FILE_SEARCH))
        if self.ws is not None and "【" in text:
            found += url_citations(text, [o for name in WEB_TOOL_NAMES for o in self.p.transcript.outputs_of(name)])
        if self.ci is not None and self.ci.runs:
            found += container_citations(text, self.ci.runs.values())
        found.sort(key=lambda a: a["index"] if "index" in a else a["start_index"])
        return tuple(found)

    def _answers(
        self, action: ExecuteTools, results: dict[str, _ToolOutcome], order: Sequence[ToolCall] | None = None
    ) -> Iterator[tuple[ToolCall, str, Exception | None]]:
        """Each answered call of a tool step with its output and failure, in the model's call order."""
        if order is None:
            turn = self.state.last_turn
            order = action.calls if turn is None else turn.tool_calls
        rejected = {r.call.call_id: r for r in action.rejected}
        for call in order:
            if call.call_id in results:
                yield call, results[call.call_id].output, results[call.call_id].error
            elif call.call_id in rejected:
                reason = rejected[call.call_id].reason
                yield call, f"Error: {reason}", McpError(reason)

    def _server_of(self, call: ToolCall) -> str | None:
        """The label of the MCP server a call goes to; None for any other tool."""
        label = self.approved_labels.get(call.call_id)
        if label is None and self.mcp is not None:
            label = self.mcp.label_of(call.name)
        return label

    def _gates(self, action: object) -> bool:
        """Whether ``action`` starts a tool call that is not idempotent (its step must be stored
        before it starts: :attr:`.events.Checkpoint.gates`)."""
        return isinstance(action, ExecuteTools) and not all(
            is_idempotent(self._executor_of(call), call) for call in action.calls
        )

    def _executor_of(self, call: ToolCall) -> ToolExecutor | None:
        if call.call_id in self.approved_labels:
            return self.mcp
        return find_executor(call, self.executors)

    async def _run_tool(self, call: ToolCall) -> _ToolOutcome:
        started = self.clock()
        try:
            if call.call_id in self.approved_labels:  # an approved MCP call: its server is known
                assert self.mcp is not None
                output = await self.mcp.call(self.approved_labels[call.call_id], call.name, call.arguments)
                return _ToolOutcome(output, started, self.clock())
            executor = find_executor(call, self.executors)
            assert executor is not None, "plan_turn only sends calls that have an executor"
            return _ToolOutcome(await executor.execute(call), started, self.clock())
        except Exception as exc:  # noqa: BLE001 - a tool error goes back to the model
            described = str(exc) if isinstance(exc, McpError) else f"{type(exc).__name__}: {exc}"
            return _ToolOutcome(f"Error: {described}", started, self.clock(), exc, described)


class GuardrailBlocked(Exception):
    """A tool call a ``tool_call`` guardrail blocked: it did not run."""


def _tool_checkpoint(call: ToolCall, outcome: _ToolOutcome, detail: dict[str, Any] | None = None) -> ev.Checkpoint:
    return ev.Checkpoint(step=ToolResultStep(
        call_id=call.call_id, output=outcome.output, error=outcome.error_text, started=outcome.started,
        ended=outcome.ended, detail=detail,
    ))  # fmt: skip


def _command_event(item_id: str, step: CommandStep) -> ev.ShellCommandAdded | ev.ShellCommandDelta | ev.ShellCommandDone:
    """The loop event of one step a :class:`~.shell.CommandsStream` told."""
    kind, index, text = step
    if kind == "added":
        return ev.ShellCommandAdded(item_id=item_id, command_index=index)
    if kind == "delta":
        return ev.ShellCommandDelta(item_id=item_id, command_index=index, delta=text)
    return ev.ShellCommandDone(item_id=item_id, command_index=index, command=text)


_OUTPUTS_EMITTED = ev.Checkpoint(step=ToolOutputsStep())
"""The checkpoint after every tool step's outputs (it holds nothing: one value serves all)."""


def _output_item(call: ToolCall, output: str) -> dict[str, Any]:
    return {
        "type": "function_call_output",
        "id": new_id("fco"),
        "call_id": call.call_id,
        "output": output,
        "status": "completed",
    }


def _request_guards(asked: dict[str, int] | None) -> LoopGuards | None:
    """The request's ``loop_guards`` (validated at parse time) as :class:`LoopGuards`."""
    return None if not asked else LoopGuards(**asked)


def run_loop(
    prepared: PreparedTurn,
    *,
    model: ModelClient,
    executors: Sequence[ToolExecutor] = (),
    settings: LoopSettings = LoopSettings(),
    upstream_model: str | None = None,
    cancel: asyncio.Event | None = None,
    clock: Callable[[], float] = time.time,
    context_window: int | None = None,
    resume: ResumePoint | None = None,
    checkpoints: bool = False,
    live: bool = True,
    guardrails: Guardrails | None = None,
    loop_guards: LoopGuards | None = None,
    steer: asyncio.Event | None = None,
) -> AsyncGenerator[ev.LoopEvent, None]:
    """Run one response's agent loop.

    Args:
        prepared: from :func:`prepare`.
        model: the model client.
        executors: server-side tool executors, in priority order.
        settings: server-wide loop behaviour.
        upstream_model: the model name sent upstream (default: the request's).
        cancel: set it to stop the loop at the next chunk or tool boundary;
            the response then ends ``cancelled``.
        context_window: the model's context window in estimated tokens (module
            :mod:`.context`); None: not checked. It also sets the ``compact_threshold`` of a
            ``context_management`` compaction entry that gives none (module :mod:`.compaction`).
        clock: wall clock for step traces.
        resume: go on from a durable run's stored steps (module :mod:`.checkpoint`;
            :meth:`ResumePoint.from_stored` reads them) instead of starting; the caller's
            writer must be restored to the steps' wire events.
        checkpoints: yield a ``Checkpoint`` at every step boundary (a durable run), for the
            caller to store before it takes the next event.
        live: someone takes the events as they come (a stream, a background run that may be
            followed). False: each model call asks upstream for one JSON completion instead of
            a stream (``ChatRequest.stream``), and its answer comes as one delta: for a
            non-streamed request, which sees only the end.
        guardrails: the request's guardrails (module :mod:`.guardrails`): its input is
            refused, its output stopped or redacted, its server-side tool calls and results
            checked, as they say; each check is a ``guardrail`` step.
        loop_guards: the model's loop guards (module :mod:`.loop_guards`); the request's own
            (``loop_guards``) may turn more on or tighten them, never loosen them.
        steer: set it to end the loop at its next safe boundary, once the tool calls under way
            have their results and before the next model call: the response ends
            ``incomplete``, reason ``steered`` (WebSocket steering). A turn that answers ends it
            ``completed`` as usual.

    Returns:
        The loop's semantic events, ending with one ``ResponseFinished``.
    """
    run = _Run(
        prepared,
        model=model,
        executors=executors,
        settings=settings,
        upstream_model=upstream_model,
        cancel=cancel or asyncio.Event(),
        clock=clock,
        context_window=context_window,
        resume=resume,
        checkpoints=checkpoints,
        live=live,
        guardrails=guardrails,
        loop_guards=loop_guards,
        steer=steer,
    )
    return run.run()
