"""The ``POST /v1/responses`` request: every parameter of the SDK's ``ResponseCreateParams``, validated.

Validation happens in two layers. The model's own fields check the top-level
JSON types strictly (no ``"1"`` for a number, no unknown parameters). Nested
structures — input items, tools, ``tool_choice``, ``text``, ``reasoning``… — are
then validated against the ``openai`` SDK's TypedDicts, item by item, so that an
error names exactly the offending field (``input[2].call_id``, ``tools[0].name``).

Errors (all :class:`~troupe.protocol.errors.InvalidRequest`, status 400):

=============================  =====================================================
code                           when
=============================  =====================================================
``unknown_parameter``          a top-level key the API does not define
``missing_required_parameter`` ``model`` (or a required nested field) is absent
``invalid_type``               a value of the wrong JSON type
``invalid_value``              right type, unacceptable value; cross-field rules
=============================  =====================================================

Example::

    >>> req = parse_create_request({"model": "sim", "input": "hi"})
    >>> req.store, req.tool_choice, req.input_items()[0]["role"]
    (True, 'auto', 'user')
"""

from __future__ import annotations

import copy
import functools
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from .errors import (
    InvalidRequest,
    Loc,
    check_id_format,
    describe_type,
    format_param,
    invalid_request_from_errors,
    show_value,
    validate_as,
)
from .ids import CONVERSATION, RESPONSE
from .items import normalize_input, validate_input_items
from .prompts import prompt_reference
from .schema_refs import dangling_refs

__all__ = [
    "CreateResponseRequest",
    "parse_create_request",
    "check_metadata",
    "METADATA_MAX_KEYS",
    "METADATA_MAX_KEY",
    "METADATA_MAX_VALUE",
]

_FUNCTION_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}\Z")
METADATA_MAX_KEYS, METADATA_MAX_KEY, METADATA_MAX_VALUE = 16, 64, 512
"""OpenAI's metadata limits: at most 16 string pairs, keys of ≤ 64 characters, values of ≤ 512."""


UNSUPPORTED_PARAMETERS: dict[str, str] = {
    "access_programs": "it selects OpenAI's access programs",
    "image": "image context compression is not available",
    "prompt_cache_options": "prompt cache breakpoints, diagnostics and prewarming are not available",
}
"""Parameters Troupe cannot honour yet: a request that sets one (to anything but null) is
refused, naming it, rather than served without it (docs/request-parameters.md)."""

UNSUPPORTED_INCLUDES = frozenset({"message.output_text.logprobs"})
"""``include`` values asking for data Troupe does not produce yet (log probabilities)."""


def _fail(loc: Loc, message: str, code: str = "invalid_value") -> InvalidRequest:
    return InvalidRequest(message, param=format_param(loc), code=code)


def check_metadata(value: Any) -> dict[str, str] | None:
    """``value`` as a request's or a conversation's ``metadata``, checked as OpenAI does
    (:data:`METADATA_MAX_KEYS` string pairs at most, keys and values within their lengths).

    Raises:
        InvalidRequest: naming ``metadata``, or ``metadata.<key>`` for a bad value.
    """
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _fail(("metadata",), f"Invalid type for 'metadata': expected an object, got {describe_type(value)}.",
                    "invalid_type")
    if len(value) > METADATA_MAX_KEYS:
        raise _fail(("metadata",), f"Invalid 'metadata': at most {METADATA_MAX_KEYS} keys are allowed, "
                    f"got {len(value)}.")
    for key, item in value.items():
        if len(key) > METADATA_MAX_KEY:
            raise _fail(("metadata",), f"Invalid 'metadata': keys can be at most {METADATA_MAX_KEY} "
                        f"characters long, got one of {len(key)}.")
        if not isinstance(item, str):
            raise _fail(("metadata", key), f"Invalid type for 'metadata.{key}': expected a string, "
                        f"got {describe_type(item)}.", "invalid_type")
        if len(item) > METADATA_MAX_VALUE:
            raise _fail(("metadata", key), f"Invalid 'metadata.{key}': values can be at most "
                        f"{METADATA_MAX_VALUE} characters long, got {len(item)}.")
    return value


def _check_refs(schema: Any, loc: Loc) -> None:
    if isinstance(schema, dict) and (bad := dangling_refs(schema)):
        where = format_param(loc)
        raise _fail(loc, f"Invalid schema for '{where}': $ref {show_value(bad[0])} does not resolve to a definition "
                    "in the schema.")


