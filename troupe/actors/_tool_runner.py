"""The body of a tool task, in a module that imports almost nothing.

A Ray worker imports the module a task function lives in before running it;
keeping this one light means a fresh tool worker starts in a fraction of the
time it would take to import the whole runtime.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
from collections.abc import Callable
from functools import cache
from typing import Any

__all__ = ["load_tool", "run_tool"]


@cache
def load_tool(target: str) -> Callable[..., Any]:
    """Import ``package.module:function``.

    Raises:
        ValueError: the target is malformed or names nothing callable.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"tool target '{target}' must look like 'package.module:function'")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"tool target '{target}' is not callable")
    return obj


def run_tool(target: str, arguments: dict[str, Any]) -> str:
    """Call the tool with its JSON arguments; its result as text (JSON unless a string)."""
    result = load_tool(target)(**arguments)
    if inspect.isawaitable(result):
        result = asyncio.run(_wait(result))
    return result if isinstance(result, str) else json.dumps(result, default=str)


async def _wait(awaitable: Any) -> Any:
    return await awaitable
