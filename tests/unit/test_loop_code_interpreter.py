"""The code_interpreter tool in the loop (troupe/agentloop/code_interpreter.py), with scripted
models, the sim, and a small real runner (tests/fakes.py ``ToyCodeRunner``: containers of
variables and files, a few kinds of lines); the e2e tests run real sandboxes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes import RecordingModel, ScriptedModel, ToyCodeRunner, text_turn, tool_turn
from tests.loop_harness import both, check_stream, history_of, run
from troupe.agentloop.checkpoint import INTERRUPTED, ResumePoint
from troupe.agentloop.code_interpreter import (
    PYTHON,
    CodeRun,
    CodeStream,
    ContainerFile,
    citations,
    code_of,
    format_output,
)  # fmt: skip
from troupe.agentloop.driver import prepare, run_loop
from troupe.agentloop.events import Checkpoint, StepTraced
from troupe.agentloop.writer import WireWriter
from troupe.protocol import InvalidRequest, NotFound, parse_create_request
from troupe.sim.model import SimModel

AUTO = {"type": "code_interpreter", "container": "auto"}
OUTPUTS = ["code_interpreter_call.outputs"]


def body(text: str, tool: dict[str, Any] = AUTO, **extra: Any) -> dict[str, Any]:
    return {"model": "sim", "input": text, "tools": [tool], **extra}


def python_turn(code: str, call_id: str = "call_py_0") -> list[Any]:
    return tool_turn((PYTHON, {"code": code}, call_id))


async def test_a_call_streams_as_openai_streams_it_field_for_field():
    runner = ToyCodeRunner()
    model = ScriptedModel(python_turn("x = 6 * 7\nprint(x)"), text_turn("It is 42."))
    outcome = await run(body("x", include=OUTPUTS, model="m"), model, code_runner=runner)
    check_stream(outcome)
    events = [e for e in outcome.events if "response" not in e]
    item_id = events[0]["item"]["id"]
    assert item_id.startswith("ci_")
    ci_events = [e for e in events if e.get("item_id") == item_id or e.get("item", {}).get("id") == item_id]
    assert [e["type"] for e in ci_events] == [
        "response.output_item.added",
        "response.code_interpreter_call.in_progress",
        *["response.code_interpreter_call_code.delta"] * (len(ci_events) - 6),
        "response.code_interpreter_call_code.done",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call.completed",
        "response.output_item.done",
    ]
    assert len(ci_events) > 6, "the code streams in more than one delta, as the model writes it"
    assert ci_events == events[: len(ci_events)], "nothing else in between"
    assert all(e["output_index"] == 0 for e in ci_events)
    assert ci_events[0]["item"] == {"id": item_id, "code": "", "container_id": "cntr_1", "outputs": [],
                                    "status": "in_progress", "type": "code_interpreter_call"}  # fmt: skip
    assert list(ci_events[1]) == ["item_id", "output_index", "sequence_number", "type"]
    deltas = [e["delta"] for e in ci_events if e["type"].endswith("_code.delta")]
    assert "".join(deltas) == "x = 6 * 7\nprint(x)"
    assert ci_events[-4] == {"code": "x = 6 * 7\nprint(x)", "item_id": item_id, "output_index": 0,
                             "sequence_number": ci_events[-4]["sequence_number"],
                             "type": "response.code_interpreter_call_code.done"}  # fmt: skip
    assert ci_events[-1]["item"] == {"id": item_id, "code": "x = 6 * 7\nprint(x)", "container_id": "cntr_1",
                                     "outputs": [{"logs": "42\n", "type": "logs"}], "status": "completed",
                                     "type": "code_interpreter_call"}  # fmt: skip
    call, message = outcome.response["output"]
    assert call == ci_events[-1]["item"] and message["content"][0]["text"] == "It is 42."
    assert runner.runs == [("cntr_1", "x = 6 * 7\nprint(x)")]
    assert [t.name for t in outcome.tool_traces()] == [PYTHON]


async def test_streamed_and_collected_responses_are_the_same():
    request = body("[[python]]\nprint(1 + 1)", {"type": "code_interpreter", "container": "cntr_mine"}, include=OUTPUTS)
    outcome, _ = await both(request, SimModel, code_runner=ToyCodeRunner(containers=["cntr_mine"]))
    call, message = outcome.response["output"]
    assert call["outputs"] == [{"logs": "2\n", "type": "logs"}] and message["content"][0]["text"] == "2"


async def test_without_include_the_outputs_are_null_but_the_model_still_sees_them():
    model = RecordingModel(SimModel())
    outcome = await run(body("[[python]]\nprint(7)"), model, code_runner=ToyCodeRunner())
    added = next(e for e in outcome.events if e["type"] == "response.output_item.added")
    assert added["item"]["outputs"] is None
    assert outcome.response["output"][0]["outputs"] is None
    assert model.calls[-1].messages[-1] == {"role": "tool", "tool_call_id": model.calls[-1].messages[-2]["tool_calls"][0]["id"],
                                            "content": "7"}  # fmt: skip
    assert outcome.text == "7"


async def test_code_that_raises_completes_with_its_traceback_for_the_model_to_read():
    outcome = await run(body("[[python]]\nprint(y)", include=OUTPUTS), SimModel(), code_runner=ToyCodeRunner())
    check_stream(outcome)
    call = outcome.response["output"][0]
    assert call["status"] == "completed", "an error in the code is a result (OpenAI's behaviour)"
    assert call["outputs"][0]["logs"].endswith("NameError: name 'y' is not defined\n")
    assert "NameError: name 'y' is not defined" in outcome.text


async def test_a_run_a_limit_stopped_is_incomplete_and_a_run_that_could_not_happen_failed():
    script = "[[python]]\nwhile True: pass\n[[/python]] [[python]]\ncrash()"
    runner = ToyCodeRunner()
    outcome = await run(body(script, include=OUTPUTS), SimModel(), code_runner=runner)
    check_stream(outcome)
    stopped, failed, message = outcome.response["output"]
    assert (stopped["status"], failed["status"]) == ("incomplete", "failed")
    assert stopped["outputs"] == [{"logs": "TimeoutError: the run took longer than 1 s\n", "type": "logs"}]
    assert failed["outputs"] == [] and failed["container_id"] == "cntr_1" and failed["code"] == "crash()"
    types = [e["type"] for e in outcome.events]
    assert "response.code_interpreter_call.completed" not in types, "no completed event for either: the items say it"
    assert types.count("response.code_interpreter_call.interpreting") == 2
    text = message["content"][0]["text"]
    assert "[The run was stopped: it hit its timeout limit.]" in text
    assert "Error: ConnectionError: the container's kernel is unreachable" in text
    assert [c for c, _ in runner.runs] == ["cntr_1", "cntr_1"], "one container for the response"


async def test_no_container_to_be_had_fails_the_call_and_the_model_is_told():
    runner = ToyCodeRunner(broken=True)
    outcome = await run(body("[[python]]\nprint(1)"), SimModel(), code_runner=runner)
    check_stream(outcome)
    call = outcome.response["output"][0]
    assert (call["status"], call["container_id"], call["outputs"]) == ("failed", "", None)
    assert outcome.text == "Error: RuntimeError: no sandbox is available"
    assert len(runner.asked) == 2, "tried as the item opened, and again when the call ran"


async def test_an_explicit_container_is_checked_before_the_first_event_and_used():
    runner = ToyCodeRunner(containers=["cntr_mine"])
    tool = {"type": "code_interpreter", "container": "cntr_mine"}
    outcome = await run(body("[[python]]\nprint(3)", tool), SimModel(), code_runner=runner)
    assert outcome.response["output"][0]["container_id"] == "cntr_mine"
    assert runner.asked == [("cntr_mine", None)] and runner.created == []
    with pytest.raises(NotFound) as info:
        await run(body("[[python]]\nprint(3)", {"type": "code_interpreter", "container": "cntr_gone"}), SimModel(),
                  code_runner=runner)  # fmt: skip
    assert (info.value.status, info.value.param) == (404, "tools[0].container")


async def test_an_auto_container_is_made_once_per_response_with_the_tools_files_and_memory():
    runner = ToyCodeRunner()
    tool = {"type": "code_interpreter", "container": {"type": "auto", "file_ids": ["file-1"], "memory_limit": "4g"}}
    model = ScriptedModel(python_turn("x = 2", "call_a"), python_turn("print(x * 21)", "call_b"), text_turn("done"))
    outcome = await run(body("x", tool, model="m"), model, code_runner=runner)
    assert runner.created == [{"type": "auto", "file_ids": ["file-1"], "memory_limit": "4g"}]
    assert runner.asked == [(tool["container"], None)], "resolved once, as the first call opened"
    first, second, _ = outcome.response["output"]
    assert first["container_id"] == second["container_id"] == "cntr_1"
    assert outcome.prepared.transcript.outputs_of(PYTHON) == ["(The code printed nothing.)", "42"]


async def test_a_later_turn_reuses_the_threads_container_and_its_state():
    runner = ToyCodeRunner()
    first = await run(body("[[python]]\nx = 40", include=OUTPUTS), SimModel(), code_runner=runner)
    second = await run(body("[[python]]\nprint(x + 2)"), SimModel(), code_runner=runner, history=history_of(first))
    assert runner.asked[-1] == ({"type": "auto"}, "cntr_1") and len(runner.created) == 1
    assert second.response["output"][0]["container_id"] == "cntr_1" and second.text == "42"
    runner.expire("cntr_1")  # idle too long: the next turn gets a new container
    third = await run(body("[[python]]\nprint(1)"), SimModel(), code_runner=runner, history=history_of(second))
    assert third.response["output"][0]["container_id"] == "cntr_2" and len(runner.created) == 2


async def test_history_goes_upstream_as_the_call_and_its_output():
    runner = ToyCodeRunner()
    first = await run(body("[[python]]\nprint(6 * 7)\nplt.show()", include=OUTPUTS), SimModel(), code_runner=runner)
    kept_not = await run(body("[[python]]\nprint(5)"), SimModel(), code_runner=runner)
    model = ScriptedModel(text_turn("ok"))
    await run(body("next", model="m"), model, code_runner=runner, history=history_of(first) + history_of(kept_not))
    messages = model.calls[0].messages
    calls = [m for m in messages if m.get("tool_calls")]
    first_id, second_id = first.response["output"][0]["id"], kept_not.response["output"][0]["id"]
    assert calls[0]["tool_calls"] == [{"id": first_id, "type": "function",
                                       "function": {"name": PYTHON, "arguments": json.dumps({"code": "print(6 * 7)\nplt.show()"})}}]  # fmt: skip
    tools = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    assert tools[first_id] == "42\n[1 image shown to the user.]"
    assert tools[second_id] == ("The output of this call was not kept (the request did not include "
                                "code_interpreter_call.outputs).")  # fmt: skip


async def test_a_call_a_client_sends_is_replayed_whatever_it_holds():
    odd = [
        {"type": "code_interpreter_call", "id": "ci_1", "status": "failed", "container_id": "cntr_9", "code": None,
         "outputs": [{"type": "logs", "logs": "partial\n"}, "x", {"type": "image"}]},
        {"type": "code_interpreter_call", "id": "ci_2", "status": "incomplete", "container_id": 7, "outputs": {"k": 1}},
    ]  # fmt: skip
    model = ScriptedModel(text_turn("ok"))
    runner = ToyCodeRunner()
    await run(body("again", model="m"), model, code_runner=runner,
              history=[{"type": "message", "role": "user", "content": "x"}, *odd])  # fmt: skip
    tools = [m["content"] for m in model.calls[0].messages if m["role"] == "tool"]
    assert tools[0] == "Error: this call failed. partial\n[1 image shown to the user.]"
    assert tools[1].endswith("[The run was stopped before it finished.]")
    first_call = next(m for m in model.calls[0].messages if m.get("tool_calls"))["tool_calls"][0]
    assert (first_call["id"], json.loads(first_call["function"]["arguments"])) == ("ci_1", {"code": ""})


async def test_files_the_answer_links_are_cited_with_their_container():
    code = "open('/mnt/data/report.csv', 'w').write(1)\nopen('/mnt/data/report.csv.gz', 'w').write(2)"
    answer = ("Download [the report](sandbox:/mnt/data/report.csv) or /mnt/data/report.csv.gz; "
              "/mnt/data/other.csv is not one of them, nor is report.csv alone.")  # fmt: skip
    model = ScriptedModel(python_turn(code), text_turn(answer))
    outcome = await run(body("x", model="m"), model, code_runner=ToyCodeRunner())
    check_stream(outcome)
    text = outcome.text
    annotations = outcome.response["output"][-1]["content"][0]["annotations"]
    link = "sandbox:/mnt/data/report.csv"
    assert annotations == [
        {"container_id": "cntr_1", "end_index": text.index(link) + len(link), "file_id": "cfile_1",
         "filename": "report.csv", "start_index": text.index(link), "type": "container_file_citation"},
        {"container_id": "cntr_1", "end_index": text.index(".gz") + 3, "file_id": "cfile_2",
         "filename": "report.csv.gz", "start_index": text.index("/mnt/data/report.csv.gz"),
         "type": "container_file_citation"},
    ]  # fmt: skip
    kinds = [e["type"] for e in outcome.events]
    assert kinds.index("response.output_text.annotation.added") < kinds.index("response.output_text.done")


def test_the_citation_rule():
    runs = [("cntr_a", CodeRun(files=(ContainerFile(file_id="cfile_1", filename="a.txt", path="/mnt/data/a.txt"),))),
            ("cntr_a", CodeRun(files=(ContainerFile(file_id="cfile_2", filename="a.txt", path="/mnt/data/a.txt"),)))]  # fmt: skip
    text = "See /mnt/data/a.txt. Not x/mnt/data/a.txt, /mnt/data/a.txt2 or /mnt/data/a.txt/b."
    found = citations(text, runs)
    assert [(a["file_id"], a["start_index"], a["end_index"]) for a in found] == [("cfile_2", 4, 19)], \
        "the latest run's file wins its path; a mention inside a longer path is none"


async def test_tool_choice_forces_or_allows_the_code_interpreter():
    model = RecordingModel(SimModel())
    forced = await run(body("[[python]]\nprint(1)", tool_choice={"type": "code_interpreter"}), model,
                       code_runner=ToyCodeRunner())  # fmt: skip
    assert model.calls[0].tool_choice == {"type": "function", "function": {"name": PYTHON}}
    assert forced.response["output"][0]["status"] == "completed"
    allowed = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "code_interpreter"}]}
    model = RecordingModel(SimModel())
    await run(body("[[python]]\nprint(1)", tool_choice=allowed), model, code_runner=ToyCodeRunner())
    assert [t["function"]["name"] for t in model.calls[0].tools] == [PYTHON]


async def test_the_model_is_shown_one_python_function():
    model = RecordingModel(SimModel())
    await run(body("[[say hi]]"), model, code_runner=ToyCodeRunner())
    [tool] = model.calls[0].tools
    assert tool["function"]["name"] == PYTHON
    assert tool["function"]["parameters"]["required"] == ["code"]
    assert "/mnt/data" in tool["function"]["description"] and "persist" in tool["function"]["description"]


async def test_without_a_runner_the_tool_is_refused():
    with pytest.raises(InvalidRequest) as info:
        await run(body("x"), SimModel())
    assert info.value.param == "tools[0].type"


@pytest.mark.parametrize(
    ("tools", "param"),
    [
        ([{"type": "code_interpreter"}], "tools[0].container"),
        ([{"type": "code_interpreter", "container": 3}], "tools[0].container"),
        ([{"type": "code_interpreter", "container": ""}], "tools[0].container"),
        ([{"type": "code_interpreter", "container": {"type": "manual"}}], "tools[0].container.type"),
        ([{"type": "code_interpreter", "container": {"type": "auto", "memory_limit": "2g"}}], "tools[0].container.memory_limit"),
        ([{"type": "code_interpreter", "container": {"type": "auto", "file_ids": "file-1"}}], "tools[0].container.file_ids"),
        ([{"type": "code_interpreter", "container": {"type": "auto", "network_policy": {"type": "allowlist",
                                                                                      "allowed_domains": ["a b"]}}}],
         "tools[0].container.network_policy.allowed_domains[0]"),
        ([{"type": "code_interpreter", "container": {"type": "auto", "network_policy": "on"}}],
         "tools[0].container.network_policy"),
        ([AUTO, AUTO], "tools[1]"),
        ([AUTO, {"type": "function", "name": "python", "parameters": {"type": "object"}}], "tools"),
    ],
)
async def test_a_bad_code_interpreter_tool_is_a_400_naming_it(tools, param):
    with pytest.raises(InvalidRequest) as info:
        await run({"model": "sim", "input": "x", "tools": tools}, SimModel(), code_runner=ToyCodeRunner())
    assert info.value.param == param


async def test_calls_of_one_turn_run_one_at_a_time_in_the_models_order():
    runner = ToyCodeRunner()
    model = ScriptedModel(tool_turn((PYTHON, {"code": "x = 1"}), (PYTHON, {"code": "print(x)"})), text_turn("ok"))
    outcome = await run(body("x", model="m"), model, code_runner=runner)
    assert [code for _, code in runner.runs] == ["x = 1", "print(x)"]
    assert [i["status"] for i in outcome.response["output"][:2]] == ["completed", "completed"]


def test_the_code_streams_as_it_is_written():
    arguments = json.dumps({"code": 'print("é\\\\n😀")\n'})
    stream = CodeStream()
    told = "".join(stream.feed(arguments[i : i + 1]) for i in range(len(arguments)))
    assert told + stream.rest(code_of(arguments)) == 'print("é\\\\n😀")\n'
    assert told == code_of(arguments), "every character told as soon as it was sure"
    other = CodeStream()
    assert other.feed('{"note": 1, "code": "x"}') == "" and other.rest("x") == "x", "another key first: told whole"
    raw = CodeStream()
    assert raw.feed("print(1)") == "print(1)" and code_of("print(1)") == "print(1)", "raw code, as some models send it"
    assert code_of('{"code": 3}') == "" and code_of("{broken") == ""
    quoted = CodeStream()
    assert quoted.feed('"print(1)"') == "" and quoted.rest(code_of('"print(1)"')) == "print(1)", "a JSON string: whole"


def test_long_logs_are_shown_cut_in_the_middle():
    from troupe.agentloop.code_interpreter import LOGS_SHOWN

    logs = "a" * LOGS_SHOWN + "b" * 100 + "\nValueError: the end"
    shown = format_output(CodeRun(logs=logs))
    assert shown.startswith("a" * (LOGS_SHOWN // 2) + "\n[…") and shown.endswith("ValueError: the end")
    assert len(shown) < LOGS_SHOWN + 100 and f"[… {len(logs) - LOGS_SHOWN} characters of output cut …]" in shown


def test_what_the_model_is_shown():
    run_ = CodeRun(logs="", images=("u1", "u2"), limit="memory",
                   files=(ContainerFile(file_id="cfile_1", filename="a.png", path="/mnt/data/a.png"),))  # fmt: skip
    assert format_output(run_) == (
        "(The code printed nothing.)\n[The run was stopped: it hit its memory limit.]\n[2 images shown to the user.]\n"
        "[Files written, which you can link for the user: sandbox:/mnt/data/a.png]"
    )


def _resume_setup(text: str) -> tuple[Any, ToyCodeRunner]:
    return parse_create_request(body(text, include=OUTPUTS)), ToyCodeRunner()


async def _first_host(request: Any, runner: ToyCodeRunner, stop_after: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Run until the first checkpoint of kind ``stop_after`` is stored, as a host that then died."""
    writer, events, steps = WireWriter(request, response_id="resp_1", created_at=1_700_000_000), [], []
    async for event in run_loop(prepare(request, [], code_runner=runner), model=SimModel(), checkpoints=True):
        if isinstance(event, Checkpoint):
            steps.append(json.loads(json.dumps(event.step.to_data())))  # as a host stores it
            if steps[-1]["kind"] == stop_after:
                break
        elif not isinstance(event, StepTraced):
            events.extend(writer.write(event))
    return events, steps


