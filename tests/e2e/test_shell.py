"""The ``shell`` tool with the ``openai`` SDK, over real HTTP: commands in real sandboxed
containers (the in-process app and Ray Serve's ``replica`` app, a container actor each), and
commands the client runs (``local``). What the placement cannot change runs in process only
(``LOCAL_ONLY``).

The sim calls the tool when told ``[[shell]]`` with one command a line, and answers with
what the call returned.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest
from openai import OpenAI

from .conftest import LOCAL_ONLY

AUTO = [{"type": "shell", "environment": {"type": "container_auto"}}]


@pytest.fixture
def client(containers_client: OpenAI) -> OpenAI:
    return containers_client


def shell(client: OpenAI, *commands: str, tools: list[dict[str, Any]] = AUTO, **options: Any) -> Any:
    return client.responses.create(model="sim", input="[[shell]]" + "\n".join(commands) + "[[/shell]]",
                                   tools=tools, **options)  # type: ignore[arg-type]  # fmt: skip


def test_commands_run_in_a_container_with_their_exit_codes(client: OpenAI) -> None:
    response = shell(client, "echo hello > greeting.txt", "cat greeting.txt", "ls nope", "exit 3")
    call, output = response.output[0], response.output[1]
    assert (call.type, call.status, call.action.commands) == ("shell_call", "completed", [
        "echo hello > greeting.txt", "cat greeting.txt", "ls nope", "exit 3"])  # fmt: skip
    assert call.environment.type == "container_reference" and call.environment.container_id.startswith("cntr_")
    assert (output.type, output.status, output.call_id) == ("shell_call_output", "completed", call.call_id)
    got = [(o.stdout, o.outcome.type, getattr(o.outcome, "exit_code", None)) for o in output.output]
    assert got == [("", "exit", 0), ("hello\n", "exit", 0), ("", "exit", 2), ("", "exit", 3)]
    assert "No such file or directory" in output.output[2].stderr
    assert "$ cat greeting.txt\nhello\n[exit code 0]" in response.output_text  # what the model was shown
    # The file the commands wrote is a container file, as code's are.
    [written] = client.containers.files.list(container_id=call.environment.container_id).data
    assert (written.path, written.source) == ("/mnt/data/greeting.txt", "assistant")


def test_shell_and_code_interpreter_share_the_threads_container(client: OpenAI) -> None:
    first = shell(client, "printf 'a,b\\n1,2\\n' > table.csv")
    container_id = first.output[0].environment.container_id
    both = [*AUTO, {"type": "code_interpreter", "container": {"type": "auto"}}]
    code = client.responses.create(model="sim", input="[[python]]print(open('table.csv').read().split())[[/python]]",
                                   tools=both, previous_response_id=first.id,  # type: ignore[arg-type]
                                   include=["code_interpreter_call.outputs"])  # fmt: skip
    call = code.output[0]
    assert (call.container_id, call.outputs[0].logs) == (container_id, "['a,b', '1,2']\n")


@LOCAL_ONLY
def test_a_command_past_its_timeout_is_a_timeout_outcome(client: OpenAI) -> None:
    response = client.responses.create(
        model="sim", tools=AUTO,  # type: ignore[arg-type]
        input='[[call shell {"commands": ["echo before; sleep 30", "echo after"], "timeout_ms": 500}]]',
    )
    output = response.output[1]
    assert [o.outcome.type for o in output.output] == ["timeout", "exit"]
    assert (output.output[0].stdout, output.output[1].stdout) == ("before\n", "after\n")


@LOCAL_ONLY
def test_the_stream_tells_commands_and_their_output_in_order(client: OpenAI) -> None:
    events = list(client.responses.create(model="sim", input="[[shell]]echo one\necho two[[/shell]]",
                                          tools=AUTO, stream=True))  # type: ignore[arg-type]  # fmt: skip
    kinds = [e.type for e in events if e.type.startswith("response.shell_call") or "output_item" in e.type]
    assert kinds[:2] == ["response.output_item.added", "response.shell_call_command.added"]
    assert kinds.count("response.shell_call_command.done") == 2
    assert kinds.count("response.shell_call_output_content.done") == 2
    done = [e for e in events if e.type == "response.shell_call_output_content.done"]
    assert [e.command_index for e in done] == [0, 1]
    final = events[-1].response
    assert [o.stdout for o in final.output[1].output] == ["one\n", "two\n"]
    assert [e.sequence_number for e in events] == list(range(len(events)))


@LOCAL_ONLY
def test_the_local_environment_hands_the_commands_to_the_client(client: OpenAI) -> None:
    local = [{"type": "shell", "environment": {"type": "local"}}]
    first = shell(client, "uname -s", tools=local)
    [call] = first.output
    assert (call.type, call.status, call.environment.type, call.action.commands) == (
        "shell_call", "completed", "local", ["uname -s"])  # fmt: skip
    second = client.responses.create(
        model="sim", previous_response_id=first.id, tools=local,  # type: ignore[arg-type]
        input=[{"type": "shell_call_output", "call_id": call.call_id,
                "output": [{"stdout": "Plan9\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]}],
    )  # fmt: skip
    assert second.output_text == "$ uname -s\nPlan9\n[exit code 0]"


@LOCAL_ONLY
def test_an_unknown_container_is_a_404_naming_it(client: OpenAI) -> None:
    tools = [{"type": "shell", "environment": {"type": "container_reference", "container_id": "cntr_nope"}}]
    with pytest.raises(openai.NotFoundError) as refused:
        shell(client, "ls", tools=tools)
    assert refused.value.body["param"] == "tools[0].environment.container_id"
