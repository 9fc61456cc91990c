"""Webhooks with the ``openai`` SDK only (``client.webhooks``), over real HTTP, on an in-process
app with a DuckDB file and ``credentials_keys``, delivering to a local receiver (tests/servers.py
``WebhookReceiver``) that the webhook URL policy allows through ``[webhooks] allowed_urls``.

What a user sees: a background response's webhook verified by ``client.webhooks.unwrap``; a
receiver that fails twice and then succeeds gets the same delivery three times; the delivery
log says so; a restart with a delivery pending sends it after; the secret is nowhere on disk.
The Ray path (the storage actor's deliverer, ``kill -9``): tests/e2e/test_troupe_serve.py; an
eval run's webhook: tests/e2e/test_eval_cli.py; the bodies' many refusals: tests/unit/test_webhooks.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI

from tests.servers import WebhookReceiver, serve_app, served_local, wait_for
from troupe.runtime.settings import WebhookSettings
from troupe.serve.config import ServerSettings
from troupe.storage.credentials import new_key

RESPONSE_EVENTS = ["response.completed", "response.failed", "response.cancelled", "response.incomplete"]
LOOPBACK = ("http://127.0.0.1:*",)
NEEDLE = "webhook-e2e-name-5f1e"


@contextmanager
def _server(storage: Path, key: str | None, **webhooks: Any) -> Iterator[OpenAI]:
    settings = WebhookSettings(**{"allowed_urls": LOOPBACK, **webhooks})
    keys = (key,) if key else ()
    server = served_local(ServerSettings(), storage_path=str(storage / "troupe.duckdb"), credentials_keys=keys,
                          webhooks=settings)  # fmt: skip
    root = next(server)
    try:
        yield OpenAI(base_url=f"{root}/v1", api_key="-", max_retries=0)
    finally:
        server.close()


def _wait_received(receiver: WebhookReceiver, count: int, timeout_s: float = 20.0) -> None:
    wait_for(lambda: len(receiver.received) >= count, timeout_s=timeout_s,
             what=f"{count} webhook deliveries (got {len(receiver.received)})")  # fmt: skip


def _background(client: OpenAI, text: str = "hello") -> str:
    response = client.responses.create(model="sim", input=text, background=True)
    deadline = time.monotonic() + 20
    while client.responses.retrieve(response.id).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline, "the background response did not end"
        time.sleep(0.02)
    return response.id


def test_a_background_responses_webhook_is_signed_as_the_sdk_verifies_and_its_secret_is_never_stored(
    tmp_path: Path,
) -> None:
    receiver = WebhookReceiver()
    with serve_app(receiver) as hook_url, _server(tmp_path, new_key()) as client:
        made = client.webhooks.create(name=f" {NEEDLE} ", url=f"{hook_url}/troupe", event_types=RESPONSE_EVENTS)
        secret = made.signing_secret
        assert secret.startswith("whsec_") and made.name == NEEDLE and made.object == "webhook_endpoint"
        assert made.signing_secret_hint == f"whsec_...{secret[-4:]}"
        shown = client.webhooks.retrieve(made.id)
        assert "signing_secret" not in shown.model_dump() and shown.event_types == RESPONSE_EVENTS
        assert [e.id for e in client.webhooks.list().data] == [made.id]
        assert client.webhooks.event_types.list().data == [*RESPONSE_EVENTS, "eval.run.succeeded", "eval.run.failed",
                                                          "eval.run.canceled"]  # fmt: skip

        client.responses.create(model="sim", input="in the foreground: no webhook")
        response_id = _background(client)
        _wait_received(receiver, 1)
        headers, body = receiver.received[0]
        event = client.webhooks.unwrap(body, headers, secret=secret)
        assert (event.type, event.data.id, event.object) == ("response.completed", response_id, "event")
        assert headers["webhook-id"].startswith("wh_") and headers["user-agent"] == "Troupe-Webhooks/1"
        with pytest.raises(openai.InvalidWebhookSignatureError):
            client.webhooks.unwrap(body, headers, secret="whsec_" + "QUFB" * 11)  # another secret

        def delivered() -> list[Any]:
            log = client.get(f"/webhook_endpoints/{made.id}/deliveries", cast_to=object)["data"]  # type: ignore[index]
            return [d for d in log if d["status"] == "delivered"]

        wait_for(lambda: len(delivered()) == 1, what="the delivery logged as delivered")
        [entry] = delivered()
        assert (entry["id"], entry["event_id"], entry["attempts"], entry["last_status_code"]) == (
            headers["webhook-id"], event.id, 1, 200)  # fmt: skip
        assert len(receiver.received) == 1, "the foreground response sent nothing"

        rotated = client.webhooks.rotate_secret(made.id, keep_old_secret_active_for_24_hours=True)
        assert rotated.signing_secret != secret
        _background(client)
        _wait_received(receiver, 2)
        headers, body = receiver.received[1]
        # Both secrets verify while the old one is kept.
        assert client.webhooks.unwrap(body, headers, secret=rotated.signing_secret).type == "response.completed"
        assert client.webhooks.unwrap(body, headers, secret=secret).type == "response.completed"
        assert client.webhooks.test(made.id, event_type="eval.run.failed").status_code == 200
        test_headers, test_body = receiver.received[2]
        assert client.webhooks.unwrap(test_body, test_headers, secret=rotated.signing_secret).type == "eval.run.failed"
        # The endpoint is kept (a deleted row may be gone from the file, which would prove nothing).

    def holding(needle: bytes) -> list[str]:
        return [str(p) for p in tmp_path.rglob("*") if p.is_file() and needle in p.read_bytes()]

    assert holding(NEEDLE.encode()), "the endpoint's name, stored in plain text: the byte search must find it"
    for secret_ in (secret, rotated.signing_secret):
        assert holding(secret_.removeprefix("whsec_").encode()) == [], "a signing secret is written on disk"


def test_a_receiver_that_fails_twice_then_succeeds_gets_the_same_delivery_three_times(tmp_path: Path) -> None:
    receiver = WebhookReceiver([500, 503])
    with serve_app(receiver) as hook_url, _server(tmp_path, new_key(), retry_initial_s=0.2) as client:
        made = client.webhooks.create(name="flaky", url=hook_url, event_types=["response.completed"])
        response_id = _background(client)
        _wait_received(receiver, 3)
        ids = {h["webhook-id"] for h, _ in receiver.received}
        bodies = {b for _, b in receiver.received}
        assert len(ids) == 1 and len(bodies) == 1, "every attempt is the same delivery, byte for byte"
        assert json.loads(next(iter(bodies)))["data"]["id"] == response_id
        stamps = [int(h["webhook-timestamp"]) for h, _ in receiver.received]
        assert stamps == sorted(stamps)

        def log() -> dict[str, Any]:
            return client.get(f"/webhook_endpoints/{made.id}/deliveries", cast_to=object)["data"][0]  # type: ignore[index]

        wait_for(lambda: log()["status"] == "delivered", what="the delivery logged as delivered")
        entry = log()
        assert (entry["attempts"], entry["last_status_code"], entry["last_error"]) == (3, 200, None)
        time.sleep(0.5)  # no fourth attempt follows a success (a wait for nothing to happen)
        assert len(receiver.received) == 3


def test_a_refusing_receiver_fails_the_delivery_at_once(tmp_path: Path) -> None:
    receiver = WebhookReceiver([400])
    with serve_app(receiver) as hook_url, _server(tmp_path, new_key(), retry_initial_s=0.1) as client:
        made = client.webhooks.create(name="strict", url=hook_url, event_types=["response.completed"])
        _background(client)
        _wait_received(receiver, 1)

        def log() -> dict[str, Any]:
            return client.get(f"/webhook_endpoints/{made.id}/deliveries", cast_to=object)["data"][0]  # type: ignore[index]

        wait_for(lambda: log()["status"] != "pending", what="the delivery to end")
        entry = log()
        assert (entry["status"], entry["attempts"], entry["last_status_code"]) == ("failed", 1, 400)
        assert entry["last_error"] == "HTTP 400: receiver says no"


def test_a_delivery_pending_at_a_restart_is_sent_after_it(tmp_path: Path) -> None:
    key = new_key()
    receiver = WebhookReceiver([500] * 1000)  # down until the restart
    with serve_app(receiver) as hook_url:
        with _server(tmp_path, key, retry_initial_s=0.5, retry_max_s=0.5) as client:
            made = client.webhooks.create(name="down", url=hook_url, event_types=["response.completed"])
            response_id = _background(client)
            _wait_received(receiver, 1)
        first_id = receiver.received[0][0]["webhook-id"]
        receiver.statuses.clear()  # back up, while no server runs
        count = len(receiver.received)
        with _server(tmp_path, key, retry_initial_s=0.5, retry_max_s=0.5) as client:
            client.webhooks.list()  # the in-process runtime starts on its first request
            _wait_received(receiver, count + 1)
            headers, body = receiver.received[-1]
            assert headers["webhook-id"] == first_id, "the same delivery, for the receiver to deduplicate"
            assert json.loads(body)["data"]["id"] == response_id
            wait_for(lambda: client.get(f"/webhook_endpoints/{made.id}/deliveries", cast_to=object)["data"][0]["status"]  # type: ignore[index]
                     == "delivered", what="the delivery logged as delivered")  # fmt: skip


def test_endpoints_are_refused_without_keys_or_to_a_private_address(tmp_path: Path) -> None:
    with _server(tmp_path, None) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            client.webhooks.create(name="x", url="http://127.0.0.1:9/", event_types=["response.completed"])
        assert "credentials_keys" in refused.value.message
    (tmp_path / "policy").mkdir()
    with _server(tmp_path / "policy", new_key(), allowed_urls=()) as client:  # the default policy: public only
        for url in ("http://127.0.0.1:9/", "http://10.0.0.7/hook", "http://169.254.169.254/latest", "ftp://example.com/",
                    "http://user:pw@example.com/"):  # fmt: skip
            with pytest.raises(openai.BadRequestError) as refused:
                client.webhooks.create(name="x", url=url, event_types=["response.completed"])
            assert refused.value.body["param"] == "url", refused.value.body  # type: ignore[index]
        with pytest.raises(openai.BadRequestError) as refused:
            client.webhooks.create(name="x", url="https://example.com/", event_types=["batch.completed"])
        assert refused.value.body["param"] == "event_types[0]"  # type: ignore[index]
        kept = client.webhooks.create(name="x", url="https://1.1.1.1/hook", event_types=["response.completed"])
        assert client.webhooks.delete(kept.id).deleted
        for gone in (lambda: client.webhooks.retrieve(kept.id), lambda: client.webhooks.delete(kept.id),
                     lambda: client.webhooks.retrieve("we_nope")):  # fmt: skip
            with pytest.raises(openai.NotFoundError):
                gone()
        with pytest.raises(openai.BadRequestError):
            client.webhooks.retrieve("nope")
        assert client.webhooks.list().data == []
