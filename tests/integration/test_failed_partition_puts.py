"""Puts to a partition stopped by a failed fsync are each answered 500, however many.

A partition whose fsync failed refuses every later put at once. Each refusal is a ready
reply: it must not count among the connection's requests in flight (at most 16,384 before
the broker stops reading the connection), or a producer that keeps pipelining puts to the
stopped partition fills that count with refusals and its connection goes silent. A real
broker process (``fault_broker``: its segment fsyncs fail once a trigger file exists) takes
one connection's 20,500 pipelined puts after the failure; every one is answered, and the
connection still answers requests afterwards.
"""

from __future__ import annotations

import threading
from pathlib import Path

from meta.errors import MetaError
from meta.protocol.commands import Put, Version
from meta.protocol.message import checksum
from tests.integration.broker_process import BrokerProcess

PUTS = 20_500  # more than the 16,384 requests a connection may have in flight
BATCH = 500  # puts per send
RECEIVE_TIMEOUT_S = 60  # per reply: a generous bound, far above a refusal's microseconds


def fault_broker(tmp_path: Path, trigger: Path) -> BrokerProcess:
    broker = BrokerProcess(tmp_path / "broker", system={"unflushThreshold": 0})
    broker.module = "tests.integration.fault_broker"
    broker.arguments = ["--fail-when", str(trigger)]
    return broker


def put_wire(sequence: int) -> bytes:
    data = b"refused-%08d" % sequence
    return b"put test 0 %d 0 %d %d\r\n%s" % (len(data), checksum(data), sequence, data)


def test_every_put_to_a_partition_stopped_on_a_failed_fsync_is_answered(tmp_path):
    trigger = tmp_path / "disk-fails"
    broker = fault_broker(tmp_path, trigger)
    broker.start()
    try:
        with broker.connect(timeout_s=RECEIVE_TIMEOUT_S) as connection:
            data = b"stored"
            reply = connection.request(Put("test", 0, data, 0, 1, checksum(data)))
            assert reply.code == 200, reply
            trigger.touch()
            reply = connection.request(Put("test", 0, b"x", 0, 2, checksum(b"x")))
            assert reply.code == 500, reply
            assert "failed" in broker.log() and "fsync failed" in broker.log()

            codes: dict[int, int] = {}
            receiver_error: list[BaseException] = []

            def receive() -> None:
                try:
                    for _ in range(PUTS):
                        answer = connection.receive()
                        codes[answer.opaque] = answer.code
                except (OSError, MetaError) as error:  # a timeout: the connection went silent
                    receiver_error.append(error)

            receiver = threading.Thread(target=receive, daemon=True)
            receiver.start()
            for first in range(0, PUTS, BATCH):
                wire = b"".join(put_wire(10 + s) for s in range(first, min(first + BATCH, PUTS)))
                connection.send_bytes(wire)
            receiver.join(RECEIVE_TIMEOUT_S * 3)
            assert not receiver.is_alive()
            assert receiver_error == [], (len(codes), receiver_error, broker.log()[-2000:])
            assert len(codes) == PUTS
            assert set(codes.values()) == {500}
            # The connection still reads and answers requests.
            reply = connection.request(Version(connection.next_opaque()))
            assert reply.code == 200, reply
            reply = connection.request(Put("test", 0, b"y", 0, 99_999, checksum(b"y")))
            assert reply.code == 500, reply
    finally:
        broker.stop()
