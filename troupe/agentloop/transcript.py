"""The canonical loop transcript, built in one place, and the upstream payload built from it.

Internal to the loop and Troupe's runtime: not part of :mod:`troupe.agentloop`'s public surface.

Three representations, kept apart (see docs/architecture.md):

* the **client transcript**: Responses wire items as the client sent and
  receives them (``history`` + ``new_input`` here);
* the **canonical transcript**: the few item kinds the loop reasons over:
  ``message`` (role + text/parts), ``function_call`` and ``function_call_output``;
* the **upstream payload**: Chat Completions messages, rebuilt from the
  canonical transcript on every model call, never patched in place.

Canonicalization rules (:func:`build_transcript`):

* a replayed ``mcp_call`` becomes a ``function_call`` plus its output (an error
  becomes the output text), so the model sees what happened and nothing runs again;
  so does a ``file_search_call``, its output rebuilt from its ``results`` (:mod:`.file_search`),
  a ``web_search_call``, as the web tool call of its ``action`` whose results were not kept
  (:mod:`.web_search`),
  and a ``code_interpreter_call``, as a ``python`` call of its ``code`` with its ``outputs`` as
  the output (:mod:`.code_interpreter`);
* a ``shell_call`` becomes a ``shell`` call of its ``action``, and the ``shell_call_output``
  that answers it (the server's, or the client's for a local environment) its output, each
  command's stdout, stderr and exit code as text (:mod:`.shell`); a ``shell_call_output``
  pairs with a ``shell_call`` by ``call_id`` as a ``function_call_output`` does with its call
  (an unpaired one is a 400 naming ``input[i].call_id``);
* ``mcp_list_tools``, ``mcp_approval_request``, ``mcp_approval_response``,
  ``reasoning`` and hosted-tool items never go upstream;
* a ``compaction`` item (made by ``POST /v1/responses/compact``, or by the loop itself under
  ``context_management``) replaces what comes before it in the thread, history or input alike
  (:meth:`Transcript.compact`): the user messages stay, everything else is left for its summary,
  which goes upstream as a system message (:mod:`.compaction`); one made elsewhere is a 400, and
  one with empty ``encrypted_content`` (a compaction whose summary call failed or was cancelled)
  replaces nothing;
* a ``function_call_output`` must pair, by ``call_id``, with a ``function_call``
  earlier in history or input; an unpaired output, or a second output for a
  settled call, is a 400 naming ``input[i].call_id``;
* an input item whose ``id`` the history already holds is dropped (clients
  that re-send their history get de-duplicated, not a 400);
* ``item_reference`` resolves against the history's items;
* an ``mcp_approval_response`` must name an ``mcp_approval_request`` of the thread (else
  a 400 naming ``input[i].approval_request_id``); a denial becomes the call plus a
  "denied" output, so the model is told; an approval in this request's input is left
  for the loop to run (:attr:`Transcript.approved`); a request already settled (its
  ``mcp_call`` or a denial exists) is never run again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from troupe.protocol import InvalidRequest, content_text

from .code_interpreter import PYTHON
from .code_interpreter import replayed_output as replayed_run
from .compaction import decode_summary, summary_message
from .file_search import FILE_SEARCH, replayed_output, replayed_results
from .model import ToolCall
from .shell import SHELL, shell_action
from .shell import replayed_output as replayed_commands
from .web_search import replayed as replayed_web_call

__all__ = ["Transcript", "build_transcript"]

@dataclass(slots=True)
class Transcript:
    """Canonical items, appended to as the loop runs (mutated in place, never reordered)."""

    items: list[dict[str, Any]] = field(default_factory=list)
    approved: list[dict[str, Any]] = field(default_factory=list)
    """``mcp_approval_request`` items this request's input approves and nothing has run yet."""

    def add_message(self, role: str, text: str) -> None:
        self.items.append({"type": "message", "role": role, "content": text})

    def add_call(self, call: ToolCall) -> None:
        self.items.append(
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments}
        )

    def add_output(self, call_id: str, output: str) -> None:
        self.items.append({"type": "function_call_output", "call_id": call_id, "output": output})

    def replace_output(self, call_id: str, output: Any) -> None:
        """Put ``output`` (a client's, as its input item has it) in place of call ``call_id``'s
        (a guardrail rewrote it before the model sees it)."""
        for item in self.items:
            if item["type"] == "function_call_output" and item["call_id"] == call_id:
                item["output"] = _output_text(output)

    def outputs_of(self, name: str) -> list[str]:
        """The outputs of the calls of tool ``name``, in order."""
        calls = {i["call_id"] for i in self.items if i["type"] == "function_call" and i["name"] == name}
        return [i["output"] for i in self.items if i["type"] == "function_call_output" and i["call_id"] in calls]

    def compact(self, summary: str) -> None:
        """Replace the transcript by its compacted form, as a ``compaction`` item with ``summary``
        standing here means: every user message stays, in order; everything else (answers, tool
        calls and results, system and developer messages, an earlier summary) is left out, for
        the summary stands for it.

        Where the summary goes: after the user messages the thread had answered, and before
        those that came after its last answer, tool call or result (the question being
        answered when it was made). So a turn that compacts before answering sends
        ``users…, summary, question``; one that compacts between tool steps sends
        ``users…, summary`` (the summary tells of the calls); and the compact endpoint's output
        (nothing but user messages before its item) sends ``users…, summary``.
        """
        last = max((i for i, item in enumerate(self.items) if not _is_user(item)), default=None)
        if last is None:
            self.items.append(summary_message(summary))
            return
        answered = [item for item in self.items[: last + 1] if _is_user(item)]
        self.items = [*answered, summary_message(summary), *self.items[last + 1 :]]

    def compactable(self) -> bool:
        """Whether :meth:`compact` would leave anything out: the transcript holds something
        besides user messages and the summary of the last compaction."""
        others = [item for item in self.items if not _is_user(item)]
        return bool(others) and not (len(others) == 1 and others[0].get("summary"))

    def settled_call_ids(self) -> set[str]:
        return {item["call_id"] for item in self.items if item["type"] == "function_call_output"}

    def to_chat_messages(
        self, instructions: str | None = None, prelude: Sequence[dict[str, Any]] = ()
    ) -> list[dict[str, Any]]:
        """The upstream Chat Completions messages for this transcript.

        First what goes before the thread: ``prelude`` (a resolved prompt's input messages,
        :mod:`troupe.protocol.prompts`), then ``instructions`` as a system message (a request
        with a prompt has them in its prelude already).

        Only the calls of one model turn share an assistant message: a call that
        comes after tool results starts a new one, so ``call 1 → result 1 → call 2
        → result 2`` goes upstream as two assistant messages, each followed by its
        tool message, never as two calls made in parallel. Each assistant tool-call
        message is followed at once by its tool messages, wherever the outputs stood
        in the transcript (Chat Completions requires that); calls with no output yet
        are left out.
        """
        outputs = {i["call_id"]: i["output"] for i in self.items if i["type"] == "function_call_output"}
        messages: list[dict[str, Any]] = [_chat_message(item) for item in prelude]
        if instructions:
            messages.append({"role": "system", "content": instructions})
        pending_tools: list[dict[str, Any]] = []  # tool messages owed after the current assistant message
        results_seen = False  # a tool result stood after the current assistant message began

        for item in self.items:
            kind = item["type"]
            if kind == "message":
                messages.extend(pending_tools)
                pending_tools.clear()
                messages.append(_chat_message(item))
                results_seen = False
            elif kind == "function_call_output":
                results_seen = True
            elif kind == "function_call":
                if item["call_id"] not in outputs:
                    continue
                last = messages[-1] if messages else None
                if last is None or last["role"] != "assistant" or results_seen:
                    # A new model turn: the previous turn's results go first.
                    messages.extend(pending_tools)
                    pending_tools.clear()
                    last = {"role": "assistant", "content": None}
                    messages.append(last)
                    results_seen = False
                last.setdefault("tool_calls", []).append(
                    {
                        "id": item["call_id"],
                        "type": "function",
                        "function": {"name": item["name"], "arguments": item["arguments"] or "{}"},
                    }
                )
                pending_tools.append(
                    {"role": "tool", "tool_call_id": item["call_id"], "content": outputs[item["call_id"]]}
                )
        messages.extend(pending_tools)
        return messages


