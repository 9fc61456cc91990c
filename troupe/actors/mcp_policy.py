"""Which MCP servers a request may reach, and how a request's ``mcp`` tool becomes an :class:`McpServer`.

* :func:`resolve_mcp_tool` turns ``tools[i]`` (``{"type": "mcp", ...}``) into an
  :class:`~troupe.agentloop.mcp.McpServer`: a ``server_url`` names a server directly;
  without one the ``server_label`` must name a configured server
  (:class:`~troupe.actors.settings.McpServerSpec`).
* :func:`check_server` is the URL policy. Configured servers are trusted. Any other URL
  must be http(s) and either match the allowlist (``RuntimeSettings.mcp_allowed_urls`` plus
  the env var ``TROUPE_MCP_ALLOWED_URLS``, comma-separated, ``*`` wildcards on the whole
  URL) or, with no allowlist, be public: hosts that are or resolve to loopback, private,
  link-local or other non-public addresses are refused, because a request must not make
  the server reach into its own network (SSRF). Cloud metadata endpoints are refused even
  when allowlisted.
* :func:`connection_key` / :func:`actor_name` identify one connection per (URL or command,
  credentials) without revealing the credentials.

Known limit: the host is resolved when the request is checked and again when the
transport connects, so a DNS answer that changes in between (DNS rebinding) is not caught.
"""

from __future__ import annotations

import fnmatch
import hashlib
import ipaddress
import json
import os
import re
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from troupe.agentloop.mcp import McpServer
from troupe.protocol import InvalidRequest, ServerError

from .settings import McpServerSpec, RuntimeSettings

__all__ = [
    "ALLOWED_URLS_ENV",
    "Resolver",
    "allowed_url_patterns",
    "check_server",
    "check_url",
    "resolve_mcp_tool",
    "connection_key",
    "actor_name",
]

ALLOWED_URLS_ENV = "TROUPE_MCP_ALLOWED_URLS"

Resolver = Callable[[str], "list[str] | None"]
"""Host name → its IP addresses, or None when it does not resolve."""

_IP = ipaddress.IPv4Address | ipaddress.IPv6Address
_METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata.goog", "metadata"})
_METADATA_IPS = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200", "169.254.170.2")
)
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_HAS_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]*\s+\S")
_DNS_TTL_S = 30.0
_dns_cache: dict[str, tuple[float, list[str] | None]] = {}


def _resolve(host: str) -> list[str] | None:
    """The default resolver: ``getaddrinfo``, answers cached briefly (checks run on the event loop)."""
    now = time.monotonic()
    hit = _dns_cache.get(host)
    if hit is not None and hit[0] > now:
        return hit[1]
    try:
        addresses = sorted({info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)})
    except (OSError, UnicodeError):
        addresses = None
    if len(_dns_cache) > 1024:
        _dns_cache.clear()
    _dns_cache[host] = (now + _DNS_TTL_S, addresses)
    return addresses


def allowed_url_patterns(settings: RuntimeSettings) -> tuple[str, ...]:
    """The allowlist in force: the settings' patterns plus ``TROUPE_MCP_ALLOWED_URLS`` (read on each call)."""
    from_env = [p.strip() for p in os.environ.get(ALLOWED_URLS_ENV, "").split(",")]
    return tuple(settings.mcp_allowed_urls) + tuple(p for p in from_env if p)


def _split(url: str) -> tuple[str, str, str]:
    """``(scheme, authority, rest)``, scheme and authority lower-cased."""
    scheme, sep, tail = url.partition("://")
    if not sep:
        return "", "", url
    slash = min((i for i in (tail.find("/"), tail.find("?"), tail.find("#")) if i >= 0), default=len(tail))
    return scheme.lower(), tail[:slash].lower(), tail[slash:]


