"""Loop guards: stop an agent loop that goes round in circles.

A model can get stuck calling tools: the same call again and again, two calls taking turns,
or one tool polled for ever. Each guard looks at the tool calls of the response's model turns
so far (one *round* per turn that called tools) and trips when its count is reached:

=============  ================================================================================
guard          trips when
=============  ================================================================================
``repeat``     the same calls (tools and arguments, whatever their order) make the last N rounds
``alternate``  two different rounds take turns for the last 2N rounds (A B A B: N times each)
``poll``       the last N rounds each call one tool, the same one, whatever its arguments
=============  ================================================================================

All are off unless configured (per model, and per request with the ``loop_guards`` extension
field); the loop's own cap, ``max_infer_iters``, bounds every response regardless. A tripped
guard gets the model one last turn without tools, told why (:meth:`Tripped.note`), and the
response ends ``incomplete``: ``incomplete_details = {"reason": "max_messages", "loop_guard":
<guard>}``. Pure: :func:`tripped` is checked by :func:`~troupe.agentloop.decide.decide`.

Example::

    >>> calls = [ToolCall(call_id="c1", name="status", arguments='{"job": 1}')]
    >>> rounds = (round_of(calls),) * 3
    >>> tripped(rounds, LoopGuards(repeat=3)).guard
    'repeat'
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Literal

from .model import ToolCall

__all__ = ["GUARDS", "LoopGuards", "Round", "Tripped", "round_of", "tripped"]

Guard = Literal["repeat", "alternate", "poll"]
GUARDS: tuple[Guard, ...] = ("repeat", "alternate", "poll")
"""The guards, in the order they are checked."""

Round = tuple[tuple[str, str], ...]
"""One model turn's tool calls: ``(name, arguments)`` pairs, sorted, the arguments' JSON
canonical (keys sorted), so that the same calls compare equal however they were written."""


@dataclass(frozen=True, slots=True)
class LoopGuards:
    """The guards' counts; None: that guard is off."""

    repeat: int | None = None
    alternate: int | None = None
    poll: int | None = None

    def __bool__(self) -> bool:
        return any(getattr(self, g) is not None for g in GUARDS)

    def tighter(self, other: LoopGuards | None) -> LoopGuards:
        """Each guard at the lower of the two counts (one that is off takes the other's): a
        request may turn a guard on or tighten it, never loosen the model's."""
        if other is None:
            return self
        pairs = ((getattr(self, f.name), getattr(other, f.name)) for f in fields(self))
        return LoopGuards(*(min((c for c in pair if c is not None), default=None) for pair in pairs))


@dataclass(frozen=True, slots=True)
class Tripped:
    """A guard that stopped the loop, and the calls it saw."""

    guard: Guard
    tools: tuple[str, ...]
    """The tools of the rounds that tripped it (their names, once each, in order)."""
    rounds: int
    """How many rounds in a row it saw."""

    def note(self) -> str:
        """What the model is told on its last turn (a system message, sent only then)."""
        named = " and ".join(f"'{t}'" for t in self.tools)
        seen = {
            "repeat": f"called {named} with the same arguments {self.rounds} times in a row",
            "alternate": f"alternated between the same two calls of {named} {self.rounds} times",
            "poll": f"called {named} {self.rounds} times in a row",
        }[self.guard]
        return (
            f"The server stopped the tool loop (loop guard '{self.guard}'): you {seen}. No more tools can be "
            "called in this response. Answer the user with what you have, and say that the loop was stopped."
        )

    def detail(self) -> dict[str, object]:
        """Its step trace's ``detail``."""
        return {"guard": self.guard, "tools": list(self.tools), "rounds": self.rounds}


def round_of(calls: Sequence[ToolCall]) -> Round:
    """The round a turn's ``calls`` make."""
    return tuple(sorted((c.name, _canonical(c.arguments)) for c in calls))


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return arguments.strip()


def tripped(rounds: Sequence[Round], guards: LoopGuards) -> Tripped | None:
    """The first guard the last ``rounds`` trip, if one does."""
    if guards.repeat is not None and len(rounds) >= guards.repeat:
        last = rounds[-guards.repeat :]
        if all(r == last[0] for r in last):
            return Tripped("repeat", _tools(last), guards.repeat)
    if guards.alternate is not None and len(rounds) >= 2 * guards.alternate:
        last = rounds[-2 * guards.alternate :]
        a, b = last[0], last[1]
        if a != b and all(r == (a if i % 2 == 0 else b) for i, r in enumerate(last)):
            return Tripped("alternate", _tools(last), guards.alternate)
    if guards.poll is not None and len(rounds) >= guards.poll:
        last = rounds[-guards.poll :]
        names = {name for r in last for name, _ in r}
        if len(names) == 1:
            return Tripped("poll", _tools(last), guards.poll)
    return None


def _tools(rounds: Sequence[Round]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(name for r in rounds for name, _ in r))