async def _next_host(request: Any, runner: ToyCodeRunner, events: list[dict[str, Any]], steps: list[dict[str, Any]]) -> WireWriter:
    resumed = WireWriter(request, response_id="resp_1", created_at=1_700_000_000)
    resumed.restore(events)
    point = ResumePoint.from_stored(steps, output=resumed.output)
    async for event in run_loop(prepare(request, [], code_runner=runner), model=SimModel(), checkpoints=True, resume=point):
        if not isinstance(event, StepTraced | Checkpoint):
            events.extend(resumed.write(event))
    return resumed


async def test_a_run_resumed_after_its_call_settled_does_not_run_it_again():
    request, runner = _resume_setup("[[python]]\nprint(6 * 7)\nopen('/mnt/data/a.txt', 'w').write(1)")
    events, steps = await _first_host(request, runner, stop_after="tool")
    assert [s["kind"] for s in steps] == ["model", "tool"] and list(steps[0]["ci_items"].values())
    assert steps[1]["detail"]["container_id"] == "cntr_1" and steps[1]["detail"]["run"]["logs"] == "42\n"
    resumed = await _next_host(request, runner, events, steps)
    assert len(runner.runs) == 1, "the settled call is not run again"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    types = [e["type"] for e in events]
    assert types.count("response.output_item.added") == 2 and types.count("response.code_interpreter_call.interpreting") == 1
    call, message = resumed.response["output"]
    assert (call["status"], call["container_id"], call["outputs"]) == ("completed", "cntr_1", [{"logs": "42\n", "type": "logs"}])
    assert message["content"][0]["annotations"][0]["file_id"] == "cfile_1", "cited from the stored run"


