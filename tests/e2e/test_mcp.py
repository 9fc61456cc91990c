"""MCP end to end: the openai SDK against Troupe on Serve, real MCP servers on loopback.

The HTTP server (``tests/mcp_servers.py``) counts sessions, listings and calls, and records
when each ``echo_slowly`` call starts and ends; the stdio server is configured in the app
(``stdio-calc``, see conftest) and named by label alone. The same server also runs on the
older HTTP+SSE transport (the SDK's ``SseServerTransport``, behind a bearer token), which a
request names by its URL like any other: Troupe finds the transport itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest
from openai import OpenAI

from tests.mcp_servers import McpTestServer, free_port, serve_mcp

from .conftest import PART_PLACEMENTS


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpTestServer]:
    with serve_mcp() as server:
        yield server


SSE_TOKEN = "sse-t0ken"


@pytest.fixture(scope="module")
def sse_server() -> Iterator[McpTestServer]:
    """One HTTP+SSE server for the module; it wants ``Authorization: Bearer sse-t0ken`` on every request."""
    with serve_mcp(sse=True, token=SSE_TOKEN) as server:
        yield server


@pytest.fixture(params=PART_PLACEMENTS)
def client(request, troupe_apps) -> OpenAI:
    return OpenAI(base_url=f"{troupe_apps[request.param]}/v1", api_key="unused", max_retries=0)


@pytest.fixture
def default_client(troupe_apps) -> OpenAI:
    """The default placement only: for failures that wait out time-outs in the MCP connection
    actors, which every placement shares (each runs in seconds; three times adds a minute to CI)."""
    return OpenAI(base_url=f"{troupe_apps['replica']}/v1", api_key="unused", max_retries=0)


def mcp(server: McpTestServer, label: str = "calc", **kw) -> dict:
    return {"type": "mcp", "server_label": label, "server_url": server.url, "require_approval": "never", **kw}


def items(response, kind: str) -> list:
    return [i for i in response.output if i.type == kind]


def test_listing_call_and_answer_streamed_and_not(client, mcp_server):
    body = {"model": "sim", "input": '[[call add {"a": 2, "b": 40}]]', "tools": [mcp(mcp_server)]}
    response = client.responses.create(**body)
    assert [i.type for i in response.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert {t.name for t in response.output[0].tools} >= {"add", "echo_slowly", "always_fail", "hang"}
    call = response.output[1]
    assert (call.name, call.output, call.error, call.status) == ("add", "42", None, "completed")
    assert response.output_text == "add -> 42"
    with client.responses.stream(**body) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()  # the SDK's accumulator is satisfied
    assert final.output_text == "add -> 42"
    for kind in ("response.mcp_list_tools.completed", "response.mcp_call_arguments.done", "response.mcp_call.completed"):
        assert kind in kinds
    assert client.responses.retrieve(final.id).output_text == "add -> 42"


def test_configured_stdio_server_by_label(client):
    tool = {"type": "mcp", "server_label": "stdio-calc"}
    response = client.responses.create(model="sim", input='[[call add {"a": 20, "b": 22}]]', tools=[tool])
    assert response.output_text == "add -> 42"
    assert "server_url" not in response.tools[0].to_dict()


def test_allowed_tools_filter_listing_and_calls(client, mcp_server):
    tool = mcp(mcp_server, allowed_tools=["add"])
    response = client.responses.create(model="sim", input="[[call always_fail]]", tools=[tool])
    assert [t.name for t in response.output[0].tools] == ["add"]
    assert not items(response, "mcp_call"), "a tool outside allowed_tools is never called"
    assert response.output_text == "always_fail -> Error: unknown tool 'always_fail'"


def test_three_calls_in_one_turn_overlap(client, mcp_server):
    tag = f"overlap-{id(client)}"
    calls = " ".join(f'[[call echo_slowly {{"text": "{tag}-{n}", "ms": 400}}]]' for n in range(3))
    response = client.responses.create(model="sim", input=calls, tools=[mcp(mcp_server)])
    assert [c.output for c in items(response, "mcp_call")] == [f"{tag}-{n}" for n in range(3)]
    echoes = [e for e in mcp_server.stats()["echoes"] if e["text"].startswith(tag)]
    assert len(echoes) == 3
    assert max(e["start"] for e in echoes) < min(e["end"] for e in echoes), "the three calls were in flight together"


def test_approval_approve_runs_once_deny_runs_nothing_unknown_is_400(client, mcp_server):
    tool = mcp(mcp_server, require_approval="always")
    first = client.responses.create(model="sim", input='[[call add {"a": 5, "b": 5}]]', tools=[tool])
    assert first.status == "completed"
    _approve_then_deny(client, mcp_server, tool, first)

    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(
            model="sim", tools=[tool], previous_response_id=first.id,
            input=[{"type": "mcp_approval_response", "approval_request_id": "mcpr_unknown", "approve": True}],
        )
    assert info.value.body["param"] == "input[0].approval_request_id"


def test_chains_and_conversations_never_relist_or_rerun(client, mcp_server):
    tool = mcp(mcp_server)
    before = mcp_server.stats()["methods"]
    first = client.responses.create(model="sim", input='[[call add {"a": 3, "b": 4}]]', tools=[tool])
    second = client.responses.create(model="sim", input="[[history]]", tools=[tool], previous_response_id=first.id)
    assert [i.type for i in second.output] == ["message"], "no second mcp_list_tools in the chain"
    conversation = client.conversations.create()
    client.responses.create(model="sim", input='[[call add {"a": 1, "b": 2}]]', tools=[tool], conversation=conversation.id)
    again = client.responses.create(model="sim", input="[[say done]]", tools=[tool], conversation=conversation.id)
    assert [i.type for i in again.output] == ["message"]
    after = mcp_server.stats()["methods"]
    assert after["tools/call"] - before.get("tools/call", 0) == 2, "each call ran exactly once"
    listed = [i for i in client.conversations.items.list(conversation.id, order="asc").data if i.type == "mcp_list_tools"]
    assert len(listed) == 1


def test_failing_and_hanging_calls_are_reported_on_their_items(default_client, mcp_server):
    failing = default_client.responses.create(model="sim", input="[[call always_fail]]", tools=[mcp(mcp_server)])
    call = items(failing, "mcp_call")[0]
    assert failing.status == "completed" and call.status == "failed"
    assert "always fails" in json.dumps(call.error if isinstance(call.error, dict | str) else call.error.to_dict())

    hung = default_client.responses.create(model="sim", input="[[call hang]]", tools=[mcp(mcp_server)])
    call = items(hung, "mcp_call")[0]
    assert hung.status == "completed" and call.status == "failed"
    assert "timed out" in json.dumps(call.error if isinstance(call.error, dict | str) else call.error.to_dict())


def assert_424(caught: pytest.ExceptionInfo, label: str, param: str, *parts: str) -> None:
    """OpenAI's answer to a request whose MCP server cannot be listed."""
    error = caught.value
    assert isinstance(error, openai.APIStatusError) and error.status_code == 424
    assert (error.body["type"], error.body["code"], error.body["param"]) == (
        "external_connector_error", "external_connector_error", param)
    assert error.body["message"].startswith(f"Error retrieving tool list from MCP server: '{label}'. ")
    for part in parts:
        assert part in error.body["message"]


