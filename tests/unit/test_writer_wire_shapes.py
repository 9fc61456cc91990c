"""Every kind of event WireWriter emits, checked against the openai SDK's model for it.

The writer builds its events as plain dicts (an SDK model per event was its main cost),
so the SDK no longer checks them at runtime; these tests do instead. Each scenario runs
through the real loop, and every event must validate as the SDK model for its ``type``,
carry no field that model lacks (at any depth), dump back to the same dict, and keep
the model's key order at the top level. One test checks the scenarios between them
produce every event type the writer can emit, so a new kind cannot go unchecked.
"""

from __future__ import annotations

import typing
from collections.abc import Awaitable, Callable
from typing import Any

import pydantic
import pytest
from openai.types.responses import ResponseStreamEvent

from tests.fakes import (
    FunctionMcpClient,
    FunctionModel,
    ScriptedModel,
    ToyCodeRunner,
    ToyShellRunner,
    WordsFileSearcher,
    text_turn,
    tool_turn,
)  # fmt: skip
from tests.loop_harness import Outcome, check_stream, history_of, run
from troupe.agentloop.driver import LoopSettings
from troupe.agentloop.events import ResponseStarted
from troupe.agentloop.model import ModelError
from troupe.agentloop.tools import LocalFunctionExecutor
from troupe.agentloop.writer import WireWriter
from troupe.protocol import parse_create_request
from troupe.sim.model import SimModel


def _event_models() -> dict[str, type[pydantic.BaseModel]]:
    """The SDK's model for each stream event ``type``."""
    union = typing.get_args(ResponseStreamEvent)[0]  # Annotated[Union[...], discriminator]
    return {typing.get_args(m.model_fields["type"].annotation)[0]: m for m in typing.get_args(union)}


EVENT_MODELS = _event_models()

# Every event type troupe/agentloop/writer.py can emit.
WRITER_EVENT_TYPES = frozenset(
    {
        "response.created",
        "response.queued",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
        "response.content_part.added",
        "response.content_part.done",
        "response.output_text.delta",
        "response.output_text.done",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.mcp_list_tools.failed",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
        "response.mcp_call.failed",
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.file_search_call.completed",
        "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call_code.delta",
        "response.code_interpreter_call_code.done",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call.completed",
        "response.shell_call_command.added",
        "response.shell_call_command.delta",
        "response.shell_call_command.done",
        "response.shell_call_output_content.delta",
        "response.shell_call_output_content.done",
        "response.output_text.annotation.added",
        "response.compaction.compacting",
        "error",
        "response.completed",
        "response.incomplete",
        "response.failed",
        "response.requires_action",
    }
)


def _extra_fields(value: Any, path: str, skip: frozenset[str] = frozenset()) -> list[str]:
    """Paths of fields the SDK models do not declare (kept as extras, since its models allow them).

    ``skip`` names fields of ``value`` itself not to look into.
    """
    if isinstance(value, pydantic.BaseModel):
        found = [f"{path}.{name}" for name in value.model_extra or {}]
        for name in type(value).model_fields:
            if name not in skip:
                found += _extra_fields(getattr(value, name), f"{path}.{name}")
        return found
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _extra_fields(v, f"{path}[{i}]")]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _extra_fields(v, f"{path}.{k}")]
    return []


def assert_sdk_shapes(events: list[dict[str, Any]]) -> None:
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    for event in events:
        if event["type"] == "response.requires_action":
            # Troupe's opt-in extension: the SDK has no model for it.
            assert list(event) == ["type", "sequence_number", "response"]
            continue
        parsed = EVENT_MODELS[event["type"]].model_validate(event)
        # The Response body is build_response's, passed through as before; it echoes Open
        # Responses fields the SDK's Response lacks (store, the penalties), so skip it here.
        assert _extra_fields(parsed, event["type"], skip=frozenset({"response"})) == []
        dumped = parsed.to_dict(mode="json")
        assert dumped == event
        assert list(dumped) == list(event), "top-level keys in the SDK model's field order"


# -- scenarios: each returns the outcomes whose events are checked -------------------------

