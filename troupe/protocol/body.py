"""Strict JSON request bodies: what a client may send, checked before anything else reads it.

Python's ``json`` module is lenient where the API must not be:

* it accepts ``NaN``, ``Infinity`` and ``-Infinity``, which are not JSON (RFC 8259) and
  cannot be stored as JSON afterwards;
* it accepts ``"\\ud800"``, a lone UTF-16 surrogate, and yields a ``str`` that cannot be
  encoded as UTF-8, so every later step that writes it (storage, the upstream request,
  the response itself) fails;
* it nests as deep as the interpreter's recursion limit allows, and any recursive walk
  of a deep value later fails with ``RecursionError``.

:func:`decode_json_body` refuses all three with a 400 naming the offending field, in the
same ``input[2].content[0].text`` form as every other validation error.

Example::

    >>> decode_json_body(b'{"model": "sim", "input": "hi"}')
    {'model': 'sim', 'input': 'hi'}
    >>> decode_json_body(b'{"temperature": NaN}')
    Traceback (most recent call last):
    ...
    troupe.protocol.errors.InvalidRequest: ...
"""

from __future__ import annotations

import json
from typing import Any

from .errors import InvalidRequest, Loc, format_param

__all__ = ["DEFAULT_MAX_DEPTH", "decode_json_body"]

DEFAULT_MAX_DEPTH = 64
"""Objects and arrays nested deeper than this are refused (the body itself is depth 1)."""


class _NotJson(ValueError):
    """A constant JSON does not define (``NaN``, ``Infinity``)."""


def _refuse_constant(name: str) -> float:
    raise _NotJson(name)


def decode_json_body(raw: bytes | str, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Decode a request body as strict JSON.

    Args:
        raw: the body as received.
        max_depth: the deepest nesting of objects and arrays allowed.

    Returns:
        The decoded value.

    Raises:
        InvalidRequest: not JSON (``invalid_json``); ``NaN``/``Infinity``
            (``invalid_json``); nested deeper than ``max_depth`` (``nesting_too_deep``,
            naming where); a lone surrogate in a string or key (``invalid_value``, naming
            the field).
    """
    try:
        value = json.loads(raw, parse_constant=_refuse_constant)
    except _NotJson as exc:
        raise InvalidRequest(
            f"We could not parse the JSON body of your request: {exc} is not a JSON value "
            "(JSON has no NaN or Infinity).",
            code="invalid_json",
        ) from None
    except RecursionError:
        raise _too_deep((), max_depth) from None
    except ValueError as exc:  # JSONDecodeError and undecodable bytes alike
        raise InvalidRequest(
            "We could not parse the JSON body of your request. The API expects a JSON payload "
            "(Content-Type: application/json).",
            code="invalid_json",
        ) from exc
    _check(value, max_depth)
    return value


def _check(value: Any, max_depth: int) -> None:
    # Iterative, so that checking a deep value cannot itself recurse too deep. Each entry
    # is (value, depth, location); locations are built only along the path walked.
    stack: list[tuple[Any, int, Loc]] = [(value, 1, ())]
    while stack:
        node, depth, loc = stack.pop()
        if isinstance(node, str):
            _check_text(node, loc)
            continue
        if not isinstance(node, dict | list):
            continue
        if depth > max_depth:
            raise _too_deep(loc, max_depth)
        if isinstance(node, dict):
            for key, child in node.items():
                _check_text(key, loc, key=True)
                stack.append((child, depth + 1, (*loc, key)))
        else:
            stack.extend((child, depth + 1, (*loc, i)) for i, child in enumerate(node))


def _check_text(text: str, loc: Loc, *, key: bool = False) -> None:
    if text.isascii():  # the common case, and ASCII has no surrogates
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        where = format_param(loc)
        what = f"a key of '{where}'" if key and where else ("a key" if key else f"'{where}'" if where else "the body")
        raise InvalidRequest(
            f"Invalid value for {what}: the string contains a lone UTF-16 surrogate, which is not valid Unicode.",
            param=where,
            code="invalid_value",
        ) from None


def _too_deep(loc: Loc, max_depth: int) -> InvalidRequest:
    where = format_param(loc)
    return InvalidRequest(
        f"The request body is nested too deeply{f' at {where!r}' if where else ''}: at most {max_depth} "
        "levels of objects and arrays are allowed.",
        param=where,
        code="nesting_too_deep",
    )
