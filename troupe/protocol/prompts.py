"""Stored prompts, pure: the Prompts API's bodies, and what a response's ``prompt`` resolves to.

A prompt (``pmpt_…``) has numbered versions (1, 2, …), one of them its default. A version holds:

* ``prompt``: text with ``{{variable}}`` placeholders, the prompt's instructions;
* ``messages``: input messages (few-shot examples, a user message template), placeholders in
  their text too;
* ``variables``: the names it takes. Every placeholder must be declared; left out, they are
  the placeholders found, in order of first use.

A placeholder is ``{{name}}`` (spaces inside the braces allowed), ``name`` a letter or ``_``
then up to 63 letters, digits or ``_``; anything else in braces stays as written.

``prompt: {id, version?, variables?}`` on ``POST /v1/responses`` resolves (:func:`resolve_prompt`)
to the *prelude*: what goes before the thread (history and input), in this order:

1. one ``developer`` message: the prompt's text, then the request's own ``instructions``
   (both apply, the prompt's first, joined by a blank line; either alone if the other is
   empty; none if both are);
2. the prompt's messages.

The request's ``input`` and its thread's history follow. Like ``instructions``, the prelude
is the response's own: it is not stored as input items, not appended to a conversation, and
not carried over by ``previous_response_id``. ``Response.instructions`` echoes it, as OpenAI
does for a prompt (a list of input messages); ``Response.prompt`` echoes the reference with
the version used (a string, as the SDK types it).

Variables: each declared one must be given (else 400 ``missing_required_parameter`` naming
``prompt.variables``), and none other (400 naming ``prompt.variables.<name>``: a value the
model would never see is a mistake to report, not to drop). A string, or an ``input_text``
part's text, replaces the placeholder in text. An ``input_image`` or ``input_file`` part
splits the text around it into content parts (text, the part, text); that is only possible
in a user message of the prompt (the instructions, and system, developer and assistant
messages, reach the model as text): elsewhere it is a 400 naming the variable.
Substitution is one pass: a value's own ``{{…}}`` is never substituted.

Example::

    >>> content = parse_prompt_create({"prompt": "Answer in {{language}}."})
    >>> content["variables"]
    ['language']
"""

from __future__ import annotations

import copy
import re
import secrets
from typing import Any

from .errors import InvalidRequest, NotFound, describe_type, show_value
from .items import infer_item_type, validate_input_items

__all__ = [
    "MAX_VERSION",
    "PROMPT",
    "VARIABLE_PATTERN",
    "new_prompt_id",
    "parse_prompt_create",
    "parse_prompt_update",
    "parse_set_default_version",
    "placeholders",
    "prompt_not_found",
    "prompt_object",
    "prompt_reference",
    "resolve_prompt",
]

PROMPT = "pmpt"
"""The prefix of a prompt id (``pmpt_`` and 48 hex digits, the shape of OpenAI's)."""

MAX_VERSION = 2**31 - 1
"""The highest version number (what a 32-bit integer holds)."""

_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,63}"
VARIABLE_PATTERN = f"^{_NAME}$"
"""A variable's name (JSON Schema's ``pattern``)."""
_VARIABLE = re.compile(_NAME + r"\Z")
_PLACEHOLDER = re.compile(r"\{\{\s*(" + _NAME + r")\s*\}\}")
_TEXT_PARTS = ("input_text", "output_text")


def new_prompt_id() -> str:
    return f"{PROMPT}_{secrets.token_hex(24)}"


def prompt_not_found(prompt_id: str, version: int | None = None, *, param: str = "prompt_id") -> NotFound:
    if version is None:
        return NotFound(f"Prompt with id '{prompt_id}' not found.", param=param)
    return NotFound(f"Prompt '{prompt_id}' has no version {version}.", param=param)


