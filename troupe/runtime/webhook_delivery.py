"""Webhook deliveries: how one is sent (:func:`send_event`), and the :class:`Deliverer` that works
through the outbox.

Ray-free. The outbox is the store's (:mod:`troupe.storage.contract.webhooks`): a delivery row is
written in the transaction that stores its event's cause, so an event is never lost and never
sent for something that was not stored. The deliverer runs beside the store, in the process that
owns it (the storage actor; the in-process runtime's :class:`~troupe.runtime.store_client.AsyncStore`),
so that there is one deliverer per store whatever the number of ingress replicas, nothing to
claim, and ``troupe eval run`` on its own Ray delivers its run's events too.

**When it works.** It reads the due deliveries when it starts (those a restart left pending are
sent then), and otherwise sleeps: until the store says a transaction wrote deliveries
(:attr:`~troupe.storage.duckdb_store.connection.Connection.on_webhook_events`, a thread-safe
:meth:`Deliverer.wake`), or until the next retry is due. A server with no webhook endpoint never
wakes it.

**An attempt** (:func:`send_event`) POSTs the event's body, byte for byte the same on every
attempt, with the Standard Webhooks headers the SDK's ``client.webhooks.unwrap`` verifies
(``webhook-id``: the delivery's id, stable for deduplication; ``webhook-timestamp``;
``webhook-signature``, :func:`~troupe.protocol.webhooks.signature_header`), through the MCP
servers' URL policy checked again at send time (:func:`~troupe.runtime.mcp_policy.check_url`) and
a pinned connection (:func:`~troupe.runtime.mcp_policy.pinned_transport`: a host that now resolves
to a refused address is not reached), without following redirects.

**Outcomes.** A 2xx answer: ``delivered``. A 5xx, 408 or 429 answer, a time-out (``timeout_s``)
or a connection error: retried after ``retry_initial_s``, doubling up to ``retry_max_s`` (±20%
jitter), until ``retry_for_s`` after the event; then ``failed``. Any other answer (a 3xx, a 4xx:
the receiver refused it), a URL the policy now refuses, or a secret that cannot be opened (sealed
with a key no longer configured): ``failed`` at once. Each attempt is recorded on the delivery
(attempts, last status code, last error), which is the delivery log. A delivery is sent at least
once: a process that stops between sending and recording sends it again after its restart, with
the same ``webhook-id``.

Example::

    deliverer = Deliverer(settings.webhooks, keys, store.call)
    deliverer.start()          # in the event loop; reads what is due
    deliverer.wake()           # from any thread: deliveries were written
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx2

from troupe.protocol.webhooks import signature_header
from troupe.runtime.mcp_policy import check_url, pinned_transport, url_guard
from troupe.runtime.settings import WebhookSettings
from troupe.storage.credentials import CredentialKeys, CredentialsUnavailable

__all__ = [
    "ALLOWED_URLS_ENV",
    "Attempt",
    "Deliverer",
    "allowed_webhook_urls",
    "http_clients",
    "sealed_secrets",
    "send_event",
    "signing_secrets",
]

log = logging.getLogger(__name__)

ALLOWED_URLS_ENV = "TROUPE_WEBHOOK_ALLOWED_URLS"
ALLOWLIST = "allowed webhook URLs ([webhooks] allowed_urls, TROUPE_WEBHOOK_ALLOWED_URLS)"
_PRUNE_EVERY_S = 3600.0
_RETRIED_STATUSES = frozenset({408, 429})
_ERROR_CHARS = 300

StoreCall = Callable[..., Awaitable[Any]]
"""``call(method, args, kwargs)`` of a store client (:meth:`~troupe.runtime.store_client.StoreClient.call`)."""


def allowed_webhook_urls(settings: WebhookSettings) -> tuple[str, ...]:
    """The allowlist in force: ``allowed_urls`` plus ``TROUPE_WEBHOOK_ALLOWED_URLS`` (read on each call)."""
    from_env = [p.strip() for p in os.environ.get(ALLOWED_URLS_ENV, "").split(",")]
    return tuple(settings.allowed_urls) + tuple(p for p in from_env if p)


def signing_secrets(keys: CredentialKeys, sealed: str, now: float) -> list[str]:
    """The secrets a delivery is signed with, current first: the previous one too while it is
    kept after a rotation. Raises: CredentialsUnavailable (sealed with a key that is gone)."""
    opened = keys.open(sealed)["signing"]
    kept = [opened["current"]]
    if opened.get("previous") and (opened.get("previous_until") or 0) > now:
        kept.append(opened["previous"])
    return kept


@dataclass(frozen=True, slots=True)
class Attempt:
    """What one attempt came to."""

    status_code: int | None
    """The endpoint's HTTP status; None when there was no answer."""
    error: str | None
    """Why it failed (None when it was delivered)."""
    retry: bool
    """Worth another attempt (5xx, 408, 429, a time-out, a connection error)."""

    @property
    def delivered(self) -> bool:
        return self.error is None


