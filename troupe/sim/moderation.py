"""The sim's moderation model: OpenAI's moderation verdicts, scripted by the text itself.

A text is flagged under a category when it holds ``[[flag CATEGORY]]`` (score 0.9) or
``[[flag CATEGORY SCORE]]``; every other category of OpenAI's scores 0.0. A category the
sim's model does not know is scored too (a deployment's own). The sim flags from 0.5.
Served as ``POST /v1/moderations`` by the sim server (``troupe sim``) and called in process
by a ``moderation`` guardrail that names no server.

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

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from troupe.sim.bodies import bad_request, json_object, texts

__all__ = ["CATEGORIES", "MODEL", "add_moderations_route", "moderate", "moderation_response"]

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


def moderation_response(results: list[dict[str, Any]], model: str) -> dict[str, Any]:
    """A ``ModerationCreateResponse`` of ``results`` (one per input)."""
    return {"id": f"modr-{uuid.uuid4().hex}", "model": model, "results": results}


def add_moderations_route(app: FastAPI) -> None:
    """Add ``POST /v1/moderations`` to the sim app: text inputs (a string or an array of them)."""

    @app.post("/v1/moderations")
    async def moderations(request: Request) -> Any:
        body = await json_object(request)
        if isinstance(body, JSONResponse):
            return body
        inputs = texts(body)
        if not inputs or not all(isinstance(i, str) for i in inputs):
            return bad_request("'input' must be a string or an array of strings.", "input")
        return moderation_response([moderate(text) for text in inputs], body.get("model") or MODEL)
