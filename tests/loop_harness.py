"""Run the agent loop in-process and check its wire output the way strict clients do."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import openresponses_types.types as ort
from openai import omit
from openai._models import construct_type
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent

from troupe.agentloop.driver import LoopSettings, PreparedTurn, prepare, run_loop
from troupe.agentloop.events import StepTraced
from troupe.agentloop.mcp import McpServer
from troupe.agentloop.model import ModelClient
from troupe.agentloop.tools import ToolExecutor
from troupe.agentloop.writer import WireWriter, collect_response
from troupe.protocol import new_id, parse_create_request


def _open_responses_event_models() -> dict[str, type]:
    """Open Responses' model for each stream event type it defines."""
    models = {}
    for name, cls in inspect.getmembers(ort, inspect.isclass):
        if name.endswith("StreamingEvent") and "type" in getattr(cls, "model_fields", {}):
            for member in cls.model_fields["type"].annotation:
                models[member.value] = cls
    return models


OPEN_RESPONSES_EVENTS = _open_responses_event_models()


@dataclass
class Outcome:
    response: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)
    traces: list[StepTraced] = field(default_factory=list)
    prepared: PreparedTurn | None = None

    @property
    def output_types(self) -> list[str]:
        return [item["type"] for item in self.response["output"]]

    def tool_traces(self) -> list[StepTraced]:
        return [t for t in self.traces if t.kind == "tool"]

    @property
    def text(self) -> str:
        return "".join(
            part["text"]
            for item in self.response["output"]
            if item["type"] == "message"
            for part in item["content"]
            if part["type"] == "output_text"
        )


async def run(
    body: dict[str, Any],
    model: ModelClient,
    *,
    executors: Sequence[ToolExecutor] = (),
    history: Sequence[dict[str, Any]] = (),
    settings: LoopSettings = LoopSettings(),
    stream: bool = True,
    mcp_client: Any = None,
    context_window: int | None = None,
    file_searcher: Any = None,
    code_runner: Any = None,
    shell_runner: Any = None,
    web_searcher: Any = None,
) -> Outcome:
    """One response through prepare → run_loop → WireWriter, streamed or collected."""
    request = parse_create_request(body)
    prepared = prepare(
        request, history, executors, mcp_client=mcp_client, mcp_servers=mcp_servers_of(body),
        file_searcher=file_searcher, code_runner=code_runner, shell_runner=shell_runner, web_searcher=web_searcher,
    )  # fmt: skip
    writer = WireWriter(request, response_id=new_id("resp"), created_at=1_700_000_000)
    events = run_loop(prepared, model=model, executors=executors, settings=settings, context_window=context_window)
    if not stream:
        return Outcome(response=await collect_response(events, writer), prepared=prepared)
    outcome = Outcome(response={}, prepared=prepared)
    async for event in events:
        if isinstance(event, StepTraced):
            outcome.traces.append(event)
        outcome.events.extend(writer.write(event))
    outcome.response = writer.response
    return outcome


def mcp_servers_of(body: dict[str, Any]) -> list[McpServer]:
    """The request's mcp tools as servers (the runtime resolves them the same way, plus config)."""
    servers = []
    for tool in body.get("tools") or []:
        if tool.get("type") != "mcp":
            continue
        allowed = tool.get("allowed_tools")
        if isinstance(allowed, dict):
            allowed = allowed.get("tool_names")
        servers.append(
            McpServer(
                label=tool["server_label"],
                url=tool.get("server_url"),
                headers=dict(tool.get("headers") or {}),
                allowed_tools=None if allowed is None else frozenset(allowed),
                require_approval=tool.get("require_approval", "always"),
            )
        )
    return servers


def history_of(outcome: Outcome) -> list[dict[str, Any]]:
    """What a store would hand the next request of the chain: input then output items."""
    assert outcome.prepared is not None
    return list(outcome.prepared.input_items) + list(outcome.response["output"])


