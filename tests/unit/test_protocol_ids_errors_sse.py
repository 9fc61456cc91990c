"""Ids (unique, time-ordered), the error tree (body shape, pickling), SSE framing."""

from __future__ import annotations

import json
import os
import pickle
import re
import threading
import time

import pytest

from troupe.protocol import (
    SSE_DONE,
    AuthenticationFailed,
    InvalidRequest,
    NotFound,
    ProtocolError,
    ServerError,
    encode_sse,
    failed_response_error,
    ids,
    new_id,
)

# --- ids -------------------------------------------------------------------


def test_id_shape() -> None:
    rid = new_id("resp")
    assert re.fullmatch(r"resp_[0-9a-hjkmnp-tv-z]{26}", rid), rid


@pytest.mark.parametrize("prefix", ["resp", "msg", "fc", "call", "fco", "mcp", "mcpl", "mcpr", "mcpa", "conv", "rs"])
def test_documented_prefixes(prefix: str) -> None:
    assert new_id(prefix).startswith(prefix + "_")
    assert prefix in {v for k, v in vars(ids).items() if k.isupper() and isinstance(v, str)}


@pytest.mark.parametrize("prefix", ["", "has_underscore"])
def test_bad_prefix(prefix: str) -> None:
    with pytest.raises(ValueError):
        new_id(prefix)


@pytest.mark.parametrize("kind", ["thread", "conv"])
def test_a_response_id_names_its_thread_and_still_sorts_by_creation(kind: str) -> None:
    thread = new_id(kind)
    first, second = ids.new_response_id(thread), ids.new_response_id(thread)
    assert re.fullmatch(r"resp_[0-9a-hjkmnp-tv-z]{26}[tc][0-9a-hjkmnp-tv-z]{26}", first), first
    assert ids.thread_of_response(first) == ids.thread_of_response(second) == thread
    assert first < second < ids.new_response_id(new_id(kind)), "time-ordered, whatever the thread"


@pytest.mark.parametrize(
    "response_id",
    [
        new_id("resp"),  # the plain shape: an older response, or one made outside a thread
        "resp_" + "0" * 26 + "x" + "0" * 26,  # an unknown thread kind
        "resp_" + "0" * 26 + "t" + "0" * 25 + "U",  # outside the alphabet
        "msg_" + "0" * 53,
        "resp_short",
    ],
    ids=["plain", "unknown-kind", "outside-alphabet", "not-a-response", "short"],  # one collection everywhere
)
def test_ids_that_name_no_thread(response_id: str) -> None:
    assert ids.thread_of_response(response_id) is None


def test_a_thread_id_of_another_shape_gives_a_plain_response_id() -> None:
    rid = ids.new_response_id("conv_made-elsewhere")
    assert re.fullmatch(r"resp_[0-9a-hjkmnp-tv-z]{26}", rid) and ids.thread_of_response(rid) is None


def test_rapid_ids_are_unique_and_sorted() -> None:
    # 20k ids take a few ms: many share a millisecond, so the counter is exercised.
    made = [new_id("msg") for _ in range(20_000)]
    assert made == sorted(made)
    assert len(set(made)) == len(made)


def test_ids_sorted_across_threads() -> None:
    # Each thread records (id, global order) under one lock; sorting by id must
    # reproduce the order in which the ids were handed out.
    lock = threading.Lock()
    log: list[str] = []
    start = threading.Barrier(8)

    def worker() -> None:
        start.wait()
        for _ in range(2_000):
            with lock:
                log.append(new_id("resp"))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(log)) == len(log) == 16_000
    assert log == sorted(log)


def test_ids_unique_across_threads_without_outer_lock() -> None:
    per_thread: list[list[str]] = [[] for _ in range(8)]

    def worker(out: list[str]) -> None:
        out.extend(new_id("fc") for _ in range(2_000))

    threads = [threading.Thread(target=worker, args=(out,)) for out in per_thread]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [i for out in per_thread for i in out]
    assert len(set(everything)) == len(everything)
    for out in per_thread:  # each thread's own sequence is increasing
        assert out == sorted(out)


