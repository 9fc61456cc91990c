"""Vaults and their credentials (OpenAI's Agents API, beta: ``client.beta.agents.vaults``): the
bodies, the objects, and the rule that picks a credential for an MCP server.

A vault holds credentials that sessions use to reach MCP servers. A credential's secret values
(a bearer token, an OAuth access token, a refresh token, a client secret) are **write-only**:
they are parsed apart from the rest (:func:`parse_credential_create` gives the public credential
and its secrets separately), sealed by the runtime before the store sees them
(:mod:`troupe.runtime.vaults`), and never part of an object this module makes.

Bodies::

    POST /v1/vaults                  {"name": str | omitted, "metadata": {str: str} | null}
    POST /v1/vaults/{id}             {"name": str | null, "metadata": {str: str}}  (each optional)
    POST /v1/vaults/{id}/credentials {"name": str, "metadata": {str: str}, "auth": <auth>}
    POST /v1/vaults/{id}/credentials/{cred_id}  {"metadata": {…}, "auth": <rotation>}  (each optional)

    <auth> = {"type": "static_bearer", "mcp_server_url": url, "token": secret}
           | {"type": "mcp_oauth", "mcp_server_url": url, "access_token": secret,
              "expires_at": RFC 3339 | null,
              "refresh": {"client_id", "token_endpoint": url, "refresh_token": secret,
                          "token_endpoint_auth": {"type": "none"}
                                               | {"type": "client_secret_basic" | "client_secret_post",
                                                  "client_secret": secret},
                          "resource": str | null, "scope": str | null} | null}

Names are trimmed and must hold 1 to 256 UTF-8 bytes; metadata is at most 16 pairs, keys up to
64 and values up to 512 characters (as the SDK says, and as every other metadata here).

What is refused, naming the field: an ``environment_variable`` credential (``auth.type``; our
sandbox's egress proxy tunnels HTTPS without reading it, so it cannot put a secret in place of
a placeholder inside TLS), a rotation of another type than the credential's (``auth.type``),
a secret that is empty or holds a line break or NUL (it goes into an HTTP header), an
``mcp_server_url`` that is not an http(s) URL, an ``expires_at`` that is not RFC 3339.

**Which credential an MCP server gets** (:func:`server_key`): a credential's ``mcp_server_url``
and an MCP tool's ``server_url`` match when they are equal once normalised: the scheme and host
lower-cased, a default port (80 for http, 443 for https) dropped, one trailing ``/`` of the
path dropped, the fragment dropped; the path (its case too) and the query must be the same.

Status: the SDK's ``VaultStatus`` is ``active`` or ``archived``, and its lists filter by it; it
has no call that archives, so every vault and credential here is ``active`` and
``status=archived`` lists none.

Example::

    >>> public, secrets = parse_credential_create({"name": " docs ", "auth": {
    ...     "type": "static_bearer", "mcp_server_url": "https://MCP.example.com/mcp/", "token": "sk-1"}})
    >>> public["name"], public["auth"], secrets
    ('docs', {'type': 'static_bearer', 'mcp_server_url': 'https://MCP.example.com/mcp/'}, {'token': 'sk-1'})
    >>> server_key("https://MCP.example.com:443/mcp/") == server_key("https://mcp.example.com/mcp")
    True
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from .errors import InvalidRequest, NotFound, check_http_url, object_body, show_value, wrong_type
from .ids import new_id
from .request import check_metadata

__all__ = [
    "AUTH_TYPES",
    "CREDENTIAL",
    "MAX_NAME_BYTES",
    "MAX_SECRET_CHARS",
    "MAX_VAULT_IDS",
    "SERVED_AUTH_TYPES",
    "VAULT",
    "VAULT_STATUSES",
    "credential_deleted",
    "credential_not_found",
    "credential_object",
    "expiry_of",
    "new_credential_id",
    "new_vault_id",
    "parse_credential_create",
    "parse_credential_update",
    "parse_status_filter",
    "parse_vault_create",
    "parse_vault_ids",
    "parse_vault_update",
    "refused_servers",
    "server_key",
    "vault_deleted",
    "vault_not_found",
    "vault_object",
]

VAULT = "vault"
"""A vault's id prefix (OpenAI does not document it; ``vault_…`` is ours)."""
CREDENTIAL = "vcred"
"""A vault credential's id prefix (ours)."""

