"""The ``sync`` request a samsa master sends its gregor slave.

A samsa master always sends the 8-token form, carrying the message id it gave the message and
the producer's checksum (``-1`` when the producer sent none)::

    sync <topic> <partition> <len> <flag> <msgId> <checksum> <opaque>\\r\\n<body>

The slave answers like a put: ``result 200 <n> <opaque>\\r\\n<msgId> <partition> <offset>``
(``meta.protocol.put_reply.decode_put_reply`` reads the body), where the offset is the
slave's own. ``encode_sync`` is the hot-path encoder (byte for byte what
``encode(Sync(...))`` gives for a ``Sync`` with a checksum); ``encode_status_probe`` is Java's
probe of a slave's health, a 4-byte ``test`` message to the status-test topic. The decoder
of ``sync`` is ``meta.protocol.codec.Decoder``. Pure functions, thread-safe.
"""

from __future__ import annotations

from meta.protocol.commands import Sync
from meta.protocol.encoding import encode

SYNC_FORMAT = b"sync %s %d %d %d %d %d %d\r\n"
"""topic (bytes), partition, body length, flag, message id, checksum, opaque."""


def partition_sync_format(topic: bytes, partition: int) -> bytes:
    """``SYNC_FORMAT`` with one partition's topic and partition filled in: the format of
    its syncs' body length, flag, message id, checksum and opaque (a put's sync then
    formats five fields, not seven).

    Args:
        topic: the topic name as ASCII bytes.
        partition: the partition (never -1).
    """
    verb, _topic, _partition, rest = SYNC_FORMAT.split(b" ", 3)
    return b" ".join((verb, topic.replace(b"%", b"%%"), b"%d" % partition, rest))


STATUS_TEST_TOPIC = "_metaq_slave_status_test"
"""The topic a gregor slave creates at start-up and a master probes (Java's default name)."""

STATUS_TEST_BODY = b"test"
STATUS_TEST_CHECKSUM = 1484750348
"""The record checksum of ``STATUS_TEST_BODY``, as Java's master sends it."""


def encode_sync(
    topic: bytes, partition: int, flag: int, msg_id: int, checksum: int, opaque: int, body: bytes
) -> bytes:
    """One 8-token ``sync`` frame: header and body.

    Args:
        topic: the topic name as ASCII bytes (legal names are ASCII).
        partition: the resolved partition (never -1).
        flag: the message flag, as the producer sent it.
        msg_id: the master's message id (stored as is by the slave).
        checksum: the producer's checksum, or -1 when it sent none.
        opaque: the request's opaque; the slave's reply carries it back.
        body: the put body exactly as the producer sent it.
    """
    return SYNC_FORMAT % (topic, partition, len(body), flag, msg_id, checksum, opaque) + body


def encode_status_probe(msg_id: int, opaque: int) -> bytes:
    """Java's probe of its slave: ``sync _metaq_slave_status_test 0 4 0 <id> 1484750348
    <opaque>`` and the body ``test``."""
    return encode_sync(
        STATUS_TEST_TOPIC.encode(), 0, 0, msg_id, STATUS_TEST_CHECKSUM, opaque, STATUS_TEST_BODY
    )


# The hot-path formats must stay the generic encoder's 8-token form (STYLE 6, at import time).
assert encode_sync(b"t", 1, 2, -3, 4, 5, b"ab") == encode(Sync("t", 1, b"ab", 2, -3, 5, 4))
assert partition_sync_format(b"t%", 1) % (2, 3, -4, 5, 6) == SYNC_FORMAT % (
    b"t%",
    1,
    2,
    3,
    -4,
    5,
    6,
)
