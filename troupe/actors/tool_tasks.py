"""Registered Python tools: loading ``module:function``, their schemas, and running them.

:class:`RayToolExecutor` runs each call as a Ray task, so the calls of one turn
run in parallel across the cluster's workers; :func:`local_executor` runs the
same tools in-process (the Ray-free runtime). Both present the tools to the
model as function tools, with a JSON schema either configured or derived from
the function's type hints.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import pydantic

from troupe.agentloop.model import ToolCall
from troupe.agentloop.tools import LocalFunctionExecutor, parse_arguments

from ._tool_runner import load_tool, run_tool
from .settings import ToolSpec

__all__ = ["load_tool", "tool_schema", "tool_definition", "RayToolExecutor", "local_executor"]


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
    """Runs registered tools as Ray tasks (one task per call).

    Args:
        specs: the registered tools.
        num_cpus: CPUs each task reserves, for tools whose spec does not say.
        timeout_s: a call running longer fails (and the task is cancelled).
    """

    def __init__(self, specs: Sequence[ToolSpec], *, num_cpus: float = 0.25, timeout_s: float = 60.0) -> None:
        import ray

        self._specs = {s.name: s for s in specs}
        self._definitions = [tool_definition(s) for s in specs]
        self._task = ray.remote(run_tool)
        self._num_cpus = num_cpus
        self._timeout_s = timeout_s

    def definitions(self) -> list[dict[str, Any]]:
        return self._definitions

    def can_execute(self, call: ToolCall) -> bool:
        return call.name in self._specs

    async def execute(self, call: ToolCall) -> str:
        import ray

        spec = self._specs[call.name]
        num_cpus = self._num_cpus if spec.num_cpus is None else spec.num_cpus
        options = {"num_cpus": num_cpus, "max_retries": 0, "name": f"tool:{call.name}"}
        ref = self._task.options(**options).remote(spec.target, parse_arguments(call.arguments))
        try:
            return await asyncio.wait_for(ref, timeout=self._timeout_s)
        except TimeoutError:
            ray.cancel(ref, force=True)
            raise TimeoutError(f"tool '{call.name}' timed out after {self._timeout_s:g} s") from None
        except ray.exceptions.RayTaskError as exc:
            # Show the model the tool's own error, not Ray's wrapper and traceback.
            cause = exc.cause if isinstance(exc.cause, BaseException) else None
            if cause is not None:
                raise cause from None
            raise


def local_executor(specs: Sequence[ToolSpec]) -> LocalFunctionExecutor:
    """The same tools, run in-process (no Ray)."""
    return LocalFunctionExecutor(
        {s.name: load_tool(s.target) for s in specs},
        schemas={s.name: tool_definition(s)["parameters"] for s in specs},
        descriptions={s.name: tool_definition(s)["description"] for s in specs},
    )
