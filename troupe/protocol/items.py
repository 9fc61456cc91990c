"""Input items: validation and the canonical stored form of a client transcript.

An input item is a JSON object dispatched on its ``type``. Every
kind the ``openai`` SDK knows is validated against the SDK's own TypedDict
(``openai.types.responses.response_input_item_param``), with two hand-written
exceptions where the SDK is stricter than real clients: messages (the Agents SDK
sends ``{"role": "user", "content": "hi"}`` with no ``type``; replayed assistant
text often lacks ``annotations``, ``id`` or ``status``) and ``function_call_output``
(the SDK marks ``call_id`` optional, but nothing can pair an output without it).

:func:`normalize_input` then turns the validated input into stored items: typed,
with ids and statuses, messages always with a list of content parts.

Example::

    >>> items = normalize_input([{"role": "user", "content": "hi"}])
    >>> items[0]["type"], items[0]["content"], content_text(items[0]["content"])
    ('message', [{'type': 'input_text', 'text': 'hi'}], 'hi')
"""

from __future__ import annotations

import copy
from typing import Any

from .errors import InvalidRequest, Loc, describe_type, format_param, show_value, validate_as
from .ids import ITEM, ITEM_ID_PREFIXES, MESSAGE, new_id

__all__ = [
    "MESSAGE_ROLES",
    "CONTENT_PART_TYPES",
    "infer_item_type",
    "validate_input_items",
    "normalize_input",
    "content_text",
    "item_adapters",
]

MESSAGE_ROLES = ("user", "assistant", "system", "developer")
"""Roles an input message may carry."""


CONTENT_PART_TYPES = ("input_text", "input_image", "input_file", "output_text", "refusal")
"""Content part kinds accepted in input messages (any role, to be lenient on replays)."""


def item_adapters() -> dict[str, Any]:
    """A pydantic adapter per input item ``type`` (:data:`troupe.protocol.sdk.ITEM_ADAPTERS`)."""
    from . import sdk  # the SDK's types: imported on first validation (sdk.py says why)

    return sdk.ITEM_ADAPTERS


def infer_item_type(item: dict[str, Any]) -> str | None:
    """The item's ``type``, defaulting as clients expect.

    A typeless item with a ``role`` is a ``message``; a bare ``{"id": ...}`` is an
    ``item_reference``. Returns None when the type cannot be told.
    """
    kind = item.get("type")
    if kind is not None:
        return kind
    if "role" in item:
        return "message"
    if set(item) == {"id"}:
        return "item_reference"
    return None


def _validate_message(item: dict[str, Any], loc: Loc) -> None:
    validate_as(item_adapters()["message"], item, loc=loc)
    content = item["content"]
    if isinstance(content, str):
        return
    for j, part in enumerate(content):
        kind = part.get("type")
        from . import sdk

        adapter = sdk.PART_ADAPTERS.get(kind) if isinstance(kind, str) else None
        if adapter is None:
            where = _param(loc + ("content", j, "type"))
            if kind is None:
                raise InvalidRequest(
                    f"Missing required parameter: '{where}'.", param=where, code="missing_required_parameter"
                )
            supported = ", ".join(f"'{k}'" for k in CONTENT_PART_TYPES)
            raise InvalidRequest(
                f"Invalid value for '{where}': {show_value(kind)} is not a supported content part type; "
                f"supported values are {supported}.",
                param=where,
                code="invalid_value",
            )
        validate_as(adapter, part, loc=loc + ("content", j))


def _param(loc: Loc) -> str:
    return format_param(loc) or ""