def test_a_server_answering_401_fails_the_request_with_424(default_client, mcp_server):
    with serve_mcp(token="t0ken") as guarded:
        body = {"model": "sim", "input": "[[say never]]", "tools": [mcp(mcp_server), mcp(guarded, "guarded")]}
        with pytest.raises(openai.APIStatusError) as caught:
            default_client.responses.create(**body)
        assert_424(caught, "guarded", "tools[1]", "Http status code: 401 (Unauthorized)")
        assert "t0ken" not in str(caught.value.body)
        # Streamed: the listing happens before the first event, so the answer is an HTTP 424 too.
        with pytest.raises(openai.APIStatusError) as caught:
            default_client.responses.create(**body, stream=True)
        assert_424(caught, "guarded", "tools[1]", "Http status code: 401 (Unauthorized)")
        # With the credentials, the same server is listed and the response goes on.
        good = mcp(guarded, "guarded", authorization="t0ken")
        response = default_client.responses.create(model="sim", input='[[call add {"a": 1, "b": 2}]]', tools=[good])
        assert response.output_text == "add -> 3"


def test_a_401_to_tools_list_is_reported_as_401(default_client):
    # The server's GET event stream answers 405 just after the listing's 401 (tests/mcp_servers.py).
    with serve_mcp(list_needs_auth=True) as guarded:
        with pytest.raises(openai.APIStatusError) as caught:
            default_client.responses.create(model="sim", input="x", tools=[mcp(guarded, "list-auth")], stream=True)
        assert_424(caught, "list-auth", "tools[0]", "Http status code: 401 (Unauthorized)")
        assert "405" not in caught.value.body["message"]


