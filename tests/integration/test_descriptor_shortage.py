"""Running out of file descriptors is transient: a real broker started with a low
``RLIMIT_NOFILE`` answers a put that needs a new segment with a clear 500 while idle
connections hold every descriptor, and takes puts again once they close, without a restart.
"""

from __future__ import annotations

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