MAX_NAME_BYTES = 256
"""A vault's or credential's name, trimmed: 1 to this many UTF-8 bytes (the SDK's words)."""
MAX_SECRET_CHARS = 16_384
"""The longest secret value taken (a token is sent in an HTTP header)."""
MAX_VAULT_IDS = 10
"""The most vaults a session names (the SDK's limit for an environment's; ours for a session's)."""

VAULT_STATUSES = ("active", "archived")
"""The SDK's ``VaultStatus``: what a list's ``status`` filter may name."""
AUTH_TYPES = ("static_bearer", "mcp_oauth", "environment_variable")
"""The SDK's credential ``auth.type`` values."""
SERVED_AUTH_TYPES = ("static_bearer", "mcp_oauth")
"""Those served here (an ``environment_variable`` credential is refused: module docstring)."""
_ENDPOINT_AUTH_TYPES = ("none", "client_secret_basic", "client_secret_post")

_ENV_VARIABLE_REFUSED = (
    "Unsupported value: 'auth.type' 'environment_variable'. Such a credential asks the sandbox's egress proxy to put "
    "the secret in place of a placeholder inside HTTPS requests, and this server's proxy tunnels HTTPS without "
    "reading it (it does not intercept TLS), so it cannot. Give the secret to the environment's own env instead, or "
    "use a static_bearer or mcp_oauth credential for an MCP server."
)


def new_vault_id() -> str:
    return new_id(VAULT)


def new_credential_id() -> str:
    return new_id(CREDENTIAL)


# -- vaults ------------------------------------------------------------------------------


def parse_vault_create(body: Any) -> dict[str, Any]:
    """``POST /v1/vaults``'s body: ``{"name": str | None, "metadata": {…}}``.

    Raises:
        InvalidRequest: an unknown key, a name not 1 to 256 bytes once trimmed, bad metadata.
    """
    body = object_body(body, "", ("name", "metadata"))
    name = body.get("name")
    return {"name": None if name is None else _name(name, "name"), "metadata": dict(check_metadata(body.get("metadata")) or {})}


def parse_vault_update(body: Any) -> dict[str, Any]:
    """``POST /v1/vaults/{id}``'s body: the fields given (``name`` null clears it; ``metadata``
    replaces all of it, ``{}`` clears it).

    Raises:
        InvalidRequest: as :func:`parse_vault_create`; ``metadata`` null (give ``{}`` to clear it).
    """
    body = object_body(body, "", ("name", "metadata"))
    changes: dict[str, Any] = {}
    if "name" in body:
        changes["name"] = None if body["name"] is None else _name(body["name"], "name")
    if "metadata" in body:
        if body["metadata"] is None:
            raise wrong_type("metadata", "an object (give {} to clear it)", None)
        changes["metadata"] = dict(check_metadata(body["metadata"]) or {})
    return changes


def vault_object(vault: dict[str, Any]) -> dict[str, Any]:
    """The wire ``vault`` of a stored one (``{"id", "created_at", "name", "metadata", "status"}``)."""
    return {"id": vault["id"], "object": "vault", "created_at": int(vault["created_at"]), "metadata": vault["metadata"],
            "name": vault["name"]}  # fmt: skip


def vault_deleted(vault_id: str) -> dict[str, Any]:
    return {"id": vault_id, "object": "vault.deleted", "deleted": True}


def vault_not_found(vault_id: str, param: str = "vault_id") -> NotFound:
    return NotFound(f"Vault with id '{vault_id}' not found.", param=param)


def parse_vault_ids(value: Any, param: str = "vault_ids") -> list[str]:
    """A session's ``vault_ids`` (null: none): distinct vault ids, at most :data:`MAX_VAULT_IDS`.

    Raises:
        InvalidRequest: not an array of strings, an id that is no vault's shape, a repeat, too many.
    """
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise wrong_type(param, "an array of vault IDs", value)
    if len(value) > MAX_VAULT_IDS:
        raise InvalidRequest(f"Invalid '{param}': at most {MAX_VAULT_IDS} vaults, got {len(value)}.", param=param,
                             code="array_above_max_length")  # fmt: skip
    for index, vault_id in enumerate(value):
        if not vault_id.startswith(f"{VAULT}_"):
            raise InvalidRequest(f"Invalid '{param}[{index}]': {show_value(vault_id)}. Expected an ID that begins with "
                                 f"'{VAULT}_'.", param=f"{param}[{index}]", code="invalid_value")  # fmt: skip
        if vault_id in value[:index]:
            raise InvalidRequest(f"Invalid '{param}[{index}]': {vault_id} is named twice.", param=f"{param}[{index}]",
                                 code="invalid_value")  # fmt: skip
    return list(value)


