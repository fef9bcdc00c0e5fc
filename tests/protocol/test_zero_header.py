"""The zeroed-record rule: an all-zero header is never a message, a real empty message is.

Every decoder (``iter_messages``, the client's ``decode_batch``, the Spark reader's
``decode_message_set``, the slave's ``check_records``) refuses zeros with the same error and
still yields an empty message as a broker stores it.
"""

from __future__ import annotations

import pytest

from meta.client.fetch.received import decode_batch
from meta.errors import InvalidRecordError
from meta.message_id import IdWorker
from meta.protocol.message import HEADER_SIZE, is_zero_header, iter_messages, pack_message
from meta.slave.record_check import check_frame, check_records, frame_records, record_ends
from meta.spark.decoding import decode_message_set

GOOD = pack_message(IdWorker(0).next_id(), 0, b"before")
# A stored empty message: length 0 and checksum 0 (crc32(b"") is 0), but a real id, even
# from broker 0 (wall-clock milliseconds since 2011 fill the top bits).
EMPTY = pack_message(IdWorker(0).next_id(), 0, b"")
ZEROED = GOOD + bytes(3 * HEADER_SIZE) + GOOD


def test_a_stored_empty_message_is_not_a_zero_header():
    assert EMPTY[:8] == bytes(8)
    assert EMPTY != bytes(HEADER_SIZE)
    assert not is_zero_header(0, 0, int.from_bytes(EMPTY[8:16], "big", signed=True), 0)


def test_a_zero_header_is_the_only_header_the_rule_refuses():
    assert is_zero_header(0, 0, 0, 0)
    assert not is_zero_header(0, 0, 0, 1)
    assert not is_zero_header(0, 0, 7, 0)


def test_iter_messages_yields_a_real_empty_message():
    (record,) = iter_messages(EMPTY)
    assert (record.payload, record.msg_id != 0) == (b"", True)


def test_iter_messages_refuses_zeroed_bytes_naming_their_offset():
    records = iter_messages(ZEROED, 1000)
    assert next(records).payload == b"before"
    with pytest.raises(InvalidRecordError, match=f"zeroed bytes at offset {1000 + len(GOOD)}"):
        next(records)


def test_the_client_decoder_refuses_zeroed_bytes():
    batch = decode_batch(ZEROED, 0, "t", None, None)
    assert next(batch)[0].data == b"before"
    with pytest.raises(InvalidRecordError, match="zeroed bytes"):
        next(batch)


def test_the_client_decoder_yields_a_real_empty_message():
    ((message, size),) = decode_batch(EMPTY, 0, "t", None, None)
    assert (message.data, size) == (b"", HEADER_SIZE)


def test_the_spark_decoder_refuses_zeroed_bytes():
    with pytest.raises(InvalidRecordError, match=f"zeroed bytes at offset {len(GOOD)}"):
        decode_message_set(ZEROED)


def test_the_spark_decoder_keeps_a_real_empty_message():
    assert len(decode_message_set(EMPTY + GOOD)) == 2


def test_the_slave_check_refuses_zeroed_bytes_on_both_paths():
    with pytest.raises(InvalidRecordError, match="zeroed bytes"):
        check_records(ZEROED, record_ends(ZEROED, 0), 0)
    with pytest.raises(InvalidRecordError, match="zeroed bytes"):
        check_frame(ZEROED, frame_records(ZEROED, 0), 0)


def test_the_slave_check_passes_zero_bytes_inside_a_payload():
    data = pack_message(5, 0, bytes(64)) + EMPTY
    check_records(data, record_ends(data, 0), 0)
    check_frame(data, frame_records(data, 0), 0)
