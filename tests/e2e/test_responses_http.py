"""The HTTP API driven by the ``openai`` SDK, against three deployments of the same app.

``url`` runs every test on: the app over ``Runtime.local`` (in-process, uvicorn), and
the Ray Serve application with replica and with pooled placement (tests/e2e/conftest.py says
why dedicated runs only the tests of its own routing).
The API-key tests use a local server with two keys (two tenants): authentication is the
HTTP layer's, the same in every deployment. Raw ``httpx`` checks SSE framing and headers.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.servers import serve_app, served_local, wait_for
from troupe.serve.app import create_app
from troupe.serve.config import ServerSettings

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
KEYS = {"sk-alice": "alice", "sk-bob": "bob"}


@pytest.fixture(scope="module")
def keyed_url() -> Iterator[str]:
    """Two API keys, two tenants."""
    yield from served_local(ServerSettings(api_keys=KEYS))


def keyed(keyed_url: str, key: str) -> OpenAI:
    return OpenAI(base_url=f"{keyed_url}/v1", api_key=key, max_retries=0)


def text_of(response: Any) -> str:
    return response.output_text


# -- responses -----------------------------------------------------------------------


def test_create_non_stream_then_retrieve(client):
    created = client.responses.create(model="sim", input="[[say hello there]]")
    assert created.status == "completed" and created.object == "response"
    assert text_of(created) == "hello there"
    again = client.responses.retrieve(created.id)
    assert again.to_dict() == created.to_dict()


def test_stream_accumulates_to_the_stored_response(client):
    with client.responses.stream(model="sim", input="[[say one two three]]") as stream:
        types = [event.type for event in stream]
        final = stream.get_final_response()
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert types.count("response.output_text.delta") == 3
    assert final.output_text == "one two three"
    stored = client.responses.retrieve(final.id).to_dict()
    assert _without_parsed(final.to_dict()) == stored


def _without_parsed(value: Any) -> Any:
    # The SDK's accumulator returns a ParsedResponse, which adds `parsed` to text parts.
    if isinstance(value, dict):
        return {k: _without_parsed(v) for k, v in value.items() if k != "parsed"}
    if isinstance(value, list):
        return [_without_parsed(v) for v in value]
    return value


def test_create_with_stream_true_returns_events(client):
    events = list(client.responses.create(model="sim", input="[[say hi]]", stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.completed"


def test_delete_then_404(client):
    created = client.responses.create(model="sim", input="[[say bye]]")
    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.retrieve(created.id)
    assert err.value.status_code == 404
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)


def test_input_items_paging_both_orders(client):
    messages = [{"role": "user", "content": f"message {i}"} for i in range(5)]
    created = client.responses.create(model="sim", input=messages)
    asc = client.responses.input_items.list(created.id, limit=2, order="asc")
    assert len(asc.data) == 2 and asc.has_more
    asc_texts = [item.content[0].text for item in asc]  # iterating follows `after` across pages
    assert asc_texts == [f"message {i}" for i in range(5)]
    desc = [item.content[0].text for item in client.responses.input_items.list(created.id, limit=2)]
    assert desc == asc_texts[::-1], "the default order is desc"
    last = client.responses.input_items.list(created.id, limit=100, order="asc")
    assert not last.has_more and last.first_id == last.data[0].id and last.last_id == last.data[-1].id


def test_previous_response_id_three_deep(client):
    first = client.responses.create(model="sim", input="alpha")
    second = client.responses.create(model="sim", input="bravo", previous_response_id=first.id)
    third = client.responses.create(model="sim", input="charlie [[history]]", previous_response_id=second.id)
    assert third.previous_response_id == second.id
    assert text_of(third) == "alpha | bravo | charlie [[history]]"


def test_list_responses(client):
    a = client.responses.create(model="sim", input="[[say a]]")
    b = client.responses.create(model="sim", input="[[say b]]")
    page = httpx.get(f"{client.base_url}responses", params={"limit": 2}).json()
    assert page["object"] == "list" and [r["id"] for r in page["data"]] == [b.id, a.id]
    asc = httpx.get(f"{client.base_url}responses", params={"after": a.id, "order": "asc"}).json()
    assert b.id in [r["id"] for r in asc["data"]] and a.id not in [r["id"] for r in asc["data"]]
    none = httpx.get(f"{client.base_url}responses", params={"model": "no-such-model"}).json()
    assert none["data"] == [] and none["has_more"] is False


def test_function_tool_round_trip(client):
    first = client.responses.create(model="sim", input="What is the weather in Paris?", tools=[WEATHER])
    call = first.output[0]
    assert first.status == "completed"
    assert call.type == "function_call" and call.name == "get_weather"
    second = client.responses.create(
        model="sim",
        tools=[WEATHER],
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "rain"}],
    )
    assert text_of(second) == "get_weather -> rain"


def test_server_tool_runs_inside_the_loop(client):
    response = client.responses.create(model="sim", input='[[call calculator {"expression": "6 * 7"}]]')
    kinds = [item.type for item in response.output]
    assert kinds == ["function_call", "function_call_output", "message"]
    assert "42" in text_of(response)
    traces = httpx.get(f"{client.base_url}responses/{response.id}/step_traces").json()
    # The model asked, the tool ran, the model answered: one trace each, in that order.
    assert [t["kind"] for t in traces] == ["model", "tool", "model"]
    assert traces[1]["name"] == "calculator" and traces[1]["error"] is None


def test_registered_tools_of_one_turn_run_in_parallel(client):
    calls = " ".join('[[call sleep {"ms": 300}]]' for _ in range(3))
    response = client.responses.create(model="sim", input=calls)
    assert text_of(response) == "\n".join(["sleep -> slept 300 ms"] * 3)
    traces = httpx.get(f"{client.base_url}responses/{response.id}/step_traces").json()
    tools = [t for t in traces if t["kind"] == "tool"]
    assert len(tools) == 3
    # Shown by the recorded times, not by a wall-clock threshold: every call began before any ended.
    assert max(t["started_at"] for t in tools) < min(t["started_at"] + t["duration_s"] for t in tools)


def test_store_false_keeps_nothing(client):
    response = client.responses.create(model="sim", input="[[say gone]]", store=False)
    assert text_of(response) == "gone"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="sim", input="x", previous_response_id=response.id)
    assert err.value.code == "previous_response_not_found"


def test_models_and_health(client, url):
    models = client.models.list()
    assert [m.id for m in models] == ["sim"]
    raw = httpx.get(f"{url}/v1/models").json()
    assert raw["object"] == "list"
    assert set(raw["data"][0]) == {"id", "object", "created", "owned_by"}
    assert raw["data"][0]["owned_by"] == "troupe"
    assert httpx.get(f"{url}/health").json() == {"status": "ok"}


# -- conversations -------------------------------------------------------------------


def test_conversation_three_turns(client):
    conv = client.conversations.create(metadata={"topic": "test"})
    assert conv.object == "conversation" and conv.metadata == {"topic": "test"}
    for word in ("one", "two", "three"):
        reply = client.responses.create(model="sim", input=f"[[say {word}]]", conversation=conv.id)
        assert text_of(reply) == word
        assert reply.conversation.id == conv.id
    asc = list(client.conversations.items.list(conv.id, order="asc", limit=2))
    roles = [item.role for item in asc]
    assert roles == ["user", "assistant"] * 3
    assert [item.content[0].text for item in asc if item.role == "assistant"] == ["one", "two", "three"]
    desc = list(client.conversations.items.list(conv.id))
    assert [i.id for i in desc] == [i.id for i in asc][::-1], "the default order is desc"

    item = client.conversations.items.retrieve(asc[1].id, conversation_id=conv.id)
    assert item.id == asc[1].id and item.role == "assistant"
    after_delete = client.conversations.items.delete(asc[1].id, conversation_id=conv.id)
    assert after_delete.id == conv.id and after_delete.object == "conversation"
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(asc[1].id, conversation_id=conv.id)


def test_conversation_crud_and_items(client):
    conv = client.conversations.create(items=[{"role": "user", "content": "remember: blue"}])
    added = client.conversations.items.create(
        conv.id, items=[{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and red"}]}]
    )
    assert added.object == "list" and len(added.data) == 1
    texts = [i.content[0].text for i in client.conversations.items.list(conv.id, order="asc")]
    assert texts == ["remember: blue", "and red"]
    updated = client.conversations.update(conv.id, metadata={"k": "v"})
    assert updated.metadata == {"k": "v"}
    assert client.conversations.retrieve(conv.id).metadata == {"k": "v"}
    deleted = client.conversations.delete(conv.id)
    assert deleted.deleted is True and deleted.id == conv.id
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conv.id)


def test_conversation_body_errors(client, url):
    with pytest.raises(openai.BadRequestError) as err:
        client.conversations.create(items=[{"role": "wizard", "content": "x"}])
    assert err.value.param and err.value.param.startswith("items[0]")
    too_many = [{"role": "user", "content": str(i)} for i in range(21)]
    with pytest.raises(openai.BadRequestError) as err:
        client.conversations.create(items=too_many)
    assert err.value.param == "items"
    conv = client.conversations.create()
    r = httpx.post(f"{url}/v1/conversations/{conv.id}/items", json={})
    assert r.status_code == 400 and r.json()["error"]["param"] == "items"
    r = httpx.post(f"{url}/v1/conversations/{conv.id}", json={"metadata": {"k": 1}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "metadata.k"
    r = httpx.post(f"{url}/v1/conversations", json={"itemz": []})
    assert r.status_code == 400 and r.json()["error"]["param"] == "itemz"
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.create("conv_nope", items=[{"role": "user", "content": "x"}])


# -- errors --------------------------------------------------------------------------


def test_unknown_parameter_names_it(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="sim", input="x", extra_body={"bogus": 1})
    assert err.value.param == "bogus" and err.value.code == "unknown_parameter"


def test_bad_type_names_it(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="sim", input="x", temperature="hot")  # type: ignore[arg-type]
    assert err.value.param == "temperature"


def test_unknown_ids_are_404(client):
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_nope")
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list("resp_nope")
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve("conv_nope")
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model="sim", input="x", conversation="conv_nope")
    assert err.value.param == "conversation"
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model="no-such-model", input="x")
    assert err.value.code == "model_not_found"


def test_unknown_previous_response_id_is_a_400_naming_it(client):
    # OpenAI answers 400 previous_response_not_found here, not 404.
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="sim", input="x", previous_response_id="resp_nope")
    assert (err.value.param, err.value.code) == ("previous_response_id", "previous_response_not_found")


def test_ids_of_the_wrong_shape_are_a_400_naming_the_parameter(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="sim", input="x", conversation="invalid-format")
    assert (err.value.param, err.value.code) == ("conversation", "invalid_value")
    assert "Expected an ID that begins with 'conv'" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="sim", input="x", previous_response_id="msg_123")
    assert err.value.param == "previous_response_id"
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.retrieve("nope")
    assert (err.value.param, err.value.code) == ("response_id", "invalid_value")
    with pytest.raises(openai.BadRequestError) as err:
        client.conversations.items.list("nope")
    assert (err.value.param, err.value.code) == ("conversation_id", "invalid_value")


def test_max_output_tokens_below_16_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="sim", input="x", max_output_tokens=15)
    assert (err.value.param, err.value.code) == ("max_output_tokens", "integer_below_min_value")
    assert client.responses.create(model="sim", input="[[say ok]]", max_output_tokens=16).status == "completed"


def test_conversation_and_previous_response_id_are_exclusive(client):
    first = client.responses.create(model="sim", input="x")
    conv = client.conversations.create()
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="sim", input="y", conversation=conv.id, previous_response_id=first.id)
    assert err.value.param == "conversation"


def test_error_shape_and_no_retry_header(url):
    cases = [
        ("POST", "/v1/responses", {"content": b"{not json", "headers": {"content-type": "application/json"}}, 400),
        ("POST", "/v1/responses", {"json": ["a list"]}, 400),
        ("POST", "/v1/responses", {"json": {"input": "no model"}}, 400),
        ("GET", "/v1/responses/resp_nope", {}, 404),
        ("GET", "/v1/nowhere", {}, 404),
        ("PUT", "/v1/responses", {}, 405),
        ("GET", "/v1/responses?limit=0", {}, 400),
        ("GET", "/v1/responses?limit=abc", {}, 400),
        ("GET", "/v1/conversations/conv_x/items?order=sideways", {}, 400),
    ]
    for method, path, kwargs, status in cases:
        r = httpx.request(method, f"{url}{path}", **kwargs)
        assert r.status_code == status, (path, r.text)
        error = r.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}, path
        assert error["message"]
        assert r.headers["x-should-retry"] == "false", path
    r = httpx.get(f"{url}/v1/responses", params={"limit": 101})
    assert r.json()["error"]["param"] == "limit"
    r = httpx.get(f"{url}/v1/conversations/conv_x/items", params={"order": "sideways"})
    assert r.json()["error"]["param"] == "order"


def test_model_failure_is_a_500_without_retry(client, url):
    r = httpx.post(f"{url}/v1/responses", json={"model": "sim", "input": "[[fail 500]]"})
    assert r.status_code == 500
    assert r.headers["x-should-retry"] == "false"
    assert r.json()["error"]["type"] == "server_error"
    # The SDK honours the header: with retries allowed it still asks once.
    retrying = OpenAI(base_url=client.base_url, api_key="unused", max_retries=2)
    tag = uuid.uuid4().hex
    with pytest.raises(openai.InternalServerError):
        retrying.responses.create(model="sim", input="[[fail 500]] again", metadata={"attempt": tag})
    assert _failed_with(url, tag) == 1, "asked once, stored failed once"


def _failed_with(url: str, tag: str) -> int:
    """Failed responses whose metadata carries ``tag``, among the newest 100 (ids sort by time)."""
    page = httpx.get(f"{url}/v1/responses", params={"limit": 100, "order": "desc"}).json()
    return sum(r["status"] == "failed" and (r.get("metadata") or {}).get("attempt") == tag for r in page["data"])


def test_failed_stream_ends_with_response_failed(url):
    with httpx.stream("POST", f"{url}/v1/responses", json={"model": "sim", "input": "[[fail 500]]", "stream": True}) as r:
        assert r.status_code == 200
        body = r.read().decode()
    events = [json.loads(f.split("data: ", 1)[1]) for f in body.split("\n\n") if f.startswith("event:")]
    assert events[-1]["type"] == "response.failed"
    assert body.endswith("data: [DONE]\n\n")


_BAD_IMAGE = [{"role": "user", "content": [
    {"type": "input_text", "text": "what is in this picture?"},
    {"type": "input_image", "image_url": "data:image/png;base64,not base64!", "detail": "auto"},
]}]


def test_an_upstream_400_keeps_its_status_and_code(client):
    # The model server refuses the malformed data URL with 400 invalid_base64: the client
    # is told so, not that the server failed.
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="sim", input=_BAD_IMAGE)
    assert err.value.code == "invalid_base64_image"  # its twin in the SDK's closed enum
    assert err.value.type == "invalid_request_error"
    assert "upstream status 400, code invalid_base64" in err.value.message


def test_an_upstream_400_ends_a_stream_with_its_code(client):
    events = list(client.responses.create(model="sim", input=_BAD_IMAGE, stream=True))
    types = [e.type for e in events]
    assert types[-2:] == ["error", "response.failed"]
    assert events[-2].code == "invalid_base64_image"
    assert events[-1].response.error.code == "invalid_base64_image"
    stored = client.responses.retrieve(events[-1].response.id)
    assert stored.status == "failed" and stored.error.code == "invalid_base64_image"


# -- query parameters ----------------------------------------------------------------
# A malformed boolean, integer, number or enum in the query string answers 400 naming the
# parameter, on every route that takes one. Sent as a client would: through the openai SDK
# (its extra_query carries the raw value), or httpx for the routes the SDK has no method for.
# The ids need not exist: parameters are checked before anything is looked up.

BAD_BOOLEANS = ("maybe", "yes", "1", "")
BAD_INTEGERS = ("abc", "1.0", "+1", "1_0", "")
BAD_ORDERS = ("up", "")
BAD_NUMBERS = ("nan", "inf", "abc")
_ITEMS = {"limit": BAD_INTEGERS, "order": BAD_ORDERS}
QUERY_ROUTES: dict[str, tuple[Any, dict[str, tuple[str, ...]]]] = {
    "responses.retrieve": (
        lambda c, q: c.responses.retrieve("resp_0123456789abcdef", extra_query=q),
        {"stream": BAD_BOOLEANS, "include_obfuscation": BAD_BOOLEANS, "starting_after": BAD_INTEGERS},
    ),
    "GET /v1/responses": (lambda c, q: c.get("/responses", cast_to=object, options={"params": q}), _ITEMS),
    "responses.input_items.list": (lambda c, q: c.responses.input_items.list("resp_0123456789abcdef", extra_query=q),
                                   _ITEMS),
    "conversations.items.list": (lambda c, q: c.conversations.items.list("conv_0123456789abcdef", extra_query=q),
                                 _ITEMS),
    "files.list": (lambda c, q: c.files.list(extra_query=q), _ITEMS),
    "vector_stores.list": (lambda c, q: c.vector_stores.list(extra_query=q), _ITEMS),
    "vector_stores.files.list": (lambda c, q: c.vector_stores.files.list("vs_0123456789abcdef", extra_query=q),
                                 {**_ITEMS, "filter": ("done", "")}),
    "vector_stores.file_batches.list_files": (
        lambda c, q: c.vector_stores.file_batches.list_files("vsfb_0123", vector_store_id="vs_0123", extra_query=q),
        {**_ITEMS, "filter": ("done", "")},
    ),
    "console responses": (
        lambda c, q: c.get("/troupe/console/responses", cast_to=object, options={"params": q}),
        {"limit": BAD_INTEGERS, "since": BAD_NUMBERS, "until": BAD_NUMBERS, "status": ("done", "Completed")},
    ),
    "console thread": (lambda c, q: c.get("/troupe/console/threads/thread_1", cast_to=object, options={"params": q}),
                       {"limit": BAD_INTEGERS}),
    "console stats": (lambda c, q: c.get("/troupe/console/stats", cast_to=object, options={"params": q}),
                      {"window_s": BAD_NUMBERS}),
}  # fmt: skip
BAD_QUERIES = [(route, param, value) for route, (_, params) in QUERY_ROUTES.items()
               for param, values in params.items() for value in values]  # fmt: skip


@pytest.fixture(params=["local", "replica"])
def query_client(request) -> OpenAI:
    """The in-process app and the Ray Serve one (the query parsing is the HTTP layer's, the
    same in every placement); servers shared with the rest of the suite."""
    url = request.getfixturevalue("local_url") if request.param == "local" else request.getfixturevalue("troupe_apps")["replica"]
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


@pytest.mark.parametrize(("route", "param", "value"), BAD_QUERIES, ids=[f"{r}-{p}={v!r}" for r, p, v in BAD_QUERIES])
def test_a_malformed_query_parameter_is_a_400_naming_it(query_client, route, param, value):
    call, _ = QUERY_ROUTES[route]
    with pytest.raises(openai.BadRequestError) as err:
        call(query_client, {param: value})
    assert err.value.status_code == 400
    assert (err.value.body["type"], err.value.param, err.value.code) == ("invalid_request_error", param, "invalid_value")
    assert f"'{param}'" in err.value.message and f"'{value}'" in err.value.message
    assert err.value.response.headers["x-should-retry"] == "false"


def test_a_query_parameter_sent_twice_is_a_400_naming_it(query_client):
    done = query_client.responses.create(model="sim", input="[[say hi]]")
    url = f"{query_client.base_url}responses/{done.id}"
    for query, param in [("stream=false&stream=maybe", "stream"), ("stream=true&stream=true", "stream"),
                         ("starting_after=1&stream=false&starting_after=2", "starting_after")]:  # fmt: skip
        r = httpx.get(f"{url}?{query}")  # the SDK never repeats one: raw HTTP
        assert (r.status_code, r.json()["error"]["param"]) == (400, param), query
        assert "sent more than once" in r.json()["error"]["message"]
    r = httpx.get(f"{query_client.base_url}responses?limit=2&limit=3")
    assert (r.status_code, r.json()["error"]["param"]) == (400, "limit")


def test_well_formed_query_parameters_are_read_as_before(query_client):
    done = query_client.responses.create(model="sim", input="[[say hi]]")
    for stream in ("true", "True", "TRUE"):
        events = list(query_client.responses.retrieve(done.id, stream=True, extra_query={"stream": stream}))
        assert events[-1].type == "response.completed"
    assert query_client.responses.retrieve(done.id, extra_query={"stream": "false"}).id == done.id
    tail = list(query_client.responses.retrieve(done.id, stream=True, starting_after=-1, include_obfuscation=False))
    assert [e.sequence_number for e in tail] == list(range(len(tail)))
    page = query_client.get("/responses", cast_to=object, options={"params": {"limit": "1", "order": "asc"}})
    assert len(page["data"]) == 1  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as err:
        query_client.responses.input_items.list(done.id, limit=0)
    assert (err.value.param, err.value.code) == ("limit", "integer_below_min_value")
    assert err.value.body["message"] == "Invalid 'limit': integer below minimum value. Expected a value >= 1, but got 0 instead."


def test_authentication_comes_before_a_malformed_query_parameter(keyed_url):
    anonymous = OpenAI(base_url=f"{keyed_url}/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        anonymous.responses.retrieve("resp_0123456789abcdef", extra_query={"stream": "maybe"})
    r = httpx.get(f"{keyed_url}/v1/responses/resp_0123456789abcdef?stream=true&stream=true")
    assert r.status_code == 401
    with pytest.raises(openai.BadRequestError) as err:
        keyed(keyed_url, "sk-alice").responses.retrieve("resp_0123456789abcdef", extra_query={"stream": "maybe"})
    assert err.value.param == "stream"


# -- SSE framing ---------------------------------------------------------------------


def test_raw_sse_framing(url):
    body = {"model": "sim", "input": "[[think hmm]] [[say framed text]]", "stream": True}
    # The Agents SDK sends Accept: application/json with "stream": true; the body decides.
    with httpx.stream("POST", f"{url}/v1/responses", json=body, headers={"Accept": "application/json"},
                      timeout=30) as r:  # a dedicated conversation starts a process first
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["cache-control"] == "no-cache"
        assert r.headers["x-accel-buffering"] == "no"
        raw = r.read()
    text = raw.decode()
    assert "\r" not in text, "LF line endings only"
    assert text.endswith("\n\n")
    frames = text[:-2].split("\n\n")
    assert frames[-1] == "data: [DONE]"
    sequence = []
    for frame in frames[:-1]:
        lines = frame.split("\n")
        assert len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: "), frame
        event = json.loads(lines[1][len("data: ") :])
        assert lines[0][len("event: ") :] == event["type"]
        sequence.append(event["sequence_number"])
    assert sequence == list(range(len(sequence)))
    assert json.loads(frames[-2].split("data: ", 1)[1])["type"] == "response.completed"


def test_non_stream_ignores_accept_event_stream(url):
    r = httpx.post(f"{url}/v1/responses", json={"model": "sim", "input": "[[say json]]"},
                   headers={"Accept": "text/event-stream"})
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["output"][0]["content"][0]["text"] == "json"


# -- auth and tenants ----------------------------------------------------------------


def test_missing_or_bad_key_is_401(keyed_url):
    r = httpx.post(f"{keyed_url}/v1/responses", json={"model": "sim", "input": "x"})
    assert r.status_code == 401 and r.headers["x-should-retry"] == "false"
    assert r.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        keyed(keyed_url, "sk-wrong").responses.create(model="sim", input="x")
    with pytest.raises(openai.AuthenticationError):
        keyed(keyed_url, "sk-wrong").models.list()
    r = httpx.get(f"{keyed_url}/v1/responses", params={"limit": 0})
    assert r.status_code == 401, "authentication comes before parameter validation"
    assert httpx.get(f"{keyed_url}/health").status_code == 200, "health needs no key"


def test_tenants_are_isolated(keyed_url):
    alice, bob = keyed(keyed_url, "sk-alice"), keyed(keyed_url, "sk-bob")
    mine = alice.responses.create(model="sim", input="[[say secret]]")
    assert alice.responses.retrieve(mine.id).id == mine.id
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.input_items.list(mine.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.delete(mine.id)
    with pytest.raises(openai.BadRequestError) as err:  # the same answer as an id that exists nowhere
        bob.responses.create(model="sim", input="x", previous_response_id=mine.id)
    assert err.value.code == "previous_response_not_found"
    conv = alice.conversations.create()
    with pytest.raises(openai.NotFoundError):
        bob.conversations.retrieve(conv.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.create(model="sim", input="x", conversation=conv.id)
    headers = {"Authorization": "Bearer sk-bob"}
    listed = httpx.get(f"{keyed_url}/v1/responses", headers=headers).json()
    assert mine.id not in [r["id"] for r in listed["data"]]
    assert alice.responses.retrieve(mine.id).output_text == "secret", "bob's attempts changed nothing"


# -- disconnects ---------------------------------------------------------------------


class _EndlessRuntime:
    """Just enough of a Runtime: a stream that never ends, and records being closed."""

    def __init__(self) -> None:
        self.closed = False
        self.sent = 0

    async def stream(self, tenant: str, request: Any, *, trace: Any = None) -> Any:
        async def batches() -> Any:
            try:
                while True:
                    self.sent += 1
                    yield [{"type": "response.in_progress", "sequence_number": self.sent}]
                    await asyncio.sleep(0.01)
            finally:
                self.closed = True

        return batches()


def test_client_disconnect_closes_the_runtime_stream():
    runtime = _EndlessRuntime()
    with serve_app(create_app(lambda: runtime, ServerSettings())) as base:  # type: ignore[arg-type,return-value]
        with httpx.stream("POST", f"{base}/v1/responses", json={"model": "sim", "input": "x", "stream": True}) as r:
            for _ in r.iter_raw():
                break
        wait_for(lambda: runtime.closed, timeout_s=10, what="the runtime's iterator closed")
