"""Which MCP servers a request may reach, and how a request's ``mcp`` tool becomes an :class:`McpServer`.

* :func:`resolve_mcp_tool` turns ``tools[i]`` (``{"type": "mcp", ...}``) into an
  :class:`~troupe.agentloop.mcp.McpServer`: a ``server_url`` names a server directly;
  without one the ``server_label`` must name a configured server
  (:class:`~troupe.runtime.settings.McpServerSpec`).
* :func:`check_server` is the URL policy. Configured servers are trusted. Any other URL
  must be http(s) and either match the allowlist (``RuntimeSettings.mcp.allowed_urls`` plus
  the env var ``TROUPE_MCP_ALLOWED_URLS``, comma-separated, ``*`` wildcards on the whole
  URL) or, with no allowlist, be public: hosts that are or resolve to loopback, private,
  link-local or other non-public addresses are refused, because a request must not make
  the server reach into its own network (SSRF). Cloud metadata endpoints are refused even
  when allowlisted.
* :func:`connection_key` / :func:`actor_name` identify one connection per (URL or command,
  credentials) without revealing the credentials.
* :class:`AddressGuard` applies the same policy where the connection is made:
  :func:`pinned_transport` resolves the host itself, checks every address it got, and
  connects to one of those checked addresses (the ``Host`` header, TLS SNI and certificate
  check keep the host name). A DNS answer that changes between the request's check and the
  connection (DNS rebinding) therefore cannot reach a refused address: the connection is
  refused instead (:class:`AddressRefused`). :func:`connect_guard` says which guard a
  server's connections get (none for configured servers, which are trusted).

"Not public" is an explicit table of IANA's special-purpose blocks (``ipaddress``'s flags
vary between Python releases and miss some: ``100.64.0.0/10``, ``192.88.99.0/24``,
``fec0::/10``), plus the IPv4 address embedded in IPv4-mapped (``::ffff:0:0/96``), NAT64
(``64:ff9b::/96``, ``64:ff9b:1::/48``, the low 32 bits) and 6to4 (``2002::/16``) addresses,
which is judged as IPv4. Any other IPv6 address outside global unicast (``2000::/3``) is
refused too.

This module is one security boundary (the address ranges, the host rules, the pinned connection): review a change to it as a whole.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import ipaddress
import json
import os
import re
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpcore2
import httpx2

from troupe.agentloop.mcp import McpServer
from troupe.protocol import InvalidRequest, ServerError
from troupe.runtime.settings import McpServerSpec, RuntimeSettings

__all__ = [
    "ALLOWED_URLS_ENV",
    "Resolver",
    "AddressGuard",
    "AddressRefused",
    "allowed_url_patterns",
    "check_address",
    "check_server",
    "check_url",
    "connect_guard",
    "pinned_transport",
    "resolve_mcp_tool",
    "try_connect",
    "url_guard",
    "connection_key",
    "actor_name",
]

ALLOWED_URLS_ENV = "TROUPE_MCP_ALLOWED_URLS"

Resolver = Callable[[str], "list[str] | None"]
"""Host name → its IP addresses, or None when it does not resolve."""

_IP = ipaddress.IPv4Address | ipaddress.IPv6Address


def _table(rows: Iterable[tuple[str, str | None]]) -> tuple[tuple[Any, str | None], ...]:
    return tuple((ipaddress.ip_network(net), why) for net, why in rows)


# IANA's IPv4 special-purpose registry, every block that is not globally reachable. The
# first match names the reason, so the more specific blocks come first.
_SPECIAL_V4 = _table([
    ("0.0.0.0/32", "an unspecified address (it reaches this machine)"),
    ("0.0.0.0/8", "a 'this network' address (0.0.0.0/8)"),
    ("10.0.0.0/8", "a private address (10.0.0.0/8)"),
    ("100.64.0.0/10", "a shared (carrier-grade NAT) address (100.64.0.0/10)"),
    ("127.0.0.0/8", "a loopback address"),
    ("169.254.0.0/16", "a link-local address"),
    ("172.16.0.0/12", "a private address (172.16.0.0/12)"),
    ("192.0.0.0/24", "an IETF protocol assignment (192.0.0.0/24)"),
    ("192.0.2.0/24", "a documentation address (192.0.2.0/24)"),
    ("192.88.99.0/24", "a 6to4 relay anycast address (192.88.99.0/24)"),
    ("192.168.0.0/16", "a private address (192.168.0.0/16)"),
    ("198.18.0.0/15", "a benchmarking address (198.18.0.0/15)"),
    ("198.51.100.0/24", "a documentation address (198.51.100.0/24)"),
    ("203.0.113.0/24", "a documentation address (203.0.113.0/24)"),
    ("224.0.0.0/4", "a multicast address"),
    ("255.255.255.255/32", "the broadcast address"),
    ("240.0.0.0/4", "a reserved address (240.0.0.0/4)"),
])
# IPv6: the same, and None marks the blocks inside 2001::/23 that IANA lists as globally
# reachable. Addresses that embed an IPv4 address are judged by it (see _embedded_v4);
# anything else outside 2000::/3 is refused (_GLOBAL_UNICAST).
_SPECIAL_V6 = _table([
    ("::/128", "an unspecified address (it reaches this machine)"),
    ("::1/128", "a loopback address"),
    ("100::/64", "a discard-only address (100::/64)"),
    ("2001:1::1/128", None),  # Port Control Protocol anycast
    ("2001:1::2/128", None),  # TURN anycast
    ("2001:3::/32", None),  # AMT
    ("2001:4:112::/48", None),  # AS112-v6
    ("2001:20::/28", None),  # ORCHIDv2
    ("2001:30::/28", None),  # drone remote ID
    ("2001::/23", "an IETF protocol assignment (2001::/23, Teredo included)"),
    ("2001:db8::/32", "a documentation address (2001:db8::/32)"),
    ("3fff::/20", "a documentation address (3fff::/20)"),
    ("5f00::/16", "a segment-routing address (5f00::/16)"),
    ("fc00::/7", "a private (unique local) address (fc00::/7)"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local address (fec0::/10)"),
    ("ff00::/8", "a multicast address"),
])
_GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_6TO4 = ipaddress.ip_network("2002::/16")
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
        # An IPv4 or IPv6 sockaddr's host is a str (typeshed also allows the int of other families).
        addresses = sorted({str(info[4][0]) for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)})
    except (OSError, UnicodeError):
        addresses = None
    if len(_dns_cache) > 1024:
        _dns_cache.clear()
    _dns_cache[host] = (now + _DNS_TTL_S, addresses)
    return addresses


def allowed_url_patterns(settings: RuntimeSettings) -> tuple[str, ...]:
    """The allowlist in force: the settings' patterns plus ``TROUPE_MCP_ALLOWED_URLS`` (read on each call)."""
    from_env = [p.strip() for p in os.environ.get(ALLOWED_URLS_ENV, "").split(",")]
    return tuple(settings.mcp.allowed_urls) + tuple(p for p in from_env if p)


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


