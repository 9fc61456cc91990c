"""Registered tools: loading module:function, schemas from type hints, in-process execution."""

from __future__ import annotations

import asyncio
import threading

import pytest

from troupe.agentloop.model import ToolCall
from troupe.runtime._tool_runner import ToolRunner, load_tool, run_tool
from troupe.runtime.ray.tool_tasks import local_executor, tool_definition, tool_schema
from troupe.runtime.settings import DEFAULT_TOOLS, ToolSpec


def typed(city: str, days: int = 3, metric: bool = True) -> str:
    """A typed tool."""
    return city


def test_schema_is_derived_from_type_hints():
    schema = tool_schema(typed)
    assert schema["properties"] == {
        "city": {"type": "string"},
        "days": {"type": "integer", "default": 3},
        "metric": {"type": "boolean", "default": True},
    }
    assert schema["required"] == ["city"]


def test_configured_schema_and_description_win():
    spec = ToolSpec(name="t", target="tests.unit.test_tool_tasks:typed", description="Mine.", parameters={"type": "object"})
    assert tool_definition(spec) == {"type": "function", "name": "t", "description": "Mine.", "parameters": {"type": "object"}, "strict": False}
    derived = tool_definition(ToolSpec(name="t", target="tests.unit.test_tool_tasks:typed"))
    assert derived["description"] == "A typed tool." and derived["parameters"]["required"] == ["city"]


@pytest.mark.parametrize("target", ["no_colon", "tests.unit.test_tool_tasks:", ":typed"])
def test_malformed_targets_are_refused(target):
    with pytest.raises(ValueError, match="package.module:function"):
        load_tool(target)


def test_run_tool_returns_text_or_json():
    assert run_tool("troupe.runtime.example_tools:calculator", {"expression": "2 ** 10"}) == "1024"
    assert run_tool("troupe.runtime.example_tools:sleep", {"ms": 1}) == "slept 1 ms"


async def test_the_example_tools_run_in_process():
    executor = local_executor(DEFAULT_TOOLS)
    assert {d["name"] for d in executor.definitions()} == {"calculator", "sleep", "now"}
    assert await executor.execute(ToolCall(call_id="c", name="calculator", arguments='{"expression": "(1 + 2) * 14"}')) == "42"
    with pytest.raises(ValueError, match="unsupported expression"):
        await executor.execute(ToolCall(call_id="c", name="calculator", arguments='{"expression": "__import__(\\"os\\")"}'))


def blocking_until(event_name: str, count: int) -> str:
    """A sync tool that returns only once ``count`` calls are inside it at the same time."""
    barrier = _BARRIERS.setdefault(event_name, threading.Barrier(count, timeout=10))
    barrier.wait()
    return "together"


_BARRIERS: dict = {}


async def test_the_tool_runner_runs_sync_tools_side_by_side_and_async_tools_on_its_loop():
    runner = ToolRunner(max_threads=4)
    # Four sync calls that can only finish once all four are running at once: on threads.
    target = "tests.unit.test_tool_tasks:blocking_until"
    results = await asyncio.gather(*(runner.run(target, {"event_name": "four", "count": 4}) for _ in range(4)))
    assert results == ["together"] * 4
    assert await runner.run("troupe.runtime.example_tools:sleep", {"ms": 1}) == "slept 1 ms"
    assert await runner.run("troupe.runtime.example_tools:calculator", {"expression": "6 * 7"}) == "42"
    with pytest.raises(ValueError, match="ms must be between"):
        await runner.run("troupe.runtime.example_tools:sleep", {"ms": -1})