ADD_SCHEMA = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}
GET_WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def _mcp_tool(label: str = "calc", **kw: Any) -> dict[str, Any]:
    return {
        "type": "mcp",
        "server_label": label,
        "server_url": "https://mcp.example/mcp",
        "require_approval": "never",
        **kw,
    }


def _calc_client(**servers: dict[str, Callable[..., Any]]) -> FunctionMcpClient:
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    def fail() -> str:
        """Always fails."""
        raise RuntimeError("the tool broke")

    return FunctionMcpClient({"calc": {"add": add, "fail": fail}, **servers}, down=frozenset({"gone"}))


async def text() -> list[Outcome]:
    return [await run({"model": "m", "input": "x"}, ScriptedModel(text_turn("Hi there friend")))]


async def background() -> list[Outcome]:
    """A background response opens queued: created and queued, then in_progress."""
    outcome = await run({"model": "m", "input": "x", "background": True}, ScriptedModel(text_turn("Hi")))
    opening = [(e["type"], e["response"]["status"]) for e in outcome.events[:3]]
    assert opening == [("response.created", "queued"), ("response.queued", "queued"), ("response.in_progress", "in_progress")]
    return [outcome]


async def reasoning_then_text() -> list[Outcome]:
    model = ScriptedModel(text_turn("answer", reasoning="let me think"))
    return [await run({"model": "m", "input": "x"}, model)]


async def incomplete() -> list[Outcome]:
    model = ScriptedModel(text_turn("one two", reasoning="hmm", finish_reason="length"))
    return [await run({"model": "m", "input": "x", "max_output_tokens": 16}, model)]


async def client_function_call() -> list[Outcome]:
    model = ScriptedModel(tool_turn(("get_weather", {"city": "Paris"}), text="Checking."))
    return [await run({"model": "m", "input": "x", "tools": [GET_WEATHER]}, model)]


async def requires_action() -> list[Outcome]:
    model = ScriptedModel(tool_turn(("get_weather", {"city": "Paris"})))
    settings = LoopSettings(client_tool_status="requires_action")
    return [await run({"model": "m", "input": "x", "tools": [GET_WEATHER]}, model, settings=settings)]


async def server_tool() -> list[Outcome]:
    tools = LocalFunctionExecutor({"add": lambda a, b: a + b}, schemas={"add": ADD_SCHEMA})
    model = ScriptedModel(tool_turn(("add", {"a": 1, "b": 2})), text_turn("three"))
    return [await run({"model": "m", "input": "x"}, model, executors=[tools])]


async def failed_upstream() -> list[Outcome]:
    return [await run({"model": "m", "input": "x"}, ScriptedModel(ModelError("overloaded", status=503)))]


async def failed_mid_stream() -> list[Outcome]:
    def failing(request: Any) -> Any:
        yield from text_turn("partial answer")[:2]
        raise ModelError("connection reset", status=502)

    return [await run({"model": "m", "input": "x"}, FunctionModel(failing))]


async def mcp_list_and_call() -> list[Outcome]:
    body = {"model": "sim", "input": '[[call add {"a": 2, "b": 40}]]', "tools": [_mcp_tool()]}
    return [await run(body, SimModel(), mcp_client=_calc_client())]


async def mcp_failures() -> list[Outcome]:
    body = {"model": "sim", "input": "[[call fail]]", "tools": [_mcp_tool(), _mcp_tool("gone")]}
    return [await run(body, SimModel(), mcp_client=_calc_client(gone={}))]


