"""Webhooks (``client.webhooks`` of the ``openai`` SDK): the endpoint bodies and objects, the
events Troupe sends, and how a delivery is signed.

Bodies::

    POST /v1/webhook_endpoints                     {"name": str, "url": url, "event_types": [type, …]}
    POST /v1/webhook_endpoints/{id}                {"name", "url", "event_types"}  (each optional)
    POST /v1/webhook_endpoints/{id}/rotate_secret  {"keep_old_secret_active_for_24_hours": bool}  (optional)
    POST /v1/webhook_endpoints/{id}/test           {"event_type": type}

Names are trimmed and hold 1 to 256 UTF-8 bytes; ``event_types`` is 1 to
:data:`MAX_EVENT_TYPES` distinct types, each one Troupe sends (:data:`SENT_EVENT_TYPES`): a type
the SDK knows but Troupe never sends (``batch.completed``…) is refused naming its place, since
an endpoint subscribed to it would wait for nothing. ``url`` is an http(s) URL without
credentials; whether it may be reached is the runtime's URL policy (:mod:`troupe.runtime.webhooks`).

**An event** is the JSON body of a delivery, as the SDK's ``UnwrapWebhookEvent`` types it::

    {"id": "evt_…", "object": "event", "created_at": 1764000000, "type": "response.completed",
     "data": {"id": "resp_…"}}

Its id is derived from what caused it (:func:`event_id`), so that an event written twice (a
journal replayed after a crash) is one event.

**Signing** (Standard Webhooks, as ``client.webhooks.verify_signature`` checks it): the headers
``webhook-id`` (the delivery's id, the same on every attempt, for deduplication),
``webhook-timestamp`` (Unix seconds of the attempt) and ``webhook-signature``: ``v1,`` and the
base64 HMAC-SHA256 of ``"{webhook-id}.{webhook-timestamp}.{body}"`` keyed by the secret's
bytes (the base64 after ``whsec_``); several signatures, space-separated, while an old secret
is kept for 24 hours after a rotation (:func:`signature_header`).

Example::

    >>> fields = parse_webhook_create({"name": " ci ", "url": "https://hooks.example.com/troupe",
    ...                                "event_types": ["response.completed"]})
    >>> fields["name"], fields["event_types"]
    ('ci', ['response.completed'])
    >>> signature_header(["whsec_" + "A" * 44], "wh_1", 1764000000, b"{}").startswith("v1,")
    True
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Sequence
from typing import Any

from .errors import InvalidRequest, NotFound, check_http_url, object_body, show_value, wrong_type
from .ids import new_id

__all__ = [
    "DELIVERY",
    "ENDPOINT",
    "EVENT_TYPES",
    "EVENT_TYPE_OF_RESPONSE_STATUS",
    "EVENT_TYPE_OF_EVAL_STATUS",
    "MAX_EVENT_TYPES",
    "SENT_EVENT_TYPES",
    "delivery_id",
    "delivery_object",
    "endpoint_deleted",
    "endpoint_not_found",
    "endpoint_object",
    "event_body",
    "event_id",
    "new_endpoint_id",
    "new_secret",
    "parse_rotate_secret",
    "parse_webhook_create",
    "parse_webhook_test",
    "parse_webhook_update",
    "secret_hint",
    "signature_header",
]

ENDPOINT = "we"
"""A webhook endpoint's id prefix (ours; OpenAI does not document one)."""
DELIVERY = "wh"
"""A delivery's id prefix: its ``webhook-id`` header."""
_EVENT = "evt"

MAX_NAME_BYTES = 256
MAX_URL_CHARS = 2048
MAX_EVENT_TYPES = 32

EVENT_TYPES = (
    "batch.completed", "batch.failed", "batch.expired", "batch.cancelled",
    "response.completed", "response.failed", "response.cancelled", "response.incomplete",
    "eval.run.succeeded", "eval.run.failed", "eval.run.canceled",
    "fine_tuning.job.succeeded", "fine_tuning.job.failed", "fine_tuning.job.cancelled",
    "realtime.call.incoming", "video.completed", "video.failed",
    "agent.environment.ready", "agent.environment.failed", "agent.environment.suspended", "agent.environment.expired",
    "agent.session.created", "agent.session.action_required", "agent.session.in_progress", "agent.session.idle",
    "agent.session.failed", "safety.alert.created",
)  # fmt: skip
"""Every event type the SDK's ``webhooks.create`` names."""

