"""Tool executors and tool policy: who runs a call, and whether it may run.

A model turn's tool calls are parsed into a :class:`TurnPlan` before anything
runs (the Agents SDK's ``ProcessedResponse`` idea): each call is either run by a
server-side executor, answered at once with an error (unknown tool, outside
``allowed_tools``), ignored (over the ``max_tool_calls`` budget), returned to the client
(a declared function tool that no executor can run), or held for approval.

Executors are the seam later layers plug into: Ray tasks for registered Python
tools, MCP connection actors. :class:`LocalFunctionExecutor` runs plain Python
callables in-process, for tests and for Ray-free use.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .model import ToolCall

__all__ = [
    "ToolExecutor",
    "LocalFunctionExecutor",
    "ToolPolicy",
    "TurnPlan",
    "RejectedCall",
    "plan_turn",
    "find_executor",
    "parse_arguments",
]


@runtime_checkable
class ToolExecutor(Protocol):
    """Runs tool calls on the server side.

    The loop asks every registered executor, in order, ``can_execute(call)``;
    the first that says yes runs it. A call no executor accepts belongs to the
    client (if the request declared the function) or is unknown.

    An executor may also define ``needs_approval(call) -> bool`` and
    ``approval_item(call) -> dict`` (the output item asking the client to
    approve, e.g. an ``mcp_approval_request``); calls it holds end the response
    with that item instead of running. And ``is_idempotent(call) -> bool``: a call
    a host died during is run again only if it says yes (module ``checkpoint``).
    """

    def definitions(self) -> list[dict[str, Any]]:
        """Function tools this executor offers the model (Responses ``function`` tool shape)."""
        ...

    def can_execute(self, call: ToolCall) -> bool:
        """Whether this executor runs ``call``."""
        ...

    async def execute(self, call: ToolCall) -> str:
        """Run ``call`` and return its output text.

        Raises:
            Exception: any failure; the loop turns it into an error output for
                the model, and the loop goes on.
        """
        ...


ToolFunction = Callable[..., Any] | Callable[..., Awaitable[Any]]


@dataclass(slots=True)
class LocalFunctionExecutor:
    """Runs Python callables in-process (sync ones in a worker thread).

    Args:
        functions: tool name → callable taking the JSON arguments as keywords.
        schemas: tool name → JSON schema of its parameters (default: any object).
        descriptions: tool name → description shown to the model.

    Example::

        tools = LocalFunctionExecutor({"add": lambda a, b: a + b})
    """

    functions: Mapping[str, ToolFunction]
    schemas: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    descriptions: Mapping[str, str] = field(default_factory=dict)
    idempotent: frozenset[str] = frozenset()
    """Tools safe to run again after a host died during a call (module ``checkpoint``)."""

    def definitions(self) -> list[dict[str, Any]]:
        return [
            {
                "type": "function",
                "name": name,
                "description": self.descriptions.get(name, ""),
                "parameters": self.schemas.get(name, {"type": "object", "properties": {}}),
                "strict": False,
            }
            for name in self.functions
        ]

    def can_execute(self, call: ToolCall) -> bool:
        return call.name in self.functions

    def is_idempotent(self, call: ToolCall) -> bool:
        return call.name in self.idempotent

    async def execute(self, call: ToolCall) -> str:
        fn = self.functions[call.name]
        kwargs = parse_arguments(call.arguments)
        if inspect.iscoroutinefunction(fn):
            result = await fn(**kwargs)
        else:
            result = await asyncio.to_thread(fn, **kwargs)
        return result if isinstance(result, str) else json.dumps(result)


def parse_arguments(arguments: str) -> dict[str, Any]:
    """A call's JSON arguments as a dict; raises ValueError with a readable message."""
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        raise ValueError(f"arguments are not valid JSON: {exc.msg}") from exc
    if not isinstance(value, dict):
        raise ValueError("arguments must be a JSON object")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolPolicy:
    """What the request allows, fixed for the whole response."""

    declared: frozenset[str] = frozenset()
    """Function tools the request declared (the client's tools unless an executor runs them)."""
    allowed: frozenset[str] | None = None
    """Names from ``tool_choice: allowed_tools``; ``None`` means every known tool."""
    execute: bool = True
    """False for ``tool_choice: "none"``: calls are returned as they are, never run."""
    max_tool_calls: int | None = None
    """Budget of server-side calls for the whole response."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RejectedCall:
    """A call answered with an error output instead of being run."""

    call: ToolCall
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnPlan:
    """One model turn's tool calls, sorted by what happens to each."""

    server: tuple[ToolCall, ...] = ()
    """Run now by an executor."""
    rejected: tuple[RejectedCall, ...] = ()
    """Answered at once with an error, not run."""
    client: tuple[ToolCall, ...] = ()
    """Returned to the client in the response output."""
    returned_as_is: tuple[ToolCall, ...] = ()
    """``tool_choice: "none"``: neither run nor answered."""
    approval: tuple[ToolCall, ...] = ()
    """Held until the client approves them (their executor's ``needs_approval`` said so)."""
    ignored: tuple[ToolCall, ...] = ()
    """Over the ``max_tool_calls`` budget: dropped, as OpenAI ignores further calls (no item,
    no output, nothing upstream)."""
    budget_exhausted: bool = False
    """Some calls were ignored because ``max_tool_calls`` ran out."""

    @property
    def has_tool_work(self) -> bool:
        """Whether there are results to produce before the next model call."""
        return bool(self.server or self.rejected)


def find_executor(call: ToolCall, executors: Sequence[ToolExecutor]) -> ToolExecutor | None:
    return next((ex for ex in executors if ex.can_execute(call)), None)


def plan_turn(
    calls: Sequence[ToolCall],
    *,
    policy: ToolPolicy,
    executors: Sequence[ToolExecutor],
    calls_used: int,
) -> TurnPlan:
    """Sort one turn's calls. Pure: no call runs here.

    Args:
        calls: the turn's tool calls, in the model's order.
        policy: the request's tool policy.
        executors: the server-side executors, in priority order.
        calls_used: server-side calls already run in this response.

    Returns:
        The plan; calls keep the model's order within each group.
    """
    if not policy.execute:
        return TurnPlan(returned_as_is=tuple(calls))
    server: list[ToolCall] = []
    rejected: list[RejectedCall] = []
    client: list[ToolCall] = []
    approval: list[ToolCall] = []
    ignored: list[ToolCall] = []
    exhausted = False
    for call in calls:
        executor = find_executor(call, executors)
        restricted = executor is None or getattr(executor, "restricted_by_allowed_tools", True)
        if policy.allowed is not None and call.name not in policy.allowed and restricted:
            rejected.append(RejectedCall(call=call, reason=f"tool '{call.name}' is not in allowed_tools"))
            continue
        if executor is None:
            if call.name in policy.declared:
                client.append(call)
            else:
                rejected.append(RejectedCall(call=call, reason=f"unknown tool '{call.name}'"))
            continue
        if policy.max_tool_calls is not None and calls_used + len(server) >= policy.max_tool_calls:
            exhausted = True
            ignored.append(call)
            continue
        needs_approval = getattr(executor, "needs_approval", None)
        if needs_approval is not None and needs_approval(call):
            approval.append(call)
            continue
        server.append(call)
    return TurnPlan(
        server=tuple(server),
        rejected=tuple(rejected),
        client=tuple(client),
        approval=tuple(approval),
        ignored=tuple(ignored),
        budget_exhausted=exhausted,
    )
