"""The loop's brain: ``decide(state) -> NextAction``, a pure function.

Internal to the loop and Troupe's runtime: not part of :mod:`troupe.agentloop`'s public surface.

The driver owns all I/O; after every step it folds what happened into a new,
frozen :class:`LoopState` and asks :func:`decide` what to do next. Every
stopping rule lives here, so each can be tested with plain values:

=================================================  ===========================================
situation                                          next action
=================================================  ===========================================
cancelled                                          Finish(cancelled)
an unrecoverable error                             Finish(failed, error)
approved calls in the input, not run yet           ExecuteTools (no model turn first)
no model call yet                                  CallModel (request's tool_choice)
upstream finish ``length``                         Finish(incomplete, max_output_tokens)
upstream finish ``content_filter``                 Finish(incomplete, content_filter)
the turn after a loop guard tripped                Finish(incomplete, max_messages, loop_guard)
no tool calls                                      Finish(completed)
``tool_choice: "none"`` and the model called       Finish(completed), calls returned as-is
the final no-tools turn still called tools         Finish(incomplete, max_messages)
calls to run or to answer with errors, not done    ExecuteTools
calls that need approval                           InterruptForApproval (response completes)
a client-executed function call in the turn        Finish(completed | requires_action)
output-token budget spent                          Finish(incomplete, max_output_tokens)
steered (WebSocket steering)                       Finish(incomplete, steered)
``max_infer_iters`` model calls made               Finish(incomplete, max_messages)
a loop guard trips (module :mod:`.loop_guards`)    CallModel (no tools, told why: its last turn)
otherwise (tool results to show the model)         CallModel (tool_choice reset to auto)
=================================================  ===========================================

``incomplete_details.reason`` is a closed enum in the SDK (``max_output_tokens``,
``max_messages``, ``content_filter``, ``steered``) and strict clients reject
other values, so the loop's own limits report ``max_messages``: the loop ran out
of turns before the model gave its answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .events import FinishStatus
from .loop_guards import LoopGuards, Round, Tripped, round_of, tripped
from .model import TokenUsage, ToolCall, TurnEnd
from .tools import RejectedCall, TurnPlan

__all__ = [
    "LoopState",
    "CallModel",
    "ExecuteTools",
    "InterruptForApproval",
    "Finish",
    "NextAction",
    "decide",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class CallModel:
    """Run one model turn."""

    use_request_tool_choice: bool
    """True on the first call; later calls use ``auto`` so a forced choice cannot loop forever
    (the Agents SDK's ``reset_tool_choice``)."""
    tools_enabled: bool = True
    """False for the last turn after ``max_tool_calls`` ran out: tools are shown but not callable."""
    stop: Tripped | None = None
    """A loop guard tripped: this is the last turn, without tools, and the model is told why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecuteTools:
    """Run the server-side calls concurrently and answer the rejected ones."""

    calls: tuple[ToolCall, ...]
    rejected: tuple[RejectedCall, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class InterruptForApproval:
    """Stop and ask the client to approve these calls; the response completes."""

    pending: tuple[ToolCall, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Finish:
    status: FinishStatus
    incomplete_reason: str | None = None
    error: dict[str, Any] | None = None
    loop_guard: str | None = None
    """The loop guard that stopped the loop (``incomplete_details.loop_guard``)."""


NextAction = CallModel | ExecuteTools | InterruptForApproval | Finish


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopState:
    """Everything :func:`decide` needs; replaced, never mutated."""

    max_infer_iters: int = 10
    client_tool_status: Literal["completed", "requires_action"] = "completed"
    model_calls: int = 0
    """Model calls made so far in this response."""
    tool_calls_used: int = 0
    """Server-side tool calls run so far (counts against ``max_tool_calls``)."""
    last_turn: TurnEnd | None = None
    plan: TurnPlan | None = None
    """The last turn's tool calls, sorted (see :func:`~troupe.agentloop.tools.plan_turn`)."""
    tools_ran: bool = False
    """The last turn's tool work is done."""
    last_turn_had_tools: bool = True
    """Whether the last model call could call tools."""
    tools_exhausted: bool = False
    """``max_tool_calls`` ran out: the next turn gets no callable tools."""
    output_tokens_left: int | None = None
    """What remains of ``max_output_tokens``; ``None`` means no limit."""
    usage: TokenUsage = field(default_factory=TokenUsage)
    cancelled: bool = False
    error: dict[str, Any] | None = None
    approved_calls: tuple[ToolCall, ...] = ()
    """MCP calls the client approved in this request's input: run before the first model turn
    (not to be confused with resuming a durable run, module :mod:`.checkpoint`)."""
    approved_ran: bool = False
    """The approved calls' tool step is done."""
    guards: LoopGuards | None = None
    """The loop guards on (module :mod:`.loop_guards`); None: none."""
    rounds: tuple[Round, ...] = ()
    """The tool calls of each model turn that made some, for the guards (kept only with them)."""
    stopped_by: Tripped | None = None
    """The loop guard that tripped: the turn made since is the last."""
    steered: bool = False
    """The client steered the response: it ends before its next model call (its tool calls
    answered first), ``incomplete``, reason ``steered``."""

    def after_model(self, turn: TurnEnd, plan: TurnPlan, *, had_tools: bool) -> LoopState:
        """Fold in a finished model turn and its plan."""
        left = self.output_tokens_left
        if left is not None:
            left -= turn.usage.output_tokens
        made = _made(turn, plan) if self.guards else None
        return replace(
            self,
            model_calls=self.model_calls + 1,
            last_turn=turn,
            plan=plan,
            tools_ran=False,
            last_turn_had_tools=had_tools,
            # Folded in now, not after the tools: a turn whose calls were all ignored runs no tools.
            tools_exhausted=self.tools_exhausted or plan.budget_exhausted,
            output_tokens_left=left,
            usage=self.usage + turn.usage,
            rounds=self.rounds + (round_of(made),) if made else self.rounds,
        )

    def after_compaction(self, usage: TokenUsage) -> LoopState:
        """Fold in the model call that wrote a compaction's summary: its usage counts in the
        response's, but it is no turn (``max_infer_iters``) and spends no ``max_output_tokens``."""
        return replace(self, usage=self.usage + usage)

    def after_tools(self) -> LoopState:
        """Fold in the finished tool work of the last turn (or of the approved calls)."""
        if self.last_turn is None:
            return replace(self, approved_ran=True, tool_calls_used=self.tool_calls_used + len(self.approved_calls))
        assert self.plan is not None
        return replace(
            self,
            tools_ran=True,
            tool_calls_used=self.tool_calls_used + len(self.plan.server),
            tools_exhausted=self.tools_exhausted or self.plan.budget_exhausted,
        )


def decide(state: LoopState) -> NextAction:
    """The next action for ``state``. Pure; see the module docstring for the rules."""
    if state.cancelled:
        return Finish(status="cancelled")
    if state.error is not None:
        return Finish(status="failed", error=state.error)
    if state.approved_calls and not state.approved_ran:
        return ExecuteTools(calls=state.approved_calls)
    turn, plan = state.last_turn, state.plan
    if turn is None or plan is None:
        return CallModel(use_request_tool_choice=True)
    if turn.finish_reason == "length":
        return Finish(status="incomplete", incomplete_reason="max_output_tokens")
    if turn.finish_reason == "content_filter":
        return Finish(status="incomplete", incomplete_reason="content_filter")
    if state.stopped_by is not None:  # the last turn, made after a loop guard tripped
        return Finish(status="incomplete", incomplete_reason="max_messages", loop_guard=state.stopped_by.guard)
    if not turn.tool_calls or plan.returned_as_is:
        return Finish(status="completed")
    if not state.last_turn_had_tools:
        return Finish(status="incomplete", incomplete_reason="max_messages")
    if plan.has_tool_work and not state.tools_ran:
        return ExecuteTools(calls=plan.server, rejected=plan.rejected)
    if plan.approval:
        return InterruptForApproval(pending=plan.approval)
    if plan.client:
        return Finish(status=state.client_tool_status)
    if state.output_tokens_left is not None and state.output_tokens_left <= 0:
        return Finish(status="incomplete", incomplete_reason="max_output_tokens")
    if state.steered:
        return Finish(status="incomplete", incomplete_reason="steered")
    if state.model_calls >= state.max_infer_iters:
        return Finish(status="incomplete", incomplete_reason="max_messages")
    if state.guards and (trip := tripped(state.rounds, state.guards)) is not None:
        return CallModel(use_request_tool_choice=False, tools_enabled=False, stop=trip)
    return CallModel(use_request_tool_choice=False, tools_enabled=not state.tools_exhausted)


def _made(turn: TurnEnd, plan: TurnPlan) -> list[ToolCall]:
    """The calls a turn made that count (those over ``max_tool_calls`` were never made)."""
    ignored = {c.call_id for c in plan.ignored}
    return [c for c in turn.tool_calls if c.call_id not in ignored]