@functools.cache
def _non_null_defaults(model: type[BaseModel]) -> frozenset[str]:
    """The optional fields of ``model`` whose default is not None (computed once per model:
    calling a default factory is not free)."""
    return frozenset(
        name
        for name, field in model.model_fields.items()
        if not field.is_required() and field.get_default(call_default_factory=True) is not None
    )


class CreateResponseRequest(BaseModel):
    """A validated create request. Build it with :func:`parse_create_request`.

    Field values are the client's JSON, untouched (nested objects stay dicts);
    defaults are the API's. Direct construction validates the same way but raises
    pydantic's ``ValidationError`` for top-level type errors.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    """The model to run (a name the server routes; ``sim`` is the built-in fake)."""
    input: str | list[dict[str, Any]] = ""
    """A user message as a string, or a list of input items."""
    instructions: str | None = None
    """A system/developer message for this response only (not inherited via ``previous_response_id``)."""
    stream: bool = False
    """Answer with an SSE stream of events instead of one JSON Response."""
    stream_options: dict[str, Any] | None = None
    """``{"include_obfuscation": bool}``: Troupe's stream events never carry ``obfuscation``
    padding, so either value is met."""
    background: bool = False
    """Run asynchronously: answer at once with a ``queued`` Response, then poll or resume the stream."""
    store: bool = True
    """Keep the response for GET, ``input_items`` and ``previous_response_id``."""
    previous_response_id: str | None = None
    """Continue the chain of this stored response (exclusive with ``conversation``)."""
    conversation: str | dict[str, Any] | None = None
    """A conversation id, or ``{"id": ...}``, whose items prefix the input and receive the result."""
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """Tool definitions: ``function``, ``mcp`` and the hosted kinds of the SDK's ``ToolParam``."""
    tool_choice: str | dict[str, Any] = "auto"
    """``none``/``auto``/``required`` or an object forcing a tool (function, mcp, allowed_tools, hosted)."""
    parallel_tool_calls: bool = True
    """Whether the model may emit several tool calls in one turn."""
    max_tool_calls: int | None = Field(default=None, ge=1)
    """Cap on hosted/MCP tool calls over the whole response."""
    max_output_tokens: int | None = Field(default=None, ge=16)
    """Cap on generated tokens (at least 16, as OpenAI); exceeding it ends the response ``incomplete``."""
    temperature: float | None = Field(default=None, ge=0, le=2)
    """Sampling temperature, echoed back (1.0 when unset)."""
    top_p: float | None = Field(default=None, ge=0, le=1)
    """Nucleus sampling mass, echoed back (1.0 when unset)."""
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    """Number of most likely tokens to report per position: log probabilities are not
    produced yet, so only 0 is accepted."""
    text: dict[str, Any] | None = None
    """Output text configuration: ``{"format": {...}, "verbosity": ...}``."""
    reasoning: dict[str, Any] | None = None
    """Reasoning configuration: ``{"effort": ..., "summary": ...}``."""
    truncation: Literal["auto", "disabled"] | None = None
    """Context overflow policy; ``disabled`` (the default) fails instead of dropping items."""
    include: list[str] | None = None
    """Extra output data to include (the Agents SDK always sends ``[]``)."""
    metadata: dict[str, Any] | None = None
    """Up to 16 string pairs (key ≤ 64 characters, value ≤ 512), echoed back."""
    prompt: dict[str, Any] | None = None
    """A stored prompt (``POST /v1/prompts``) and its variables, ``{"id", "version"?, "variables"?}``: its text
    and messages go before the input, with the request's ``instructions`` after the prompt's text. Echoed
    with the version used."""
    prompt_cache_key: str | None = None
    """Cache routing hint; echoed back."""
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    """Prompt cache retention policy; echoed back."""
    safety_identifier: str | None = None
    """A stable end-user identifier for abuse detection; echoed back."""
    service_tier: str | None = None
    """Requested processing tier; echoed back (``default`` when unset)."""
    user: str | None = None
    """Deprecated end-user identifier; echoed back."""
    context_management: list[dict[str, Any]] | None = None
    """Context management: at most one ``{"type": "compaction", "compact_threshold"?: N}`` entry, which
    compacts the thread automatically once its estimated input passes N tokens
    (:mod:`troupe.agentloop.compaction`; see :meth:`compaction`)."""
    moderation: dict[str, Any] | None = None
    """``{"model", "policy"?: {"input"?: {"mode"}, "output"?: {"mode"}}}``: ``model`` names a
    configured guardrail (docs/guardrails.md); each stage's ``mode`` is ``score`` (the default:
    the result is recorded on the Response's ``moderation``) or ``block``."""
    access_programs: dict[str, Any] | None = None
    """OpenAI's access programs: refused (:data:`UNSUPPORTED_PARAMETERS`)."""
    background_options: dict[str, Any] | None = None
    """``{"completion_window", "continuation_id"}``: a background response starts at once, so
    it completes within any window; ``2h``/``8h`` need ``background`` and no ``stream``."""
    image: dict[str, Any] | None = None
    """Image context options: refused (:data:`UNSUPPORTED_PARAMETERS`)."""
    prompt_cache_options: dict[str, Any] | None = None
    """Prompt cache options: refused (:data:`UNSUPPORTED_PARAMETERS`)."""
    max_infer_iters: int = Field(default=10, ge=1)
    """Troupe extension: the most model calls the server-side loop makes for this response."""
    loop_guards: dict[str, Any] | None = None
    """Troupe extension: ``{"repeat"?, "alternate"?, "poll"?}``, each a count of 2 or more: the
    loop guards this response runs (docs/loop-guards.md), on top of its model's; a request may
    turn a guard on or tighten it, never loosen it."""
    guardrails: list[str] | None = None
    """Troupe extension (Llama Stack's name): ``[[guardrails]]`` this response runs besides
    those its tenant and model must have; an unknown name is a 400 naming it (docs/guardrails.md)."""

    _items: list[dict[str, Any]] | None = PrivateAttr(default=None)
    _prelude: list[dict[str, Any]] | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        # The SDK types many parameters Optional; an explicit null for a parameter
        # with a non-null default (store, stream, tools…) means "use the default".
        if not isinstance(data, dict) or None not in data.values():
            return data
        defaulted = _non_null_defaults(cls)
        return {k: v for k, v in data.items() if not (v is None and k in defaulted)}

    @model_validator(mode="after")
    def _check_semantics(self) -> CreateResponseRequest:
        # Raises InvalidRequest, which pydantic lets through untouched (it only
        # wraps ValueError/AssertionError), so nested params keep precise paths.
        if self.previous_response_id is not None and self.conversation is not None:
            raise _fail(("conversation",), "'previous_response_id' and 'conversation' cannot both be set.")
        if self.background and not self.store:
            raise _fail(("background",), "Invalid value for 'background': a background response is stored "
                        "(that is how it is retrieved); 'store' must be true.")
        if isinstance(self.input, list):
            validate_input_items(self.input)
        from . import sdk  # the SDK's types (imported on the first request validated: sdk.py says why)

        if self.include is not None:
            validate_as(sdk.INCLUDE, self.include, loc=("include",))
        if self.service_tier is not None:
            validate_as(sdk.SERVICE_TIER, self.service_tier, loc=("service_tier",))
        for name, adapter in sdk.NESTED_ADAPTERS.items():
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                validate_as(adapter, value, loc=(name,))
        if self.prompt is not None:
            prompt_reference(self.prompt)
        if self.previous_response_id is not None:
            check_id_format(self.previous_response_id, RESPONSE, "previous_response_id")
        if self.conversation_id is not None:
            check_id_format(self.conversation_id, CONVERSATION, "conversation")
        check_metadata(self.metadata)
        self._check_supported()
        self._check_context_management()
        self._check_tools()
        self._check_tool_choice()
        fmt = (self.text or {}).get("format") or {}
        if fmt.get("type") == "json_schema":
            _check_refs(fmt.get("schema"), ("text", "format", "schema"))
        return self

    def _check_supported(self) -> None:
        """Refuse what Troupe cannot honour yet, naming it, rather than ignore it."""
        for name, why in UNSUPPORTED_PARAMETERS.items():
            if getattr(self, name) is not None:
                raise _fail((name,), f"Unsupported parameter: '{name}' is not supported by this server ({why}).",
                            "unsupported_parameter")
        if self.top_logprobs:
            raise _fail(("top_logprobs",), "Unsupported value: 'top_logprobs' must be 0 on this server (log "
                        "probabilities are not available).", "unsupported_value")
        for i, value in enumerate(self.include or []):
            if value in UNSUPPORTED_INCLUDES:
                raise _fail(("include", i), f"Unsupported value: 'include[{i}]' {show_value(value)} is not "
                            "available on this server (log probabilities are not produced).", "unsupported_value")
        window = (self.background_options or {}).get("completion_window", "soonest")
        if window != "soonest" and (not self.background or self.stream):
            raise _fail(("background_options", "completion_window"), "Invalid value for "
                        f"'background_options.completion_window': {show_value(window)} needs 'background': true "
                        "and 'stream': false.")

    def _check_context_management(self) -> None:
        # The SDK's TypedDict has checked the types already (``type`` a string, the threshold an
        # integer or null); what is left is the values.
        seen: int | None = None
        for i, entry in enumerate(self.context_management or []):
            if entry["type"] != "compaction":
                raise _fail(("context_management", i, "type"), f"Invalid value for 'context_management[{i}].type': "
                            f"{show_value(entry['type'])} is not supported; the only type is 'compaction'.")
            if seen is not None:
                raise _fail(("context_management", i), f"Invalid value for 'context_management[{i}]': only one "
                            f"'compaction' entry may be given (also context_management[{seen}]).")
            seen = i
            threshold = entry.get("compact_threshold")
            if threshold is not None and threshold < 1:
                raise _fail(("context_management", i, "compact_threshold"), "Invalid value for "
                            f"'context_management[{i}].compact_threshold': expected a positive integer (tokens), "
                            f"got {threshold}.")

    def compaction(self) -> tuple[int, int | None] | None:
        """The ``compaction`` entry of ``context_management`` as (its index, its
        ``compact_threshold`` or None when not given); None when the request asks for none."""
        if not self.context_management:  # validated: its one entry, if any, is the compaction one
            return None
        return 0, self.context_management[0].get("compact_threshold")

    def _check_tools(self) -> None:
        from . import sdk

        seen: dict[tuple[str, str], int] = {}
        for i, tool in enumerate(self.tools):
            kind = tool.get("type")
            if kind is None:
                raise _fail(("tools", i, "type"), f"Missing required parameter: 'tools[{i}].type'.",
                            "missing_required_parameter")
            if not isinstance(kind, str) or kind not in sdk.TOOL_TYPES:
                raise _fail(("tools", i, "type"), f"Invalid value for 'tools[{i}].type': {show_value(kind)} is not a "
                            "supported tool type.")
            if kind == "function":
                # parameters/strict are optional on the wire although the SDK requires them.
                validate_as(sdk.FUNCTION_TOOL, {"parameters": None, "strict": None, **tool}, loc=("tools", i))
                if not _FUNCTION_NAME.match(tool["name"]):
                    raise _fail(("tools", i, "name"), f"Invalid value for 'tools[{i}].name': "
                                f"{show_value(tool['name'])} must match ^[a-zA-Z0-9_-]{{1,64}}$.")
                _check_refs(tool.get("parameters"), ("tools", i, "parameters"))
                key = ("function", tool["name"])
            elif kind == "mcp":
                # No server_url is fine here: the label may name a server the deployment
                # configures; the runtime resolves it (and refuses unknown labels).
                validate_as(sdk.MCP_TOOL, tool, loc=("tools", i))
                key = ("mcp", tool["server_label"])
            else:
                continue  # hosted tools are accepted as given
            if key in seen:
                field = "name" if kind == "function" else "server_label"
                raise _fail(("tools", i, field), f"Invalid value for 'tools[{i}].{field}': duplicate {kind} "
                            f"tool {show_value(key[1])} (also tools[{seen[key]}]).")
            seen[key] = i

    def _check_tool_choice(self) -> None:
        from . import sdk

        choice = self.tool_choice
        if isinstance(choice, str):
            if choice not in ("none", "auto", "required"):
                raise _fail(("tool_choice",), "Invalid value for 'tool_choice': expected 'none', 'auto' or "
                            f"'required', got {show_value(choice)}.")
            if choice == "required" and not self.tools:
                raise _fail(("tool_choice",), "Tool choice 'required' needs at least one tool in 'tools'.")
            return
        kind = choice.get("type")
        if kind is None:
            raise _fail(("tool_choice", "type"), "Missing required parameter: 'tool_choice.type'.",
                        "missing_required_parameter")
        if not isinstance(kind, str) or kind not in sdk.TOOL_CHOICES:
            raise _fail(("tool_choice", "type"), f"Invalid value for 'tool_choice.type': {show_value(kind)} is not a "
                        "supported tool choice type.")
        validate_as(sdk.TOOL_CHOICES[kind], choice, loc=("tool_choice",))
        if kind == "allowed_tools":
            for j, entry in enumerate(choice["tools"]):
                if not isinstance(entry.get("type"), str):
                    raise _fail(("tool_choice", "tools", j, "type"), "Missing required parameter: "
                                f"'tool_choice.tools[{j}].type'.", "missing_required_parameter")
                self._check_named_tool(entry, ("tool_choice", "tools", j))
        else:
            self._check_named_tool(choice, ("tool_choice",))

    def _check_named_tool(self, ref: dict[str, Any], loc: Loc) -> None:
        where = format_param(loc)
        if ref["type"] == "function":
            if ref.get("name") not in {t["name"] for t in self.function_tools()}:
                raise _fail(loc, f"Invalid value for '{where}': function {show_value(ref.get('name'))} is not "
                            "defined in 'tools'.")
        elif ref["type"] == "mcp":
            if ref.get("server_label") not in {t["server_label"] for t in self.mcp_tools()}:
                raise _fail(loc, f"Invalid value for '{where}': MCP server {show_value(ref.get('server_label'))} is "
                            "not defined in 'tools'.")

    @property
    def conversation_id(self) -> str | None:
        """The conversation id, whether given as a string or as ``{"id": ...}``."""
        if isinstance(self.conversation, dict):
            return self.conversation["id"]
        return self.conversation

    def function_tools(self) -> list[dict[str, Any]]:
        """The function tools, each with ``description``, ``parameters`` and ``strict`` keys."""
        return [
            {**t, "description": t.get("description"), "parameters": t.get("parameters"), "strict": t.get("strict")}
            for t in self.tools
            if t.get("type") == "function"
        ]

    def mcp_tools(self) -> list[dict[str, Any]]:
        """The MCP tool definitions, as given (including ``headers``/``authorization``)."""
        return [dict(t) for t in self.tools if t.get("type") == "mcp"]

    @property
    def prelude(self) -> list[dict[str, Any]] | None:
        """What the resolved ``prompt`` puts before the thread (:mod:`~troupe.protocol.prompts`): input
        messages, the request's ``instructions`` among them; None until a prompt is resolved (and without one).

        Not a field: it is never sent, nor stored with a run's request (a resumed run resolves its
        pinned version again); a copy of the request (pickled to a host, ``model_copy``) keeps it.
        """
        return self._prelude

    def with_prelude(self, prompt: dict[str, Any], prelude: list[dict[str, Any]]) -> CreateResponseRequest:
        """A copy with ``prompt`` (the reference, its version pinned) and its resolved ``prelude``."""
        resolved = self.model_copy(update={"prompt": prompt})
        resolved._prelude = prelude
        return resolved

    def input_items(self) -> list[dict[str, Any]]:
        """The input in canonical stored form (see :func:`~troupe.protocol.items.normalize_input`).

        Computed once: repeated calls return equal lists with the same minted ids.
        """
        if self._items is None:
            self._items = normalize_input(self.input)
        return copy.deepcopy(self._items)


def parse_create_request(body: object) -> CreateResponseRequest:
    """Validate a decoded JSON body into a :class:`CreateResponseRequest`.

    Args:
        body: the decoded JSON request body.

    Returns:
        The validated request.

    Raises:
        InvalidRequest: naming the offending parameter (``param`` is None when
            the body is not a JSON object).

    Example::

        try:
            req = parse_create_request(await request.json())
        except InvalidRequest as err:
            return JSONResponse(err.to_body(), status_code=err.status)
    """
    if not isinstance(body, dict):
        raise InvalidRequest(
            f"The request body must be a JSON object, got {describe_type(body)}.", param=None, code="invalid_type"
        )
    try:
        return CreateResponseRequest.model_validate(body)
    except ValidationError as exc:
        raise invalid_request_from_errors(exc.errors()) from exc
