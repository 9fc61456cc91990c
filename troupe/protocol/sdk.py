"""The ``openai`` SDK's request types as pydantic adapters: what a request is validated against.

Imported on first validation, not with :mod:`troupe.protocol`: importing ``openai`` takes most
of a second (it builds every type of the SDK), and the processes that only run turns (Ray's
conversation hosts, the MCP connection actors, the storage actor) validate nothing, so they
never pay it (measured: importing a host actor's module went from 1.66 to 1.12 s, best of five;
tests/unit/test_lazy_exports.py checks that they import no ``openai``). The ingress imports it
when it starts (``troupe.serve.openapi``).

Only what the SDK lacks is written here: two content parts with a field the SDK requires made
optional, and the prompt reference with an integer version accepted.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal, Required, Union, get_args, get_origin, get_type_hints

from openai.types.responses import (
    ResponseInputFileParam,
    ResponseInputTextParam,
    ResponseOutputRefusalParam,
)
from openai.types.responses import response_create_params as create_params
from openai.types.responses.response_conversation_param_param import ResponseConversationParamParam
from openai.types.responses.response_error import ResponseError
from openai.types.responses.response_includable import ResponseIncludable
from openai.types.responses.response_input_image_param import ImageDetail
from openai.types.responses.response_input_item_param import ResponseInputItemParam
from openai.types.responses.response_output_text_param import Annotation, Logprob
from openai.types.responses.response_text_config_param import ResponseTextConfigParam
from openai.types.responses.service_tier import ServiceTier
from openai.types.responses.tool_param import ToolParam
from openai.types.shared_params.reasoning import Reasoning
from pydantic import ConfigDict, Field, TypeAdapter
from typing_extensions import TypedDict

__all__ = [
    "ERROR_CODES",
    "FUNCTION_TOOL",
    "INCLUDE",
    "INPUT_ITEM_TYPES",
    "ITEM_ADAPTERS",
    "MCP_TOOL",
    "NESTED_ADAPTERS",
    "PART_ADAPTERS",
    "PROMPT_REFERENCE",
    "SERVICE_TIER",
    "TOOL_CHOICES",
    "TOOL_TYPES",
]


def _unwrap(tp: Any) -> Any:
    # Required[X] / NotRequired[X] / Optional[X] → X
    while get_origin(tp) in (Required, typing.NotRequired, Union):
        args = [a for a in get_args(tp) if a is not type(None)]
        tp = args[0]
    return tp


def _by_type(union: Any) -> dict[str, Any]:
    """Map each member of an SDK TypedDict union by the literal(s) of its ``type``."""
    out: dict[str, Any] = {}
    for member in get_args(union):
        hints = get_type_hints(member, include_extras=True) if hasattr(member, "__annotations__") else {}
        literal = _unwrap(hints.get("type"))
        for value in get_args(literal) if get_origin(literal) is Literal else ():
            out.setdefault(value, member)
    return out


class _MessageItem(TypedDict, total=False):
    # Lenient union of the SDK's EasyInputMessageParam / Message /
    # ResponseOutputMessageParam: parts are validated one by one (items.py).
    type: Literal["message"]
    role: Required[Literal["user", "assistant", "system", "developer"]]
    content: Required[str | list[dict[str, Any]]]
    id: str | None
    status: Literal["in_progress", "completed", "incomplete"] | None
    phase: Literal["commentary", "final_answer"] | None


class LoopGuardsParam(TypedDict, total=False):
    """Troupe's ``loop_guards`` extension (``troupe.agentloop.loop_guards``): each guard's count."""

    __pydantic_config__ = ConfigDict(extra="forbid", strict=True)  # type: ignore[misc]
    repeat: Annotated[int, Field(ge=2, le=1000)]
    alternate: Annotated[int, Field(ge=2, le=1000)]
    poll: Annotated[int, Field(ge=2, le=1000)]


class _OutputTextPart(TypedDict, total=False):
    # SDK ResponseOutputTextParam, with ``annotations`` optional.
    type: Required[Literal["output_text"]]
    text: Required[str]
    annotations: list[Annotation]
    logprobs: list[Logprob]


class _InputImagePart(TypedDict, total=False):
    # SDK ResponseInputImageParam, with ``detail`` optional (defaults to "auto").
    type: Required[Literal["input_image"]]
    image_url: str | None
    file_id: str | None
    detail: ImageDetail


PART_ADAPTERS: dict[str, TypeAdapter[Any]] = {
    "input_text": TypeAdapter(ResponseInputTextParam),
    "input_image": TypeAdapter(_InputImagePart),
    "input_file": TypeAdapter(ResponseInputFileParam),
    "output_text": TypeAdapter(_OutputTextPart),
    "refusal": TypeAdapter(ResponseOutputRefusalParam),
}
"""A pydantic adapter per content part ``type`` accepted in input messages."""

ITEM_ADAPTERS: dict[str, TypeAdapter[Any]] = {
    **{kind: TypeAdapter(td) for kind, td in _by_type(ResponseInputItemParam).items()},
    "message": TypeAdapter(_MessageItem),
}
"""A pydantic adapter per input item ``type`` (the SDK's TypedDicts; messages our own)."""

INPUT_ITEM_TYPES = tuple(sorted(_by_type(ResponseInputItemParam)))
"""Every input item ``type`` accepted (those of the SDK's ``ResponseInputItemParam``)."""


class _PromptReference(TypedDict, total=False):
    # The SDK's ResponsePromptParam, with an integer version accepted too (the Prompts API
    # numbers versions) and an input_image variable whose ``detail`` may be left out.
    id: Required[str]
    variables: dict[str, str | ResponseInputTextParam | _InputImagePart | ResponseInputFileParam] | None
    version: str | int | None


PROMPT_REFERENCE: TypeAdapter[Any] = TypeAdapter(_PromptReference)
"""Validates ``prompt`` on ``POST /v1/responses``."""

TOOL_TYPES: dict[str, Any] = _by_type(ToolParam)
"""The SDK's tool TypedDict of each tool ``type``."""
FUNCTION_TOOL = TypeAdapter(TOOL_TYPES["function"])
MCP_TOOL = TypeAdapter(TOOL_TYPES["mcp"])
TOOL_CHOICES: dict[str, TypeAdapter[Any]] = {
    kind: TypeAdapter(td) for kind, td in _by_type(create_params.ToolChoice).items()
}
INCLUDE = TypeAdapter(list[ResponseIncludable])
SERVICE_TIER = TypeAdapter(ServiceTier)

# Nested parameters validated against the SDK's TypedDicts. They are declared as plain dicts on
# the request model because its extra="forbid" would otherwise leak into them and reject keys
# newer clients add.
NESTED_ADAPTERS: dict[str, TypeAdapter[Any]] = {
    "conversation": TypeAdapter(ResponseConversationParamParam),
    "stream_options": TypeAdapter(create_params.StreamOptions),
    "text": TypeAdapter(ResponseTextConfigParam),
    "reasoning": TypeAdapter(Reasoning),
    "prompt": PROMPT_REFERENCE,
    "context_management": TypeAdapter(list[create_params.ContextManagement]),
    "moderation": TypeAdapter(create_params.Moderation),
    "access_programs": TypeAdapter(create_params.AccessPrograms),
    "background_options": TypeAdapter(create_params.BackgroundOptions),
    "image": TypeAdapter(create_params.Image),
    "prompt_cache_options": TypeAdapter(create_params.PromptCacheOptions),
    "loop_guards": TypeAdapter(LoopGuardsParam),
}

ERROR_CODES = frozenset(get_args(ResponseError.model_fields["code"].annotation))
"""The codes ``Response.error`` may carry (the SDK's enum)."""
