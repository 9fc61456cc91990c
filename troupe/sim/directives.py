"""Parsing of the sim's ``[[...]]`` directives (see :mod:`troupe.sim.model`).

``parse_directives(text)`` returns every cue found in one user message, plus the message
with the directives removed. A malformed directive is not an error: it stays in the text.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field

from troupe.agentloop.code_interpreter import PYTHON
from troupe.agentloop.shell import SHELL

__all__ = ["CallCue", "Directives", "parse_directives"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CallCue:
    """A ``[[call]]``, ``[[python]]`` or ``[[shell]]`` (``loop=False``) or ``[[loop]]`` (``loop=True``) cue;
    ``then``: a ``[[then]]`` cue, a call of the second round (after the first round's results)."""

    name: str
    arguments: str | None
    loop: bool
    then: bool = False


@dataclass(slots=True, kw_only=True)
class Directives:
    """Every cue found in one message (built up by the parser, hence not frozen)."""

    calls: list[CallCue] = field(default_factory=list)
    cycle: list[CallCue] = field(default_factory=list)
    """The calls of a ``[[cycle]]``, in order (the last ``cycle`` in the message wins)."""
    answer: tuple[str, str] | None = None
    """(kind, argument) of the first ``say`` / ``tokens`` / ``history``."""
    think: str | None = None
    fail: tuple[int, bool] | None = None
    ttft_ms: float | None = None
    itl_ms: float | None = None
    plain: str = ""
    """The message with every directive removed."""


# Each directive's body, matched right after "[[keyword". `call` is special-cased because
# its JSON may itself contain "]]" or nested braces.
_OPEN = re.compile(r"\[\[(call|then|cycle|python|shell|say|tokens|think|loop|history|fail|latency)(?=[\s\]])")
_BODIES = {
    "say": re.compile(r"(?:\s(.*?))?\]\]", re.DOTALL),
    "think": re.compile(r"(?:\s(.*?))?\]\]", re.DOTALL),
    "tokens": re.compile(r"\s+(\d+)\s*\]\]"),
    "loop": re.compile(r"\s+([^\s\[\]]+)\s*\]\]"),
    "history": re.compile(r"\s*\]\]"),
    "fail": re.compile(r"\s+(\d{3})(\s+once)?\s*\]\]"),
    "latency": re.compile(r"((?:\s+(?:ttft|itl)\s*=\s*\d+(?:\.\d+)?)*)\s*\]\]"),
}
_PYTHON_OPEN = re.compile(r"\s*\]\]")
_PYTHON_CLOSE = "[[/python]]"
_SHELL_CLOSE = "[[/shell]]"
_CALL_NAME = re.compile(r"\s+([^\s\[\]{}]+)\s*")
_NEXT_NAME = re.compile(r"\s*([^\s\[\]{}]+)\s*")
_CLOSE = re.compile(r"\s*\]\]")
_JSON = json.JSONDecoder()


def _parse_call(text: str, start: int) -> tuple[int, CallCue] | None:
    named = _named_call(text, start)
    if named is None:
        return None
    pos, call = named
    close = _CLOSE.match(text, pos)
    return None if close is None else (close.end(), call)


def _named_call(text: str, start: int, *, first: bool = True) -> tuple[int, CallCue] | None:
    """``NAME`` and, if given, its ``{JSON}`` arguments, from ``start`` (the first after the
    keyword and a space; a later one after the one before); the position after them."""
    name = (_CALL_NAME if first else _NEXT_NAME).match(text, start)
    if name is None:
        return None
    pos, arguments = name.end(), None
    if text.startswith("{", pos):
        try:
            _, end = _JSON.raw_decode(text, pos)
        except json.JSONDecodeError:
            return None
        # Keep the JSON exactly as written: it is what "the model produced".
        arguments, pos = text[pos:end], end
    return pos, CallCue(name=name.group(1), arguments=arguments, loop=False)


def _parse_cycle(text: str, start: int) -> tuple[int, list[CallCue]] | None:
    """``[[cycle NAME {JSON} NAME {JSON} ...]]``: one or more calls, each with optional arguments."""
    calls: list[CallCue] = []
    pos = start
    while (close := _CLOSE.match(text, pos)) is None or not calls:
        named = _named_call(text, pos, first=not calls)
        if named is None:
            return None
        pos, call = named
        calls.append(call)
    return close.end(), calls


def _block(text: str, start: int, closing: str) -> tuple[int, str] | None:
    """A block directive's body: from after ``]]`` (a line break right after it skipped) up to
    ``closing`` or the end of the message; the position after it."""
    opened = _PYTHON_OPEN.match(text, start)
    if opened is None:
        return None
    close = text.find(closing, opened.end())
    end = len(text) if close < 0 else close
    body = text[opened.end() : end]
    body = body[1:] if body.startswith("\n") else body.lstrip(" ")
    return (end if close < 0 else close + len(closing)), body.rstrip()


def _parse_python(text: str, start: int) -> tuple[int, CallCue] | None:
    """``[[python]]`` then the code, up to ``[[/python]]`` or the end of the message."""
    block = _block(text, start, _PYTHON_CLOSE)
    if block is None:
        return None
    after, code = block
    return after, CallCue(name=PYTHON, arguments=json.dumps({"code": code}), loop=False)


def _parse_shell(text: str, start: int) -> tuple[int, CallCue] | None:
    """``[[shell]]`` then commands, one a line (blank lines skipped), up to ``[[/shell]]`` or the
    end of the message: a call of ``shell`` with ``{"commands": [...]}``."""
    block = _block(text, start, _SHELL_CLOSE)
    if block is None:
        return None
    after, body = block
    commands = [line.strip() for line in body.splitlines() if line.strip()]
    return after, CallCue(name=SHELL, arguments=json.dumps({"commands": commands}), loop=False)


def _parse_then(text: str, start: int) -> tuple[int, CallCue] | None:
    parsed = _parse_call(text, start)
    return None if parsed is None else (parsed[0], dataclasses.replace(parsed[1], then=True))


_BLOCKS = {"call": _parse_call, "then": _parse_then, "python": _parse_python, "shell": _parse_shell}


def parse_directives(text: str) -> Directives:
    """Find every directive in ``text``; later ``think``/``fail``/``latency`` cues win."""
    found = Directives()
    plain: list[str] = []
    pos, removed = 0, False
    while (opening := _OPEN.search(text, pos)) is not None:
        kind, body_start = opening.group(1), opening.end()
        end: int | None = None
        if kind == "cycle":
            cycled = _parse_cycle(text, body_start)
            if cycled is not None:
                end, found.cycle = cycled
        elif kind in _BLOCKS:
            parsed = _BLOCKS[kind](text, body_start)
            if parsed is not None:
                end, call = parsed
                found.calls.append(call)
        elif (body := _BODIES[kind].match(text, body_start)) is not None:
            end = body.end()
            _apply(found, kind, body)
        if end is None:  # malformed: leave it in the text as it is
            plain.append(text[pos:body_start])
            pos = body_start
            continue
        plain.append(text[pos:opening.start()])
        pos, removed = end, True
    plain.append(text[pos:])
    joined = "".join(plain)
    # Removing a directive from mid-sentence leaves a double space behind.
    found.plain = (re.sub(r"[ \t]{2,}", " ", joined) if removed else joined).strip()
    return found


def _apply(found: Directives, kind: str, body: re.Match[str]) -> None:
    match kind:
        case "say" | "tokens" | "history":
            if found.answer is None:
                found.answer = (kind, "" if kind == "history" else body.group(1) or "")
        case "think":
            found.think = body.group(1) or ""
        case "loop":
            found.calls.append(CallCue(name=body.group(1), arguments=None, loop=True))
        case "fail":
            found.fail = (int(body.group(1)), body.group(2) is not None)
        case "latency":
            for name, value in re.findall(r"(ttft|itl)\s*=\s*(\d+(?:\.\d+)?)", body.group(1)):
                setattr(found, f"{name}_ms", float(value))
