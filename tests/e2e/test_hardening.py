"""Bad input gets a clear 4xx and harms nothing; overload gets 429 with Retry-After.

Each test is the request a user would send and the answer they get, through the ``openai``
SDK or raw ``httpx`` where the SDK cannot send the body (NaN, lone surrogates, deep nesting).
The 4xx tests run on the in-process app and on the pooled Ray Serve deployment; the limits
tests on small local servers configured for them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import openai
import pytest
from openai import OpenAI

from tests.servers import served_local
from troupe.serve.config import ServerSettings

DEEP_OBJECT = {"type": "object", "properties": {}}


@pytest.fixture(params=["local", "replica"])
def root(request) -> str:
    if request.param == "local":
        return request.getfixturevalue("local_url")
    return request.getfixturevalue("troupe_apps")[request.param]


def post(root: str, path: str, raw: str | bytes) -> httpx.Response:
    return httpx.post(f"{root}/v1{path}", content=raw, headers={"Content-Type": "application/json"}, timeout=30)


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


# -- 9: NaN / Infinity --------------------------------------------------------------------


@pytest.mark.parametrize("raw", [
    '{"model": "sim", "input": "x", "tools": [{"type": "function", "name": "f", "parameters": {"maximum": NaN}}]}',
    '{"model": "sim", "input": "x", "text": {"format": {"type": "json_schema", "name": "s", '
    '"schema": {"type": "number", "minimum": -Infinity}}}}',
    '{"model": "sim", "input": "x", "temperature": Infinity}',
])
def test_nan_and_infinity_are_a_400_not_a_500(root, raw):
    r = post(root, "/responses", raw)
    assert r.status_code == 400
    error = error_of(r)
    assert error["code"] == "invalid_json" and "NaN or Infinity" in error["message"]


def test_nan_in_conversation_items_is_a_400(root):
    conversation = httpx.post(f"{root}/v1/conversations", json={}).json()
    raw = '{"items": [{"type": "function_call_output", "call_id": "c", "output": NaN}]}'
    r = post(root, f"/conversations/{conversation['id']}/items", raw)
    assert r.status_code == 400 and error_of(r)["code"] == "invalid_json"
    assert httpx.get(f"{root}/v1/conversations/{conversation['id']}/items").json()["data"] == []


# -- 10: lone surrogates ------------------------------------------------------------------


@pytest.mark.parametrize(("body", "param"), [
    ('{"model": "sim", "input": "hi \\ud800"}', "input"),
    ('{"model": "sim", "input": [{"role": "user", "content": [{"type": "input_text", "text": "\\udfff"}]}]}',
     "input[0].content[0].text"),
    ('{"model": "sim", "input": "x", "instructions": "be \\ud800 brief"}', "instructions"),
    ('{"model": "sim", "input": "x", "metadata": {"k": "\\ud800"}}', "metadata.k"),
    ('{"model": "sim\\ud800", "input": "x"}', "model"),
])
def test_lone_surrogates_are_a_400_naming_the_field(root, body, param):
    r = post(root, "/responses", body)
    assert r.status_code == 400
    error = error_of(r)
    assert (error["param"], error["code"]) == (param, "invalid_value")
    assert "surrogate" in error["message"]


def test_lone_surrogates_in_conversation_items_are_a_400(root):
    r = post(root, "/conversations", '{"items": [{"role": "user", "content": "\\ud83d"}]}')
    assert r.status_code == 400 and error_of(r)["param"] == "items[0].content"


def test_a_paired_surrogate_is_just_an_emoji(root):
    client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
    r = post(root, "/responses", '{"model": "sim", "input": "[[say ok \\ud83d\\ude00]]"}')
    assert r.status_code == 200
    assert client.responses.retrieve(r.json()["id"]).output_text == "ok \U0001f600"


# -- 11: nesting and size -----------------------------------------------------------------


def nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


def test_a_body_nested_ten_thousand_deep_is_a_400(root):
    r = post(root, "/responses", '{"model": "sim", "input": ' + "[" * 10_000 + "]" * 10_000 + "}")
    assert r.status_code == 400
    assert error_of(r)["code"] == "nesting_too_deep"


def test_tool_parameters_nested_900_deep_are_a_400_naming_where(root):
    parameters = '{"type": "array", "items": ' * 900 + '{"type": "string"}' + "}" * 900
    r = post(root, "/responses", '{"model": "sim", "input": "x", "tools": [{"type": "function", "name": "f", '
             f'"parameters": {parameters}}}]}}')
    assert r.status_code == 400
    error = error_of(r)
    assert error["code"] == "nesting_too_deep" and error["param"].startswith("tools[0].parameters.items")


def test_nesting_within_the_limit_is_served(root):
    client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
    tool = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"x": nested(20)}}}
    assert client.responses.create(model="sim", input="[[say fine]]", tools=[tool]).output_text == "fine"


# -- 12: the sim and bad $refs ------------------------------------------------------------


def test_a_dangling_ref_in_a_json_schema_is_a_400_naming_it(root):
    client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="sim", input="x", text={"format": {"type": "json_schema", "name": "s",
                                                                          "schema": schema}})
    assert err.value.param == "text.format.schema" and "#/$defs/missing" in err.value.message


def test_a_schema_with_no_finite_value_is_a_400_naming_it(root):
    client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
    endless = {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="sim", input="x", text={"format": {"type": "json_schema", "name": "s",
                                                                          "schema": endless}})
    assert err.value.param == "text.format.schema"
    assert "no finite value" in err.value.message


def test_a_recursive_schema_with_a_finite_value_is_answered(root):
    client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
    tree = {"type": "object", "properties": {"name": {"type": "string"}, "children": {"type": "array",
            "items": {"$ref": "#"}}}, "required": ["name", "children"]}
    response = client.responses.create(model="sim", input="x", text={"format": {"type": "json_schema", "name": "t",
                                                                                 "schema": tree}})
    assert json.loads(response.output_text)["name"] == "example"


def test_a_schema_asking_for_100_mb_is_an_incomplete_answer_and_harms_no_other_request(root):
    """The sim's output cap (troupe.sim.model.MAX_OUTPUT_CHARS): four such requests at once
    and a plain one all answer, and listing stored responses still works after them."""
    huge = {"type": "object", "properties": {"blob": {"type": "string", "minLength": 100_000_000}},
            "required": ["blob"]}  # fmt: skip
    fmt = {"format": {"type": "json_schema", "name": "huge", "schema": huge}}

    async def answers() -> list:
        aclient = openai.AsyncOpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0, timeout=60)
        async with aclient:
            big = [aclient.responses.create(model="sim", input="x", text=fmt) for _ in range(4)]
            return await asyncio.gather(*big, aclient.responses.create(model="sim", input="[[say small]]"))

    *capped, small = asyncio.run(answers())
    assert small.output_text == "small"
    for response in capped:
        assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
        assert len(response.output_text) <= 1 << 20
    listed = httpx.get(f"{root}/v1/responses", params={"limit": 100, "order": "desc"}, timeout=60)
    assert listed.status_code == 200 and capped[0].id in {r["id"] for r in listed.json()["data"]}


# -- 6: max_tool_calls ----------------------------------------------------------------------


def test_calls_past_max_tool_calls_are_ignored(root):
    client = OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
    calls = " ".join(f'[[call calculator {{"expression": "{n} + {n}"}}]]' for n in (1, 2, 3))
    response = client.responses.create(model="sim", input=calls, max_tool_calls=2)
    kinds = [item.type for item in response.output]
    assert kinds == ["function_call", "function_call", "function_call_output", "function_call_output", "message"]
    assert response.output_text.splitlines() == ["calculator -> 2", "calculator -> 4"]


# -- bad requests beside good ones ------------------------------------------------------------


BAD_BODIES = [
    '{"model": "sim", "input": "\\ud800"}',
    '{"model": "sim", "input": "x", "tools": [{"type": "function", "name": "f", "parameters": {"m": NaN}}]}',
    '{"model": "sim", "input": ' + "[" * 5000 + "]" * 5000 + "}",
    '{"model": "sim", "input": "x", "max_output_tokens": 3}',
]


async def test_bad_requests_mixed_into_good_ones_harm_none_of_them(root):
    async with httpx.AsyncClient(base_url=f"{root}/v1", timeout=60) as http:
        async def good(i: int) -> httpx.Response:
            return await http.post("/responses", json={"model": "sim", "input": f"[[say good {i}]]"})

        async def bad(i: int) -> httpx.Response:
            return await http.post("/responses", content=BAD_BODIES[i % len(BAD_BODIES)],
                                   headers={"Content-Type": "application/json"})

        answers = await asyncio.gather(*(f(i) for i in range(40) for f in (good, bad)))
        goods, bads = answers[0::2], answers[1::2]
        assert [r.status_code for r in bads] == [400] * 40
        assert [r.status_code for r in goods] == [200] * 40
        for i, r in enumerate(goods):
            stored = (await http.get(f"/responses/{r.json()['id']}")).json()
            assert stored["output"][0]["content"][0]["text"] == f"good {i}"


# -- limits -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_url() -> Iterator[str]:
    """A server with tiny limits, to reach them with a handful of requests."""
    yield from served_local(ServerSettings(
        max_body_bytes=4096, max_active_responses=2, max_waiting_responses=1, max_wait_s=0.2,
        tenant_requests_per_minute=0, stream_stall_timeout_s=60.0,
    ))


def test_a_body_over_the_limit_is_a_413(small_url):
    client = OpenAI(base_url=f"{small_url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.APIStatusError) as err:
        client.responses.create(model="sim", input="x" * 5000)
    assert err.value.status_code == 413
    assert err.value.code == "request_too_large" and "4096 bytes" in err.value.message
    assert client.responses.create(model="sim", input="[[say small]]").output_text == "small"


async def test_overload_is_answered_429_with_retry_after_and_admitted_requests_finish(small_url):
    slow = {"model": "sim", "input": "[[latency ttft=300]] [[say slow]]"}
    async with httpx.AsyncClient(base_url=f"{small_url}/v1", timeout=30) as http:
        answers = await asyncio.gather(*(http.post("/responses", json=slow) for _ in range(8)))
    codes = sorted(r.status_code for r in answers)
    # Two run, one may wait its 0.2 s (then run or be refused), the rest are refused at once.
    assert codes.count(200) >= 2 and codes.count(429) >= 5 and set(codes) <= {200, 429}
    for r in answers:
        if r.status_code == 429:
            assert error_of(r)["code"] == "rate_limit_exceeded"
            assert int(r.headers["retry-after"]) >= 1
            assert "x-should-retry" not in r.headers
        else:
            assert r.json()["output"][0]["content"][0]["text"] == "slow"


def test_an_sdk_client_refused_with_429_retries_after_retry_after_and_succeeds(small_url):
    # A stream holds its slot until it ends. Both slots are held for 1.5 s, longer than a
    # request may wait (0.2 s), so the request is refused; the SDK honours Retry-After and
    # retries (a 429 carries no x-should-retry: false) until the slots are free.
    client = OpenAI(base_url=f"{small_url}/v1", api_key="unused", max_retries=4)
    streams = [client.responses.create(model="sim", input="[[latency ttft=1500]] [[say held]]", stream=True)
               for _ in range(2)]
    try:
        response = client.responses.create(model="sim", input="[[say after retry]]")
        assert response.output_text == "after retry"
    finally:
        for stream in streams:
            assert [e.type for e in stream][-1] == "response.completed"


@pytest.fixture(scope="module")
def keepalive_url() -> Iterator[str]:
    yield from served_local(ServerSettings(stream_keepalive_s=0.2))


def test_a_silent_stream_sends_keepalive_comments_that_clients_skip(keepalive_url):
    slow = {"model": "sim", "input": "[[latency ttft=1200]] [[say late]]", "stream": True}
    with httpx.stream("POST", f"{keepalive_url}/v1/responses", json=slow, timeout=30) as r:
        lines = list(r.iter_lines())
    first_event = lines.index(next(line for line in lines if line.startswith("event: ")))
    # created and in_progress go out at once; the model then says nothing for 1.2 s.
    assert lines[:first_event] == []
    quiet = lines[lines.index("event: response.in_progress") : lines.index("event: response.output_item.added")]
    assert quiet.count(": keepalive") >= 3, quiet
    assert "data: [DONE]" in lines[-2:]
    # The openai SDK skips SSE comments: the stream reads as usual.
    client = OpenAI(base_url=f"{keepalive_url}/v1", api_key="unused", max_retries=0)
    events = list(client.responses.create(model="sim", input="[[latency ttft=600]] [[say late]]", stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.completed" and events[-1].response.output_text == "late"


def test_keepalive_is_off_at_zero_and_a_busy_stream_sends_none(keepalive_url):
    off = served_local(ServerSettings(stream_keepalive_s=0))
    off_url = next(off)
    try:
        # Off: 0.5 s of silence sends nothing. On (0.2 s): a token every 50 ms is never silent.
        for url, body in ((off_url, "[[latency ttft=500]] [[say x]]"), (keepalive_url, "[[latency itl=50]] [[tokens 20]]")):
            with httpx.stream("POST", f"{url}/v1/responses", json={"model": "sim", "input": body, "stream": True}) as r:
                lines = list(r.iter_lines())
            assert "event: response.completed" in lines and ": keepalive" not in lines
    finally:
        off.close()


@pytest.fixture(scope="module")
def tenant_url() -> Iterator[str]:
    keys = {"sk-a": "alice", "sk-b": "bob"}
    yield from served_local(ServerSettings(api_keys=keys, tenant_requests_per_minute=3, tenant_max_streams=1))


def test_per_tenant_requests_per_minute(tenant_url):
    alice = OpenAI(base_url=f"{tenant_url}/v1", api_key="sk-a", max_retries=0)
    bob = OpenAI(base_url=f"{tenant_url}/v1", api_key="sk-b", max_retries=0)
    for _ in range(3):
        alice.responses.create(model="sim", input="[[say ok]]")
    with pytest.raises(openai.RateLimitError) as err:
        alice.responses.create(model="sim", input="[[say one too many]]")
    assert err.value.code == "rate_limit_exceeded" and "3 requests per minute" in err.value.message
    assert int(err.value.response.headers["retry-after"]) >= 1
    assert bob.responses.create(model="sim", input="[[say mine]]").output_text == "mine", "bob has his own bucket"


def test_per_tenant_concurrent_streams(tenant_url):
    # Bob's bucket may hold one request less after the previous test; he streams once and is refused once.
    bob = OpenAI(base_url=f"{tenant_url}/v1", api_key="sk-b", max_retries=0)
    first = bob.responses.create(model="sim", input="[[latency ttft=300]] [[say first]]", stream=True)
    with pytest.raises(openai.RateLimitError) as err:
        bob.responses.create(model="sim", input="[[say second]]", stream=True)
    assert "concurrent streams" in err.value.message
    assert [e.type for e in first][-1] == "response.completed"


@pytest.fixture(scope="module")
def one_stream_url() -> Iterator[str]:
    yield from served_local(ServerSettings(api_keys={"sk-c": "carol"}, tenant_max_streams=1))


def test_a_background_stream_refused_at_the_stream_limit_starts_nothing(one_stream_url):
    carol = OpenAI(base_url=f"{one_stream_url}/v1", api_key="sk-c", max_retries=0)
    first = carol.responses.create(model="sim", input="[[latency ttft=300]] [[say first]]", stream=True)
    with pytest.raises(openai.RateLimitError):
        carol.responses.create(model="sim", input="[[say never]]", stream=True, background=True)
    assert [e.type for e in first][-1] == "response.completed"
    # A run started before the refusal would have ended long before the 300 ms stream did.
    assert [r["output"][-1]["content"][0]["text"] for r in httpx.get(
        f"{one_stream_url}/v1/responses", headers={"Authorization": "Bearer sk-c"}).json()["data"]] == ["first"]