EVENT_TYPE_OF_RESPONSE_STATUS = {
    "completed": "response.completed",
    "failed": "response.failed",
    "cancelled": "response.cancelled",
    "incomplete": "response.incomplete",
}
"""A background response stored with this status sends this event."""

EVENT_TYPE_OF_EVAL_STATUS = {
    "finished": "eval.run.succeeded",
    "failed": "eval.run.failed",
    "interrupted": "eval.run.canceled",
}
"""A ``troupe eval`` run stored with this status (``EvalRunRecord.status``) sends this event."""

SENT_EVENT_TYPES = (*EVENT_TYPE_OF_RESPONSE_STATUS.values(), *EVENT_TYPE_OF_EVAL_STATUS.values())
"""The event types Troupe sends: what ``GET /v1/webhook_event_types`` lists, and all an endpoint
may subscribe to."""


def new_endpoint_id() -> str:
    return new_id(ENDPOINT)


def new_secret() -> str:
    """A new signing secret: ``whsec_`` and the base64 of 32 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def secret_hint(secret: str) -> str:
    """What an endpoint shows of its secret: its prefix and last four characters."""
    return f"whsec_...{secret[-4:]}"


# -- bodies --------------------------------------------------------------------------------------


def parse_webhook_create(body: Any) -> dict[str, Any]:
    """``POST /v1/webhook_endpoints``'s body: ``{"name", "url", "event_types"}``, each required.

    Raises:
        InvalidRequest: a missing or unknown key, or a bad value, naming it.
    """
    body = object_body(body, "", ("name", "url", "event_types"))
    for key in ("name", "url", "event_types"):
        if key not in body:
            raise InvalidRequest(f"Missing required parameter: '{key}'.", param=key, code="missing_required_parameter")
    return {"name": _name(body["name"]), "url": _url(body["url"]), "event_types": _event_types(body["event_types"])}


def parse_webhook_update(body: Any) -> dict[str, Any]:
    """``POST /v1/webhook_endpoints/{id}``'s body: the fields given, checked as at creation."""
    body = object_body(body, "", ("name", "url", "event_types"))
    checks = {"name": _name, "url": _url, "event_types": _event_types}
    return {key: checks[key](value) for key, value in body.items()}


def parse_rotate_secret(body: Any) -> bool:
    """``keep_old_secret_active_for_24_hours`` (default false)."""
    body = object_body(body if body is not None else {}, "", ("keep_old_secret_active_for_24_hours",))
    keep = body.get("keep_old_secret_active_for_24_hours", False)
    if not isinstance(keep, bool):
        raise wrong_type("keep_old_secret_active_for_24_hours", "a boolean", keep)
    return keep


def parse_webhook_test(body: Any) -> str:
    """``POST /v1/webhook_endpoints/{id}/test``'s ``event_type``."""
    body = object_body(body, "", ("event_type",))
    if "event_type" not in body:
        raise InvalidRequest("Missing required parameter: 'event_type'.", param="event_type",
                             code="missing_required_parameter")  # fmt: skip
    return _event_type(body["event_type"], "event_type")


def _name(value: Any) -> str:
    if not isinstance(value, str):
        raise wrong_type("name", "a string", value)
    name = value.strip()
    size = len(name.encode())
    if not 1 <= size <= MAX_NAME_BYTES:
        raise InvalidRequest(f"Invalid 'name': it must hold 1 to {MAX_NAME_BYTES} UTF-8 bytes once trimmed, got {size}.",
                             param="name", code="invalid_value")  # fmt: skip
    return name


def _url(value: Any) -> str:
    if isinstance(value, str) and len(value) > MAX_URL_CHARS:
        raise InvalidRequest(f"Invalid 'url': string too long. Expected at most {MAX_URL_CHARS} characters.",
                             param="url", code="string_above_max_length")  # fmt: skip
    return check_http_url(value, "url")