def test_clock_stepping_back_keeps_order(monkeypatch: pytest.MonkeyPatch) -> None:
    first = new_id("resp")
    monkeypatch.setattr(ids.time, "time_ns", lambda: 0)
    assert new_id("resp") > first


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_mint_the_ids_its_parent_mints_next(monkeypatch: pytest.MonkeyPatch) -> None:
    new_id("resp")  # the random pool holds bytes the parent has not used yet
    # Both processes mint their next id in one fresh millisecond: each draws new random bits.
    later = (time.time_ns() // 1_000_000 + 60_000) * 1_000_000
    monkeypatch.setattr(ids.time, "time_ns", lambda: later)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its id and leave at once (no pytest teardown here)
        os.write(write, new_id("resp").encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 100).decode()
    os.close(read)
    parent = new_id("resp")
    assert child.startswith("resp_") and parent.startswith("resp_")
    assert child != parent


# --- errors ----------------------------------------------------------------

ERRORS = [
    (InvalidRequest("bad", param="temperature", code="invalid_value"), 400, "invalid_request_error", "invalid_value"),
    (AuthenticationFailed("no key"), 401, "invalid_request_error", "invalid_api_key"),
    (NotFound("gone"), 404, "invalid_request_error", "not_found"),
    (NotFound("gone", code="previous_response_not_found"), 404, "invalid_request_error",
     "previous_response_not_found"),
    (ServerError("boom"), 500, "server_error", None),
]


@pytest.mark.parametrize(("err", "status", "kind", "code"), ERRORS)
def test_error_defaults_and_body(err: ProtocolError, status: int, kind: str, code: str | None) -> None:
    assert isinstance(err, ProtocolError)
    assert err.status == status
    body = err.to_body()
    assert body == {"error": {"message": err.message, "type": kind, "param": err.param, "code": code}}
    json.dumps(body)


@pytest.mark.parametrize(("err", "status", "kind", "code"), ERRORS)
def test_errors_pickle_with_all_attributes(err: ProtocolError, status: int, kind: str, code: str | None) -> None:
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert (back.message, back.type, back.param, back.code, back.status) == (
        err.message, err.type, err.param, err.code, err.status)
    assert str(back) == str(err)


def test_error_overrides() -> None:
    err = ProtocolError("x", type="rate_limit_error", code="rate_limit_exceeded", status=429, param="p")
    assert (err.status, err.type, err.code, err.param) == (429, "rate_limit_error", "rate_limit_exceeded", "p")
    assert pickle.loads(pickle.dumps(err)).status == 429


def test_errors_chain_through_raise_from() -> None:
    with pytest.raises(ServerError) as info:
        try:
            raise KeyError("k")
        except KeyError as exc:
            raise ServerError("lookup failed") from exc
    assert isinstance(info.value.__cause__, KeyError)


# --- SSE -------------------------------------------------------------------


def test_sse_frame() -> None:
    event = {"type": "response.output_text.delta", "sequence_number": 3, "delta": "a\nb \u00e9", "item_id": "msg_1"}
    frame = encode_sse(event)
    assert frame.endswith(b"\n\n") and b"\r" not in frame
    head, data, blank = frame.decode().split("\n", 2)
    assert head == "event: response.output_text.delta"
    assert data.startswith("data: ") and blank == "\n"
    assert json.loads(data.removeprefix("data: ")) == event
    assert ": " not in data.removeprefix("data: ") and ", " not in data  # compact


def test_sse_event_equals_type_for_every_frame() -> None:
    for kind in ["response.created", "response.completed", "error"]:
        frame = encode_sse({"type": kind, "sequence_number": 0}).decode()
        assert frame.count("\n") == 3
        assert frame.splitlines()[0] == f"event: {kind}"


@pytest.mark.parametrize("event", [{}, {"type": 3}, {"type": "a\nb"}])
def test_sse_needs_a_type(event: dict) -> None:
    with pytest.raises(ValueError):
        encode_sse(event)


def test_sse_done() -> None:
    assert SSE_DONE == b"data: [DONE]\n\n"


@pytest.mark.parametrize(
    ("error", "status", "type_", "code"),
    [
        ({"code": "rate_limit_exceeded", "message": "slow down"}, 429, "rate_limit_error", "rate_limit_exceeded"),
        ({"code": "server_error", "message": "boom"}, 500, "server_error", "server_error"),
        (None, 500, "server_error", "server_error"),
        ({"code": "external_connector_error", "message": "401"}, 424, "external_connector_error",
         "external_connector_error"),
        ({"code": "invalid_base64", "message": "bad image", "param": "input"}, 400, "invalid_request_error",
         "invalid_base64"),
    ],
)
def test_a_failed_response_answers_the_status_its_code_names(error, status, type_, code):
    exc = failed_response_error(error)
    body = exc.to_body()["error"]
    assert (exc.status, body["type"], body["code"]) == (status, type_, code)
    assert body["message"] == (error or {}).get("message", "The response failed.")
