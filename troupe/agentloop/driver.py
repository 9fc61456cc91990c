"""The driver: one loop for streaming and non-streaming responses.

:func:`prepare` validates what only the loop can judge (tool kinds, the pairing
of tool outputs) and builds the canonical transcript; it raises before anything
is streamed, so a bad request is a clean 400. :func:`run_loop` then performs
what :func:`~troupe.agentloop.decide.decide` asks for, through the injected
model client and tool executors, and yields semantic events
(:mod:`troupe.agentloop.events`); the caller feeds them to a
:class:`~troupe.agentloop.writer.WireWriter` and either streams the wire events
or keeps only the final Response.

Example::

    prepared = prepare(request, history=[])
    writer = WireWriter(request, response_id=new_id("resp"), created_at=int(time.time()))
    response = await collect_response(run_loop(prepared, model=SimModel()), writer)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from troupe.protocol import CreateResponseRequest, InvalidRequest, new_id

from . import events as ev
from .decide import CallModel, ExecuteTools, Finish, InterruptForApproval, LoopState, decide
from .model import ChatRequest, ModelClient, ModelError, ToolCall, TurnEnd
from .model import ReasoningDelta as ModelReasoningDelta
from .model import TextDelta as ModelTextDelta
from .model import ToolCallArgumentsDelta, ToolCallStart
from .tools import ToolExecutor, ToolPolicy, find_executor, plan_turn
from .transcript import Transcript, build_transcript

__all__ = ["LoopSettings", "PreparedTurn", "prepare", "run_loop"]

_SUPPORTED_TOOL_TYPES = frozenset({"function"})


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


def _plain(value: Any) -> Any:
    """Request fields may be pydantic models or plain values; the loop reads plain ones."""
    dump = getattr(value, "model_dump", None)
    return dump(exclude_none=True) if dump else value


def prepare(
    request: CreateResponseRequest,
    history: Sequence[dict[str, Any]],
    executors: Sequence[ToolExecutor] = (),
) -> PreparedTurn:
    """Validate the parts of ``request`` only the loop can judge, and build its transcript.

    Args:
        request: the validated create request.
        history: the thread's earlier client items, oldest first.
        executors: the server-side tool executors.

    Returns:
        The prepared turn.

    Raises:
        InvalidRequest: an unsupported tool kind or tool_choice, or input items
            that do not fit the history (see :func:`build_transcript`).
    """
    tools = [_plain(t) for t in (request.tools or [])]
    for i, tool in enumerate(tools):
        if tool.get("type") not in _SUPPORTED_TOOL_TYPES:
            raise InvalidRequest(
                f"Tool type '{tool.get('type')}' is not supported by this server.",
                param=f"tools[{i}].type",
                code="unsupported_value",
            )
    choice = _plain(request.tool_choice)
    if isinstance(choice, dict) and choice.get("type") not in ("function", "allowed_tools"):
        raise InvalidRequest(
            f"tool_choice of type '{choice.get('type')}' is not supported by this server.",
            param="tool_choice",
            code="unsupported_value",
        )
    transcript, accepted = build_transcript(history, request.input_items())
    declared = {t["name"] for t in tools}
    definitions = tools + [d for ex in executors for d in ex.definitions() if d["name"] not in declared]
    allowed = None
    if isinstance(choice, dict) and choice["type"] == "allowed_tools":
        allowed = frozenset(t["name"] for t in choice.get("tools", []) if t.get("type") == "function")
    policy = ToolPolicy(
        declared=frozenset(declared),
        allowed=allowed,
        execute=choice != "none",
        max_tool_calls=request.max_tool_calls,
    )
    return PreparedTurn(
        request=request, transcript=transcript, input_items=accepted, tool_definitions=definitions, policy=policy
    )


def _chat_tools(definitions: Sequence[dict[str, Any]], allowed: frozenset[str] | None) -> list[dict[str, Any]]:
    out = []
    for d in definitions:
        if allowed is not None and d["name"] not in allowed:
            continue  # allowed_tools: the model is only offered what it may call
        function = {"name": d["name"], "parameters": d.get("parameters") or {"type": "object", "properties": {}}}
        if d.get("description"):
            function["description"] = d["description"]
        if d.get("strict") is not None:
            function["strict"] = d["strict"]
        out.append({"type": "function", "function": function})
    return out


def _chat_tool_choice(choice: Any, action: CallModel) -> str | dict[str, Any]:
    if not action.tools_enabled or choice == "none":
        return "none"
    if not action.use_request_tool_choice or choice is None:
        return "auto"
    if isinstance(choice, str):
        return choice
    if choice["type"] == "function":
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice.get("mode", "auto")  # allowed_tools: the tool list is already filtered


def _response_format(text: Any) -> dict[str, Any] | None:
    fmt = (_plain(text) or {}).get("format") or {}
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    return None


def _model_error(exc: Exception) -> dict[str, Any]:
    if isinstance(exc, ModelError):
        code = "rate_limit_exceeded" if exc.status == 429 else "server_error"
        return {"code": code, "message": f"The model call failed (upstream status {exc.status}): {exc.message}"}
    return {"code": "server_error", "message": f"The model call failed: {exc}"}


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
    ) -> None:
        self.p = prepared
        self.req = prepared.request
        self.model = model
        self.executors = executors
        self.upstream_model = upstream_model or self.req.model
        self.cancel = cancel
        self.clock = clock
        self.state = LoopState(
            max_infer_iters=self.req.max_infer_iters,
            client_tool_status=settings.client_tool_status,
            output_tokens_left=self.req.max_output_tokens,
        )

    async def run(self) -> AsyncIterator[ev.LoopEvent]:
        yield ev.ResponseStarted()
        while True:
            action = decide(self.state)
            match action:
                case CallModel():
                    async for event in self._call_model(action):
                        yield event
                case ExecuteTools():
                    async for event in self._execute(action):
                        yield event
                    self.state = self.state.after_tools()
                case InterruptForApproval(pending=pending):
                    for call in pending:
                        executor = find_executor(call, self.executors)
                        yield ev.ItemEmitted(item=executor.approval_item(call))  # type: ignore[union-attr]
                    action = Finish(status="completed")
            if isinstance(action, Finish):
                yield ev.ResponseFinished(
                    status=action.status,
                    usage=self.state.usage,
                    error=action.error,
                    incomplete_reason=action.incomplete_reason,
                )
                return
            if self.cancel.is_set():
                self.state = replace(self.state, cancelled=True)

    # -- model turn --------------------------------------------------------------

    def _chat_request(self, action: CallModel) -> ChatRequest:
        req = self.req
        choice = _plain(req.tool_choice)
        effort = (_plain(req.reasoning) or {}).get("effort")
        return ChatRequest(
            model=self.upstream_model,
            messages=self.p.transcript.to_chat_messages(req.instructions if isinstance(req.instructions, str) else None),
            tools=_chat_tools(self.p.tool_definitions, self.p.policy.allowed),
            tool_choice=_chat_tool_choice(choice, action),
            parallel_tool_calls=req.parallel_tool_calls,
            max_tokens=self.state.output_tokens_left,
            temperature=req.temperature,
            top_p=req.top_p,
            response_format=_response_format(req.text),
            extra={"reasoning_effort": effort} if effort else {},
        )

    async def _call_model(self, action: CallModel) -> AsyncIterator[ev.LoopEvent]:
        chat = self._chat_request(action)
        started, first_at = self.clock(), None
        message_id = reasoning_id = None
        text = reasoning = ""
        call_items: dict[int, str] = {}  # tool-call index -> item id
        turn: TurnEnd | None = None
        error: dict[str, Any] | None = None
        try:
            async with contextlib.aclosing(self.model.stream(chat)) as chunks:
                async for chunk in chunks:
                    first_at = first_at or self.clock()
                    match chunk:
                        case ModelReasoningDelta(text=delta):
                            if reasoning_id is None:
                                reasoning_id = new_id("rs")
                                yield ev.ReasoningStarted(item_id=reasoning_id)
                            reasoning += delta
                            yield ev.ReasoningDelta(item_id=reasoning_id, delta=delta)
                        case ModelTextDelta(text=delta):
                            if message_id is None:
                                message_id = new_id("msg")
                                yield ev.MessageStarted(item_id=message_id)
                            text += delta
                            yield ev.MessageDelta(item_id=message_id, delta=delta)
                        case ToolCallStart(index=index, call_id=call_id, name=name):
                            call_items[index] = new_id("fc")
                            yield ev.FunctionCallStarted(item_id=call_items[index], call_id=call_id, name=name)
                        case ToolCallArgumentsDelta(index=index, delta=delta):
                            yield ev.FunctionCallArgumentsDelta(item_id=call_items[index], delta=delta)
                        case TurnEnd():
                            turn = chunk
                    if self.cancel.is_set():
                        break
        except Exception as exc:  # noqa: BLE001 - any model failure ends the response as failed
            error = _model_error(exc)
        ended = self.clock()
        done = turn is not None and error is None
        item_status = "completed" if done and turn.finish_reason != "length" else "incomplete"
        # Close every item this turn opened, so clients never see a dangling item.
        if reasoning_id is not None:
            yield ev.ReasoningDone(item_id=reasoning_id, text=turn.reasoning if done else reasoning, status=item_status)
        if message_id is not None:
            yield ev.MessageDone(item_id=message_id, text=turn.text if done else text, status=item_status)
        calls = turn.tool_calls if done else ()
        for index, call in enumerate(calls):
            if index not in call_items:  # a client that did not announce the call while streaming
                call_items[index] = new_id("fc")
                yield ev.FunctionCallStarted(item_id=call_items[index], call_id=call.call_id, name=call.name)
            yield ev.FunctionCallDone(item_id=call_items[index], arguments=call.arguments, status=item_status)
        for index in sorted(set(call_items) - set(range(len(calls)))):
            yield ev.FunctionCallDone(item_id=call_items[index], arguments="", status="incomplete")
        usage = turn.usage if turn is not None else None
        yield ev.StepTraced(
            kind="model", name=chat.model, started_at=started, ended_at=ended,
            ttft_s=None if first_at is None else first_at - started,
            input_tokens=usage.input_tokens if usage else 0, output_tokens=usage.output_tokens if usage else 0,
            error=None if error is None else error["message"],
        )
        if not done:
            cancelled = error is None
            self.state = replace(self.state, cancelled=cancelled, error=error)
            return
        if turn.text:
            self.p.transcript.add_message("assistant", turn.text)
        for call in turn.tool_calls:
            self.p.transcript.add_call(call)
        plan = plan_turn(
            turn.tool_calls, policy=self.p.policy, executors=self.executors, calls_used=self.state.tool_calls_used
        )
        self.state = self.state.after_model(turn, plan, had_tools=action.tools_enabled)

    # -- tools -------------------------------------------------------------------

    async def _execute(self, action: ExecuteTools) -> AsyncIterator[ev.LoopEvent]:
        tasks = [asyncio.ensure_future(self._run_tool(call)) for call in action.calls]
        results: dict[str, tuple[str, float, float, str | None]] = {}
        if tasks:
            waiter = asyncio.ensure_future(self.cancel.wait())
            gathered = asyncio.gather(*tasks)
            await asyncio.wait({gathered, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if not gathered.done():  # cancelled while tools ran
                gathered.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await gathered
                self.state = replace(self.state, cancelled=True)
                return
            results = dict(zip((c.call_id for c in action.calls), gathered.result(), strict=True))
        rejected = {r.call.call_id: r for r in action.rejected}
        # Outputs in the model's call order, whichever finished first.
        for call in self.state.last_turn.tool_calls if self.state.last_turn else ():
            if call.call_id in results:
                output, started, ended, error = results[call.call_id]
                yield ev.StepTraced(
                    kind="tool", name=call.name, call_id=call.call_id, started_at=started, ended_at=ended, error=error
                )
            elif call.call_id in rejected:
                output = f"Error: {rejected[call.call_id].reason}"
            else:
                continue
            self.p.transcript.add_output(call.call_id, output)
            yield ev.ItemEmitted(item=_output_item(call, output))

    async def _run_tool(self, call: ToolCall) -> tuple[str, float, float, str | None]:
        executor = find_executor(call, self.executors)
        assert executor is not None, "plan_turn only sends calls that have an executor"
        started = self.clock()
        try:
            output, error = await executor.execute(call), None
        except Exception as exc:  # noqa: BLE001 - a tool error goes back to the model
            error = f"{type(exc).__name__}: {exc}"
            output = f"Error: {error}"
        return output, started, self.clock(), error


def _output_item(call: ToolCall, output: str) -> dict[str, Any]:
    return {
        "type": "function_call_output",
        "id": new_id("fco"),
        "call_id": call.call_id,
        "output": output,
        "status": "completed",
    }


def run_loop(
    prepared: PreparedTurn,
    *,
    model: ModelClient,
    executors: Sequence[ToolExecutor] = (),
    settings: LoopSettings = LoopSettings(),
    upstream_model: str | None = None,
    cancel: asyncio.Event | None = None,
    clock: Callable[[], float] = time.time,
) -> AsyncIterator[ev.LoopEvent]:
    """Run one response's agent loop.

    Args:
        prepared: from :func:`prepare`.
        model: the model client.
        executors: server-side tool executors, in priority order.
        settings: server-wide loop behaviour.
        upstream_model: the model name sent upstream (default: the request's).
        cancel: set it to stop the loop at the next chunk or tool boundary;
            the response then ends ``cancelled``.
        clock: wall clock for step traces.

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
    )
    return run.run()