def validate_input_items(items: list[Any], *, param: str = "input") -> None:
    """Validate a list of input items, each against the schema of its ``type``.

    Args:
        items: the decoded JSON list (``input`` of a create request, ``items`` of
            a conversation request).
        param: the body field holding the list, for error locations.

    Raises:
        InvalidRequest: for the first invalid item, with ``param`` like
            ``input[2].call_id`` and code ``missing_required_parameter``,
            ``invalid_type`` or ``invalid_value``.
    """
    adapters = item_adapters()
    for i, item in enumerate(items):
        loc: Loc = (param, i)
        if not isinstance(item, dict):
            raise InvalidRequest(
                f"Invalid type for '{_param(loc)}': expected an object, got {describe_type(item)}.",
                param=_param(loc),
                code="invalid_type",
            )
        kind = infer_item_type(item)
        if kind is None:
            raise InvalidRequest(
                f"Missing required parameter: '{_param(loc + ('type',))}'.",
                param=_param(loc + ("type",)),
                code="missing_required_parameter",
            )
        if not isinstance(kind, str) or kind not in adapters:
            raise InvalidRequest(
                f"Invalid value for '{_param(loc + ('type',))}': {show_value(kind)} is not a supported input item type.",
                param=_param(loc + ("type",)),
                code="invalid_value",
            )
        typed = {**item, "type": kind}
        if kind == "message":
            _validate_message(typed, loc)
            continue
        validate_as(adapters[kind], typed, loc=loc)
        if kind == "function_call_output" and not isinstance(item.get("call_id"), str):
            raise InvalidRequest(
                f"Missing required parameter: '{_param(loc + ('call_id',))}'.",
                param=_param(loc + ("call_id",)),
                code="missing_required_parameter",
            )


def _normalize_message(item: dict[str, Any]) -> dict[str, Any]:
    role = item["role"]
    content = item["content"]
    if isinstance(content, str):
        part_type = "output_text" if role == "assistant" else "input_text"
        content = [{"type": part_type, "text": content}]
    parts = []
    for part in content:
        part = dict(part)
        # Stored parts carry what the SDK/Open Responses output types require.
        if part.get("type") == "output_text" and part.get("annotations") is None:
            part["annotations"] = []
        elif part.get("type") == "input_image" and part.get("detail") is None:
            part["detail"] = "auto"
        parts.append(part)
    return {
        **item,
        "type": "message",
        "id": item.get("id") or new_id(MESSAGE),
        "role": role,
        "content": parts,
        "status": item.get("status") or "completed",
    }


def normalize_input(input: str | list[dict[str, Any]]) -> list[dict[str, Any]]:  # noqa: A002
    """The canonical stored form of a request's (already validated) ``input``.

    - a string becomes one user message; the empty string means no new input;
    - every message becomes ``{"type": "message", "id", "role", "content": [parts],
      "status"}``; string content becomes one ``input_text`` part (``output_text``
      with ``annotations: []`` for the assistant); missing ids become ``msg_…``;
    - other items get their ``type`` set and an ``id`` if missing (``fc_``, ``fco_``,
      ``mcpa_``…, see :data:`~troupe.protocol.ids.ITEM_ID_PREFIXES`); ``function_call``,
      ``function_call_output``, ``shell_call`` and ``shell_call_output`` also get
      ``status: "completed"`` if missing (the SDK's output items require one);
      ``item_reference`` is kept as is (its id names a stored item).

    The input is not mutated. Pure apart from minting ids.
    """
    if isinstance(input, str):
        if not input:
            return []
        input = [{"type": "message", "role": "user", "content": input}]
    out: list[dict[str, Any]] = []
    for raw in input:
        item = copy.deepcopy(raw)
        kind = infer_item_type(item) or "message"
        if kind == "message":
            out.append(_normalize_message(item))
            continue
        item["type"] = kind
        if kind != "item_reference" and not item.get("id"):
            item["id"] = new_id(ITEM_ID_PREFIXES.get(kind, ITEM))
        if kind in ("function_call", "function_call_output", "shell_call", "shell_call_output") and not item.get("status"):
            item["status"] = "completed"
        out.append(item)
    return out


def content_text(content: Any, *, sep: str = "") -> str:
    """The text of a message's ``content``: a string as is; of a list of parts, each part's
    ``text`` (or ``refusal``) joined by ``sep``. Other parts (images, files) and anything that
    is not a part contribute nothing.

    Example::

        >>> content_text([{"type": "input_text", "text": "a"}, {"type": "input_image"}, {"text": "b"}], sep="\\n")
        'a\\nb'
    """
    if isinstance(content, str):
        return content
    if not isinstance(content, list | tuple):
        return ""
    texts = []
    for part in content:
        if isinstance(part, dict):
            text = part.get("text")
            if not isinstance(text, str):
                text = part.get("refusal")
            if isinstance(text, str):
                texts.append(text)
    return sep.join(texts)
