"""The MCP URL policy, request-tool resolution and connection identity (no network: resolvers are fakes)."""

from __future__ import annotations

import ipaddress
import pickle

import pytest

from troupe.agentloop.mcp import McpError, McpServer, listing_failed
from troupe.protocol import InvalidRequest, ServerError
from troupe.protocol.errors import ExternalConnectorError
from troupe.runtime.mcp_policy import (
    ALLOWED_URLS_ENV,
    AddressGuard,
    AddressRefused,
    actor_name,
    check_server,
    check_url,
    connect_guard,
    connection_key,
    resolve_mcp_tool,
)
from troupe.runtime.settings import McpServerSpec, McpSettings, RuntimeSettings

DNS = {
    "mcp.example.com": ["93.184.216.34"],
    "v6.example.com": ["2606:2800:220:1:248:1893:25c8:1946"],
    "intranet.corp": ["10.1.2.3"],
    "rebind.example.com": ["93.184.216.34", "192.168.1.10"],
    "localhost": ["127.0.0.1", "::1"],
    "sneaky-metadata.example.com": ["169.254.169.254"],
}


def fake_resolver(host: str) -> list[str] | None:
    return DNS.get(host)


def why(url: str, patterns: tuple[str, ...] = ()) -> str | None:
    return check_url(url, patterns, resolver=fake_resolver)


@pytest.fixture(autouse=True)
def _no_env_allowlist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOWED_URLS_ENV, raising=False)


# -- the URL policy without an allowlist -------------------------------------------------


@pytest.mark.parametrize("url", [
    "https://mcp.example.com/mcp",
    "http://mcp.example.com:8080/sse",
    "https://v6.example.com/mcp",
    "https://93.184.216.34/mcp",
])
def test_public_urls_are_allowed(url: str) -> None:
    assert why(url) is None


@pytest.mark.parametrize(("url", "reason"), [
    ("http://127.0.0.1:8000/mcp", "loopback"),
    ("http://localhost:8000/mcp", "loopback"),
    ("http://[::1]/mcp", "loopback"),
    ("http://[::ffff:127.0.0.1]/mcp", "loopback"),
    ("http://10.0.0.5/mcp", "private"),
    ("http://172.16.3.4/mcp", "private"),
    ("http://192.168.0.1/mcp", "private"),
    ("http://[fc00::1]/mcp", "private"),
    ("http://intranet.corp/mcp", "private"),
    ("http://rebind.example.com/mcp", "private"),  # any private answer is enough
    ("http://169.254.10.10/mcp", "link-local"),
    ("http://[fe80::1]/mcp", "link-local"),
    ("http://169.254.169.254/latest/meta-data", "metadata"),
    ("http://metadata.google.internal/computeMetadata/v1", "metadata"),
    ("http://[fd00:ec2::254]/latest", "metadata"),
    ("http://sneaky-metadata.example.com/", "metadata"),
    ("http://0.0.0.0:8000/mcp", "unspecified"),
    ("http://nowhere.invalid/mcp", "could not be resolved"),
])
def test_non_public_hosts_are_refused(url: str, reason: str) -> None:
    answer = why(url)
    assert answer is not None and reason in answer


@pytest.mark.parametrize(("url", "reason"), [
    ("ftp://mcp.example.com/mcp", "scheme 'ftp'"),
    ("file:///etc/passwd", "scheme 'file'"),
    ("ws://mcp.example.com/mcp", "scheme 'ws'"),
    ("mcp.example.com/mcp", "scheme"),
    ("https://user:pw@mcp.example.com/mcp", "credentials"),
    ("https:///mcp", "no host"),
    ("http://mcp.example.com:99999/", "not a valid URL"),
])
def test_bad_urls_are_refused(url: str, reason: str) -> None:
    answer = why(url)
    assert answer is not None and reason in answer


