"""Grader specifications: the objects of a case's ``expected``, as pydantic models.

A grader is a JSON object with exactly one *kind* key (``equals``, ``contains``,
``regex``, ``json_schema``, ``tool_called``, ``python``, ``judge``; what each
does is in :mod:`.graders`), whose value is its main argument, plus options::

    {"contains": ["Paris", "France"], "ignore_case": true, "name": "capital"}

Each kind is a strict, closed model (``ContainsSpec``…: JSON types as written,
unknown options refused, regexes compiled, schemas checked, Python graders
imported); :data:`GraderSpec` is their union, told apart by the kind key.

Errors::

    GraderError(ValueError)   a spec does not fit; the message names where and the field

:func:`explain` words pydantic's ``ValidationError`` for a grader or a whole case
(the dataset loader shares it): ``expected[0].regex: invalid regex: ...``.

Example::

    specs = parse_expected([{"contains": "42"}, {"tool_called": "calculator"}], where="case 1")
    [s.kind for s in specs]   # ["contains", "tool_called"]
"""

from __future__ import annotations

import pkgutil
import re
from collections.abc import Callable, Sequence
from typing import Annotated, Any, ClassVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from troupe.protocol.errors import format_param, invalid_request_from_errors, show_value

__all__ = [
    "GRADER_KINDS",
    "ContainsSpec",
    "EqualsSpec",
    "Expected",
    "GraderError",
    "GraderSpec",
    "JsonSchemaSpec",
    "JudgeSpec",
    "PythonSpec",
    "RegexSpec",
    "ToolCalledSpec",
    "explain",
    "load_function",
    "parse_expected",
    "parse_grader",
]


class GraderError(ValueError):
    """A grader specification is malformed; the message says where and why."""


class _Spec(BaseModel):
    # strict: JSON types as written ("true" is not a boolean); extra="forbid": a
    # misspelt option is an error, not a silently ignored key.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    kind: ClassVar[str]
    """The key that selects this grader (``"contains"``…); its value is the main argument."""
    name: str = Field(min_length=1)
    """The grade's label (default: the kind)."""

    @model_validator(mode="before")
    @classmethod
    def _name_defaults_to_the_kind(cls, data: Any) -> Any:
        return {"name": cls.kind, **data} if isinstance(data, dict) else data

    @property
    def value(self) -> Any:
        """The main argument: the value of the kind key."""
        return getattr(self, self.kind)

    @property
    def options(self) -> dict[str, Any]:
        """The options the spec set (everything but the kind key and ``name``)."""
        return {k: getattr(self, k) for k in sorted(self.model_fields_set - {self.kind, "name"})}


class _TextSpec(_Spec):
    ignore_case: bool = False
    """Compare case-insensitively (``str.casefold``)."""


class EqualsSpec(_TextSpec):
    """``{"equals": "42"}``: the answer, stripped, is exactly this; a non-string compares the answer parsed as JSON."""

    kind: ClassVar[str] = "equals"
    equals: Any


class ContainsSpec(_TextSpec):
    """``{"contains": "Paris"}`` or ``{"contains": ["a", "b"]}``: the answer contains each of these."""

    kind: ClassVar[str] = "contains"
    contains: str | list[str]

    @field_validator("contains")
    @classmethod
    def _not_empty(cls, value: str | list[str]) -> str | list[str]:
        if value == []:
            raise ValueError("an empty list checks nothing; give at least one string")
        return value

    @property
    def needles(self) -> list[str]:
        return self.contains if isinstance(self.contains, list) else [self.contains]


class RegexSpec(_TextSpec):
    """``{"regex": "^\\d+$"}``: ``re.search`` finds the pattern in the answer."""

    kind: ClassVar[str] = "regex"
    regex: str

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"invalid regex: {exc}") from None
        return value


class JsonSchemaSpec(_Spec):
    """``{"json_schema": {...}}``: the answer is JSON valid against the schema."""

    kind: ClassVar[str] = "json_schema"
    json_schema: dict[str, Any] | bool

    @field_validator("json_schema")
    @classmethod
    def _is_a_schema(cls, value: dict[str, Any] | bool) -> dict[str, Any] | bool:
        import jsonschema

        try:
            # The stubs' Validator protocol takes a dict only; check_schema takes a boolean schema too.
            jsonschema.validators.validator_for(value).check_schema(value)  # type: ignore[arg-type]
        except jsonschema.SchemaError as exc:
            raise ValueError(f"invalid JSON schema: {exc.message}") from None
        return value


class ToolCalledSpec(_Spec):
    """``{"tool_called": "calculator", "arguments": {...}}``: a tool of that name was called."""

    kind: ClassVar[str] = "tool_called"
    tool_called: str = Field(min_length=1)
    """The tool's name."""
    arguments: dict[str, Any] | None = None
    """Arguments the call must have (at least these, with these values)."""


class PythonSpec(_Spec):
    """``{"python": "package.module:function", "args": {...}}``: ``function(outcome, **args)`` decides."""

    kind: ClassVar[str] = "python"
    python: str
    """The function, imported by ``pkgutil.resolve_name`` when the spec is parsed and again when it grades."""
    args: dict[str, Any] = {}
    """Keyword arguments for the function."""

    @field_validator("python")
    @classmethod
    def _loads(cls, value: str) -> str:
        try:
            load_function(value)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ValueError(f"cannot load the python grader: {exc}") from None
        return value


