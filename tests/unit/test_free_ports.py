"""The ports `troupe serve` picks to bind later (Serve's proxy, the replicas' range) come from
below the kernel's ephemeral range, where no ``bind(0)`` or outgoing connection of another
process (a Ray worker's gRPC server) can take them first."""

from __future__ import annotations

import socket

from troupe.serve.deployment import _ephemeral_ports, _free_port, free_port_range


def test_a_free_port_is_below_the_ephemeral_range_and_can_be_bound() -> None:
    ephemeral = _ephemeral_ports()
    ports = {_free_port("127.0.0.1") for _ in range(20)}
    if ephemeral.start > 20000:  # Linux's default range, as on CI
        assert all(p < ephemeral.start for p in ports), (sorted(ports), ephemeral)
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_free_range_is_free_throughout() -> None:
    first = free_port_range(16)
    for port in range(first, first + 16):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
