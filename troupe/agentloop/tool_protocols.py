"""Tool calling for models that lack it: the ``react`` and ``json`` text protocols.

A model configured with ``tool_protocol = "react"`` or ``"json"`` is called without
``tools``: :class:`TextToolModel` wraps its client, tells it the tools and the format in a
system prompt, rewrites the thread's tool calls and results as text, and reads its answers
back into the chunks a native tool-calling model streams. The loop, the items and the events
are the same as with native tool calls.

``react``: the model writes ``Thought:`` / ``Action:`` / ``Action Input:`` and, once it can
answer, ``Final Answer:``; each result comes back as ``Observation (TOOL): …``. Read leniently:
any case, extra spaces, Markdown bold, code fences around it; an ``Action Input`` may be a
JSON object, ``key=value`` pairs, or plain text for a tool that takes one argument; several
``Action`` / ``Action Input`` pairs are parallel calls. An answer with no marker at all is a
final answer. While it streams, ``Thought`` text goes out as reasoning and ``Final Answer``
text as the answer; an ``Action`` is held back, never sent as text.

``json``: the model answers one JSON object, ``{"thought", "action": {"name", "arguments"}}``
(or ``"actions": [...]``) or ``{"thought", "final_answer"}``, asked for with
``response_format: {"type": "json_object"}``. Read once it is whole.

An answer that cannot be read is told back to the model once (what was wrong, and the format
again); a second one fails the call (:class:`ProtocolError`), and the response fails saying why
(``server_error``).

Example::

    >>> read_react("Thought: add them\\nAction: calculator\\nAction Input: expression=2+2").calls
    [('calculator', '{"expression": "2+2"}')]
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from troupe.protocol import content_text

from .model import (
    ChatRequest,
    ModelChunk,
    ModelClient,
    ReasoningChunk,
    TextChunk,
    TokenUsage,
    ToolCall,
    ToolCallArgumentsDelta,
    ToolCallStart,
    TurnEnd,
)

__all__ = [
    "PROTOCOL_MARK",
    "ProtocolError",
    "Step",
    "TextProtocol",
    "TextToolModel",
    "native_request",
    "protocol_of",
    "read_json",
    "read_react",
    "render_step",
    "text_request",
]

TextProtocol = Literal["react", "json"]

PROTOCOL_MARK = "(Troupe tool protocol: {protocol})"
"""The last line of the tools prompt, naming the protocol: how the sim knows to answer in it."""


class ProtocolError(ValueError):
    """A model's answer that does not follow its protocol (the message says what is wrong)."""


@dataclass(slots=True)
class Step:
    """One answer, read: its thought, its calls (name, JSON arguments) and its final answer."""

    thought: str = ""
    calls: list[tuple[str, str]] = field(default_factory=list)
    answer: str = ""


# -- the prompt ---------------------------------------------------------------------


def _tool_lines(tools: Sequence[dict[str, Any]]) -> str:
    lines = []
    for tool in tools:
        fn = tool.get("function") or {}
        schema = json.dumps(fn.get("parameters") or {"type": "object", "properties": {}}, separators=(",", ":"))
        description = " ".join(str(fn.get("description") or "").split()) or "(no description)"
        lines.append(f"- {fn.get('name')}: {description} Arguments (JSON Schema): {schema}")
    return "\n".join(lines)


_TOOL_LINE = re.compile(r"^- (\S+?): (.*) Arguments \(JSON Schema\): (\{.*\})$", re.M)


def tools_from_prompt(prompt: str) -> list[dict[str, Any]]:
    """The Chat Completions tools a tools prompt lists (the inverse of its tool lines: the
    sim reads them back)."""
    return [
        {"type": "function", "function": {"name": name, "description": description, "parameters": json.loads(schema)}}
        for name, description, schema in _TOOL_LINE.findall(prompt)
    ]


def _choice_line(choice: Any) -> str:
    if choice == "none":
        return "No tool can be used now: answer the user."
    if choice == "required":
        return "You must use a tool in this answer."
    if isinstance(choice, dict) and (name := (choice.get("function") or {}).get("name")):
        return f"You must use the tool {name} in this answer."
    return ""


