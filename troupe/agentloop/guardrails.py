"""Guardrails: checks of the text that goes into and comes out of the agent loop.

A request's guardrails (:class:`Guardrails`, built by the runtime from the ``[[guardrails]]``
its tenant, its model and the request itself name) look at four stages:

* ``input``: the turn's new input, before the first model call. A block means no model call:
  the response completes with a message whose one part is a ``refusal`` naming the category.
* ``output``: the model's text as it streams. :class:`OutputGate` holds back only what could
  still become a match (or, for a classifier, a window of text until it is classified); a
  block stops the text there (what was refused is never sent) and the response ends
  ``incomplete``, reason ``content_filter``. Redaction rewrites the text before it is sent.
* ``tool_call``: a server-side tool call's arguments, before it runs. A block means the call
  does not run; the model is told why.
* ``tool_output``: a tool's result, before the model sees it (where prompt injection comes
  in). Redaction rewrites it; a block replaces it with a notice.

A verdict names categories, never the matched text. Each check is also a step of the
response's step traces (``kind = "guardrail"``), timed.

The checks are pure and in process (``regex``). Example (a ``[[guardrails]]`` entry's
``GuardrailSpec`` has the fields a :class:`RegexCheck` takes)::

    rails = Guardrails([RegexCheck(spec.name, spec.stages, spec.rules, spec.window)])
    verdicts = await rails.check("input", "my card is 4111 1111 1111 1111")
    if blocked(verdicts): ...
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = [
    "Check",
    "Classifier",
    "Finding",
    "GuardrailUnavailable",
    "Guardrails",
    "JUDGE_CATEGORIES",
    "JUDGE_PROMPT",
    "JudgeCheck",
    "ModerationCheck",
    "OutputGate",
    "RegexCheck",
    "RequestModeration",
    "Rule",
    "Verdict",
    "blocked",
    "moderation_result",
    "refusal_text",
    "withheld_text",
]

Stage = Literal["input", "output", "tool_call", "tool_output"]


@dataclass(frozen=True, slots=True)
class Finding:
    """What one check found in a text."""

    categories: dict[str, bool]
    """Each category the check knows → whether the text is flagged under it."""
    block: bool
    """The text must not go on."""
    text: str
    """The text as it may go on: redacted where a redact rule matched, else the text given."""
    settled: int
    """How much of :attr:`text` is settled: its end, or for a part (``end`` given), past the
    last match that began before ``end``."""


class Check(Protocol):
    """A guardrail that matches patterns in process (``regex``)."""

    name: str
    stages: frozenset[str]
    window: int

    def find(self, text: str, start: int = 0, end: int | None = None, *, open_end: bool = False) -> Finding:
        """Check the matches in ``text`` that begin in ``[start, end)`` (``end`` None: its
        end); the characters around them are context (a look-behind sees them). ``open_end``:
        the text goes on (a stream), so a match that reaches its end, or that could begin there
        and grow into one (a partial match), is left for later: :attr:`Finding.settled` stops at
        its start."""
        ...


class Classifier(Protocol):
    """A guardrail that asks a model whether a text may pass (``moderation``, ``judge``): it
    flags, never rewrites, and costs a call, so streamed output is sent to it a ``window`` at a
    time."""

    name: str
    stages: frozenset[str]
    window: int
    model: str | None
    """The model that answers, as the verdicts' steps name it."""

    async def classify(self, text: str, stage: Stage = "input") -> tuple[dict[str, bool], dict[str, float]]:
        """The categories ``text`` (found at ``stage``) is flagged under, and their scores.
        Raises :class:`GuardrailUnavailable` when the model cannot answer."""
        ...


class GuardrailUnavailable(Exception):
    """A classifier's model could not answer (its server failed, or took too long)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """One check of one text at one stage, timed: a step of the response's traces."""

    guardrail: str
    stage: Stage
    categories: dict[str, bool]
    blocked: bool
    redacted: bool
    started_at: float
    ended_at: float
    scores: dict[str, float] | None = None
    """A classifier's scores by category (a ``moderation`` guardrail's); None for patterns."""
    error: str | None = None
    """Why the check could not be made (its server failed): the text did not pass."""
    model: str | None = None
    """The model a classifier asked (its call is this step's time); None for patterns."""

    @property
    def flagged(self) -> list[str]:
        """The categories the text was flagged under."""
        return [c for c, hit in self.categories.items() if hit]