async def test_a_call_a_host_died_during_is_not_run_twice():
    request, runner = _resume_setup("[[python]]\nprint(1)")
    events, steps = await _first_host(request, runner, stop_after="model")  # the call may have been running
    resumed = await _next_host(request, runner, events, steps)
    assert runner.runs == [], "code is not idempotent: never run again"
    call, message = resumed.response["output"]
    assert (call["status"], call["code"], call["container_id"]) == ("failed", "print(1)", "cntr_1")
    assert message["content"][0]["text"] == INTERRUPTED


async def test_a_call_that_never_runs_closes_incomplete_and_makes_no_container():
    runner = ToyCodeRunner()
    outcome = await run(body("[[python]]\nprint(1)", tool_choice="none"), SimModel(), code_runner=runner)
    check_stream(outcome)
    call = outcome.response["output"][0]
    assert (call["status"], call["code"], call["container_id"]) == ("incomplete", "print(1)", "")
    assert runner.asked == [] and runner.runs == []
    plain = await run(body("[[say no code today]]"), SimModel(), code_runner=runner)
    assert plain.output_types == ["message"] and runner.asked == [], "no container unless the model calls the tool"


async def test_a_model_that_fails_while_writing_the_code_leaves_no_item_open():
    from tests.fakes import FunctionModel
    from troupe.agentloop.model import ModelError, ToolCallArgumentsDelta, ToolCallStart

    def failing(request: Any) -> Any:
        yield ToolCallStart(index=0, call_id="call_1", name=PYTHON)
        yield ToolCallArgumentsDelta(index=0, delta='{"code": "print(')
        raise ModelError("connection reset", status=502)

    runner = ToyCodeRunner()
    outcome = await run(body("x", model="m"), FunctionModel(failing), code_runner=runner)
    check_stream(outcome)
    call = outcome.response["output"][0]
    assert (call["status"], call["code"], call["container_id"]) == ("incomplete", "print(", "cntr_1")
    assert outcome.response["status"] == "failed" and runner.runs == []


