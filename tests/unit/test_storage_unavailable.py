"""The store out of reach for a moment (the storage actor restarting) answers 503
``storage_unavailable`` with ``Retry-After``: retried by the SDK for a read, not for a write."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from openai import APIStatusError, OpenAI

from troupe.serve.errors import install_error_handlers
from troupe.storage.base import StorageUnavailable


def _app(failures: int) -> tuple[FastAPI, list[str]]:
    """An app whose routes fail with StorageUnavailable ``failures`` times, then answer; the
    methods of the requests it saw."""
    app, seen = FastAPI(), []
    install_error_handlers(app)

    async def answer(response_id: str) -> dict:
        seen.append(response_id)
        if len(seen) <= failures:
            raise StorageUnavailable("the storage actor is restarting")
        return {"id": response_id}

    app.get("/v1/things/{response_id}")(answer)
    app.post("/v1/things/{response_id}")(answer)
    return app, seen


def test_a_read_answers_a_retryable_503():
    app, _ = _app(failures=1)
    answer = TestClient(app).get("/v1/things/a")
    assert answer.status_code == 503
    assert answer.json()["error"] == {
        "message": "The server's storage is restarting; try again in a moment.",
        "type": "server_error", "param": None, "code": "storage_unavailable",
    }  # fmt: skip
    assert answer.headers["retry-after"] == "1"
    assert "x-should-retry" not in answer.headers


def test_a_write_answers_503_that_is_not_retried_blindly():
    app, _ = _app(failures=1)
    answer = TestClient(app).post("/v1/things/a")
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "storage_unavailable"
    assert "may or may not have taken effect" in answer.json()["error"]["message"]
    assert answer.headers["x-should-retry"] == "false"


def test_the_sdk_retries_a_read_and_not_a_write():
    app, seen = _app(failures=1)
    client = OpenAI(base_url="http://testserver/v1", api_key="unused", max_retries=2,
                    http_client=TestClient(app))  # fmt: skip
    assert client.get("/things/a", cast_to=object) == {"id": "a"}
    assert seen == ["a", "a"]

    app, seen = _app(failures=1)
    client = OpenAI(base_url="http://testserver/v1", api_key="unused", max_retries=2, http_client=TestClient(app))
    with pytest.raises(APIStatusError) as refused:
        client.post("/things/b", cast_to=object)
    assert refused.value.status_code == 503
    assert seen == ["b"], "the write was not sent again"
