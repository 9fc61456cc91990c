"""Deterministic example values for JSON schemas (used by the ``sim`` model).

The sim model fills in tool arguments and ``json_schema`` answers from a schema, so the
value it produces must validate against that schema. The rules are deliberately simple
and predictable, so tests can state the expected value outright:

    ``const``          the constant
    ``enum``           the first member
    ``anyOf/oneOf``    the first option
    ``allOf``          the options merged (properties and ``required`` united)
    ``$ref``           ``#/$defs/...``, ``#/definitions/...`` (any local JSON pointer)
    object             every property (required ones included, even when not listed)
    string             ``"example"``, padded with ``x`` to ``minLength``, cut to ``maxLength``
    integer/number     ``1``, moved into ``minimum``/``maximum`` (exclusive bounds too)
    boolean            ``true``
    null               ``null``
    array              ``max(1, minItems)`` items (capped by ``maxItems``)
    no type            inferred from ``properties``/``items``, else string

``format`` and ``pattern`` are ignored. :func:`generate_bounded` stops at a size: strings are
cut and arrays end early once the value's characters reach it (a model's output cap), so that
a schema asking for a 100 MB string costs nothing. A schema with no finite value (a ``$ref`` cycle
that never reaches a concrete type, a recursive property that is always required) or a
``$ref`` that does not resolve raises :class:`SchemaError`, as a model server refuses it.

Example::

    >>> generate_from_schema({"type": "object", "properties": {"city": {"type": "string"}}})
    {'city': 'example'}
"""

from __future__ import annotations

import math
from typing import Any

from troupe.protocol.schema_refs import MISSING, resolve_ref

__all__ = ["SchemaError", "generate_bounded", "generate_from_schema"]

# Past this depth a recursive schema ($ref cycles) only gets what it strictly needs:
# required properties and minItems items, so generation terminates when it can.
_MAX_DEPTH = 8
# Past this depth even what is strictly needed keeps recursing: the schema has no finite value.
_NO_FINITE_VALUE = 64


class SchemaError(ValueError):
    """The schema cannot be used: a ``$ref`` that does not resolve, or no finite value."""


class _Budget:
    """Characters a value may still take (None: no bound); ``cut`` once anything was cut."""

    __slots__ = ("left", "cut")

    def __init__(self, left: int | None) -> None:
        self.left, self.cut = left, False

    def take(self, wanted: int) -> int:
        """How many of ``wanted`` characters fit, taking them."""
        if self.left is None:
            return wanted
        given = min(wanted, self.left)
        self.left -= given
        self.cut = self.cut or given < wanted
        return given


_UNBOUNDED = _Budget(None)


def generate_from_schema(schema: dict[str, Any]) -> Any:
    """Return a deterministic value that validates against ``schema``.

    Args:
        schema: a JSON schema (draft 7 / 2020-12 subset); local ``$ref`` are resolved
            against this root.

    Returns:
        A JSON-compatible value (dict, list, str, int, float, bool or None).

    Raises:
        SchemaError: a ``$ref`` does not resolve, or no finite value validates.
    """
    return _generate(schema, root=schema, depth=0, budget=_Budget(None))


def generate_bounded(schema: dict[str, Any], max_chars: int) -> tuple[Any, bool]:
    """:func:`generate_from_schema` within about ``max_chars`` characters of value: the value,
    and whether it was cut to fit (it then need not validate: a model stopped by its output cap).

    Raises:
        SchemaError: as :func:`generate_from_schema`.
    """
    budget = _Budget(max_chars)
    value = _generate(schema, root=schema, depth=0, budget=budget)
    return value, budget.cut


def _generate(schema: Any, *, root: dict[str, Any], depth: int, budget: _Budget) -> Any:
    if depth > _NO_FINITE_VALUE:
        raise SchemaError("the schema has no finite value: its $ref recursion never ends")
    if not isinstance(schema, dict):
        # `true` / `{}` style schemas accept anything.
        return "example"
    if "$ref" in schema:
        return _generate(_resolve(schema["$ref"], root), root=root, depth=depth + 1, budget=budget)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return _generate(schema[key][0], root=root, depth=depth + 1, budget=budget)
    if schema.get("allOf"):
        return _generate(_merge_all_of(schema, root), root=root, depth=depth + 1, budget=budget)

    match _type_of(schema):
        case "object":
            return _object(schema, root=root, depth=depth, budget=budget)
        case "array":
            return _array(schema, root=root, depth=depth, budget=budget)
        case "integer":
            return _number(schema, integer=True)
        case "number":
            return _number(schema, integer=False)
        case "boolean":
            return True
        case "null":
            return None
        case _:
            return _string(schema, budget)