def _event_types(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise wrong_type("event_types", "an array of event types", value)
    if not 1 <= len(value) <= MAX_EVENT_TYPES:
        raise InvalidRequest(f"Invalid 'event_types': expected 1 to {MAX_EVENT_TYPES} event types, got {len(value)}.",
                             param="event_types", code="invalid_value")  # fmt: skip
    types: list[str] = []
    for index, item in enumerate(value):
        kind = _event_type(item, f"event_types[{index}]")
        if kind not in types:
            types.append(kind)
    return types


def _event_type(value: Any, param: str) -> str:
    if not isinstance(value, str):
        raise wrong_type(param, "an event type", value)
    if value not in SENT_EVENT_TYPES:
        known = "an event type Troupe does not send" if value in EVENT_TYPES else "not an event type"
        raise InvalidRequest(f"Invalid value for '{param}': {show_value(value)} is {known}. Troupe sends: "
                             f"{', '.join(SENT_EVENT_TYPES)}.", param=param, code="invalid_value")  # fmt: skip
    return value


# -- objects -------------------------------------------------------------------------------------


def endpoint_object(endpoint: dict[str, Any], secret: str | None = None) -> dict[str, Any]:
    """The wire ``webhook_endpoint`` of a stored one; with ``secret``, the SDK's
    ``WebhookEndpointWithSecret`` (the answer to a create or a rotation, and only those)."""
    made = {
        "id": endpoint["id"], "object": "webhook_endpoint", "created_at": int(endpoint["created_at"]),
        "name": endpoint["name"], "url": endpoint["url"], "event_types": list(endpoint["event_types"]),
        "signing_secret_hint": endpoint["signing_secret_hint"], "updated_at": int(endpoint["updated_at"]),
    }  # fmt: skip
    if secret is not None:
        made["signing_secret"] = secret
    return made


def endpoint_deleted(endpoint_id: str) -> dict[str, Any]:
    return {"id": endpoint_id, "object": "webhook_endpoint.deleted", "deleted": True}


def endpoint_not_found(endpoint_id: str) -> NotFound:
    return NotFound(f"Webhook endpoint with id '{endpoint_id}' not found.", param="webhook_endpoint_id")


def delivery_object(delivery: dict[str, Any]) -> dict[str, Any]:
    """A ``webhook_delivery`` (Troupe's; OpenAI shows its delivery log only in its dashboard)."""
    times = ("created_at", "next_attempt_at", "last_attempt_at", "delivered_at")
    return {"object": "webhook_delivery", **{k: v for k, v in delivery.items() if k not in times},
            **{k: None if delivery.get(k) is None else int(delivery[k]) for k in times}}  # fmt: skip


# -- events and their signatures -----------------------------------------------------------------


def event_id(tenant: str, event_type: str, cause: str) -> str:
    """The id of the event ``event_type`` of ``cause`` (a response id, an eval run's id and end):
    the same for the same cause, so that an event written twice is one event."""
    digest = hashlib.sha256(f"{tenant}\0{event_type}\0{cause}".encode()).hexdigest()
    return f"{_EVENT}_{digest[:32]}"


def delivery_id(endpoint_id: str, event: str) -> str:
    """The ``webhook-id`` of ``event``'s delivery to one endpoint: the same on every attempt."""
    digest = hashlib.sha256(f"{endpoint_id}\0{event}".encode()).hexdigest()
    return f"{DELIVERY}_{digest[:32]}"


def event_body(event: str, event_type: str, created_at: float, object_id: str) -> str:
    """An event's JSON, as delivered (and as stored in the outbox, so every attempt sends the same bytes)."""
    return json.dumps({"id": event, "object": "event", "created_at": int(created_at), "type": event_type,
                       "data": {"id": object_id}}, separators=(",", ":"))  # fmt: skip


def signature_header(secrets_: Sequence[str], webhook_id: str, timestamp: int, body: bytes) -> str:
    """``webhook-signature``: one ``v1,<base64>`` per secret (the current one first), space-separated."""
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    return " ".join(
        "v1," + base64.b64encode(hmac.new(_key(secret), signed, hashlib.sha256).digest()).decode()
        for secret in secrets_
    )


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix("whsec_")) if secret.startswith("whsec_") else secret.encode()
