"""The Metamorphosis message record: one layout on the wire (get replies) and on disk.

Layout (all integers big-endian, see docs/formats.md)::

    int32 payload_length | int32 checksum | int64 msg_id | int32 flag | payload

The checksum is CRC-32 (IEEE, ``meta.protocol.crc.crc32``) of the payload only, with the top bit
cleared.
A payload with flag bit 0 set starts with ``int32 attribute_length`` and the UTF-8 attribute.

A record whose 20-byte header is all zeros (length 0, checksum 0, id 0, flag 0) is not a
record but zeroed bytes (``is_zero_header``): every decoder here refuses it, see
docs/formats.md §2.2.

Invariants: functions here are pure and never trust their input: a bad record yields
``InvalidRecordError`` or ends a scan, never an exception from ``struct``. Thread-safe.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from meta.errors import InvalidRecordError
from meta.protocol.crc import crc32

HEADER_FORMAT = ">iiqi"
HEADER = struct.Struct(HEADER_FORMAT)
HEADER_SIZE = 20
assert HEADER_SIZE == struct.calcsize(HEADER_FORMAT)

ATTRIBUTE_LENGTH = struct.Struct(">i")
FLAG_ATTRIBUTE = 1
CHECKSUM_MASK = 0x7FFFFFFF
PAYLOAD_LENGTH_MAX = 2**31 - 1


def is_zero_header(length: int, stored_checksum: int, msg_id: int, flag: int) -> bool:
    """Whether a record header is all zeros: zeroed bytes, never a stored message.

    The one rule that tells a zeroed region from records (docs/formats.md §2.2). Zeros pass
    the other checks: length 0 fits anywhere and the CRC-32 of an empty payload is 0. A real
    empty message has length 0 and checksum 0 too, but never id 0 together with flag 0:
    metaq-py's ids carry wall-clock milliseconds since 2011 in their top bits, so they are
    positive, and a Java broker's id is 0 only if its monotonic clock read exactly its epoch
    while its broker id and sequence were 0.
    """
    return length == 0 and msg_id == 0 and stored_checksum == 0 and flag == 0


def zero_header_error(offset: int) -> InvalidRecordError:
    """The error for an all-zero header at ``offset`` (``is_zero_header``)."""
    return InvalidRecordError(
        f"zeroed bytes at offset {offset} (an all-zero record header: length 0, id 0), "
        "not a message: the data there is corrupt"
    )


def checksum(payload: bytes | bytearray | memoryview) -> int:
    """Return the Metamorphosis checksum: CRC-32 of ``payload`` with the top bit cleared."""
    return crc32(payload) & CHECKSUM_MASK


def pack_message(msg_id: int, flag: int, payload: bytes) -> bytes:
    """Build one stored record, byte-identical to Java's ``MessageUtils.makeMessageBuffer``.

    Args:
        msg_id: signed 64-bit message id.
        flag: signed 32-bit flag, stored verbatim.
        payload: the put body exactly as the client sent it.
    """
    return HEADER.pack(len(payload), crc32(payload) & CHECKSUM_MASK, msg_id, flag) + payload


def encode_payload(data: bytes, attribute: str | None) -> tuple[bytes, int]:
    """Return ``(payload, flag)`` for a client message: the attribute section goes first.

    An empty attribute is still present (four zero bytes, flag bit 0 set), as in Java.
    """
    if attribute is None:
        return data, 0
    encoded = attribute.encode("utf-8")
    return ATTRIBUTE_LENGTH.pack(len(encoded)) + encoded + data, FLAG_ATTRIBUTE


def decode_payload(flag: int, payload: bytes | memoryview) -> tuple[str | None, bytes | memoryview]:
    """Split a payload into ``(attribute, data)``; the inverse of ``encode_payload``.

    ``data`` is a slice of ``payload`` (a view, without a copy, when ``payload`` is one).

    Raises:
        InvalidRecordError: flag bit 0 is set but the attribute section does not fit.
    """
    if not flag & FLAG_ATTRIBUTE:
        return None, payload
    if len(payload) < ATTRIBUTE_LENGTH.size:
        raise InvalidRecordError("attribute flag set but payload shorter than 4 bytes")
    (length,) = ATTRIBUTE_LENGTH.unpack_from(payload)
    end = ATTRIBUTE_LENGTH.size + length
    if length < 0 or end > len(payload):
        raise InvalidRecordError(f"attribute length {length} does not fit the payload")
    try:
        attribute = str(payload[ATTRIBUTE_LENGTH.size : end], "utf-8")
    except UnicodeDecodeError as error:
        raise InvalidRecordError(f"attribute is not UTF-8: {error}") from None
    return attribute, payload[end:]


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record. ``offset`` is absolute when the caller gave a base offset."""

    offset: int
    msg_id: int
    flag: int
    payload: bytes

    @property
    def size(self) -> int:
        return HEADER_SIZE + len(self.payload)


def iter_messages(buffer: bytes | bytearray | memoryview, base_offset: int = 0) -> Iterator[Record]:
    """Yield the complete records of a message set (a get reply body or a segment slice).

    Stops quietly at a trailing partial record, as Java's ``MessageIterator`` does.

    Raises:
        InvalidRecordError: a complete record has a negative length or a wrong checksum, or
            its header is all zeros (``is_zero_header``).
    """
    view = memoryview(buffer)
    position = 0
    total = len(view)
    while total - position >= HEADER_SIZE:
        length, stored_checksum, msg_id, flag = HEADER.unpack_from(view, position)
        if length < 0:
            offset = base_offset + position
            raise InvalidRecordError(f"negative payload length {length} at offset {offset}")
        end = position + HEADER_SIZE + length
        if end > total:
            return
        if length == 0 and is_zero_header(length, stored_checksum, msg_id, flag):
            raise zero_header_error(base_offset + position)
        payload = bytes(view[position + HEADER_SIZE : end])
        if crc32(payload) & CHECKSUM_MASK != stored_checksum:
            raise InvalidRecordError(f"checksum mismatch at offset {base_offset + position}")
        yield Record(base_offset + position, msg_id, flag, payload)
        position = end


def scan_valid_prefix(buffer: bytes | bytearray | memoryview) -> tuple[int, int]:
    """Return ``(valid_length, record_count)`` of the longest prefix of whole, valid records.

    This is the recovery rule of Java's ``FileMessageSet.recover``: stop at a short header, a
    negative length, a record running past the end, or a checksum mismatch. Records after a bad
    one are not considered. One more stop than Java's: an all-zero header. Zeros pass the
    other checks (a payload of length 0 has checksum 0), but no broker assigns message id 0:
    they are a zero-filled tail, what a file shows when its size outran its data (a crash, or
    an ext4 journal aborted under writes), and Java would serve them as empty messages.
    """
    view = memoryview(buffer)
    position = 0
    count = 0
    total = len(view)
    while total - position >= HEADER_SIZE:
        length, stored_checksum, msg_id, flag = HEADER.unpack_from(view, position)
        end = position + HEADER_SIZE + length
        if length < 0 or end > total:
            break
        if is_zero_header(length, stored_checksum, msg_id, flag):
            break  # zeros, not a record
        if crc32(view[position + HEADER_SIZE : end]) & CHECKSUM_MASK != stored_checksum:
            break
        position = end
        count += 1
    return position, count