def _type_of(schema: dict[str, Any]) -> str:
    declared = schema.get("type")
    if isinstance(declared, list):
        # ["string", "null"]: prefer the informative type.
        non_null = [t for t in declared if t != "null"]
        declared = non_null[0] if non_null else "null"
    if isinstance(declared, str):
        return declared
    if "properties" in schema or "required" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    return "string"


def _resolve(ref: str, root: dict[str, Any]) -> Any:
    found = resolve_ref(ref, root)
    if found is MISSING:
        raise SchemaError(f"$ref {ref!r} does not resolve (only local JSON pointers like '#/$defs/x' do)")
    return found


def _merge_all_of(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
    for part in schema["allOf"]:
        for _ in range(_NO_FINITE_VALUE):  # a $ref may name another $ref
            if not (isinstance(part, dict) and "$ref" in part):
                break
            part = _resolve(part["$ref"], root)
        if not isinstance(part, dict):
            continue
        for key, value in part.items():
            if key == "properties":
                merged["properties"] = {**merged.get("properties", {}), **value}
            elif key == "required":
                merged["required"] = [*merged.get("required", []), *value]
            else:
                merged.setdefault(key, value)
    return merged


def _object(schema: dict[str, Any], *, root: dict[str, Any], depth: int, budget: _Budget) -> dict[str, Any]:
    properties: dict[str, Any] = schema.get("properties") or {}
    required: list[str] = list(schema.get("required") or [])
    names = list(properties) if depth < _MAX_DEPTH else [n for n in properties if n in required]
    value = {name: _generate(properties[name], root=root, depth=depth + 1, budget=budget) for name in names}
    for name in required:
        # A required name without a property schema still has to be present.
        value.setdefault(name, "example")
    return value


def _array(schema: dict[str, Any], *, root: dict[str, Any], depth: int, budget: _Budget) -> list[Any]:
    prefix = list(schema.get("prefixItems") or [])
    min_items = int(schema.get("minItems", 0))
    count = max(1 if depth < _MAX_DEPTH else 0, min_items, len(prefix))
    if "maxItems" in schema:
        count = min(count, int(schema["maxItems"]))
    items = schema.get("items", {})
    if items is False:
        count = min(count, len(prefix))
    values = []
    for i in range(count):
        if budget.take(1) < 1:  # each item costs at least its separator: minItems asked for more than fits
            break
        item_schema = prefix[i] if i < len(prefix) else items
        values.append(_generate(item_schema, root=root, depth=depth + 1, budget=budget))
    return values


def _number(schema: dict[str, Any], *, integer: bool) -> int | float:
    value: float = 1
    low, high = schema.get("minimum"), schema.get("maximum")
    ex_low, ex_high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    # Draft 4 spells exclusive bounds as booleans next to minimum/maximum.
    if ex_low is True:
        ex_low, low = low, None
    if ex_high is True:
        ex_high, high = high, None
    if isinstance(ex_low, bool):
        ex_low = None
    if isinstance(ex_high, bool):
        ex_high = None

    if low is not None and value < low:
        value = low
    if ex_low is not None and value <= ex_low:
        value = math.floor(ex_low) + 1 if integer else _between(ex_low, high if high is not None else ex_high)
    if high is not None and value > high:
        value = high
    if ex_high is not None and value >= ex_high:
        value = math.ceil(ex_high) - 1 if integer else _between(low if low is not None else ex_low, ex_high)

    step = schema.get("multipleOf")
    if step:
        value = math.ceil(value / step) * step
    if integer:
        return int(math.ceil(value))
    return int(value) if float(value).is_integer() else float(value)


def _between(low: float | None, high: float | None) -> float:
    if low is None and high is None:
        return 1
    if low is None:
        return high - 1  # type: ignore[operator]
    if high is None:
        return low + 1
    return (low + high) / 2


def _string(schema: dict[str, Any], budget: _Budget = _UNBOUNDED) -> str:
    length = max(len("example"), int(schema.get("minLength", 0)))
    if "maxLength" in schema:
        length = min(length, int(schema["maxLength"]))
    length = budget.take(length)
    return ("example" + "x" * max(0, length - len("example")))[:length]