def check_stream(outcome: Outcome) -> Response | None:
    """Check a stream the way strict clients do; return the SDK accumulator's final Response.

    - sequence numbers start at 0 and grow by one, with no gaps;
    - a reasoning or message item is done before the next item is added;
    - every event and the Response validate against Open Responses' models where it has them,
      and parse as the openai SDK's types;
    - the openai SDK's own stream accumulator replays the events without error and its
      final Response equals ours.
    """
    events = outcome.events
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    # openresponses-types 2.4 types a json_schema format's `schema` as None, so no Response
    # carrying one can validate there; those are checked against the openai SDK only.
    # Open Responses models only function tools and the items message, function_call(_output),
    # reasoning and compaction; MCP responses are checked against the openai SDK only.
    or_can_model = (
        outcome.response["text"]["format"]["type"] != "json_schema"
        and all(t["type"] == "function" for t in outcome.response["tools"])
        and all(i["type"] in _OR_ITEM_TYPES for i in outcome.response["output"])
    )
    if outcome.response["status"] == "requires_action":
        # Troupe's opt-in extension status: no client type models it.
        assert events[-1]["type"] == "response.requires_action"
        return None
    for event in events:
        if "response" in event:
            assert isinstance(event["response"]["created_at"], int), "strict clients need an integer created_at"
        model = OPEN_RESPONSES_EVENTS.get(event["type"])
        # OR nests errors; we send the openai SDK's flat error shape. OR models url citations only.
        or_models_it = not any(kind in json.dumps(event) for kind in ('"file_citation"', '"container_file_citation"'))
        if model is not None and event["type"] != "error" and or_models_it and (or_can_model or "response" not in event and "item" not in event):
            model.model_validate(event)
    if or_can_model:
        ort.ResponseResource.model_validate(outcome.response)
    Response.model_validate(outcome.response)
    added = [e["item"]["id"] for e in events if e["type"] == "response.output_item.added"]
    done = [e["item"]["id"] for e in events if e["type"] == "response.output_item.done"]
    assert sorted(added) == sorted(done), "every item added must be done"
    assert [i["id"] for i in outcome.response["output"]] == added, "output is in output_index order"
    # As OpenAI streams them: a reasoning or message item is done before the next item opens.
    open_text: str | None = None
    for e in events:
        if e["type"] == "response.output_item.added":
            assert open_text is None, f"{e['item']['type']} {e['item']['id']} added while {open_text} is open"
            if e["item"]["type"] in ("reasoning", "message"):
                open_text = e["item"]["id"]
        elif e["type"] == "response.output_item.done" and e["item"]["id"] == open_text:
            open_text = None

    state = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in events:
        if event["type"] == "response.requires_action":
            return None
        state.handle_event(construct_type(type_=ResponseStreamEvent, value=event))
    final = state._completed_response
    terminal = events[-1]["type"]
    if terminal != "response.completed":
        assert final is None
        return None
    assert final is not None
    ours = Response.model_validate(outcome.response).to_dict(mode="json")
    assert _without_parsed(final.to_dict(mode="json")) == ours

    return final


def _without_parsed(value: Any) -> Any:
    """Drop the ``parsed``/``parsed_arguments`` keys the SDK's accumulator adds."""
    if isinstance(value, dict):
        return {k: _without_parsed(v) for k, v in value.items() if k not in ("parsed", "parsed_arguments")}
    if isinstance(value, list):
        return [_without_parsed(v) for v in value]
    return value


_OR_ITEM_TYPES = frozenset({"message", "function_call", "function_call_output", "reasoning", "compaction"})

_VOLATILE = {"id", "call_id", "created_at", "completed_at", "item_id"}


def without_ids(value: Any) -> Any:
    """``value`` with generated ids and timestamps blanked, to compare two runs."""
    if isinstance(value, dict):
        return {k: ("*" if k in _VOLATILE else without_ids(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [without_ids(v) for v in value]
    return value


async def both(body: dict[str, Any], make_model: Callable[[], Any], **kw: Any) -> tuple[Outcome, Any]:
    """Run ``body`` collected and streamed, each with a fresh model from ``make_model``.

    Both runs must give the same Response (ids aside), the stream must pass
    :func:`check_stream`, and scripted models must have used every turn.
    Returns the streamed outcome and its model.
    """
    collected_model, streamed_model = make_model(), make_model()
    collected = await run(body, collected_model, stream=False, **kw)
    streamed = await run(body, streamed_model, **kw)
    assert without_ids(collected.response) == without_ids(streamed.response)
    check_stream(streamed)
    for model in (collected_model, streamed_model):
        if hasattr(model, "assert_complete"):
            model.assert_complete()
    return streamed, streamed_model


def sim_request(**body: Any) -> Any:
    """A parsed create request for the ``sim`` model, with ``body``'s parameters."""
    return parse_create_request({"model": "sim", **body})
