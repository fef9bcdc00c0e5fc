"""The rules of a put (``meta.server.puts``): checksum, record, partition, failure replies."""

from __future__ import annotations

import random

import pytest
from twisted.internet.task import Clock

from meta.config import ZkConfig
from meta.message_id import IdWorker
from meta.protocol.codec import decode_all
from meta.protocol.commands import BodyTooLarge, Result
from meta.protocol.message import checksum, iter_messages, pack_message
from meta.server.broker import Broker
from meta.server.puts import (
    CHECKSUM_FAILURE,
    PutRefused,
    accepted_crc,
    accepted_crcs,
    put_failed,
    refused_by_slave,
    take_put,
    too_large,
)
from meta.store.manager import StoreManager
from tests.server.memory_broker import closing_broker
from tests.store.conftest import ManualExecutor, broker_config, topic_config

BODY = b"hello world"


def fields(body: bytes, checksum_field: int | None) -> tuple:
    return (b"test", b"0", 0, checksum_field, b"1", bytearray(body))


@pytest.mark.parametrize("checksum_field", [None, -1, checksum(BODY)])
def test_a_put_without_a_checksum_with_minus_one_or_the_right_one_is_accepted(checksum_field):
    assert accepted_crc(BODY, checksum_field) == checksum(BODY)


@pytest.mark.parametrize("checksum_field", [0, 12345, checksum(BODY) + 1, 2**31 - 1])
def test_a_put_with_a_wrong_checksum_is_refused(checksum_field):
    assert accepted_crc(BODY, checksum_field) is None


def test_a_run_is_accepted_up_to_its_first_wrong_checksum():
    puts = [fields(b"a", None), fields(b"b", checksum(b"b")), fields(b"c", 7), fields(b"d", -1)]
    assert accepted_crcs(puts, 0, 4) == [checksum(b"a"), checksum(b"b")]
    assert accepted_crcs(puts, 3, 4) == [checksum(b"d")]
    assert accepted_crcs(puts, 2, 2) == []


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def broker(tmp_path, clock) -> Broker:
    topics = (topic_config("test", str(tmp_path), num_partitions=4),)
    config = broker_config(
        str(tmp_path), topics=topics, zookeeper=ZkConfig(connect="127.0.0.1:1", enabled=False)
    )
    executor = ManualExecutor()
    store = StoreManager(config, clock, executor=executor)
    broker = closing_broker(Broker(config, clock, store=store), clock, executor)
    broker.ids = IdWorker(0, clock_ms=lambda: 1_900_000_000_000)
    broker.start(listen=False)
    return broker


def test_a_taken_put_is_stored_as_java_packs_the_message(broker):
    taken = take_put(broker, "test", 2, BODY, 5, checksum(BODY))
    assert taken.partition == 2
    assert taken.record == pack_message(taken.msg_id, 5, BODY)
    (record,) = iter_messages(taken.record)
    assert (record.msg_id, record.flag, record.payload) == (taken.msg_id, 5, BODY)


def test_partition_minus_one_takes_a_random_partition_of_the_topic(broker):
    random.seed(3)
    expected = random.Random(3).randrange(4)
    assert take_put(broker, "test", -1, BODY, 0, None).partition == expected


def test_a_wrong_checksum_is_refused_with_java_text(broker):
    with pytest.raises(PutRefused) as refused:
        take_put(broker, "test", 1, BODY, 0, 99)
    assert (refused.value.partition, refused.value.detail) == (1, CHECKSUM_FAILURE)


def test_an_unknown_topic_is_refused_naming_the_partition_chosen(broker):
    random.seed(5)
    expected = random.Random(5).randrange(broker.config.num_partitions)
    with pytest.raises(PutRefused) as refused:
        take_put(broker, "nosuch", -1, BODY, 0, None)
    assert refused.value.partition == expected
    assert refused.value.detail == "The server do not accept topic nosuch"


def test_a_refused_put_is_answered_500_with_java_text_and_counted(broker):
    (reply,) = decode_all(put_failed(broker, "test", 1, 9, "bad"))
    expected = f"Put message to [broker '{broker.uri}'] [partition 'test-1'] failed.Detail:bad"
    assert reply == Result(500, expected.encode(), 9)
    assert broker.counters.put_failed == 1


def test_a_slave_answers_403(broker):
    (reply,) = decode_all(refused_by_slave(broker, "test", 0, 4))
    assert (reply.code, reply.opaque) == (403, 4)
    assert b"only the master takes puts" in reply.body


def test_a_body_over_the_limit_is_answered_500_and_counted_as_a_put(broker):
    (reply,) = decode_all(too_large(broker, BodyTooLarge("put", 5000, 3, "test", 0)))
    assert (reply.code, reply.opaque) == (500, 3)
    assert b"message body of 5000 bytes is larger than maxMessageSize" in reply.body
    assert (broker.counters.cmd_put, broker.counters.put_failed) == (1, 1)


def test_puts_refused_for_their_size_show_in_stats_rejected(broker):
    assert broker.render_stats("rejected")[1] == (
        b"STATS\r\nput_too_large 0\r\nput_too_large_last -\r\nmax_message_size 1048576\r\nEND\r\n"
    )
    too_large(broker, BodyTooLarge("put", 1_048_586, 3, "test", 1))
    too_large(broker, BodyTooLarge("put", 2_000_000, 4, "test", 2))
    assert broker.render_stats("rejected")[1] == (
        b"STATS\r\nput_too_large 2\r\nput_too_large_last test-2 2000000\r\n"
        b"max_message_size 1048576\r\nEND\r\n"
    )


def test_puts_refused_for_their_size_are_logged_at_most_once_a_minute(broker, clock, caplog):
    """The first is logged at once, then one line per minute with the count so far: a client
    retrying an oversized put cannot flood the log."""
    with caplog.at_level("WARNING", logger="meta.server"):
        for _ in range(3):
            too_large(broker, BodyTooLarge("put", 1_048_586, 3, "test", 1))
        clock.advance(60)
        too_large(broker, BodyTooLarge("put", 1_048_586, 3, "test", 1))
    lines = [r.getMessage() for r in caplog.records if "refused a put" in r.getMessage()]
    assert len(lines) == 2
    assert "1048586 bytes to test-1" in lines[0] and "maxMessageSize 1048576" in lines[0]
    assert "4 refused so far" in lines[1]
