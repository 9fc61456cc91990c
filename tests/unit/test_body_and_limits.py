"""Strict JSON bodies (``troupe.protocol.body``) and the limits of ``troupe.serve.limits``, with plain values."""

from __future__ import annotations

import asyncio

import pytest

from troupe.protocol import InvalidRequest, dangling_refs, decode_json_body
from troupe.serve.limits import Admission, RateLimited, TenantLimits
from troupe.sim.schema import SchemaError, generate_from_schema

# -- bodies -------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ['{"a": NaN}', '[Infinity]', '{"a": {"b": -Infinity}}'])
def test_nan_and_infinity_are_refused(raw):
    with pytest.raises(InvalidRequest) as info:
        decode_json_body(raw)
    assert info.value.code == "invalid_json" and info.value.status == 400


@pytest.mark.parametrize(("raw", "param"), [
    ('{"input": "\\ud800"}', "input"),
    ('{"input": [{"content": [{"text": "a\\udfffb"}]}]}', "input[0].content[0].text"),
    ('["\\ud800"]', "[0]"),
])
def test_a_lone_surrogate_is_refused_naming_where(raw, param):
    with pytest.raises(InvalidRequest) as info:
        decode_json_body(raw)
    assert (info.value.param, info.value.code) == (param, "invalid_value")


def test_a_lone_surrogate_in_a_key_names_the_object():
    with pytest.raises(InvalidRequest) as info:
        decode_json_body('{"metadata": {"\\ud800": "v"}}')
    assert info.value.param == "metadata" and "a key of 'metadata'" in info.value.message


def test_paired_surrogates_and_other_unicode_pass():
    assert decode_json_body('{"t": "\\ud83d\\ude00 é 中"}') == {"t": "\U0001f600 é 中"}


def test_nesting_is_bounded_and_named():
    assert decode_json_body("[" * 5 + "]" * 5, max_depth=5) == [[[[[]]]]]
    with pytest.raises(InvalidRequest) as info:
        decode_json_body('{"a": [[{"b": []}]]}', max_depth=4)
    assert (info.value.param, info.value.code) == ("a[0][0].b", "nesting_too_deep")


def test_nesting_past_the_interpreters_limit_is_a_400_not_a_recursion_error():
    with pytest.raises(InvalidRequest) as info:
        decode_json_body("[" * 100_000 + "]" * 100_000)
    assert info.value.code == "nesting_too_deep"


@pytest.mark.parametrize("raw", [b"{", b"\xff\xfe", b"", b"{'a': 1}"])
def test_what_is_not_json_is_invalid_json(raw):
    with pytest.raises(InvalidRequest) as info:
        decode_json_body(raw)
    assert info.value.code == "invalid_json"


# -- schemas ------------------------------------------------------------------------------


def test_dangling_refs_are_found_and_good_ones_are_not():
    schema = {"$defs": {"a": {"type": "string"}, "b~/c": {"type": "integer"}},
              "properties": {"x": {"$ref": "#/$defs/a"}, "y": {"$ref": "#/$defs/b~0~1c"}, "z": {"$ref": "#/$defs/q"},
                             "w": {"items": [{"$ref": "#/properties/x"}, {"$ref": "other.json"}]}}}
    assert sorted(dangling_refs(schema)) == ["#/$defs/q", "other.json"]


@pytest.mark.parametrize("schema", [
    {"$ref": "#"},
    {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]},
    {"type": "object", "properties": {"x": {"$ref": "#/$defs/nope"}}},
])
def test_the_sim_refuses_a_schema_it_cannot_fill(schema):
    with pytest.raises(SchemaError):
        generate_from_schema(schema)


def test_the_sim_fills_a_recursive_schema_that_has_a_finite_value():
    tree = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}, "required": ["kids"]}
    value = generate_from_schema(tree)
    depth = 0
    while value["kids"]:
        value, depth = value["kids"][0], depth + 1
    assert 0 < depth < 64


# -- limits -------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_requests_per_minute_refill_continuously():
    clock = Clock()
    limits = TenantLimits(requests_per_minute=2, clock=clock)
    limits.check_request("a")
    limits.check_request("a")
    with pytest.raises(RateLimited) as info:
        limits.check_request("a")
    assert info.value.status == 429 and info.value.retry_after_header == "30"
    limits.check_request("b")  # another tenant's bucket
    clock.now = 30.0
    limits.check_request("a")  # one request's worth refilled


def test_concurrent_streams_per_tenant_and_idempotent_release():
    limits = TenantLimits(max_streams=1)
    close = limits.open_stream("a")
    with pytest.raises(RateLimited):
        limits.open_stream("a")
    close()
    close()  # a second close changes nothing
    limits.open_stream("a")
    with pytest.raises(RateLimited):
        limits.open_stream("a")


def test_limits_off_by_default():
    limits = TenantLimits()
    for _ in range(1000):
        limits.check_request("a")
        limits.open_stream("a")


async def test_admission_runs_at_most_max_active_and_queues_a_bounded_few():
    admission = Admission(max_active=2, max_waiting=1, max_wait_s=5.0)
    release = asyncio.Event()
    running = []

    async def job(i: int) -> str:
        try:
            async with admission.slot():
                running.append(i)
                await release.wait()
                return "ran"
        except RateLimited:
            return "refused"

    tasks = [asyncio.create_task(job(i)) for i in range(5)]
    while admission.active + admission.waiting + admission.refused < 5:
        await asyncio.sleep(0)
    assert (admission.active, admission.waiting, admission.refused) == (2, 1, 2)
    assert max(admission.active, len(running)) == 2
    release.set()
    results = await asyncio.gather(*tasks)
    assert sorted(results) == ["ran", "ran", "ran", "refused", "refused"]
    assert admission.active == 0 and admission.waiting == 0


async def test_a_waiter_is_refused_when_no_slot_frees_in_time():
    admission = Admission(max_active=1, max_waiting=4, max_wait_s=0.05)
    hold = asyncio.Event()

    async def holder() -> None:
        async with admission.slot():
            await hold.wait()

    task = asyncio.create_task(holder())
    while not admission.active:
        await asyncio.sleep(0)
    with pytest.raises(RateLimited) as info:
        async with admission.slot():
            pass
    assert "within 0.05 s" in info.value.message and admission.waiting == 0
    hold.set()
    await task
    async with admission.slot():  # free again
        assert admission.active == 1
