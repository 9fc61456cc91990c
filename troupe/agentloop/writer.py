"""The single writer: semantic loop events in, Responses stream events out.

This is the one place that assigns ``sequence_number`` (0, +1 per event, no
gaps), ``output_index`` (emission order, which is also the order of the final
``response.output``) and ``content_index`` (per item, from 0), and that frames
every item as added → deltas → done. Events are plain dicts
shaped field for field like the ``openai`` SDK's event models (building a model per
event cost more than the rest of the writer); tests/unit/test_writer_wire_shapes.py
validates every kind against those models, so a misspelt field fails in the tests,
not in a client.

Non-streaming requests run the same writer and keep only :attr:`WireWriter.response`,
so both modes produce the same final Response by construction.

A response opens with ``response.created`` then ``response.in_progress``; a background one
with ``response.created`` and ``response.queued`` (both ``queued``, written by :meth:`WireWriter.queue`
when it is accepted), then ``response.in_progress`` once it runs, as OpenAI's does.

Terminal events: ``completed`` → ``response.completed``; ``incomplete`` →
``response.incomplete``; ``failed`` → ``error`` then ``response.failed``;
``requires_action`` (opt-in, Antwort style) → ``response.requires_action``;
``cancelled`` → none (there is no such event; the stored Response says it).

It is the single place that makes wire events: every event type is here.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, Callable
from typing import Any

from troupe.protocol import CreateResponseRequest, build_response, usage_dict

from . import events as ev
from .model import TokenUsage

__all__ = ["WireWriter", "collect_response"]

_TERMINAL = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
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
        self._opened = False
        """``response.created`` is written (or, for a restored writer, was)."""
        self._usage: TokenUsage | None = None
        self._error: dict[str, Any] | None = None
        self._incomplete: dict[str, Any] | None = None
        self._moderation: dict[str, Any] | None = None
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
            moderation=self._moderation,
        )

    @property
    def finished(self) -> bool:
        return self._status not in ("queued", "in_progress")

    def queue(self) -> list[dict[str, Any]]:
        """The opening of a background response accepted and waiting to run: ``response.created``
        and ``response.queued``, both ``queued``. ``ResponseStarted`` then writes only
        ``response.in_progress``."""
        if self._opened:
            raise RuntimeError("the response is already open")
        self._opened = True
        self._status = "queued"
        snapshot = self.response
        return [self._response_event("response.created", snapshot), self._response_event("response.queued", snapshot)]

    def restore(self, events: list[dict[str, Any]]) -> None:
        """Take up where the writer that wrote ``events`` stood after them (a resumed run): the
        next event numbers on from the last of them, and the output is what they built.

        ``events`` must end at a step boundary (every item done, but an ``mcp_call``, a
        ``code_interpreter_call`` or a ``shell_call_output`` waiting for its result), which is
        where runs are checkpointed.
        """
        for event in events:
            match event["type"]:
                case "response.created" | "response.queued" | "response.in_progress":
                    self._opened = True
                    self._status = event["response"]["status"]
                case "response.output_item.added":
                    self._index[event["item"]["id"]] = len(self._output)
                    self._output.append(event["item"])
                case "response.output_item.done":
                    self._output[event["output_index"]] = event["item"]
                case "response.mcp_call_arguments.done":
                    i = event["output_index"]
                    self._output[i] = {**self._output[i], "arguments": event["arguments"]}
                case "response.code_interpreter_call_code.done":
                    i = event["output_index"]
                    self._output[i] = {**self._output[i], "code": event["code"]}
                case "response.code_interpreter_call.interpreting":
                    i = event["output_index"]
                    self._output[i] = {**self._output[i], "status": "interpreting"}
        if events:
            self._seq = events[-1]["sequence_number"] + 1

    @property
    def output(self) -> list[dict[str, Any]]:
        """The output items as they stand."""
        return list(self._output)

    def write(self, event: ev.LoopEvent) -> list[dict[str, Any]]:
        """The wire events for one loop event (possibly none)."""
        match event:
            case ev.ResponseStarted():
                if not self._opened and not self._request.background:
                    self._opened = True
                    snapshot = self.response
                    return [
                        self._response_event("response.created", snapshot),
                        self._response_event("response.in_progress", snapshot),
                    ]
                # A background response: created and queued, written when it was accepted (or now).
                opening = [] if self._opened else self.queue()
                self._status = "in_progress"
                return [*opening, self._response_event("response.in_progress", self.response)]
            case ev.MessageStarted(item_id=item_id):
                added = self._add(_message(item_id, "in_progress", []))
                return [added, self._content_part_event("response.content_part.added", item_id, _text_part(""))]
            case ev.MessageDelta(item_id=item_id, delta=delta):
                return [self._text_delta(item_id, delta)]
            case ev.MessageDone(item_id=item_id, text=text, status=status, annotations=annotations):
                part = _text_part(text, list(annotations))
                return [
                    *(self._annotation_added(item_id, i, a) for i, a in enumerate(annotations)),
                    self._text_done(item_id, text),
                    self._content_part_event("response.content_part.done", item_id, part),
                    self._done(_message(item_id, status, [part])),
                ]
            case ev.RefusalMessage(item_id=item_id, refusal=refusal):
                added = self._add(_message(item_id, "in_progress", []))
                return [
                    added,
                    self._content_part_event("response.content_part.added", item_id, _refusal_part("")),
                    self._refusal_event("response.refusal.delta", item_id, delta=refusal),
                    self._refusal_event("response.refusal.done", item_id, refusal=refusal),
                    self._content_part_event("response.content_part.done", item_id, _refusal_part(refusal)),
                    self._done(_message(item_id, "completed", [_refusal_part(refusal)])),
                ]
            case ev.ReasoningStarted(item_id=item_id):
                added = self._add(_reasoning(item_id, "in_progress", []))
                return [added, self._content_part_event("response.content_part.added", item_id, _reasoning_part(""))]
            case ev.ReasoningDelta(item_id=item_id, delta=delta):
                return [self._reasoning_delta(item_id, delta)]
            case ev.ReasoningDone(item_id=item_id, text=text, status=status):
                return [
                    self._reasoning_done(item_id, text),
                    self._content_part_event("response.content_part.done", item_id, _reasoning_part(text)),
                    self._done(_reasoning(item_id, status, [_reasoning_part(text)])),
                ]
            case ev.FunctionCallStarted(item_id=item_id, call_id=call_id, name=name):
                return [self._add(_function_call(item_id, call_id, name, "", "in_progress"))]
            case ev.FunctionCallArgumentsDelta(item_id=item_id, delta=delta):
                return [self._arguments_delta("response.function_call_arguments.delta", item_id, delta)]
            case ev.FunctionCallDone(item_id=item_id, arguments=arguments, status=status):
                added = self._output[self._index[item_id]]
                item = _function_call(item_id, added["call_id"], added["name"], arguments, status)
                return [
                    self._arguments_done("response.function_call_arguments.done", item_id, arguments),
                    self._done(item),
                ]
            case ev.McpListStarted(item_id=item_id, server_label=label):
                item = {"type": "mcp_list_tools", "id": item_id, "server_label": label, "tools": [], "error": None}
                added = self._add(item)
                return [added, self._item_event("response.mcp_list_tools.in_progress", item_id)]
            case ev.McpListDone(item_id=item_id, tools=tools, error=error):
                item = {**self._output[self._index[item_id]], "tools": tools, "error": error}
                status_type = "response.mcp_list_tools.failed" if error else "response.mcp_list_tools.completed"
                return [self._item_event(status_type, item_id), self._done(item)]
            case ev.McpCallStarted(item_id=item_id, server_label=label, name=name, approval_request_id=approval):
                item = {
                    "type": "mcp_call",
                    "id": item_id,
                    "server_label": label,
                    "name": name,
                    "arguments": "",
                    "approval_request_id": approval,
                    "output": None,
                    "error": None,
                    "status": "in_progress",
                }
                added = self._add(item)
                return [added, self._item_event("response.mcp_call.in_progress", item_id)]
            case ev.McpCallArgumentsDelta(item_id=item_id, delta=delta):
                return [self._arguments_delta("response.mcp_call_arguments.delta", item_id, delta)]
            case ev.McpCallArgumentsDone(item_id=item_id, arguments=arguments):
                i = self._index[item_id]
                self._output[i] = {**self._output[i], "arguments": arguments}
                return [self._arguments_done("response.mcp_call_arguments.done", item_id, arguments)]
            case ev.McpCallDone(item_id=item_id, output=output, error=error):
                status = "failed" if error else "completed"
                item = {**self._output[self._index[item_id]], "output": output, "error": error, "status": status}
                status_type = "response.mcp_call.failed" if error else "response.mcp_call.completed"
                return [self._item_event(status_type, item_id), self._done(item)]
            case ev.FileSearchCallStarted(item_id=item_id):
                added = self._add(_file_search_call(item_id, (), "in_progress", None))
                return [added, self._item_event("response.file_search_call.in_progress", item_id)]
            case ev.FileSearchCallSearching(item_id=item_id):
                return [self._item_event("response.file_search_call.searching", item_id)]
            case ev.FileSearchCallDone(item_id=item_id, queries=queries, status=status, results=results):
                item = _file_search_call(item_id, queries, status, results)
                if status == "failed":  # there is no file_search_call.failed event: the item says it
                    return [self._done(item)]
                return [self._item_event("response.file_search_call.completed", item_id), self._done(item)]
            case ev.WebSearchCallStarted(item_id=item_id, action=action):
                added = self._add(_web_search_call(item_id, action, "in_progress"))
                return [added, self._item_event("response.web_search_call.in_progress", item_id)]
            case ev.WebSearchCallSearching(item_id=item_id):
                return [self._item_event("response.web_search_call.searching", item_id)]
            case ev.WebSearchCallDone(item_id=item_id, action=action, status=status):
                item = _web_search_call(item_id, action, status)
                if status == "failed":  # there is no web_search_call.failed event: the item says it
                    return [self._done(item)]
                return [self._item_event("response.web_search_call.completed", item_id), self._done(item)]
            case ev.CodeInterpreterCallStarted(item_id=item_id, container_id=container_id, outputs=outputs):
                added = self._add(_code_interpreter_call(item_id, "", container_id, outputs, "in_progress"))
                return [added, self._item_event("response.code_interpreter_call.in_progress", item_id)]
            case ev.CodeInterpreterCallCodeDelta(item_id=item_id, delta=delta):
                return [self._arguments_delta("response.code_interpreter_call_code.delta", item_id, delta)]
            case ev.CodeInterpreterCallCodeDone(item_id=item_id, code=code):
                i = self._index[item_id]
                self._output[i] = {**self._output[i], "code": code}
                return [self._code_done(item_id, code)]
            case ev.CodeInterpreterCallInterpreting(item_id=item_id):
                i = self._index[item_id]
                self._output[i] = {**self._output[i], "status": "interpreting"}
                return [self._item_event("response.code_interpreter_call.interpreting", item_id)]
            case ev.CodeInterpreterCallDone(item_id=item_id, container_id=container_id, status=status, outputs=outputs):
                opened = self._output[self._index[item_id]]
                # A call that could not resolve its container keeps the one its item opened with.
                item = _code_interpreter_call(item_id, opened["code"], container_id or opened["container_id"], outputs, status)
                if status != "completed":  # no code_interpreter_call.failed/.incomplete event: the item says it
                    return [self._done(item)]
                return [self._item_event("response.code_interpreter_call.completed", item_id), self._done(item)]
            case ev.ShellCallStarted(item_id=item_id, call_id=call_id, environment=environment):
                return [self._add(_shell_call(item_id, call_id, _NO_ACTION, environment, "in_progress"))]
            case ev.ShellCommandAdded(item_id=item_id, command_index=index):
                return [self._command_event("response.shell_call_command.added", item_id, index, command="")]
            case ev.ShellCommandDelta(item_id=item_id, command_index=index, delta=delta):
                return [self._command_event("response.shell_call_command.delta", item_id, index, delta=delta)]
            case ev.ShellCommandDone(item_id=item_id, command_index=index, command=command):
                return [self._command_event("response.shell_call_command.done", item_id, index, command=command)]
            case ev.ShellCallDone(item_id=item_id, action=action, environment=environment, status=status):
                opened = self._output[self._index[item_id]]
                item = _shell_call(item_id, opened["call_id"], action, environment or opened["environment"], status)
                return [self._done(item)]
            case ev.ShellOutputStarted(item_id=item_id, call_id=call_id, max_output_length=most):
                return [self._add(_shell_call_output(item_id, call_id, most, [], "in_progress"))]
            case ev.ShellOutputDone(item_id=item_id, output=output, status=status):
                opened = self._output[self._index[item_id]]
                told = [e for i, entry in enumerate(output) for e in self._output_content_events(item_id, i, entry)]
                item = _shell_call_output(item_id, opened["call_id"], opened["max_output_length"], list(output), status)
                return [*told, self._done(item)]
            case ev.CompactionStarted(item_id=item_id):
                return [self._add(_compaction(item_id, ""))]
            case ev.CompactionSampling(item_id=item_id):
                return [self._item_event("response.compaction.compacting", item_id)]
            case ev.CompactionDone(item_id=item_id, encrypted_content=content):
                return [self._done(_compaction(item_id, content))]
            case ev.ItemEmitted(item=item):
                return [self._add(item), self._done(item)]
            case ev.StepStarted() | ev.StepTraced() | ev.Checkpoint():
                return []
            case ev.ResponseFinished() as finished:
                return self._finish(finished)
        raise TypeError(f"unknown loop event {event!r}")

    # -- wire events ---------------------------------------------------------------
    # Each is a plain dict shaped like the ``openai.types.responses`` model its docstring
    # names: the same keys, in the model's field order, so the JSON is what
    # ``Model(...).to_dict(mode="json")`` gave. Building those models for every event was
    # the writer's main cost (about 70 events for a 64-token answer);
    # tests/unit/test_writer_wire_shapes.py validates every kind against them instead.
    # An item event carries the very dict ``self._output`` holds (items the loop hands
    # over go out as given): the writer replaces items, never mutates them, and events
    # are read-only to their consumers (Troupe's only serialize them).

    def _add(self, item: dict[str, Any]) -> dict[str, Any]:
        """Append ``item`` at the next ``output_index``: a ``ResponseOutputItemAddedEvent``."""
        i = len(self._output)
        self._index[item["id"]] = i
        self._output.append(item)
        return {
            "item": item,
            "output_index": i,
            "sequence_number": self._next_seq(),
            "type": "response.output_item.added",
        }

    def _done(self, item: dict[str, Any]) -> dict[str, Any]:
        """Replace the item at its ``output_index`` with ``item``: a ``ResponseOutputItemDoneEvent``."""
        i = self._index[item["id"]]
        self._output[i] = item
        return {
            "item": item,
            "output_index": i,
            "sequence_number": self._next_seq(),
            "type": "response.output_item.done",
        }

    def _next_seq(self) -> int:
        seq = self._seq
        self._seq += 1
        return seq

    def _response_event(self, type_: str, response: dict[str, Any]) -> dict[str, Any]:
        """``Response{Created,Queued,InProgress,Completed,Incomplete,Failed}Event``.

        ``response`` goes out as built, with the integer ``created_at`` strict clients
        want (the SDK's Response model types it as a float).
        """
        return {"response": response, "sequence_number": self._next_seq(), "type": type_}

    def _item_event(self, type_: str, item_id: str) -> dict[str, Any]:
        """``ResponseMcpListTools{InProgress,Completed,Failed}Event``, ``ResponseMcpCall{…}Event``,
        ``ResponseCodeInterpreterCall{InProgress,Interpreting,Completed}Event``,
        ``ResponseWebSearchCall{InProgress,Searching,Completed}Event``,
        ``ResponseCompactionCompactingEvent``."""
        return {
            "item_id": item_id,
            "output_index": self._index[item_id],
            "sequence_number": self._next_seq(),
            "type": type_,
        }

    def _content_part_event(self, type_: str, item_id: str, part: dict[str, Any]) -> dict[str, Any]:
        """``ResponseContentPartAddedEvent``, ``ResponseContentPartDoneEvent`` (every item has one part, index 0)."""
        return {
            "content_index": 0,
            "item_id": item_id,
            "output_index": self._index[item_id],
            "part": part,
            "sequence_number": self._next_seq(),
            "type": type_,
        }

    def _text_delta(self, item_id: str, delta: str) -> dict[str, Any]:
        """``ResponseTextDeltaEvent``."""
        return {
            "content_index": 0,
            "delta": delta,
            "item_id": item_id,
            "logprobs": [],
            "output_index": self._index[item_id],
            "sequence_number": self._next_seq(),
            "type": "response.output_text.delta",
        }

    def _text_done(self, item_id: str, text: str) -> dict[str, Any]:
        """``ResponseTextDoneEvent``."""
        return {
            "content_index": 0,
            "item_id": item_id,
            "logprobs": [],
            "output_index": self._index[item_id],
            "sequence_number": self._next_seq(),
            "text": text,
            "type": "response.output_text.done",
        }

    def _annotation_added(self, item_id: str, index: int, annotation: dict[str, Any]) -> dict[str, Any]:
        """``ResponseOutputTextAnnotationAddedEvent``."""
        return {
            "annotation": annotation,
            "annotation_index": index,
            "content_index": 0,
            "item_id": item_id,
            "output_index": self._index[item_id],
            "sequence_number": self._next_seq(),
            "type": "response.output_text.annotation.added",
        }

    def _refusal_event(self, type_: str, item_id: str, **field: str) -> dict[str, Any]:
        """``ResponseRefusalDeltaEvent`` (``delta=``), ``ResponseRefusalDoneEvent`` (``refusal=``)."""
        return {
            "content_index": 0,
            **field,
            "item_id": item_id,
            "output_index": self._index[item_id],
            "sequence_number": self._next_seq(),
            "type": type_,
        }

    def _reasoning_delta(self, item_id: str, delta: str) -> dict[str, Any]:
        """``ResponseReasoningTextDeltaEvent``."""
        return {
            "content_index": 0,
            "delta": delta,
            "item_id": item_id,
            "output_index": self._index[item_id],
            "sequence_number": self._next_seq(),
            "type": "response.reasoning_text.delta",
        }

    def _reasoning_done(self, item_id: str, text: str) -> dict[str, Any]:
        """``ResponseReasoningTextDoneEvent``."""
        return {
            "content_index": 0,
            "item_id": item_id,
            "output_index": self._index[item_id],
            "sequence_number": self._next_seq(),
            "text": text,
            "type": "response.reasoning_text.done",
        }

    def _arguments_delta(self, type_: str, item_id: str, delta: str) -> dict[str, Any]:
        """``ResponseFunctionCallArgumentsDeltaEvent``, ``ResponseMcpCallArgumentsDeltaEvent``,
        ``ResponseCodeInterpreterCallCodeDeltaEvent`` (the same fields)."""
        return {
            "delta": delta,
            "item_id": item_id,
            "output_index": self._index[item_id],
            "sequence_number": self._next_seq(),
            "type": type_,
        }

    def _arguments_done(self, type_: str, item_id: str, arguments: str) -> dict[str, Any]:
        """``ResponseFunctionCallArgumentsDoneEvent``, ``ResponseMcpCallArgumentsDoneEvent``."""
        return {
            "arguments": arguments,
            "item_id": item_id,
            "output_index": self._index[item_id],
            "sequence_number": self._next_seq(),
            "type": type_,
        }

    def _code_done(self, item_id: str, code: str) -> dict[str, Any]:
        """``ResponseCodeInterpreterCallCodeDoneEvent``."""
        return {
            "code": code,
            "item_id": item_id,
            "output_index": self._index[item_id],
            "sequence_number": self._next_seq(),
            "type": "response.code_interpreter_call_code.done",
        }

    def _command_event(self, type_: str, item_id: str, index: int, **text: str) -> dict[str, Any]:
        """``ResponseShellCallCommand{Added,Delta,Done}Event``: ``command=`` (added, done) or
        ``delta=``. They carry no ``item_id``: the ``output_index`` names the ``shell_call``."""
        if "command" in text:
            return {"command": text["command"], "command_index": index, "output_index": self._index[item_id],
                    "sequence_number": self._next_seq(), "type": type_}  # fmt: skip
        return {"command_index": index, "delta": text["delta"], "output_index": self._index[item_id],
                "sequence_number": self._next_seq(), "type": type_}  # fmt: skip

    def _output_content_events(self, item_id: str, index: int, entry: dict[str, Any]) -> list[dict[str, Any]]:
        """``ResponseShellCallOutputContent{Delta,Done}Event`` for one command's output entry."""
        i = self._index[item_id]
        return [
            {"command_index": index, "delta": {"stderr": entry["stderr"], "stdout": entry["stdout"]}, "item_id": item_id,
             "output_index": i, "sequence_number": self._next_seq(), "type": "response.shell_call_output_content.delta"},
            {"command_index": index, "item_id": item_id, "output": [entry], "output_index": i,
             "sequence_number": self._next_seq(), "type": "response.shell_call_output_content.done"},
        ]  # fmt: skip

    def _error_event(self, code: str | None, message: str) -> dict[str, Any]:
        """``ResponseErrorEvent`` (the SDK's flat error shape)."""
        return {"code": code, "message": message, "param": None, "sequence_number": self._next_seq(), "type": "error"}

    # -- the end ---------------------------------------------------------------------

    @staticmethod
    def failure_after(
        snapshot: dict[str, Any] | None, last_sequence_number: int, error: dict[str, Any], completed_at: int
    ) -> list[dict[str, Any]]:
        """``error`` + ``response.failed`` for a stream whose writer is gone (its host failed).

        They number on from the last event the client got, and fail the last Response
        snapshot it saw (Open Responses' rule for errors while streaming).
        """
        failed = dict(snapshot or {}, status="failed", error=error, completed_at=completed_at)
        return [
            {
                "type": "error",
                "sequence_number": last_sequence_number + 1,
                "code": error["code"],
                "message": error["message"],
                "param": None,
            },
            {"type": "response.failed", "sequence_number": last_sequence_number + 2, "response": failed},
        ]

    def _finish(self, finished: ev.ResponseFinished) -> list[dict[str, Any]]:
        self._status = finished.status
        self._usage = finished.usage
        self._completed_at = int(self._clock())
        self._moderation = finished.moderation
        if finished.status == "incomplete":
            self._incomplete = {"reason": finished.incomplete_reason}
            if finished.loop_guard is not None:  # which guard: Troupe's own key beside OpenAI's reason
                self._incomplete["loop_guard"] = finished.loop_guard
        if finished.status == "failed":
            self._error = finished.error or {"code": "server_error", "message": "The response failed."}
        snapshot = self.response
        if finished.status == "cancelled":
            return []
        if finished.status == "requires_action":
            # Not an SDK event type: opt-in for clients that asked for it.
            return [{"type": "response.requires_action", "sequence_number": self._next_seq(), "response": snapshot}]
        out: list[dict[str, Any]] = []
        if finished.status == "failed":
            assert self._error is not None
            out.append(self._error_event(self._error.get("code"), self._error["message"]))
        out.append(self._response_event(_TERMINAL[finished.status], snapshot))
        return out


# -- items the writer builds (dicts in the SDK models' field order, like the events) --------


def _message(item_id: str, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``ResponseOutputMessage``."""
    return {"id": item_id, "content": content, "role": "assistant", "status": status, "type": "message"}


def _text_part(text: str, annotations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A ``ResponseOutputText`` (a message's content part)."""
    return {"annotations": annotations or [], "text": text, "type": "output_text", "logprobs": []}


def _refusal_part(refusal: str) -> dict[str, Any]:
    """A ``ResponseOutputRefusal`` (a message's content part)."""
    return {"refusal": refusal, "type": "refusal"}


def _file_search_call(
    item_id: str, queries: tuple[str, ...], status: str, results: tuple[dict[str, Any], ...] | None
) -> dict[str, Any]:
    """A ``ResponseFileSearchToolCall``."""
    return {
        "id": item_id,
        "queries": list(queries),
        "status": status,
        "type": "file_search_call",
        "results": None if results is None else [_search_result(r) for r in results],
    }


def _web_search_call(item_id: str, action: dict[str, Any], status: str) -> dict[str, Any]:
    """A ``ResponseFunctionWebSearch``."""
    return {"id": item_id, "action": dict(action), "status": status, "type": "web_search_call"}


def _code_interpreter_call(
    item_id: str, code: str, container_id: str, outputs: tuple[dict[str, Any], ...] | None, status: str
) -> dict[str, Any]:
    """A ``ResponseCodeInterpreterToolCall`` (``outputs`` null unless the request includes them)."""
    return {
        "id": item_id,
        "code": code,
        "container_id": container_id,
        "outputs": None if outputs is None else list(outputs),
        "status": status,
        "type": "code_interpreter_call",
    }


_NO_ACTION: dict[str, Any] = {"commands": [], "max_output_length": None, "timeout_ms": None}
"""A ``shell_call``'s action before its arguments are whole."""


def _shell_call(
    item_id: str, call_id: str, action: dict[str, Any], environment: dict[str, Any], status: str
) -> dict[str, Any]:
    """A ``ResponseFunctionShellToolCall``."""
    return {
        "id": item_id,
        "action": {"commands": list(action["commands"]), "max_output_length": action.get("max_output_length"),
                   "timeout_ms": action.get("timeout_ms")},
        "call_id": call_id,
        "environment": environment,
        "status": status,
        "type": "shell_call",
    }  # fmt: skip


def _shell_call_output(
    item_id: str, call_id: str, max_output_length: int | None, output: list[dict[str, Any]], status: str
) -> dict[str, Any]:
    """A ``ResponseFunctionShellToolCallOutput``."""
    return {
        "id": item_id,
        "call_id": call_id,
        "max_output_length": max_output_length,
        "output": output,
        "status": status,
        "type": "shell_call_output",
    }


def _compaction(item_id: str, encrypted_content: str) -> dict[str, Any]:
    """A ``ResponseCompactionItem`` (empty ``encrypted_content`` until the summary is written)."""
    return {"id": item_id, "encrypted_content": encrypted_content, "type": "compaction"}


def _reasoning(item_id: str, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``ResponseReasoningItem``."""
    return {"id": item_id, "summary": [], "type": "reasoning", "content": content, "status": status}


def _reasoning_part(text: str) -> dict[str, Any]:
    """A reasoning item's content part (``response_reasoning_item.Content``)."""
    return {"text": text, "type": "reasoning_text"}


def _function_call(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    """A ``ResponseFunctionToolCall``."""
    return {
        "arguments": arguments,
        "call_id": call_id,
        "name": name,
        "type": "function_call",
        "id": item_id,
        "status": status,
    }


def _search_result(result: dict[str, Any]) -> dict[str, Any]:
    """A ``file_search_call`` result (``response_file_search_tool_call.Result``)."""
    return {
        "attributes": result.get("attributes"),
        "file_id": result.get("file_id"),
        "filename": result.get("filename"),
        "score": result.get("score"),
        "text": result.get("text"),
    }


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