# Every IANA special-purpose block, just inside (refused, with the reason's key word) and,
# where it has a public neighbour, just outside (allowed). ipaddress's own flags miss some of
# these (100.64.0.0/10, 192.88.99.0/24, fec0::/10, the embedded IPv4 of NAT64 and 6to4).
REFUSED = [
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "this network"),
    ("10.0.0.1", "private"),
    ("10.255.255.255", "private"),
    ("100.64.0.1", "carrier-grade NAT"),
    ("100.127.255.254", "carrier-grade NAT"),
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("169.254.1.1", "link-local"),
    ("172.16.0.1", "private"),
    ("172.31.255.254", "private"),
    ("192.0.0.1", "IETF protocol assignment"),
    ("192.0.0.9", "IETF protocol assignment"),
    ("192.0.2.10", "documentation"),
    ("192.88.99.1", "6to4 relay"),
    ("192.168.1.1", "private"),
    ("198.18.0.1", "benchmarking"),
    ("198.19.255.254", "benchmarking"),
    ("198.51.100.7", "documentation"),
    ("203.0.113.7", "documentation"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "broadcast"),
    ("::", "unspecified"),
    ("::1", "loopback"),
    ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped: the embedded address decides
    ("::ffff:10.1.2.3", "private"),
    ("::ffff:100.64.0.1", "carrier-grade NAT"),
    ("64:ff9b::7f00:1", "loopback"),  # NAT64 of 127.0.0.1
    ("64:ff9b::a9fe:101", "link-local"),  # NAT64 of 169.254.1.1
    ("64:ff9b:1::c0a8:101", "private"),  # local-use NAT64 of 192.168.1.1
    ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
    ("2002:a00:1::1", "private"),  # 6to4 of 10.0.0.1
    ("100::1", "discard-only"),
    ("2001::1", "IETF protocol assignment"),  # Teredo
    ("2001:2::1", "IETF protocol assignment"),  # benchmarking
    ("2001:10::1", "IETF protocol assignment"),  # ORCHID (deprecated)
    ("2001:db8::1", "documentation"),
    ("3fff::1", "documentation"),
    ("5f00::1", "segment-routing"),
    ("fc00::1", "private"),
    ("fdff:ffff::1", "private"),
    ("fe80::1", "link-local"),
    ("febf::1", "link-local"),
    ("fec0::1", "site-local"),
    ("ff02::1", "multicast"),
    ("::127.0.0.1", "not a global unicast"),  # IPv4-compatible (deprecated)
    ("4000::1", "not a global unicast"),  # unallocated, outside 2000::/3
    ("169.254.169.254", "metadata"),
    ("::ffff:169.254.169.254", "metadata"),
    ("64:ff9b::a9fe:a9fe", "metadata"),
]
ALLOWED = [
    "1.1.1.1",
    "9.255.255.255",  # just below 10/8
    "11.0.0.1",
    "100.63.255.255",  # just below 100.64/10
    "100.128.0.1",  # just above it
    "126.255.255.255",
    "128.0.0.1",
    "169.253.255.255",
    "172.15.255.255",
    "172.32.0.1",
    "192.0.1.1",
    "192.31.196.1",  # AS112: special-purpose but globally reachable
    "192.88.98.255",
    "192.167.255.255",
    "192.169.0.1",
    "198.17.255.255",
    "198.20.0.1",
    "223.255.255.255",
    "2606:4700:4700::1111",
    "2001:4860:4860::8888",
    "2001:1::1",  # PCP anycast: inside 2001::/23, globally reachable
    "2001:3::1",  # AMT
    "2001:4:112::1",  # AS112-v6
    "2001:20::1",  # ORCHIDv2
    "2001:200::1",  # just above 2001::/23
    "::ffff:8.8.8.8",  # IPv4-mapped public
    "64:ff9b::808:808",  # NAT64 of 8.8.8.8
    "2002:808:808::1",  # 6to4 of 8.8.8.8
]