def _prompt(protocol: TextProtocol, tools: Sequence[dict[str, Any]], choice: Any, parallel: bool) -> str:
    names = ", ".join(str((t.get("function") or {}).get("name")) for t in tools)
    if protocol == "react":
        how = (
            "Answer in this format and nothing else:\n\n"
            "Thought: what to do next\n"
            f"Action: the tool to use, one of [{names}]\n"
            "Action Input: its arguments, a JSON object\n\n"
            'Each tool\'s result comes back to you as "Observation (TOOL): ..."; then think again.'
            + (" Several Action / Action Input pairs in one answer run at once." if parallel else "")
            + " When you can answer the user:\n\n"
            "Thought: I can answer now\n"
            "Final Answer: the answer to the user"
        )
    else:
        how = (
            "Answer with one JSON object and nothing else. To use a tool:\n"
            '{"thought": "what to do next", "action": {"name": "<tool>", "arguments": {...}}}\n'
            + ('(or "actions": [{"name": ..., "arguments": ...}, ...] to use several at once)\n' if parallel else "")
            + 'Each tool\'s result comes back to you as "Observation (TOOL): ...". When you can answer the user:\n'
            '{"thought": "I can answer now", "final_answer": "the answer to the user"}'
        )
    choice_line = _choice_line(choice)
    return "\n\n".join(filter(None, [
        "You can use these tools:\n" + _tool_lines(tools), how, choice_line, PROTOCOL_MARK.format(protocol=protocol),
    ]))  # fmt: skip


def protocol_of(request: ChatRequest) -> TextProtocol | None:
    """The text protocol a request's first system message asks for, if it does (the sim's
    question: should it answer in text?)."""
    first = request.messages[0] if request.messages else {}
    text = first.get("content") if first.get("role") == "system" else None
    if isinstance(text, str):
        for protocol in ("react", "json"):
            if text.endswith(PROTOCOL_MARK.format(protocol=protocol)):
                return protocol
    return None


# -- the thread, as text and back -----------------------------------------------------


def render_step(protocol: TextProtocol, step: Step) -> str:
    """An answer as the protocol writes it (the thread's earlier turns, and the sim's answers)."""
    if protocol == "json":
        body: dict[str, Any] = {"thought": step.thought} if step.thought else {}
        actions = [{"name": n, "arguments": _loads(a)} for n, a in step.calls]
        if len(actions) == 1:
            body["action"] = actions[0]
        elif actions:
            body["actions"] = actions
        else:
            body["final_answer"] = step.answer
        return json.dumps(body, ensure_ascii=False)
    lines = [f"Thought: {step.thought}"] if step.thought else []
    for name, arguments in step.calls:
        lines += [f"Action: {name}", f"Action Input: {arguments}"]
    if not step.calls:
        lines.append(f"Final Answer: {step.answer}")
    return "\n".join(lines)