def test_the_sim_directive():
    from troupe.sim.directives import parse_directives

    found = parse_directives("Plot it. [[python]]\nrows = [[1, 2], [3]]\nprint('[[say x]]')\n[[/python]] [[think ok]]")
    [call] = found.calls
    assert (call.name, json.loads(call.arguments or "")) == (PYTHON, {"code": "rows = [[1, 2], [3]]\nprint('[[say x]]')"})
    assert found.answer is None and found.think == "ok" and found.plain == "Plot it."
    assert json.loads(parse_directives("[[python]] print(2)").calls[0].arguments or "") == {"code": "print(2)"}


async def test_a_call_sent_as_input_goes_upstream_and_names_the_container_to_reuse():
    sent = {"type": "code_interpreter_call", "id": "ci_sent", "code": "x = 1", "container_id": "cntr_7",
            "outputs": [{"type": "logs", "logs": "ok\n"}], "status": "completed"}  # fmt: skip
    runner = ToyCodeRunner(containers=["cntr_7"])
    runner.variables["cntr_7"]["x"] = 1  # as the call left it
    model = RecordingModel(SimModel())
    request = body("", input=[{"role": "user", "content": "x"}, sent, {"role": "user", "content": "[[python]]\nprint(x)"}])
    outcome = await run(request, model, code_runner=runner)
    assert runner.asked == [({"type": "auto"}, "cntr_7")] and outcome.text == "1"
    first = model.calls[0].messages
    assert first[1]["tool_calls"][0]["id"] == "ci_sent" and first[2] == {"role": "tool", "tool_call_id": "ci_sent", "content": "ok"}
