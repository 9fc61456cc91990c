"""A response's event log, packed: what ``GET ?stream=true`` replays, kept at a fraction of its size.

A stored response's wire events repeat what the stored Response already says. Its Response
snapshots (``response.created``, a background one's ``response.queued``, ``response.in_progress``
and the terminal event) are the Response itself, or the Response before it had output; each
``output_item.done`` carries the item the final ``output`` holds, and each ``….done`` its text
or part; the deltas of an item, joined, are its final text; every event of an item repeats the
item's id, and every event its ``sequence_number``. Written as they are, the events of a 64-token answer take about
17 KB, ten times the Response. :func:`pack` keeps only what the Response cannot give back (a
64-token answer: about 800 bytes) and :func:`unpack` rebuilds the events from it and the
Response, equal key for key and in key order to the events written, so a replay is the stream
the client saw, byte for byte.

Packing is lossless by construction: an event is packed only when every field its row leaves
out is checked to be what :func:`unpack` will put back (the item id is the id at its
``output_index``, ``content_index`` is 0, the keys are the writer's and in its order, a delta
is the next slice of its item's final text). Any other event, such as an ``error`` or a
snapshot the Response cannot give back, is kept whole in its row.
tests/unit/test_event_log.py packs every event kind :class:`troupe.agentloop.writer.WireWriter` writes.

The packed form::

    {"v": 1, "first": <sequence_number of the first event>, "types": [<event type>, ...],
     "rows": [<row>, ...]}

A row starts with its event's type (an index into ``types``) and, but for a Response event,
the event's ``output_index``:

* ``[t, i, [n1, n2, …]]``: deltas, one per length, the next slices of item ``i``'s final text
  (its part's text, its arguments, or its code);
* ``[t, i, value]``: an event carrying ``value`` (a delta, a text, a part or an item), or ``0``
  for the one the final item holds;
* ``[t, i]``: a status event of item ``i``;
* ``[t, 0]``: the final Response; ``[t, [status]]``: the Response as it started, in ``status``;
* the event itself (a dict), when it cannot be packed.

Events number on from ``first``, one per event a row stands for.
"""

from __future__ import annotations

from typing import Any

__all__ = ["pack", "unpack", "PACKED_VERSION"]

PACKED_VERSION = 1

_ITEM_KEYS = ("item", "output_index", "sequence_number", "type")
_RESPONSE_KEYS = ("response", "sequence_number", "type")

# Event type -> (its keys, in the writer's order; the one key the row carries, if any).
_SHAPES: dict[str, tuple[tuple[str, ...], str | None]] = {
    "response.output_text.delta": (
        ("content_index", "delta", "item_id", "logprobs", "output_index", "sequence_number", "type"),
        "delta",
    ),
    "response.output_text.done": (
        ("content_index", "item_id", "logprobs", "output_index", "sequence_number", "text", "type"),
        "text",
    ),
    "response.reasoning_text.delta": (
        ("content_index", "delta", "item_id", "output_index", "sequence_number", "type"),
        "delta",
    ),
    "response.reasoning_text.done": (
        ("content_index", "item_id", "output_index", "sequence_number", "text", "type"),
        "text",
    ),
    **{
        name: (("content_index", "item_id", "output_index", "part", "sequence_number", "type"), "part")
        for name in ("response.content_part.added", "response.content_part.done")
    },
    **{
        name: (("delta", "item_id", "output_index", "sequence_number", "type"), "delta")
        for name in (
            "response.function_call_arguments.delta",
            "response.mcp_call_arguments.delta",
            "response.code_interpreter_call_code.delta",
        )
    },
    **{
        name: (("arguments", "item_id", "output_index", "sequence_number", "type"), "arguments")
        for name in ("response.function_call_arguments.done", "response.mcp_call_arguments.done")
    },
    "response.code_interpreter_call_code.done": (("code", "item_id", "output_index", "sequence_number", "type"), "code"),
    **{
        name: (("item_id", "output_index", "sequence_number", "type"), None)
        for name in (
            "response.mcp_list_tools.in_progress",
            "response.mcp_list_tools.completed",
            "response.mcp_list_tools.failed",
            "response.mcp_call.in_progress",
            "response.mcp_call.completed",
            "response.mcp_call.failed",
            "response.file_search_call.in_progress",
            "response.file_search_call.searching",
            "response.file_search_call.completed",
            "response.web_search_call.in_progress",
            "response.web_search_call.searching",
            "response.web_search_call.completed",
            "response.code_interpreter_call.in_progress",
            "response.code_interpreter_call.interpreting",
            "response.code_interpreter_call.completed",
            "response.compaction.compacting",
        )
    },
    **{name: (_ITEM_KEYS, "item") for name in ("response.output_item.added", "response.output_item.done")},
    **{
        name: (_RESPONSE_KEYS, "response")
        for name in (
            "response.created",
            "response.queued",
            "response.in_progress",
            "response.completed",
            "response.incomplete",
            "response.failed",
        )
    },
}



def _as_started(response: dict[str, Any], status: Any) -> dict[str, Any]:
    """``response`` as it was before its first output, in ``status``: the fields its end sets unset."""
    unset: dict[str, Any] = {"completed_at": None, "error": None, "incomplete_details": None, "output": [], "usage": None}
    return {**response, **unset, "status": status}


