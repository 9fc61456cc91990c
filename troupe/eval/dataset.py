"""Evaluation datasets: one case per row, in JSONL or Parquet.

Each row is an object with these fields (anything else is an error, so a typo
does not silently drop a grader)::

    id            string (or integer), unique in the dataset            required
    input         a string, or a list of Responses input items          required
    instructions  string
    tools         list of Responses tool definitions (function tools the client would run:
                  the response then ends with the call, which ``tool_called`` can grade)
    tool_choice   "auto" | "none" | "required" | {"type": "function", "name": ...} | …
    model         the model to run (default ``sim``; ``--model`` overrides every case)
    tags          list of strings (success rate per tag in the report)
    expected      one grader or a list of graders (see :mod:`troupe.eval.graders`);
                  none: the sample passes when its response completes
    timeout_s     this case's time limit, overriding ``--timeout``
    params        further Responses create parameters, e.g. {"max_output_tokens": 20}

JSONL: one JSON object per line (blank lines and lines starting with ``//`` are
skipped). Parquet is read with DuckDB; nested columns may be structs/lists or
JSON text (``input``, ``tools``, ``tool_choice``, ``expected``, ``params``), and
struct fields that are NULL count as absent.

Every case is checked when loaded, without running anything: the row by the
:class:`EvalCase` model (JSON types as written, ``null`` counts as absent, graders
by :mod:`.grader_specs`), then its request by the same validation as
``POST /v1/responses``. A bad row raises :class:`DatasetError` naming the file,
the line and the field::

    cases.jsonl:3 (id 'q7'): invalid type for 'expected[0].ignore_case': expected a boolean, got a string

Example::

    dataset = load_dataset("examples/eval/sample.jsonl")
    for case in dataset.cases:
        body = case.request_body(model="sim")
"""

from __future__ import annotations

import decimal
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from troupe.protocol import InvalidRequest, content_text, parse_create_request

from .grader_specs import Expected, explain

__all__ = ["DEFAULT_MODEL", "Dataset", "DatasetError", "EvalCase", "input_text", "load_dataset", "parse_case"]

DEFAULT_MODEL = "sim"

# Request fields a case may not set through `params`: the runner owns them.
_RESERVED_PARAMS = frozenset(
    {"model", "input", "instructions", "tools", "tool_choice", "stream", "store", "background", "conversation",
     "previous_response_id", "metadata"}
)  # fmt: skip
_JSON_TEXT_FIELDS = ("tools", "expected", "params", "tags")


class DatasetError(ValueError):
    """The dataset cannot be read or a row is invalid; the message names the file and row."""


class EvalCase(BaseModel):
    """One evaluation case: a dataset row, validated (picklable: it travels to the eval workers)."""

    # strict: JSON types as written ("5" is not a number); extra="forbid": a typo
    # does not silently drop a grader.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    id: Annotated[str, Field(min_length=1), BeforeValidator(lambda v: str(v) if type(v) is int else v)]
    """Unique in the dataset; an integer id becomes its decimal text."""
    input: str | list[dict[str, Any]]
    """A string, or a list of Responses input items."""
    instructions: str | None = None
    """The system/developer instructions of the request."""
    tools: list[dict[str, Any]] | None = None
    """Responses tool definitions; function tools are the client's, so the response ends with the call."""
    tool_choice: str | dict[str, Any] | None = None
    """``"auto"``, ``"none"``, ``"required"`` or an object such as ``{"type": "function", "name": ...}``."""
    model: Annotated[str, Field(min_length=1)] | None = None
    """The model to run (default :data:`DEFAULT_MODEL`; ``--model`` overrides every case)."""
    tags: Annotated[tuple[str, ...], Field(strict=False)] = ()  # a JSON list is a tuple here
    """For the success rate per tag in the report."""
    expected: Expected = ()
    """The graders; none: the sample passes when its response completes."""
    timeout_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    """This case's time limit, overriding ``--timeout``."""
    params: dict[str, Any] = {}
    """Further Responses create parameters, e.g. ``{"max_output_tokens": 20}``."""
    _row: int = PrivateAttr(0)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        # As in Parquet, where a NULL cell is an absent field.
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data

    @field_validator("params")
    @classmethod
    def _no_reserved_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        reserved = sorted(set(params) & _RESERVED_PARAMS)
        if reserved:
            raise ValueError(f"may not set {', '.join(reserved)}, which a case field or the runner sets")
        return params

    @property
    def row(self) -> int:
        """1-based row (line) number in the dataset, for messages; 0 when not loaded from a file."""
        return self._row

    def request_body(self, model: str | None = None, metadata: dict[str, str] | None = None) -> dict[str, Any]:
        """The Responses create body for this case (``model`` overrides the case's own)."""
        body: dict[str, Any] = {**self.params, "model": model or self.model or DEFAULT_MODEL, "input": self.input}
        if self.instructions is not None:
            body["instructions"] = self.instructions
        if self.tools is not None:
            body["tools"] = self.tools
        if self.tool_choice is not None:
            body["tool_choice"] = self.tool_choice
        if metadata:
            body["metadata"] = metadata
        return body

    @property
    def input_text(self) -> str:
        return input_text(self.input)