@pytest.mark.parametrize(("address", "reason"), REFUSED)
def test_every_special_purpose_range_is_refused(address: str, reason: str) -> None:
    literal = f"[{address}]" if ":" in address else address
    answer = why(f"http://{literal}/mcp")
    assert answer is not None and reason in answer, answer
    # The same address behind a host name, which is how a rebinding attacker would serve it.
    resolved = check_url("https://name.example/mcp", resolver=lambda host: [address])
    assert resolved is not None and reason in resolved, resolved
    assert reason == "metadata" or f"resolves to {ipaddress.ip_address(address)}," in resolved, resolved


@pytest.mark.parametrize("address", ALLOWED)
def test_public_addresses_are_allowed(address: str) -> None:
    literal = f"[{address}]" if ":" in address else address
    assert why(f"https://{literal}/mcp") is None
    assert check_url("https://name.example/mcp", resolver=lambda host: [address]) is None


@pytest.mark.parametrize(("address", "reason"), REFUSED)
def test_allowlisted_urls_may_reach_private_addresses_but_never_metadata(address: str, reason: str) -> None:
    guard = AddressGuard(allow_private=True, resolver=lambda host: [address])
    if reason == "metadata":
        with pytest.raises(AddressRefused, match="metadata"):
            guard.addresses("name.example")
    else:
        assert guard.addresses("name.example") == [address]


# -- the guard at connect time -----------------------------------------------------------


def test_guard_checks_every_address_it_will_connect_to() -> None:
    guard = AddressGuard(resolver=fake_resolver)
    assert guard.addresses("mcp.example.com") == ["93.184.216.34"]
    assert guard.addresses("93.184.216.34") == ["93.184.216.34"]  # a literal is not resolved
    assert guard.addresses("[2606:4700:4700::1111]") == ["2606:4700:4700::1111"]
    with pytest.raises(AddressRefused, match=r"rebind.example.com resolves to 192.168.1.10, a private address"):
        guard.addresses("rebind.example.com")  # one refused answer refuses the host
    with pytest.raises(AddressRefused, match="loopback"):
        guard.addresses("127.0.0.1")
    with pytest.raises(AddressRefused, match="could not be resolved"):
        guard.addresses("nowhere.invalid")
    assert isinstance(AddressRefused("x"), __import__("httpcore2").ConnectError)  # "nothing was sent"


def test_connect_guard_follows_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    public = McpServer(label="p", url="https://mcp.example.com/mcp")
    local = McpServer(label="l", url="http://127.0.0.1:9000/mcp")
    assert connect_guard(public, RuntimeSettings()) == AddressGuard(allow_private=False)
    allowing = RuntimeSettings(mcp=McpSettings(allowed_urls=("http://127.0.0.1:*",)))
    assert connect_guard(local, allowing) == AddressGuard(allow_private=True, allowed_urls=("http://127.0.0.1:*",))
    monkeypatch.setenv(ALLOWED_URLS_ENV, "http://127.0.0.1:9000/*")
    assert connect_guard(local, RuntimeSettings()) == AddressGuard(allow_private=True,
                                                                   allowed_urls=("http://127.0.0.1:9000/*",))
    configured = RuntimeSettings(mcp=McpSettings(servers=(McpServerSpec(label="l", url="http://127.0.0.1:9000/mcp"),
                                              McpServerSpec(label="s", command=("mcp-files",)))))
    assert connect_guard(local, configured) is None  # configured servers are trusted
    assert connect_guard(McpServer(label="s", command=("mcp-files",)), configured) is None
    guard = connect_guard(public, RuntimeSettings())
    assert pickle.loads(pickle.dumps(guard)) == guard  # it travels to the connection actor


