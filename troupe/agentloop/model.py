"""The model seam: one chat turn in, a stream of chunks out.

The loop talks to every model (the in-process ``sim``, any OpenAI-compatible
server over HTTP) through :class:`ModelClient`. A request is the upstream
payload, already in Chat Completions shape; the reply is a stream of small,
frozen chunk values that ends with exactly one :class:`TurnEnd`, which carries
the assembled turn (text, reasoning, tool calls, finish reason, usage).

Errors::

    ModelError                 the model call failed; ``status`` is the upstream
                               HTTP status (or 502/504 for transport failures)

Example::

    async for chunk in client.stream(ChatRequest(model="sim", messages=[...])):
        match chunk:
            case TextChunk(text=t): print(t, end="")
            case TurnEnd() as end: print(end.finish_reason)
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "ChatRequest",
    "TextChunk",
    "ReasoningChunk",
    "ToolCallStart",
    "ToolCallArgumentsDelta",
    "ToolCall",
    "TokenUsage",
    "TurnEnd",
    "ModelChunk",
    "ModelClient",
    "ModelError",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatRequest:
    """One upstream model call, in Chat Completions terms."""

    model: str
    """The upstream model name."""
    messages: list[dict[str, Any]]
    """Chat Completions messages (``system``/``developer``/``user``/``assistant``/``tool``)."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    """Chat Completions tool definitions: ``{"type": "function", "function": {...}}``."""
    tool_choice: str | dict[str, Any] | None = None
    """``"auto"``, ``"none"``, ``"required"`` or ``{"type": "function", "function": {"name": ...}}``."""
    parallel_tool_calls: bool | None = None
    max_tokens: int | None = None
    """Upper bound on output tokens for this turn (sent as ``max_completion_tokens``)."""
    temperature: float | None = None
    top_p: float | None = None
    response_format: dict[str, Any] | None = None
    """Chat Completions ``response_format`` (``json_object`` / ``json_schema``)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Further body fields passed through verbatim (e.g. ``reasoning_effort``)."""
    stream: bool = True
    """Ask the upstream to stream its answer; False: one JSON completion, for a call whose tokens
    nobody watches as they come (its answer then reaches the loop as one chunk)."""

    def to_payload(self, *, stream: bool | None = None) -> dict[str, Any]:
        """The JSON body for ``POST /v1/chat/completions`` (``stream``: default :attr:`stream`)."""
        stream = self.stream if stream is None else stream
        body: dict[str, Any] = {"model": self.model, "messages": self.messages, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        if self.tools:
            body["tools"] = self.tools
            if self.tool_choice is not None:
                body["tool_choice"] = self.tool_choice
            if self.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = self.parallel_tool_calls
        optional = {
            "max_completion_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "response_format": self.response_format,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        body.update(self.extra)
        return body

    @classmethod
    def from_payload(cls, body: dict[str, Any]) -> ChatRequest:
        """Inverse of :meth:`to_payload` (used by the sim server)."""
        known = {
            "model", "messages", "tools", "tool_choice", "parallel_tool_calls", "max_tokens",
            "max_completion_tokens", "temperature", "top_p", "response_format", "stream",
            "stream_options",
        }
        return cls(
            model=body.get("model", ""),
            messages=list(body.get("messages") or []),
            tools=list(body.get("tools") or []),
            tool_choice=body.get("tool_choice"),
            parallel_tool_calls=body.get("parallel_tool_calls"),
            max_tokens=body.get("max_completion_tokens", body.get("max_tokens")),
            temperature=body.get("temperature"),
            top_p=body.get("top_p"),
            response_format=body.get("response_format"),
            extra={k: v for k, v in body.items() if k not in known},
            stream=bool(body.get("stream")),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TextChunk:
    """A piece of the answer text (the loop streams it on as an ``events.MessageDelta``)."""

    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningChunk:
    """A piece of reasoning text, ``reasoning_content`` upstream (streamed on as an ``events.ReasoningDelta``)."""

    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallStart:
    """The model began tool call number ``index`` of this turn."""

    index: int
    call_id: str
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallArgumentsDelta:
    """More JSON-argument text for tool call ``index`` (always after its ToolCallStart)."""

    index: int
    delta: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """One assembled tool call."""

    call_id: str
    name: str
    arguments: str
    """The JSON arguments, as a string, exactly as the model produced them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenUsage:
    """Token counts of one or more model calls."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEnd:
    """The last chunk of every turn: the whole turn, assembled."""

    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str = "stop"
    """``stop``, ``tool_calls``, ``length`` or ``content_filter``, as the upstream said."""
    usage: TokenUsage = field(default_factory=TokenUsage)


ModelChunk = TextChunk | ReasoningChunk | ToolCallStart | ToolCallArgumentsDelta | TurnEnd


@runtime_checkable
class ModelClient(Protocol):
    """Streams one chat turn. Implementations: ``SimModel``, ``OpenAIChatClient``."""

    def stream(self, request: ChatRequest) -> AsyncGenerator[ModelChunk, None]:
        """Run one model call.

        Args:
            request: the upstream payload for this turn.

        Returns:
            An async iterator of chunks; the last one is always a :class:`TurnEnd`.

        Raises:
            ModelError: the call failed (before or during the stream).
        """
        ...


class ModelError(Exception):
    """A model call failed.

    Picklable (its args go to ``Exception.__init__``) so it can cross an actor boundary.
    """

    def __init__(self, message: str, status: int = 502, code: str | None = None, param: str | None = None) -> None:
        super().__init__(message, status, code, param)
        self.message = message
        self.status = status
        """Upstream HTTP status; 502 for a bad upstream reply, 504 for a timeout."""
        self.code = code
        self.param = param
        """The request field the upstream named (a Chat Completions field), if any."""

    def __str__(self) -> str:
        return f"model error {self.status}: {self.message}"