def _embedded_v4(ip: _IP) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address an IPv6 address leads to (and how), for mapped, NAT64 and 6to4 addresses."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped, "IPv4-mapped"
    if any(ip in net for net in _NAT64):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF), "NAT64"
    if ip in _6TO4 and ip.sixtofour is not None:  # always set inside 2002::/16
        return ip.sixtofour, "6to4"
    return None


def _is_metadata(ip: _IP) -> bool:
    embedded = _embedded_v4(ip)
    return ip in _METADATA_IPS or (embedded is not None and embedded[0] in _METADATA_IPS)


def _not_public(ip: _IP) -> str | None:
    """Why an address may not be reached without an allowlist entry, or None."""
    if _is_metadata(ip):
        return "a cloud metadata address"
    embedded = _embedded_v4(ip)
    if embedded is not None:
        v4, how = embedded
        why = _not_public(v4)
        return None if why is None else f"{why} ({how} {v4})"
    for net, why in _SPECIAL_V4 if isinstance(ip, ipaddress.IPv4Address) else _SPECIAL_V6:
        if ip in net:
            return why
    if isinstance(ip, ipaddress.IPv6Address) and ip not in _GLOBAL_UNICAST:
        return "not a global unicast address"
    return None


def check_address(ip: _IP, *, allow_private: bool = False) -> str | None:
    """Why a connection may not go to ``ip``, or None.

    Args:
        ip: An address a host resolved to (or an IP literal).
        allow_private: The URL matched the allowlist: only cloud metadata addresses are refused.
    """
    if _is_metadata(ip):
        return "a cloud metadata address"
    return None if allow_private else _not_public(ip)


