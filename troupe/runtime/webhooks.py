"""Webhook endpoints (``client.webhooks``): :class:`WebhookService`, what ``Runtime.webhooks`` is.

Ray-free. The bodies are checked by :mod:`troupe.protocol.webhooks`; endpoints and their
deliveries live in the store, per tenant (:class:`~troupe.storage.contract.Webhooks`), and the
deliveries are sent beside the store (:mod:`troupe.runtime.webhook_delivery`).

**Secrets.** An endpoint's signing secret is made here (``whsec_`` and 32 random bytes), shown
once (the answer to a create or a rotation) and sealed with the configured ``credentials_keys``
(:class:`~troupe.storage.credentials.CredentialKeys`, Fernet) before the store sees it: a
delivery must be signed after a restart, which memory alone cannot serve, and a secret must never
be written in plain text (DuckDB's WAL and free blocks keep a deleted row's bytes). A server
without ``credentials_keys`` refuses to create an endpoint: a 400 saying how to make a key. A
rotation with ``keep_old_secret_active_for_24_hours`` keeps the old secret sealed beside the new
one, and deliveries carry both signatures until it expires.

**The URL policy** is the MCP servers' (:func:`~troupe.runtime.mcp_policy.check_url`): an http(s)
URL that is public, unless it matches ``[webhooks] allowed_urls`` / ``TROUPE_WEBHOOK_ALLOWED_URLS``
(cloud metadata addresses are refused even then). It is checked when an endpoint is created or
its URL changes (a 400 naming ``url``), and again at every attempt.

**Test** (``POST …/{id}/test``) signs and sends a sample event of the type asked for (its
``data.id`` a made-up id of the right kind) at once, and answers with the endpoint's status code
(``success`` is always true, as the SDK says: the request was made). It is not an outbox delivery:
nothing is retried or logged. An endpoint that could not be reached is a 502 saying why.

Example::

    webhooks = WebhookService(settings, store, CredentialKeys([new_key()]))
    made = await webhooks.create("acme", {"name": "ci", "url": "https://hooks.example.com/troupe",
                                          "event_types": ["response.completed"]})
    made["signing_secret"]     # whsec_…, shown this once
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from troupe.protocol import InvalidRequest, ServerError
from troupe.protocol.ids import new_id
from troupe.protocol.webhooks import (
    SENT_EVENT_TYPES,
    endpoint_deleted,
    endpoint_not_found,
    endpoint_object,
    event_body,
    event_id,
    new_endpoint_id,
    new_secret,
    parse_rotate_secret,
    parse_webhook_create,
    parse_webhook_test,
    parse_webhook_update,
    secret_hint,
)
from troupe.runtime.mcp_policy import check_url
from troupe.runtime.settings import RuntimeSettings
from troupe.runtime.store_client import StoreClient
from troupe.runtime.webhook_delivery import (
    ALLOWLIST,
    allowed_webhook_urls,
    http_clients,
    sealed_secrets,
    send_event,
    signing_secrets,
)
from troupe.storage import Order, Page
from troupe.storage.credentials import CredentialKeys, CredentialsUnavailable

__all__ = ["KEEP_OLD_SECRET_S", "KEYS_REQUIRED", "WebhookService"]

KEEP_OLD_SECRET_S = 24 * 3600.0
"""How long a rotated-out secret still signs deliveries, when the rotation asks to keep it."""

KEYS_REQUIRED = (
    "Webhook signing secrets are kept sealed with the server's credentials_keys, and none are set on this server, so "
    'it cannot create a webhook endpoint. Set a key and restart the server: TROUPE_CREDENTIALS_KEYS="$(python -c '
    "'from troupe.storage.credentials import new_key; print(new_key())')\" (docs/webhooks.md)."
)
"""The 400 of a webhook endpoint created on a server without ``credentials_keys``."""

_SAMPLE_PREFIX = {"response": "resp", "eval": "evalrun"}


class WebhookService:
    """Webhook endpoints, their secrets and their delivery log (module docstring).

    Args:
        settings: the runtime's settings (``[webhooks]``: the URL policy, the time-out).
        store: the store client (its webhooks area).
        keys: what seals the signing secrets (``credentials_keys``).
    """

    def __init__(self, settings: RuntimeSettings, store: StoreClient, keys: CredentialKeys) -> None:
        self.settings = settings.webhooks
        self.store = store
        self.keys = keys

    async def create(self, tenant: str, body: Any) -> dict[str, Any]:
        """``POST /v1/webhook_endpoints``: the endpoint, with its secret (shown this once).

        Raises:
            InvalidRequest: the body (:func:`~troupe.protocol.webhooks.parse_webhook_create`); a
                URL the policy refuses (naming ``url``); no ``credentials_keys``.
        """
        fields = parse_webhook_create(body)
        secret = new_secret()
        sealed = self._seal(secret)
        await self._check_url(fields["url"])
        now = time.time()
        endpoint = {"id": new_endpoint_id(), "created_at": now, "updated_at": now, **fields,
                    "signing_secret_hint": secret_hint(secret)}  # fmt: skip
        made = await self.store.create_webhook_endpoint(tenant, endpoint, sealed)
        return endpoint_object(made, secret)

    async def get(self, tenant: str, endpoint_id: str) -> dict[str, Any]:
        """Raises: NotFound (naming ``webhook_endpoint_id``)."""
        return endpoint_object((await self._endpoint(tenant, endpoint_id))[0])

    async def list(self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc") -> Page:
        page = await self.store.list_webhook_endpoints(tenant, after=after, limit=limit, order=order)
        return Page(data=[endpoint_object(e) for e in page.data], has_more=page.has_more)

    async def update(self, tenant: str, endpoint_id: str, body: Any) -> dict[str, Any]:
        """``POST /v1/webhook_endpoints/{id}``: the fields given; ``updated_at`` moves only when one
        changes (as the SDK says). Pending deliveries go to the new URL.

        Raises:
            NotFound; InvalidRequest (the body, a URL the policy refuses).
        """
        fields = parse_webhook_update(body)
        current, _ = await self._endpoint(tenant, endpoint_id)
        changes = {k: v for k, v in fields.items() if current.get(k) != v}
        if "url" in changes:
            await self._check_url(changes["url"])
        if not changes:
            return endpoint_object(current)
        updated = await self.store.update_webhook_endpoint(tenant, endpoint_id, {**changes, "updated_at": time.time()})
        if updated is None:  # deleted meanwhile
            raise endpoint_not_found(endpoint_id)
        return endpoint_object(updated)

    async def delete(self, tenant: str, endpoint_id: str) -> dict[str, Any]:
        """Delete the endpoint and its delivery log (pending deliveries are not sent). Raises: NotFound."""
        if not await self.store.delete_webhook_endpoint(tenant, endpoint_id):
            raise endpoint_not_found(endpoint_id)
        return endpoint_deleted(endpoint_id)

    async def rotate_secret(self, tenant: str, endpoint_id: str, body: Any) -> dict[str, Any]:
        """A new signing secret (shown this once); the old one signs beside it for 24 hours if
        ``keep_old_secret_active_for_24_hours``, else no more. Raises: NotFound; InvalidRequest."""
        keep = parse_rotate_secret(body)
        _, sealed = await self._endpoint(tenant, endpoint_id)
        secret, now = new_secret(), time.time()
        previous = None
        if keep:
            try:
                previous = signing_secrets(self.keys, sealed, now)[0]
            except CredentialsUnavailable:
                previous = None  # sealed with a key that is gone: it cannot sign anything anyway
        secrets = self._seal(secret, previous, now + KEEP_OLD_SECRET_S)
        changes = {"signing_secret_hint": secret_hint(secret), "updated_at": now}
        updated = await self.store.update_webhook_endpoint(tenant, endpoint_id, changes, secrets)
        if updated is None:
            raise endpoint_not_found(endpoint_id)
        return endpoint_object(updated, secret)

    async def test(self, tenant: str, endpoint_id: str, body: Any) -> dict[str, Any]:
        """Send a sample event now (module docstring); the SDK's ``WebhookEndpointTestResult``.

        Raises:
            NotFound; InvalidRequest (``event_type``); ServerError (502): the endpoint
                could not be reached, or its URL is now refused, or its secret cannot be opened.
        """
        kind = parse_webhook_test(body)
        endpoint, sealed = await self._endpoint(tenant, endpoint_id)
        try:
            secrets = signing_secrets(self.keys, sealed, time.time())
        except CredentialsUnavailable as exc:
            raise ServerError(f"The endpoint's signing secret cannot be opened: {exc}.", status=502) from exc
        sample = new_id(_SAMPLE_PREFIX[kind.split(".")[0]])
        event = event_id(tenant, kind, new_id("test"))
        http = http_clients()
        try:
            attempt = await send_event(http, self.settings, endpoint["url"], secrets, new_id("wh"),
                                       event_body(event, kind, time.time(), sample).encode())  # fmt: skip
        finally:
            await asyncio.gather(*(c.aclose() for c in http.values()))
        if attempt.status_code is None:
            raise ServerError(
                f"The test event could not be delivered to {endpoint['url']}: {attempt.error}.", status=502
            )
        return {"object": "webhook_endpoint.test", "webhook_endpoint_id": endpoint_id, "event_type": kind,
                "status_code": attempt.status_code, "success": True}  # fmt: skip

    async def deliveries(
        self, tenant: str, endpoint_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """An endpoint's delivery log (``GET /v1/webhook_endpoints/{id}/deliveries``, Troupe's). Raises: NotFound."""
        from troupe.protocol.webhooks import delivery_object

        page = await self.store.list_webhook_deliveries(tenant, endpoint_id, after=after, limit=limit, order=order)
        if page is None:
            raise endpoint_not_found(endpoint_id)
        return Page(data=[delivery_object(d) for d in page.data], has_more=page.has_more)

    @staticmethod
    def event_types() -> dict[str, Any]:
        """``GET /v1/webhook_event_types``: the event types Troupe sends."""
        return {"object": "list", "data": list(SENT_EVENT_TYPES)}

    async def _endpoint(self, tenant: str, endpoint_id: str) -> tuple[dict[str, Any], str]:
        found = await self.store.get_webhook_endpoint(tenant, endpoint_id)
        if found is None:
            raise endpoint_not_found(endpoint_id)
        return found

    async def _check_url(self, url: str) -> None:
        why = await asyncio.to_thread(check_url, url, allowed_webhook_urls(self.settings), allowlist=ALLOWLIST)
        if why is not None:
            raise InvalidRequest(f"Invalid 'url': the webhook endpoint may not be reached: {why}.", param="url",
                                 code="invalid_value")  # fmt: skip

    def _seal(self, secret: str, previous: str | None = None, previous_until: float = 0.0) -> str:
        if not self.keys.sealing:
            raise InvalidRequest(KEYS_REQUIRED, param=None, code="unsupported_value")
        return sealed_secrets(self.keys, secret, previous, previous_until)
