"""``sim``: a deterministic simulated model, cued by directives in the user's message.

The sim reads the LAST user message (string content, or the ``text`` of its parts joined
by newlines). Directives in double brackets, anywhere in it::

    [[call NAME {JSON}]]   call tool NAME with that JSON (several -> parallel calls, in order);
                           without JSON the arguments come from NAME's schema in
                           ``request.tools`` (``{}`` if NAME is not offered). Works even if NAME
                           is not offered and with tool_choice "none" (a misbehaving model).
    [[python]] CODE [[/python]]  call ``python`` (the ``code_interpreter`` tool's function) with
                           ``{"code": CODE}``: the code runs from after ``]]`` (a line break
                           right after it is skipped) to ``[[/python]]``, or to the end of the
                           message without one; directives inside it are code. Several blocks
                           -> several calls, in order, as ``call`` (the two mix, in order).
    [[shell]] COMMANDS [[/shell]]  call ``shell`` (the ``shell`` tool's function) with
                           ``{"commands": [...]}``, one command a line (blank lines skipped),
                           read as ``[[python]]``'s code is; mixes with the others, in order.
    [[say TEXT]]           answer exactly TEXT
    [[tokens N]]           answer with N deterministic words (the NATO alphabet, cycled)
    [[think TEXT]]         emit TEXT as reasoning before the answer / tool calls
    [[then NAME {JSON}]]   call NAME (as ``call``) in a second round: after the first round's tool
                           results, instead of answering; then answer (several -> parallel)
    [[loop NAME]]          call NAME (schema arguments) on EVERY turn, even after tool results
    [[cycle NAME {JSON} NAME {JSON} ...]]  one call a turn, on every turn, in this order and
                           round again (A B A B ...; JSON optional, as ``call``); unlike ``loop``
                           it obeys tool_choice "none": it then answers the results (as step 3)
    [[history]]            answer with the raw text of every user message, oldest first, " | "
    [[fail STATUS]]        every call fails with that HTTP status
    [[fail STATUS once]]   only the first call for this conversation fails (key: the text of
                           the last user message; remembered by the SimModel / server)
    [[latency ttft=MS itl=MS]]  time to first token / between tokens (defaults: SimSettings)

Decision order for each turn:

0. Like a real model server, an ``image_url`` part whose ``data:`` URL is not valid base64
   is refused: HTTP 400, code ``invalid_base64``, naming the part; so is a JSON schema
   it cannot fill (no finite value, a ``$ref`` that does not resolve): ``invalid_json_schema``.
1. ``fail`` -> fail (in-process: ``ModelError(status=STATUS)``; server: that HTTP status).
2. The last user message is the request to summarise the thread (``SUMMARY_PROMPT`` of
   ``troupe.agentloop.compaction``, the call compaction makes): answer with a summary that
   counts the messages before it, by role, in the order system, user, assistant, tool (roles
   with none left out): ``Summary of 5 messages: 1 system, 2 user, 1 assistant, 1 tool.``
   Or it is a ``judge`` guardrail's prompt (a conversation between ``<BEGIN CONVERSATION>``
   and ``<END CONVERSATION>``): answer as a safety judge, ``unsafe`` and the categories of the
   conversation's ``[[flag CATEGORY]]`` on a second line, else ``safe``
   (``troupe.sim.moderation.judge``).
   Or the message holds a ``cycle`` and tool_choice is not "none": its next call (the one after
   as many as the turns since the message called tools), whatever the results so far.
3. Tool results after the last user message: ``then`` cues none of whose tools has a result
   yet -> call them (the second round); else without ``loop``, answer one line per result,
   ``NAME -> OUTPUT``, joined by "\\n"; a ``file_search`` result is answered with its best
   passage's text and its citation marker (``troupe.agentloop.file_search``), or says nothing
   was found; a web tool's result (``web_search``, ``web_open_page``, ``web_find_in_page``) with
   what its first source says and that source's marker (``troupe.agentloop.web_search``); a ``python`` or ``shell`` result is answered with the output as it is (the run's logs and
   the links of the files it wrote, so the answer cites them); with ``loop``, call the loop tools again. A compaction's summary (a system
   message beginning ``SUMMARY_HEADING``) after the last user message, and no tool result
   after it, stands for that message's tool calls and results, which the loop compacted
   away: without ``loop`` the answer is ``From the summary: <summary>``; with it, the loop
   tools are called again.
4. ``call`` / ``loop`` -> tool calls (finish_reason "tool_calls").
5. ``say`` / ``tokens`` / ``history`` -> that text (the first of them in the message wins).
6. No directive: a question (the message ends with "?") while ``file_search`` (else
   ``web_search``) is offered (and tool_choice is not "none") -> that tool with the question as
   its query;
   tool_choice "required" -> the first offered tool, a forced
   ``{"type": "function", "function": {"name": X}}`` -> X; otherwise, with tools offered
   (and tool_choice not "none"), a word of 4+ letters from the message found in a tool's
   name or description -> the best-matching tool (most words; ties -> first offered);
   otherwise ``You said: <message without directives>``.
7. Text answers honour ``response_format``: ``json_schema`` -> a value generated from the
   schema, ``json_object`` -> ``{"answer": <text>}``.
8. ``max_tokens`` truncates the answer text; finish_reason becomes "length".
9. The sim's own output cap, :data:`MAX_OUTPUT_CHARS` (1 MiB), bounds every answer and every
   call's arguments, as a real model's output limit does: a ``json_schema`` (or tool schema)
   asking for more, or ``[[tokens N]]`` past it, is answered cut at the cap, finish_reason
   "length" (the response ends ``incomplete``), in time proportional to the cap, not to the ask.

Tokens are whitespace-separated words. Usage: input = words of every message's content
(plus assistant tool-call arguments); output = words of text + reasoning + arguments.

Example::

    model = SimModel()
    request = ChatRequest(model="sim", messages=[{"role": "user", "content": "[[say hi]]"}])
    async for chunk in model.stream(request):
        ...  # TextChunk(text="hi"), TurnEnd(text="hi", finish_reason="stop", ...)

Every directive of the sim model behaves here, where the tests and benchmarks look them up.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import json
import re
import threading
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Container, Iterator
from dataclasses import dataclass, field
from typing import Any

from troupe.agentloop.code_interpreter import PYTHON
from troupe.agentloop.compaction import SUMMARY_HEADING, SUMMARY_PROMPT
from troupe.agentloop.file_search import FILE_SEARCH, parse_results
from troupe.agentloop.model import (
    ChatRequest,
    ModelChunk,
    ModelError,
    ReasoningChunk,
    TextChunk,
    TokenUsage,
    ToolCall,
    ToolCallArgumentsDelta,
    ToolCallStart,
    TurnEnd,
)
from troupe.agentloop.shell import SHELL
from troupe.agentloop.tool_protocols import Step, TextProtocol, native_request, protocol_of, render_step
from troupe.agentloop.web_search import WEB_SEARCH, WEB_TOOL_NAMES
from troupe.protocol import content_text
from troupe.sim.directives import CallCue, parse_directives
from troupe.sim.moderation import judge
from troupe.sim.schema import SchemaError, generate_bounded, generate_from_schema

__all__ = [
    "SimSettings",
    "SimReply",
    "SimModel",
    "plan_reply",
    "stream_reply",
    "generate_from_schema",
    "split_tokens",
    "split_arguments",
    "message_text",
]

_WEB_SOURCE = re.compile(r"^(【\d+†[^】]*】) \(url: \S+\)")
"""A web tool's source line (``troupe.agentloop.web_search``): its marker, then its URL."""
_FIND_HEADER = re.compile(r"^\d+ match\(es\) of ")

_WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
    "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu"
).split()

Sleep = Callable[[float], Awaitable[Any]]


MAX_OUTPUT_CHARS = 1 << 20
"""The most characters the sim writes in one answer, or in one tool call's arguments."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SimSettings:
    """Server-wide defaults of the sim (a ``[[latency]]`` directive overrides them)."""

    ttft_ms: float = 0
    """Time to first token, in milliseconds."""
    itl_ms: float = 0
    """Inter-token latency: the pause between consecutive chunks, in milliseconds."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SimReply:
    """What the sim will answer to one request: the plan, before any streaming."""

    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str = "stop"
    usage: TokenUsage = field(default_factory=TokenUsage)
    ttft_ms: float = 0
    itl_ms: float = 0
    fail_status: int | None = None
    """When set, the call fails with this HTTP status instead of answering."""
    fail_key: str | None = None
    """Set on a ``[[fail S once]]`` failure: the key the caller must remember as failed."""
    fail_code: str = "sim_failure"
    """The error code of the failure."""
    fail_message: str = ""
    """The failure's message (a generic one when empty)."""
    fail_param: str | None = None
    """The offending request field, when the failure names one."""

    @property
    def failure_message(self) -> str:
        return self.fail_message or f"simulated failure (HTTP {self.fail_status})"


