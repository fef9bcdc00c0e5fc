"""The Python HTTP client (``meta.client.http``) against a real broker process over HTTP.

The broker serves the HTTP protocol on a free port (``test_http.start``); the client's
producer and consumer round-trip messages with attributes, follow a 301 as the TCP consumer
does, and keep working across a broker restart (the kept-alive connection is replaced).
"""

from __future__ import annotations

import pytest

from meta.client.consume.local_offsets import LocalOffsetStorage
from meta.client.http import HttpConsumer, HttpProducer, HttpSession
from meta.client.message import Message
from tests.integration.broker_process import free_port
from tests.integration.test_http import http_port, start


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    topics = {name: {} for name in ("test", "client", "moved")}
    broker = start(tmp_path_factory.mktemp("http-client"), topics=topics)
    broker.http_port = http_port(broker)
    yield broker
    broker.stop()


def test_the_python_http_client_round_trips_messages_with_attributes(broker):
    with HttpSession("127.0.0.1", broker.http_port) as session:
        producer = HttpProducer(session)
        sent = []
        for number in range(200):
            message = Message("client", b"body %d" % number, attribute=f"attr {number}")
            result = producer.send_message(message, partition=0)
            assert result.success, result.error_message
            sent.append((result.msg_id, message.data, message.attribute))
        consumer = HttpConsumer(session, "client", 0, max_size=1000)
        received = [(m.id, m.data, m.attribute) for m in consumer]
    assert received == sent


def test_the_python_http_client_follows_a_301_as_the_tcp_consumer(broker):
    with HttpSession("127.0.0.1", broker.http_port) as session:
        HttpProducer(session).send_message(Message("moved", b"one"), partition=0)
        consumer = HttpConsumer(session, "moved", 0, offset=2**63 - 1)
        assert consumer.fetch() == []
        assert consumer.offset == 23  # the broker's end offset, from X-Meta-Offset
        HttpProducer(session).send_message(Message("moved", b"two"), partition=0)
        assert [message.data for message in consumer] == [b"two"]


def test_a_put_over_http_survives_a_restart_and_continues_offsets(tmp_path):
    broker = start(tmp_path / "restart", port=free_port())
    try:
        port = http_port(broker)
        with HttpSession("127.0.0.1", port) as session:
            producer = HttpProducer(session)
            assert producer.send_message(Message("test", b"before"), partition=0).success
            broker.stop()
            broker.start()
            assert http_port(broker, run=2) == port
            result = producer.send_message(Message("test", b"after"), partition=0)
            assert (result.success, result.offset) == (True, 26)
            consumer = HttpConsumer(session, "test", 0)
            assert [message.data for message in consumer] == [b"before", b"after"]
    finally:
        broker.stop()


def test_ten_thousand_messages_round_trip_across_a_301_and_a_restart(tmp_path):
    """Goal: the client end to end. Method: 10,000 messages with attributes are sent on one
    kept-alive connection, half before and half after a broker restart; a consumer starting
    out of range (301, ``earliest``) reads every one back, in order, CRC checked."""
    broker = start(tmp_path / "many", port=free_port(), topics={"many": {"unflushThreshold": 1000}})
    try:
        port = http_port(broker)
        sent = []
        with HttpSession("127.0.0.1", port) as session:
            producer = HttpProducer(session)
            for number in range(10_000):
                if number == 5_000:
                    broker.stop()
                    broker.start()
                    assert http_port(broker, run=2) == port
                message = Message("many", b"m%d" % number, attribute=f"a{number % 7}")
                result = producer.send_message(message, partition=0)
                assert result.success, result.error_message
                sent.append((result.msg_id, message.data, message.attribute))
            consumer = HttpConsumer(
                session, "many", 0, offset=2**63 - 1, offset_reset="earliest", max_size=65536
            )
            received = [(m.id, m.data, m.attribute) for m in consumer]
        assert received == sent
    finally:
        broker.stop()


def test_the_consumer_loads_and_commits_its_offset_in_the_local_offset_storage(broker, tmp_path):
    storage = LocalOffsetStorage(str(tmp_path / "offsets"))
    with HttpSession("127.0.0.1", broker.http_port) as session:
        producer = HttpProducer(session)
        for data in (b"first", b"second"):
            assert producer.send_message(Message("test", data), partition=0).success
        first = HttpConsumer(session, "test", 0, group="g", offset_storage=storage)
        start = first.offset
        assert [message.data for message in first][-2:] == [b"first", b"second"]
        first.commit()
        assert producer.send_message(Message("test", b"third"), partition=0).success
        again = HttpConsumer(session, "test", 0, group="g", offset_storage=storage)
        assert again.offset > start
        assert [message.data for message in again] == [b"third"]