class JudgeSpec(_Spec):
    """``{"judge": "RUBRIC", "model": "NAME"}``: an LLM judge reads the rubric, the task and the answer."""

    kind: ClassVar[str] = "judge"
    judge: str
    """The rubric."""
    model: Annotated[str, Field(min_length=1)] | None = None
    """The judge model (default: the run's judge model, else the model under evaluation)."""

    @field_validator("judge")
    @classmethod
    def _has_a_rubric(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the rubric is empty")
        return value


_SPECS: dict[str, type[_Spec]] = {
    spec.kind: spec
    for spec in (EqualsSpec, ContainsSpec, RegexSpec, JsonSchemaSpec, ToolCalledSpec, PythonSpec, JudgeSpec)
}
GRADER_KINDS = tuple(_SPECS)
"""The kind keys: ``("equals", "contains", "regex", "json_schema", "tool_called", "python", "judge")``."""


def _kind_of(entry: Any) -> str | None:
    if isinstance(entry, dict):
        kinds = [k for k in entry if k in _SPECS]
        return kinds[0] if len(kinds) == 1 else None  # None: the union's "grader_kind" error
    return getattr(entry, "kind", None)


GraderSpec = Annotated[
    Annotated[EqualsSpec, Tag("equals")]
    | Annotated[ContainsSpec, Tag("contains")]
    | Annotated[RegexSpec, Tag("regex")]
    | Annotated[JsonSchemaSpec, Tag("json_schema")]
    | Annotated[ToolCalledSpec, Tag("tool_called")]
    | Annotated[PythonSpec, Tag("python")]
    | Annotated[JudgeSpec, Tag("judge")],
    Discriminator(
        _kind_of,
        custom_error_type="grader_kind",
        custom_error_message=f"a grader must be an object with exactly one of the keys {', '.join(GRADER_KINDS)}",
    ),
]
"""One parsed grader, selected by its kind key; ``match`` on the classes to tell them apart."""

Expected = Annotated[
    tuple[GraderSpec, ...],
    BeforeValidator(lambda value: () if value is None else value if isinstance(value, list | tuple) else [value]),
    Field(strict=False),  # a JSON list is a tuple here; the specs themselves stay strict
]
"""A case's ``expected``: none, one grader, or a list of them."""

_ONE: TypeAdapter[GraderSpec] = TypeAdapter(GraderSpec)
_EXPECTED: TypeAdapter[tuple[GraderSpec, ...]] = TypeAdapter(Expected)


def parse_expected(value: Any, *, where: str) -> tuple[GraderSpec, ...]:
    """A case's ``expected`` (None, one grader object, or a list of them) as grader specs.

    Raises:
        GraderError: naming ``where`` and the offending grader, e.g. ``expected[1].regex``.
    """
    try:
        return _EXPECTED.validate_python(value)
    except ValidationError as exc:
        raise GraderError(f"{where}: {explain(exc, prefix=('expected',))}") from None


def parse_grader(entry: Any, *, where: str) -> GraderSpec:
    """One grader object; checks its kind, options and argument (patterns compile, schemas are schemas)."""
    try:
        return _ONE.validate_python(entry)
    except ValidationError as exc:
        raise GraderError(f"{where}: {explain(exc)}") from None


def explain(exc: ValidationError, *, prefix: tuple[str | int, ...] = (), fields: Sequence[str] = ()) -> str:
    """pydantic's errors for a case or a grader as one sentence naming the offending field.

    Unknown keys come first (with the keys allowed there), then missing ones, then the
    first other error, worded as request validation words it (``Invalid type for 'tags':
    expected an array, got a string.``).

    Args:
        exc: the error from validating a case (``EvalCase``) or graders.
        prefix: where the validated value sits in its row (``("expected",)``).
        fields: the fields of the validated model, to list after an unknown one.
    """
    errors: list[dict[str, Any]] = [{**e, "loc": prefix + tuple(e["loc"])} for e in exc.errors(include_url=False)]
    unknown = [e for e in errors if e["type"] == "extra_forbidden"]
    if unknown:
        parent = unknown[0]["loc"][:-1]
        names = ", ".join(str(e["loc"][-1]) for e in unknown if e["loc"][:-1] == parent)
        if not (parent and _is_tag(parent, len(parent) - 1)):
            return f"unknown field(s) {names}; a case has {', '.join(fields)}"
        kind, at = str(parent[-1]), format_param(_untagged(parent))
        takes = ", ".join(f for f in _SPECS[kind].model_fields if f != kind)
        return f"unknown option(s) for '{kind}'{f' in {at!r}' if at else ''}: {names} ('{kind}' takes {takes})"
    errors = [{**e, "loc": _untagged(e["loc"])} for e in errors]
    missing = [e for e in errors if e["type"] == "missing"]
    if missing:
        return f"'{format_param(missing[0]['loc'])}' is required"
    whole = [e for e in errors if not e["loc"]]  # the value itself, e.g. not a grader at all
    if whole:
        return f"{whole[0]['msg']} (got {show_value(whole[0]['input'])})"
    message = invalid_request_from_errors(errors).message  # "Invalid type for 'tags': expected ..."
    return message[:1].lower() + message[1:].removesuffix(".")


def _is_tag(loc: tuple[str | int, ...], i: int) -> bool:
    # pydantic puts the union member's tag in the location: ("expected", 0, "regex", "regex").
    return loc[i] in _SPECS and (i == 0 or isinstance(loc[i - 1], int))


def _untagged(loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    return tuple(seg for i, seg in enumerate(loc) if not _is_tag(loc, i))


def load_function(target: str) -> Callable[..., Any]:
    """Import ``package.module:function`` (ValueError if malformed or not callable)."""
    if not isinstance(target, str):
        raise ValueError("expected 'package.module:function'")
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError("expected 'package.module:function'")
    obj = pkgutil.resolve_name(target)
    if not callable(obj):
        raise ValueError("not callable")
    return obj
