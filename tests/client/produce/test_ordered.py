"""Unit tests of the ordered producer's configuration, backlog rules and the async window.

A fake inner producer stands in for the brokers: it routes through the real
``SteeringSelector`` over a ``live`` list the test controls, and can be told to fail.
Recovery threads are off; tests call ``recover_round`` themselves.
"""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from meta.client import HashPartitionSelector, Message, Partition, SendResult
from meta.client.produce.async_producer import AsyncMessageProducer, permits_of
from meta.client.produce.ordered import (
    SENT_TO_LOCAL,
    LocalMessageStorage,
    OrderedMessageProducer,
    SteeringSelector,
    expand_partitions,
    parse_partitions_info,
)
from meta.client.produce.selectors import RoundRobinPartitionSelector
from meta.errors import ClientError
from tests.descriptors import closers

P20, P21 = Partition(2, 0), Partition(2, 1)


class FakeInner:
    """A ``MessageProducer`` double: records what reached the "broker"."""

    def __init__(self, selector, live: list[Partition]) -> None:
        self.selector = selector
        self.live = live
        self.sent: list[tuple[Partition, bytes]] = []
        self.error: ClientError | None = None
        self.reply: SendResult | None = None
        self.pending: list[Future] = []
        self.shut = False

    def publish(self, topic: str) -> None:
        pass

    def send_message(self, message: Message, timeout_s: float = 3.0) -> SendResult:
        partition = self.selector.get_partition(message.topic, self.live, message)
        if self.error is not None:
            raise self.error
        if self.reply is not None:
            return self.reply
        self.sent.append((partition, message.data))
        return SendResult(True, partition, len(self.sent), None, 1)

    def send_message_async(self, message: Message, timeout_s: float = 3.0) -> Future:
        future: Future = Future()
        self.pending.append(future)
        return future

    def shutdown(self) -> None:
        self.shut = True


def ordered(tmp_path, live, messages_max=100):
    """An ordered producer over a ``FakeInner`` on ``live``, its backlogs on ``tmp_path``;
    shut down (its backlogs closed) after the test."""
    steering = SteeringSelector(RoundRobinPartitionSelector())
    inner = FakeInner(steering, live)
    producer = OrderedMessageProducer(
        inner, steering, HashPartitionSelector(), {"t": (P20, P21)}, lambda topic: inner.live,
        LocalMessageStorage(tmp_path, messages_max), 1000, 60_000, recover_thread=False,
    )  # fmt: skip
    closers.add(producer.shutdown)
    return producer, inner


def key_for(producer, partition: Partition) -> str:
    return next(
        f"k{n}"
        for n in range(100)
        if producer.choose_partition(Message("t", b"", key=f"k{n}")) == partition
    )


def test_partitions_info_expands_and_sorts_numerically_ignoring_other_keys():
    info = {"topic.num.t": "10:2;2:1", "topic.num.u": "3:1;", "serverUrl": "x"}
    assert parse_partitions_info(info) == {
        "t": (Partition(2, 0), Partition(10, 0), Partition(10, 1)),
        "u": (Partition(3, 0),),
    }


@pytest.mark.parametrize("value", ["2", "2:0", "a:1", "-1:2", "2:x"])
def test_a_malformed_partitions_info_entry_is_refused(value):
    with pytest.raises(ClientError, match="topic t"):
        expand_partitions("t", value)


def test_a_topic_without_configured_partitions_is_an_error(tmp_path):
    producer, _inner = ordered(tmp_path, [P20, P21])
    with pytest.raises(ClientError, match="no configured partitions for topic u"):
        producer.send_message(Message("u", b"x", key="k"))


def test_a_live_partition_with_no_backlog_gets_the_message_directly(tmp_path):
    producer, inner = ordered(tmp_path, [P20, P21])
    result = producer.send_message(Message("t", b"a", key=key_for(producer, P21)))
    assert result.success and result.partition == P21 and result.offset == 1
    assert inner.sent == [(P21, b"a")]


def test_a_key_keeps_its_partition_and_goes_local_while_it_is_down(tmp_path):
    producer, inner = ordered(tmp_path, [P20])
    key = key_for(producer, P21)
    result = producer.send_message(Message("t", b"a", key=key))
    assert result == SendResult(False, P21, -1, SENT_TO_LOCAL, None, True)
    assert inner.sent == [] and producer.backlog_size("t", P21) == 1
    other = producer.send_message(Message("t", b"b", key=key_for(producer, P20)))
    assert other.partition == P20 and inner.sent == [(P20, b"b")]