def test_a_server_that_refuses_connections_fails_the_request_with_424_at_once(default_client):
    import time

    gone = {"type": "mcp", "server_label": "gone", "server_url": f"http://127.0.0.1:{free_port()}/mcp",
            "require_approval": "never"}
    for stream in (False, True):
        started = time.monotonic()
        with pytest.raises(openai.APIStatusError) as caught:
            default_client.responses.create(model="sim", input="[[say never]]", tools=[gone], stream=stream)
        elapsed = time.monotonic() - started
        assert_424(caught, "gone", "tools[0]", "Could not connect")
        # Within the configured timeout (6 s), although the connection actor is new each time
        # (its start-up takes seconds). On the default placement, which starts no host process
        # for a new conversation (the dedicated one would, and that is not MCP's time).
        assert elapsed < 6.0, f"took {elapsed:.2f} s"
        gone["server_url"] = f"http://127.0.0.1:{free_port()}/mcp"  # a fresh connection actor again


def test_a_server_that_never_answers_fails_the_request_with_424_after_the_timeout(default_client):
    import socket

    # Accepts connections (the kernel's backlog) but never answers a byte.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/mcp"
        tool = {"type": "mcp", "server_label": "silent", "server_url": url, "require_approval": "never"}
        with pytest.raises(openai.APIStatusError) as caught:
            default_client.responses.create(model="sim", input="[[say never]]", tools=[tool], stream=True)
        assert_424(caught, "silent", "tools[0]", "timed out after 6 s")