def check_url(
    url: str, patterns: Iterable[str] = (), *, resolver: Resolver = _resolve, allowlist: str = "allowed MCP server URLs"
) -> str | None:
    """Why ``url`` may not be reached, or None when it may.

    Args:
        url: The server URL a request names.
        patterns: The allowlist; empty means any public http(s) URL.
        resolver: Host name → addresses (tests pass a fake).
        allowlist: what the allowlist is called, in the reason.

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
        if _is_metadata(ip):
            return f"{host} is a cloud metadata address"
    patterns = tuple(patterns)
    if patterns:
        # An explicit allowlist entry is the operator's decision, so it may name private hosts.
        return None if any(_matches(url, p) for p in patterns) else f"it does not match the {allowlist}"
    if not addresses:
        return f"the host {host} could not be resolved"
    for ip in addresses:
        why = _not_public(ip)
        if why is not None:
            return f"{host} is {why}" if str(ip) == host else f"{host} resolves to {ip}, {why}"
    return None


def _configured(server: McpServer, settings: RuntimeSettings) -> McpServerSpec | None:
    for spec in settings.mcp.servers:
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


class AddressRefused(httpcore2.ConnectError):
    """A connection was not made: the host resolved to an address the policy refuses.

    A ``ConnectError`` (nothing was sent), so the transports report it like a refused
    connection; ``reason`` is the sentence to show.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class AddressGuard:
    """The URL policy where a connection is made: which addresses it may go to.

    Picklable (it travels to the connection actor) as long as ``resolver`` is a module-level function.
    """

    allow_private: bool = False
    """The URL matched the allowlist: private addresses are the operator's choice; metadata stays refused."""
    resolver: Resolver = _resolve
    """Host name → addresses; the check and the connection use the same answer."""
    allowed_urls: tuple[str, ...] = ()
    """The allowlist the server's URL was checked against, for the URLs the server names itself."""

    def why_not(self, ip: _IP) -> str | None:
        """Why a connection may not go to ``ip``, or None."""
        return check_address(ip, allow_private=self.allow_private)

    def why_not_url(self, url: str) -> str | None:
        """Why a URL the server names itself (the HTTP+SSE transport's message endpoint, a
        redirect) may not be reached, or None: :func:`check_url`, with the allowlist the
        server's own URL was checked against. It may resolve the host: call it off the loop.
        """
        # A guard allowing private addresses without patterns (made by hand) allows any URL but metadata.
        patterns = self.allowed_urls or (("*",) if self.allow_private else ())
        return check_url(url, patterns, resolver=self.resolver)

    def addresses(self, host: str) -> list[str]:
        """The addresses to connect to for ``host``, every one of them checked.

        Like :func:`check_url`, one refused answer refuses the host: a rebinding answer
        mixing a public and a private address must not get through by luck of the order.

        Raises:
            AddressRefused: the host does not resolve, or resolves to a refused address.
        """
        host = host.strip("[]").rstrip(".").lower()
        try:
            found: list[str] | None = [str(ipaddress.ip_address(host))]
        except ValueError:
            found = self.resolver(host)
        if not found:
            raise AddressRefused(f"the host {host} could not be resolved")
        for address in found:
            ip = ipaddress.ip_address(address.split("%")[0])
            why = self.why_not(ip)
            if why is not None:
                shown = f"{host} is {why}" if str(ip) == host else f"{host} resolves to {ip}, {why}"
                raise AddressRefused(f"{shown}; the connection was refused")
        return found