def blocked(verdicts: Sequence[Verdict]) -> Verdict | None:
    """The first verdict that blocks; None if the text may go on."""
    return next((v for v in verdicts if v.blocked), None)


def refusal_text(verdict: Verdict) -> str:
    """What the client is told when ``verdict`` refuses the input: the guardrail and the
    categories, never the text that matched."""
    return f"I can't help with that: the request was blocked by guardrail '{verdict.guardrail}' ({_why(verdict)})."


def _why(verdict: Verdict) -> str:
    return ", ".join(verdict.flagged) if verdict.error is None else "it could not be checked"


def withheld_text(verdict: Verdict) -> str:
    """What the model is told in place of a tool's arguments' or result's use, when blocked."""
    what = "call" if verdict.stage == "tool_call" else "result"
    return (
        f"Error: the tool {what} was blocked by guardrail '{verdict.guardrail}' "
        f"({_why(verdict)}); it was not {'run' if what == 'call' else 'shown'}."
    )


class Rule(Protocol):
    """One pattern of a ``regex`` guardrail (``GuardrailRule`` in the settings)."""

    @property
    def category(self) -> str: ...
    @property
    def pattern(self) -> str: ...
    @property
    def action(self) -> Literal["block", "redact"]: ...
    @property
    def replacement(self) -> str | None: ...
    @property
    def ignore_case(self) -> bool: ...


class RegexCheck:
    """A ``regex`` guardrail: its rules, searched in process.

    The block rules are one alternation, and so are the redact rules (each rule a named group
    with its own flags), so a text is scanned once for each."""

    model: str | None = None  # no model: patterns

    def __init__(self, name: str, stages: Iterable[str], rules: Sequence[Rule], window: int) -> None:
        self.name = name
        self.stages: frozenset[str] = frozenset(stages)
        self.window = window
        self.categories = tuple(dict.fromkeys(r.category for r in rules))
        self._category: dict[str, str] = {}
        self._replacement: dict[str, str] = {}
        block: list[str] = []
        redact: list[str] = []
        for i, rule in enumerate(rules):
            group = f"r{i}"
            self._category[group] = rule.category
            flags = "(?i:" if rule.ignore_case else "(?:"
            (block if rule.action == "block" else redact).append(f"(?P<{group}>{flags}{rule.pattern}))")
            if rule.action == "redact":
                self._replacement[group] = rule.replacement if rule.replacement is not None else f"[{rule.category}]"
        import regex  # on the first regex guardrail: most hosts have none (a tenth of a second to import)

        self._block = regex.compile("|".join(block)) if block else None
        self._redact = regex.compile("|".join(redact)) if redact else None

    def find(self, text: str, start: int = 0, end: int | None = None, *, open_end: bool = False) -> Finding:
        stop = len(text) if end is None else end
        hits = dict.fromkeys(self.categories, False)
        block = False
        if self._block is not None:
            for match in self._block.finditer(text, start, partial=open_end):
                if match.start() >= stop:
                    break
                if open_end and (match.partial or match.end() == len(text)):  # it may still become (or grow into) one
                    stop = match.start()
                    break
                hits[self._category[match.lastgroup or ""]] = block = True
        if self._redact is None:
            return Finding(hits, block, text, stop)
        parts, last, settled = [text[:start]], start, stop
        for match in self._redact.finditer(text, start, partial=open_end):
            if match.start() >= stop:
                break
            if open_end and (
                match.partial or match.end() > stop or self._redact.fullmatch(text, match.start(), partial=True)
            ):
                # It could still grow to the end of the text (a greedy pattern stops short of a
                # trailing "."): redacted once it is whole, and never past what is settled.
                settled = match.start()
                break
            hits[self._category[match.lastgroup or ""]] = True
            parts += [text[last : match.start()], self._replacement[match.lastgroup or ""]]
            last = match.end()
            settled = max(settled, last)
        if last == start:
            return Finding(hits, block, text, settled)
        head = "".join(parts)  # positions from the last match on move by the difference
        return Finding(hits, block, head + text[last:], settled + len(head) - last)

    async def classify(self, text: str, stage: Stage = "input") -> tuple[dict[str, bool], dict[str, float]]:
        """Its categories for ``text`` as a classifier answers them: score 1 where a rule matched."""
        categories = self.find(text).categories
        return categories, {c: 1.0 if hit else 0.0 for c, hit in categories.items()}


