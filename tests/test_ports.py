"""``meta.ports.free_port``: ports for test and bench servers, outside the ephemeral range."""

from __future__ import annotations

import socket

from meta import ports


def test_a_port_lies_below_the_ephemeral_range_and_can_be_bound():
    low, _high = ports.ephemeral_range()
    port = ports.free_port()
    if low > ports.LOWEST + 1000:
        assert ports.LOWEST <= port < low
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))


def test_no_port_is_handed_out_twice():
    given = [ports.free_port() for _ in range(200)]
    assert len(set(given)) == len(given)


def test_a_port_in_use_is_skipped(monkeypatch):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        taken = busy.getsockname()[1]
        choices = iter([taken])
        monkeypatch.setattr(ports, "ephemeral_range", lambda: (65000, 65535))
        monkeypatch.setattr(ports.random, "randint", lambda low, high: next(choices, 0))
        port = ports.free_port()
    assert port != taken and port > 0
