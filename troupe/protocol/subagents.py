"""Subagents (the Agents API's ``multi_agent``), pure: the tools an agent with
``multi_agent.enabled`` gets, the items its calls show as, and the subagent object.

A subagent is a session of its own (its own conversation, so its own host: subagents run in
parallel across the cluster), made by its parent's ``create_subagent`` call, under an id that
call's id names (``sess_`` and the call id's suffix: a call run twice makes one subagent).
The tools, as the model sees them (function tools, run by the server, never by the client)::

    create_subagent(task, name?)          start a subagent on ``task``; {"subagent_id", "status": "running"}
    wait_for_subagents(subagent_ids?)     wait until each (default: every open one) is idle;
                                          {"subagents": [{"subagent_id", "status", "output"}]}
    send_subagent_input(subagent_id, input)   a new turn of the subagent
    interrupt_subagent(subagent_id)       cancel its running turn
    close_subagent(subagent_id)           close it (its running turn is cancelled)
    resume_subagent(subagent_id)          open a closed subagent again

Their calls show in a session as the SDK's ``create_subagent_call``, ``wait_for_subagents_call``,
… items (:func:`subagent_item`), and their outputs not at all.
"""

from __future__ import annotations

import json
from typing import Any

from .ids import AGENT_SESSION

__all__ = [
    "CLOSE",
    "CREATE",
    "INTERRUPT",
    "RESUME",
    "SEND",
    "SUBAGENT_TOOLS",
    "SUBAGENT_TOOL_NAMES",
    "WAIT",
    "subagent_event_kind",
    "subagent_id_of",
    "subagent_item",
    "subagent_object",
    "subagent_of_call",
]

CREATE, WAIT, SEND = "create_subagent", "wait_for_subagents", "send_subagent_input"
INTERRUPT, CLOSE, RESUME = "interrupt_subagent", "close_subagent", "resume_subagent"
SUBAGENT_TOOL_NAMES = frozenset({CREATE, WAIT, SEND, INTERRUPT, CLOSE, RESUME})

_ID = {"type": "string", "description": "The subagent's id (create_subagent's subagent_id)."}


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "name": name, "description": description, "strict": False,
            "parameters": {"type": "object", "properties": properties, "required": required}}  # fmt: skip


SUBAGENT_TOOLS: tuple[dict[str, Any], ...] = (
    _tool(CREATE, "Start a subagent working on a task, in parallel with you and the other subagents. It "
          "returns at once; call wait_for_subagents for the results.",
          {"task": {"type": "string", "description": "What the subagent is to do: all it knows."},
           "name": {"type": "string", "description": "A short name for it."}}, ["task"]),
    _tool(WAIT, "Wait until subagents are done with their work; their answers.",
          {"subagent_ids": {"type": "array", "items": _ID, "description": "Which (default: every open one)."}}, []),
    _tool(SEND, "Give a subagent more input: a new turn of its work.",
          {"subagent_id": _ID, "input": {"type": "string"}}, ["subagent_id", "input"]),
    _tool(INTERRUPT, "Stop a subagent's current work (it stays open).", {"subagent_id": _ID}, ["subagent_id"]),
    _tool(CLOSE, "Close a subagent (its current work is stopped).", {"subagent_id": _ID}, ["subagent_id"]),
    _tool(RESUME, "Open a closed subagent again.", {"subagent_id": _ID}, ["subagent_id"]),
)  # fmt: skip
"""The function tools an agent with ``multi_agent.enabled`` is given (Responses' shape)."""


def subagent_id_of(call_id: str) -> str:
    """The id of the subagent a ``create_subagent`` call makes: the same call, the same subagent."""
    return f"{AGENT_SESSION}_{call_id.split('_', 1)[-1]}"


def _arguments(call: dict[str, Any]) -> dict[str, Any]:
    try:
        parsed = json.loads(call.get("arguments") or "{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def subagent_item(call: dict[str, Any], turn_id: str, sender: str, output: Any = None) -> dict[str, Any]:
    """A subagent tool's ``function_call`` as the SDK's item (``create_subagent_call``…);
    ``output``: its ``function_call_output``'s, when there is one (the item is then done)."""
    name, args = call["name"], _arguments(call)
    status = "in_progress" if output is None else ("failed" if str(output).startswith("Error:") else "completed")
    base = {"id": call.get("id"), "status": status, "turn_id": turn_id}
    if name == CREATE:
        return {**base, "type": "create_subagent_call", "agent_id": subagent_id_of(call["call_id"]),
                "content": [{"type": "output_text", "text": str(args.get("task", ""))}], "model": None,
                "reasoning_effort": None}  # fmt: skip
    if name == WAIT:
        ids = args.get("subagent_ids")
        if not isinstance(ids, list) and output is not None:
            try:
                ids = [s["subagent_id"] for s in json.loads(output)["subagents"]]
            except (ValueError, KeyError, TypeError):
                ids = []
        return {**base, "type": "wait_for_subagents_call", "sender_agent_id": sender,
                "recipient_agent_ids": [str(i) for i in ids or ()]}  # fmt: skip
    kind = {SEND: "send_subagent_input_call", INTERRUPT: "interrupt_subagent_call", CLOSE: "close_subagent_call",
            RESUME: "resume_subagent_call"}[name]  # fmt: skip
    item = {**base, "type": kind, "sender_agent_id": sender, "recipient_agent_id": str(args.get("subagent_id", ""))}
    if name == SEND:
        item["content"] = [{"type": "output_text", "text": str(args.get("input", ""))}]
    return item


def subagent_of_call(call: dict[str, Any]) -> str | None:
    """The subagent a call of one subagent tool is about (a create's is the one it makes); None
    for ``wait_for_subagents``, which may name several."""
    if call["name"] == CREATE:
        return subagent_id_of(call["call_id"])
    if call["name"] == WAIT:
        return None
    named = _arguments(call).get("subagent_id")
    return named if isinstance(named, str) else None


def subagent_event_kind(call: dict[str, Any], output: Any) -> str | None:
    """The parent session's event a settled call makes (``agent.session.subagent.created``,
    ``…closed``, ``…active`` for a resume), or None: a call that failed (its output is
    ``Error: …``) or one that opens or closes no subagent."""
    if str(output).startswith("Error:"):
        return None
    suffix = {CREATE: "created", CLOSE: "closed", RESUME: "active"}.get(call["name"])
    return None if suffix is None else f"agent.session.subagent.{suffix}"


def subagent_object(child: dict[str, Any], parent: dict[str, Any]) -> dict[str, Any]:
    """The SDK's ``Subagent``: the subagent session ``child`` of the session ``parent``."""
    closed_at = child.get("closed_at")
    return {
        "id": child["id"], "object": "agent.session.subagent", "session_id": parent["id"],
        "parent_agent_id": parent["agent"]["id"], "name": child.get("subagent_name"),
        "instructions": [{"type": "output_text", "text": child.get("task", "")}],
        "opened_at": int(child["created_at"]), "closed_at": None if closed_at is None else int(closed_at),
        "status": "active" if closed_at is None else "closed",
    }  # fmt: skip
