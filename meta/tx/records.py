"""Records of the transaction journal: the byte format of ``redo.<N>`` (DECISIONS 11).

The format is this project's own (docs/formats.md, "Transaction journal"); Java journals are
not readable. A file starts with the 8-byte ``FILE_MAGIC``; then records follow, each::

    u32 crc      CRC-32 (zlib) of every byte after this field: length, kind and body
    u32 length   byte length of the body
    u8  kind     APPEND 1, PREPARE 2, COMMIT 3, ROLLBACK 4, FORGET 5
    body         fields of the kind, big-endian; strings are u16 length + UTF-8

Bodies::

    APPEND    key, topic, i32 partition, u32 n, n bytes: the transaction's messages for that
              partition as stored message records back to back, in put order (each a 20-byte
              header with the message id given at put time, then the payload)
    PREPARE   key
    COMMIT    key, u8 was_prepared, u8 outcome, u16 count,
              count x (topic, i32 partition, i64 offset, u32 length, u32 crc)
    ROLLBACK  key, u8 was_prepared, u8 outcome
    FORGET    key

``outcome`` is 0 for a normal finish, or the heuristic state (4 committed, 5 rolled back) an
operator chose. A COMMIT names where each partition's batch goes *before* it is appended, so
recovery can check the batch by its CRC and append it only when it is missing.

Invariants: ``decode_body(kind, encode(record)[HEADER_SIZE:])`` gives the record back;
``read_record`` never trusts a length or kind it did not check, and reports any damage as
``InvalidRecordError`` (the journal truncates there). Pure functions; thread-safe.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from meta.errors import InvalidRecordError

FILE_MAGIC = b"metaqtx\x01"
RECORD_HEADER = struct.Struct(">IIB")
HEADER_SIZE = RECORD_HEADER.size
assert HEADER_SIZE == 9
BODY_BYTES_MAX = 1 << 30
"""A length above this is damage, not a record (a message is at most ``maxMessageSize``)."""

APPEND, PREPARE, COMMIT, ROLLBACK, FORGET = 1, 2, 3, 4, 5
HEURISTIC_NONE, HEURISTIC_COMMIT, HEURISTIC_ROLLBACK = 0, 4, 5

_U16 = struct.Struct(">H")
_I32_U32 = struct.Struct(">iI")
_FLAGS = struct.Struct(">BB")
_LOCATION = struct.Struct(">iqII")


@dataclass(frozen=True, slots=True)
class AppendRecord:
    """Messages of a transaction for one partition: ``record`` is their stored records."""

    key: str
    topic: str
    partition: int
    record: bytes


@dataclass(frozen=True, slots=True)
class PrepareRecord:
    """An XA branch was prepared."""

    key: str


@dataclass(frozen=True, slots=True)
class BatchLocation:
    """Where a commit puts one partition's batch, and the CRC-32 of all its bytes."""

    topic: str
    partition: int
    offset: int
    length: int
    crc: int


@dataclass(frozen=True, slots=True)
class CommitRecord:
    """A transaction commits: each partition's batch goes at its ``BatchLocation``."""

    key: str
    was_prepared: bool
    outcome: int
    batches: tuple[BatchLocation, ...]


@dataclass(frozen=True, slots=True)
class RollbackRecord:
    """A transaction was rolled back."""

    key: str
    was_prepared: bool
    outcome: int


@dataclass(frozen=True, slots=True)
class ForgetRecord:
    """An operator-finished (heuristic) XA branch was forgotten."""

    key: str


Record = AppendRecord | PrepareRecord | CommitRecord | RollbackRecord | ForgetRecord


def _string(text: str) -> bytes:
    data = text.encode()
    return _U16.pack(len(data)) + data


def encode(record: Record) -> bytes:
    """Return the framed bytes of ``record`` (header and body)."""
    kind, body = _encode_body(record)
    length = len(body)
    assert length <= BODY_BYTES_MAX
    after_crc = struct.pack(">IB", length, kind) + body
    return struct.pack(">I", zlib.crc32(after_crc)) + after_crc


