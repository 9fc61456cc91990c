"""Example Python graders (``{"python": "troupe.eval.example_graders:NAME", "args": {...}}``).

A Python grader is any importable ``function(outcome, **args)``, sync or async,
returning ``bool``, ``(bool, detail)`` or ``{"passed": bool, "detail": str}``;
``outcome`` is a :class:`~troupe.eval.graders.Outcome` (the final response, its
text, its tool calls with their outputs). The sample dataset uses these; copy
them as a starting point for your own.
"""

from __future__ import annotations

import re

from .graders import Outcome

__all__ = ["answer_is_number", "min_tool_calls", "status_is", "answer_uses_tool_output"]


def answer_is_number(outcome: Outcome) -> tuple[bool, str]:
    """The answer's last word is a number (``calculator -> 42`` passes)."""
    words = outcome.output_text.split()
    last = words[-1] if words else ""
    ok = re.fullmatch(r"-?\d+(\.\d+)?", last) is not None
    return ok, f"last word {last!r}"


def min_tool_calls(outcome: Outcome, n: int = 1) -> tuple[bool, str]:
    """At least ``n`` tool calls were made."""
    made = len(outcome.tool_calls)
    return made >= n, f"{made} tool call(s)"


def status_is(outcome: Outcome, status: str = "completed") -> tuple[bool, str]:
    """The response ended with this status (``completed``, ``incomplete``, …)."""
    got = outcome.response.get("status")
    reason = (outcome.response.get("incomplete_details") or {}).get("reason")
    return got == status, f"status {got}" + (f" ({reason})" if reason else "")


def answer_uses_tool_output(outcome: Outcome, tool: str) -> dict[str, object]:
    """Every output of ``tool`` appears in the answer (the model reported what the tool said)."""
    outputs = [c.output for c in outcome.tool_calls if c.name == tool and c.output is not None]
    if not outputs:
        return {"passed": False, "detail": f"no output of '{tool}'"}
    missing = [o for o in outputs if o not in outcome.output_text]
    return {"passed": not missing, "detail": f"missing {missing!r}" if missing else "all reported"}
