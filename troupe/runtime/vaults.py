"""Vaults and their credentials (the Agents API's vaults): :class:`VaultService`, what
``Runtime.vaults`` is, and how a session's turn gets its MCP servers' tokens from them.

Ray-free. Secrets never reach the store in plain text: a credential's secret values (a bearer
token; an OAuth access token, refresh token and client secret) are sealed with the configured
``credentials_keys`` (:class:`~troupe.storage.credentials.CredentialKeys`, Fernet) before the
store sees them, and no object, log line or error quotes them. A server without
``credentials_keys`` refuses to store a credential (400 naming the secret's field, saying how
to make a key): a vault is used across restarts and replicas, which memory alone cannot serve
(as an environment template's ``env``, :mod:`troupe.runtime.environments`).

**At a turn** (:meth:`VaultService.start`, :meth:`VaultService.authorize`): each ``mcp`` tool of
the request of each of the turn's responses that has
no ``authorization`` (nor an ``Authorization`` header) of its own gets the token of the one
active credential of the session's vaults whose ``mcp_server_url`` matches its ``server_url``
(:func:`~troupe.protocol.vaults.server_key`): as its ``authorization``, so it takes the path a
client's own ``authorization`` takes (a durable run's row keeps it sealed or in memory only,
:mod:`troupe.storage.credentials`; the response echoes its tools without it). Two credentials
matching one server is a 400 naming ``vault_ids``, unless the agent's tool names one
(``credential_id``: it must be in the vaults and for that server). No match, or a credential
that cannot be opened (sealed with a key that is gone), and the tool goes without: the MCP
server's answer (a 401) is reported as it is today.

**OAuth refresh**: an ``mcp_oauth`` credential with a ``refresh`` configuration whose
``expires_at`` has passed (or is within :data:`REFRESH_EARLY_S`) is refreshed before its token is
used: ``grant_type=refresh_token`` to its token endpoint (client auth ``none``,
``client_secret_basic`` or ``client_secret_post``), through the MCP URL policy (the endpoint is
checked as a request's MCP server URL is, when the credential is made and when connecting); the
new access token (and a rotated refresh token) is sealed and stored with its new expiry. A
refresh that fails is logged (the endpoint's status, never a token) and the old token is sent.
A 401 from the MCP server refreshes it too, whatever its expiry (:meth:`VaultService.start`):
a refused listing at once, and the response is started again; a refused call before the
session's next response.

Example::

    vaults = VaultService(settings, store, CredentialKeys([new_key()]))
    vault = await vaults.create_vault("acme", {"name": "docs"})
    await vaults.create_credential("acme", vault["id"], {"name": "docs", "auth": {
        "type": "static_bearer", "mcp_server_url": "https://mcp.example.com/mcp", "token": "sk-…"}})
    body = await vaults.authorize("acme", [vault["id"]], body)   # its mcp tool now has authorization
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote_plus

import httpx2

from troupe.protocol import ExternalConnectorError, InvalidRequest
from troupe.protocol.vaults import (
    credential_deleted,
    credential_not_found,
    credential_object,
    expiry_of,
    new_credential_id,
    new_vault_id,
    parse_credential_create,
    parse_credential_update,
    parse_vault_create,
    parse_vault_update,
    refused_servers,
    server_key,
    vault_deleted,
    vault_not_found,
    vault_object,
)
from troupe.runtime.mcp_policy import AddressGuard, allowed_url_patterns, check_url, pinned_transport
from troupe.runtime.settings import RuntimeSettings
from troupe.runtime.store_client import StoreClient
from troupe.storage import Order, Page
from troupe.storage.credentials import CredentialKeys, CredentialsUnavailable

__all__ = ["KEYS_REQUIRED", "REFRESH_EARLY_S", "VaultService"]

log = logging.getLogger(__name__)

REFRESH_EARLY_S = 60.0
"""An access token this close to its ``expires_at`` is refreshed before it is used."""
_REFRESH_TIMEOUT_S = 10.0

KEYS_REQUIRED = (
    "Vault credentials are kept sealed with the server's credentials_keys, and none are set on this server, so it "
    "cannot store '{param}'. Set a key and restart the server: TROUPE_CREDENTIALS_KEYS=\"$(python -c 'from "
    "troupe.storage.credentials import new_key; print(new_key())')\" (docs/security.md, Keys)."
)
"""The 400 of a credential's secret on a server without ``credentials_keys``."""


