"""The put reply: its wire format, as byte-format constants, and its decoder.

A put that was taken is answered with a ``result`` frame of code 200 whose body names the
stored message::

    result 200 <body length> <opaque>\\r\\n<msg_id> <partition> <offset>

``offset`` is the record's absolute offset in its partition log, or ``-1`` for a put inside a
transaction (its offset is known only at commit). The frame is ``encode_result(200, body,
opaque)`` byte for byte; the constants below spell it for the broker's put paths, which format
many replies per read: ``PUT_REPLY % (len(body), opaque, body)`` with ``body = PUT_REPLY_BODY
% (msg_id, partition, offset)``. Their ``%s`` fields take the decimal ASCII digits of a put
header (``partition`` and ``opaque`` as the decoder found them), so no int is formatted twice.
``put_reply`` is the two formats in one call, spelt as literals: the compiled build
(``meta.compiled``) builds a literal format's bytes directly, where a format held in a name
goes through the generic ``bytes %``. ``encode_put_reply`` is the same for integer fields.
Pure definitions, thread-safe.
"""

from __future__ import annotations

from meta.protocol.encoding import encode_result

PUT_REPLY_HEAD = b"result 200 %d %s\r\n"
"""The frame line of a put reply: body length, opaque (decimal bytes)."""

PUT_REPLY_BODY = b"%d %s %d"
"""The body of a put reply: message id, partition (decimal bytes), offset."""

PUT_REPLY = PUT_REPLY_HEAD + b"%s"
"""A whole put reply from its body: body length, opaque (decimal bytes), body."""

PUT_REPLY_JOINED = PUT_REPLY_HEAD + PUT_REPLY_BODY
"""A whole put reply in one format, for callers that know the body length beforehand:
body length, opaque, message id, partition (decimal bytes), offset."""

TRANSACTIONAL_OFFSET = -1
"""The offset a put inside a transaction is answered with."""


# The two formats above with integer fields where they take header digits: the same bytes
# for ints, with no ``b"%d" %`` of its own per field (a samsa master answers every
# synchronous put through ``encode_put_reply``).
_PUT_REPLY_BODY_INTS = PUT_REPLY_BODY.replace(b"%s", b"%d")
_PUT_REPLY_INTS = PUT_REPLY_HEAD.replace(b"%s", b"%d") + b"%s"


def put_reply(msg_id: int, partition: bytes, offset: int, opaque: bytes) -> bytes:
    """``PUT_REPLY % (len(body), opaque, body)`` with ``body = PUT_REPLY_BODY % (msg_id,
    partition, offset)``: the reply to a put that was taken, from its header's digits.

    Args:
        msg_id: the message id the broker gave the message.
        partition: the partition the message went to, as the put header's decimal bytes.
        offset: its record's offset, or ``TRANSACTIONAL_OFFSET`` inside a transaction.
        opaque: the put's opaque, as the put header's decimal bytes.
    """
    # The formats of PUT_REPLY_BODY and PUT_REPLY, written out: only a literal format is
    # built without the generic ``bytes %`` when compiled (pinned to them below).
    body = b"%d %s %d" % (msg_id, partition, offset)
    return b"result 200 %d %s\r\n%s" % (len(body), opaque, body)


def encode_put_reply(msg_id: int, partition: int, offset: int, opaque: int) -> bytes:
    """The reply to a put that was taken.

    Args:
        msg_id: the message id the broker gave the message.
        partition: the partition the message went to.
        offset: its record's offset, or ``TRANSACTIONAL_OFFSET`` inside a transaction.
        opaque: the put's opaque.
    """
    body = _PUT_REPLY_BODY_INTS % (msg_id, partition, offset)
    return _PUT_REPLY_INTS % (len(body), opaque, body)


def decode_put_reply(body: bytes) -> tuple[int, int, int]:
    """``(msg_id, partition, offset)`` from the body of a put's 200 reply.

    Raises:
        ValueError: the body is not three integers separated by white space.
    """
    text_id, text_partition, text_offset = body.split()
    return int(text_id), int(text_partition), int(text_offset)


# The formats above must stay the generic result frame (STYLE 6: pinned at import time).
assert PUT_REPLY % (5, b"7", b"1 2 3") == encode_result(200, b"1 2 3", 7)
assert PUT_REPLY_JOINED % (5, b"7", 1, b"2", 3) == encode_result(200, b"1 2 3", 7)
assert encode_put_reply(1, 2, 3, 7) == encode_result(200, b"1 2 3", 7)
assert put_reply(1, b"2", 3, b"7") == PUT_REPLY % (5, b"7", PUT_REPLY_BODY % (1, b"2", 3))
assert put_reply(1, b"2", -1, b"7") == encode_result(200, b"1 2 -1", 7)