class ModerationCheck:
    """A ``moderation`` guardrail: OpenAI's moderation verdicts, from ``moderate`` (a
    ``/v1/moderations`` server, or the sim's model in process), which answers one text's
    ``Moderation`` JSON. With ``thresholds`` only those categories count, each flagged from its
    score; without, the model's own ``categories`` decide."""

    def __init__(
        self, name: str, stages: Iterable[str], window: int,
        moderate: Callable[[str], Awaitable[dict[str, Any]]], thresholds: dict[str, float] | None = None,
        model: str | None = None,
    ) -> None:  # fmt: skip
        self.name = name
        self.stages: frozenset[str] = frozenset(stages)
        self.window = window
        self.moderate = moderate
        self.thresholds = thresholds or {}
        self.model = model

    async def classify(self, text: str, stage: Stage = "input") -> tuple[dict[str, bool], dict[str, float]]:
        result = await self.moderate(text)
        try:
            scores = {str(c): float(v) for c, v in result["category_scores"].items()}
            if self.thresholds:
                return {c: scores.get(c, 0.0) >= t for c, t in self.thresholds.items()}, scores
            return {str(c): bool(v) for c, v in result["categories"].items()}, scores
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise GuardrailUnavailable(f"the moderation answer is not OpenAI's shape ({exc!r})") from None


JUDGE_PROMPT = """You are a safety classifier. Decide whether the last {role} message in the conversation below is unsafe under any of these categories.

<BEGIN UNSAFE CONTENT CATEGORIES>
{categories}
<END UNSAFE CONTENT CATEGORIES>

<BEGIN CONVERSATION>

{role}: {text}

<END CONVERSATION>

Answer for the last {role} message only:
- on the first line, 'safe' or 'unsafe';
- if unsafe, on the second line, the codes of the categories it violates, separated by commas."""
"""The ``judge`` kind's default prompt, laid out as Llama Guard models expect theirs: the
``{categories}`` (``S1: Violent Crimes.``, one a line), the ``{role}`` whose text is judged, the
``{text}``, and the answer's two lines. A deployment's own prompt may use the same three fields
(``{{`` and ``}}`` for a literal brace)."""

JUDGE_ROLES: dict[str, str] = {"input": "User", "output": "Agent", "tool_call": "Agent", "tool_output": "Tool"}
"""Whose text each stage judges, as the prompt's ``{role}`` names it."""

JUDGE_CATEGORIES: dict[str, str] = {
    "violent-crimes": "Violent Crimes",
    "non-violent-crimes": "Non-Violent Crimes",
    "sex-related-crimes": "Sex-Related Crimes",
    "child-sexual-exploitation": "Child Sexual Exploitation",
    "defamation": "Defamation",
    "specialized-advice": "Specialized Advice",
    "privacy": "Privacy",
    "intellectual-property": "Intellectual Property",
    "indiscriminate-weapons": "Indiscriminate Weapons",
    "hate": "Hate",
    "suicide-and-self-harm": "Suicide & Self-Harm",
    "sexual-content": "Sexual Content",
    "elections": "Elections",
    "code-interpreter-abuse": "Code Interpreter Abuse",
}
"""The default categories, by the names verdicts use → their titles in the prompt: the MLCommons
hazard taxonomy, in the order Llama Guard 3 numbers it (``S1`` … ``S14``)."""


