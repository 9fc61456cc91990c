"""Strict query parameters (troupe/protocol/query_params.py): what each parser takes and
refuses, and that every boolean, integer and number query parameter of every route uses one.
The same refusals over HTTP, as the ``openai`` SDK meets them: tests/e2e/test_responses_http.py."""

from __future__ import annotations

import types
import typing

import pydantic
import pytest
from fastapi.routing import APIRoute

from troupe.protocol.query_params import BOOLEAN, INTEGER, NUMBER, QueryBool, QueryInt, QueryNumber
from troupe.serve.app import create_app
from troupe.serve.config import ServerSettings


@pytest.mark.parametrize(
    ("kind", "given", "parsed"),
    [
        (QueryBool, "true", True),
        (QueryBool, "false", False),
        (QueryBool, "True", True),  # Python's requests sends str(True)
        (QueryBool, "FALSE", False),
        (QueryInt, "0", 0),
        (QueryInt, "-1", -1),
        (QueryInt, "100", 100),
        (QueryInt, "007", 7),
        (QueryNumber, "60", 60.0),
        (QueryNumber, "-1.5", -1.5),
        (QueryNumber, "1.7e9", 1.7e9),
    ],
)
def test_well_formed_values_parse(kind, given, parsed):
    value = pydantic.TypeAdapter(kind).validate_python(given)
    assert value == parsed and type(value) is type(parsed)


@pytest.mark.parametrize(
    ("kind", "given"),
    [
        *((QueryBool, v) for v in ("maybe", "yes", "no", "on", "off", "1", "0", "t", "f", "y", "", " true")),
        *((QueryInt, v) for v in ("abc", "1.0", "+1", " 5", "5 ", "1_000", "1e3", "", "-", "٣", "0x10")),
        *((QueryNumber, v) for v in ("nan", "NaN", "inf", "-Infinity", "1e999", "abc", "", "1.", ".5", "1_0", " 1")),
    ],
)
def test_malformed_values_are_refused(kind, given):
    with pytest.raises(pydantic.ValidationError) as info:
        pydantic.TypeAdapter(kind).validate_python(given)
    assert info.value.errors()[0]["type"] in ("query_boolean", "query_integer", "query_number")


def _query_fields(dependant) -> list:
    return [*dependant.query_params, *(f for sub in dependant.dependencies for f in _query_fields(sub))]


def _scalar(annotation) -> type | None:
    """``bool``, ``int`` or ``float`` for a query parameter of that type (optional or not), else None."""
    args = typing.get_args(annotation) if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union else (annotation,)
    found = [a for a in args if a in (bool, int, float)]
    return found[0] if found else None


def test_every_boolean_integer_and_number_query_parameter_of_every_route_is_strict():
    app = create_app(lambda: None, ServerSettings())  # the routes only; no runtime is called
    parser = {bool: BOOLEAN, int: INTEGER, float: NUMBER}
    checked, loose = [], []
    for route in app.routes:
        if not isinstance(route, APIRoute):
            continue
        for field in _query_fields(route.dependant):
            kind = _scalar(field.field_info.annotation)
            if kind is None:
                continue
            checked.append(f"{route.path}?{field.alias}")
            if parser[kind] not in field.field_info.metadata:
                loose.append(f"{route.path}?{field.alias} ({kind.__name__})")
    assert loose == [], "parsed in pydantic's lax mode: annotate with QueryBool / QueryInt / QueryNumber"
    assert {"/v1/responses/{response_id}?stream", "/v1/responses/{response_id}?starting_after",
            "/v1/responses?limit", "/v1/troupe/console/stats?window_s"} <= set(checked)  # fmt: skip
