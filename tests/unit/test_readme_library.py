"""README "The agent loop as a library" runs as written: its code blocks are taken from the
README and run here, against the in-process ``sim`` model and the standalone sim server, and
what they print is what the README says they print."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.servers import serve_app
from troupe.sim.model import SimSettings
from troupe.sim.server import create_sim_app

README = Path(__file__).parents[2] / "README.md"
SIM_SERVER_URL = "http://127.0.0.1:8001/v1"


def section_blocks() -> list[str]:
    text = README.read_text()
    section = text.split("## The agent loop as a library\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def run_block(code: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    exec(compile(code, "README.md", "exec"), {"__name__": "__main__"})  # noqa: S102 - the README's own code
    return capsys.readouterr().out.splitlines()


def test_the_section_has_the_in_process_and_the_server_example() -> None:
    blocks = section_blocks()
    assert len(blocks) == 2
    assert "from troupe.agentloop import create_response, stream_response" in blocks[0]
    assert SIM_SERVER_URL in blocks[1]


def test_the_in_process_example_streams_the_tool_loop_and_answers_42(capsys: pytest.CaptureFixture[str]) -> None:
    lines = run_block(section_blocks()[0], capsys)
    *events, answer = lines
    assert events[0] == "0 response.created" and events[-1] == "18 response.completed", "as its comment says"
    assert [int(line.split()[0]) for line in events] == list(range(len(events)))
    kinds = [line.split()[1] for line in events]
    assert "response.function_call_arguments.done" in kinds and "response.output_text.delta" in kinds
    assert answer == "add -> 42"


def test_the_server_example_answers_through_an_openai_compatible_server(capsys: pytest.CaptureFixture[str]) -> None:
    with serve_app(create_sim_app(SimSettings())) as url:
        lines = run_block(section_blocks()[1].replace(SIM_SERVER_URL, f"{url}/v1"), capsys)
    assert lines == ["hello"]