class VaultService:
    """Vaults, their credentials, and the tokens a session's turn gets from them (module docstring).

    Args:
        settings: the runtime's settings (the MCP URL policy a token endpoint is checked by).
        store: the store client (its vaults area).
        keys: what seals the credentials' secrets (``credentials_keys``).
    """

    def __init__(self, settings: RuntimeSettings, store: StoreClient, keys: CredentialKeys) -> None:
        self.settings = settings
        self.store = store
        self.keys = keys
        self._refreshing: dict[str, asyncio.Lock] = {}
        """Per credential refreshed here: one refresh at a time (a rotated refresh token is used once)."""

    # -- vaults ------------------------------------------------------------------------------

    async def create_vault(self, tenant: str, body: Any) -> dict[str, Any]:
        """``POST /v1/vaults``. Raises: InvalidRequest (:func:`~troupe.protocol.vaults.parse_vault_create`)."""
        fields = parse_vault_create(body)
        vault = {"id": new_vault_id(), "created_at": time.time(), "status": "active", **fields}
        return vault_object(await self.store.create_vault(tenant, vault))

    async def get_vault(self, tenant: str, vault_id: str) -> dict[str, Any]:
        """Raises: NotFound: no such vault of the tenant's (naming ``vault_id``)."""
        return vault_object(await self._vault(tenant, vault_id))

    async def list_vaults(
        self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc",
        statuses: Sequence[str] = ("active", "archived"), metadata: dict[str, str] | None = None,
    ) -> Page:  # fmt: skip
        page = await self.store.list_vaults(tenant, after=after, limit=limit, order=order, statuses=statuses,
                                            metadata=metadata)  # fmt: skip
        return Page(data=[vault_object(v) for v in page.data], has_more=page.has_more)

    async def update_vault(self, tenant: str, vault_id: str, body: Any) -> dict[str, Any]:
        """``POST /v1/vaults/{id}``. Raises: NotFound; InvalidRequest (:func:`~troupe.protocol.vaults.parse_vault_update`)."""
        changes = parse_vault_update(body)
        updated = await self.store.update_vault(tenant, vault_id, changes) if changes else await self._vault(tenant, vault_id)
        if updated is None:
            raise vault_not_found(vault_id)
        return vault_object(updated)

    async def delete_vault(self, tenant: str, vault_id: str) -> dict[str, Any]:
        """Delete the vault and all its credentials. Raises: NotFound."""
        if not await self.store.delete_vault(tenant, vault_id):
            raise vault_not_found(vault_id)
        return vault_deleted(vault_id)

    async def _vault(self, tenant: str, vault_id: str, param: str = "vault_id") -> dict[str, Any]:
        found = await self.store.get_vault(tenant, vault_id)
        if found is None:
            raise vault_not_found(vault_id, param)
        return found

    async def check_vault_ids(self, tenant: str, vault_ids: Sequence[str], param: str = "vault_ids") -> None:
        """A session's ``vault_ids``: each the tenant's, and active.

        Raises:
            NotFound: no such vault of the tenant's (naming ``vault_ids[i]``).
            InvalidRequest: a vault that is not active (naming ``vault_ids[i]``).
        """
        for index, vault_id in enumerate(vault_ids):
            vault = await self._vault(tenant, vault_id, f"{param}[{index}]")
            if vault["status"] != "active":
                raise InvalidRequest(f"Invalid '{param}[{index}]': vault {vault_id} is {vault['status']}, not active.",
                                     param=f"{param}[{index}]", code="invalid_value")  # fmt: skip

    # -- credentials -------------------------------------------------------------------------

    async def create_credential(self, tenant: str, vault_id: str, body: Any) -> dict[str, Any]:
        """``POST /v1/vaults/{id}/credentials``: a new credential, its secrets sealed; its object.

        Raises:
            InvalidRequest: the body (:func:`~troupe.protocol.vaults.parse_credential_create`); a
                token endpoint the MCP URL policy refuses; no ``credentials_keys`` (naming the secret).
            NotFound: no such vault of the tenant's.
        """
        fields, secrets = parse_credential_create(body)
        await self._vault(tenant, vault_id)
        await self._check_endpoint(fields["auth"].get("refresh"))
        sealed = self._seal(secrets)
        now = time.time()
        credential = {"id": new_credential_id(), "vault_id": vault_id, "created_at": now, "updated_at": now,
                      "status": "active", **fields}  # fmt: skip
        made = await self.store.create_credential(tenant, credential, sealed)
        if made is None:  # deleted meanwhile
            raise vault_not_found(vault_id)
        return credential_object(made)

    async def get_credential(self, tenant: str, vault_id: str, credential_id: str) -> dict[str, Any]:
        """Raises: NotFound: no such vault, or credential of it (naming ``credential_id``)."""
        return credential_object((await self._credential(tenant, vault_id, credential_id))[0])

    async def list_credentials(
        self, tenant: str, vault_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc",
        statuses: Sequence[str] = ("active", "archived"), metadata: dict[str, str] | None = None,
    ) -> Page:  # fmt: skip
        """Raises: NotFound: no such vault of the tenant's."""
        await self._vault(tenant, vault_id)
        page = await self.store.list_credentials(tenant, vault_id, after=after, limit=limit, order=order,
                                                 statuses=statuses, metadata=metadata)  # fmt: skip
        return Page(data=[credential_object(c) for c in page.data], has_more=page.has_more)

    async def update_credential(self, tenant: str, vault_id: str, credential_id: str, body: Any) -> dict[str, Any]:
        """``POST /v1/vaults/{id}/credentials/{cred_id}``: new metadata, or a rotation of its
        secrets (:func:`~troupe.protocol.vaults.parse_credential_update`); its object.

        Raises:
            NotFound: no such vault or credential. InvalidRequest: the body; no ``credentials_keys``.
        """
        current, kept = await self._credential(tenant, vault_id, credential_id)
        changes, secrets = parse_credential_update(body, current["auth"])
        sealed = None
        if secrets:
            sealed = self._seal({**self._kept_secrets(kept, current, secrets), **secrets})
        updated = await self.store.update_credential(tenant, vault_id, credential_id, changes, time.time(), sealed)
        if updated is None:
            raise credential_not_found(credential_id)
        return credential_object(updated)

    async def delete_credential(self, tenant: str, vault_id: str, credential_id: str) -> dict[str, Any]:
        """Raises: NotFound: no such vault or credential."""
        await self._vault(tenant, vault_id)
        if not await self.store.delete_credential(tenant, vault_id, credential_id):
            raise credential_not_found(credential_id)
        return credential_deleted(credential_id)

    async def _credential(self, tenant: str, vault_id: str, credential_id: str) -> tuple[dict[str, Any], str]:
        await self._vault(tenant, vault_id)
        found = await self.store.get_credential(tenant, vault_id, credential_id)
        if found is None:
            raise credential_not_found(credential_id)
        return found

    def _seal(self, secrets: dict[str, Any]) -> str:
        """``secrets`` sealed. Raises: InvalidRequest: no key to seal them with (naming the first secret's field)."""
        if not self.keys.sealing:
            param = {"token": "auth.token", "access_token": "auth.access_token", "refresh_token": "auth.refresh.refresh_token",
                     "client_secret": "auth.refresh.token_endpoint_auth.client_secret"}[next(iter(secrets))]  # fmt: skip
            raise InvalidRequest(KEYS_REQUIRED.format(param=param), param=param, code="unsupported_value")
        sealed = self.keys.keep({"auth": secrets})
        assert sealed is not None
        return sealed

    def _kept_secrets(self, kept: str, credential: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
        """The stored secrets a rotation giving ``given`` keeps.

        Raises:
            InvalidRequest: no key to seal with (as :meth:`_seal`); they cannot be opened here (sealed
                with a key that is gone) and ``given`` does not replace them all.
        """
        if not self.keys.sealing:
            self._seal(given)  # raises, naming the secret
        try:
            return self._open(kept)
        except CredentialsUnavailable:
            needed = _SECRETS_OF[credential["auth"]["type"]](credential["auth"])
            missing = [name for name in needed if name not in given]
            if missing:
                raise InvalidRequest(f"Invalid 'auth': the credential's stored secrets were sealed with a key that is "
                                     f"not in this server's credentials_keys, so a rotation must give them all "
                                     f"(missing: {', '.join(missing)}).", param="auth", code="invalid_value") from None
            return {}

    def _open(self, kept: str) -> dict[str, Any]:
        """A credential's secrets. Raises: CredentialsUnavailable: sealed with a key this server does not have."""
        return dict(self.keys.open(kept)["auth"])

    async def _check_endpoint(self, refresh: dict[str, Any] | None) -> None:
        """A token endpoint must pass the MCP URL policy (this server posts the refresh token there)."""
        if refresh is None:
            return
        url = refresh["token_endpoint"]
        why = await asyncio.to_thread(check_url, url, allowed_url_patterns(self.settings))
        if why is not None:
            param = "auth.refresh.token_endpoint"
            raise InvalidRequest(f"Invalid '{param}': this server may not reach {url}: {why}.", param=param,
                                 code="invalid_value")  # fmt: skip

    # -- sessions ----------------------------------------------------------------------------

    async def authorize(
        self, tenant: str, vault_ids: Sequence[str], body: dict[str, Any], chosen: Mapping[int, str] | None = None
    ) -> dict[str, Any]:  # fmt: skip
        """``body`` (a ``POST /v1/responses`` body) with its ``mcp`` tools authorized from the
        vaults ``vault_ids`` (module docstring); ``body`` itself when none is (not changed).
        ``chosen``: the credential an agent's tool names (its ``credential_id``), by the tool's index.

        Raises:
            InvalidRequest: as :meth:`check_tools`.
        """
        picked = await self._pick(tenant, vault_ids, body.get("tools") or [], chosen or {})
        if not picked:
            return body
        tools = list(body["tools"])
        for index, (credential, kept) in picked.items():
            token = await self._token(tenant, credential, kept)
            if token is not None:
                tools[index] = {**tools[index], "authorization": token}
        return {**body, "tools": tools}

    async def start(
        self, tenant: str, vault_ids: Sequence[str], chosen: Mapping[int, str], body: dict[str, Any],
        start: Callable[[dict[str, Any]], Awaitable[None]], *, previous: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        """Start a session's response through ``start``, with ``body`` authorized (:meth:`authorize`).

        Where an MCP server refused the token an ``mcp_oauth`` credential with ``refresh`` gave it
        (HTTP 401), the credential is refreshed whatever its expiry: before, for the calls of
        ``previous`` (the session's response before this one) refused so; and after, when the
        server's listing is refused so (``start`` raised the 424 naming its ``tools[i]``), and
        ``start`` is called once more (nothing was stored of the refused start).

        Raises:
            InvalidRequest: as :meth:`check_tools`. ExternalConnectorError: as ``start`` raised it.
        """
        if not (vault_ids or chosen):
            await start(body)
            return
        if previous is not None and (refused := refused_servers(previous)):
            # created_at is whole seconds; the refused token was given within that second, so
            # only a change from the next second on is surely a refresh made after it.
            await self._refresh_refused(tenant, vault_ids, body, chosen, refused, since=previous["created_at"] + 1)
        began = time.time()
        try:
            await start(await self.authorize(tenant, vault_ids, body, chosen))
        except ExternalConnectorError as exc:
            label = _refused_listing(exc, body)
            if label is None or not await self._refresh_refused(tenant, vault_ids, body, chosen, {label}, since=began):
                raise
            await start(await self.authorize(tenant, vault_ids, body, chosen))

    async def _refresh_refused(
        self, tenant: str, vault_ids: Sequence[str], body: dict[str, Any], chosen: Mapping[int, str],
        labels: set[str], *, since: float,
    ) -> bool:  # fmt: skip
        """Refresh the refreshable credentials the tools ``labels`` get (their servers answered
        401 to the tokens given before ``since``); whether any has a new token."""
        tools = body.get("tools") or []
        refreshed = False
        for index, (credential, _) in (await self._pick(tenant, vault_ids, tools, chosen)).items():
            auth = credential["auth"]
            if tools[index].get("server_label") in labels and auth["type"] == "mcp_oauth" and auth.get("refresh"):
                refreshed = await self._refresh_now(tenant, credential, since) or refreshed
        return refreshed

    async def check_tools(
        self, tenant: str, vault_ids: Sequence[str], tools: list[dict[str, Any]], chosen: Mapping[int, str]
    ) -> None:  # fmt: skip
        """What :meth:`authorize` refuses, refused when a session is made (no token is read).

        Raises:
            InvalidRequest: two credentials match one tool's server and it chose none (naming
                ``vault_ids``); the credential a tool chose is not in the vaults, or is for
                another server (naming ``agent.tools[i].credential_id``).
        """
        await self._pick(tenant, vault_ids, tools, chosen)

    async def _pick(
        self, tenant: str, vault_ids: Sequence[str], tools: list[dict[str, Any]], chosen: Mapping[int, str]
    ) -> dict[int, tuple[dict[str, Any], str]]:  # fmt: skip
        """The credential (record, sealed secrets) each tool that wants one gets, by its index."""
        wanted = [(i, t) for i, t in enumerate(tools) if _wants_authorization(t)]
        if not wanted or not (vault_ids or chosen):
            return {}
        credentials = await self.store.vault_credentials(tenant, list(vault_ids))
        by_id = {credential["id"]: (credential, kept) for credential, kept in credentials}
        by_server: dict[str, list[tuple[dict[str, Any], str]]] = {}
        for credential, kept in credentials:
            by_server.setdefault(server_key(credential["auth"]["mcp_server_url"]), []).append((credential, kept))
        picked = {}
        for index, tool in wanted:
            key = server_key(tool["server_url"])
            if index in chosen:
                param = f"agent.tools[{index}].credential_id"
                found = by_id.get(chosen[index])
                if found is None:
                    raise InvalidRequest(f"Invalid '{param}': credential {chosen[index]} is in none of the session's "
                                         "vaults (vault_ids).", param=param, code="invalid_value")  # fmt: skip
                if server_key(found[0]["auth"]["mcp_server_url"]) != key:
                    raise InvalidRequest(f"Invalid '{param}': credential {chosen[index]} is for "
                                         f"{found[0]['auth']['mcp_server_url']}, not this tool's server "
                                         f"({tool['server_url']}).", param=param, code="invalid_value")  # fmt: skip
                picked[index] = found
                continue
            matches = by_server.get(key, [])
            if len(matches) > 1:
                names = ", ".join(f"{c['id']} (vault {c['vault_id']})" for c, _ in matches)
                raise InvalidRequest(f"Invalid 'vault_ids': {len(matches)} credentials match the MCP server "
                                     f"'{tool.get('server_label')}' ({tool['server_url']}): {names}. Name one with "
                                     "the agent's tools[i].credential_id, or keep one of them in the session's vaults.",
                                     param="vault_ids", code="invalid_value")  # fmt: skip
            if matches:
                picked[index] = matches[0]
        return picked

    async def _token(self, tenant: str, credential: dict[str, Any], kept: str) -> str | None:
        """The token to send for ``credential`` (refreshed first when it is due); None when its
        secrets cannot be opened here (logged)."""
        try:
            secrets = self._open(kept)
        except CredentialsUnavailable as exc:
            log.warning("vault credential %s cannot be used: %s", credential["id"], exc)
            return None
        auth = credential["auth"]
        if auth["type"] == "static_bearer":
            return str(secrets["token"])
        if not _due(auth):
            return str(secrets["access_token"])
        lock = self._refreshing.setdefault(credential["id"], asyncio.Lock())
        async with lock:
            found = await self.store.get_credential(tenant, credential["vault_id"], credential["id"])
            if found is None:
                return None  # deleted meanwhile
            credential, kept = found
            secrets = self._open(kept)
            if not _due(credential["auth"]):  # refreshed meanwhile
                return str(secrets["access_token"])
            return (await self._refresh(tenant, credential, secrets))[0]

    async def _refresh_now(self, tenant: str, credential: dict[str, Any], since: float) -> bool:
        """Refresh ``credential`` whatever its expiry (its server refused its token), unless it
        changed since ``since`` (refreshed or rotated meanwhile); whether it has a new token."""
        async with self._refreshing.setdefault(credential["id"], asyncio.Lock()):
            found = await self.store.get_credential(tenant, credential["vault_id"], credential["id"])
            if found is None:
                return False
            credential, kept = found
            if credential["updated_at"] >= since:
                return True
            try:
                secrets = self._open(kept)
            except CredentialsUnavailable:
                return False
            return (await self._refresh(tenant, credential, secrets))[1]

    async def _refresh(self, tenant: str, credential: dict[str, Any], secrets: dict[str, Any]) -> tuple[str, bool]:
        """Refresh ``credential``'s access token at its token endpoint, store it sealed; the
        token to send (the old one when the refresh failed) and whether it is a new one."""
        refresh = credential["auth"]["refresh"]
        form = {"grant_type": "refresh_token", "refresh_token": secrets["refresh_token"]}
        form |= {key: refresh[key] for key in ("scope", "resource") if refresh.get(key)}
        auth: tuple[str, str] | None = None
        kind = refresh["token_endpoint_auth"]["type"]
        if kind == "client_secret_basic":  # RFC 6749 2.3.1: each form-encoded, then Basic
            auth = (quote_plus(refresh["client_id"]), quote_plus(secrets["client_secret"]))
        else:
            form["client_id"] = refresh["client_id"]
            if kind == "client_secret_post":
                form["client_secret"] = secrets["client_secret"]
        url = refresh["token_endpoint"]
        patterns = allowed_url_patterns(self.settings)
        why = await asyncio.to_thread(check_url, url, patterns)
        try:
            if why is not None:
                raise httpx2.ConnectError(f"the URL policy refuses it: {why}")
            guard = AddressGuard(allow_private=bool(patterns), allowed_urls=patterns)
            async with httpx2.AsyncClient(transport=pinned_transport(guard), timeout=_REFRESH_TIMEOUT_S) as http:
                answer = await http.post(url, data=form, auth=auth or httpx2.USE_CLIENT_DEFAULT,
                                         headers={"Accept": "application/json"})  # fmt: skip
            answer.raise_for_status()
            got = answer.json()
            token = got["access_token"]
            if not isinstance(token, str) or not token:
                raise ValueError("no access_token in the answer")
        except (httpx2.HTTPError, ValueError, KeyError, TypeError) as exc:
            reason = f"HTTP {exc.response.status_code}" if isinstance(exc, httpx2.HTTPStatusError) else type(exc).__name__
            log.warning("refreshing vault credential %s at %s failed (%s): its old access token is sent",
                        credential["id"], url, reason)  # fmt: skip
            return str(secrets["access_token"]), False
        new = {**secrets, "access_token": token}
        if isinstance(got.get("refresh_token"), str) and got["refresh_token"]:
            new["refresh_token"] = got["refresh_token"]
        expires_in = got.get("expires_in")
        expires_at = None
        if isinstance(expires_in, int | float) and not isinstance(expires_in, bool):
            expires_at = datetime.fromtimestamp(time.time() + expires_in, UTC).isoformat(timespec="seconds")
        changes = {"auth": {**credential["auth"], "expires_at": expires_at}}
        await self.store.update_credential(tenant, credential["vault_id"], credential["id"], changes, time.time(),
                                           self._seal(new))  # fmt: skip
        return token, True


def _refused_listing(error: ExternalConnectorError, body: dict[str, Any]) -> str | None:
    """The label of the tool whose server refused the listing with HTTP 401 (the 424
    :func:`~troupe.agentloop.mcp.listing_failed` words), else None."""
    index = re.fullmatch(r"tools\[(\d+)\]", error.param or "")
    tools = body.get("tools") or []
    if index is None or "Http status code: 401" not in error.message or int(index[1]) >= len(tools):
        return None
    label = tools[int(index[1])].get("server_label")
    return label if isinstance(label, str) else None


def _oauth_secrets(auth: dict[str, Any]) -> list[str]:
    refresh = auth.get("refresh")
    if refresh is None:
        return ["access_token"]
    return ["access_token", "refresh_token"] + (["client_secret"] if refresh["token_endpoint_auth"]["type"] != "none" else [])


_SECRETS_OF = {"static_bearer": lambda auth: ["token"], "mcp_oauth": _oauth_secrets}
"""A credential's secret names, by its type, from its public ``auth``."""


def _wants_authorization(tool: Any) -> bool:
    """An ``mcp`` tool with a URL and no credentials of its own (a tool's own are kept)."""
    if not isinstance(tool, dict) or tool.get("type") != "mcp" or not isinstance(tool.get("server_url"), str):
        return False
    headers = tool.get("headers") or {}
    return not tool.get("authorization") and not any(str(k).lower() == "authorization" for k in headers)


def _due(auth: dict[str, Any]) -> bool:
    """An ``mcp_oauth`` credential to refresh before use: it can be, and its token has expired (or nearly)."""
    expiry = expiry_of(auth)
    return auth.get("refresh") is not None and expiry is not None and expiry <= time.time() + REFRESH_EARLY_S
