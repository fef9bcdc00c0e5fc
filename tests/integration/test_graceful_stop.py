"""A graceful stop (SIGTERM) under a put load: every put is answered 200 or not at all."""

from __future__ import annotations

from meta.client.net.connection import BrokerConnection, ConnectionClosedError
from meta.protocol.commands import Put
from meta.protocol.message import checksum
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_crash import read_partition

WINDOW = 200
"""Puts in flight on the loading connection."""

REPLIES_BEFORE_STOP = 2_000
PUTS_MAX = 500_000


def test_a_stopping_broker_answers_no_put_with_an_error_it_did_not_store(tmp_path):
    """Goal: a broker stopping gracefully (SIGTERM, zkSyncTimeMs 0, group commit) answers
    every put it handled with 200 and leaves the others unanswered, so a producer sends those
    again elsewhere rather than getting a 500 it does not retry; and a 200 is stored.
    Method: one connection keeps ``WINDOW`` puts in flight; after ``REPLIES_BEFORE_STOP``
    replies the broker gets SIGTERM and the loop reads replies until the connection ends.
    Every reply must be 200; after a restart the partition holds exactly the acknowledged
    payloads, at the offsets their replies named."""
    broker = BrokerProcess(tmp_path, system={"unflushThreshold": 0}).start()
    acked: dict[int, bytes] = {}  # offset -> payload
    refused: list[bytes] = []
    sent: dict[int, bytes] = {}  # opaque -> payload, not answered yet

    def take_reply(connection: BrokerConnection) -> None:
        reply = connection.receive()
        data = sent.pop(reply.opaque)
        if reply.code == 200:
            acked[int(reply.body.split(b" ")[2])] = data
        else:
            refused.append(reply.body)

    try:
        with BrokerConnection("127.0.0.1", broker.port, timeout_s=30) as connection:
            try:
                for sequence in range(1, PUTS_MAX + 1):
                    data = b"message-%d" % sequence
                    connection.send(Put("test", 0, data, 0, sequence, checksum(data)))
                    sent[sequence] = data
                    if len(sent) >= WINDOW:
                        take_reply(connection)
                    if len(acked) + len(refused) == REPLIES_BEFORE_STOP:
                        broker.process.terminate()
                while sent:
                    take_reply(connection)
            except (ConnectionClosedError, OSError):
                pass  # The stopped broker closed the connection.
        assert broker.process.wait(30) == 0
        assert refused == [], f"{len(refused)} puts refused, the first: {refused[0]!r}"
        assert len(acked) >= REPLIES_BEFORE_STOP
        broker.start()
        assert read_partition(broker, "test") == acked
    finally:
        broker.stop()