def test_urls_a_server_names_itself_get_the_policy_its_url_got(monkeypatch: pytest.MonkeyPatch) -> None:
    # An HTTP+SSE server names the URL its messages go to (its `endpoint` event): the guard,
    # made where the request was checked, judges it by the same allowlist (it travels with
    # the guard: the connection actor's environment may not have TROUPE_MCP_ALLOWED_URLS).
    monkeypatch.setenv(ALLOWED_URLS_ENV, "http://127.0.0.1:8765/sse*, http://127.0.0.1:8765/messages/*")
    guard = connect_guard(McpServer(label="l", url="http://127.0.0.1:8765/sse"), RuntimeSettings())
    assert guard is not None
    monkeypatch.delenv(ALLOWED_URLS_ENV)
    assert guard.why_not_url("http://127.0.0.1:8765/messages/?session_id=abc") is None
    assert "does not match" in (guard.why_not_url("http://127.0.0.1:8765/admin/?session_id=abc") or "")
    public = AddressGuard(resolver=fake_resolver)  # no allowlist: public addresses only, as for server_url
    assert public.why_not_url("https://mcp.example.com/messages/?session_id=abc") is None
    assert "loopback" in (public.why_not_url("http://localhost/messages/") or "")
    assert "metadata" in (public.why_not_url("http://169.254.169.254/messages/") or "")


def test_origins_of_sse_endpoints() -> None:
    from troupe.runtime.mcp_sse import origin, shown

    # What "the same origin" compares (scheme, host, port; the default port is no port) and
    # what an error shows of a URL a server announced: never its query (the session id) or userinfo.
    assert origin("https://MCP.example.com:443/sse") == origin("https://mcp.example.com/messages/") == (
        "https://mcp.example.com")
    assert origin("http://mcp.example.com:8080/sse") != origin("http://mcp.example.com/sse")
    assert origin("http://[::1]:8080/sse") == "http://[::1]:8080"
    assert shown("http://user:pw@mcp.example.com:8080/messages/?session_id=abc#x") == (
        "http://mcp.example.com:8080/messages/")


# -- a request's server that cannot be listed: OpenAI's 424 ------------------------------


def test_listing_failure_is_openais_424() -> None:
    server = resolve_mcp_tool({"server_label": "wiki", "server_url": "https://x.example/mcp"}, RuntimeSettings(), 2)
    assert (server.from_request, server.param) == (True, "tools[2]")
    err = listing_failed(server, McpError("MCP server 'wiki' answered HTTP 401", kind="http", code=401))
    assert (err.status, err.type, err.code, err.param) == (424, "external_connector_error", "external_connector_error",
                                                         "tools[2]")
    assert err.message == "Error retrieving tool list from MCP server: 'wiki'. Http status code: 401 (Unauthorized)"
    refused = listing_failed(server, McpError("MCP server 'wiki': could not connect (All connection attempts failed)"))
    assert refused.message == ("Error retrieving tool list from MCP server: 'wiki'. "
                               "Could not connect (All connection attempts failed)")
    assert err.to_body() == {"error": {"message": err.message, "type": "external_connector_error",
                                       "param": "tools[2]", "code": "external_connector_error"}}
    again = pickle.loads(pickle.dumps(err))  # it crosses the host actor's boundary
    assert isinstance(again, ExternalConnectorError) and repr(again) == repr(err)


def test_configured_servers_are_not_request_scoped() -> None:
    settings = RuntimeSettings(mcp=McpSettings(servers=(McpServerSpec(label="wiki", url="https://x.example/mcp"),)))
    server = resolve_mcp_tool({"type": "mcp", "server_label": "wiki"}, settings, 1)
    assert (server.from_request, server.param) == (False, "tools[1]")


# -- the allowlist -----------------------------------------------------------------------


def test_allowlist_lets_matching_private_urls_through() -> None:
    assert why("http://127.0.0.1:43123/mcp", ("http://127.0.0.1:*",)) is None
    assert why("http://intranet.corp/mcp", ("http://intranet.corp/*",)) is None


def test_allowlist_refuses_everything_else() -> None:
    patterns = ("https://*.example.com/*",)
    assert why("https://mcp.example.com/mcp", patterns) is None
    assert "does not match" in (why("https://mcp.example.org/mcp", patterns) or "")
    assert "does not match" in (why("http://mcp.example.com/mcp", patterns) or "")  # scheme is part of the URL