def parse_status_filter(values: list[str]) -> tuple[str, ...]:
    """A list's ``status`` filter (``status=active`` or ``status[]=…`` repeated); every status
    when none is given.

    Raises:
        InvalidRequest: a value that is no ``VaultStatus`` (naming ``status``).
    """
    for value in values:
        if value not in VAULT_STATUSES:
            raise InvalidRequest(f"Invalid value for 'status': {show_value(value)}. Expected one of 'active', "
                                 "'archived'.", param="status", code="invalid_value")  # fmt: skip
    return tuple(dict.fromkeys(values)) or VAULT_STATUSES


# -- credentials -------------------------------------------------------------------------


def parse_credential_create(body: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``POST /v1/vaults/{id}/credentials``'s body: the public credential (``{"name",
    "metadata", "auth"}``, ``auth`` without its secrets, as the SDK's ``CredentialAuth``) and
    the secrets apart (``{"token"}`` or ``{"access_token", "refresh_token"?, "client_secret"?}``).

    Raises:
        InvalidRequest: naming the field (module docstring).
    """
    body = object_body(body, "", ("name", "metadata", "auth"))
    for key in ("name", "auth"):
        if key not in body:
            raise _missing(key)
    auth = object_body(body["auth"], "auth", _AUTH_KEYS)
    kind = auth.get("type")
    if kind == "environment_variable":
        raise InvalidRequest(_ENV_VARIABLE_REFUSED, param="auth.type", code="unsupported_value")
    if kind not in SERVED_AUTH_TYPES:
        raise _missing("auth.type") if kind is None else _one_of("auth.type", kind, AUTH_TYPES)
    object_body(auth, "auth", _AUTH_KEYS_OF[kind])
    url = check_http_url(_required(auth, "mcp_server_url", "auth"), "auth.mcp_server_url")
    public: dict[str, Any] = {"type": kind, "mcp_server_url": url}
    if kind == "static_bearer":
        secrets = {"token": _secret(_required(auth, "token", "auth"), "auth.token")}
    else:
        secrets = {"access_token": _secret(_required(auth, "access_token", "auth"), "auth.access_token")}
        public["expires_at"] = _expires_at(auth.get("expires_at"))
        public["refresh"] = None
        if auth.get("refresh") is not None:
            public["refresh"], refresh_secrets = _refresh(auth["refresh"])
            secrets |= refresh_secrets
    credential = {"name": _name(body["name"], "name"), "metadata": dict(check_metadata(body.get("metadata")) or {}),
                  "auth": public}  # fmt: skip
    return credential, secrets


def parse_credential_update(body: Any, auth: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``POST /v1/vaults/{id}/credentials/{cred_id}``'s body, for a credential whose public
    ``auth`` is ``auth``: the changes to its object (``metadata``, ``auth``: the whole new
    public auth) and the secrets that replace its own (the keys given; the others are kept).

    A rotation keeps the credential's type, URL and token endpoint. For ``mcp_oauth``: a new
    ``access_token`` clears ``expires_at`` unless one is given; ``expires_at`` null clears it;
    ``refresh.refresh_token`` and ``refresh.token_endpoint_auth.client_secret`` omitted or null
    keep the stored ones; ``refresh.scope`` omitted keeps it, null clears it.

    Raises:
        InvalidRequest: naming the field: another type (``auth.type``), ``refresh`` for a
            credential that has none, another token endpoint auth type.
    """
    body = object_body(body, "", ("metadata", "auth"))
    changes: dict[str, Any] = {}
    secrets: dict[str, Any] = {}
    if "metadata" in body:
        if body["metadata"] is None:
            raise wrong_type("metadata", "an object (give {} to clear it)", None)
        changes["metadata"] = dict(check_metadata(body["metadata"]) or {})
    if body.get("auth") is None:
        return changes, secrets
    given = object_body(body["auth"], "auth", _ROTATE_KEYS)
    kind = given.get("type")
    if kind is None:
        raise _missing("auth.type")
    if kind != auth["type"]:
        raise InvalidRequest(f"Invalid value for 'auth.type': {show_value(kind)}. A rotation keeps the credential's "
                             f"type, {auth['type']!r}.", param="auth.type", code="invalid_value")  # fmt: skip
    object_body(given, "auth", _ROTATE_KEYS_OF[kind])
    new = dict(auth)
    if kind == "static_bearer":
        secrets["token"] = _secret(_required(given, "token", "auth"), "auth.token")
    else:
        if given.get("access_token") is not None:
            secrets["access_token"] = _secret(given["access_token"], "auth.access_token")
            new["expires_at"] = None
        if "expires_at" in given:
            new["expires_at"] = _expires_at(given["expires_at"])
        if given.get("refresh") is not None:
            new["refresh"], refresh_secrets = _rotate_refresh(given["refresh"], auth.get("refresh"))
            secrets |= refresh_secrets
    changes["auth"] = new
    return changes, secrets