def _loads(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def text_request(request: ChatRequest, protocol: TextProtocol) -> ChatRequest:
    """``request`` for a model without tool calling: no ``tools``; the tools and the format in
    the first system message; earlier calls as the assistant's text and results as user
    messages (``Observation (TOOL): …``, a turn's results in one)."""
    names: dict[str, str] = {}
    messages: list[dict[str, Any]] = []
    observed: dict[str, Any] | None = None  # the user message holding the current turn's results
    for message in request.messages:
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            calls = [(c["function"]["name"], c["function"].get("arguments") or "{}") for c in message["tool_calls"]]
            names.update({c["id"]: c["function"]["name"] for c in message["tool_calls"]})
            content = message.get("content")
            step = Step(thought=content if isinstance(content, str) else "", calls=calls)
            messages.append({"role": "assistant", "content": render_step(protocol, step)})
        elif role == "tool":
            result = content_text(message.get("content"), sep="\n")
            seen = f"Observation ({names.get(message.get('tool_call_id', ''), 'tool')}): {result}"
            if observed is not None and messages and messages[-1] is observed:  # a turn's results: one message
                observed["content"] += "\n" + seen
            else:
                observed = {"role": "user", "content": seen}
                messages.append(observed)
        else:
            messages.append(dict(message))
    prompt = _prompt(protocol, request.tools, request.tool_choice, request.parallel_tool_calls is not False)
    if messages and messages[0].get("role") == "system" and isinstance(messages[0].get("content"), str):
        messages[0] = {**messages[0], "content": f"{messages[0]['content']}\n\n{prompt}"}
    else:
        messages.insert(0, {"role": "system", "content": prompt})
    return replace(
        request, messages=messages, tools=[], tool_choice=None, parallel_tool_calls=None,
        response_format={"type": "json_object"} if protocol == "json" else None,
    )  # fmt: skip


_OBSERVATION = re.compile(r"^Observation \((.+?)\): ", re.M)


def native_request(request: ChatRequest, protocol: TextProtocol) -> ChatRequest:
    """The inverse of :func:`text_request`, for the sim: the tools back from the prompt, the
    assistant's text back into tool calls, the observations back into tool results."""
    system = request.messages[0]["content"]
    prompt_at = system.find("You can use these tools:")
    tools = tools_from_prompt(system)
    messages: list[dict[str, Any]] = []
    if system[:prompt_at].strip():
        messages.append({"role": "system", "content": system[:prompt_at].strip()})
    pending: list[str] = []  # the call ids of the last assistant turn, in order
    for message in request.messages[1:]:
        text = content_text(message.get("content"), sep="\n")
        if message.get("role") == "assistant" and (step := _quiet(protocol, text)) is not None and step.calls:
            pending = [f"call_{i}_{len(messages)}" for i in range(len(step.calls))]
            calls = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                     for i, (n, a) in zip(pending, step.calls, strict=True)]  # fmt: skip
            messages.append({"role": "assistant", "content": step.thought or None, "tool_calls": calls})
        elif message.get("role") == "user" and _OBSERVATION.match(text):
            parts = _OBSERVATION.split(text)[1:]  # name, result, name, result...
            for call_id, result in zip(pending, parts[1::2], strict=False):
                messages.append({"role": "tool", "tool_call_id": call_id, "content": result.rstrip("\n")})
        else:
            messages.append(message)
    choice = _choice_from(system)
    return replace(request, messages=messages, tools=tools, tool_choice=choice, response_format=None)


def _choice_from(prompt: str) -> Any:
    """The ``tool_choice`` a tools prompt says (the inverse of :func:`_choice_line`)."""
    if "No tool can be used now" in prompt:
        return "none"
    if (forced := re.search(r"You must use the tool (\S+) in this answer", prompt)) is not None:
        return {"type": "function", "function": {"name": forced.group(1)}}
    return "required" if "You must use a tool in this answer" in prompt else None


def _quiet(protocol: TextProtocol, text: str) -> Step | None:
    try:
        return read_react(text) if protocol == "react" else read_json(text)
    except ProtocolError:
        return None


# -- reading ReAct, as it streams ----------------------------------------------------

_MARKER = re.compile(
    r"^[\s>#*_-]*(thought|action[\s_]*input|action|final[\s_]*answer|observation)[\s*_]*:[\s*_]*", re.I
)
_CANDIDATES = ("thought:", "actioninput:", "action:", "finalanswer:", "observation:")
_FENCE = re.compile(r"^\s*```[\w-]*\s*$")
Mode = Literal["start", "thought", "answer", "plain", "action", "input", "ignored"]