class JudgeCheck:
    """A ``judge`` guardrail: a chat model asked whether a text is safe (the Llama Guard way).

    ``ask`` sends it one prompt (:data:`JUDGE_PROMPT` filled in, or the deployment's) and
    answers its text. The first line that is not blank must be ``safe`` or ``unsafe``; after
    ``unsafe``, the next line lists the violated categories, comma-separated, each by its code
    (``S3``: the third category) or its name or title (any case). A code or name the judge
    made up is flagged as it wrote it; ``unsafe`` with no list is flagged as ``unsafe``. Any
    other answer is no verdict: :class:`GuardrailUnavailable`, and the text does not pass.

    Example::

        >>> import asyncio
        >>> async def ask(prompt): return "unsafe\nS10"
        >>> asyncio.run(JudgeCheck("guard", ["input"], 256, ask, model="llama-guard").classify("..."))[0]["hate"]
        True
    """

    def __init__(
        self, name: str, stages: Iterable[str], window: int, ask: Callable[[str], Awaitable[str]], *,
        model: str | None = None, categories: dict[str, str] | None = None, prompt: str = JUDGE_PROMPT,
    ) -> None:  # fmt: skip
        self.name = name
        self.stages: frozenset[str] = frozenset(stages)
        self.window = window
        self.ask = ask
        self.model = model
        self.categories = dict(categories or JUDGE_CATEGORIES)
        self.prompt = prompt
        self._listed = "\n".join(f"S{i}: {title}." for i, title in enumerate(self.categories.values(), 1))
        self._names: dict[str, str] = {}
        for i, (key, title) in enumerate(self.categories.items(), 1):
            self._names.update({f"s{i}": key, key.lower(): key, title.lower(): key})

    def prompt_for(self, text: str, stage: Stage = "input") -> str:
        """The prompt that judges ``text`` found at ``stage``."""
        return self.prompt.format(role=JUDGE_ROLES[stage], categories=self._listed, text=text)

    async def classify(self, text: str, stage: Stage = "input") -> tuple[dict[str, bool], dict[str, float]]:
        answer = await self.ask(self.prompt_for(text, stage))
        flagged = self.parse(answer)
        categories = dict.fromkeys(self.categories, False) | dict.fromkeys(flagged, True)
        return categories, {c: 1.0 if hit else 0.0 for c, hit in categories.items()}

    def parse(self, answer: str) -> list[str]:
        """The categories a judge's ``answer`` flags ([] for ``safe``); raises
        :class:`GuardrailUnavailable` for an answer that is neither."""
        lines = [line.strip(" *`'\"") for line in answer.strip().splitlines()]
        lines = [line for line in lines if line]
        word, _, rest = (lines[0] if lines else "").partition(" ")
        verdict = word.strip(".:,").lower()
        if verdict == "safe" and not rest:
            return []
        if verdict != "unsafe":
            raise GuardrailUnavailable(f"the judge answered neither 'safe' nor 'unsafe' ({answer.strip()[:80]!r})")
        listed = rest or (lines[1] if len(lines) > 1 else "")
        named = (c.strip(" .:*`'\"") for c in listed.split(","))
        flagged = [self._names.get(c.lower(), c) for c in named if c]
        return list(dict.fromkeys(flagged)) or ["unsafe"]


@dataclass(frozen=True, slots=True)
class RequestModeration:
    """OpenAI's ``moderation`` request parameter: one classifier on the input and on the
    output, each ``score`` (the result is recorded on the response's ``moderation``) or
    ``block`` (recorded, and a flagged text is refused as a guardrail's is)."""

    check: Classifier
    model: str
    """The ``model`` the results name."""
    input: Literal["score", "block"] = "score"
    output: Literal["score", "block"] = "score"


def moderation_result(verdict: Verdict, model: str) -> dict[str, Any]:
    """A verdict as the Response's ``moderation.input`` or ``.output``: a ``moderation_result``,
    or an ``error`` when the model could not answer."""
    if verdict.error is not None:
        return {"code": "moderation_failed", "message": verdict.error, "type": "error"}
    return {
        "categories": dict(verdict.categories),
        "category_applied_input_types": {c: ["text"] for c in verdict.categories},
        "category_scores": dict(verdict.scores or {}),
        "flagged": bool(verdict.flagged),
        "model": model,
        "type": "moderation_result",
    }


@dataclass(slots=True)
class Guardrails:
    """The checks one request runs, and the verdicts they gave (in order)."""

    checks: Sequence[Check | Classifier]
    clock: Callable[[], float] = time.time
    verdicts: list[Verdict] = field(default_factory=list)
    """Every verdict so far; the driver turns new ones into step traces."""
    moderation: RequestModeration | None = None
    """The request's own ``moderation`` parameter, if it gave one."""

    def __bool__(self) -> bool:
        return bool(self.checks) or self.moderation is not None

    def at(self, stage: Stage) -> list[Check | Classifier]:
        """The checks that look at ``stage``."""
        return [c for c in self.checks if stage in c.stages]

    async def check(self, stage: Stage, text: str) -> tuple[str, Verdict | None]:
        """Check ``text`` at ``stage`` with each of its checks in turn: the text as it may go on
        (redacted), and the verdict that blocked it (None: it may go on)."""
        for check in self.at(stage):
            if isinstance(check, RegexCheck):
                started = self.clock()
                found = check.find(text)
                verdict = Verdict(
                    check.name, stage, found.categories, found.block, found.text != text, started, self.clock()
                )
                self.verdicts.append(verdict)
                text = found.text
            else:
                verdict = await self.classify(check, stage, text)  # type: ignore[arg-type]
            if verdict.blocked:
                return text, verdict
        return text, None

    async def classify(self, check: Classifier, stage: Stage, text: str) -> Verdict:
        """``check``'s verdict on ``text``, kept; a model that cannot answer blocks (fails closed)."""
        started = self.clock()
        try:
            categories, scores = await check.classify(text, stage)
            verdict = Verdict(check.name, stage, categories, any(categories.values()), False, started, self.clock(),
                              scores, model=check.model)  # fmt: skip
        except GuardrailUnavailable as exc:
            verdict = Verdict(check.name, stage, {}, True, False, started, self.clock(), None, str(exc), check.model)
        self.verdicts.append(verdict)
        return verdict


