"""Connection bounds of a real broker process over real sockets.

Each test starts a broker with small limits and plays the misbehaving client: one
connection too many, a connection that goes quiet, a header sent one byte at a time, a peer
that vanishes (keepalive), and a client that half-closes right after its requests.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from meta.protocol.commands import Get, Put, Version
from meta.protocol.message import checksum
from tests.integration.broker_process import BrokerProcess
from tests.integration.client_helpers import wait_for

TOPIC = "conn"
CONNECTIONS_MAX = 3
IDLE_TIMEOUT_S = 2
HEADER_TIMEOUT_S = 2
CLOSE_WAIT_S = 20.0


def start(directory: Path, **system: object) -> BrokerProcess:
    return BrokerProcess(directory, system=system, topics={TOPIC: {}}).start()


@pytest.fixture
def limited(tmp_path):
    broker = start(tmp_path, maxConnections=CONNECTIONS_MAX)
    yield broker
    broker.stop()


@pytest.fixture
def idle(tmp_path):
    broker = start(tmp_path, idleConnectionTimeoutInSeconds=IDLE_TIMEOUT_S)
    yield broker
    broker.stop()


@pytest.fixture
def slow_header(tmp_path):
    broker = start(tmp_path, headerTimeoutInSeconds=HEADER_TIMEOUT_S)
    yield broker
    broker.stop()


@pytest.fixture
def default_broker(tmp_path):
    broker = start(tmp_path)
    yield broker
    broker.stop()


def closed_by_broker(raw: socket.socket, timeout_s: float = CLOSE_WAIT_S) -> bytes:
    """Read until the broker closes (EOF or reset), bounded; return what arrived."""
    raw.settimeout(timeout_s)
    received = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            chunk = raw.recv(65536)
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk
    raise TimeoutError(f"the broker kept the connection open for {timeout_s} s")


def refused_at_once(port: int) -> bool:
    """A connection beyond the limit is closed before it is served: EOF with no reply, or a
    reset, which the kernel may deliver as soon as the connect (the broker accepted and
    closed it before the handshake reached the client) or at the first send."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as extra:
            extra.sendall(b"version 1\r\n")
            return closed_by_broker(extra) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def test_a_connection_beyond_max_connections_is_closed_and_logged(limited):
    open_ones = [limited.connect() for _ in range(CONNECTIONS_MAX)]
    try:
        for connection in open_ones:
            assert connection.request(Version(connection.next_opaque())).code == 200
        assert refused_at_once(limited.port)
        assert "refusing a connection from 127.0.0.1" in limited.log()
        assert "(maxConnections=3)" in limited.log()
        open_ones.pop().close()

        def admitted() -> bool:
            with limited.connect() as connection:
                try:
                    return connection.request(Version(connection.next_opaque())).code == 200
                except (ConnectionError, OSError):
                    return False

        wait_for(admitted, timeout_s=10, what="a slot after a connection closed")
    finally:
        for connection in open_ones:
            connection.close()


def test_an_idle_connection_is_closed_after_the_idle_timeout(idle):
    with socket.create_connection(("127.0.0.1", idle.port), timeout=10) as raw:
        raw.sendall(b"version 1\r\n")
        began = time.monotonic()
        received = closed_by_broker(raw)
        assert received.startswith(b"result 200 ")
        assert time.monotonic() - began >= IDLE_TIMEOUT_S - 0.5
    assert "(idleConnectionTimeoutInSeconds)" in idle.log()


def test_a_long_poll_is_not_idle(idle):
    wait_ms = (IDLE_TIMEOUT_S + 3) * 1000
    with idle.connect(timeout_s=30) as connection:
        data = b"first"
        put = Put(TOPIC, 0, data, 0, connection.next_opaque(), checksum(data))
        assert connection.request(put).code == 200
        end = 20 + len(data)
        began = time.monotonic()
        get = Get(TOPIC, "g", 0, end, 1 << 16, connection.next_opaque(), wait_ms)
        reply = connection.request(get)
        assert reply.code == 404, reply  # answered at the deadline, not cut off
        assert time.monotonic() - began >= wait_ms / 1000 - 0.5


def trickled_until_closed(raw: socket.socket, data: bytes, gap_s: float) -> float:
    """Send ``data`` a byte at a time, ``gap_s`` apart, until the broker closes the
    connection; return how long that took (fails when it never closes)."""
    raw.settimeout(gap_s)
    began = time.monotonic()
    for byte in data:
        try:
            raw.sendall(bytes([byte]))
            if raw.recv(1) == b"":
                return time.monotonic() - began
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - began
        if time.monotonic() - began > CLOSE_WAIT_S:
            break
    raise AssertionError(f"the broker kept a trickling connection open for {CLOSE_WAIT_S} s")


def test_a_header_sent_one_byte_at_a_time_is_cut_off(slow_header):
    with socket.create_connection(("127.0.0.1", slow_header.port), timeout=10) as raw:
        assert trickled_until_closed(raw, b"version 1" * 10, 0.5) < HEADER_TIMEOUT_S + 5
    assert "a header line was not completed within 2 s" in slow_header.log()


def test_a_put_body_sent_one_byte_at_a_time_is_cut_off(slow_header):
    """Goal: bytes of a body trickling in do not extend its deadline (each byte resets the
    idle timer). Method: a put header for 100 bytes, then one body byte every 0.4 s; the
    broker must close the connection within the header timeout (plus sweeps), long before
    the body could finish (40 s)."""
    with socket.create_connection(("127.0.0.1", slow_header.port), timeout=10) as raw:
        raw.sendall(b"put %s 0 100 0 1\r\n" % TOPIC.encode())
        assert trickled_until_closed(raw, b"x" * 100, 0.4) < HEADER_TIMEOUT_S + 10
    assert "a request body of 100 bytes was not completed within 2 s" in slow_header.log()
    with slow_header.connect() as connection:  # the broker serves others as ever
        assert connection.request(Version(connection.next_opaque())).code == 200


def keepalive_timer_on(local_port: int, remote_port: int) -> bool:
    """Whether the socket ``local_port`` -> ``remote_port`` runs its keepalive timer
    (``/proc/net/tcp``: timer kind 2)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, timer = fields[1], fields[2], fields[5]
        if int(local.split(":")[1], 16) == local_port and int(remote.split(":")[1], 16) == (
            remote_port
        ):
            return timer.split(":")[0] == "02"
    raise AssertionError(f"no socket {local_port} -> {remote_port} in /proc/net/tcp")


def test_accepted_sockets_have_keepalive_on(default_broker):
    with socket.create_connection(("127.0.0.1", default_broker.port), timeout=10) as raw:
        raw.sendall(b"version 1\r\n")
        assert raw.recv(64).startswith(b"result 200 ")
        assert keepalive_timer_on(default_broker.port, raw.getsockname()[1])


def test_replies_to_requests_before_a_half_close_are_delivered(default_broker):
    """Method: pipeline three puts (each answered only after its fsync) and a version, shut
    down the sending side at once, then read to EOF: four replies, then the close."""
    with socket.create_connection(("127.0.0.1", default_broker.port), timeout=10) as raw:
        request = b""
        for opaque in (1, 2, 3):
            body = b"m%d" % opaque
            request += b"put %s 0 %d 0 %d\r\n%s" % (TOPIC.encode(), len(body), opaque, body)
        raw.sendall(request + b"version 4\r\n")
        raw.shutdown(socket.SHUT_WR)
        received = closed_by_broker(raw)
    assert received.count(b"result 200 ") == 4, received
    for opaque in (1, 2, 3, 4):
        assert b" %d\r\n" % opaque in received