def test_a_wildcard_cannot_span_the_host() -> None:
    # fnmatch alone would let "*" swallow "evil.test/x" here.
    assert "does not match" in (why("https://evil.test/x.example.com/", ("https://*.example.com/*",)) or "")
    assert "does not match" in (why("https://mcp.example.com.evil.test/", ("https://mcp.example.com/*",)) or "")


def test_metadata_is_refused_even_when_allowlisted() -> None:
    assert "metadata" in (why("http://169.254.169.254/latest", ("http://*",)) or "")
    assert "metadata" in (why("http://sneaky-metadata.example.com/", ("http://*",)) or "")


def test_allowlist_from_settings_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    loopback = McpServer(label="local", url="http://127.0.0.1:9000/mcp")
    with pytest.raises(InvalidRequest):
        check_server(loopback, RuntimeSettings(), 0)
    check_server(loopback, RuntimeSettings(mcp=McpSettings(allowed_urls=("http://127.0.0.1:*",))), 0)
    monkeypatch.setenv(ALLOWED_URLS_ENV, "https://other.example/*, http://127.0.0.1:9000/*")
    check_server(loopback, RuntimeSettings(), 0)
    # Once an allowlist exists, public URLs outside it are refused too.
    with pytest.raises(InvalidRequest, match="does not match"):
        check_server(McpServer(label="pub", url="https://93.184.216.34/mcp"), RuntimeSettings(), 0)


def test_refusal_names_the_param_and_the_reason() -> None:
    server = McpServer(label="meta", url="http://169.254.169.254/", headers={"Authorization": "Bearer s3cret"})
    with pytest.raises(InvalidRequest) as caught:
        check_server(server, RuntimeSettings(), 2)
    err = caught.value
    assert (err.status, err.param, err.code) == (400, "tools[2].server_url", "invalid_value")
    assert "metadata" in err.message and "'meta'" in err.message and "s3cret" not in err.message
    with pytest.raises(InvalidRequest) as caught:
        check_server(server, RuntimeSettings())
    assert caught.value.param == "tools"


def test_configured_servers_are_trusted() -> None:
    settings = RuntimeSettings(mcp=McpSettings(servers=(
        McpServerSpec(label="local", url="http://127.0.0.1:9000/mcp"),
        McpServerSpec(label="files", command=("mcp-files", "--root", "/srv")),
    )))
    check_server(McpServer(label="local", url="http://127.0.0.1:9000/mcp"), settings, 0)
    check_server(McpServer(label="files", command=("mcp-files", "--root", "/srv")), settings, 1)
    with pytest.raises(InvalidRequest, match="not a configured server"):
        check_server(McpServer(label="x", command=("sh", "-c", "true")), settings, 0)


# -- resolving a request's tool ----------------------------------------------------------


def test_resolve_a_request_server() -> None:
    server = resolve_mcp_tool({
        "type": "mcp", "server_label": "deepwiki", "server_url": "https://mcp.example.com/mcp",
        "authorization": "tok123", "headers": {"X-Team": "a"},
        "allowed_tools": {"tool_names": ["ask", "read"]}, "require_approval": "never",
        "server_description": "Docs",
    }, RuntimeSettings(), 0)
    assert server.url == "https://mcp.example.com/mcp"
    assert server.headers == {"X-Team": "a", "Authorization": "Bearer tok123"}
    assert server.allowed_tools == frozenset({"ask", "read"})
    assert server.require_approval == "never" and server.description == "Docs"
    assert resolve_mcp_tool({"server_label": "d", "server_url": "https://x.example/", "allowed_tools": ["a"]},
                            RuntimeSettings()).allowed_tools == frozenset({"a"})
    assert resolve_mcp_tool({"server_label": "d", "server_url": "https://x.example/"},
                            RuntimeSettings()).require_approval == "always"


