"""A container whose network policy is an allowlist: its code reaches the allowed domains
through the supervisor's egress proxy, and nothing else. Real sandboxes (bubblewrap), a real
HTTP server on the host's loopback standing in for an allowed site (the tests' resolver names
it, and lets the proxy reach loopback, which the real one refuses)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from troupe.sandbox import Sandbox
from troupe.sandbox._egress import EgressProxy, allowed_host, public_address

from .sandbox_support import LIMITS, container_dir, needs_bwrap

pytestmark = needs_bwrap

PAGE = b"hello from an allowed site"


class _Site(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def site() -> Iterator[int]:
    """An HTTP server on the host's 127.0.0.1; its port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def test_allowed_hosts_are_the_domains_and_their_subdomains() -> None:
    domains = ["pypi.org", "*.example.com", "Files.Test."]
    assert [allowed_host(h, domains) for h in ("pypi.org", "files.pypi.org", "PYPI.ORG.", "a.example.com",
                                               "example.com", "files.test")] == [True] * 6  # fmt: skip
    assert [allowed_host(h, domains) for h in ("evilpypi.org", "pypi.org.evil.net", "org", "")] == [False] * 4


def test_only_public_addresses_may_be_reached() -> None:
    assert public_address("151.101.0.223") and public_address("2a04:4e42::223")
    for address in ("127.0.0.1", "10.1.2.3", "192.168.0.1", "169.254.169.254", "::1", "fd00::1", "0.0.0.0",
                    "::ffff:127.0.0.1", "224.0.0.1", "not an address"):  # fmt: skip
        assert not public_address(address), address


async def _started(tmp_path: Path, site_port: int, domains: Sequence[str], *, widened: bool) -> Sandbox:
    async def resolve(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]  # every name is the test's site

    proxy = functools.partial(EgressProxy, resolve=resolve, ports=frozenset({site_port}),
                              **({"public": lambda address: True} if widened else {}))  # fmt: skip
    box = Sandbox(container_dir(tmp_path), LIMITS, allowed_domains=domains, egress_proxy=proxy)
    await box.start()
    return box


async def test_the_code_reaches_an_allowed_domain_and_nothing_else(tmp_path: Path, site: int) -> None:
    box = await _started(tmp_path, site, ["allowed.test"], widened=True)
    try:
        fetch = "import urllib.request\nprint(urllib.request.urlopen('http://{}:{}/', timeout=10).read().decode())"
        allowed = await box.run_python(fetch.format("files.allowed.test", site), timeout_s=30)
        assert (allowed.stdout, allowed.error) == (PAGE.decode() + "\n", None)
        denied = await box.run_python(fetch.format("denied.test", site), timeout_s=30)
        assert "HTTP Error 403" in (denied.error or "")
        direct = f"import socket\nsocket.create_connection(('127.0.0.1', {site}), timeout=3)"
        refused = await box.run_python(direct, timeout_s=30)  # the sandbox's own loopback: nothing there
        assert "ConnectionRefusedError" in (refused.error or "")
        tunnel = (
            "import socket\ns = socket.create_connection(('127.0.0.1', 3128), timeout=10)\n"
            f"s.sendall(b'CONNECT allowed.test:{site} HTTP/1.1\\r\\n\\r\\n')\n"
            "print(s.recv(100).split(b'\\r\\n')[0].decode())\n"
            "s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n')\n"
            "print(b''.join(iter(lambda: s.recv(4096), b'')).split(b'\\r\\n\\r\\n', 1)[1].decode())"
        )
        tunnelled = await box.run_python(tunnel, timeout_s=30)
        assert tunnelled.stdout == f"HTTP/1.1 200 Connection established\n{PAGE.decode()}\n", tunnelled
        [shell] = await box.run_shell([f"python -c \"{fetch.format('allowed.test', site)}\""], timeout_s=30)
        assert (shell.stdout, shell.exit_code) == (PAGE.decode() + "\n", 0), shell
    finally:
        await box.close()


async def test_an_allowed_name_for_a_private_address_is_refused(tmp_path: Path, site: int) -> None:
    box = await _started(tmp_path, site, ["localhost", "allowed.test"], widened=False)
    try:
        fetch = (f"import urllib.request, urllib.error\ntry:\n    urllib.request.urlopen('http://allowed.test:{site}/')\n"
                 "except urllib.error.HTTPError as exc:\n    print(exc.code, exc.read().decode())")  # fmt: skip
        result = await box.run_python(fetch, timeout_s=30)
        assert result.stdout.startswith("403 Troupe's egress proxy: allowed.test resolves to no public address"), result
    finally:
        await box.close()


async def test_without_an_allowlist_there_is_no_proxy(tmp_path: Path) -> None:
    box = Sandbox(container_dir(tmp_path), LIMITS)
    await box.start()
    try:
        result = await box.run_python("import os, socket\nprint(os.environ.get('HTTPS_PROXY'))\n"
                                      "socket.create_connection(('127.0.0.1', 3128), timeout=3)", timeout_s=30)  # fmt: skip
        assert result.stdout == "None\n" and "ConnectionRefusedError" in (result.error or "")
    finally:
        await box.close()