class ReactReader:
    """Reads a ReAct answer as it streams: :meth:`feed` a delta, get the chunks that may go out
    now (reasoning for ``Thought``, text for ``Final Answer`` or an answer without markers);
    :meth:`end`, then :meth:`step`. Chunk sizes change nothing: a line is held only until its
    start decides what it is (a marker, or text), then goes out as it comes."""

    def __init__(self, tools: Sequence[dict[str, Any]] = ()) -> None:
        self.mode: Mode = "start"
        self.line = ""  # the current line so far (its marker taken off)
        self.kind: str | None = None  # the current line's: "marker", "content", or None (undecided)
        self.sent = 0  # how much of the line has gone to its mode
        self.newlines = 0  # held, and sent only before more text of the same mode
        self.marked = False
        self.thought: list[str] = []
        self.answer: list[str] = []
        self.actions: list[list[str]] = []  # [name, input] each
        self.params = {
            (t.get("function") or {}).get("name"): (t.get("function") or {}).get("parameters") for t in tools
        }

    def feed(self, delta: str) -> list[ModelChunk]:
        out: list[ModelChunk] = []
        for piece in re.split(r"(\n)", delta):
            if piece == "\n":
                out += self._line_end(newline=True)
            elif piece:
                self.line += piece
                out += self._more()
        return out

    def end(self) -> list[ModelChunk]:
        return self._line_end(newline=False) if self.line else []

    def _more(self) -> list[ModelChunk]:
        if self.kind is None:
            found = self._classify(self.line)
            if found is None:
                return []
            self._decide(found)
        return self._emit()

    def _classify(self, line: str) -> str | None:
        """A marker's mode, ``content``, or None while the line so far could be either."""
        if (found := _MARKER.match(line)) is not None:
            return _MARKER_MODES[re.sub(r"[\s_]+", " ", found.group(1).lower())]
        squeezed = re.sub(r"[\s>#*_-]", "", line).lower()
        if not squeezed or any(c.startswith(squeezed) for c in _CANDIDATES):
            return None
        if line.lstrip().startswith("`") and self.mode not in ("answer", "plain"):
            return None  # a code fence around the whole answer, or not: the line's end decides
        return "content"

    def _decide(self, found: str) -> None:
        if found == "content":
            self.kind = "content"
            return
        self.kind, self.marked, self.newlines = "marker", True, 0
        self.line = _MARKER.sub("", self.line, count=1)
        if self.mode == "ignored" or found == "ignored" or (found == "answer" and self.actions):
            self.mode = "ignored"  # after an Observation it made up, or an answer after its actions: not read
            return
        if found == "action" or (found == "input" and (not self.actions or self.actions[-1][1])):
            self.actions.append(["", ""])
        self.mode = found  # type: ignore[assignment]

    def _emit(self) -> list[ModelChunk]:
        """What of the current line has not gone to its mode yet."""
        start = self.sent
        if self.kind == "marker" and start == 0:  # the marker's own trailing spaces and "**" are not text
            start = len(self.line) - len(self.line.lstrip(" \t*_"))
            if start == len(self.line):
                return []
        piece, self.sent = self.line[start:], len(self.line)
        if self.mode == "start":
            piece = piece.lstrip()
            if not piece:
                self.sent = 0
                return []
            self.mode = "plain"  # text before any marker: an answer that needs none
        if self.mode in ("action", "input"):
            self.actions[-1][self.mode == "input"] += piece
            return []
        if self.mode == "ignored" or not piece:
            return []
        kept = self.thought if self.mode == "thought" else self.answer
        piece = ("\n" * self.newlines if kept else "") + piece
        self.newlines = 0
        kept.append(piece)
        return [ReasoningChunk(text=piece) if self.mode == "thought" else TextChunk(text=piece)]

    def _line_end(self, *, newline: bool) -> list[ModelChunk]:
        out: list[ModelChunk] = []
        if self.kind is None:  # undecided to its end: a fence, a bare marker, a blank line or a word
            if _FENCE.match(self.line) and self.mode not in ("answer", "plain"):
                self.line = ""
            elif _MARKER.match(self.line):
                self._decide(_MARKER_MODES[re.sub(r"[\s_]+", " ", _MARKER.match(self.line).group(1).lower())])  # type: ignore[union-attr]
            elif self.line.strip():
                self._decide("content")
        if self.line:
            out = self._emit()
        self.line, self.kind, self.sent = "", None, 0
        if newline and self.mode in ("action", "input"):
            self.actions[-1][self.mode == "input"] += "\n"
        elif newline and self.mode in ("thought", "answer", "plain"):
            self.newlines += 1
        return out

    def step(self) -> Step:
        """The answer read whole; :class:`ProtocolError` when it cannot be."""
        thought, answer = "".join(self.thought).strip(), "".join(self.answer).strip()
        calls = []
        for given_name, given in self.actions:
            name = given_name.strip().strip("`'\"[]() ").split("(")[0].strip()
            if not name:
                raise ProtocolError(
                    "an Action Input follows no Action" if not given_name else "an Action names no tool"
                )
            name = self._named(name)
            calls.append((name, _arguments(given, self.params.get(name))))
        if not calls and not answer:
            raise ProtocolError("it has neither an Action nor a Final Answer" if self.marked or thought
                                else "the answer is empty")  # fmt: skip
        return Step(thought=thought, calls=calls, answer=answer)

    def _named(self, name: str) -> str:
        """A tool's own name for ``name`` written in another case."""
        return next((n for n in self.params if isinstance(n, str) and n.lower() == name.lower()), name)