def test_metadata_address_is_refused(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(
            model="sim", input="x",
            tools=[{"type": "mcp", "server_label": "meta", "server_url": "http://169.254.169.254/mcp"}],
        )
    assert info.value.body["param"] == "tools[0].server_url"


def test_secrets_are_not_echoed(client, mcp_server):
    secret = "sk-e2e-super-secret"
    tool = mcp(mcp_server, headers={"X-Api-Key": secret}, authorization=secret)
    response = client.responses.create(model="sim", input='[[call add {"a": 1, "b": 1}]]', tools=[tool])
    assert secret not in response.model_dump_json()
    assert secret not in client.responses.retrieve(response.id).model_dump_json()


# -- a server on the older HTTP+SSE transport -------------------------------------------------


def legacy(server: McpTestServer, label: str = "legacy", **kw) -> dict:
    """The SSE server as a request names it: its URL (``…/sse``) and its token, nothing about the transport."""
    return mcp(server, label, authorization=SSE_TOKEN, **kw)


def test_sse_server_listing_call_and_answer_streamed_and_not(client, sse_server):
    before = sse_server.stats()["methods"].get("tools/call", 0)
    body = {"model": "sim", "input": '[[call add {"a": 2, "b": 40}]]', "tools": [legacy(sse_server)]}
    response = client.responses.create(**body)
    assert [i.type for i in response.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert response.output[0].server_label == "legacy"
    assert {t.name for t in response.output[0].tools} >= {"add", "echo_slowly", "always_fail"}
    call = response.output[1]
    assert (call.name, call.arguments, call.output, call.error, call.status) == (
        "add", '{"a": 2, "b": 40}', "42", None, "completed")
    assert response.output_text == "add -> 42"
    with client.responses.stream(**body) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert final.output_text == "add -> 42"
    for kind in ("response.mcp_list_tools.completed", "response.mcp_call_arguments.done", "response.mcp_call.completed"):
        assert kind in kinds
    assert sse_server.stats()["methods"]["tools/call"] == before + 2  # each call ran once, on the SSE server
    assert SSE_TOKEN not in response.model_dump_json()


def test_sse_server_approval_flow(client, sse_server):
    tool = legacy(sse_server, require_approval="always")
    first = client.responses.create(model="sim", input='[[call add {"a": 5, "b": 5}]]', tools=[tool])
    assert [i.type for i in first.output] == ["mcp_list_tools", "mcp_approval_request"]
    request = first.output[-1]
    assert (request.server_label, request.name, request.arguments) == ("legacy", "add", '{"a": 5, "b": 5}')
    _approve_then_deny(client, sse_server, tool, first)


def test_sse_server_allowed_tools_filter_listing_and_calls(client, sse_server):
    tool = legacy(sse_server, allowed_tools=["add"])
    response = client.responses.create(model="sim", input="[[call always_fail]]", tools=[tool])
    assert [t.name for t in response.output[0].tools] == ["add"]
    assert not items(response, "mcp_call"), "a tool outside allowed_tools is never called"
    assert response.output_text == "always_fail -> Error: unknown tool 'always_fail'"
    allowed = client.responses.create(model="sim", input='[[call add {"a": 1, "b": 2}]]', tools=[tool])
    assert allowed.output_text == "add -> 3"


def test_sse_server_without_its_credentials_fails_the_request_with_424(default_client, sse_server):
    # The token is asked for on the streamable POST too: a 401 is the answer, reported as such
    # (not taken for an older server), and nothing reaches the event stream.
    with pytest.raises(openai.APIStatusError) as caught:
        default_client.responses.create(model="sim", input="[[say never]]", tools=[mcp(sse_server, "no-token")])
    assert_424(caught, "no-token", "tools[0]", "Http status code: 401 (Unauthorized)")


def test_sse_endpoint_on_another_origin_is_refused_with_424(default_client, mcp_server):
    # A server that announces its message endpoint on another origin (here: the streamable
    # server's), as one behind a proxy naming its inside address would: Troupe sends nothing there.
    with serve_mcp(sse=True, endpoint_origin=mcp_server.base) as proxied:
        before = mcp_server.stats()["http"]
        for stream in (False, True):
            with pytest.raises(openai.APIStatusError) as caught:
                default_client.responses.create(model="sim", input="[[say never]]", tools=[mcp(proxied, "proxied")],
                                                stream=stream)
            assert_424(caught, "proxied", "tools[0]",
                       f"The message endpoint the server announced is on another origin ({mcp_server.base}) "
                       f"than the server URL ({proxied.base})")
            assert "session_id" not in caught.value.body["message"]
        assert proxied.stats()["http"]["GET /sse"] >= 1  # it was asked for its event stream...
        assert mcp_server.stats()["http"] == before, "...and nothing was sent to the other origin"


def _approve_then_deny(client, server: McpTestServer, tool: dict, first) -> None:
    """``first`` asked to approve ``add(5, 5)``: approving runs it once on ``server``; a second
    request's call, denied, runs nothing."""
    request = items(first, "mcp_approval_request")[0]
    calls_before = server.stats()["methods"].get("tools/call", 0)
    approved = client.responses.create(
        model="sim", tools=[tool], previous_response_id=first.id,
        input=[{"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}],
    )
    assert [i.type for i in approved.output] == ["mcp_call", "message"]
    assert (approved.output[0].approval_request_id, approved.output[0].output) == (request.id, "10")
    assert approved.output_text == "add -> 10"
    assert server.stats()["methods"]["tools/call"] == calls_before + 1

    second = client.responses.create(model="sim", input='[[call add {"a": 1, "b": 1}]]', tools=[tool])
    denied = client.responses.create(
        model="sim", tools=[tool], previous_response_id=second.id,
        input=[{"type": "mcp_approval_response", "approval_request_id": items(second, "mcp_approval_request")[0].id,
                "approve": False}],
    )
    assert denied.output_text == "add -> The user denied this tool call."
    assert server.stats()["methods"]["tools/call"] == calls_before + 1, "a denied call never runs"