def credential_object(credential: dict[str, Any]) -> dict[str, Any]:
    """The wire ``vault.credential`` of a stored one: never a secret (the store keeps none here)."""
    return {"id": credential["id"], "object": "vault.credential", "auth": credential["auth"],
            "created_at": int(credential["created_at"]), "updated_at": int(credential["updated_at"]),
            "metadata": credential["metadata"], "name": credential["name"], "vault_id": credential["vault_id"]}  # fmt: skip


def credential_deleted(credential_id: str) -> dict[str, Any]:
    return {"id": credential_id, "object": "vault.credential.deleted", "deleted": True}


def credential_not_found(credential_id: str) -> NotFound:
    return NotFound(f"Credential with id '{credential_id}' not found.", param="credential_id")


# -- matching ----------------------------------------------------------------------------


def server_key(url: str) -> str:
    """``url`` normalised for matching a credential to an MCP server (module docstring): two
    URLs match when their keys are equal."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").rstrip(".")
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is not None and port != {"http": 80, "https": 443}.get(scheme):
        host = f"{host}:{port}"
    path = parts.path[:-1] if parts.path.endswith("/") else parts.path
    return f"{scheme}://{host}{path}" + (f"?{parts.query}" if parts.query else "")


def refused_servers(response: dict[str, Any]) -> set[str]:
    """The labels of the MCP servers that answered a call of ``response`` (a stored response)
    with HTTP 401: their tokens were refused."""
    return {item["server_label"] for item in response.get("output") or ()
            if item.get("type") == "mcp_call" and (item.get("error") or {}).get("code") == 401}  # fmt: skip


def expiry_of(auth: dict[str, Any]) -> float | None:
    """An ``mcp_oauth`` credential's ``expires_at`` as a Unix time (None: not known)."""
    at = auth.get("expires_at")
    return None if at is None else datetime.fromisoformat(at).timestamp()


# -- helpers -----------------------------------------------------------------------------

_AUTH_KEYS = ("type", "mcp_server_url", "token", "access_token", "expires_at", "refresh", "networking", "secret_name",
              "secret_value")  # fmt: skip
_AUTH_KEYS_OF = {
    "static_bearer": ("type", "mcp_server_url", "token"),
    "mcp_oauth": ("type", "mcp_server_url", "access_token", "expires_at", "refresh"),
}
_ROTATE_KEYS = ("type", "token", "access_token", "expires_at", "refresh", "secret_value")
_ROTATE_KEYS_OF = {"static_bearer": ("type", "token"), "mcp_oauth": ("type", "access_token", "expires_at", "refresh")}
_REFRESH_KEYS = ("client_id", "refresh_token", "token_endpoint", "token_endpoint_auth", "resource", "scope")