class _PinnedBackend(httpcore2.AsyncNetworkBackend):
    """httpcore's network backend, connecting only to addresses the guard has checked.

    httpcore hands over the URL's host; the connection goes to one of the addresses the
    guard resolved and checked, while httpcore keeps the host name for the ``Host``
    header, TLS SNI and the certificate check.
    """

    def __init__(self, guard: AddressGuard) -> None:
        self.guard = guard
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None, socket_options: Any = None) -> Any:
        # getaddrinfo blocks: on the loop's default executor, whose threads end with the process.
        # (anyio's worker threads are not daemons, and nothing stops them once the loop is gone:
        # a connection actor that had resolved a name could never exit.)
        addresses = await asyncio.to_thread(self.guard.addresses, host)
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(address, port, timeout=timeout, local_address=local_address,
                                                     socket_options=socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None  # addresses is never empty
        raise failure

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> Any:
        raise AddressRefused("Unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _PinnedTransport(httpx2.AsyncHTTPTransport):
    def __init__(self, guard: AddressGuard) -> None:
        super().__init__()
        # httpx's transport takes no network backend, so its pool is replaced by one with
        # ours (the same defaults otherwise). A transport of our own also means httpx uses
        # no proxy from the environment: a proxy would resolve the host itself, unchecked.
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=httpx2.create_ssl_context(),
            max_connections=httpx2.Limits().max_connections,
            max_keepalive_connections=httpx2.Limits().max_keepalive_connections,
            keepalive_expiry=httpx2.Limits().keepalive_expiry,
            network_backend=_PinnedBackend(guard),
        )


async def try_connect(url: str, guard: AddressGuard, timeout_s: float) -> None:
    """Open and close one TCP connection to ``url``'s host and port, as :func:`pinned_transport` would.

    Raises:
        AddressRefused: the host resolves to an address ``guard`` refuses (or not at all).
        httpcore2.ConnectError: the connection was refused (or the network is unreachable).
        httpcore2.ConnectTimeout: no answer within ``timeout_s``.
    """
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    stream = await _PinnedBackend(guard).connect_tcp(parts.hostname or "", port, timeout=timeout_s)
    await stream.aclose()


def pinned_transport(guard: AddressGuard) -> httpx2.AsyncBaseTransport:
    """An httpx transport whose connections go only to addresses ``guard`` checked at connect time.

    Example::

        guard = AddressGuard()                       # no allowlist: public addresses only
        async with httpx2.AsyncClient(transport=pinned_transport(guard)) as http:
            await http.get("https://mcp.example.com/mcp")   # ConnectError (AddressRefused) if it
                                                            # now resolves to, say, 127.0.0.1
    """
    return _PinnedTransport(guard)


def connect_guard(server: McpServer, settings: RuntimeSettings) -> AddressGuard | None:
    """The guard for ``server``'s connections: None for a configured (trusted) or stdio server.

    A request's URL that matched the allowlist may reach private addresses (the operator
    allowed it) but never metadata ones; any other URL only public addresses. The guard
    keeps the allowlist (read here, where the request was checked, not in the connection
    actor's environment) for the URLs the server names itself.
    """
    if server.url is None or _configured(server, settings) is not None:
        return None
    return url_guard(server.url, allowed_url_patterns(settings))


def url_guard(url: str, patterns: tuple[str, ...]) -> AddressGuard:
    """The guard of connections to ``url``, checked against the allowlist ``patterns``: a URL that
    matched one may reach private addresses (the operator allowed it), never metadata ones; any
    other URL only public addresses. (Webhook deliveries use it too, :mod:`troupe.runtime.webhooks`.)"""
    return AddressGuard(allow_private=any(_matches(url, p) for p in patterns), allowed_urls=patterns)


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
        The server, ``param`` set to ``tools[index]``. One with a ``server_url`` is
        ``from_request`` (a listing failure fails the request). A configured one takes its
        URL or command and headers (``${ENV}`` expanded) from the configuration; the
        request's headers and authorization are laid over them, its ``allowed_tools``
        narrow the configured list, and its ``require_approval`` and description win when given.

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
                         require_approval=approval or "always", description=description, from_request=True,
                         param=at)
    spec = next((s for s in settings.mcp.servers if s.label == label), None)
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
        param=at,
    )


def connection_key(server: McpServer) -> str:
    """A digest of (URL or command, headers): one connection per server and credentials; reveals neither."""
    target: Any = server.url if server.url is not None else list(server.command or ())
    headers = sorted((k.lower(), v) for k, v in server.headers.items())
    return hashlib.blake2b(json.dumps([target, headers]).encode(), digest_size=16).hexdigest()


def actor_name(server: McpServer) -> str:
    """The connection actor's name: ``troupe-mcp-<digest>``."""
    return f"troupe-mcp-{connection_key(server)}"
