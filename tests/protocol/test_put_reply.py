"""The put reply's format and decoder (``meta.protocol.put_reply``), against golden bytes."""

from __future__ import annotations

import pytest

from meta.protocol.codec import decode_all, encode_result
from meta.protocol.commands import Result
from meta.protocol.put_reply import (
    PUT_REPLY,
    PUT_REPLY_BODY,
    PUT_REPLY_JOINED,
    TRANSACTIONAL_OFFSET,
    decode_put_reply,
    encode_put_reply,
    put_reply,
)


def test_a_put_reply_is_a_result_frame_naming_the_message():
    assert encode_put_reply(123, 2, 4096, 7) == b"result 200 10 7\r\n123 2 4096"


def test_a_put_inside_a_transaction_is_answered_with_offset_minus_one():
    assert encode_put_reply(5, 0, TRANSACTIONAL_OFFSET, 9) == b"result 200 6 9\r\n5 0 -1"


def test_the_byte_formats_give_the_same_frame_as_the_generic_encoder():
    body = PUT_REPLY_BODY % (123, b"2", 4096)
    assert PUT_REPLY % (len(body), b"7", body) == encode_result(200, body, 7)
    assert PUT_REPLY_JOINED % (len(body), b"7", 123, b"2", 4096) == encode_result(200, body, 7)


@pytest.mark.parametrize(
    ("msg_id", "partition", "offset", "opaque"),
    [
        (123, 2, 4096, 7),
        (5, 0, TRANSACTIONAL_OFFSET, 9),
        (2**62, 31, 2**40, 2**31 - 1),
        (0, 0, 0, 0),
    ],
)
def test_the_literal_formats_give_the_same_frame_as_the_named_ones(
    msg_id, partition, offset, opaque
):
    partition_digits, opaque_digits = b"%d" % partition, b"%d" % opaque
    body = PUT_REPLY_BODY % (msg_id, partition_digits, offset)
    expected = PUT_REPLY % (len(body), opaque_digits, body)
    assert put_reply(msg_id, partition_digits, offset, opaque_digits) == expected
    assert expected == encode_put_reply(msg_id, partition, offset, opaque)


def test_the_decoder_reads_back_what_the_encoder_wrote():
    (frame,) = decode_all(encode_put_reply(2**62, 31, 2**40, 1))
    assert isinstance(frame, Result)
    assert decode_put_reply(frame.body) == (2**62, 31, 2**40)


@pytest.mark.parametrize("body", [b"", b"1 2", b"1 2 3 4", b"1 x 3"])
def test_a_malformed_put_reply_body_raises_value_error(body):
    with pytest.raises(ValueError):
        decode_put_reply(body)