def _refresh(value: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    at = "auth.refresh"
    refresh = object_body(value, at, _REFRESH_KEYS)
    for key in ("client_id", "refresh_token", "token_endpoint", "token_endpoint_auth"):
        if key not in refresh:
            raise _missing(f"{at}.{key}")
    client_id = refresh["client_id"]
    if not isinstance(client_id, str) or not client_id:
        raise wrong_type(f"{at}.client_id", "a non-empty string", client_id)
    secrets = {"refresh_token": _secret(refresh["refresh_token"], f"{at}.refresh_token")}
    endpoint_auth = object_body(refresh["token_endpoint_auth"], f"{at}.token_endpoint_auth", ("type", "client_secret"))
    kind = endpoint_auth.get("type")
    if kind not in _ENDPOINT_AUTH_TYPES:
        where = f"{at}.token_endpoint_auth.type"
        raise _missing(where) if kind is None else _one_of(where, kind, _ENDPOINT_AUTH_TYPES)
    if kind == "none":
        object_body(endpoint_auth, f"{at}.token_endpoint_auth", ("type",))
    else:
        where = f"{at}.token_endpoint_auth"
        secrets["client_secret"] = _secret(_required(endpoint_auth, "client_secret", where), f"{where}.client_secret")
    public = {"client_id": client_id, "resource": _optional_text(refresh.get("resource"), f"{at}.resource"),
              "scope": _optional_text(refresh.get("scope"), f"{at}.scope"),
              "token_endpoint": check_http_url(refresh["token_endpoint"], f"{at}.token_endpoint"),
              "token_endpoint_auth": {"type": kind}}  # fmt: skip
    return public, secrets


def _rotate_refresh(value: Any, current: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    at = "auth.refresh"
    if current is None:
        raise InvalidRequest(f"Invalid '{at}': the credential has no refresh configuration to rotate (create a new "
                             "credential with one).", param=at, code="invalid_value")  # fmt: skip
    refresh = object_body(value, at, ("refresh_token", "scope", "token_endpoint_auth"))
    new, secrets = dict(current), {}
    if refresh.get("refresh_token") is not None:
        secrets["refresh_token"] = _secret(refresh["refresh_token"], f"{at}.refresh_token")
    if "scope" in refresh:
        new["scope"] = _optional_text(refresh["scope"], f"{at}.scope")
    if refresh.get("token_endpoint_auth") is not None:
        where = f"{at}.token_endpoint_auth"
        endpoint_auth = object_body(refresh["token_endpoint_auth"], where, ("type", "client_secret"))
        kind = endpoint_auth.get("type")
        if kind != current["token_endpoint_auth"]["type"]:
            raise InvalidRequest(f"Invalid value for '{where}.type': {show_value(kind)}. A rotation keeps the "
                                 f"credential's token endpoint auth, {current['token_endpoint_auth']['type']!r}.",
                                 param=f"{where}.type", code="invalid_value")  # fmt: skip
        if endpoint_auth.get("client_secret") is not None:
            secrets["client_secret"] = _secret(endpoint_auth["client_secret"], f"{where}.client_secret")
    return new, secrets


def _name(value: Any, param: str) -> str:
    if not isinstance(value, str):
        raise wrong_type(param, "a string", value)
    name = value.strip()
    size = len(name.encode())
    if not 1 <= size <= MAX_NAME_BYTES:
        raise InvalidRequest(f"Invalid '{param}': it must hold 1 to {MAX_NAME_BYTES} UTF-8 bytes once trimmed, got "
                             f"{size}.", param=param, code="invalid_value")  # fmt: skip
    return name


def _secret(value: Any, param: str) -> str:
    """A secret value: never shown in the error (only its type or what is wrong with it)."""
    if not isinstance(value, str):
        raise InvalidRequest(f"Invalid type for '{param}': expected a string.", param=param, code="invalid_type")
    if not value:
        raise InvalidRequest(f"Invalid '{param}': empty string.", param=param, code="empty_string")
    if len(value) > MAX_SECRET_CHARS:
        raise InvalidRequest(f"Invalid '{param}': string too long. Expected at most {MAX_SECRET_CHARS} characters.",
                             param=param, code="string_above_max_length")  # fmt: skip
    if any(c in value for c in "\r\n\0"):
        raise InvalidRequest(f"Invalid '{param}': it must not hold carriage returns, newlines or NUL bytes.",
                             param=param, code="invalid_value")  # fmt: skip
    return value


def _expires_at(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise wrong_type("auth.expires_at", "an RFC 3339 timestamp", value)
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise InvalidRequest(f"Invalid 'auth.expires_at': {show_value(value)} is not an RFC 3339 timestamp with a time "
                             "zone (such as 2026-01-01T00:00:00Z).", param="auth.expires_at", code="invalid_value")  # fmt: skip
    return value


def _optional_text(value: Any, param: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise wrong_type(param, "a string", value)
    return value


def _required(body: dict[str, Any], key: str, at: str) -> Any:
    if key not in body:
        raise _missing(f"{at}.{key}")
    return body[key]


def _missing(param: str) -> InvalidRequest:
    return InvalidRequest(f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")


def _one_of(param: str, value: Any, allowed: tuple[str, ...]) -> InvalidRequest:
    return InvalidRequest(f"Invalid value for '{param}': {show_value(value)}. Expected one of "
                          f"{', '.join(repr(a) for a in allowed)}.", param=param, code="invalid_value")  # fmt: skip
