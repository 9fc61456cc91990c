"""Running one registered tool: the body of a tool task, and the per-node tool runner.

A Ray worker imports the module a task function (or actor class) lives in before
running it; keeping this one light means a fresh tool worker starts in a fraction
of the time it would take to import the whole runtime.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import pkgutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any

__all__ = ["load_tool", "run_tool", "ToolRunner"]


@cache
def load_tool(target: str) -> Callable[..., Any]:
    """Import ``package.module:function``.

    Raises:
        ValueError: the target is malformed or names nothing callable.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"tool target '{target}' must look like 'package.module:function'")
    obj = pkgutil.resolve_name(target)
    if not callable(obj):
        raise ValueError(f"tool target '{target}' is not callable")
    return obj


def run_tool(target: str, arguments: dict[str, Any]) -> str:
    """Call the tool with its JSON arguments; its result as text (JSON unless a string)."""
    result = load_tool(target)(**arguments)
    if inspect.isawaitable(result):
        result = asyncio.run(_wait(result))
    return _as_text(result)


async def _wait(awaitable: Any) -> Any:
    return await awaitable


def _as_text(result: Any) -> str:
    return result if isinstance(result, str) else json.dumps(result, default=str)


class ToolRunner:
    """Runs registered tools for every conversation host on its node, in one long-lived process.

    Async tools run as coroutines on its event loop, side by side; sync tools run on its
    threads. Nothing waits for a worker process to start, however long the server was idle
    (Ray ends idle task workers after about a second). The price: sync tools share one
    interpreter, so CPU-bound ones should reserve CPUs (``ToolSpec.num_cpus``) and run as
    Ray tasks of their own instead.

    Args:
        max_threads: sync tool calls running at once; more wait for a thread.
    """

    def __init__(self, max_threads: int = 64) -> None:
        self._threads = ThreadPoolExecutor(max_threads, thread_name_prefix="tool")

    async def run(self, target: str, arguments: dict[str, Any]) -> str:
        """Call the tool; its result as text. A cancelled call stops an async tool at its next
        ``await``; a sync one runs to its end on its thread (Python cannot stop a thread)."""
        fn = load_tool(target)
        if inspect.iscoroutinefunction(fn):
            result = await fn(**arguments)
        else:
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(self._threads, functools.partial(fn, **arguments))
            if inspect.isawaitable(result):
                result = await result
        return _as_text(result)

    async def ready(self, targets: tuple[str, ...] = ()) -> bool:
        """Answers once the process is up and has imported the tools ``targets`` name (the
        runtime waits on it before serving, so the first call imports nothing)."""
        for target in targets:
            try:
                load_tool(target)
            except Exception:  # noqa: BLE001 - a tool that cannot load fails its own calls, clearly
                pass
        return True
