"""Batch evaluation, the Ray-free parts: datasets, graders, metrics, reports.

- :mod:`.dataset` — :func:`load_dataset`: JSONL / Parquet cases, checked on load
- :mod:`.graders` — ``equals``, ``contains``, ``regex``, ``json_schema``, ``tool_called``,
  Python graders and the LLM judge (:mod:`.judge`: its prompt and verdict); :func:`grade`
- :mod:`.grader_specs` — the grader objects of a case's ``expected``, as pydantic models
- :mod:`.metrics` — :func:`pass_at_k`, :func:`pass_hat_k` (unbiased estimators), :func:`summarize`
- :mod:`.report` — the text report and the comparison of two runs
- :mod:`.charts` — PNG charts (matplotlib)
- :mod:`.progress` — the live progress bar

The cases run on Ray in ``troupe.runtime.ray.eval``; the ``troupe eval`` commands
(``run``, ``report``, ``compare``, ``export``, ``list``) are in ``troupe.cli.eval`` and ``troupe.cli.eval_run``.
"""

from .dataset import DEFAULT_MODEL, Dataset, DatasetError, EvalCase, input_text, load_dataset, parse_case
from .grader_specs import (
    ContainsSpec,
    EqualsSpec,
    JsonSchemaSpec,
    JudgeSpec,
    PythonSpec,
    RegexSpec,
    ToolCalledSpec,
)
from .graders import (
    GRADER_KINDS,
    Grade,
    GraderError,
    GraderSpec,
    Judge,
    Outcome,
    ToolCallRecord,
    grade,
    judge_messages,
    outcome_from_response,
    parse_expected,
    parse_grader,
    parse_verdict,
    verdict,
)
from .metrics import PassK, Quantiles, Summary, default_ks, pass_at_k, pass_hat_k, percentile, quantiles, summarize
from .progress import Progress
from .report import CaseDiff, compare_runs, render_comparison, render_report

__all__ = [
    "CaseDiff",
    "ContainsSpec",
    "DEFAULT_MODEL",
    "Dataset",
    "DatasetError",
    "EqualsSpec",
    "EvalCase",
    "GRADER_KINDS",
    "Grade",
    "GraderError",
    "GraderSpec",
    "JsonSchemaSpec",
    "Judge",
    "JudgeSpec",
    "Outcome",
    "PassK",
    "Progress",
    "PythonSpec",
    "Quantiles",
    "RegexSpec",
    "Summary",
    "ToolCallRecord",
    "ToolCalledSpec",
    "compare_runs",
    "default_ks",
    "grade",
    "input_text",
    "judge_messages",
    "load_dataset",
    "outcome_from_response",
    "parse_case",
    "parse_expected",
    "parse_grader",
    "parse_verdict",
    "pass_at_k",
    "pass_hat_k",
    "percentile",
    "quantiles",
    "render_comparison",
    "render_report",
    "summarize",
    "verdict",
]
