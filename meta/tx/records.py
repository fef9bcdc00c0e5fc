"""Records of the transaction journal: the byte format of ``redo.<N>`` (docs/formats.md §6.1).

The format is this project's own (docs/formats.md, "Transaction journal"); Java journals are
not readable. A file starts with the 8-byte ``FILE_MAGIC`` (or ``FILE_MAGIC_V1``, a file of
version 1, which holds no COMMIT_DATA); then records follow, each::

    u32 crc      CRC-32 (zlib) of every byte after this field: length, kind and body
    u32 length   byte length of the body
    u8  kind     APPEND 1, PREPARE 2, COMMIT 3, ROLLBACK 4, FORGET 5, COMMIT_DATA 6
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
    COMMIT_DATA
              key, u16 count, count x (topic, i32 partition, i64 offset, u32 n, n bytes: the
              batch, as APPEND carries it)

``outcome`` is 0 for a normal finish, or the heuristic state (4 committed, 5 rolled back) an
operator chose. A COMMIT names where each partition's batch goes *before* it is appended, so
recovery can check the batch by its CRC and append it only when it is missing. COMMIT_DATA is
the commit of a transaction with no earlier record (local, or XA committed in one phase): its
batches and their locations in one record, instead of APPEND records and a COMMIT; the
record's CRC covers the batches, and recovery takes their CRCs from the bytes.

Invariants: ``decode_body(kind, encode(record)[HEADER_SIZE:])`` gives the record back;
``read_record`` never trusts a length or kind it did not check, and reports any damage as
``InvalidRecordError`` (the journal truncates there). Pure functions; thread-safe.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from meta.errors import InvalidRecordError
from meta.protocol.crc import crc32 as _crc32
from meta.protocol.message import CHECKSUM_MASK

FILE_MAGIC = b"metaqtx\x02"
FILE_MAGIC_V1 = b"metaqtx\x01"
"""Files of version 1 hold no COMMIT_DATA record; they are still replayed, but never get a
new transaction (a broker of version 1 refuses a version 2 file instead of misreading it)."""
RECORD_HEADER = struct.Struct(">IIB")
HEADER_SIZE = RECORD_HEADER.size
assert HEADER_SIZE == 9
BODY_BYTES_MAX = 1 << 30
"""A length above this is damage, not a record (a message is at most ``maxMessageSize``)."""

APPEND, PREPARE, COMMIT, ROLLBACK, FORGET, COMMIT_DATA = 1, 2, 3, 4, 5, 6
HEURISTIC_NONE, HEURISTIC_COMMIT, HEURISTIC_ROLLBACK = 0, 4, 5

_U16 = struct.Struct(">H")
_I32_U32 = struct.Struct(">iI")
_FLAGS = struct.Struct(">BB")
_LOCATION = struct.Struct(">iqII")
_CRC = struct.Struct(">I")
_LENGTH_KIND = struct.Struct(">IB")
_INLINE = struct.Struct(">iqI")


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


@dataclass(frozen=True, slots=True)
class InlineBatch:
    """One partition's batch inside a ``CommitDataRecord``: where it goes, and its bytes."""

    topic: str
    partition: int
    offset: int
    data: bytes


@dataclass(frozen=True, slots=True)
class CommitDataRecord:
    """A transaction that journaled nothing before commits: its batches travel inside."""

    key: str
    batches: tuple[InlineBatch, ...]


Record = (
    AppendRecord | PrepareRecord | CommitRecord | RollbackRecord | ForgetRecord | CommitDataRecord
)


def encode_commit(
    key: str, was_prepared: bool, outcome: int, placed: list[tuple[str, int, int, bytes]]
) -> bytes:
    """The framed record of a commit whose batches go where ``placed`` says (topic,
    partition, offset, batch): a COMMIT naming them with their CRCs when the transaction was
    prepared (its APPEND records hold the batches), else a COMMIT_DATA carrying them. Equal
    to ``encode`` of that record, built without record objects (the commit's hot path)."""
    if was_prepared:
        locations = tuple(
            BatchLocation(topic, partition, offset, len(data), _crc32(data) & CHECKSUM_MASK)
            for topic, partition, offset, data in placed
        )
        return encode(CommitRecord(key, True, outcome, locations))
    parts = [_string(key), _U16.pack(len(placed))]
    for topic, partition, offset, data in placed:
        parts += (_string(topic), _INLINE.pack(partition, offset, len(data)), data)
    return _frame(COMMIT_DATA, parts)


def _string(text: str) -> bytes:
    data = text.encode()
    return _U16.pack(len(data)) + data


def encode(record: Record) -> bytes:
    """Return the framed bytes of ``record`` (header and body), built with one join."""
    return _frame(*_body_parts(record))


def _frame(kind: int, parts: list[bytes]) -> bytes:
    length = sum(map(len, parts))
    assert length <= BODY_BYTES_MAX
    head = _LENGTH_KIND.pack(length, kind)
    crc = _crc32(head)
    for part in parts:
        crc = _crc32(part, crc)
    return b"".join([_CRC.pack(crc), head, *parts])


def _body_parts(record: Record) -> tuple[int, list[bytes]]:
    """The record's kind and its body as consecutive pieces (a batch is not copied here)."""
    if isinstance(record, CommitDataRecord):
        parts = [_string(record.key), _U16.pack(len(record.batches))]
        for batch in record.batches:
            parts += (
                _string(batch.topic),
                _INLINE.pack(batch.partition, batch.offset, len(batch.data)),
                batch.data,
            )
        return COMMIT_DATA, parts
    if isinstance(record, AppendRecord):
        head = _string(record.key) + _string(record.topic)
        return APPEND, [head, _I32_U32.pack(record.partition, len(record.record)), record.record]
    if isinstance(record, PrepareRecord):
        return PREPARE, [_string(record.key)]
    if isinstance(record, CommitRecord):
        parts = [
            _string(record.key),
            _FLAGS.pack(record.was_prepared, record.outcome),
            _U16.pack(len(record.batches)),
        ]
        for batch in record.batches:
            parts.append(_string(batch.topic))
            parts.append(_LOCATION.pack(batch.partition, batch.offset, batch.length, batch.crc))
        return COMMIT, parts
    if isinstance(record, RollbackRecord):
        return ROLLBACK, [_string(record.key), _FLAGS.pack(record.was_prepared, record.outcome)]
    if isinstance(record, ForgetRecord):
        return FORGET, [_string(record.key)]
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
    elif kind == COMMIT_DATA:
        (count,) = reader.unpack(_U16)
        inline = []
        for _ in range(count):
            topic = reader.string()
            partition, offset, size = reader.unpack(_INLINE)
            inline.append(InlineBatch(topic, partition, offset, reader.take(size)))
        record = CommitDataRecord(key, tuple(inline))
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
    if _crc32(buffer[position + 4 : position + size]) != crc:
        raise InvalidRecordError("journal record CRC mismatch")
    body = bytes(buffer[position + HEADER_SIZE : position + size])
    return decode_body(kind, body), size