def message_text(message: dict[str, Any]) -> str:
    """The text of a chat message: its string content, or its text parts joined by newlines."""
    return content_text(message.get("content"), sep="\n")


def split_tokens(text: str) -> list[str]:
    """Split ``text`` into one piece per token; the pieces concatenate back to ``text``."""
    pieces = re.findall(r"\s*\S+", text)
    tail = text[len("".join(pieces)):]
    if tail:  # trailing whitespace rides on the last token
        pieces = [*pieces[:-1], pieces[-1] + tail] if pieces else [tail]
    return pieces


def split_arguments(arguments: str, pieces: int = 3) -> list[str]:
    """Split tool-call arguments into up to ``pieces`` chunks, the way servers stream them."""
    if len(arguments) <= 1:
        return [arguments]
    step = -(-len(arguments) // min(pieces, len(arguments)))
    return [arguments[i:i + step] for i in range(0, len(arguments), step)]


def _malformed_image(messages: list[dict[str, Any]]) -> str | None:
    """The path of the first ``image_url`` part whose ``data:`` URL does not decode, if any."""
    for i, message in enumerate(messages):
        content = message.get("content")
        for j, part in enumerate(content if isinstance(content, list) else []):
            url = (part.get("image_url") or {}).get("url", "") if isinstance(part, dict) else ""
            if not isinstance(url, str) or not url.startswith("data:"):
                continue
            _, _, data = url.partition(",")
            try:
                base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                return f"messages[{i}].content[{j}].image_url.url"
    return None


def _count(text: str) -> int:
    return len(text.split())


def _new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def plan_reply(
    request: ChatRequest,
    *,
    settings: SimSettings = SimSettings(),
    failed_keys: Container[str] = frozenset(),
    new_call_id: Callable[[], str] = _new_call_id,
) -> SimReply:
    """Decide the sim's whole reply to ``request`` (pure, apart from ``new_call_id``).

    Args:
        request: the chat turn.
        settings: latency defaults.
        failed_keys: conversation keys whose ``[[fail S once]]`` already fired.
        new_call_id: makes tool-call ids.

    Returns:
        The reply; when ``fail_status`` is set the caller must fail the call instead (and
        remember ``fail_key``, if set).
    """
    if (protocol := protocol_of(request)) is not None:  # asked to speak a text tool protocol: it does
        native = native_request(request, protocol)
        return _in_text(plan_reply(native, settings=settings, failed_keys=failed_keys, new_call_id=new_call_id),
                        protocol)  # fmt: skip
    messages = request.messages
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    key = message_text(messages[last]) if last >= 0 else ""
    cues = parse_directives(key)
    ttft = settings.ttft_ms if cues.ttft_ms is None else cues.ttft_ms
    itl = settings.itl_ms if cues.itl_ms is None else cues.itl_ms

    if (bad := _malformed_image(messages)) is not None:
        return SimReply(fail_status=400, fail_code="invalid_base64", fail_param=bad, ttft_ms=ttft, itl_ms=itl,
                        fail_message=f"Invalid '{bad}': the image data URL is not valid base64.")
    if cues.fail is not None:
        status, once = cues.fail
        if not once or key not in failed_keys:
            return SimReply(fail_status=status, fail_key=key if once else None, ttft_ms=ttft, itl_ms=itl)
    try:
        return _plan(request, cues, messages, last, ttft, itl, new_call_id)
    except SchemaError as exc:  # a schema it cannot fill: refused, as a model server does
        param = "response_format.json_schema.schema" if request.response_format else "tools"
        return SimReply(fail_status=400, fail_code="invalid_json_schema", fail_param=param, ttft_ms=ttft, itl_ms=itl,
                        fail_message=f"Invalid schema for '{param}': {exc}.")


def _plan(
    request: ChatRequest, cues: Any, messages: list[dict[str, Any]], last: int, ttft: float, itl: float,
    new_call_id: Callable[[], str],
) -> SimReply:
    results = _tool_results(messages, after=last)
    summary = _summary_after(messages, last) if not results else None
    loops = [c for c in cues.calls if c.loop]
    thens = [c for c in cues.calls if c.then]
    calls: list[CallCue] = []
    text, cut = "", False
    if last >= 0 and message_text(messages[last]) == SUMMARY_PROMPT:
        text = _summary(messages[:last])
    elif last >= 0 and (verdict := judge(message_text(messages[last]))) is not None:
        text = verdict
    elif cues.cycle and request.tool_choice != "none":
        rounds = sum(bool(m.get("tool_calls")) for m in messages[last + 1 :] if m.get("role") == "assistant")
        calls = [cues.cycle[rounds % len(cues.cycle)]]
    elif results and thens and not {name for name, _ in results} & {c.name for c in thens}:
        calls = thens  # the second round, once the first round's results are in
    elif results and not loops:
        text = "\n".join(_result_line(name, output) for name, output in results)
    elif summary is not None and not loops:
        text = f"From the summary: {summary}"
    elif results or summary is not None:
        calls = loops
    elif any(not c.then for c in cues.calls):
        calls = [c for c in cues.calls if not c.then]
    elif cues.answer is not None:
        text, cut = _answer(cues.answer, messages)
    elif (searched := _searches(request, cues.plain)) is not None:
        calls = [CallCue(name=searched, arguments=json.dumps({"query": cues.plain.strip()}), loop=False)]
    elif (chosen := _choose_tool(request, cues.plain)) is not None:
        calls = [CallCue(name=chosen, arguments=None, loop=False)]
    else:
        text = f"You said: {cues.plain}"

    tool_calls = tuple(
        ToolCall(call_id=new_call_id(), name=c.name, arguments=c.arguments or _schema_arguments(request, c.name))
        for c in calls
    )
    finish_reason = "tool_calls" if tool_calls else "stop"
    if not tool_calls:
        text, formatted_cut = _format(text, request.response_format)
        if cut or formatted_cut:  # its output cap: stopped where a real model's limit stops it
            finish_reason = "length"
        if request.max_tokens is not None and _count(text) > request.max_tokens:
            text, finish_reason = "".join(split_tokens(text)[: request.max_tokens]), "length"

    reasoning = cues.think or ""
    arguments_tokens = sum(_count(c.arguments) for c in tool_calls)
    usage = TokenUsage(
        input_tokens=_input_tokens(messages),
        output_tokens=_count(text) + _count(reasoning) + arguments_tokens,
        reasoning_tokens=_count(reasoning),
    )
    return SimReply(
        text=text, reasoning=reasoning, tool_calls=tool_calls, finish_reason=finish_reason,
        usage=usage, ttft_ms=ttft, itl_ms=itl,
    )


def _tool_results(messages: list[dict[str, Any]], *, after: int) -> list[tuple[str, str]]:
    names: dict[str, str] = {}
    results = []
    for message in messages[after + 1:]:
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or []:
                names[call.get("id", "")] = (call.get("function") or {}).get("name", "")
        elif message.get("role") == "tool":
            call_id = message.get("tool_call_id", "")
            results.append((names.get(call_id) or message.get("name") or "unknown", message_text(message)))
    return results


def _summary(messages: list[dict[str, Any]]) -> str:
    """The sim's summary of a thread: its messages counted by role."""
    counts = [(sum(m.get("role") == role for m in messages), role) for role in ("system", "user", "assistant", "tool")]
    return f"Summary of {len(messages)} messages: " + ", ".join(f"{n} {role}" for n, role in counts if n) + "."


def _summary_after(messages: list[dict[str, Any]], last: int) -> str | None:
    """The text of a compaction's summary standing after the last user message, if one does."""
    for message in messages[last + 1 :]:
        text = message_text(message)
        if message.get("role") == "system" and text.startswith(SUMMARY_HEADING + "\n"):
            return text[len(SUMMARY_HEADING) + 1 :]
    return None


def _result_line(name: str, output: str) -> str:
    """The answer's line for one tool result."""
    if name in (PYTHON, SHELL):
        return output
    if name in WEB_TOOL_NAMES:
        return _web_line(output)
    if name != FILE_SEARCH:
        return f"{name} -> {output}"
    passages = parse_results(output)
    if not passages:
        return "I found nothing about that in the files."
    marker, filename, _, text = passages[0]
    return f"{text} 【{marker}†{filename}】"


def _web_line(output: str) -> str:
    """The answer's line for a web tool's result: what its first source says, and its marker."""
    lines = output.splitlines()
    for n, line in enumerate(lines):
        source = _WEB_SOURCE.match(line)
        if source is None:
            continue
        rest = [r.strip() for r in lines[n + 1 :] if r.strip() and not _FIND_HEADER.match(r)]
        said = line[source.end() :].strip() or next(iter(rest), "")
        return f"{' '.join(said.split()[:40])} {source[1]}"
    return output.splitlines()[0] if output else "I found nothing on the web."


def _searches(request: ChatRequest, message: str) -> str | None:
    """The search tool an undirected question goes to (``file_search`` first, then ``web_search``), if any."""
    if request.tool_choice == "none" or not message.strip().endswith("?"):
        return None
    offered = {f.get("name") for f in _functions(request)}
    return next((name for name in (FILE_SEARCH, WEB_SEARCH) if name in offered), None)


def _answer(answer: tuple[str, str], messages: list[dict[str, Any]]) -> tuple[str, bool]:
    """The text a ``say``/``tokens``/``history`` directive answers, and whether the output cap cut it."""
    kind, argument = answer
    if kind == "tokens":
        count = int(argument)
        fits = MAX_OUTPUT_CHARS // (1 + max(len(w) for w in _WORDS))  # words that surely fit
        return " ".join(_WORDS[i % len(_WORDS)] for i in range(min(count, fits))), count > fits
    if kind == "history":
        return " | ".join(message_text(m) for m in messages if m.get("role") == "user"), False
    return argument, False


def _functions(request: ChatRequest) -> list[dict[str, Any]]:
    # Accept the Chat shape {"type": "function", "function": {...}} and the flat one.
    return [tool.get("function", tool) for tool in request.tools if isinstance(tool, dict)]


def _schema_arguments(request: ChatRequest, name: str) -> str:
    for function in _functions(request):
        if function.get("name") == name and function.get("parameters"):
            value, _ = generate_bounded(function["parameters"], MAX_OUTPUT_CHARS)
            return json.dumps(value)
    return "{}"


def _choose_tool(request: ChatRequest, text: str) -> str | None:
    functions = [f for f in _functions(request) if f.get("name")]
    choice = request.tool_choice
    if isinstance(choice, dict):
        return (choice.get("function") or {}).get("name") or choice.get("name")
    if not functions or choice == "none":
        return None
    if choice == "required":
        return functions[0]["name"]
    words = set(re.findall(r"[a-z]{4,}", text.lower()))
    best, best_score = None, 0
    for function in functions:  # strict ">" keeps the first offered tool on ties
        haystack = f"{function['name']} {function.get('description') or ''}".lower()
        score = sum(word in haystack for word in words)
        if score > best_score:
            best, best_score = function["name"], score
    return best


def _format(text: str, response_format: dict[str, Any] | None) -> tuple[str, bool]:
    """The answer in ``response_format``, and whether the output cap cut it (its JSON is then
    cut too, as a model's stopped by its limit is)."""
    kind = (response_format or {}).get("type")
    if kind == "json_schema":
        schema = (response_format or {}).get("json_schema", {}).get("schema") or {"type": "object"}
        value, cut = generate_bounded(schema, MAX_OUTPUT_CHARS)
        answer = json.dumps(value)
        return (answer[:MAX_OUTPUT_CHARS], True) if cut else (answer, False)
    if kind == "json_object":
        return json.dumps({"answer": text}), False
    return text, False


def _input_tokens(messages: list[dict[str, Any]]) -> int:
    total = 0
    for message in messages:
        total += _count(message_text(message))
        for call in message.get("tool_calls") or []:
            total += _count(str((call.get("function") or {}).get("arguments") or ""))
    return total


def _chunks(reply: SimReply) -> Iterator[ModelChunk]:
    for token in split_tokens(reply.reasoning):
        yield ReasoningChunk(text=token)
    for token in split_tokens(reply.text):
        yield TextChunk(text=token)
    for index, call in enumerate(reply.tool_calls):
        yield ToolCallStart(index=index, call_id=call.call_id, name=call.name)
        for piece in split_arguments(call.arguments):
            yield ToolCallArgumentsDelta(index=index, delta=piece)


def _in_text(reply: SimReply, protocol: TextProtocol) -> SimReply:
    """``reply`` as a model without tool calling writes it in ``protocol``: its calls as actions,
    its answer as the final answer, its reasoning (or a word of its own) as the thought."""
    if reply.fail_status is not None:
        return reply
    calls = [(c.name, c.arguments) for c in reply.tool_calls]
    thought = reply.reasoning or (f"I will use {', '.join(n for n, _ in calls)}." if calls else "I can answer now.")
    text = render_step(protocol, Step(thought=thought, calls=calls, answer=reply.text))
    usage = TokenUsage(input_tokens=reply.usage.input_tokens, output_tokens=_count(text))
    return dataclasses.replace(reply, text=text, reasoning="", tool_calls=(), usage=usage,
                               finish_reason="length" if reply.finish_reason == "length" else "stop")  # fmt: skip


async def stream_reply(reply: SimReply, *, sleep: Sleep = asyncio.sleep) -> AsyncGenerator[ModelChunk, None]:
    """Stream a planned reply as model chunks, pacing them by its ttft / itl.

    Sleeps ``ttft_ms`` before the first chunk and ``itl_ms`` before each following one;
    the closing :class:`TurnEnd` follows the last chunk without delay.
    """
    first = True
    for chunk in _chunks(reply):
        delay = reply.ttft_ms if first else reply.itl_ms
        first = False
        if delay > 0:
            await sleep(delay / 1000)
        yield chunk
    if first and reply.ttft_ms > 0:  # nothing streamed: the turn still takes its ttft
        await sleep(reply.ttft_ms / 1000)
    yield TurnEnd(
        text=reply.text, reasoning=reply.reasoning, tool_calls=reply.tool_calls,
        finish_reason=reply.finish_reason, usage=reply.usage,
    )


class SimModel:
    """The sim as an in-process :class:`~troupe.agentloop.model.ModelClient`.

    Remembers which conversations already had their ``[[fail S once]]`` (thread-safe), so
    one instance should serve all calls that ought to share that memory.
    """

    def __init__(self, settings: SimSettings = SimSettings(), *, sleep: Sleep = asyncio.sleep) -> None:
        self.settings = settings
        self._sleep = sleep
        self._lock = threading.Lock()
        self._failed: set[str] = set()

    def plan(self, request: ChatRequest) -> SimReply:
        """Plan the reply and record a ``once`` failure, atomically."""
        # Planning and recording under one lock: two concurrent first calls of the same
        # conversation must not both fail.
        with self._lock:
            reply = plan_reply(request, settings=self.settings, failed_keys=self._failed)
            if reply.fail_key is not None:
                self._failed.add(reply.fail_key)
        return reply

    async def stream(self, request: ChatRequest) -> AsyncGenerator[ModelChunk, None]:
        """Run one model call (see the module docstring for the behaviour).

        Raises:
            ModelError: a ``[[fail STATUS]]`` directive fired.
        """
        reply = self.plan(request)
        if reply.fail_status is not None:
            raise ModelError(reply.failure_message, status=reply.fail_status, code=reply.fail_code,
                             param=reply.fail_param)
        async for chunk in stream_reply(reply, sleep=self._sleep):
            yield chunk