def _matches(url: str, pattern: str) -> bool:
    """fnmatch on the whole URL, and the pattern's authority must match the URL's authority on its own.

    The second test stops ``*`` from spanning the host: ``https://*.example.com/*`` must
    not admit ``https://evil.test/.example.com/``.
    """
    u_scheme, u_auth, u_rest = _split(url)
    p_scheme, p_auth, p_rest = _split(pattern.strip())
    if not p_scheme:  # a bare pattern such as "*": whole-URL matching only
        return fnmatch.fnmatchcase(url, pattern)
    if not fnmatch.fnmatchcase(f"{u_scheme}://{u_auth}{u_rest}", f"{p_scheme}://{p_auth}{p_rest}"):
        return False
    return fnmatch.fnmatchcase(u_scheme, p_scheme) and fnmatch.fnmatchcase(u_auth, p_auth)


def _not_public(ip: _IP) -> str | None:
    """Why an address may not be reached without an allowlist entry, or None."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip in _METADATA_IPS:
        return "a cloud metadata address"
    if ip.is_unspecified:
        return "an unspecified address (it reaches this machine)"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_private:
        return "a private address"
    if ip.is_multicast or ip.is_reserved:
        return "not a public address"
    return None


def check_url(url: str, patterns: Iterable[str] = (), *, resolver: Resolver = _resolve) -> str | None:
    """Why ``url`` may not be reached, or None when it may.

    Args:
        url: The server URL a request names.
        patterns: The allowlist; empty means any public http(s) URL.
        resolver: Host name → addresses (tests pass a fake).

    Returns:
        A reason to show the client (naming the host, never credentials), or None.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        return "it is not a valid URL"
    if parts.scheme.lower() not in ("http", "https"):
        return f"the scheme {parts.scheme or '(none)'!r} is not allowed (use http or https)"
    if not host:
        return "it has no host"
    if parts.username is not None or parts.password is not None:
        return "credentials in the URL are not allowed (use headers or authorization)"
    host = host.rstrip(".").lower()
    if host in _METADATA_HOSTS:
        return f"{host} is a cloud metadata address"
    try:
        addresses: list[_IP] | None = [ipaddress.ip_address(host)]
    except ValueError:
        found = resolver(host)
        addresses = None if found is None else [ipaddress.ip_address(a.split("%")[0]) for a in found]
    for ip in addresses or ():
        mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped else ip
        if mapped in _METADATA_IPS:
            return f"{host} is a cloud metadata address"
    patterns = tuple(patterns)
    if patterns:
        # An explicit allowlist entry is the operator's decision, so it may name private hosts.
        return None if any(_matches(url, p) for p in patterns) else "it does not match the allowed MCP server URLs"
    if not addresses:
        return f"the host {host} could not be resolved"
    for ip in addresses:
        why = _not_public(ip)
        if why is not None:
            return f"{host} is {why}" if str(ip) == host else f"{host} resolves to {why} ({ip})"
    return None


def _configured(server: McpServer, settings: RuntimeSettings) -> McpServerSpec | None:
    for spec in settings.mcp_servers:
        if server.command is not None and spec.command is not None and tuple(spec.command) == server.command:
            return spec
        if server.url is not None and spec.url == server.url:
            return spec
    return None


def check_server(
    server: McpServer, settings: RuntimeSettings, index: int | None = None, *, resolver: Resolver = _resolve
) -> None:
    """Refuse a server this deployment may not reach.

    Args:
        server: The resolved server.
        settings: The allowlist and the configured (trusted) servers.
        index: The server's position in ``tools``, for the error's ``param``.
        resolver: Host name → addresses (tests pass a fake).

    Raises:
        InvalidRequest: ``param="tools[i].server_url"`` (``tools`` without an index),
            ``code="invalid_value"``, saying why.
    """
    if _configured(server, settings) is not None:
        return
    param = "tools" if index is None else f"tools[{index}].server_url"
    if server.url is None:  # a stdio command can only come from the configuration
        raise InvalidRequest(
            f"MCP server {server.label!r} is not a configured server.", param=param, code="invalid_value"
        )
    why = check_url(server.url, allowed_url_patterns(settings), resolver=resolver)
    if why is not None:
        raise InvalidRequest(
            f"MCP server {server.label!r} may not be reached: {why}.", param=param, code="invalid_value"
        )


