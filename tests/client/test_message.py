"""Client messages and send results (zk spec §0 record payload, §2.3)."""

import pytest

from meta.client.cluster import Partition
from meta.client.message import Message, SendResult, as_message, check_message
from meta.errors import ClientError, InvalidRecordError, SendFailedError
from meta.protocol.message import Record


def test_payload_without_attribute_is_the_data_with_flag_zero():
    assert Message("t", b"hello").payload_and_flag() == (b"hello", 0)


def test_payload_with_attribute_puts_the_length_prefixed_attribute_first():
    payload, flag = Message("t", b"hello", attribute="a").payload_and_flag()
    assert (payload, flag) == (b"\x00\x00\x00\x01ahello", 1)


def test_the_key_is_not_part_of_the_payload():
    with_key = Message("t", b"hello", attribute="a", key="order-1").payload_and_flag()
    assert with_key == Message("t", b"hello", attribute="a").payload_and_flag()


def test_from_record_decodes_attribute_and_copies_id_offset_and_partition():
    record = Record(offset=2048, msg_id=-77, flag=1, payload=b"\x00\x00\x00\x02abdata")
    received = Message.from_record("t", record, Partition(1, 3))
    assert received == Message(
        "t", b"data", attribute="ab", id=-77, partition=Partition(1, 3), offset=2048
    )


def test_from_record_without_the_flag_keeps_the_payload_as_data():
    record = Record(offset=0, msg_id=5, flag=0, payload=b"\x00\x00\x00\x02abdata")
    assert Message.from_record("t", record, Partition(0, 0)).data == b"\x00\x00\x00\x02abdata"


def test_from_record_refuses_an_attribute_that_does_not_fit():
    record = Record(offset=0, msg_id=5, flag=1, payload=b"\x00\x00\x00\x09ab")
    with pytest.raises(InvalidRecordError):
        Message.from_record("t", record, Partition(0, 0))


def test_a_message_round_trips_through_its_payload():
    sent = Message("t", b"\x00body", attribute="héllo")
    payload, flag = sent.payload_and_flag()
    received = Message.from_record("t", Record(0, 1, flag, payload), Partition(0, 0))
    assert (received.data, received.attribute) == (sent.data, sent.attribute)


def test_check_message_accepts_a_plain_message():
    check_message(Message("t", b"", attribute="", key=b"k"))


@pytest.mark.parametrize("topic", ["", "  ", None])
def test_check_message_refuses_a_blank_topic(topic):
    with pytest.raises(ClientError, match="topic must not be blank"):
        check_message(Message(topic, b"x"))


@pytest.mark.parametrize("data", [None, "text", bytearray(b"x")])
def test_check_message_refuses_data_that_is_not_bytes(data):
    with pytest.raises(ClientError, match="data must be bytes"):
        check_message(Message("t", data))


def test_check_message_refuses_a_non_string_attribute():
    with pytest.raises(ClientError, match="attribute must be a str"):
        check_message(Message("t", b"x", attribute=b"a"))


def test_check_message_refuses_a_key_of_another_type():
    with pytest.raises(ClientError, match="key must be"):
        check_message(Message("t", b"x", key=42))


def test_check_message_refuses_none():
    with pytest.raises(ClientError, match="must not be None"):
        check_message(None)


def test_a_failed_send_result_has_no_partition_and_offset_minus_one():
    assert SendResult.failure("403") == SendResult(False, None, -1, "403", None)


def test_a_send_result_is_immutable():
    result = SendResult(True, Partition(0, 1), 1024, None, msg_id=9)
    with pytest.raises(AttributeError):
        result.offset = 0


def test_raise_for_status_raises_on_a_refused_put_with_the_broker_text():
    refused = SendResult.failure("partition 0 of t is closed")
    with pytest.raises(SendFailedError, match="partition 0 of t is closed") as caught:
        refused.raise_for_status()
    assert caught.value.result is refused


def test_raise_for_status_returns_a_stored_result():
    stored = SendResult(True, Partition(0, 1), 4096, None, 7)
    assert stored.raise_for_status() is stored


def test_a_queued_result_is_neither_stored_nor_failed():
    queued = SendResult.queued_result()
    assert (queued.success, queued.queued, queued.failed) == (False, True, False)
    assert queued.offset == -1 and queued.error_message is None
    assert queued.raise_for_status() is queued


def test_as_message_builds_a_message_from_topic_and_data():
    assert as_message("t", b"x", "a", "k") == Message("t", b"x", "a", "k")
    message = Message("t", b"x")
    assert as_message(message, None) is message
    with pytest.raises(ClientError, match="takes no data"):
        as_message(message, b"y")
    with pytest.raises(ClientError, match="needs the data"):
        as_message("t", None)
