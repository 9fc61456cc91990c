"""The shell tool in the loop (troupe/agentloop/shell.py), with scripted models, the sim, and a
small real runner (tests/fakes.py ``ToyShellRunner``: containers of files, a few commands)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import (
    ResponseFunctionShellToolCall,
    ResponseFunctionShellToolCallOutput,
    ResponseShellCallCommandAddedEvent,
    ResponseShellCallCommandDeltaEvent,
    ResponseShellCallCommandDoneEvent,
    ResponseShellCallOutputContentDeltaEvent,
    ResponseShellCallOutputContentDoneEvent,
)

from tests.fakes import RecordingModel, ScriptedModel, ToyCodeRunner, ToyShellRunner, text_turn, tool_turn
from tests.loop_harness import both, check_stream, history_of, run
from troupe.agentloop.checkpoint import INTERRUPTED, ResumePoint
from troupe.agentloop.driver import prepare, run_loop
from troupe.agentloop.events import Checkpoint, StepTraced
from troupe.agentloop.shell import SHELL, CommandRun, CommandsStream, format_output, shell_action
from troupe.agentloop.writer import WireWriter
from troupe.protocol import InvalidRequest, NotFound, parse_create_request
from troupe.sim.directives import parse_directives
from troupe.sim.model import SimModel

AUTO = {"type": "shell", "environment": {"type": "container_auto"}}
LOCAL = {"type": "shell", "environment": {"type": "local"}}

_EVENT_MODELS = {
    "response.shell_call_command.added": ResponseShellCallCommandAddedEvent,
    "response.shell_call_command.delta": ResponseShellCallCommandDeltaEvent,
    "response.shell_call_command.done": ResponseShellCallCommandDoneEvent,
    "response.shell_call_output_content.delta": ResponseShellCallOutputContentDeltaEvent,
    "response.shell_call_output_content.done": ResponseShellCallOutputContentDoneEvent,
}


def body(text: str, tool: dict[str, Any] = AUTO, **extra: Any) -> dict[str, Any]:
    return {"model": "sim", "input": text, "tools": [tool], **extra}


def shell_turn(*commands: str, call_id: str = "call_sh_0", **limits: Any) -> list[Any]:
    return tool_turn((SHELL, {"commands": list(commands), **limits}, call_id))


def strictly(event: dict[str, Any]) -> None:
    """``event`` has exactly its SDK model's fields (none missing, none extra) and parses as it."""
    model = _EVENT_MODELS[event["type"]]
    assert set(event) == set(model.model_fields) - {"obfuscation"}, event["type"]
    model.model_validate(event)