def _is_user(item: dict[str, Any]) -> bool:
    return item["type"] == "message" and item["role"] == "user"


def _chat_message(item: dict[str, Any]) -> dict[str, Any]:
    role = item["role"]
    # Many OpenAI-compatible servers reject the newer "developer" role; it means "system" to them.
    chat_role = "system" if role == "developer" else role
    content = item["content"]
    if isinstance(content, str) or chat_role != "user":
        return {"role": chat_role, "content": content_text(content)}
    parts: list[dict[str, Any]] = []
    for part in content:
        if part.get("type") == "input_image" and part.get("image_url"):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"], "detail": part.get("detail", "auto")}})
        else:
            text = content_text([part])
            if text:
                parts.append({"type": "text", "text": text})
    if all(p["type"] == "text" for p in parts):
        return {"role": "user", "content": "".join(p["text"] for p in parts)}
    return {"role": "user", "content": parts}


def _error_text(error: Any) -> str:
    if isinstance(error, str):
        return f"Error: {error}"
    if isinstance(error, dict):
        detail = error.get("message") or error.get("content") or json.dumps(error)
        if not isinstance(detail, str):
            detail = content_text(detail) if isinstance(detail, list) else json.dumps(detail)
        return f"Error: {detail}"
    return f"Error: {error}"