def _encode_body(record: Record) -> tuple[int, bytes]:
    if isinstance(record, AppendRecord):
        head = _string(record.key) + _string(record.topic)
        return APPEND, head + _I32_U32.pack(record.partition, len(record.record)) + record.record
    if isinstance(record, PrepareRecord):
        return PREPARE, _string(record.key)
    if isinstance(record, CommitRecord):
        parts = [
            _string(record.key),
            _FLAGS.pack(record.was_prepared, record.outcome),
            _U16.pack(len(record.batches)),
        ]
        for batch in record.batches:
            parts.append(_string(batch.topic))
            parts.append(_LOCATION.pack(batch.partition, batch.offset, batch.length, batch.crc))
        return COMMIT, b"".join(parts)
    if isinstance(record, RollbackRecord):
        return ROLLBACK, _string(record.key) + _FLAGS.pack(record.was_prepared, record.outcome)
    if isinstance(record, ForgetRecord):
        return FORGET, _string(record.key)
    raise TypeError(f"not a journal record: {record!r}")


class _Reader:
    """Reads fields from a record body; any overrun is an ``InvalidRecordError``."""

    __slots__ = ("data", "position")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def take(self, size: int) -> bytes:
        end = self.position + size
        if end > len(self.data):
            raise InvalidRecordError("journal record body ends early")
        chunk = self.data[self.position : end]
        self.position = end
        return chunk

    def unpack(self, layout: struct.Struct) -> tuple:
        return layout.unpack(self.take(layout.size))

    def string(self) -> str:
        (size,) = self.unpack(_U16)
        try:
            return self.take(size).decode()
        except UnicodeDecodeError as error:
            raise InvalidRecordError(f"journal record string is not UTF-8: {error}") from error

    def done(self) -> None:
        if self.position != len(self.data):
            raise InvalidRecordError("journal record body has trailing bytes")


def decode_body(kind: int, body: bytes) -> Record:
    """Decode one record body of ``kind``.

    Raises:
        InvalidRecordError: unknown kind, or the body does not match its kind's layout.
    """
    reader = _Reader(body)
    key = reader.string()
    record: Record
    if kind == APPEND:
        topic = reader.string()
        partition, size = reader.unpack(_I32_U32)
        record = AppendRecord(key, topic, partition, reader.take(size))
    elif kind == PREPARE:
        record = PrepareRecord(key)
    elif kind == COMMIT:
        was_prepared, outcome = reader.unpack(_FLAGS)
        (count,) = reader.unpack(_U16)
        batches = []
        for _ in range(count):
            topic = reader.string()
            batches.append(BatchLocation(topic, *reader.unpack(_LOCATION)))
        record = CommitRecord(key, bool(was_prepared), outcome, tuple(batches))
    elif kind == ROLLBACK:
        was_prepared, outcome = reader.unpack(_FLAGS)
        record = RollbackRecord(key, bool(was_prepared), outcome)
    elif kind == FORGET:
        record = ForgetRecord(key)
    else:
        raise InvalidRecordError(f"unknown journal record kind {kind}")
    reader.done()
    return record


def read_record(buffer: bytes | memoryview, position: int) -> tuple[Record, int] | None:
    """Decode the record at ``position`` of ``buffer``; return it and its total size.

    Returns None when ``buffer`` ends before the record does (a torn tail, or more to read).

    Raises:
        InvalidRecordError: the CRC does not match, or the body is damaged.
    """
    available = len(buffer) - position
    if available < HEADER_SIZE:
        return None
    crc, length, kind = RECORD_HEADER.unpack_from(buffer, position)
    if length > BODY_BYTES_MAX:
        raise InvalidRecordError(f"journal record length {length} is implausible")
    size = HEADER_SIZE + length
    if available < size:
        return None
    if zlib.crc32(buffer[position + 4 : position + size]) != crc:
        raise InvalidRecordError("journal record CRC mismatch")
    body = bytes(buffer[position + HEADER_SIZE : position + size])
    return decode_body(kind, body), size