_MARKER_MODES = {"thought": "thought", "action input": "input", "action": "action", "final answer": "answer",
                 "observation": "ignored"}  # fmt: skip


_PAIR = re.compile(r"\s*(\w+)\s*=\s*(\"[^\"]*\"|'[^']*'|[^,\n]*?)\s*(?:[,\n]|$)")


def _arguments(given: str, schema: dict[str, Any] | None) -> str:
    """An Action Input as JSON arguments: a JSON object, ``key=value`` pairs, or the text as
    the one argument of a tool that takes one; ``{}`` for none."""
    text = "\n".join(line for line in given.strip().splitlines() if not _FENCE.match(line)).strip()
    if not text or text.lower() in ("none", "null", "{}", "n/a"):
        return "{}"
    if text.startswith("{"):
        try:
            value, _ = json.JSONDecoder().raw_decode(text)
        except ValueError as exc:
            raise ProtocolError(f"its Action Input is not a JSON object ({exc.args[0]})") from None
        if not isinstance(value, dict):
            raise ProtocolError("its Action Input is not a JSON object")
        return json.dumps(value, ensure_ascii=False)
    pairs, pos = {}, 0
    while pos < len(text) and (pair := _PAIR.match(text, pos)) is not None:
        pairs[pair.group(1)], pos = _value(pair.group(2).strip()), pair.end()
    if pairs and pos >= len(text):
        return json.dumps(pairs, ensure_ascii=False)
    properties = list((schema or {}).get("properties") or {})
    if len(properties) == 1:
        return json.dumps({properties[0]: _value(text)}, ensure_ascii=False)
    raise ProtocolError("its Action Input is neither a JSON object nor key=value pairs")


def _value(text: str) -> Any:
    if text[:1] in "'\"" and text[-1:] == text[:1] and len(text) > 1:
        return text[1:-1]
    try:
        return json.loads(text)
    except ValueError:
        return text


def read_react(text: str, tools: Sequence[dict[str, Any]] = ()) -> Step:
    """A whole ReAct answer, read (as :class:`ReactReader` reads it streamed)."""
    reader = ReactReader(tools)
    reader.feed(text)
    reader.end()
    return reader.step()


# -- reading JSON ------------------------------------------------------------------------


def read_json(text: str, tools: Sequence[dict[str, Any]] = ()) -> Step:
    """A whole JSON-protocol answer, read; :class:`ProtocolError` when it cannot be."""
    start = text.find("{")
    if start < 0:
        raise ProtocolError("it is not a JSON object")
    try:
        body, _ = json.JSONDecoder().raw_decode(text, start)
    except ValueError as exc:
        raise ProtocolError(f"it is not a JSON object ({exc.args[0]})") from None
    if not isinstance(body, dict):
        raise ProtocolError("it is not a JSON object")
    keys = {re.sub(r"[\s_-]", "", k.lower()): v for k, v in body.items()}
    thought = keys.get("thought") or keys.get("reasoning") or ""
    actions = keys.get("actions") or keys.get("toolcalls")
    if actions is None and (action := keys.get("action")) is not None:
        actions = [action if isinstance(action, dict) else {"name": action, "arguments": keys.get("actioninput")}]
    names = {(t.get("function") or {}).get("name", "").lower(): (t.get("function") or {}).get("name") for t in tools}
    calls = []
    for action in actions if isinstance(actions, list) else []:
        if not isinstance(action, dict):
            raise ProtocolError("an action is not an object")
        name = action.get("name") or action.get("tool")
        if not isinstance(name, str) or not name:
            raise ProtocolError("an action names no tool")
        arguments = next((action[k] for k in ("arguments", "args", "input", "parameters") if k in action), None)
        if isinstance(arguments, str):
            arguments = _loads(arguments) if arguments.strip().startswith("{") else arguments
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise ProtocolError(f"the arguments of {name!r} are not an object")
        calls.append((names.get(name.lower()) or name, json.dumps(arguments, ensure_ascii=False)))
    answer = keys.get("finalanswer", keys.get("answer"))
    if not calls and not isinstance(answer, str):
        raise ProtocolError("it has neither an action nor a final_answer")
    return Step(thought=str(thought), calls=calls, answer=answer if isinstance(answer, str) and not calls else "")


