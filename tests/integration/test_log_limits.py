"""What a peer can make a real broker process log: rate-limited, short, and escaped.

Method: a fresh broker per test; the test connects from 127.0.0.1 and misbehaves, then
reads the broker's log file.
"""

from __future__ import annotations

import socket

import pytest

from tests.integration.broker_process import BrokerProcess
from tests.integration.client_helpers import wait_for

CLOSED_LINE = "closing connection from 127.0.0.1"


@pytest.fixture
def broker(tmp_path):
    process = BrokerProcess(tmp_path, topics={"logs": {}}).start()
    yield process
    process.stop()


def exchange(broker: BrokerProcess, request: bytes) -> bytes:
    """Send ``request``; read until the broker closes the connection (bounded)."""
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as raw:
        raw.sendall(request)
        received = b""
        while chunk := raw.recv(65536):
            received += chunk
        return received


def closed_lines(broker: BrokerProcess) -> list[str]:
    return [line for line in broker.log().splitlines() if CLOSED_LINE in line]


def test_malformed_connections_from_one_peer_log_a_few_warnings(broker):
    for _ in range(30):
        assert exchange(broker, b"bogus command\r\n") == b""
    wait_for(lambda: len(closed_lines(broker)) >= 5, timeout_s=10, what="the warnings")
    lines = closed_lines(broker)
    assert len(lines) == 5
    assert "further warnings from 127.0.0.1 are suppressed for 60 s" in lines[-1]


def test_a_long_malformed_header_logs_a_short_line(broker):
    assert exchange(broker, b"get logs g 0 " + b"9x" * 2000 + b" 100 1\r\n") == b""
    wait_for(lambda: closed_lines(broker), timeout_s=10, what="the warning")
    (line,) = closed_lines(broker)
    assert len(line) < 600
    assert "more characters)" in line


def test_control_bytes_from_a_transaction_key_are_escaped(broker):
    key = b"XID:1:0a:0b:q\x1b[31m\x07"
    request = b"transaction " + key + b" s HEURISTIC_COMMIT 7\r\nquit\r\n"
    exchange(broker, request)
    wait_for(lambda: "HEURISTIC_COMMIT" in broker.log(), timeout_s=10, what="the operator line")
    log = broker.log_path.read_bytes()
    assert b"\x1b" not in log
    assert b"\x07" not in log
    assert b"q\\x1b[31m\\x07" in log