async def mcp_approval() -> list[Outcome]:
    client, tool = _calc_client(), _mcp_tool(require_approval="always")
    body = {"model": "sim", "input": '[[call add {"a": 1, "b": 2}]]', "tools": [tool]}
    first = await run(body, SimModel(), mcp_client=client)
    request = first.response["output"][-1]
    assert request["type"] == "mcp_approval_request"
    approve = {
        "model": "sim",
        "tools": [tool],
        "input": [{"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True}],
    }
    second = await run(approve, SimModel(), mcp_client=client, history=history_of(first))
    return [first, second]


async def file_search() -> list[Outcome]:
    searcher = WordsFileSearcher({"vs_1": {"file-1": ("notes.md", "The launch code is blue.")}})
    body = {
        "model": "sim",
        "input": "What is the launch code?",
        "tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}],
        "include": ["file_search_call.results"],
    }
    return [await run(body, SimModel(), file_searcher=searcher)]


async def code_interpreter() -> list[Outcome]:
    """Included outputs (logs, an image), a cited file, a run a limit stopped, a call that failed."""
    tool = {"type": "code_interpreter", "container": "auto"}
    code = "x = 6 * 7\nprint(x)\nopen('/mnt/data/x.txt', 'w').write(x)\nplt.show()"
    body = {"model": "sim", "input": f"[[python]]\n{code}", "tools": [tool], "include": ["code_interpreter_call.outputs"]}
    stopped = {"model": "sim", "input": "[[python]]\nwhile True: pass\n[[/python]] [[python]]\ncrash()", "tools": [tool]}
    return [await run(body, SimModel(), code_runner=ToyCodeRunner()),
            await run(stopped, SimModel(), code_runner=ToyCodeRunner())]  # fmt: skip


async def shell() -> list[Outcome]:
    """A container call whose commands ran (an exit code, a failure, a timeout), one that could
    not run, and a local call the client is to run."""
    auto = {"type": "shell", "environment": {"type": "container_auto"}}
    ran = {"model": "sim", "input": "[[shell]]\necho hi\ncat nope\nsleep", "tools": [auto]}
    crashed = {"model": "sim", "input": "[[shell]]crash", "tools": [auto]}
    local = {"model": "sim", "input": "[[shell]]ls", "tools": [{"type": "shell", "environment": {"type": "local"}}]}
    return [await run(ran, SimModel(), shell_runner=ToyShellRunner()),
            await run(crashed, SimModel(), shell_runner=ToyShellRunner()),
            await run(local, SimModel())]  # fmt: skip


async def compaction() -> list[Outcome]:
    history = [{"type": "message", "role": "user", "content": "x" * 400},
               {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "y" * 400}]}]
    body = {"model": "sim", "input": "[[say ok]]", "context_management": [{"type": "compaction", "compact_threshold": 50}]}
    failed = {**body, "model": "m"}
    return [await run(body, SimModel(), history=history),
            await run(failed, ScriptedModel(ModelError("overloaded", status=503)), history=history)]  # fmt: skip


SCENARIOS: list[Callable[[], Awaitable[list[Outcome]]]] = [
    text,
    background,
    reasoning_then_text,
    incomplete,
    client_function_call,
    requires_action,
    server_tool,
    failed_upstream,
    failed_mid_stream,
    mcp_list_and_call,
    mcp_failures,
    mcp_approval,
    file_search,
    code_interpreter,
    shell,
    compaction,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
async def test_every_event_is_the_sdk_model_for_its_type(scenario):
    for outcome in await scenario():
        assert_sdk_shapes(outcome.events)
        check_stream(outcome)


async def test_the_scenarios_cover_every_event_the_writer_emits():
    seen = {e["type"] for scenario in SCENARIOS for outcome in await scenario() for e in outcome.events}
    assert seen == WRITER_EVENT_TYPES


def test_a_background_writer_opens_queued_once_and_a_restored_one_goes_on():
    request = parse_create_request({"model": "m", "input": "x", "background": True})
    writer = WireWriter(request, response_id="resp_1", created_at=1)
    opening = writer.queue()  # as the host accepts it
    assert [(e["type"], e["sequence_number"], e["response"]["status"]) for e in opening] == [
        ("response.created", 0, "queued"), ("response.queued", 1, "queued")]  # fmt: skip
    assert writer.response["status"] == "queued" and not writer.finished
    started = writer.write(ResponseStarted())  # its turn came
    assert [(e["type"], e["sequence_number"], e["response"]["status"]) for e in started] == [
        ("response.in_progress", 2, "in_progress")]  # fmt: skip
    with pytest.raises(RuntimeError):
        writer.queue()
    restored = WireWriter(request, response_id="resp_1", created_at=1)
    restored.restore(opening)  # a run lost while queued, taken up from what was logged
    assert restored.response["status"] == "queued"
    assert restored.write(ResponseStarted()) == started
