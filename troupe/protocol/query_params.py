"""Query parameters as strict as the JSON body: a malformed value answers 400 naming it.

FastAPI validates query strings in pydantic's lax mode, where ``stream=yes``, ``stream=1``,
``stream=on`` or ``stream=t`` are ``true``, and ``limit=%205``, ``limit=+5``, ``limit=1_0`` or
``limit=5.0`` are integers: a client that sent a malformed value got the answer to some other
request. The annotations here take only what the parameter's type means on the wire:

* a boolean is ``true`` or ``false`` (in any case: Python's ``requests`` sends ``True``);
* an integer is ASCII digits, optionally after a ``-`` (the parameter's bounds then apply);
* a number is a JSON number (``60``, ``1.5``, ``1e3``): no ``nan``, no ``inf``.

Anything else fails validation with a pydantic error that the app's handler for
``RequestValidationError`` turns into OpenAI's error body, ``400 invalid_request_error`` with
``param`` naming the parameter (``Invalid value for 'stream': expected true or false (got
'maybe').``). Bounds (``Query(ge=1, le=100)``) and ``Literal`` enums (``order``) apply to the
parsed value as before.

Pure pydantic, so that the console's routes use them as the API's do. The HTTP layer adds
one rule (``troupe.serve.app``): a parameter a route declares, sent more than once
(``?stream=false&stream=maybe``), is refused too, where FastAPI would read the last value.
tests/unit/test_query_params.py checks that every boolean, integer and number query parameter
of every route carries one of these annotations.

Example::

    @app.get("/v1/things")
    async def things(stream: QueryBool = False, limit: Annotated[QueryInt, Query(ge=1, le=100)] = 20): ...
    # GET /v1/things?stream=yes -> 400 {"error": {"param": "stream", "code": "invalid_value", ...}}
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

__all__ = ["BOOLEAN", "INTEGER", "NUMBER", "QueryBool", "QueryInt", "QueryNumber"]

_INTEGER = re.compile(r"-?[0-9]+")
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?")


def _boolean(value: Any) -> Any:
    if not isinstance(value, str):
        return value  # a default (FastAPI does not validate those), or a test's value
    lowered = value.lower()
    if lowered not in ("true", "false"):
        raise PydanticCustomError("query_boolean", "expected true or false")
    return lowered == "true"


def _integer(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if not _INTEGER.fullmatch(value):
        raise PydanticCustomError("query_integer", "expected an integer")
    return int(value)


def _number(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if not _NUMBER.fullmatch(value):
        raise PydanticCustomError("query_number", "expected a number")
    number = float(value)
    if number in (float("inf"), float("-inf")):  # 1e999
        raise PydanticCustomError("query_number", "expected a number within range")
    return number


BOOLEAN = BeforeValidator(_boolean)
"""The strict parser of a boolean query parameter (an ``Annotated`` argument)."""
INTEGER = BeforeValidator(_integer)
"""The strict parser of an integer query parameter."""
NUMBER = BeforeValidator(_number)
"""The strict parser of a number query parameter."""

QueryBool = Annotated[bool, BOOLEAN]
QueryInt = Annotated[int, INTEGER]
QueryNumber = Annotated[float, NUMBER]