def test_while_a_backlog_exists_new_messages_join_it_even_if_the_partition_is_live(tmp_path):
    producer, inner = ordered(tmp_path, [P20])
    key = key_for(producer, P21)
    producer.send_message(Message("t", b"1", key=key))
    inner.live.append(P21)
    assert producer.send_message(Message("t", b"2", key=key)).error_message == SENT_TO_LOCAL
    assert inner.sent == [] and producer.backlog_size("t", P21) == 2


@pytest.mark.parametrize("failure", ["connection", "403"])
def test_a_connection_error_or_a_403_stores_the_message_locally(tmp_path, failure):
    producer, inner = ordered(tmp_path, [P20, P21])
    if failure == "connection":
        inner.error = ClientError("cannot connect to broker")
    else:
        inner.reply = SendResult.failure("403")
    result = producer.send_message(Message("t", b"a", key=key_for(producer, P20)))
    assert result == SendResult(False, P20, -1, SENT_TO_LOCAL, None, True)
    assert producer.backlog_size("t", P20) == 1


def test_recovery_resends_in_order_and_keeps_what_was_not_acknowledged(tmp_path):
    """Goal: the drain is ordered, stops at the first failure, removes only acked messages.

    Method: three messages go local while the partition is down; the first drain fails on
    the first message (nothing removed); the second succeeds and empties the backlog, after
    which a new message goes straight to the broker.
    """
    producer, inner = ordered(tmp_path, [P20])
    key = key_for(producer, P21)
    for data in (b"1", b"2", b"3"):
        producer.send_message(Message("t", data, key=key))
    assert producer.recover_round() == 0  # still down
    inner.live.append(P21)
    inner.error = ClientError("connection refused")
    assert producer.recover_round() == 0 and producer.backlog_size("t", P21) == 3
    inner.error = None
    producer._next_try.clear()  # the retry interval (60 s) has "passed"
    assert producer.recover_round() == 3
    producer.send_message(Message("t", b"4", key=key))
    assert inner.sent == [(P21, b"1"), (P21, b"2"), (P21, b"3"), (P21, b"4")]
    assert producer.backlog_size("t", P21) == 0


def test_a_full_backlog_drops_the_message_with_a_failed_result(tmp_path, caplog):
    producer, _inner = ordered(tmp_path, [P20], messages_max=2)
    key = key_for(producer, P21)
    results = [producer.send_message(Message("t", b"%d" % n, key=key)) for n in range(3)]
    assert [(result.queued, result.failed) for result in results] == [
        (True, False),
        (True, False),
        (False, True),
    ]
    assert "DROPPED" in caplog.text


def test_a_backlog_survives_a_restart_of_the_producer(tmp_path):
    producer, _inner = ordered(tmp_path, [P20])
    producer.send_message(Message("t", b"kept", key=key_for(producer, P21)))
    producer.shutdown()
    again, inner = ordered(tmp_path, [P20, P21])
    assert again.backlog_size("t", P21) == 1
    assert again.recover_round() == 1 and inner.sent == [(P21, b"kept")]


def test_an_async_message_costs_one_permit_per_4096_bytes_at_least_one():
    assert [permits_of(Message("t", b"x" * n), 20000) for n in (0, 4095, 8192)] == [1, 1, 2]
    assert permits_of(Message("t", b"x" * 100_000), 5) == 5


def test_an_exhausted_window_or_a_failed_put_sends_the_message_to_the_backlog(tmp_path):
    inner = FakeInner(RoundRobinPartitionSelector(), [P20])
    producer = AsyncMessageProducer(
        inner, LocalMessageStorage(tmp_path, 100), window=2, recover_thread=False
    )
    results = [producer.async_send_message(Message("t", b"%d" % n)) for n in range(3)]
    assert all(result.queued and not result.success for result in results)
    assert len(inner.pending) == 2 and producer.available_permits == 0
    assert producer.storage.count("t", Partition(-1, -1)) == 1  # the window was full
    inner.pending[0].set_exception(ClientError("connection closed"))
    inner.pending[1].set_result(SendResult(True, P20, 0, None, 1))
    assert producer.available_permits == 2
    assert producer.recover_round() == 2
    assert sorted(data for _p, data in inner.sent) == [b"0", b"2"]