def test_authorization_keeps_an_explicit_scheme_and_replaces_a_header() -> None:
    tool = {"server_label": "d", "server_url": "https://x.example/", "authorization": "Basic dXNlcjpwdw==",
            "headers": {"authorization": "Bearer old"}}
    assert resolve_mcp_tool(tool, RuntimeSettings()).headers == {"Authorization": "Basic dXNlcjpwdw=="}


def test_resolve_a_configured_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIKI_TOKEN", "from-env")
    settings = RuntimeSettings(mcp=McpSettings(servers=(McpServerSpec(
        label="wiki", url="http://10.0.0.7/mcp", headers={"Authorization": "Bearer ${WIKI_TOKEN}", "X-A": "1"},
        allowed_tools=("search", "read"), require_approval="never", description="Internal wiki",
    ),)))
    server = resolve_mcp_tool({"type": "mcp", "server_label": "wiki"}, settings, 3)
    assert server.url == "http://10.0.0.7/mcp"
    assert server.headers == {"Authorization": "Bearer from-env", "X-A": "1"}
    assert server.allowed_tools == frozenset({"search", "read"})
    assert server.require_approval == "never" and server.description == "Internal wiki"
    check_server(server, settings, 3)  # trusted although private
    narrowed = resolve_mcp_tool({"server_label": "wiki", "allowed_tools": ["read", "delete"],
                                 "require_approval": "always", "authorization": "mine"}, settings, 3)
    assert narrowed.allowed_tools == frozenset({"read"})
    assert narrowed.require_approval == "always"
    assert narrowed.headers == {"X-A": "1", "Authorization": "Bearer mine"}


def test_unknown_label_without_url_is_refused() -> None:
    with pytest.raises(InvalidRequest) as caught:
        resolve_mcp_tool({"type": "mcp", "server_label": "nope"}, RuntimeSettings(), 1)
    assert caught.value.param == "tools[1].server_url" and "nope" in caught.value.message


def test_unset_env_var_is_a_server_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    settings = RuntimeSettings(mcp=McpSettings(servers=(McpServerSpec(label="w", url="https://x.example/",
                                                          headers={"X-Key": "${NOT_SET_ANYWHERE}"}),)))
    with pytest.raises(ServerError, match="NOT_SET_ANYWHERE"):
        resolve_mcp_tool({"server_label": "w"}, settings)


def test_bad_headers_are_refused() -> None:
    with pytest.raises(InvalidRequest) as caught:
        resolve_mcp_tool({"server_label": "d", "server_url": "https://x.example/", "headers": {"X": 1}},
                         RuntimeSettings(), 0)
    assert caught.value.param == "tools[0].headers"


# -- secrets and identity ----------------------------------------------------------------


def test_secrets_stay_out_of_reprs_and_names() -> None:
    server = resolve_mcp_tool({"server_label": "d", "server_url": "https://x.example/mcp",
                               "authorization": "s3cret-token", "headers": {"X-Api-Key": "k3y"}}, RuntimeSettings())
    spec = McpServerSpec(label="w", url="https://x.example/", headers={"X-Api-Key": "k3y"})
    for text in (repr(server), str(server), repr(spec), actor_name(server), connection_key(server)):
        assert "s3cret" not in text and "k3y" not in text
    assert pickle.loads(pickle.dumps(server)) == server  # servers travel to actors


def test_one_connection_per_target_and_credentials() -> None:
    a = McpServer(label="a", url="https://x.example/mcp", headers={"Authorization": "Bearer 1"})
    same = McpServer(label="other-label", url="https://x.example/mcp", headers={"authorization": "Bearer 1"},
                     require_approval="never")
    other_creds = McpServer(label="a", url="https://x.example/mcp", headers={"Authorization": "Bearer 2"})
    assert actor_name(a) == actor_name(same)
    assert actor_name(a) != actor_name(other_creds)
    assert actor_name(a).startswith("troupe-mcp-")
    assert actor_name(McpServer(label="s", command=("a", "b"))) != actor_name(McpServer(label="s", command=("a b",)))
