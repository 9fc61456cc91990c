"""The egress proxy of a sandbox whose network policy is an allowlist of domains.

The sandbox has no network of its own (a network namespace with only its loopback). When its
container allows some domains, the supervisor serves this proxy on a Unix socket that is bound
into the sandbox; inside, the kernel forwards ``127.0.0.1:3128`` to that socket
(``_kernel.forward``) and ``HTTP_PROXY`` / ``HTTPS_PROXY`` point there, so pip, requests,
urllib and curl reach the allowed domains and nothing else.

It understands what those clients send a proxy:

* ``CONNECT host:port`` (HTTPS, and any TLS): a tunnel, once ``host`` is allowed;
* an absolute-form request, ``GET http://host/path HTTP/1.1`` (plain HTTP): sent on to the host
  in origin form (``Proxy-*`` headers dropped), once ``host`` is allowed.

A host is allowed when it is an allowed domain or a subdomain of one (``pypi.org`` allows
``files.pypi.org``). Its address is resolved here, once, and must be public (not loopback,
private, link-local, multicast or reserved): an allowed name that resolves to the host's own
services is refused, and the connection goes to the address that was checked (no second
lookup a DNS rebinding could answer differently). Ports: 80 and 443. A refusal is an HTTP 403
whose body says why; the code sees it as any client sees a refusing proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

__all__ = ["EgressProxy", "allowed_host", "public_address"]

PORTS = frozenset({80, 443})
_HEAD_LIMIT = 64 * 1024
_CONNECT_TIMEOUT_S = 15.0

Resolve = Callable[[str, int], Awaitable[list[str]]]


def allowed_host(host: str, domains: Sequence[str]) -> bool:
    """Whether ``host`` is one of ``domains`` or a subdomain of one (case and a final dot aside)."""
    host = host.lower().rstrip(".")
    for domain in domains:
        domain = domain.lower().rstrip(".").removeprefix("*.")
        if host == domain or host.endswith("." + domain):
            return True
    return False


def public_address(address: str) -> bool:
    """Whether ``address`` is a public one (what the proxy may connect to)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


async def _resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class EgressProxy:
    """The proxy of one sandbox, on a Unix socket (module docstring).

    Args:
        domains: the allowed domains.
        path: where to serve the socket (its directory is bound into the sandbox).
        resolve: name resolution (``host, port -> addresses``); the tests give their own.
        public: which addresses may be reached (the tests may widen it to loopback).
        ports: which ports may be reached (80 and 443; the tests add their server's).
    """

    def __init__(
        self, domains: Sequence[str], path: Path, *, resolve: Resolve = _resolve,
        public: Callable[[str], bool] = public_address, ports: frozenset[int] = PORTS,
    ) -> None:  # fmt: skip
        self.domains = tuple(domains)
        self.path = path
        self.ports = ports
        self._resolve = resolve
        self._public = public
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path))
        self.path.chmod(0o666)  # the sandbox's uid connects to it

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._one(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > _HEAD_LIMIT:
            return await _refuse(writer, 431, "the request's head is too large")
        line, _, rest = head.partition(b"\r\n")
        method, target, version = line.decode("latin-1").split(" ", 2)
        if method == "CONNECT":
            host, _, port_text = target.rpartition(":")
            forward = b""
        elif target.startswith("http://"):
            authority, slash, path = target[len("http://") :].partition("/")
            host, _, port_text = authority.rpartition(":") if ":" in authority else (authority, "", "80")
            headers = [h for h in rest.split(b"\r\n") if h and not h.lower().startswith(b"proxy-")]
            forward = f"{method} {slash}{path or ''} {version}\r\n".encode("latin-1")
            forward += b"".join(h + b"\r\n" for h in headers) + b"\r\n"
        else:
            return await _refuse(writer, 400, "send CONNECT host:port, or a request for an http:// URL")
        host = host.strip("[]")
        try:
            port = int(port_text)
        except ValueError:
            return await _refuse(writer, 400, f"no port in {target!r}")
        if not allowed_host(host, self.domains):
            return await _refuse(writer, 403, f"{host} is not in this container's network allowlist "
                                              f"({', '.join(self.domains)})")  # fmt: skip
        if port not in self.ports:
            return await _refuse(writer, 403, f"port {port} is not allowed ({', '.join(map(str, sorted(self.ports)))} are)")
        try:
            addresses = await asyncio.wait_for(self._resolve(host, port), _CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError):
            return await _refuse(writer, 502, f"{host} could not be resolved")
        address = next((a for a in addresses if self._public(a)), None)
        if address is None:
            return await _refuse(writer, 403, f"{host} resolves to no public address ({', '.join(addresses)})")
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(address, port), _CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError):
            return await _refuse(writer, 502, f"{host} ({address}) did not accept a connection on port {port}")
        try:
            if method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(forward)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            up_writer.close()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while chunk := await source.read(65536):
            sink.write(chunk)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except (ConnectionError, OSError):
        pass


async def _refuse(writer: asyncio.StreamWriter, status: int, why: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 431: "Request Header Fields Too Large", 502: "Bad Gateway"}[status]
    body = f"Troupe's egress proxy: {why}.\n".encode()
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                 "Connection: close\r\n\r\n".encode() + body)  # fmt: skip
    with contextlib.suppress(ConnectionError):
        await writer.drain()