def _tool_names(value: Any, param: str) -> frozenset[str] | None:
    if value is None:
        return None
    names = value.get("tool_names") if isinstance(value, dict) else value
    if names is None:
        return None  # e.g. only {"read_only": true}: not enforceable here, so no filter
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise InvalidRequest(f"Invalid value for '{param}': expected a list of tool names.", param=param,
                             code="invalid_value")
    return frozenset(names)


def _expand_env(value: str, label: str) -> str:
    def lookup(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            # The deployment's fault, not the client's: a 500 naming the variable (never a value).
            raise ServerError(f"MCP server {label!r} is misconfigured: environment variable {name} is not set.")
        return os.environ[name]

    return _ENV_REF.sub(lookup, value)


def resolve_mcp_tool(tool: dict[str, Any], settings: RuntimeSettings, index: int | None = None) -> McpServer:
    """The :class:`McpServer` a request's ``mcp`` tool names.

    Args:
        tool: ``{"type": "mcp", "server_label", "server_url"?, "headers"?, "authorization"?,
            "allowed_tools"? (list or {"tool_names": [...]}), "require_approval"?, "server_description"?}``.
        settings: The configured servers.
        index: The tool's position in ``tools``, for error params.

    Returns:
        The server. A configured one takes its URL or command and headers (``${ENV}``
        expanded) from the configuration; the request's headers and authorization are laid
        over them, its ``allowed_tools`` narrow the configured list, and its
        ``require_approval`` and description win when given.

    Raises:
        InvalidRequest: no ``server_url`` and no configured server with that label, or malformed headers.
        ServerError: a configured header names an unset environment variable.
    """
    at = "tools" if index is None else f"tools[{index}]"
    label = str(tool.get("server_label") or "")
    headers = tool.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise InvalidRequest(f"Invalid value for '{at}.headers': expected an object of strings.",
                             param=f"{at}.headers", code="invalid_value")
    headers = dict(headers)
    token = tool.get("authorization")
    if token:
        if not isinstance(token, str):
            raise InvalidRequest(f"Invalid value for '{at}.authorization': expected a string.",
                                 param=f"{at}.authorization", code="invalid_value")
        headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        headers["Authorization"] = token if _HAS_SCHEME.match(token) else f"Bearer {token}"
    allowed = _tool_names(tool.get("allowed_tools"), f"{at}.allowed_tools")
    approval = tool.get("require_approval")
    description = tool.get("server_description")
    if tool.get("server_url"):
        return McpServer(label=label, url=str(tool["server_url"]), headers=headers, allowed_tools=allowed,
                         require_approval=approval or "always", description=description)
    spec = next((s for s in settings.mcp_servers if s.label == label), None)
    if spec is None:
        raise InvalidRequest(
            f"Missing required parameter: '{at}.server_url' (no MCP server labelled {label!r} is configured).",
            param=f"{at}.server_url", code="missing_required_parameter",
        )
    merged = {k: _expand_env(v, label) for k, v in spec.headers.items()}
    lowered = {k.lower() for k in headers}
    merged = {k: v for k, v in merged.items() if k.lower() not in lowered} | headers
    if spec.allowed_tools is not None:
        allowed = frozenset(spec.allowed_tools) if allowed is None else allowed & frozenset(spec.allowed_tools)
    return McpServer(
        label=label,
        url=spec.url,
        command=tuple(spec.command) if spec.command else None,
        headers=merged,
        allowed_tools=allowed,
        require_approval=approval or spec.require_approval,  # type: ignore[arg-type]
        description=description or spec.description,
    )


def connection_key(server: McpServer) -> str:
    """A digest of (URL or command, headers): one connection per server and credentials; reveals neither."""
    target: Any = server.url if server.url is not None else list(server.command or ())
    headers = sorted((k.lower(), v) for k, v in server.headers.items())
    return hashlib.blake2b(json.dumps([target, headers]).encode(), digest_size=16).hexdigest()


def actor_name(server: McpServer) -> str:
    """The connection actor's name: ``troupe-mcp-<digest>``."""
    return f"troupe-mcp-{connection_key(server)}"