def _output_text(output: Any) -> str:
    return output if isinstance(output, str) else content_text(output)


def _is_refusal(item: dict[str, Any]) -> bool:
    """An assistant message that is a refusal only (a guardrail's, or the model's)."""
    content = item.get("content")
    return (item.get("type", "message") == "message" and item.get("role") == "assistant" and isinstance(content, list)
            and bool(content) and all(isinstance(p, dict) and p.get("type") == "refusal" for p in content))  # fmt: skip


def _without_refused(history: Sequence[dict[str, Any]]) -> Sequence[dict[str, Any]]:
    """``history`` without its refused exchanges: a refusal and the input messages just before
    it. What a guardrail refused never goes upstream, in its own turn or a later one."""
    if not any(_is_refusal(item) for item in history):
        return history
    kept: list[dict[str, Any]] = []
    for item in history:
        if _is_refusal(item):
            while kept and kept[-1].get("type", "message") == "message" and kept[-1].get("role") != "assistant":
                kept.pop()
        else:
            kept.append(item)
    return kept


def build_transcript(
    history: Sequence[dict[str, Any]], new_input: Sequence[dict[str, Any]]
) -> tuple[Transcript, list[dict[str, Any]]]:
    """Canonicalize ``history`` + ``new_input`` (both normalized client items).

    Args:
        history: the thread's earlier items (previous responses' input and output,
            or the conversation's items), oldest first.
        new_input: this request's input items, normalized (every item has ``type``).

    Returns:
        The canonical transcript, and the input items actually accepted
        (``new_input`` minus duplicates of history items), to be stored as the
        response's input.

    Raises:
        InvalidRequest: an unpaired or duplicate ``function_call_output``, or an
            ``item_reference`` to an unknown item; ``param`` names the input item.
    """
    transcript = Transcript()
    known_ids = {item["id"]: item for item in history if item.get("id")}
    calls: set[str] = set()
    settled: set[str] = set()
    requests: dict[str, dict[str, Any]] = {}  # mcp_approval_request items by id
    approved: dict[str, dict[str, Any]] = {}  # approved in this input, not yet run
    markers = [0]  # the next file_search passage marker, numbered across the thread
    shell_calls: dict[str, list[str]] = {}  # shell_call call_id -> its commands

    history = _without_refused(history)

    def take(item: dict[str, Any], index: int | None) -> None:
        kind = item.get("type", "message")
        if kind == "message":
            transcript.items.append({"type": "message", "role": item["role"], "content": item.get("content", "")})
        elif kind == "function_call":
            calls.add(item["call_id"])
            transcript.items.append(
                {"type": "function_call", "call_id": item["call_id"], "name": item["name"], "arguments": item.get("arguments", "")}
            )
        elif kind == "function_call_output":
            call_id = item.get("call_id") or ""  # none: no call has it
            if index is not None:
                _check_output(call_id, index, calls, settled)
            elif call_id not in calls or call_id in settled:
                return  # a stray output in stored history cannot be sent upstream
            settled.add(call_id)
            transcript.add_output(call_id, _output_text(item.get("output")))
        elif kind == "mcp_call":
            call_id = item.get("id") or item.get("call_id", "")
            calls.add(call_id)
            settled.add(call_id)
            if item.get("approval_request_id"):
                settled.add(item["approval_request_id"])
                approved.pop(item["approval_request_id"], None)
            transcript.items.append(
                {"type": "function_call", "call_id": call_id, "name": item["name"], "arguments": item.get("arguments", "")}
            )
            error = item.get("error")
            transcript.add_output(call_id, _error_text(error) if error else _output_text(item.get("output")))
        elif kind == "file_search_call":
            call_id = item.get("id", "")
            calls.add(call_id)
            settled.add(call_id)
            queries = item.get("queries")
            query = next(iter(queries), "") if isinstance(queries, list) else ""
            transcript.items.append(
                {"type": "function_call", "call_id": call_id, "name": FILE_SEARCH, "arguments": json.dumps({"query": query})}
            )
            transcript.add_output(call_id, replayed_output(item, markers[0]))
            markers[0] += len(replayed_results(item) or [])
        elif kind == "web_search_call":
            call_id = item.get("id", "")
            calls.add(call_id)
            settled.add(call_id)
            web_name, web_arguments, web_output = replayed_web_call(item)
            transcript.items.append({"type": "function_call", "call_id": call_id, "name": web_name,
                                     "arguments": web_arguments})  # fmt: skip
            transcript.add_output(call_id, web_output)
        elif kind == "code_interpreter_call":
            call_id = item.get("id", "")
            calls.add(call_id)
            settled.add(call_id)
            code = item.get("code")
            transcript.items.append({"type": "function_call", "call_id": call_id, "name": PYTHON,
                                     "arguments": json.dumps({"code": code if isinstance(code, str) else ""})})  # fmt: skip
            transcript.add_output(call_id, replayed_run(item))
        elif kind == "shell_call":
            call_id = item.get("call_id") or ""
            action = item.get("action") if isinstance(item.get("action"), dict) else {}
            shown = shell_action(json.dumps(action))
            calls.add(call_id)
            shell_calls[call_id] = shown["commands"]
            arguments = {"commands": shown["commands"], **{k: v for k, v in shown.items() if k != "commands" and v}}
            transcript.items.append({"type": "function_call", "call_id": call_id, "name": SHELL,
                                     "arguments": json.dumps(arguments)})  # fmt: skip
        elif kind == "shell_call_output":
            call_id = item.get("call_id") or ""
            if index is not None:
                _check_output(call_id, index, calls, settled, kind="shell_call_output")
                if call_id not in shell_calls:
                    raise InvalidRequest(f"No shell call found for shell_call_output with call_id '{call_id}'.",
                                         param=f"input[{index}].call_id", code="invalid_value")  # fmt: skip
            elif call_id not in shell_calls or call_id in settled:
                return  # a stray output in stored history cannot be sent upstream
            settled.add(call_id)
            transcript.add_output(call_id, replayed_commands(shell_calls[call_id], item))
        elif kind == "compaction":
            content = item.get("encrypted_content")
            if content == "":
                return  # a compaction that never got its summary (the call failed, or was cancelled)
            param = None if index is None else f"input[{index}].encrypted_content"
            transcript.compact(decode_summary(content, param=param))
        elif kind == "mcp_approval_request":
            requests[item["id"]] = item
        elif kind == "mcp_approval_response":
            _take_approval(item, index)
        # Everything else (mcp_list_tools, reasoning, other hosted-tool calls) is for the client
        # only and stays out of the upstream view.

    def _take_approval(item: dict[str, Any], index: int | None) -> None:
        request_id = item.get("approval_request_id", "")
        request = requests.get(request_id)
        if request is None:
            if index is None:
                return
            raise InvalidRequest(
                f"No mcp_approval_request with id '{request_id}' in this conversation.",
                param=f"input[{index}].approval_request_id",
                code="invalid_value",
            )
        if request_id in settled:
            return  # already ran or was denied: never run twice
        if item.get("approve"):
            if index is not None:
                approved[request_id] = request
            return
        settled.add(request_id)
        reason = item.get("reason")
        transcript.items.append(
            {"type": "function_call", "call_id": request_id, "name": request["name"], "arguments": request.get("arguments", "")}
        )
        transcript.add_output(request_id, "The user denied this tool call." + (f" Reason: {reason}" if reason else ""))

    for item in history:
        take(item, None)
    accepted: list[dict[str, Any]] = []
    for index, item in enumerate(new_input):
        if item.get("id") and item["id"] in known_ids and item.get("type") != "item_reference":
            continue  # already in the thread: de-duplicate
        if item.get("type") == "item_reference":
            target = known_ids.get(item.get("id", ""))
            if target is None:
                raise InvalidRequest(
                    f"Item with id '{item.get('id')}' not found.", param=f"input[{index}].id", code="not_found"
                )
            take(target, index)
        else:
            take(item, index)
        accepted.append(item)
    transcript.approved = list(approved.values())
    return transcript, accepted


def _check_output(
    call_id: str | None, index: int, calls: set[str], settled: set[str], *, kind: str = "function_call_output"
) -> None:
    param = f"input[{index}].call_id"
    if not call_id:
        raise InvalidRequest(f"A {kind} needs a 'call_id'.", param=param, code="missing_required_parameter")
    if call_id not in calls:
        what = "function call output" if kind == "function_call_output" else kind
        raise InvalidRequest(f"No tool call found for {what} with call_id '{call_id}'.", param=param,
                             code="invalid_value")  # fmt: skip
    if call_id in settled:
        raise InvalidRequest(
            f"The tool call '{call_id}' already has an output.", param=param, code="invalid_value"
        )

