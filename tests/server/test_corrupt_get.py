"""A get and known corrupt data, in process: the slice ends before it, a get in it is 500.

The range is given to the partition's ``health`` as recovery or the scrubber would
(``meta.store.corruption``); the reply is what the protocol writes.
"""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from meta.config import ZkConfig
from meta.protocol.codec import decode_all, encode
from meta.protocol.commands import Data, Get, Put
from meta.protocol.message import checksum, iter_messages
from meta.server.broker import Broker
from meta.server.protocol import BrokerProtocol
from meta.store.corruption import CorruptRange
from meta.store.manager import StoreManager
from tests.server.memory_broker import closing_broker
from tests.store.conftest import ManualExecutor, broker_config, topic_config

PAYLOAD = b"p" * 80  # 100-byte records


@pytest.fixture
def broker(tmp_path):
    executor = ManualExecutor()
    clock = Clock()
    config = broker_config(
        str(tmp_path),
        topics=(topic_config("test", str(tmp_path), num_partitions=1),),
        zookeeper=ZkConfig(connect="127.0.0.1:1", enabled=False),
        scrub_bytes_per_s=0,
    )
    store = StoreManager(config, clock, executor=executor)
    broker = closing_broker(Broker(config, clock, store=store), clock, executor)
    broker.start(listen=False)
    protocol = connect(broker)
    protocol.dataReceived(
        b"".join(encode(Put("test", 0, PAYLOAD, 0, n, checksum(PAYLOAD))) for n in range(5))
    )
    executor.run_all()
    log = broker.store.get("test", 0)
    log.health.add(
        CorruptRange(200, 300, "/data/test-0/x.meta", 200, "checksum mismatch", "scrubber")
    )
    return broker


def connect(broker: Broker) -> BrokerProtocol:
    protocol = BrokerProtocol(broker)
    protocol.makeConnection(StringTransport())
    return protocol


def get(broker: Broker, offset: int):
    protocol = connect(broker)
    protocol.dataReceived(encode(Get("test", "g", 0, offset, 1 << 20, 7)))
    (reply,) = decode_all(protocol.transport.value())
    return reply


def test_a_slice_that_runs_into_a_corrupt_range_ends_before_it(broker):
    reply = get(broker, 0)
    assert isinstance(reply, Data)
    assert [record.offset for record in iter_messages(reply.data)] == [0, 100]
    assert len(reply.data) == 200


@pytest.mark.parametrize("offset", [200, 250])
def test_a_get_inside_a_corrupt_range_is_500_naming_it_and_the_way_out(broker, offset):
    reply = get(broker, offset)
    text = reply.body.decode()
    assert reply.code == 500
    assert text.startswith("partition test-0: offsets 200 to 300 are corrupt and not served")
    assert "--partition 0-0 --to 300 --execute" in text
    assert "/data/test-0/x.meta (bad from position 200)" in text


def test_the_records_after_the_range_are_served(broker):
    reply = get(broker, 300)
    assert [record.offset for record in iter_messages(reply.data, 300)] == [300, 400]
