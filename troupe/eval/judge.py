"""The LLM judge's prompt and how its verdict is read.

The judge model gets a system message asking for a final PASS or FAIL line, and a user
message with the rubric, the task and the answer. The task and the answer are quoted
with ``[[`` broken up as ``[ [``: the graded text cannot script the ``sim`` model (nor
smuggle directives to a model that takes them), so with ``sim`` as the judge only the
rubric's own directive decides, e.g. a rubric ending in ``[[say PASS]]``.

The verdict is the last standalone ``PASS`` or ``FAIL`` word of the answer, in any
case (``passes`` or ``FAILURE`` do not count); an answer without one is no verdict.

Example::

    messages = judge_messages("Names Paris. [[say PASS]]", "Capital of France?", "Paris")
    parse_verdict("The answer names Paris.\nPASS")   # True
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["JUDGE_SYSTEM", "judge_messages", "parse_verdict"]

JUDGE_SYSTEM = (
    "You are an impartial grader. Decide whether the assistant's answer satisfies the rubric. "
    "Reason briefly if you need to, then end your reply with one final line that is exactly PASS or FAIL."
)
_VERDICT = re.compile(r"\b(PASS|FAIL)\b", re.IGNORECASE)


def judge_messages(rubric: str, task: str, answer: str) -> list[dict[str, Any]]:
    """The chat messages sent to the judge model."""
    user = (
        f"Rubric:\n{rubric}\n\n"
        f"The task given to the assistant:\n<<<\n{_quote(task)}\n>>>\n\n"
        f"The assistant's answer:\n<<<\n{_quote(answer)}\n>>>\n\n"
        "Does the answer satisfy the rubric? End with PASS or FAIL."
    )
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


def parse_verdict(answer: str) -> bool | None:
    """The last standalone PASS/FAIL word (any case): True, False, or None when there is none."""
    found = _VERDICT.findall(answer)
    return None if not found else found[-1].upper() == "PASS"


def _quote(text: str) -> str:
    return text.replace("[[", "[ [")