def prompt_object(
    prompt_id: str, version: int, created_at: float, content: dict[str, Any], *, is_default: bool
) -> dict[str, Any]:
    """The wire object of one version: ``{"id", "object": "prompt", "version", "created_at",
    "prompt", "messages", "variables", "is_default"}``."""
    return {
        "id": prompt_id,
        "object": "prompt",
        "version": version,
        "created_at": int(created_at),
        "prompt": content.get("prompt"),
        "messages": copy.deepcopy(content.get("messages") or []),
        "variables": list(content.get("variables") or []),
        "is_default": is_default,
    }


# -- the Prompts API's bodies ----------------------------------------------------------------


def _object(body: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidRequest(f"The request body must be a JSON object, got {describe_type(body)}.", code="invalid_type")
    for key in body:
        if key not in allowed:
            raise InvalidRequest(f"Unknown parameter: {show_value(key)}.", param=key, code="unknown_parameter")
    return body


def _version(body: dict[str, Any], param: str = "version") -> int:
    if param not in body:
        raise InvalidRequest(f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")
    value = body[param]
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"Invalid type for '{param}': expected an integer, got {describe_type(value)}.",
                             param=param, code="invalid_type")  # fmt: skip
    if not 1 <= value <= MAX_VERSION:
        raise InvalidRequest(f"Invalid '{param}': versions are numbered from 1 to {MAX_VERSION}, got {value}.",
                             param=param, code="invalid_value")  # fmt: skip
    return value


def placeholders(content: dict[str, Any]) -> list[str]:
    """The variable names a version's text and messages use, in order of first use."""
    found: dict[str, None] = {}
    for text in _texts(content):
        found.update((name, None) for name in _PLACEHOLDER.findall(text))
    return list(found)


def _texts(content: dict[str, Any]) -> list[str]:
    texts = [content.get("prompt") or ""]
    for message in content.get("messages") or []:
        body = message["content"]
        if isinstance(body, str):
            texts.append(body)
        else:
            texts += [part["text"] for part in body if part.get("type") in _TEXT_PARTS]
    return texts


def _content(body: dict[str, Any]) -> dict[str, Any]:
    """A version's content from a create or update body: ``{"prompt", "messages", "variables"}``."""
    text = body.get("prompt")
    if text is not None and not isinstance(text, str):
        raise InvalidRequest(f"Invalid type for 'prompt': expected a string, got {describe_type(text)}.",
                             param="prompt", code="invalid_type")  # fmt: skip
    messages = body.get("messages")
    if messages is None:
        messages = []
    if not isinstance(messages, list):
        raise InvalidRequest(f"Invalid type for 'messages': expected an array, got {describe_type(messages)}.",
                             param="messages", code="invalid_type")  # fmt: skip
    validate_input_items(messages, param="messages")
    for i, item in enumerate(messages):
        if infer_item_type(item) != "message":
            raise InvalidRequest(f"Invalid value for 'messages[{i}].type': a prompt holds messages only, got "
                                 f"{show_value(item.get('type'))}.", param=f"messages[{i}].type", code="invalid_value")  # fmt: skip
    if not text and not messages:
        raise InvalidRequest("Missing required parameter: 'prompt' (a prompt needs its text in 'prompt', or input "
                             "messages in 'messages').", param="prompt", code="missing_required_parameter")  # fmt: skip
    content: dict[str, Any] = {
        "prompt": text or None,
        "messages": [{"type": "message", "role": m["role"], "content": copy.deepcopy(m["content"])} for m in messages],
    }
    used = placeholders(content)
    declared = body.get("variables")
    if declared is None:
        content["variables"] = used
        return content
    if not isinstance(declared, list):
        raise InvalidRequest(f"Invalid type for 'variables': expected an array of names, got "
                             f"{describe_type(declared)}.", param="variables", code="invalid_type")  # fmt: skip
    for i, name in enumerate(declared):
        if not isinstance(name, str) or not _VARIABLE.match(name):
            raise InvalidRequest(f"Invalid value for 'variables[{i}]': {show_value(name)} is not a variable name "
                                 "(a letter or '_', then up to 63 letters, digits or '_').", param=f"variables[{i}]",
                                 code="invalid_value")  # fmt: skip
        if name in declared[:i]:
            raise InvalidRequest(f"Invalid value for 'variables[{i}]': {show_value(name)} is declared twice.",
                                 param=f"variables[{i}]", code="invalid_value")  # fmt: skip
    undeclared = [name for name in used if name not in declared]
    if undeclared:
        raise InvalidRequest(f"Invalid 'variables': the prompt uses {{{{{undeclared[0]}}}}}, which 'variables' does not "
                             "declare. Declare every variable it uses, or leave 'variables' out to declare exactly "
                             "those.", param="variables", code="invalid_value")  # fmt: skip
    content["variables"] = list(declared)
    return content


def parse_prompt_create(body: Any) -> dict[str, Any]:
    """``POST /v1/prompts``: ``{prompt?, messages?, variables?}`` → the first version's content.

    Raises:
        InvalidRequest: naming the field (``prompt``, ``messages[1].content``, ``variables[0]``…).
    """
    return _content(_object(body, ("prompt", "messages", "variables")))


def parse_prompt_update(body: Any) -> tuple[dict[str, Any], int, bool]:
    """``POST /v1/prompts/{id}``: a whole new version, ``{prompt?, messages?, variables?,
    version, set_as_default?}`` → ``(content, the version it updates, set_as_default)``.

    ``version`` must be the latest version (the runtime checks): two clients updating from
    the same version cannot both succeed. ``set_as_default`` (default true) makes the new
    version the default.
    """
    body = _object(body, ("prompt", "messages", "variables", "version", "set_as_default"))
    version = _version(body)
    default = body.get("set_as_default", True)
    if not isinstance(default, bool):
        raise InvalidRequest(f"Invalid type for 'set_as_default': expected a boolean, got {describe_type(default)}.",
                             param="set_as_default", code="invalid_type")  # fmt: skip
    return _content(body), version, default


def parse_set_default_version(body: Any) -> int:
    """``POST /v1/prompts/{id}/set-default-version``: ``{version}``."""
    return _version(_object(body, ("version",)))


# -- a response's prompt -------------------------------------------------------------------


def prompt_reference(prompt: dict[str, Any]) -> tuple[str, int | None]:
    """The id and version (None: the default) a request's validated ``prompt`` names.

    Raises:
        InvalidRequest: an id that is not a prompt's (``prompt.id``), a version that is not a
            positive integer (``prompt.version``).
    """
    prompt_id = prompt["id"]
    if not prompt_id.startswith(PROMPT):
        raise InvalidRequest(f"Invalid 'prompt.id': {show_value(prompt_id)}. Expected an ID that begins with "
                             f"'{PROMPT}'.", param="prompt.id", code="invalid_value")  # fmt: skip
    version = prompt.get("version")
    if version is None:
        return prompt_id, None
    number = version if isinstance(version, int) else int(version) if version.isdecimal() else 0
    if not 1 <= number <= MAX_VERSION:
        raise InvalidRequest(f"Invalid 'prompt.version': {show_value(version)}. Expected a version number (1, 2, …).",
                             param="prompt.version", code="invalid_value")  # fmt: skip
    return prompt_id, number


def resolve_prompt(request: Any, stored: dict[str, Any]) -> Any:
    """``request`` (a :class:`~troupe.protocol.request.CreateResponseRequest` with a ``prompt``)
    with its prompt resolved against ``stored`` (the prompt object of the version it names):
    its prelude set (module docstring), and ``prompt.version`` pinned to the version used.

    Raises:
        InvalidRequest: a variable missing, unknown, or a part where only text can go.
    """
    reference = request.prompt
    values: dict[str, Any] = reference.get("variables") or {}
    declared: list[str] = stored["variables"]
    where = f"prompt '{stored['id']}' version {stored['version']}"
    for name in values:
        if name not in declared:
            known = ", ".join(f"'{n}'" for n in declared) or "none"
            raise InvalidRequest(f"Unknown prompt variable {show_value(name)}: {where} takes {known}.",
                                 param=f"prompt.variables.{name}", code="invalid_value")  # fmt: skip
    missing = [name for name in declared if name not in values]
    if missing:
        raise InvalidRequest(f"Missing prompt variable '{missing[0]}': {where} uses it. Give it in "
                             "'prompt.variables'.", param="prompt.variables", code="missing_required_parameter")  # fmt: skip
    fill = _Filler(values, where)
    text = fill.text(stored["prompt"] or "", "its text (the instructions)")
    if request.instructions:
        text = f"{text}\n\n{request.instructions}" if text else request.instructions
    prelude: list[dict[str, Any]] = []
    if text:
        prelude.append({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": text}]})
    for i, message in enumerate(stored["messages"]):
        prelude.append({**message, "content": fill.content(message["role"], message["content"], f"messages[{i}]")})
    pinned = {**reference, "version": str(stored["version"])}
    return request.with_prelude(pinned, prelude)


class _Filler:
    """Substitutes a request's variable values into a version's text."""

    def __init__(self, values: dict[str, Any], where: str) -> None:
        self.values = values
        self.where = where

    def pieces(self, text: str, place: str, *, parts: bool) -> list[str | dict[str, Any]]:
        """``text`` with its placeholders filled: strings, and the parts of part variables."""
        out: list[str | dict[str, Any]] = []
        pos = 0
        for match in _PLACEHOLDER.finditer(text):
            name = match.group(1)
            value = self.values.get(name)
            if value is None:  # declared by no version's rule: cannot happen; stays as written
                continue
            out.append(text[pos : match.start()])
            pos = match.end()
            if isinstance(value, str):
                out.append(value)
            elif value.get("type") == "input_text":
                out.append(value["text"])
            elif parts:
                part = copy.deepcopy(value)
                if part["type"] == "input_image" and part.get("detail") is None:
                    part["detail"] = "auto"  # as an input message's image is stored
                out.append(part)
            else:
                raise InvalidRequest(
                    f"Invalid 'prompt.variables.{name}': an {value.get('type')} can only fill a placeholder in a user "
                    f"message of the prompt; {self.where} uses {{{{{name}}}}} in {place}, which reaches the model as "
                    "text.",
                    param=f"prompt.variables.{name}", code="invalid_value",
                )  # fmt: skip
        out.append(text[pos:])
        return out

    def text(self, text: str, place: str) -> str:
        return "".join(self.pieces(text, place, parts=False))  # type: ignore[arg-type]

    def content(self, role: str, content: str | list[dict[str, Any]], place: str) -> str | list[dict[str, Any]]:
        parts = role == "user"
        if isinstance(content, str):
            pieces = self.pieces(content, place, parts=parts)
            if all(isinstance(p, str) for p in pieces):
                return "".join(pieces)  # type: ignore[arg-type]
            return _parts(pieces, "input_text")
        filled: list[dict[str, Any]] = []
        for part in content:
            if part.get("type") not in _TEXT_PARTS:
                filled.append(copy.deepcopy(part))
                continue
            pieces = self.pieces(part["text"], place, parts=parts)
            if all(isinstance(p, str) for p in pieces):
                filled.append({**copy.deepcopy(part), "text": "".join(pieces)})  # type: ignore[arg-type]
            else:
                filled += _parts(pieces, part["type"])
        return filled


def _parts(pieces: list[str | dict[str, Any]], text_type: str) -> list[dict[str, Any]]:
    """Content parts of ``pieces``: each run of text one ``text_type`` part (none if empty)."""
    parts: list[dict[str, Any]] = []
    text = ""
    for piece in pieces:
        if isinstance(piece, str):
            text += piece
            continue
        if text:
            parts.append({"type": text_type, "text": text})
            text = ""
        parts.append(piece)
    if text:
        parts.append({"type": text_type, "text": text})
    return parts