def pack(events: list[dict[str, Any]], response: dict[str, Any]) -> dict[str, Any]:
    """``events`` (a response's wire events, in order) as a packed log; ``response``: the
    Response stored with them, which :func:`unpack` is given back."""
    output = response.get("output") or []
    types: dict[str, int] = {}
    rows: list[Any] = []
    texts: dict[tuple[str, int], list[Any]] = {}  # (delta type, index) -> [its item's text, how much runs hold]
    first = events[0]["sequence_number"] if events else 0
    for position, event in enumerate(events):
        type_ = event.get("type", "")  # no event type is "": an untyped event is a row as it is
        shape = _SHAPES.get(type_)
        if shape is None or event["sequence_number"] != first + position or tuple(event) != shape[0]:
            rows.append(event)
            continue
        keys, carried = shape
        t = types.setdefault(type_, len(types))
        if carried == "response":
            status = event["response"].get("status")
            if event["response"] == response:
                rows.append([t, 0])
            elif event["response"] == _as_started(response, status):
                rows.append([t, [status]])
            else:
                rows.append(event)
            continue
        i = event["output_index"]
        if not _packable(event, keys, output, i):
            rows.append(event)
            continue
        value: Any = event[carried] if carried else None
        if carried == "delta":
            text = texts.get((type_, i))
            if text is None:
                text = texts[type_, i] = [_text_of(output[i], type_), 0]
            if text[0] is not None and text[0].startswith(value, text[1]):  # the next slice of the item's text
                text[1] += len(value)
                last = rows[-1] if rows else None
                if type(last) is list and len(last) == 3 and last[0] == t and last[1] == i and isinstance(last[2], list):
                    last[2].append(len(value))
                else:
                    rows.append([t, i, [len(value)]])
                continue
        elif carried is not None and value == _final(output[i], carried, type_):
            value = 0
        rows.append([t, i] if carried is None else [t, i, value])
    return {"v": PACKED_VERSION, "first": first, "types": list(types), "rows": rows}


def _text_of(item: dict[str, Any], type_: str) -> str | None:
    """The text whose slices the deltas of ``type_`` are: the item's arguments or code, or its part's text."""
    if "arguments" in type_:
        text = item.get("arguments")
    elif type_.startswith("response.code_interpreter_call_code."):
        text = item.get("code")
    else:
        content = item.get("content")
        text = content[0].get("text") if isinstance(content, list) and content and isinstance(content[0], dict) else None
    return text if isinstance(text, str) else None


def _final(item: dict[str, Any], carried: str, type_: str) -> Any:
    """What the final ``item`` says the ``carried`` field of a ``type_`` event is (None: nothing)."""
    if carried == "item":
        return item
    if carried == "part":
        content = item.get("content")
        return content[0] if isinstance(content, list) and content and type_.endswith(".done") else None
    return _text_of(item, type_) if carried in ("text", "arguments", "code") else None


def _packable(event: dict[str, Any], keys: tuple[str, ...], output: list[dict[str, Any]], i: Any) -> bool:
    """Whether the fields a row leaves out of ``event`` are what :func:`unpack` puts back."""
    return (
        type(i) is int
        and 0 <= i < len(output)
        and event.get("item_id", output[i].get("id")) == output[i].get("id")
        and event.get("content_index", 0) == 0
        and event.get("logprobs", []) == []
    )


def unpack(log: dict[str, Any] | list[dict[str, Any]], response: dict[str, Any]) -> list[dict[str, Any]]:
    """The wire events a packed ``log`` holds, rebuilt with ``response`` (the Response they
    were packed with). A list is a log stored unpacked (before packing existed): as it is."""
    if isinstance(log, list):
        return log
    if log.get("v") != PACKED_VERSION:
        raise ValueError(f"unknown event log version {log.get('v')!r}")
    output = response.get("output") or []
    types = log["types"]
    events: list[dict[str, Any]] = []
    taken: dict[tuple[str, int], int] = {}
    seq = log["first"]
    for row in log["rows"]:
        if isinstance(row, dict):
            events.append(row)
            seq += 1
            continue
        type_ = types[row[0]]
        keys, carried = _SHAPES[type_]
        if carried == "response":
            ref = row[1]
            value: Any = response if ref == 0 else _as_started(response, ref[0])
            events.append({"response": value, "sequence_number": seq, "type": type_})
            seq += 1
            continue
        i = row[1]
        if carried == "delta" and isinstance(row[2], list):  # a run of slices of the item's text
            text, at = _text_of(output[i], type_) or "", taken.get((type_, i), 0)
            for length in row[2]:
                events.append(_event(keys, type_, seq, i, output[i], text[at : at + length]))
                at, seq = at + length, seq + 1
            taken[type_, i] = at
            continue
        value = None
        if carried is not None:
            value = _final(output[i], carried, type_) if row[2] == 0 else row[2]
        events.append(_event(keys, type_, seq, i, output[i], value))
        seq += 1
    return events


def _event(keys: tuple[str, ...], type_: str, seq: int, i: int, item: dict[str, Any], value: Any) -> dict[str, Any]:
    """The event of ``type_`` (its ``keys``, in order) about ``item``, at ``i``, carrying ``value``."""
    _, carried = _SHAPES[type_]
    fields = {
        "content_index": 0,
        "item_id": item.get("id"),
        "logprobs": [],
        "output_index": i,
        "sequence_number": seq,
        "type": type_,
        carried or "": value,
    }
    return {key: fields[key] for key in keys}
