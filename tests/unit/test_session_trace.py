"""A session turn's trace as OTLP JSON (troupe.observe.session_trace), from plain values: the
tree, its ids, its encoding (parsed by OpenTelemetry's own protobuf classes), and the span
names and attributes the OpenTelemetry spans of a response share (troupe.observe.spans)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from troupe.observe.session_trace import ResponseRun, TurnRun, session_trace
from troupe.observe.spans import step_span
from troupe.protocol.subagents import subagent_id_of
from troupe.storage import StepTrace

T0 = 1_700_000_000.0


def _step(response_id: str, seq: int, kind: str, name: str, start: float, duration: float, **more: Any) -> StepTrace:
    return StepTrace(response_id=response_id, seq=seq, kind=kind, name=name, started_at=T0 + start,  # type: ignore[arg-type]
                     duration_s=duration, **more)  # fmt: skip


def _response(response_id: str, start: float, end: float | None, steps: list[StepTrace], output=(), **more) -> ResponseRun:
    body = {"id": response_id, "model": "sim", "status": more.pop("status", "completed"), "output": list(output),
            "usage": {"input_tokens": 3, "output_tokens": 5}, "conversation": {"id": "conv_1"}, **more}  # fmt: skip
    return ResponseRun(response=body, started_at=T0 + start, ended_at=None if end is None else T0 + end, steps=steps)


def _create(call_id: str) -> dict[str, Any]:
    return {"type": "function_call", "name": "create_subagent", "call_id": call_id, "arguments": '{"task": "x"}'}


def _child(call_id: str, turn_id: str, start: float, sleep: tuple[float, float]) -> TurnRun:
    rid = f"resp_{turn_id}"
    steps = [_step(rid, 0, "model", "sim", start + 0.01, 0.01),
             _step(rid, 1, "tool", "sleep", sleep[0], sleep[1] - sleep[0], call_id="call_s"),
             _step(rid, 2, "model", "sim", sleep[1] + 0.01, 0.01)]  # fmt: skip
    return TurnRun(session_id=subagent_id_of(call_id), subagent_id=subagent_id_of(call_id), agent_id="agent_1",
                   turn_id=turn_id, created_at=T0 + start, status="completed",
                   responses=[_response(rid, start, sleep[1] + 0.03, steps)])  # fmt: skip


def _parent() -> TurnRun:
    """A turn that creates two subagents (each sleeping 0.4 s, at once), then waits for them."""
    first = _response("resp_a", 0.0, 0.1, [_step("resp_a", 0, "model", "sim", 0.02, 0.05, ttft_s=0.01,
                                                  input_tokens=3, output_tokens=5)],
                      output=[_create("call_1"), _create("call_2")])  # fmt: skip
    wait = {"type": "function_call", "name": "wait_for_subagents", "call_id": "call_3", "arguments": "{}"}
    second = _response("resp_b", 0.2, 0.25, [_step("resp_b", 0, "model", "sim", 0.21, 0.02)], output=[wait])
    third = _response("resp_c", 0.7, 0.8, [_step("resp_c", 0, "model", "sim", 0.71, 0.05)])
    children = [_child("call_1", "turn_c1", 0.12, (0.15, 0.55)), _child("call_2", "turn_c2", 0.13, (0.16, 0.56))]
    return TurnRun(session_id="sess_p", subagent_id=None, agent_id="agent_1", turn_id="turn_p", created_at=T0 + 0.001,
                   status="completed", responses=[first, second, third], children=children)  # fmt: skip


def _spans(otlp: dict[str, Any]) -> list[dict[str, Any]]:
    [resource] = otlp["resourceSpans"]
    assert resource["resource"]["attributes"] == [{"key": "service.name", "value": {"stringValue": "troupe"}}]
    [scope] = resource["scopeSpans"]
    assert scope["scope"] == {"name": "troupe"}
    return scope["spans"]


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    return {a["key"]: next(iter(a["value"].values())) for a in span["attributes"]}


def test_a_turn_with_subagents_is_one_tree_on_one_timeline() -> None:
    spans = _spans(session_trace(_parent()))
    by_id = {s["spanId"]: s for s in spans}

    def path(span: dict[str, Any]) -> list[str]:
        names = [span["name"]]
        while "parentSpanId" in span:
            span = by_id[span["parentSpanId"]]
            names.append(span["name"])
        return names[::-1]

    [root] = [s for s in spans if "parentSpanId" not in s]
    assert (root["name"], root["kind"]) == ("agent.session.turn", 2) and spans[0] is root
    assert _attrs(root)["troupe.turn.id"] == "turn_p" and _attrs(root)["troupe.session.id"] == "sess_p"
    assert len({s["traceId"] for s in spans}) == 1 and len(root["traceId"]) == 32
    assert len(by_id) == len(spans) and all(len(i) == 16 for i in by_id)
    assert [s["name"] for s in spans if s.get("parentSpanId") == root["spanId"]] == ["troupe.response"] * 3

    # Depth first: each span's parent is the last span before it one level up.
    depth: dict[str, int] = {}
    for i, span in enumerate(spans):
        depth[span["spanId"]] = len(path(span)) - 1
        if i:
            above = [s for s in spans[:i] if depth[s["spanId"]] == depth[span["spanId"]] - 1]
            assert above[-1]["spanId"] == span["parentSpanId"], span["name"]
    sleeps = [s for s in spans if s["name"] == "execute_tool sleep"]
    assert [path(s) for s in sleeps] == [["agent.session.turn", "troupe.response", "execute_tool create_subagent",
                                          "agent.session.turn", "troupe.response", "execute_tool sleep"]] * 2  # fmt: skip
    # Each subagent's turn hangs under the create that made it.
    for sleep in sleeps:
        response = by_id[sleep["parentSpanId"]]
        turn = by_id[response["parentSpanId"]]
        create = by_id[turn["parentSpanId"]]
        assert _attrs(turn)["troupe.subagent.id"] == subagent_id_of(_attrs(create)["gen_ai.tool.call.id"])
        assert turn["kind"] == 1 and create["kind"] == 3
    # The two sleeps overlap in time, as they ran.
    (s1, e1), (s2, e2) = [(int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])) for s in sleeps]
    assert max(s1, s2) < min(e1, e2)
    # The wait runs from its response's end to the next response's start.
    [wait] = [s for s in spans if s["name"] == "execute_tool wait_for_subagents"]
    assert (int(wait["startTimeUnixNano"]), int(wait["endTimeUnixNano"])) == (int((T0 + 0.25) * 1e9), int((T0 + 0.7) * 1e9))
    assert int(root["endTimeUnixNano"]) == int((T0 + 0.8) * 1e9) and int(root["startTimeUnixNano"]) == int(T0 * 1e9)


def test_the_same_turn_gives_the_same_ids_and_a_running_response_ends_at_its_last_step() -> None:
    assert session_trace(_parent()) == session_trace(_parent())
    running = TurnRun(session_id="sess_p", subagent_id=None, agent_id="agent_1", turn_id="turn_r", created_at=T0,
                      status="in_progress",
                      responses=[_response("resp_r", 0.0, None, [_step("resp_r", 0, "model", "sim", 0.01, 0.3)],
                                           status="in_progress")])  # fmt: skip
    spans = _spans(session_trace(running))
    assert [s["name"] for s in spans] == ["agent.session.turn", "troupe.response", "chat sim"]
    assert {s["endTimeUnixNano"] for s in spans} == {str(int((T0 + 0.31) * 1e9))}
    assert _attrs(spans[0])["troupe.turn.status"] == "in_progress"
    assert spans[0]["traceId"] != _spans(session_trace(_parent()))[0]["traceId"]


def test_steps_carry_the_opentelemetry_spans_names_and_attributes() -> None:
    mcp = {"type": "mcp_call", "name": "add", "server_label": "calc"}
    failed = _response("resp_f", 0.0, 0.5, [
        _step("resp_f", 0, "model", "up-model", 0.0, 0.1, ttft_s=0.05, input_tokens=7, output_tokens=2),
        _step("resp_f", 1, "tool", "add", 0.1, 0.1, call_id="call_a"),
        _step("resp_f", 2, "tool", "sleep", 0.1, 0.2, call_id="call_b", error="boom"),
    ], output=[mcp], status="failed", error={"code": "server_error", "message": "it broke"})  # fmt: skip
    turn = TurnRun(session_id="sess_f", subagent_id=None, agent_id="agent_1", turn_id="turn_f", created_at=T0,
                   status="failed", responses=[failed])  # fmt: skip
    root, response, chat, add, sleep = _spans(session_trace(turn))
    assert root["status"] == {"code": 2, "message": "it broke"} == response["status"]
    assert _attrs(response) == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.request.model": "sim", "gen_ai.response.id": "resp_f",
        "troupe.status": "failed", "troupe.stream": False, "gen_ai.usage.input_tokens": "3",
        "gen_ai.usage.output_tokens": "5", "troupe.model_calls": "1", "gen_ai.conversation.id": "conv_1",
    }  # fmt: skip
    # The names and attributes are step_span's, what troupe.observe.tracing emits, in OTLP's encoding.
    for span, step in ((chat, failed.steps[0]), (add, failed.steps[1]), (sleep, failed.steps[2])):
        spec = step_span(kind=step.kind, name=step.name, started_at=step.started_at,
                         ended_at=step.started_at + step.duration_s, model="sim", call_id=step.call_id,
                         ttft_s=step.ttft_s, input_tokens=step.input_tokens, output_tokens=step.output_tokens,
                         error=step.error, server="calc" if step.name == "add" else None)  # fmt: skip
        assert (span["name"], span["kind"]) == (spec.name, 3)
        assert _attrs(span) == {k: str(v) if isinstance(v, int) and not isinstance(v, bool) else v
                                for k, v in spec.attributes.items()}  # fmt: skip
    assert chat["name"] == "chat up-model" and _attrs(chat)["gen_ai.request.model"] == "sim"
    assert {"key": "troupe.ttft_s", "value": {"doubleValue": 0.05}} in chat["attributes"]
    assert add["name"] == "mcp_call add" and _attrs(add)["troupe.mcp.server_label"] == "calc"
    assert sleep["status"] == {"code": 2, "message": "boom"} and "status" not in add


def test_the_json_is_an_otlp_export_request() -> None:
    trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
    from google.protobuf.json_format import Parse

    otlp = session_trace(_parent())
    request = trace_service.ExportTraceServiceRequest
    Parse(json.dumps(otlp), request())  # its shape: every field a field of OTLP's messages
    # OTLP/JSON writes ids in hex where protobuf's own JSON mapping has base64 (OTLP's spec says
    # so; collectors read hex): as base64, protobuf reads the ids we wrote.
    as_base64 = json.loads(json.dumps(otlp))
    for span in as_base64["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for key in ("traceId", "spanId", "parentSpanId"):
            if key in span:
                span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    parsed = Parse(json.dumps(as_base64), request())
    spans, written = parsed.resource_spans[0].scope_spans[0].spans, _spans(otlp)
    assert len(spans) == len(written) > 10
    for span, raw in zip(spans, written, strict=True):
        assert (span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex()) == (
            raw["traceId"], raw["spanId"], raw.get("parentSpanId", ""))  # fmt: skip
        assert (span.name, span.kind, str(span.start_time_unix_nano)) == (raw["name"], raw["kind"], raw["startTimeUnixNano"])
    assert spans[0].kind == 2 and spans[1].parent_span_id == spans[0].span_id
    [sleep, *_] = [s for s in spans if s.name == "execute_tool sleep"]
    assert {a.key: a.value.string_value for a in sleep.attributes}["gen_ai.tool.name"] == "sleep"