class OutputGate:
    """The ``output`` stage over a stream of text: what of the model's text may be sent.

    :meth:`feed` takes each delta and answers what may go to the client now; :meth:`end` the
    rest. Two layers, in turn:

    * patterns (``regex``): a match is only judged whole, so the tail of the text that could
      still become one (a partial match, or a match that reaches the end and may grow) is held
      back until the text after it decides; the rest goes. A blocked pattern is caught before
      any of it is sent, a redacted one is rewritten before it is, and text that cannot begin a
      match is not held at all;
    * classifiers (``moderation``): the text the patterns let through waits until a
      classifier's ``window`` of it has gathered (or the text ends), then the whole text so
      far is classified, one call per window.

    Once a check blocks, :attr:`verdict` says which and nothing more is released.
    """

    def __init__(self, rails: Guardrails) -> None:
        self.rails = rails
        checks = rails.at("output")
        self.patterns = [c for c in checks if isinstance(c, RegexCheck)]
        self.classifiers: list[Classifier] = [c for c in checks if not isinstance(c, RegexCheck)]  # type: ignore[misc]
        if rails.moderation is not None and rails.moderation.output == "block":
            self.classifiers.append(rails.moderation.check)
        self.batch = max((c.window for c in self.classifiers), default=0)
        self.text = ""
        """The model's text so far, redacted up to :attr:`done`."""
        self.done = 0
        """How much of :attr:`text` the patterns let through."""
        self.sent = ""
        """The text released so far, as the client sees it."""
        self.verdict: Verdict | None = None
        """The verdict that blocked the text, if one did."""

    def __bool__(self) -> bool:
        return bool(self.patterns or self.classifiers)

    async def feed(self, delta: str) -> str:
        """Take a delta of the model's text; the text that may be sent now ("" for none)."""
        self.text += delta
        return await self._classified(self._release(final=False), final=False)

    async def end(self) -> str:
        """The model's text is whole: the rest that may be sent."""
        return await self._classified(self._release(final=True), final=True)

    def _release(self, *, final: bool) -> str:
        """What the patterns let through: up to the first match that is not whole yet (it
        reaches the end of the text, or could begin there), everything once ``final``."""
        if self.verdict is not None:
            return ""
        text, cut = self.text, None
        for check in self.patterns:  # each sees what the one before settled, redacted
            started = self.rails.clock()
            found = check.find(text, self.done, cut, open_end=not final)
            changed = found.text != text
            if found.block or changed or final:  # a clean part of the stream is not worth a step
                verdict = Verdict(
                    check.name, "output", found.categories, found.block, changed, started, self.rails.clock()
                )
                self.rails.verdicts.append(verdict)
                if verdict.blocked:
                    self.verdict = verdict
                    return ""
            text, cut = found.text, found.settled
        cut = len(text) if cut is None else cut
        released = text[self.done : cut]
        self.text, self.done = text, cut
        return released

    async def _classified(self, passed: str, *, final: bool) -> str:
        """What the classifiers let through of the text the patterns passed: held until a
        window of it has gathered (or the text ends), then classified with all before it."""
        if not self.classifiers or self.verdict is not None:
            self.sent += passed if self.verdict is None else ""
            return passed if self.verdict is None else ""
        waiting = self.text[len(self.sent) : self.done]  # passed by the patterns, not yet classified
        if not waiting or (len(waiting) < self.batch and not final):
            return ""
        for check in self.classifiers:
            verdict = await self.rails.classify(check, "output", self.sent + waiting)
            if verdict.blocked:
                self.verdict = verdict
                return ""
        self.sent += waiting
        return waiting