async def test_a_container_call_streams_as_openai_streams_it_field_for_field():
    runner = ToyShellRunner()
    model = ScriptedModel(shell_turn("echo hi", "cat nope", max_output_length=100), text_turn("Done."))
    outcome = await run(body("x", model="m"), model, shell_runner=runner)
    check_stream(outcome)
    events = [e for e in outcome.events if "response" not in e]
    call_id, output_id = events[0]["item"]["id"], None
    assert call_id.startswith("sh_")
    assert [e["type"] for e in events[:15]] == [
        "response.output_item.added",
        *["response.shell_call_command.added", "response.shell_call_command.delta", "response.shell_call_command.done"],
        *["response.shell_call_command.added", "response.shell_call_command.delta", "response.shell_call_command.delta",
          "response.shell_call_command.done"],
        "response.output_item.done",
        "response.output_item.added",
        *["response.shell_call_output_content.delta", "response.shell_call_output_content.done"] * 2,
        "response.output_item.done",
    ]
    assert events[15]["type"] == "response.output_item.added" and events[15]["item"]["type"] == "message"
    for event in events[:15]:
        if event["type"] in _EVENT_MODELS:
            strictly(event)
    env = {"container_id": "cntr_1", "type": "container_reference"}
    assert events[0] == {"item": {"id": call_id, "action": {"commands": [], "max_output_length": None, "timeout_ms": None},
                                  "call_id": "call_sh_0", "environment": env, "status": "in_progress", "type": "shell_call"},
                         "output_index": 0, "sequence_number": events[0]["sequence_number"],
                         "type": "response.output_item.added"}  # fmt: skip
    seq = events[1]["sequence_number"]
    told = [{k: v for k, v in e.items() if k != "sequence_number"} for e in events[1:8]]
    assert [e["sequence_number"] for e in events[1:8]] == list(range(seq, seq + 7))
    # The arguments arrive in two halves, '{"commands": ["echo hi", "cat n' and 'ope"], …}': each
    # command is told as it is written.
    assert told == [
        {"command": "", "command_index": 0, "output_index": 0, "type": "response.shell_call_command.added"},
        {"command_index": 0, "delta": "echo hi", "output_index": 0, "type": "response.shell_call_command.delta"},
        {"command": "echo hi", "command_index": 0, "output_index": 0, "type": "response.shell_call_command.done"},
        {"command": "", "command_index": 1, "output_index": 0, "type": "response.shell_call_command.added"},
        {"command_index": 1, "delta": "cat n", "output_index": 0, "type": "response.shell_call_command.delta"},
        {"command_index": 1, "delta": "ope", "output_index": 0, "type": "response.shell_call_command.delta"},
        {"command": "cat nope", "command_index": 1, "output_index": 0, "type": "response.shell_call_command.done"},
    ]
    call = {"id": call_id, "action": {"commands": ["echo hi", "cat nope"], "max_output_length": 100, "timeout_ms": None},
            "call_id": "call_sh_0", "environment": env, "status": "completed", "type": "shell_call"}  # fmt: skip
    assert events[8]["item"] == call and events[8]["output_index"] == 0
    output_id = events[9]["item"]["id"]
    assert output_id.startswith("sho_")
    assert events[9]["item"] == {"id": output_id, "call_id": "call_sh_0", "max_output_length": 100, "output": [],
                                 "status": "in_progress", "type": "shell_call_output"}  # fmt: skip
    assert events[9]["output_index"] == 1
    first = {"outcome": {"exit_code": 0, "type": "exit"}, "stderr": "", "stdout": "hi\n"}
    second = {"outcome": {"exit_code": 1, "type": "exit"}, "stderr": "cat: nope: No such file or directory\n", "stdout": ""}
    content = [{k: v for k, v in e.items() if k != "sequence_number"} for e in events[10:14]]
    assert content == [
        {"command_index": 0, "delta": {"stderr": "", "stdout": "hi\n"}, "item_id": output_id, "output_index": 1,
         "type": "response.shell_call_output_content.delta"},
        {"command_index": 0, "item_id": output_id, "output": [first], "output_index": 1,
         "type": "response.shell_call_output_content.done"},
        {"command_index": 1, "delta": {"stderr": second["stderr"], "stdout": ""}, "item_id": output_id,
         "output_index": 1, "type": "response.shell_call_output_content.delta"},
        {"command_index": 1, "item_id": output_id, "output": [second], "output_index": 1,
         "type": "response.shell_call_output_content.done"},
    ]  # fmt: skip
    done = {"id": output_id, "call_id": "call_sh_0", "max_output_length": 100, "output": [first, second],
            "status": "completed", "type": "shell_call_output"}  # fmt: skip
    assert events[14]["item"] == done and events[14]["output_index"] == 1
    ResponseFunctionShellToolCall.model_validate(call)
    ResponseFunctionShellToolCallOutput.model_validate(done)
    assert outcome.response["output"][:2] == [call, done] and outcome.text == "Done."
    assert runner.runs == [("cntr_1", ["echo hi", "cat nope"], None, 100)]
    assert [t.name for t in outcome.tool_traces()] == [SHELL]


async def test_streamed_and_collected_responses_are_the_same():
    tool = {"type": "shell", "environment": {"type": "container_reference", "container_id": "cntr_mine"}}
    runner = ToyShellRunner(containers=["cntr_mine"])
    outcome, _ = await both(body("[[shell]]\necho a\n\necho b\n[[/shell]]", tool), SimModel, shell_runner=runner)
    assert outcome.output_types == ["shell_call", "shell_call_output", "message"]
    assert outcome.response["output"][0]["action"]["commands"] == ["echo a", "echo b"]


async def test_the_model_reads_each_commands_output_and_a_failing_command_still_completes():
    model = RecordingModel(SimModel())
    outcome = await run(body("[[shell]]\necho hi\ncat nope\nexit 3"), model, shell_runner=ToyShellRunner())
    told = ("$ echo hi\nhi\n[exit code 0]\n$ cat nope\n[stderr]\ncat: nope: No such file or directory\n[exit code 1]\n"
            "$ exit 3\n[exit code 3]")  # fmt: skip
    [tool_message] = [m for m in model.calls[1].messages if m["role"] == "tool"]
    assert tool_message["content"] == told
    assert outcome.text == told, "the sim answers a shell result as it is"
    assert [i["status"] for i in outcome.response["output"]] == ["completed", "completed", "completed"]


