"""``send_message_async`` in direct mode against a real broker process, and its reply converter.

The future-based producer is the throughput path: replies are decoded in bulk and completed
in batches on the connection's reader thread. These tests pin what that must keep: a real
``concurrent.futures.Future``, the message's id, partition and offset set before the future
completes, send order kept per connection, broker refusals as failed ``SendResult``s, and
every future completed exactly once when the connection is lost.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, as_completed, wait

import pytest

from meta.client import Message, MetaClientConfig, MetaMessageSessionFactory, Partition
from meta.client.produce import put_result as put_result_module
from meta.client.produce.put_result import SendResultConverter
from meta.errors import ClientError
from meta.protocol.commands import Data, Result
from tests.integration.broker_process import BrokerProcess

WAIT_S = 10.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("broker"), topics={"a-*": {}})
    process.start()
    yield process
    process.stop()


@pytest.fixture
def producer(broker):
    config = MetaClientConfig(server_url=f"meta://127.0.0.1:{broker.port}")
    with MetaMessageSessionFactory(config) as factory:
        yield factory.create_producer()


def test_async_sends_are_real_futures_completed_in_send_order(producer):
    messages = [Message("a-order", b"m%d" % n) for n in range(3000)]
    futures = [producer.send_message_async(message) for message in messages]
    assert all(isinstance(future, Future) for future in futures)
    done = list(as_completed(futures, timeout=WAIT_S))
    assert len(done) == 3000
    results = [future.result(0) for future in futures]
    assert all(result.success for result in results)
    by_partition: dict[Partition, list[int]] = {}
    for result in results:
        by_partition.setdefault(result.partition, []).append(result.offset)
    for offsets in by_partition.values():  # the broker picks partitions in direct mode
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert [message.offset for message in messages] == [result.offset for result in results]
    assert [message.id for message in messages] == [result.msg_id for result in results]


def test_the_message_is_filled_in_before_its_future_completes(producer):
    seen: list = []
    lock = threading.Lock()

    def check(future):
        message = messages_by_future[future]
        with lock:
            seen.append((message.id, message.partition, message.offset, future.result(0)))

    messages_by_future = {}
    for n in range(200):
        message = Message("a-fill", b"%d" % n)
        future = producer.send_message_async(message)
        messages_by_future[future] = message
    for future in messages_by_future:
        future.add_done_callback(check)
    wait(list(messages_by_future), timeout=WAIT_S)
    assert len(seen) == 200
    for msg_id, partition, offset, result in seen:
        assert (msg_id, partition, offset) == (result.msg_id, result.partition, result.offset)


def test_a_refused_put_is_a_failed_send_result_and_the_connection_keeps_working(producer):
    refused = producer.send_message_async(Message("not-configured", b"x")).result(WAIT_S)
    assert not refused.success and refused.error_message and refused.offset == -1
    assert producer.send_message_async(Message("a-after", b"x")).result(WAIT_S).success


def test_losing_the_broker_fails_every_in_flight_future_exactly_once(tmp_path):
    broker = BrokerProcess(tmp_path, topics={"a-*": {}}).start()
    config = MetaClientConfig(server_url=f"meta://127.0.0.1:{broker.port}")
    calls: list = []
    try:
        with MetaMessageSessionFactory(config) as factory:
            producer = factory.create_producer()
            futures = []
            for n in range(2000):
                future = producer.send_message_async(Message("a-loss", b"%d" % n), 30.0)
                future.add_done_callback(calls.append)
                futures.append(future)
                if n == 1000:
                    broker.kill()
            done, not_done = wait(futures, timeout=WAIT_S)
            assert not not_done
    finally:
        broker.kill()
    assert sorted(map(id, calls)) == sorted(map(id, futures))
    for future in futures:
        error = future.exception(0)
        assert error is None or (isinstance(error, ClientError) and "127.0.0.1" in str(error))


def test_the_converter_maps_codes_like_java_and_sets_the_message():
    message = Message("a-unit", b"x")
    convert = SendResultConverter(message, 3)
    result = convert.from_result(200, b"77 1 4096")
    assert (result.success, result.partition, result.offset, result.msg_id) == (
        True,
        Partition(3, 1),
        4096,
        77,
    )
    assert (message.id, message.partition, message.offset) == (77, Partition(3, 1), 4096)
    assert convert(Result(403, b"closed", 1)).error_message == "403"
    assert convert(Result(500, b"disk full", 1)).error_message == "disk full"
    with pytest.raises(ClientError, match="malformed put reply"):
        convert.from_result(200, b"not numbers")
    with pytest.raises(ClientError, match="unexpected value frame"):
        convert(Data(b"", 1))


def test_the_partition_cache_of_the_reply_path_is_bounded(monkeypatch):
    monkeypatch.setattr(put_result_module, "_partitions", {})
    monkeypatch.setattr(put_result_module, "PARTITIONS_CACHED_MAX", 4)
    for number in range(10):
        result = SendResultConverter(Message("a-unit", b"x"), 1).from_result(
            200, b"1 %d 0" % number
        )
        assert result.partition == Partition(1, number)
    assert len(put_result_module._partitions) == 4