# -- the model client ---------------------------------------------------------------------


def _correction(protocol: TextProtocol, why: str) -> str:
    shape = ("Thought / Action / Action Input, or Thought / Final Answer" if protocol == "react"
             else 'one JSON object with "action" (or "actions") or "final_answer"')  # fmt: skip
    return f"Your last answer could not be read: {why}. Answer again, in the format asked for: {shape}."


class TextToolModel:
    """A :class:`~troupe.agentloop.model.ModelClient` over one that cannot call tools: it
    speaks ``protocol`` with it (module docstring) and streams what a tool-calling model would."""

    def __init__(self, inner: ModelClient, protocol: TextProtocol, *, new_id: Callable[[], str] | None = None) -> None:
        self.inner = inner
        self.protocol: TextProtocol = protocol
        self.new_id = new_id or (lambda: f"call_{uuid.uuid4().hex[:24]}")

    async def stream(self, request: ChatRequest) -> AsyncGenerator[ModelChunk, None]:
        if not request.tools and not any(m.get("tool_calls") or m.get("role") == "tool" for m in request.messages):
            async for chunk in self.inner.stream(request):  # no tools anywhere: nothing to speak
                yield chunk
            return
        upstream = text_request(request, self.protocol)
        usage, text, reasoning = TokenUsage(), list[str](), list[str]()
        for attempt in (1, 2):
            reader = ReactReader(request.tools) if self.protocol == "react" else None
            raw, finish = [], "stop"
            async for chunk in self.inner.stream(upstream):
                if isinstance(chunk, TextChunk):
                    raw.append(chunk.text)
                    for out in reader.feed(chunk.text) if reader is not None else ():
                        (reasoning if isinstance(out, ReasoningChunk) else text).append(out.text)  # type: ignore[union-attr]
                        yield out
                elif isinstance(chunk, ReasoningChunk):  # a reasoning model's own: passed on
                    reasoning.append(chunk.text)
                    yield chunk
                elif isinstance(chunk, TurnEnd):
                    usage, finish = usage + chunk.usage, chunk.finish_reason
                    if not raw and chunk.text:  # a server that sent the text only at the end
                        raw.append(chunk.text)
                        for out in reader.feed(chunk.text) if reader is not None else ():
                            (reasoning if isinstance(out, ReasoningChunk) else text).append(out.text)  # type: ignore[union-attr]
                            yield out
            try:
                if reader is not None:
                    for out in reader.end():
                        (reasoning if isinstance(out, ReasoningChunk) else text).append(out.text)  # type: ignore[union-attr]
                        yield out
                    step = reader.step()
                else:
                    step = read_json("".join(raw), request.tools)
                    for out in _json_chunks(step):
                        (reasoning if isinstance(out, ReasoningChunk) else text).append(out.text)  # type: ignore[union-attr]
                        yield out
            except ProtocolError as exc:
                if finish == "length":  # cut by its output limit: no answer to read, and none to ask again
                    yield TurnEnd(text="".join(text), reasoning="".join(reasoning), finish_reason="length", usage=usage)
                    return
                if attempt == 2:
                    raise ProtocolError(
                        f"The model's answer did not follow the '{self.protocol}' tool protocol, after being "
                        f"told once: {exc}."
                    ) from None
                upstream = replace(upstream, messages=[
                    *upstream.messages, {"role": "assistant", "content": "".join(raw)},
                    {"role": "user", "content": _correction(self.protocol, str(exc))},
                ])  # fmt: skip
                continue
            calls = step.calls if request.parallel_tool_calls is not False else step.calls[:1]
            made = tuple(ToolCall(call_id=self.new_id(), name=n, arguments=a) for n, a in calls)
            for index, call in enumerate(made):
                yield ToolCallStart(index=index, call_id=call.call_id, name=call.name)
                yield ToolCallArgumentsDelta(index=index, delta=call.arguments)
            yield TurnEnd(
                text="".join(text), reasoning="".join(reasoning), tool_calls=made, usage=usage,
                finish_reason="tool_calls" if made else finish,
            )  # fmt: skip
            return


def _json_chunks(step: Step) -> list[ModelChunk]:
    out: list[ModelChunk] = [ReasoningChunk(text=step.thought)] if step.thought else []
    if step.answer:
        out.append(TextChunk(text=step.answer))
    return out