@dataclass(frozen=True, slots=True, kw_only=True)
class Dataset:
    """A loaded dataset: its cases in file order and the file's digest."""

    path: str
    cases: list[EvalCase]
    sha256: str

    def models(self, *, model: str | None = None, judge_model: str | None = None) -> dict[str, str]:
        """Every model a run needs, each with its first user (``"case 'a'"``, ``"the judge of case 'a'"``).

        Args:
            model: the run's model, overriding every case's own (``--model``).
            judge_model: the model of judge graders that name none (``--judge-model``);
                without it a judge uses its case's model.
        """
        needed: dict[str, str] = {}
        for case in self.cases:
            case_model = model or case.model or DEFAULT_MODEL
            needed.setdefault(case_model, f"case {case.id!r}")
            for spec in case.expected:
                if spec.kind == "judge":
                    judge = spec.options.get("model") or judge_model or case_model
                    needed.setdefault(judge, f"the judge of case {case.id!r}")
        return needed


def input_text(value: str | list[dict[str, Any]]) -> str:
    """A case input as text: the string, or the text of its user/system messages joined by newlines."""
    if isinstance(value, str):
        return value
    messages = [item for item in value if item.get("type", "message") == "message"]
    texts = (content_text(item.get("content"), sep="\n") for item in messages)
    return "\n".join(text for text in texts if text)


def load_dataset(path: str | os.PathLike[str]) -> Dataset:
    """Read and check every case of a JSONL or Parquet (``*.parquet``) dataset.

    Raises:
        DatasetError: unreadable file, invalid row, duplicate id, an empty dataset.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read the dataset: {exc.strerror or exc}") from exc
    rows = _parquet_rows(path) if path.lower().endswith(".parquet") else _jsonl_rows(path)
    cases: list[EvalCase] = []
    seen: dict[str, int] = {}
    for number, row in rows:
        case = parse_case(row, where=f"{path}:{number}", number=number)
        if case.id in seen:
            raise DatasetError(f"{path}:{number}: duplicate id {case.id!r} (first on row {seen[case.id]})")
        seen[case.id] = number
        cases.append(case)
    if not cases:
        raise DatasetError(f"{path}: the dataset has no cases")
    return Dataset(path=path, cases=cases, sha256=digest)


def _jsonl_rows(path: str) -> Iterator[tuple[int, Any]]:
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            text = line.strip()
            if not text or text.startswith("//"):
                continue
            try:
                yield number, json.loads(text)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{number}: invalid JSON: {exc.msg} (column {exc.colno})") from None


def _parquet_rows(path: str) -> Iterator[tuple[int, Any]]:
    import duckdb

    try:
        with duckdb.connect() as conn:
            result = conn.execute("SELECT * FROM read_parquet(?)", [path])
            columns = [d[0] for d in result.description]
            rows = result.fetchall()
    except duckdb.Error as exc:
        raise DatasetError(f"{path}: cannot read Parquet: {exc}") from None
    for number, values in enumerate(rows, start=1):
        row = {c: _drop_nulls(v) for c, v in zip(columns, values, strict=True) if v is not None}
        for name in _JSON_TEXT_FIELDS:
            if isinstance(row.get(name), str):
                row[name] = _json_text(row[name], path, number, name)
        if isinstance(row.get("tool_choice"), str) and row["tool_choice"].lstrip().startswith("{"):
            row["tool_choice"] = _json_text(row["tool_choice"], path, number, "tool_choice")
        if isinstance(row.get("input"), str) and row["input"].lstrip().startswith("[{"):
            try:  # a JSON list of items; anything else is a plain string input
                items = json.loads(row["input"])
                if isinstance(items, list) and all(isinstance(i, dict) for i in items):
                    row["input"] = items
            except json.JSONDecodeError:
                pass
        yield number, row


def _drop_nulls(value: Any) -> Any:
    """Parquet structs have every field of the column; a NULL one counts as absent. Decimals become floats."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _json_text(text: str, path: str, number: int, name: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}:{number}: '{name}' is text but not JSON: {exc.msg}") from None


def parse_case(row: Any, *, where: str, number: int = 0) -> EvalCase:
    """One row as an :class:`EvalCase`; DatasetError (naming ``where`` and the field) if it is invalid."""
    if not isinstance(row, dict):
        raise DatasetError(f"{where}: a case must be a JSON object")
    if type(row.get("id")) in (str, int) and row["id"] != "":  # a usable id names the case in messages
        where = f"{where} (id {str(row['id'])!r})"
    try:
        case = EvalCase.model_validate(row)
    except ValidationError as exc:
        raise DatasetError(f"{where}: {explain(exc, fields=list(EvalCase.model_fields))}") from None
    case._row = number
    try:  # the same validation as POST /v1/responses, without running anything
        parse_create_request(case.request_body())
    except InvalidRequest as exc:
        param = f" ({exc.param})" if exc.param else ""
        raise DatasetError(f"{where}: invalid request{param}: {exc.message}") from None
    return case