async def test_a_timeout_is_an_outcome_and_the_limits_go_to_the_runner():
    runner = ToyShellRunner()
    model = RecordingModel(ScriptedModel(shell_turn("sleep", "echo after", timeout_ms=500, max_output_length=3),
                                         text_turn("ok")))  # fmt: skip
    outcome = await run(body("x", model="m"), model, shell_runner=runner)
    assert runner.runs == [("cntr_1", ["sleep", "echo after"], 500, 3)]
    call, output = outcome.response["output"][:2]
    assert call["action"] == {"commands": ["sleep", "echo after"], "max_output_length": 3, "timeout_ms": 500}
    assert output["status"] == "completed" and output["max_output_length"] == 3
    assert output["output"] == [{"outcome": {"type": "timeout"}, "stderr": "", "stdout": ""},
                                {"outcome": {"exit_code": 0, "type": "exit"}, "stderr": "", "stdout": "aft"}]  # fmt: skip
    [tool_message] = [m for m in model.calls[1].messages if m["role"] == "tool"]
    assert tool_message["content"] == "$ sleep\n[timed out]\n$ echo after\naft\n[exit code 0]"


@pytest.mark.parametrize(
    ("runner", "commands", "told"),
    [
        (ToyShellRunner(), ["echo a", "crash"], "Error: RuntimeError: the sandbox went away"),
        (ToyShellRunner(broken=True), ["echo a"], "Error: RuntimeError: no sandbox is available"),
        (ToyShellRunner(), [], "Error: ValueError: shell needs 'commands': a non-empty list of strings."),
    ],
)
async def test_commands_that_could_not_run_leave_an_incomplete_output_and_the_model_is_told(runner, commands, told):
    model = RecordingModel(ScriptedModel(shell_turn(*commands), text_turn("sorry")))
    outcome = await run(body("x", model="m"), model, shell_runner=runner)
    check_stream(outcome)
    call, output, _ = outcome.response["output"]
    assert call["status"] == "completed"
    assert (output["status"], output["output"], output["call_id"]) == ("incomplete", [], "call_sh_0")
    assert not any(e["type"].startswith("response.shell_call_output_content") for e in outcome.events)
    [tool_message] = [m for m in model.calls[1].messages if m["role"] == "tool"]
    assert tool_message["content"] == told


async def test_an_explicit_container_is_checked_before_the_first_event_and_used():
    runner = ToyShellRunner(containers=["cntr_mine"])
    with pytest.raises(NotFound) as info:
        await run(body("[[shell]]ls", {"type": "shell", "environment": {"type": "container_reference",
                                                                         "container_id": "cntr_gone"}}),
                  SimModel(), shell_runner=runner)  # fmt: skip
    assert info.value.param == "tools[0].environment.container_id" and runner.runs == []
    tool = {"type": "shell", "environment": {"type": "container_reference", "container_id": "cntr_mine"}}
    outcome = await run(body("[[shell]]echo x > a.txt\nls", tool), SimModel(), shell_runner=runner)
    assert runner.asked == [("cntr_gone", None), ("cntr_mine", None)] and runner.created == []
    assert outcome.response["output"][0]["environment"] == {"container_id": "cntr_mine", "type": "container_reference"}
    assert outcome.response["output"][1]["output"][1]["stdout"] == "a.txt\n"


async def test_an_auto_container_is_asked_for_with_its_spec_and_reused_by_the_next_turn():
    runner = ToyShellRunner()
    tool = {"type": "shell", "environment": {"type": "container_auto", "memory_limit": "4g", "file_ids": ["file-1"]}}
    first = await run(body("[[shell]]echo 1 > n", tool), SimModel(), shell_runner=runner)
    second = await run(body("[[shell]]cat n", tool), SimModel(), shell_runner=runner, history=history_of(first))
    assert runner.asked == [({"type": "auto", "memory_limit": "4g", "file_ids": ["file-1"]}, None),
                            ({"type": "auto", "memory_limit": "4g", "file_ids": ["file-1"]}, "cntr_1")]  # fmt: skip
    assert second.text == "$ cat n\n1\n[exit code 0]" and len(runner.created) == 1


