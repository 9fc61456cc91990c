"""The sim's moderation model and judge: OpenAI's moderation verdicts, and a ``judge``
guardrail's answers, scripted by the text itself.

A text is flagged under a category when it holds ``[[flag CATEGORY]]`` (score 0.9) or
``[[flag CATEGORY SCORE]]``; every other category of OpenAI's scores 0.0. A category the
sim's model does not know is scored too (a deployment's own). The sim flags from 0.5.
Served as ``POST /v1/moderations`` by the sim server (``troupe sim``) and called in process
by a ``moderation`` guardrail that names no server. Pure: no HTTP, no FastAPI.

Example::

    >>> moderate("fine")["flagged"]
    False
    >>> moderate("[[flag violence 0.7]] grr")["category_scores"]["violence"]
    0.7
"""

from __future__ import annotations

import re
import uuid
from typing import Any

__all__ = ["CATEGORIES", "MODEL", "judge", "moderate", "moderation_response"]

MODEL = "sim-moderation"
"""The name the sim's moderation model answers with when a request names none."""

CATEGORIES: dict[str, tuple[str, ...]] = {
    "harassment": ("text",),
    "harassment/threatening": ("text",),
    "hate": ("text",),
    "hate/threatening": ("text",),
    "illicit": ("text",),
    "illicit/violent": ("text",),
    "self-harm": ("text",),
    "self-harm/instructions": ("text",),
    "self-harm/intent": ("text",),
    "sexual": ("text",),
    "sexual/minors": ("text",),
    "violence": ("text",),
    "violence/graphic": ("text",),
}
"""OpenAI's moderation categories and the input types each is scored on (text only here)."""

_FLAG = re.compile(r"\[\[flag\s+([\w/-]+)(?:\s+([01](?:\.\d+)?))?\s*\]\]")
THRESHOLD = 0.5
"""The sim's own: a category scoring this or more is flagged."""


def moderate(text: str) -> dict[str, Any]:
    """The moderation of ``text`` (one ``Moderation`` of the SDK, as JSON)."""
    scores = dict.fromkeys(CATEGORIES, 0.0)
    for category, score in _FLAG.findall(text):
        scores[category] = float(score) if score else 0.9
    return {
        "flagged": any(s >= THRESHOLD for s in scores.values()),
        "categories": {c: s >= THRESHOLD for c, s in scores.items()},
        "category_scores": scores,
        "category_applied_input_types": {c: list(CATEGORIES.get(c, ("text",))) for c in scores},
    }


_CONVERSATION = re.compile(r"<BEGIN CONVERSATION>(.*)<END CONVERSATION>", re.DOTALL)


def judge(prompt: str) -> str | None:
    """The sim's answer to a ``judge`` guardrail's prompt (one holding a conversation between
    ``<BEGIN CONVERSATION>`` and ``<END CONVERSATION>``, as ``JUDGE_PROMPT``'s does): ``unsafe``
    and, on a second line, the categories the conversation's ``[[flag CATEGORY]]`` name
    (flagged from 0.5, as :func:`moderate`), else ``safe``; None for any other prompt."""
    found = _CONVERSATION.search(prompt)
    if found is None:
        return None
    flagged = [c for c, score in _FLAG.findall(found.group(1)) if (float(score) if score else 0.9) >= THRESHOLD]
    return "unsafe\n" + ",".join(dict.fromkeys(flagged)) if flagged else "safe"


def moderation_response(results: list[dict[str, Any]], model: str) -> dict[str, Any]:
    """A ``ModerationCreateResponse`` of ``results`` (one per input)."""
    return {"id": f"modr-{uuid.uuid4().hex}", "model": model, "results": results}
