"""Registered Python tools: loading ``module:function``, their schemas, and running them.

:class:`RayToolExecutor` runs each call on Ray, so the calls of one turn run in
parallel: in the node's long-lived :class:`~._tool_runner.ToolRunner` actor (the
default), or as a Ray task of its own when the tool reserves CPUs. The runner is
warm by construction; a task may wait for Ray to start a worker process, which
Ray ends again after about a second idle. :func:`local_executor` runs the same
tools in-process (the Ray-free runtime). All present the tools to the model as
function tools, with a JSON schema either configured or derived from the
function's type hints.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import pydantic

from troupe.agentloop.model import ToolCall
from troupe.agentloop.tools import LocalFunctionExecutor, parse_arguments
from troupe.runtime._tool_runner import ToolRunner, load_tool, run_tool
from troupe.runtime.ray.actors import start_actor
from troupe.runtime.ray.calls import ray_result
from troupe.runtime.settings import ToolSpec

__all__ = [
    "load_tool",
    "tool_schema",
    "tool_definition",
    "RayToolExecutor",
    "local_executor",
    "tool_runner",
    "TOOL_RUNNER_PREFIX",
]

TOOL_RUNNER_PREFIX = "troupe-tools-"
"""Named actors ``troupe-tools-<node id>``: one tool runner per node, in the runtime's namespace."""


def tool_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """A JSON schema for ``fn``'s keyword arguments, from its type hints (untyped → any)."""
    fields: dict[str, Any] = {}
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = Any if param.annotation is param.empty else param.annotation
        default = ... if param.default is param.empty else param.default
        fields[name] = (annotation, default)
    schema = pydantic.create_model(f"{fn.__name__}_args", **fields).model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema


def tool_definition(spec: ToolSpec) -> dict[str, Any]:
    """The Responses ``function`` tool the model is shown for ``spec``."""
    fn = load_tool(spec.target)
    return {
        "type": "function",
        "name": spec.name,
        "description": spec.description or inspect.getdoc(fn) or "",
        "parameters": spec.parameters or tool_schema(fn),
        "strict": False,
    }


class RayToolExecutor:
    """Runs registered tools on Ray: in a tool runner actor, or one Ray task per call.

    Args:
        specs: the registered tools.
        num_cpus: CPUs each task reserves, for tools whose spec does not say.
        timeout_s: a call running longer fails (and is cancelled).
        runner: a function returning the tool runner actor to use (called again after the
            runner died). Tools whose spec sets no ``num_cpus`` run there. None: every call
            is a Ray task.
    """

    def __init__(
        self,
        specs: Sequence[ToolSpec],
        *,
        num_cpus: float = 0.25,
        timeout_s: float = 60.0,
        runner: Callable[[], Any] | None = None,
    ) -> None:
        import ray

        self._specs = {s.name: s for s in specs}
        self._definitions = [tool_definition(s) for s in specs]
        self._task = ray.remote(run_tool)
        self._num_cpus = num_cpus
        self._timeout_s = timeout_s
        self._runner_factory = runner
        self._runner: Any = None

    def definitions(self) -> list[dict[str, Any]]:
        return self._definitions

    def is_idempotent(self, call: ToolCall) -> bool:
        return self._specs[call.name].idempotent

    def can_execute(self, call: ToolCall) -> bool:
        return call.name in self._specs

    async def execute(self, call: ToolCall) -> str:
        import ray

        spec = self._specs[call.name]
        arguments = parse_arguments(call.arguments)
        factory = self._runner_factory if spec.num_cpus is None else None
        in_runner = factory is not None
        if factory is not None:
            if self._runner is None:
                self._runner = factory()
            ref = self._runner.run.options(name=f"tool:{call.name}").remote(spec.target, arguments)
        else:
            num_cpus = self._num_cpus if spec.num_cpus is None else spec.num_cpus
            options = {"num_cpus": num_cpus, "max_retries": 0, "name": f"tool:{call.name}"}
            ref = self._task.options(**options).remote(spec.target, arguments)
        scope = asyncio.timeout(self._timeout_s)
        try:
            async with scope:
                # The tool's own error arrives as itself: the model sees it, not Ray's wrapper.
                return await ray_result(ref, own=BaseException)
        except TimeoutError:
            if not scope.expired():
                raise  # the tool's own TimeoutError: its message, not ours
            # A task's process is killed; in the runner, an async tool is cancelled at its
            # next await (a sync one finishes on its thread, and its result is dropped).
            ray.cancel(ref, force=not in_runner)  # Ray cannot force-cancel an actor's task
            raise TimeoutError(f"tool '{call.name}' timed out after {self._timeout_s:g} s") from None
        except ray.exceptions.RayActorError:
            self._runner = None  # the next call looks the runner up again (or starts a new one)
            raise RuntimeError(f"tool '{call.name}': the tool runner process died during the call") from None


def tool_runner(namespace: str, node_id: str) -> Any:
    """The tool runner actor of ``node_id`` in ``namespace``, started if there is none yet.

    The runtime starts one per node before it serves (so no request pays for it); a host
    on a node that joined later starts its node's own on first use.
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return start_actor(
        ToolRunner,
        name=f"{TOOL_RUNNER_PREFIX}{node_id}",
        namespace=namespace,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    )


def local_executor(specs: Sequence[ToolSpec]) -> LocalFunctionExecutor:
    """The same tools, run in-process (no Ray)."""
    return LocalFunctionExecutor(
        {s.name: load_tool(s.target) for s in specs},
        schemas={s.name: tool_definition(s)["parameters"] for s in specs},
        descriptions={s.name: tool_definition(s)["description"] for s in specs},
        idempotent=frozenset(s.name for s in specs if s.idempotent),
    )
