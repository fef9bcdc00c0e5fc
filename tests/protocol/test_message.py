import pytest

from meta.errors import InvalidRecordError
from meta.protocol.message import (
    checksum,
    decode_payload,
    encode_payload,
    iter_messages,
    pack_message,
    scan_valid_prefix,
)

HELLO_RECORD = bytes.fromhex("00000005 3610a686 00000000fa003005 00000000 68656c6c6f")


def test_record_for_hello_equals_the_specs_25_byte_example():
    assert pack_message(4194316293, 0, b"hello") == HELLO_RECORD


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"", 0),
        (b"hello", 907060870),
        (b"a", 1756872259),
        (bytes.fromhex("00000001 61 68656c6c6f"), 1986522790),
    ],
)
def test_checksum_matches_spec_vectors(payload, expected):
    assert checksum(payload) == expected


def test_checksum_clears_the_top_bit_of_the_raw_crc():
    assert checksum(b"a") == 0xE8B7BE43 & 0x7FFFFFFF


def test_attribute_is_encoded_before_data_with_flag_bit_zero():
    assert encode_payload(b"hello", "a") == (bytes.fromhex("00000001 61") + b"hello", 1)


def test_empty_attribute_is_still_present():
    assert encode_payload(b"x", "") == (b"\x00\x00\x00\x00x", 1)
    assert decode_payload(1, b"\x00\x00\x00\x00x") == ("", b"x")


def test_payload_without_attribute_is_the_data():
    assert encode_payload(b"x", None) == (b"x", 0)
    assert decode_payload(0, b"x") == (None, b"x")


def test_attribute_length_past_the_payload_is_invalid():
    with pytest.raises(InvalidRecordError):
        decode_payload(1, b"\x00\x00\x00\x09ab")


def test_iter_messages_gives_absolute_offsets_and_stops_at_a_partial_record():
    data = pack_message(1, 0, b"a") + pack_message(2, 1, b"\x00\x00\x00\x00bc")
    records = list(iter_messages(data + HELLO_RECORD[:-1], base_offset=100))
    assert [(r.offset, r.msg_id) for r in records] == [(100, 1), (121, 2)]


def test_iter_messages_rejects_a_bad_checksum():
    corrupt = bytearray(HELLO_RECORD)
    corrupt[-1] ^= 1
    with pytest.raises(InvalidRecordError):
        list(iter_messages(bytes(corrupt)))


def test_scan_valid_prefix_stops_at_the_first_corrupt_record():
    good = pack_message(1, 0, b"a") + pack_message(2, 0, b"b")
    corrupt = bytearray(pack_message(3, 0, b"c"))
    corrupt[-1] ^= 0xFF
    tail = pack_message(4, 0, b"d")
    assert scan_valid_prefix(good + bytes(corrupt) + tail) == (len(good), 2)


def test_scan_valid_prefix_ignores_a_torn_tail_and_negative_lengths():
    good = pack_message(1, 0, b"abc")
    assert scan_valid_prefix(good + good[:7]) == (len(good), 1)
    assert scan_valid_prefix(good + b"\xff" * 20) == (len(good), 1)


def test_scan_valid_prefix_stops_at_a_zero_filled_tail_but_keeps_an_empty_message():
    """Goal: zeros after the records (a file whose size outran its data) are not read as
    empty messages, while a real empty message (it has a message id) still is a record.
    Method: valid records, then 27 zero headers; then the same with an empty message between."""
    good = pack_message(1, 0, b"abc") + pack_message(2, 0, b"")
    assert scan_valid_prefix(good + bytes(20 * 27)) == (len(good), 2)
    assert scan_valid_prefix(good + bytes(20 * 27) + pack_message(3, 0, b"x")) == (len(good), 2)
