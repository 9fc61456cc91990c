"""Webhooks without a server: the bodies and their refusals, signatures as the SDK verifies them,
and the store's outbox (written in the transaction of its cause, for background responses and
evaluation runs only, once per event). Over HTTP with a receiver: tests/e2e/test_webhooks.py."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from openai import OpenAI
from openai._exceptions import InvalidWebhookSignatureError

from troupe.protocol import InvalidRequest
from troupe.protocol.webhooks import (
    SENT_EVENT_TYPES,
    delivery_id,
    event_body,
    event_id,
    new_secret,
    parse_rotate_secret,
    parse_webhook_create,
    parse_webhook_test,
    parse_webhook_update,
    signature_header,
)
from troupe.runtime.webhook_delivery import sealed_secrets, signing_secrets
from troupe.storage import StorageError
from troupe.storage.base import EvalRunRecord, ResponseRecord
from troupe.storage.credentials import CredentialKeys, CredentialsUnavailable, new_key
from troupe.storage.duckdb_store import DuckDBStore

GOOD = {"name": "ci", "url": "https://hooks.example.com/troupe", "event_types": ["response.completed"]}


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({**GOOD, "extra": 1}, "extra", "unknown_parameter"),
        ({k: v for k, v in GOOD.items() if k != "url"}, "url", "missing_required_parameter"),
        ({**GOOD, "name": "  "}, "name", "invalid_value"),
        ({**GOOD, "name": 3}, "name", "invalid_type"),
        ({**GOOD, "url": "ftp://x.example.com/"}, "url", "invalid_value"),
        ({**GOOD, "url": "https://u:p@x.example.com/"}, "url", "invalid_value"),
        ({**GOOD, "url": "https://x.example.com/" + "a" * 3000}, "url", "string_above_max_length"),
        ({**GOOD, "event_types": []}, "event_types", "invalid_value"),
        ({**GOOD, "event_types": "response.completed"}, "event_types", "invalid_type"),
        ({**GOOD, "event_types": ["response.completed", "batch.completed"]}, "event_types[1]", "invalid_value"),
        ({**GOOD, "event_types": ["nope"]}, "event_types[0]", "invalid_value"),
        ([], "", "invalid_type"),
    ],
)
def test_a_bad_create_body_names_its_field(body: Any, param: str, code: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_webhook_create(body)
    assert (refused.value.param or "", refused.value.code) == (param, code), refused.value


def test_the_bodies_that_are_taken() -> None:
    made = parse_webhook_create({**GOOD, "name": " ci ", "event_types": ["response.failed", "response.failed"]})
    assert made == {"name": "ci", "url": GOOD["url"], "event_types": ["response.failed"]}
    assert parse_webhook_update({}) == {}
    assert parse_webhook_update({"event_types": list(SENT_EVENT_TYPES)}) == {"event_types": list(SENT_EVENT_TYPES)}
    assert parse_rotate_secret({}) is False and parse_rotate_secret({"keep_old_secret_active_for_24_hours": True})
    with pytest.raises(InvalidRequest):
        parse_rotate_secret({"keep_old_secret_active_for_24_hours": "yes"})
    assert parse_webhook_test({"event_type": "eval.run.canceled"}) == "eval.run.canceled"
    with pytest.raises(InvalidRequest) as refused:
        parse_webhook_test({"event_type": "video.completed"})
    assert "Troupe does not send" in refused.value.message


def test_a_signature_is_what_the_sdk_verifies_with_either_secret_while_both_sign() -> None:
    sdk = OpenAI(api_key="-", base_url="http://127.0.0.1:9/v1")
    current, previous = new_secret(), new_secret()
    body = event_body(event_id("", "response.completed", "resp_1"), "response.completed", time.time(), "resp_1")
    stamp = int(time.time())
    headers = {"webhook-id": "wh_1", "webhook-timestamp": str(stamp),
               "webhook-signature": signature_header([current, previous], "wh_1", stamp, body.encode())}  # fmt: skip
    for secret in (current, previous):
        event = sdk.webhooks.unwrap(body, headers, secret=secret)
        assert (event.type, event.data.id, event.object) == ("response.completed", "resp_1", "event")
    with pytest.raises(InvalidWebhookSignatureError):
        sdk.webhooks.unwrap(body, headers, secret=new_secret())
    with pytest.raises(InvalidWebhookSignatureError):  # one byte of the body changed
        sdk.webhooks.unwrap(body.replace("resp_1", "resp_2"), headers, secret=current)


def test_ids_are_derived_from_the_cause() -> None:
    assert event_id("a", "response.completed", "resp_1") == event_id("a", "response.completed", "resp_1")
    assert event_id("a", "response.completed", "resp_1") != event_id("b", "response.completed", "resp_1")
    assert delivery_id("we_1", "evt_1") != delivery_id("we_2", "evt_1")


def test_sealed_secrets_open_with_their_key_only_and_the_old_one_expires() -> None:
    keys = CredentialKeys([new_key()])
    sealed = sealed_secrets(keys, "whsec_new", "whsec_old", previous_until=100.0)
    assert "whsec_new" not in sealed and "whsec_old" not in sealed
    assert signing_secrets(keys, sealed, now=50.0) == ["whsec_new", "whsec_old"]
    assert signing_secrets(keys, sealed, now=150.0) == ["whsec_new"]
    with pytest.raises(CredentialsUnavailable):
        signing_secrets(CredentialKeys([new_key()]), sealed, now=50.0)
    with pytest.raises(ValueError):
        sealed_secrets(CredentialKeys([]), "whsec_new")


def _endpoint(endpoint_id: str, types: list[str]) -> dict[str, Any]:
    return {"id": endpoint_id, "created_at": time.time(), "updated_at": time.time(), "name": endpoint_id,
            "url": f"https://hooks.example.com/{endpoint_id}", "event_types": types, "signing_secret_hint": "h"}  # fmt: skip


def _record(tenant: str, response_id: str, *, background: bool, status: str = "completed") -> ResponseRecord:
    response = {"id": response_id, "created_at": 1, "status": status, "background": background, "output": []}
    return ResponseRecord(tenant=tenant, response=response, input_items=[], thread_id=response_id, started_at=1,
                          ended_at=2)  # fmt: skip


def test_the_outbox_holds_one_delivery_per_event_and_subscribed_endpoint() -> None:
    store = DuckDBStore(None)
    told: list[int] = []
    store.on_webhook_events = lambda: told.append(1)
    store.write_responses([_record("acme", "resp_0", background=True)])  # no endpoint yet: nothing
    assert store.count_pending_webhook_deliveries() == 0 and told == []
    store.create_webhook_endpoint("acme", _endpoint("we_done", ["response.completed"]), "fernet:x")
    store.create_webhook_endpoint("acme", _endpoint("we_all", list(SENT_EVENT_TYPES)), "fernet:y")
    store.create_webhook_endpoint("other", _endpoint("we_other", list(SENT_EVENT_TYPES)), "fernet:z")
    store.write_responses([
        _record("acme", "resp_1", background=True), _record("acme", "resp_2", background=False),
        _record("acme", "resp_3", background=True, status="failed"),
    ])  # fmt: skip
    due, later = store.due_webhook_deliveries(time.time(), limit=10)
    assert later is None
    assert sorted((d["endpoint_id"], json.loads(d["event"])["data"]["id"], d["event_type"]) for d in due) == [
        ("we_all", "resp_1", "response.completed"), ("we_all", "resp_3", "response.failed"),
        ("we_done", "resp_1", "response.completed"),
    ]  # fmt: skip
    assert all(d["tenant"] == "acme" and d["secrets"].startswith("fernet:") for d in due)
    assert told == [1], "told once, after the commit"

    store.put_eval_run(EvalRunRecord(run_id="r1", created_at=1, dataset="d", status="running", options={"tenant": "other"}))
    assert store.count_pending_webhook_deliveries() == 3, "a running eval sends nothing"
    store.put_eval_run(EvalRunRecord(run_id="r1", created_at=1, dataset="d", status="failed", finished_at=None,
                                     options={"tenant": "other"}))  # fmt: skip
    [eval_event] = [d for d in store.due_webhook_deliveries(time.time())[0] if d["tenant"] == "other"]
    assert eval_event["event_type"] == "eval.run.failed" and json.loads(eval_event["event"])["data"]["id"] == "r1"

    assert store.delete_webhook_endpoint("acme", "we_all")
    assert store.count_pending_webhook_deliveries() == 2, "a deleted endpoint's deliveries go with it"
    assert store.list_webhook_deliveries("acme", "we_all") is None


def test_an_event_written_again_is_one_delivery_and_a_failed_write_leaves_none(tmp_path: Any) -> None:
    store = DuckDBStore(tmp_path / "t.duckdb")
    store.create_webhook_endpoint("", _endpoint("we_1", ["response.completed"]), "fernet:x")
    store.write_responses([_record("", "resp_1", background=True)])
    with store._transaction([]) as conn:  # the outbox of the same event, as a journal replay would add it
        store._add_deliveries(conn, [("", "response.completed", "resp_1", "resp_1", 2.0)], [])
    assert store.count_pending_webhook_deliveries() == 1
    with pytest.raises(StorageError):  # resp_1 again: the responses' key refuses the whole batch
        store.write_responses([_record("", "resp_9", background=True), _record("", "resp_1", background=True)])
    assert store.count_pending_webhook_deliveries() == 1, "no delivery of a response that was not stored"
    store.close()
    reopened = DuckDBStore(tmp_path / "t.duckdb")
    assert reopened._webhook_subscribers == {"": (("we_1", frozenset({"response.completed"})),)}
    assert reopened.count_pending_webhook_deliveries() == 1
    reopened.close()
