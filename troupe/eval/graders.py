"""Graders: how one sample of an evaluation case is judged.

A case's ``expected`` is one grader or a list of them; each is an object with
exactly one *kind* key, whose value is the grader's main argument, plus options::

    {"equals": "42"}                                  the answer, stripped, is exactly this
    {"equals": {"a": 1}}                              (a non-string: the answer parsed as JSON equals it)
    {"contains": "Paris"} / {"contains": ["a", "b"]}  the answer contains each of these
    {"regex": "^\\d+$"}                               re.search finds the pattern in the answer
    {"json_schema": {...}}                            the answer is JSON valid against the schema
    {"tool_called": "calculator", "arguments": {"expression": "6 * 7"}}
                                                      a tool of that name was called (with at least
                                                      those arguments, when given)
    {"python": "package.module:function", "args": {...}}
                                                      function(outcome, **args) decides (sync or async)
    {"judge": "RUBRIC", "model": "NAME"}              an LLM judge: the model reads the rubric, the
                                                      task and the answer, and ends with PASS or FAIL

Options: ``name`` (the grade's label; default the kind) on every grader;
``ignore_case`` on ``equals``, ``contains`` and ``regex``; ``arguments`` on
``tool_called``; ``args`` on ``python``; ``model`` on ``judge`` (default: the
run's judge model, else the model under evaluation).

A Python grader returns ``bool``, ``(bool, detail)`` or ``{"passed": bool,
"detail": str}``. A grader that raises (or a judge whose model fails) gives a
failed :class:`Grade` with ``error`` set; the sample is then recorded with
error kind ``grader_error``.

The judge's verdict is the last standalone ``PASS`` or ``FAIL`` word of its
answer (any case); none is a failed grade. The task and the answer are quoted
with ``[[`` broken up as ``[ [``, so the graded text cannot script the ``sim``
model: with ``sim`` as the judge, the rubric's own directive decides, e.g. a
rubric containing ``[[say PASS]]``.

Example::

    specs = parse_expected([{"contains": "42"}, {"tool_called": "calculator"}], where="case 1")
    outcome = outcome_from_response(response, input_text="What is 6 * 7?")
    grades = await grade(specs, outcome)
    passed = verdict(grades, response["status"])

The specifications are checked when the dataset loads, by the pydantic models
of :mod:`.grader_specs` (re-exported here: :data:`GraderSpec`, :func:`parse_expected`,
:func:`parse_grader`, :class:`GraderError`).
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, assert_never

from .grader_specs import (
    GRADER_KINDS,
    ContainsSpec,
    EqualsSpec,
    GraderError,
    GraderSpec,
    JsonSchemaSpec,
    JudgeSpec,
    PythonSpec,
    RegexSpec,
    ToolCalledSpec,
    load_function,
    parse_expected,
    parse_grader,
)
from .judge import judge_messages, parse_verdict

__all__ = [
    "GRADER_KINDS",
    "Grade",
    "GraderError",
    "GraderSpec",
    "Judge",
    "Outcome",
    "ToolCallRecord",
    "grade",
    "judge_messages",
    "load_function",
    "outcome_from_response",
    "parse_expected",
    "parse_grader",
    "parse_verdict",
    "verdict",
]

Judge = Callable[[str, list[dict[str, Any]]], Awaitable[str]]
"""``judge(model_name, chat_messages) -> answer text``: one model call, no tools (see :mod:`.judge`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Grade:
    """One grader's verdict on one sample."""

    grader: str
    passed: bool
    detail: str = ""
    error: bool = False
    """The grader itself failed (raised, or its judge model failed)."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"grader": self.grader, "passed": self.passed, "detail": self.detail}
        if self.error:
            out["error"] = True
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallRecord:
    """A tool call of the response, with its output when the server ran it."""

    name: str
    arguments: Any
    """The parsed JSON arguments (the raw text if they are not JSON)."""
    output: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What graders look at: the final response of one sample."""

    response: dict[str, Any]
    output_text: str
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    input_text: str = ""
    """The case's input as text (user messages joined), for the judge."""
    case_id: str = ""
    tags: tuple[str, ...] = ()


# -- the outcome of a sample -----------------------------------------------------


def outcome_from_response(
    response: dict[str, Any], *, input_text: str = "", case_id: str = "", tags: Sequence[str] = ()
) -> Outcome:
    """The graders' view of a final Response: its text (as the SDK's ``output_text``) and tool calls."""
    texts: list[str] = []
    calls: list[tuple[str | None, str, str]] = []
    outputs: dict[str | None, str] = {}  # by call_id, as the items carry it
    mcp: list[ToolCallRecord] = []
    for item in response.get("output") or []:
        kind = item.get("type")
        if kind == "message":
            texts.extend(p.get("text", "") for p in item.get("content") or [] if p.get("type") == "output_text")
        elif kind == "function_call":
            calls.append((item.get("call_id"), item.get("name", ""), item.get("arguments") or ""))
        elif kind == "function_call_output":
            output = item.get("output")
            outputs[item.get("call_id")] = output if isinstance(output, str) else json.dumps(output)
        elif kind == "mcp_call":
            mcp.append(
                ToolCallRecord(
                    name=item.get("name", ""), arguments=_json_or_text(item.get("arguments") or ""),
                    output=item.get("output"),
                )
            )  # fmt: skip
    tool_calls = [
        ToolCallRecord(name=name, arguments=_json_or_text(args), output=outputs.get(call_id))
        for call_id, name, args in calls
    ]
    return Outcome(
        response=response,
        output_text="".join(texts),
        tool_calls=tool_calls + mcp,
        input_text=input_text,
        case_id=case_id,
        tags=tuple(tags),
    )


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text) if text else {}
    except json.JSONDecodeError:
        return text


