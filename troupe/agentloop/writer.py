"""The single writer: semantic loop events in, Responses stream events out.

This is the one place that assigns ``sequence_number`` (0, +1 per event, no
gaps), ``output_index`` (emission order, which is also the order of the final
``response.output``) and ``content_index`` (per item, from 0), and that frames
every item as added → deltas → done (CONTRACT.md §3). Events are built from the
``openai`` SDK's own types, so a misspelt field fails here, not in a client.

Non-streaming requests run the same writer and keep only :attr:`WireWriter.response`,
so both modes produce the same final Response by construction.

Terminal events: ``completed`` → ``response.completed``; ``incomplete`` →
``response.incomplete``; ``failed`` → ``error`` then ``response.failed``;
``requires_action`` (opt-in, Antwort style) → ``response.requires_action``;
``cancelled`` → none (there is no such event; the stored Response says it).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, Callable
from typing import Any

from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseErrorEvent,
    ResponseFailedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseFunctionToolCall,
    ResponseIncompleteEvent,
    ResponseInProgressEvent,
    ResponseMcpCallArgumentsDeltaEvent,
    ResponseMcpCallArgumentsDoneEvent,
    ResponseMcpCallCompletedEvent,
    ResponseMcpCallFailedEvent,
    ResponseMcpCallInProgressEvent,
    ResponseMcpListToolsCompletedEvent,
    ResponseMcpListToolsFailedEvent,
    ResponseMcpListToolsInProgressEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseReasoningItem,
    ResponseReasoningTextDeltaEvent,
    ResponseReasoningTextDoneEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)
from openai.types.responses.response_output_text import ResponseOutputText
from openai.types.responses.response_reasoning_item import Content as ReasoningContent

from troupe.protocol import CreateResponseRequest, build_response, usage_dict

from . import events as ev
from .model import TokenUsage

__all__ = ["WireWriter", "collect_response"]

_TERMINAL = {
    "completed": ResponseCompletedEvent,
    "incomplete": ResponseIncompleteEvent,
    "failed": ResponseFailedEvent,
}


class WireWriter:
    """Turns one response's loop events into wire events (dicts, ready for JSON).

    Args:
        request: the validated create request (its parameters are echoed).
        response_id: the ``resp_`` id.
        created_at: unix seconds.
        conversation_id: echoed as ``conversation``.
        clock: wall clock for ``completed_at``.
    """

    def __init__(
        self,
        request: CreateResponseRequest,
        *,
        response_id: str,
        created_at: int,
        conversation_id: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._request = request
        self._id = response_id
        self._created_at = created_at
        self._conversation_id = conversation_id
        self._clock = clock
        self._seq = 0
        self._output: list[dict[str, Any]] = []  # index == output_index; replaced as items finish
        self._index: dict[str, int] = {}  # item id -> output_index
        self._status = "in_progress"
        self._usage: TokenUsage | None = None
        self._error: dict[str, Any] | None = None
        self._incomplete: dict[str, Any] | None = None
        self._completed_at: int | None = None

    @property
    def response(self) -> dict[str, Any]:
        """The Response as it stands (final once the loop has finished)."""
        return build_response(
            self._request,
            response_id=self._id,
            created_at=self._created_at,
            status=self._status,
            output=list(self._output),
            usage=None if self._usage is None else _usage(self._usage),
            error=self._error,
            incomplete_details=self._incomplete,
            completed_at=self._completed_at,
            conversation_id=self._conversation_id,
        )

    @property
    def finished(self) -> bool:
        return self._status != "in_progress"

    def write(self, event: ev.LoopEvent) -> list[dict[str, Any]]:
        """The wire events for one loop event (possibly none)."""
        match event:
            case ev.ResponseStarted():
                snapshot = self.response
                return [
                    self._emit(ResponseCreatedEvent, response=snapshot),
                    self._emit(ResponseInProgressEvent, response=snapshot),
                ]
            case ev.MessageStarted(item_id=item_id):
                item = ResponseOutputMessage(id=item_id, type="message", role="assistant", status="in_progress", content=[])
                return [self._add(item), self._emit(
                    ResponseContentPartAddedEvent, item_id=item_id, output_index=self._index[item_id],
                    content_index=0, part=_text_part(""),
                )]
            case ev.MessageDelta(item_id=item_id, delta=delta):
                return [self._emit(
                    ResponseTextDeltaEvent, item_id=item_id, output_index=self._index[item_id],
                    content_index=0, delta=delta, logprobs=[],
                )]
            case ev.MessageDone(item_id=item_id, text=text, status=status):
                i = self._index[item_id]
                item = ResponseOutputMessage(
                    id=item_id, type="message", role="assistant", status=status, content=[_text_part(text)]
                )
                return [
                    self._emit(ResponseTextDoneEvent, item_id=item_id, output_index=i, content_index=0, text=text, logprobs=[]),
                    self._emit(ResponseContentPartDoneEvent, item_id=item_id, output_index=i, content_index=0, part=_text_part(text)),
                    self._done(item),
                ]
            case ev.ReasoningStarted(item_id=item_id):
                item = ResponseReasoningItem(id=item_id, type="reasoning", summary=[], content=[], status="in_progress")
                return [self._add(item), self._emit(
                    ResponseContentPartAddedEvent, item_id=item_id, output_index=self._index[item_id],
                    content_index=0, part={"type": "reasoning_text", "text": ""},
                )]
            case ev.ReasoningDelta(item_id=item_id, delta=delta):
                return [self._emit(
                    ResponseReasoningTextDeltaEvent, item_id=item_id, output_index=self._index[item_id],
                    content_index=0, delta=delta,
                )]
            case ev.ReasoningDone(item_id=item_id, text=text, status=status):
                i = self._index[item_id]
                part = ReasoningContent(type="reasoning_text", text=text)
                item = ResponseReasoningItem(id=item_id, type="reasoning", summary=[], content=[part], status=status)
                return [
                    self._emit(ResponseReasoningTextDoneEvent, item_id=item_id, output_index=i, content_index=0, text=text),
                    self._emit(
                        ResponseContentPartDoneEvent, item_id=item_id, output_index=i, content_index=0,
                        part={"type": "reasoning_text", "text": text},
                    ),
                    self._done(item),
                ]
            case ev.FunctionCallStarted(item_id=item_id, call_id=call_id, name=name):
                item = ResponseFunctionToolCall(
                    id=item_id, type="function_call", call_id=call_id, name=name, arguments="", status="in_progress"
                )
                return [self._add(item)]
            case ev.FunctionCallArgumentsDelta(item_id=item_id, delta=delta):
                return [self._emit(
                    ResponseFunctionCallArgumentsDeltaEvent, item_id=item_id, output_index=self._index[item_id], delta=delta
                )]
            case ev.FunctionCallDone(item_id=item_id, arguments=arguments, status=status):
                i = self._index[item_id]
                added = self._output[i]
                item = ResponseFunctionToolCall(
                    id=item_id, type="function_call", call_id=added["call_id"], name=added["name"],
                    arguments=arguments, status=status,
                )
                return [
                    self._emit(ResponseFunctionCallArgumentsDoneEvent, item_id=item_id, output_index=i, arguments=arguments),
                    self._done(item),
                ]
            case ev.McpListStarted(item_id=item_id, server_label=label):
                item = {"type": "mcp_list_tools", "id": item_id, "server_label": label, "tools": [], "error": None}
                added = self._add(item)
                return [added, self._emit(ResponseMcpListToolsInProgressEvent, item_id=item_id, output_index=self._index[item_id])]
            case ev.McpListDone(item_id=item_id, tools=tools, error=error):
                i = self._index[item_id]
                item = {**self._output[i], "tools": tools, "error": error}
                status_event = ResponseMcpListToolsFailedEvent if error else ResponseMcpListToolsCompletedEvent
                return [self._emit(status_event, item_id=item_id, output_index=i), self._done(item)]
            case ev.McpCallStarted(item_id=item_id, server_label=label, name=name, approval_request_id=approval):
                item = {
                    "type": "mcp_call", "id": item_id, "server_label": label, "name": name, "arguments": "",
                    "approval_request_id": approval, "output": None, "error": None, "status": "in_progress",
                }
                added = self._add(item)
                return [added, self._emit(ResponseMcpCallInProgressEvent, item_id=item_id, output_index=self._index[item_id])]
            case ev.McpCallArgumentsDelta(item_id=item_id, delta=delta):
                return [self._emit(
                    ResponseMcpCallArgumentsDeltaEvent, item_id=item_id, output_index=self._index[item_id], delta=delta
                )]
            case ev.McpCallArgumentsDone(item_id=item_id, arguments=arguments):
                i = self._index[item_id]
                self._output[i] = {**self._output[i], "arguments": arguments}
                return [self._emit(ResponseMcpCallArgumentsDoneEvent, item_id=item_id, output_index=i, arguments=arguments)]
            case ev.McpCallDone(item_id=item_id, output=output, error=error):
                i = self._index[item_id]
                status = "failed" if error else "completed"
                item = {**self._output[i], "output": output, "error": error, "status": status}
                status_event = ResponseMcpCallFailedEvent if error else ResponseMcpCallCompletedEvent
                return [self._emit(status_event, item_id=item_id, output_index=i), self._done(item)]
            case ev.ItemEmitted(item=item):
                return [self._add(item), self._done(item)]
            case ev.StepTraced():
                return []
            case ev.ResponseFinished() as finished:
                return self._finish(finished)
        raise TypeError(f"unknown loop event {event!r}")

    # -- helpers -----------------------------------------------------------------

    def _emit(self, cls: type, **fields: Any) -> dict[str, Any]:
        # The SDK model validates names and types; the dict is what goes on the wire.
        event = cls(type=cls.model_fields["type"].annotation.__args__[0], sequence_number=self._seq, **fields)
        self._seq += 1
        data = event.to_dict(mode="json")
        if "response" in fields:
            # The SDK types created_at as a float; strict clients want the integer we built.
            data["response"] = fields["response"]
        return data

    def _add(self, item: Any) -> dict[str, Any]:
        data = item if isinstance(item, dict) else item.to_dict(mode="json")
        self._index[data["id"]] = len(self._output)
        self._output.append(data)
        return self._emit(ResponseOutputItemAddedEvent, item=data, output_index=self._index[data["id"]])

    def _done(self, item: Any) -> dict[str, Any]:
        data = item if isinstance(item, dict) else item.to_dict(mode="json")
        i = self._index[data["id"]]
        self._output[i] = data
        return self._emit(ResponseOutputItemDoneEvent, item=data, output_index=i)

    def _finish(self, finished: ev.ResponseFinished) -> list[dict[str, Any]]:
        self._status = finished.status
        self._usage = finished.usage
        self._completed_at = int(self._clock())
        if finished.status == "incomplete":
            self._incomplete = {"reason": finished.incomplete_reason}
        if finished.status == "failed":
            self._error = finished.error or {"code": "server_error", "message": "The response failed."}
        snapshot = self.response
        if finished.status == "cancelled":
            return []
        if finished.status == "requires_action":
            # Not an SDK event type: opt-in for clients that asked for it.
            event = {"type": "response.requires_action", "sequence_number": self._seq, "response": snapshot}
            self._seq += 1
            return [event]
        out: list[dict[str, Any]] = []
        if finished.status == "failed":
            assert self._error is not None
            out.append(self._emit(
                ResponseErrorEvent, code=self._error.get("code"), message=self._error["message"], param=None
            ))
        out.append(self._emit(_TERMINAL[finished.status], response=snapshot))
        return out


def _text_part(text: str) -> ResponseOutputText:
    return ResponseOutputText(type="output_text", text=text, annotations=[], logprobs=[])


def _usage(usage: TokenUsage) -> dict[str, Any]:
    return usage_dict(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_tokens=usage.cached_tokens,
        reasoning_tokens=usage.reasoning_tokens,
    )


async def collect_response(events: AsyncIterable[ev.LoopEvent], writer: WireWriter) -> dict[str, Any]:
    """Run a loop to the end without streaming; return the final Response."""
    async for event in events:
        writer.write(event)
    return writer.response
