"""A read full of requests is handled ``TURN_REQUESTS_MAX`` at a time, one slice per reactor
turn (``BrokerProtocol._yield_turn``), on a ``task.Clock`` and in-memory transports."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from meta.config import ZkConfig
from meta.protocol.codec import decode_all, encode
from meta.protocol.commands import Version
from meta.server.broker import Broker
from meta.server.protocol import TURN_REQUESTS_MAX, BrokerProtocol
from meta.store.manager import StoreManager
from tests.server.memory_broker import closing_broker
from tests.store.conftest import ManualExecutor, RecordingFiles, broker_config, topic_config

REQUESTS = 2 * TURN_REQUESTS_MAX + 10


def make_broker(tmp_path) -> tuple[Broker, Clock]:
    clock = Clock()
    config = broker_config(
        str(tmp_path),
        topics=(topic_config("test", str(tmp_path), num_partitions=1),),
        zookeeper=ZkConfig(connect="127.0.0.1:1", enabled=False),
    )
    executor = ManualExecutor()
    store = StoreManager(config, clock, files=RecordingFiles(), executor=executor)
    broker = closing_broker(Broker(config, clock, store=store), clock, executor)
    broker.start(listen=False)
    return broker, clock


def connect(broker: Broker) -> tuple[BrokerProtocol, StringTransport]:
    protocol = BrokerProtocol(broker)
    transport = StringTransport()
    protocol.makeConnection(transport)
    return protocol, transport


def versions(count: int) -> bytes:
    return b"".join(encode(Version(opaque)) for opaque in range(1, count + 1))


def test_a_flood_is_answered_a_slice_per_turn_with_reading_stopped_meanwhile(tmp_path):
    broker, clock = make_broker(tmp_path)
    flooder, flooder_transport = connect(broker)
    flooder.dataReceived(versions(REQUESTS))
    assert len(decode_all(flooder_transport.value())) == TURN_REQUESTS_MAX
    assert flooder_transport.producerState == "paused"
    other, other_transport = connect(broker)  # served before the flood's next slice
    other.dataReceived(versions(1))
    assert len(decode_all(other_transport.value())) == 1
    clock.advance(0)
    clock.advance(0)
    replies = decode_all(flooder_transport.value())
    assert [reply.opaque for reply in replies] == list(range(1, REQUESTS + 1))
    assert flooder_transport.producerState == "producing"


def test_a_half_close_after_a_flood_still_answers_every_request(tmp_path):
    broker, clock = make_broker(tmp_path)
    protocol, transport = connect(broker)
    protocol.dataReceived(versions(REQUESTS))
    protocol.readConnectionLost()
    assert not transport.disconnecting
    clock.advance(0)
    clock.advance(0)
    assert len(decode_all(transport.value())) == REQUESTS
    assert transport.disconnecting