async def test_an_auto_container_reuses_the_container_of_a_code_interpreter_call():
    code = await run({"model": "sim", "input": "[[python]]\nx = 1", "tools": [{"type": "code_interpreter", "container": "auto"}]},
                     SimModel(), code_runner=ToyCodeRunner())  # fmt: skip
    runner = ToyShellRunner(containers=["cntr_1"])
    await run(body("[[shell]]ls"), SimModel(), shell_runner=runner, code_runner=ToyCodeRunner(), history=history_of(code))
    assert runner.asked == [({"type": "auto"}, "cntr_1")]


async def test_without_a_runner_a_container_environment_is_refused_and_a_local_one_accepted():
    with pytest.raises(InvalidRequest) as info:
        await run(body("x"), SimModel())
    assert (info.value.param, info.value.code) == ("tools[0].environment", "unsupported_value")
    for tool in (LOCAL, {"type": "shell"}, {"type": "shell", "environment": None}):
        outcome = await run(body("[[shell]]ls", tool), SimModel())
        assert outcome.response["output"][0]["environment"] == {"type": "local"}


@pytest.mark.parametrize(
    ("tools", "param"),
    [
        ([{"type": "shell", "environment": {"type": "vm"}}], "tools[0].environment.type"),
        ([{"type": "shell", "environment": {"type": "container_reference"}}], "tools[0].environment.container_id"),
        ([{"type": "shell", "environment": {"type": "container_auto", "memory_limit": "2g"}}],
         "tools[0].environment.memory_limit"),
        ([{"type": "shell", "environment": {"type": "container_auto", "file_ids": "file-1"}}],
         "tools[0].environment.file_ids"),
        ([{"type": "shell", "environment": {"type": "container_auto", "network_policy": "on"}}],
         "tools[0].environment.network_policy"),
        ([{"type": "shell", "environment": {"type": "local", "skills": [{"name": "a", "description": "b", "path": "/c"}]}}],
         "tools[0].environment.skills"),
        ([AUTO, LOCAL], "tools[1]"),
        ([LOCAL, {"type": "function", "name": "shell", "parameters": {"type": "object"}}], "tools"),
    ],
)
async def test_a_bad_shell_tool_is_a_400_naming_it(tools, param):
    with pytest.raises(InvalidRequest) as info:
        await run({"model": "sim", "input": "x", "tools": tools}, SimModel(), shell_runner=ToyShellRunner())
    assert info.value.param == param


async def test_tool_choice_forces_or_allows_the_shell():
    model = RecordingModel(SimModel())
    await run(body("[[say hi]]", LOCAL, tool_choice={"type": "shell"}), model)
    assert model.calls[0].tool_choice == {"type": "function", "function": {"name": SHELL}}
    allowed = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "shell"}]}
    outcome = await run(body("[[shell]]echo 1", tool_choice=allowed), SimModel(), shell_runner=ToyShellRunner())
    assert outcome.response["output"][1]["status"] == "completed"
    with pytest.raises(InvalidRequest) as info:
        await run({"model": "sim", "input": "x", "tool_choice": {"type": "shell"}}, SimModel())
    assert info.value.param == "tool_choice"


async def test_the_model_is_shown_one_shell_function():
    model = RecordingModel(SimModel())
    await run(body("[[say hi]]"), model, shell_runner=ToyShellRunner())
    [tool] = model.calls[0].tools
    assert tool["function"]["name"] == SHELL
    assert tool["function"]["parameters"]["required"] == ["commands"]
    assert set(tool["function"]["parameters"]["properties"]) == {"commands", "timeout_ms", "max_output_length"}
    assert "/bin/sh" in tool["function"]["description"] and "/mnt/data" in tool["function"]["description"]


