"""The packed event log (troupe/storage/event_log.py): every event kind the writer emits
comes back from its row equal, key order included, and is in fact packed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.test_writer_wire_shapes import SCENARIOS
from troupe.storage import event_log

# The only events a row keeps whole: their fields are not in the Response.
KEPT_WHOLE = {"error", "response.requires_action", "response.output_text.annotation.added"}
# The shell tool's events are not packed yet (troupe/storage/event_log.py has no rows for them):
# kept whole, which is still lossless, only larger. Packing them is the storage side's to do.
KEPT_WHOLE |= {f"response.shell_call_{kind}" for kind in ("command.added", "command.delta", "command.done",
                                                           "output_content.delta", "output_content.done")}  # fmt: skip


def _stored(value: Any) -> Any:
    """``value`` as it comes back from storage (JSON)."""
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
async def test_every_event_comes_back_as_written_and_is_packed(scenario):
    for outcome in await scenario():
        events, response = outcome.events, outcome.response
        packed = _stored(event_log.pack(events, response))
        replayed = event_log.unpack(packed, _stored(response))
        assert json.dumps(replayed) == json.dumps(events)  # equal, and in the same key order
        whole = {row["type"] for row in packed["rows"] if isinstance(row, dict)}
        assert whole <= KEPT_WHOLE, f"{whole - KEPT_WHOLE} were not packed"
        deltas = [e for e in events if e["type"].endswith(".delta") and e["type"] not in KEPT_WHOLE]
        runs = [r for r in packed["rows"] if isinstance(r, list) and len(r) == 3 and isinstance(r[2], list)]
        assert sum(len(r[2]) for r in runs) == len(deltas), "every delta is a slice of its item's text"


async def test_a_packed_answer_is_a_fraction_of_its_events():
    # Every scenario's first outcome; the text answer is the plain case.
    outcome = (await SCENARIOS[0]())[0]
    packed = json.dumps(event_log.pack(outcome.events, outcome.response))
    assert len(packed) * 6 < len(json.dumps(outcome.events))


async def test_an_event_the_response_cannot_give_back_is_kept_whole():
    outcome = (await SCENARIOS[0]())[0]
    events = [dict(e) for e in outcome.events]
    deltas = [i for i, e in enumerate(events) if e["type"] == "response.output_text.delta"]
    events[deltas[0]]["content_index"] = 1  # not the writer's (every item has one part)
    events[deltas[1]]["delta"] = " not the text's next slice"
    events[0] = {**events[0], "response": {**events[0]["response"], "model": "another"}}
    packed = _stored(event_log.pack(events, outcome.response))
    assert events[deltas[0]] in packed["rows"] and events[0] in packed["rows"]
    assert [r for r in packed["rows"] if " not the text's next slice" in r], "kept in its row"
    assert event_log.unpack(packed, outcome.response) == events


def test_a_log_stored_before_packing_reads_as_it_is():
    events = [{"type": "response.created", "sequence_number": 0, "response": {"id": "resp_1"}}]
    assert event_log.unpack(events, {"id": "resp_1"}) is events


def test_an_unknown_version_is_refused():
    with pytest.raises(ValueError, match="version 9"):
        event_log.unpack({"v": 9, "first": 0, "types": [], "rows": []}, {})


def test_a_log_that_starts_past_zero_keeps_its_numbers():
    events = [
        {"item_id": "mcp_1", "output_index": 0, "sequence_number": 7, "type": "response.mcp_call.completed"},
        {"item_id": "mcp_1", "output_index": 0, "sequence_number": 8, "type": "response.mcp_call.failed"},
    ]
    response = {"id": "resp_1", "output": [{"id": "mcp_1", "type": "mcp_call"}]}
    packed = event_log.pack(events, response)
    assert packed["first"] == 7 and not any(isinstance(r, dict) for r in packed["rows"])
    assert event_log.unpack(_stored(packed), response) == events


def test_a_log_that_starts_with_a_delta_packs():
    events = [
        {"delta": '{"a"', "item_id": "fc_1", "output_index": 0, "sequence_number": 0,
         "type": "response.function_call_arguments.delta"},
        {"delta": ": 1}", "item_id": "fc_1", "output_index": 0, "sequence_number": 1,
         "type": "response.function_call_arguments.delta"},
    ]  # fmt: skip
    response = {"id": "resp_1", "output": [{"id": "fc_1", "type": "function_call", "arguments": '{"a": 1}'}]}
    packed = event_log.pack(events, response)
    assert packed["rows"] == [[0, 0, [4, 4]]]
    assert event_log.unpack(_stored(packed), response) == events
