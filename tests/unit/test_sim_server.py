"""The sim's OpenAI-compatible HTTP server (over a real socket) and the ``troupe`` CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from click.testing import CliRunner

from tests.servers import serve_app
from troupe.cli import cli, main
from troupe.sim.model import SimSettings
from troupe.sim.server import create_sim_app

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with serve_app(create_sim_app(SimSettings())) as url:
        yield url


@pytest.fixture
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=10) as http:
        yield http


def body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "sim", "messages": [{"role": "user", "content": text}], **extra}


def stream_chunks(client: httpx.Client, payload: dict[str, Any]) -> list[dict[str, Any]]:
    """POST a streaming request; return the decoded chunks, checking the SSE framing."""
    with client.stream("POST", "/v1/chat/completions", json={**payload, "stream": True}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = response.read().decode()
    assert "\r" not in raw
    frames = raw.split("\n\n")
    assert frames[-2:] == ["data: [DONE]", ""]
    chunks = []
    for frame in frames[:-2]:
        assert frame.startswith("data: ") and "\n" not in frame
        chunks.append(json.loads(frame.removeprefix("data: ")))
    return chunks


def test_health_and_models(client: httpx.Client) -> None:
    assert client.get("/health").json() == {"status": "ok"}
    models = client.get("/v1/models").json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["sim"]


def test_streaming_text_reassembles(client: httpx.Client) -> None:
    payload = body("[[think first this]] [[say Hello,\nstreaming   world]]", stream_options={"include_usage": True})
    chunks = stream_chunks(client, payload)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    text_parts = [d["content"] for d in deltas if d.get("content")]
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    assert "".join(text_parts) == "Hello,\nstreaming   world"
    assert len(text_parts) == 3  # one chunk per token
    assert reasoning == "first this"
    # Reasoning comes before the answer.
    first_text = next(i for i, d in enumerate(deltas) if d.get("content"))
    assert all(not d.get("reasoning_content") for d in deltas[first_text:])

    finish, usage = chunks[-2], chunks[-1]
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert usage["choices"] == []
    assert usage["usage"]["completion_tokens"] == 5
    assert usage["usage"]["completion_tokens_details"]["reasoning_tokens"] == 2
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + 5


def test_no_usage_chunk_without_include_usage(client: httpx.Client) -> None:
    chunks = stream_chunks(client, body("[[say hi]]"))
    assert all(c["choices"] and "usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_streamed_tool_call_arguments_arrive_in_several_chunks(client: httpx.Client) -> None:
    chunks = stream_chunks(client, body('[[call lookup {"city": "Paris", "days": 3}]]', tools=[WEATHER]))
    calls = [tc for c in chunks if c["choices"] for tc in c["choices"][0]["delta"].get("tool_calls", [])]
    head, *rest = calls
    assert head["index"] == 0 and head["type"] == "function"
    assert head["id"].startswith("call_") and head["function"]["name"] == "lookup"
    assert len(rest) > 1
    assert all(tc["index"] == 0 and "id" not in tc for tc in rest)
    arguments = head["function"]["arguments"] + "".join(tc["function"]["arguments"] for tc in rest)
    assert json.loads(arguments) == {"city": "Paris", "days": 3}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_non_streaming_reply_shape(client: httpx.Client) -> None:
    reply = client.post("/v1/chat/completions", json=body("[[think hmm]] [[tokens 4]]", max_tokens=2)).json()
    assert reply["object"] == "chat.completion"
    choice = reply["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "alpha bravo", "reasoning_content": "hmm"}
    assert choice["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 3

    tools = client.post("/v1/chat/completions", json=body("What's the weather?", tools=[WEATHER])).json()
    message = tools["choices"][0]["message"]
    assert message["content"] is None and tools["choices"][0]["finish_reason"] == "tool_calls"
    [call] = message["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "example"}'}


def test_fail_replies_with_openai_error(client: httpx.Client) -> None:
    for stream in (False, True):
        response = client.post("/v1/chat/completions", json=body("[[fail 503]]", stream=stream))
        assert response.status_code == 503
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["type"] == "server_error"


def test_fail_once_is_remembered_by_the_server(client: httpx.Client) -> None:
    payload = body("[[fail 429 once]] [[say ok now]]")
    first = client.post("/v1/chat/completions", json=payload)
    assert first.status_code == 429 and first.json()["error"]["type"] == "rate_limit_error"
    second = client.post("/v1/chat/completions", json=payload)
    assert second.status_code == 200
    assert second.json()["choices"][0]["message"]["content"] == "ok now"


def test_bad_requests_get_openai_errors(client: httpx.Client) -> None:
    bad = client.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    missing = client.post("/v1/chat/completions", json={"model": "sim"})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "messages"
    assert client.get("/v1/nope").json()["error"]["type"] == "not_found_error"


def test_latency_directive_still_streams(client: httpx.Client) -> None:
    chunks = stream_chunks(client, body("[[latency ttft=30 itl=5]] [[tokens 4]]"))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == "alpha bravo charlie delta"
    reply = client.post("/v1/chat/completions", json=body("[[latency itl=5]] [[tokens 2]]")).json()
    assert reply["choices"][0]["message"]["content"] == "alpha bravo"


def test_openai_sdk_understands_the_stream(base_url: str) -> None:
    sdk = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
    stream = sdk.chat.completions.create(
        model="sim",
        messages=[{"role": "user", "content": "[[call get_weather]] [[call get_weather {\"city\": \"Oslo\"}]]"}],
        tools=[WEATHER],
        stream=True,
        stream_options={"include_usage": True},
    )
    arguments: dict[int, str] = {}
    usage = None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or []:
                arguments[call.index] = arguments.get(call.index, "") + (call.function.arguments or "")
    assert {i: json.loads(a) for i, a in arguments.items()} == {0: {"city": "example"}, 1: {"city": "Oslo"}}
    assert usage is not None and usage.completion_tokens == 4
    with pytest.raises(openai.InternalServerError):
        sdk.chat.completions.create(model="sim", messages=[{"role": "user", "content": "[[fail 500]]"}])


# --- the CLI --------------------------------------------------------------------------------


def test_cli_sim_help() -> None:
    result = CliRunner().invoke(cli, ["sim", "--help"])
    assert result.exit_code == 0
    for option in ("--host", "--port", "--ttft-ms", "--itl-ms"):
        assert option in result.output


def test_cli_parses_sim_options() -> None:
    params = cli.commands["sim"].make_context("sim", ["--port", "9000", "--ttft-ms", "250", "--itl-ms", "20"]).params
    assert params == {"host": "127.0.0.1", "port": 9000, "ttft_ms": 250, "itl_ms": 20, "log_level": "info"}


def test_cli_without_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "sim" in capsys.readouterr().out


def test_python_dash_m_troupe() -> None:
    result = subprocess.run([sys.executable, "-m", "troupe", "sim", "--help"], capture_output=True, text=True,
                            timeout=60)  # fmt: skip
    assert result.returncode == 0
    assert "--ttft-ms" in result.stdout


def test_console_script_help() -> None:
    script = Path(sys.executable).parent / "troupe"
    if not script.exists() or "troupe.cli" not in script.read_text():
        pytest.skip("no troupe console script of troupe.cli in this environment (`pip install -e .` makes one)")
    result = subprocess.run([str(script), "sim", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert "--ttft-ms" in result.stdout
