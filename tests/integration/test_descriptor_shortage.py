"""Running out of file descriptors is transient: a real broker started with a low
``RLIMIT_NOFILE`` answers a put that needs a new segment with a clear 500 while idle
connections hold every descriptor, and takes puts again once they close, without a restart;
and half-sent requests on the dashboard's port cannot take the descriptors the text port
needs.
"""

from __future__ import annotations

import re
import resource
import socket
import time

from meta.client.net.connection import BrokerConnection
from meta.protocol.commands import Put, Version
from meta.protocol.message import checksum
from tests.integration.broker_process import BrokerProcess

DESCRIPTORS_MAX = 128
CONNECTIONS_MAX = 400  # bound on the idle connections the test opens
PUTS_MAX = 200  # bound on the puts that fill a segment
SEGMENT_BYTES = 4096
RECOVERY_S = 30.0


def low_descriptor_limit() -> None:
    """In the broker's child process: soft and hard RLIMIT_NOFILE at DESCRIPTORS_MAX."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS_MAX, DESCRIPTORS_MAX))


def put(connection: BrokerConnection, index: int):
    data = b"message-%04d-" % index + b"x" * 80
    return connection.request(Put("test", 0, data, 0, index, checksum(data)))


def exhaust_descriptors(port: int) -> list[socket.socket]:
    """Open idle connections until the broker cannot take one more (its ``version`` gets no
    answer, or the connection is closed or reset); return them all, that one last."""
    idle: list[socket.socket] = []
    for opaque in range(CONNECTIONS_MAX):
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        idle.append(raw)
        raw.sendall(b"version %d\r\n" % opaque)
        raw.settimeout(1.0)
        try:
            if not raw.recv(4096):
                return idle  # closed at once: the broker ran out while accepting it
        except (TimeoutError, ConnectionResetError):
            return idle  # not accepted, or reset by a broker out of descriptors
    raise AssertionError(f"the broker still accepted connections after {CONNECTIONS_MAX}")


def test_a_partition_takes_puts_again_once_descriptors_are_free(tmp_path):
    """Goal: EMFILE when the next segment must be opened is transient. Method: a broker with
    RLIMIT_NOFILE=128 (soft and hard) and 4 KiB segments; idle connections take every free
    descriptor; puts on an earlier connection fill the segment until one gets 500 naming
    the cause; the idle connections close; within seconds a put is stored again."""
    broker = BrokerProcess(tmp_path, system={"maxSegmentSize": SEGMENT_BYTES})
    broker.preexec_fn = low_descriptor_limit
    broker.start()
    try:
        assert f"open-file limit (RLIMIT_NOFILE) is {DESCRIPTORS_MAX}" in broker.log()
        with broker.connect() as producer:
            assert put(producer, 0).code == 200
            idle = exhaust_descriptors(broker.port)
            try:
                replies = []
                for index in range(1, PUTS_MAX):
                    replies.append(put(producer, index))
                    if replies[-1].code != 200:
                        break
                refused = replies[-1]
                assert refused.code == 500, "no put needed a new segment"
                assert b"Too many open files" in refused.body
            finally:
                for raw in idle:
                    raw.close()
            deadline = time.monotonic() + RECOVERY_S
            while (reply := put(producer, PUTS_MAX)).code != 200:
                assert b"Too many open files" in reply.body
                assert time.monotonic() < deadline, "the partition did not take puts again"
                time.sleep(0.05)
            assert producer.request(Version(1)).code == 200
        assert "refuses appends until restart" not in broker.log()
        assert len(list((broker.data_path / "test-0").glob("*.meta"))) >= 2
    finally:
        broker.stop()


DASHBOARD_DESCRIPTORS_MAX = 1024
HALF_SENT_REQUESTS = 1200
DASHBOARD_SERVING = re.compile(r"dashboard serving http://[^:]+:(\d+)/")


def dashboard_descriptor_limit() -> None:
    """In the broker's child process: soft and hard RLIMIT_NOFILE at 1024."""
    limit = DASHBOARD_DESCRIPTORS_MAX
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def half_sent_request(port: int) -> socket.socket | None:
    """A dashboard connection holding a request without the blank line that ends its
    head; None when the broker refused or reset it."""
    try:
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    except OSError:
        return None
    try:
        raw.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    except OSError:
        raw.close()
        return None
    return raw


def test_half_sent_dashboard_requests_cannot_take_the_text_ports_descriptors(tmp_path):
    """Goal: the dashboard's port has a connection cap of its own, so clients holding
    half-sent requests on it cannot take the descriptors the text port needs. Method: a
    broker with RLIMIT_NOFILE=1024; 1,200 connections each send a dashboard request head
    without its end and stay open; the text port still answers ``version`` and takes a
    put, and the log names the dashboard's refusals and the key of its cap. The start-up
    warning counts the dashboard's connections too."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = HALF_SENT_REQUESTS + 256
    if soft < wanted:  # this process holds the 1,200 client sockets
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    broker = BrokerProcess(tmp_path)
    broker.preexec_fn = dashboard_descriptor_limit
    broker.start()
    held: list[socket.socket] = []
    try:
        assert "maxDashboardConnections=64" in broker.log()
        dashboard_port = int(DASHBOARD_SERVING.search(broker.log()).group(1))
        for _ in range(HALF_SENT_REQUESTS):
            raw = half_sent_request(dashboard_port)
            if raw is not None:
                held.append(raw)
        with broker.connect(timeout_s=30) as connection:
            assert connection.request(Version(1)).code == 200
            assert put(connection, 2).code == 200
        log = broker.log()
        assert "to the dashboard (dashboardHttpPort)" in log
        assert "(maxDashboardConnections=64)" in log
    finally:
        for raw in held:
            raw.close()
        broker.stop()