async def send_event(
    http: dict[bool, httpx2.AsyncClient], settings: WebhookSettings, url: str, secrets: list[str], webhook_id: str,
    body: bytes,
) -> Attempt:  # fmt: skip
    """One signed POST of ``body`` to ``url``. ``http``: a client for URLs allowed to reach private
    addresses (``True``) and one for the rest (``False``), each over a pinned transport."""
    patterns = allowed_webhook_urls(settings)
    why = await asyncio.to_thread(check_url, url, patterns, allowlist=ALLOWLIST)  # it may resolve the host
    if why is not None:
        return Attempt(None, f"the URL may not be reached: {why}", retry=False)
    client = http[url_guard(url, patterns).allow_private]
    timestamp = int(time.time())
    headers = {
        "content-type": "application/json",
        "user-agent": settings.user_agent,
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature_header(secrets, webhook_id, timestamp, body),
    }
    try:
        answer = await client.post(url, content=body, headers=headers, timeout=settings.timeout_s)
    except httpx2.TimeoutException:
        return Attempt(None, f"no answer within {settings.timeout_s:g} s", retry=True)
    except httpx2.HTTPError as exc:  # refused, reset, an address the pinned transport refused
        return Attempt(None, f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS], retry=True)
    if 200 <= answer.status_code < 300:
        return Attempt(answer.status_code, None, retry=False)
    text = answer.text.strip()
    error = f"HTTP {answer.status_code}" + (f": {text}" if text else "")
    retry = answer.status_code >= 500 or answer.status_code in _RETRIED_STATUSES
    return Attempt(answer.status_code, error[:_ERROR_CHARS], retry=retry)


def http_clients() -> dict[bool, httpx2.AsyncClient]:
    """The two clients :func:`send_event` takes: private addresses allowed (True) or not."""
    from troupe.runtime.mcp_policy import AddressGuard

    return {
        private: httpx2.AsyncClient(
            transport=pinned_transport(AddressGuard(allow_private=private)), follow_redirects=False
        )  # fmt: skip
        for private in (False, True)
    }


class Deliverer:
    """Works through the outbox of one store (module docstring).

    Args:
        settings: the ``[webhooks]`` settings.
        keys: what the endpoints' secrets are sealed with (``credentials_keys``).
        call: the store's ``call(method, args, kwargs)``.
    """

    def __init__(self, settings: WebhookSettings, keys: CredentialKeys, call: StoreCall) -> None:
        self.settings = settings
        self.keys = keys
        self._call = call
        self._loop: asyncio.AbstractEventLoop | None = None
        self._woken: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._http: dict[bool, httpx2.AsyncClient] | None = None
        self._pruned_at = 0.0
        self._lock = threading.Lock()

    @property
    def started(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        """Start working, in the running event loop (once; later calls do nothing)."""
        with self._lock:
            if self._task is not None:
                return
            self._loop = asyncio.get_running_loop()
            self._woken = asyncio.Event()
            self._task = self._loop.create_task(self._work())

    def wake(self) -> None:
        """Deliveries were written: look now. Thread-safe; before :meth:`start`, nothing to do
        (the first look reads them)."""
        loop, woken = self._loop, self._woken
        if loop is not None and woken is not None and not loop.is_closed():
            loop.call_soon_threadsafe(woken.set)

    async def close(self) -> None:
        """Stop (an attempt in flight is sent again after a restart)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._http is not None:
            await asyncio.gather(*(c.aclose() for c in self._http.values()), return_exceptions=True)
            self._http = None

    async def _work(self) -> None:
        assert self._woken is not None
        while True:
            self._woken.clear()
            try:
                later = await self._send_due()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the store is restarting, say: look again soon
                log.warning("webhook deliveries: cannot read the outbox; trying again", exc_info=True)
                later = time.time() + self.settings.retry_initial_s
            wait = None if later is None else max(0.0, later - time.time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), wait)

    async def _send_due(self) -> float | None:
        """Send every delivery due now; when the next one will be (None: none is pending)."""
        while True:
            now = time.time()
            due, later = await self._call("due_webhook_deliveries", (now, self.settings.concurrency))
            if not due:
                await self._prune(now)
                return later
            if self._http is None:
                self._http = http_clients()
            await asyncio.gather(*(self._attempt(d) for d in due))

    async def _attempt(self, delivery: dict[str, Any]) -> None:
        assert self._http is not None
        started = time.time()
        try:
            secrets = signing_secrets(self.keys, delivery["secrets"], started)
        except CredentialsUnavailable as exc:
            outcome = Attempt(None, f"the endpoint's signing secret cannot be opened: {exc}", retry=False)
        else:
            outcome = await send_event(self._http, self.settings, delivery["url"], secrets, delivery["id"],
                                       delivery["event"].encode())  # fmt: skip
        attempts = delivery["attempts"] + 1
        ended = time.time()
        record: dict[str, Any] = {"attempts": attempts, "last_attempt_at": started, "last_status_code": outcome.status_code,
                                  "last_error": outcome.error}  # fmt: skip
        if outcome.delivered:
            record |= {"status": "delivered", "delivered_at": ended}
        else:
            delay = min(self.settings.retry_initial_s * 2 ** (attempts - 1), self.settings.retry_max_s)
            next_at = ended + delay * random.uniform(0.8, 1.2)
            if outcome.retry and next_at <= delivery["created_at"] + self.settings.retry_for_s:
                record |= {"status": "pending", "next_attempt_at": next_at}
            else:
                record |= {"status": "failed"}
            log.info("webhook delivery %s to endpoint %s: attempt %d failed (%s)", delivery["id"],
                     delivery["endpoint_id"], attempts, outcome.error)  # fmt: skip
        await self._call("record_webhook_attempt", (delivery["tenant"], delivery["id"], record))

    async def _prune(self, now: float) -> None:
        if now - self._pruned_at < _PRUNE_EVERY_S:
            return
        self._pruned_at = now
        with contextlib.suppress(Exception):  # the next hour tries again
            await self._call("prune_webhook_deliveries", (now - self.settings.log_retention_s,))


def sealed_secrets(keys: CredentialKeys, current: str, previous: str | None = None, previous_until: float = 0.0) -> str:
    """An endpoint's secrets, sealed for the store (``fernet:…``). Raises: ValueError without keys."""
    if not keys.sealing:
        raise ValueError("no credentials_keys")
    kept = {"current": current, **({"previous": previous, "previous_until": previous_until} if previous else {})}
    sealed = keys.keep({"signing": kept})
    assert sealed is not None
    return sealed