async def test_a_local_call_ends_the_response_and_the_clients_output_goes_upstream_next_turn():
    runner = ToyShellRunner()
    first = await run(body("list", LOCAL, model="m"), ScriptedModel(shell_turn("ls -la", "pwd")), shell_runner=runner)
    check_stream(first)
    [call] = first.response["output"]
    assert first.response["status"] == "completed" and runner.runs == [] and runner.asked == []
    assert call == {"id": call["id"], "action": {"commands": ["ls -la", "pwd"], "max_output_length": None, "timeout_ms": None},
                    "call_id": "call_sh_0", "environment": {"type": "local"}, "status": "completed", "type": "shell_call"}  # fmt: skip
    sent = {"type": "shell_call_output", "call_id": "call_sh_0",
            "output": [{"stdout": "a.txt\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
                       {"stdout": "", "stderr": "", "outcome": {"type": "timeout"}}]}  # fmt: skip
    model = RecordingModel(ScriptedModel(text_turn("You have a.txt.")))
    second = await run({**body("", LOCAL, model="m"), "input": [sent]}, model, history=history_of(first))
    assert second.text == "You have a.txt."
    [stored] = second.prepared.input_items  # type: ignore[union-attr]
    assert stored["id"].startswith("sho_") and stored["status"] == "completed"
    messages = model.calls[0].messages
    [assistant] = [m for m in messages if m.get("tool_calls")]
    assert assistant["tool_calls"] == [{"id": "call_sh_0", "type": "function", "function": {
        "name": SHELL, "arguments": json.dumps({"commands": ["ls -la", "pwd"]})}}]  # fmt: skip
    assert messages[-1] == {"role": "tool", "tool_call_id": "call_sh_0",
                            "content": "$ ls -la\na.txt\n[exit code 0]\n$ pwd\n[timed out]"}  # fmt: skip


@pytest.mark.parametrize(
    ("history", "call_id"),
    [
        ([], "call_nope"),
        ([{"type": "function_call", "id": "fc_1", "call_id": "call_f", "name": "f", "arguments": "{}", "status": "completed"}],
         "call_f"),
    ],
)
async def test_a_shell_call_output_without_its_shell_call_is_a_400(history, call_id):
    sent = {"type": "shell_call_output", "call_id": call_id,
            "output": [{"stdout": "", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]}  # fmt: skip
    with pytest.raises(InvalidRequest) as info:
        await run({**body("", LOCAL), "input": [{"role": "user", "content": "hi"}, sent]}, SimModel(), history=history)
    assert (info.value.param, info.value.code) == ("input[1].call_id", "invalid_value")


async def test_a_second_output_for_a_settled_call_is_a_400():
    first = await run(body("[[shell]]ls", LOCAL), SimModel())
    sent = {"type": "shell_call_output", "call_id": first.response["output"][0]["call_id"],
            "output": [{"stdout": "", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]}  # fmt: skip
    with pytest.raises(InvalidRequest) as info:
        await run({**body("", LOCAL), "input": [sent, sent]}, SimModel(), history=history_of(first))
    assert info.value.param == "input[1].call_id"


async def test_a_server_run_call_in_history_goes_upstream_as_the_call_and_its_output():
    runner = ToyShellRunner()
    first = await run(body("[[shell]]echo hi\nexit 2"), SimModel(), shell_runner=runner)
    model = ScriptedModel(text_turn("ok"))
    await run(body("next", model="m"), model, shell_runner=runner, history=history_of(first))
    messages = model.calls[0].messages
    call_id = first.response["output"][0]["call_id"]
    [assistant] = [m for m in messages if m.get("tool_calls")]
    assert assistant["tool_calls"] == [{"id": call_id, "type": "function", "function": {
        "name": SHELL, "arguments": json.dumps({"commands": ["echo hi", "exit 2"]})}}]  # fmt: skip
    tools = [m for m in messages if m["role"] == "tool"]
    assert tools == [{"role": "tool", "tool_call_id": call_id, "content": "$ echo hi\nhi\n[exit code 0]\n$ exit 2\n[exit code 2]"}]
    assert len(runner.runs) == 1, "history is replayed, never run again"


async def test_a_call_that_never_runs_has_no_output_item():
    runner = ToyShellRunner()
    outcome = await run(body("[[shell]]echo 1", tool_choice="none"), SimModel(), shell_runner=runner)
    assert outcome.output_types == ["shell_call"] and runner.runs == []
    assert outcome.response["output"][0]["status"] == "completed"


async def test_a_call_cut_short_by_the_length_limit_is_incomplete_and_never_runs():
    runner = ToyShellRunner()
    turn = shell_turn("echo 1")
    turn[-1] = type(turn[-1])(text="", tool_calls=turn[-1].tool_calls, finish_reason="length", usage=turn[-1].usage)
    outcome = await run(body("x", model="m"), ScriptedModel(turn), shell_runner=runner)
    check_stream(outcome)
    assert outcome.output_types == ["shell_call"] and outcome.response["output"][0]["status"] == "incomplete"
    assert runner.runs == []


def _resume_setup(text: str) -> tuple[Any, ToyShellRunner]:
    return parse_create_request(body(text)), ToyShellRunner()


async def _first_host(request: Any, runner: ToyShellRunner, stop_after: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Run until the first checkpoint of kind ``stop_after`` is stored, as a host that then died."""
    writer, events, steps = WireWriter(request, response_id="resp_1", created_at=1_700_000_000), [], []
    async for event in run_loop(prepare(request, [], shell_runner=runner), model=SimModel(), checkpoints=True):
        if isinstance(event, Checkpoint):
            steps.append(json.loads(json.dumps(event.step.to_data())))  # as a host stores it
            if steps[-1]["kind"] == stop_after:
                break
        elif not isinstance(event, StepTraced):
            events.extend(writer.write(event))
    return events, steps


async def _next_host(request: Any, runner: ToyShellRunner, events: list[dict[str, Any]], steps: list[dict[str, Any]]) -> WireWriter:
    resumed = WireWriter(request, response_id="resp_1", created_at=1_700_000_000)
    resumed.restore(events)
    point = ResumePoint.from_stored(steps, output=resumed.output)
    async for event in run_loop(prepare(request, [], shell_runner=runner), model=SimModel(), checkpoints=True, resume=point):
        if not isinstance(event, StepTraced | Checkpoint):
            events.extend(resumed.write(event))
    return resumed


async def test_a_run_resumed_after_its_call_settled_does_not_run_it_again():
    request, runner = _resume_setup("[[shell]]echo 42")
    events, steps = await _first_host(request, runner, stop_after="tool")
    assert [s["kind"] for s in steps] == ["model", "tool"]
    assert steps[1]["detail"] == {"container_id": "cntr_1", "commands": [
        {"stdout": "42\n", "stderr": "", "exit_code": 0, "timed_out": False}]}  # fmt: skip
    resumed = await _next_host(request, runner, events, steps)
    assert len(runner.runs) == 1, "the settled call is not run again"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    types = [e["type"] for e in events]
    assert types.count("response.output_item.added") == 3, "the output item opened before the restart is not opened again"
    call, output, message = resumed.response["output"]
    assert (call["status"], output["status"]) == ("completed", "completed")
    assert output["output"] == [{"outcome": {"exit_code": 0, "type": "exit"}, "stderr": "", "stdout": "42\n"}]
    assert message["content"][0]["text"] == "$ echo 42\n42\n[exit code 0]"


async def test_a_call_a_host_died_during_is_not_run_twice():
    request, runner = _resume_setup("[[shell]]echo 1")
    events, steps = await _first_host(request, runner, stop_after="model")  # the commands may have been running
    resumed = await _next_host(request, runner, events, steps)
    assert runner.runs == [], "commands are not idempotent: never run again"
    call, output, message = resumed.response["output"]
    assert (call["status"], call["action"]["commands"]) == ("completed", ["echo 1"])
    assert (output["status"], output["output"]) == ("incomplete", [])
    assert message["content"][0]["text"] == INTERRUPTED


def test_the_sim_directive():
    found = parse_directives("look: [[shell]]\nls /mnt/data\n\n  echo hi  \n[[/shell]] then [[shell]] pwd")
    assert [(c.name, json.loads(c.arguments or "")) for c in found.calls] == [
        (SHELL, {"commands": ["ls /mnt/data", "echo hi"]}),
        (SHELL, {"commands": ["pwd"]}),
    ]
    assert found.plain == "look: then"


def test_shell_action_keeps_what_the_model_wrote_and_refuses_what_cannot_run():
    assert shell_action('{"commands": "ls"}') == {"commands": ["ls"], "max_output_length": None, "timeout_ms": None}
    assert shell_action("not json") == {"commands": [], "max_output_length": None, "timeout_ms": None}
    assert shell_action('{"commands": ["a", 3], "timeout_ms": -1}')["commands"] == ["a"]
    for bad in ("not json", '{"commands": []}', '{"commands": ["a"], "timeout_ms": "5"}', '{"commands": ["a"], "max_output_length": true}'):
        with pytest.raises(ValueError):
            shell_action(bad, strict=True)


def test_long_output_is_shown_cut_in_the_middle_per_stream():
    long = "".join(f"line {i}\n" for i in range(10_000))
    shown = format_output(["seq"], [CommandRun(stdout=long, stderr="boom", exit_code=0)])
    assert shown.startswith("$ seq\nline 0\n") and "characters cut" in shown
    assert shown.endswith("line 9999\n[stderr]\nboom\n[exit code 0]")
    assert len(shown) < 12_000
    assert format_output(["x"], [CommandRun(exit_code=None)]) == "$ x\n[killed: the command hit a limit]"


async def test_a_local_call_round_trips_through_the_runtime_and_its_store(runtime):
    """Through ``Runtime.local`` (tests/unit/conftest.py): stored, continued by ``previous_response_id``."""
    from openai.types.responses import Response

    tools = [{"type": "shell"}]
    first = await runtime.respond("", parse_create_request({"model": "sim", "input": "[[shell]]ls\npwd[[/shell]]", "tools": tools}))
    Response.model_validate(first)
    [call] = first["output"]
    assert (first["status"], call["type"], call["environment"]) == ("completed", "shell_call", {"type": "local"})
    sent = {"type": "shell_call_output", "call_id": call["call_id"],
            "output": [{"stdout": "notes.txt\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
                       {"stdout": "", "stderr": "", "outcome": {"type": "timeout"}}]}  # fmt: skip
    second = await runtime.respond("", parse_create_request(
        {"model": "sim", "previous_response_id": first["id"], "tools": tools, "input": [sent]}))  # fmt: skip
    assert second["output"][-1]["content"][0]["text"] == "$ ls\nnotes.txt\n[exit code 0]\n$ pwd\n[timed out]"
    [stored] = (await runtime.list_input_items("", second["id"])).data
    parsed = ResponseFunctionShellToolCallOutput.model_validate(stored)
    assert parsed.id.startswith("sho_") and parsed.status == "completed" and parsed.call_id == call["call_id"]


@pytest.mark.parametrize("piece", [1, 2, 5, 1000])
def test_the_commands_stream_as_they_are_written(piece):
    commands = ['echo "hi" \u00e9\U0001F600', "ls -la", ""]
    arguments = json.dumps({"commands": commands, "timeout_ms": 5})  # escapes, a surrogate pair
    stream, steps = CommandsStream(), []
    for start in range(0, len(arguments), piece):
        steps += stream.feed(arguments[start : start + piece])
    assert stream.rest(commands) == [], "all told as they streamed"
    assert [(kind, i) for kind, i, _ in steps if kind != "delta"] == [
        ("added", 0), ("done", 0), ("added", 1), ("done", 1), ("added", 2), ("done", 2)]  # fmt: skip
    for i, command in enumerate(commands):
        assert "".join(t for kind, j, t in steps if kind == "delta" and j == i) == command
        assert ("done", i, command) in steps


def test_commands_of_another_shape_are_told_whole_when_the_call_ends():
    stream = CommandsStream()
    assert stream.feed('{"timeout_ms": 5, "commands": ["ls"]}') == []
    assert stream.rest(["ls"]) == [("added", 0, ""), ("delta", 0, "ls"), ("done", 0, "ls")]
    cut = CommandsStream()
    assert cut.feed('{"commands": ["echo a", "ec') == [("added", 0, ""), ("delta", 0, "echo a"), ("done", 0, "echo a"),
                                                         ("added", 1, ""), ("delta", 1, "ec")]  # fmt: skip
    assert cut.rest(cut.sent) == [("done", 1, "ec")], "a call cut short closes what was told"


async def test_a_model_that_fails_while_writing_the_commands_leaves_no_item_open():
    from tests.fakes import FunctionModel
    from troupe.agentloop.model import ModelError, ToolCallArgumentsDelta, ToolCallStart

    def failing(request: Any) -> Any:
        yield ToolCallStart(index=0, call_id="call_1", name=SHELL)
        yield ToolCallArgumentsDelta(index=0, delta='{"commands": ["echo a", "ec')
        raise ModelError("connection reset", status=502)

    runner = ToyShellRunner()
    outcome = await run(body("x", model="m"), FunctionModel(failing), shell_runner=runner)
    check_stream(outcome)
    [call] = outcome.response["output"]
    assert (call["status"], call["action"]["commands"]) == ("incomplete", ["echo a", "ec"])
    done = [e["command"] for e in outcome.events if e["type"] == "response.shell_call_command.done"]
    assert done == ["echo a", "ec"], "every command told is closed"
    assert outcome.response["status"] == "failed" and runner.runs == []