# -- grading --------------------------------------------------------------------


async def grade(
    specs: Sequence[GraderSpec], outcome: Outcome, *, judge: Judge | None = None, judge_model: str | None = None
) -> list[Grade]:
    """Run every grader on ``outcome``; never raises (a failing grader is an ``error`` grade).

    Args:
        specs: the case's graders.
        outcome: the sample's final response.
        judge: how ``judge`` graders call a model; without it they are errors.
        judge_model: the model for judges that name none.
    """
    grades = []
    for spec in specs:
        try:
            grades.append(await _grade_one(spec, outcome, judge, judge_model))
        except Exception as exc:  # a grader's own failure is recorded, never fatal
            grades.append(Grade(grader=spec.name, passed=False, detail=f"{type(exc).__name__}: {exc}", error=True))
    return grades


def verdict(grades: Sequence[Grade], status: str | None) -> bool:
    """A sample passes when every grader passed; with no graders, when its response completed."""
    if not grades:
        return status == "completed"
    return all(g.passed for g in grades)


async def _grade_one(spec: GraderSpec, outcome: Outcome, judge: Judge | None, judge_model: str | None) -> Grade:
    text = outcome.output_text
    match spec:
        case EqualsSpec():
            return _equals(spec, text)
        case ContainsSpec():
            fold = spec.ignore_case
            haystack = text.casefold() if fold else text
            missing = [n for n in spec.needles if (n.casefold() if fold else n) not in haystack]
            detail = f"missing {', '.join(map(repr, missing))}" if missing else "found all"
            return Grade(grader=spec.name, passed=not missing, detail=detail)
        case RegexSpec():
            found = re.search(spec.regex, text, re.IGNORECASE if spec.ignore_case else 0)
            detail = f"matched {found.group(0)!r}" if found else f"no match for {spec.regex!r}"
            return Grade(grader=spec.name, passed=found is not None, detail=_clip(detail))
        case JsonSchemaSpec():
            return _json_schema(spec, text)
        case ToolCalledSpec():
            return _tool_called(spec, outcome.tool_calls)
        case PythonSpec():
            return await _python(spec, outcome)
        case JudgeSpec():
            return await _judge(spec, outcome, judge, judge_model)
        case _:
            assert_never(spec)


def _equals(spec: EqualsSpec, text: str) -> Grade:
    if not isinstance(spec.equals, str):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            return Grade(grader=spec.name, passed=False, detail="the answer is not JSON")
        return Grade(grader=spec.name, passed=parsed == spec.equals, detail=_clip(f"got {parsed!r}"))
    got, want = text.strip(), spec.equals.strip()
    if spec.ignore_case:
        got, want = got.casefold(), want.casefold()
    return Grade(grader=spec.name, passed=got == want, detail="" if got == want else _clip(f"got {text.strip()!r}"))


def _json_schema(spec: JsonSchemaSpec, text: str) -> Grade:
    import jsonschema

    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return Grade(grader=spec.name, passed=False, detail=f"the answer is not JSON: {exc.msg}")
    validator = jsonschema.validators.validator_for(spec.json_schema)(spec.json_schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is None:
        return Grade(grader=spec.name, passed=True, detail="valid")
    path = "/".join(str(p) for p in error.absolute_path)
    return Grade(grader=spec.name, passed=False, detail=_clip(f"at '/{path}': {error.message}"))


def _tool_called(spec: ToolCalledSpec, calls: Sequence[ToolCallRecord]) -> Grade:
    named = [c for c in calls if c.name == spec.tool_called]
    wanted = spec.arguments
    if not named:
        called = ", ".join(c.name for c in calls) or "none"
        return Grade(grader=spec.name, passed=False, detail=f"'{spec.tool_called}' not called (called: {called})")
    if not wanted:
        return Grade(grader=spec.name, passed=True, detail=f"called {len(named)}x")
    for call in named:
        args = call.arguments if isinstance(call.arguments, dict) else {}
        if all(k in args and args[k] == v for k, v in wanted.items()):
            return Grade(grader=spec.name, passed=True, detail=_clip(f"called with {json.dumps(args)}"))
    seen = "; ".join(json.dumps(c.arguments) if not isinstance(c.arguments, str) else c.arguments for c in named)
    return Grade(grader=spec.name, passed=False, detail=_clip(f"arguments differ: {seen}"))


async def _python(spec: PythonSpec, outcome: Outcome) -> Grade:
    result = load_function(spec.python)(outcome, **spec.args)
    if inspect.isawaitable(result):
        result = await result
    if isinstance(result, bool):
        return Grade(grader=spec.name, passed=result)
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], bool):
        return Grade(grader=spec.name, passed=result[0], detail=_clip(str(result[1])))
    if isinstance(result, dict) and isinstance(result.get("passed"), bool):
        return Grade(grader=spec.name, passed=result["passed"], detail=_clip(str(result.get("detail", ""))))
    raise TypeError(f"{spec.python} returned {result!r}; expected a bool, (bool, detail) or {{'passed': bool}}")


# -- the LLM judge (prompt and verdict in .judge) -----------------------------------


async def _judge(spec: JudgeSpec, outcome: Outcome, judge: Judge | None, judge_model: str | None) -> Grade:
    model = spec.model or judge_model
    if judge is None or not model:
        return Grade(grader=spec.name, passed=False, detail="no judge model available", error=True)
    answer = await judge(model, judge_messages(spec.judge, outcome.input_text, outcome.output_text))
    passed = parse_verdict(answer)
    if passed is None:
        return Grade(grader=spec.name, passed=False, detail=_clip(f"no PASS/FAIL verdict in {answer!r}"))
    return Grade(grader=spec.name, passed=passed, detail=_clip(f"{model}: {answer.strip()}"))


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
