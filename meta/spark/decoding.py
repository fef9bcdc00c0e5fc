"""Bulk decoding of message sets (get replies) into Arrow columns, for the Spark reader.

The per-record path (``meta.protocol.message.iter_messages`` + ``decode_payload``) costs a
few microseconds of Python per message; this module does the same work per *reply*:

1. ``decode_message_set`` finds the record starts: while records have the size of the
   first one, one strided numpy view of the length fields confirms them all at once, and
   the rest is walked with one ``struct`` call per record; numpy then gathers every
   header field at once, the checksums are computed with ``meta.protocol.crc.crc32`` over
   memoryview slices (C speed) and compared as one array, and the attribute section is split off
   only for records with flag bit 0.
2. ``ColumnBuilder`` accumulates decoded sets and builds one ``pyarrow.RecordBatch`` per
   ``take_batch``: ``value`` from one ``b"".join`` of payload slices plus numpy-computed
   offsets (``pa.Array.from_buffers``), ``offset``/``msg_id``/``flag``/``timestamp`` from
   numpy arrays, the constant columns from repeated buffers, ``attribute`` as all-null
   unless some record has one.

Semantics are those of the per-record path, which the tests compare it against: records
run ``int32 length | int32 checksum | int64 msg_id | int32 flag | payload`` (see
``meta.protocol.message``); a trailing partial record ends the set quietly; a complete
record with a negative length or a wrong checksum raises ``InvalidRecordError`` (the first
bad record in offset order wins); a malformed attribute section raises
``InvalidRecordError``. Timestamps are ``meta.message_id.id_time_ms`` in microseconds.

Invariants: nothing here trusts the buffer; memory is the reply plus the batch being built
(payload slices are memoryviews into replies until ``take_batch`` copies them once).
Pure functions and a single-owner builder: used by one Spark Python worker thread.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from meta.errors import InvalidRecordError
from meta.message_id import EPOCH_MS, TIME_SHIFT
from meta.protocol.crc import crc32 as _crc32
from meta.protocol.message import (
    CHECKSUM_MASK,
    FLAG_ATTRIBUTE,
    HEADER_SIZE,
    decode_payload,
)
from meta.spark.schema import ARROW_SCHEMA

_LENGTH = struct.Struct(">i")
# One record header as a numpy record: the same layout as meta.protocol.message.HEADER.
_HEADER_DTYPE = np.dtype(
    [("length", ">i4"), ("checksum", ">i4"), ("msg_id", ">i8"), ("flag", ">i4")]
)
assert _HEADER_DTYPE.itemsize == HEADER_SIZE
_HEADER_SPAN = np.arange(HEADER_SIZE, dtype=np.int64)
OFFSET32_MAX = 2**31 - 1  # Arrow binary/string offsets are int32.


@dataclass(frozen=True, slots=True)
class MessageSet:
    """The complete records of one reply that were decoded, as parallel columns.

    ``offsets`` are absolute (the caller's base offset added). ``values[i]`` is the data
    part of record ``i`` (payload minus attribute section), ``attributes`` is None when no
    record has flag bit 0 set. ``value_lengths[i] == len(values[i])`` (from the headers,
    so nobody measures the values one by one). ``used`` is the byte length of the decoded
    records.
    """

    offsets: np.ndarray  # int64
    msg_ids: np.ndarray  # int64
    flags: np.ndarray  # int32
    attributes: list[str | None] | None
    values: list[memoryview]
    value_lengths: np.ndarray  # int64
    used: int

    def __len__(self) -> int:
        return len(self.values)

    def slice(self, first: int, last: int) -> MessageSet:
        """Records ``first`` to ``last - 1`` (``used`` is kept: it is about the reply)."""
        attributes = None if self.attributes is None else self.attributes[first:last]
        if attributes is not None and all(text is None for text in attributes):
            attributes = None
        return MessageSet(
            self.offsets[first:last],
            self.msg_ids[first:last],
            self.flags[first:last],
            attributes,
            self.values[first:last],
            self.value_lengths[first:last],
            self.used,
        )


def decode_message_set(
    buffer: bytes | bytearray | memoryview,
    base_offset: int = 0,
    stop_offset: int | None = None,
) -> MessageSet:
    """Decode the complete records at the start of ``buffer`` (a get reply body).

    Args:
        buffer: the message set; kept alive by the returned ``values``.
        base_offset: the absolute offset of ``buffer[0]``.
        stop_offset: when given, decoding ends after the first record starting at or after
            it (that record is decoded and checked, later ones are not looked at), as a
            reader that stops there would.

    Raises:
        InvalidRecordError: a complete record has a negative length, a wrong checksum or a
            malformed attribute section.
    """
    view = memoryview(buffer).cast("B")
    stop_at = len(view) if stop_offset is None else stop_offset - base_offset
    positions, used, negative_at = _record_starts(view, stop_at)
    unpack_length = _LENGTH.unpack_from
    count = len(positions)
    raw = np.frombuffer(view, dtype=np.uint8)
    headers = raw[positions[:, None] + _HEADER_SPAN].view(_HEADER_DTYPE).reshape(count)
    lengths = headers["length"].astype(np.int64)
    payload_starts = positions + HEADER_SIZE
    payload_ends = payload_starts + lengths

    crc32 = _crc32
    values = [
        view[start:end]
        for start, end in zip(payload_starts.tolist(), payload_ends.tolist(), strict=True)
    ]
    computed = np.fromiter(map(crc32, values), dtype=np.int64, count=count) & CHECKSUM_MASK
    bad = np.flatnonzero(computed != headers["checksum"].astype(np.int64))
    if bad.size:
        where = base_offset + int(positions[bad[0]])
        raise InvalidRecordError(f"checksum mismatch at offset {where}")
    if negative_at >= 0:
        (length,) = unpack_length(view, negative_at)
        where = base_offset + negative_at
        raise InvalidRecordError(f"negative payload length {length} at offset {where}")

    flags = headers["flag"].astype(np.int32)
    attributes = None
    flagged = np.flatnonzero(flags & FLAG_ATTRIBUTE)
    if flagged.size:
        attributes = [None] * count
        for index in flagged.tolist():
            attributes[index], values[index] = _split_attribute(values[index])
            lengths[index] = len(values[index])
    return MessageSet(
        positions + base_offset,
        headers["msg_id"].astype(np.int64),
        flags,
        attributes,
        values,
        lengths,
        used,
    )


def _record_starts(view: memoryview, stop_at: int) -> tuple[np.ndarray, int, int]:
    """``(starts, used, negative_at)`` of the complete records of ``view`` (see above).

    ``negative_at`` is the position of a complete header with a negative length, or -1.
    Fast path: while records have the length of the first one, their starts are multiples
    of its size, which one strided numpy view of the length fields confirms at C speed;
    the rest (a different length, a torn tail) is walked one header at a time.
    """
    total = len(view)
    prefix = stride = 0
    if total >= HEADER_SIZE:
        (length,) = _LENGTH.unpack_from(view, 0)
        stride = HEADER_SIZE + length
        count = total // stride if length >= 0 else 0
        if count >= 2:
            lengths = np.ndarray((count,), dtype=">i4", buffer=view, strides=(stride,))
            mismatched = np.flatnonzero(lengths != length)
            prefix = int(mismatched[0]) if mismatched.size else count
    uniform = np.arange(prefix, dtype=np.int64) * stride
    if prefix and uniform[-1] >= stop_at:
        kept = int(np.searchsorted(uniform, stop_at)) + 1
        return uniform[:kept], kept * stride, -1
    starts: list[int] = []
    append = starts.append
    unpack_length = _LENGTH.unpack_from
    position = prefix * stride
    negative_at = -1
    while total - position >= HEADER_SIZE:
        (length,) = unpack_length(view, position)
        if length < 0:
            negative_at = position
            break
        end = position + HEADER_SIZE + length
        if end > total:
            break
        append(position)
        start, position = position, end
        if start >= stop_at:
            break
    used = position if negative_at < 0 else negative_at
    if not starts:
        return uniform, used, negative_at
    walked = np.fromiter(starts, dtype=np.int64, count=len(starts))
    return np.concatenate((uniform, walked)), used, negative_at


def _split_attribute(payload: memoryview) -> tuple[str, memoryview]:
    """``decode_payload`` for a flagged payload, without copying the data part."""
    return decode_payload(FLAG_ATTRIBUTE, payload)  # type: ignore[return-value]


class ColumnBuilder:
    """Accumulates ``MessageSet`` pieces of one Spark partition; builds Arrow batches.

    Args:
        topic, broker_id, partition_id: the constant columns of every row.
    """

    def __init__(self, topic: str, broker_id: int, partition_id: int) -> None:
        self.topic = topic.encode("utf-8")
        self.partition = f"{broker_id}-{partition_id}".encode()
        self.broker_id = broker_id
        self.partition_id = partition_id
        self._pieces: list[MessageSet] = []
        self.rows = 0
        self.value_bytes = 0

    def add(self, piece: MessageSet) -> None:
        if len(piece):
            self._pieces.append(piece)
            self.rows += len(piece)
            self.value_bytes += int(piece.value_lengths.sum())

    def take_batch(self) -> pa.RecordBatch:
        """All rows added since the last call as one batch (in the order added)."""
        pieces, rows = self._pieces, self.rows
        assert self.value_bytes <= OFFSET32_MAX
        self._pieces, self.rows, self.value_bytes = [], 0, 0
        offsets = np.concatenate([piece.offsets for piece in pieces]) if pieces else _EMPTY64
        msg_ids = np.concatenate([piece.msg_ids for piece in pieces]) if pieces else _EMPTY64
        flags = np.concatenate([piece.flags for piece in pieces]) if pieces else _EMPTY32
        values = [value for piece in pieces for value in piece.values]
        lengths = np.concatenate([piece.value_lengths for piece in pieces]) if pieces else _EMPTY64
        if any(piece.attributes is not None for piece in pieces):
            texts = [text for piece in pieces for text in (piece.attributes or [None] * len(piece))]
            attribute = pa.array(texts, pa.string())
        else:
            attribute = pa.nulls(rows, pa.string())
        times_us = ((msg_ids >> TIME_SHIFT) + EPOCH_MS) * 1000
        value_offsets = np.zeros(rows + 1, dtype=np.int32)
        np.cumsum(lengths, out=value_offsets[1:], dtype=np.int32)
        columns = [
            _constant_text(self.topic, rows),
            _constant_text(self.partition, rows),
            pa.array(np.full(rows, self.broker_id, dtype=np.int32)),
            pa.array(np.full(rows, self.partition_id, dtype=np.int32)),
            pa.array(offsets),
            pa.array(msg_ids),
            pa.Array.from_buffers(
                ARROW_SCHEMA.field("timestamp").type, rows, [None, pa.py_buffer(times_us)]
            ),
            pa.array(flags),
            attribute,
            pa.Array.from_buffers(
                pa.binary(),
                rows,
                [None, pa.py_buffer(value_offsets), pa.py_buffer(b"".join(values))],
            ),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


_EMPTY64 = np.zeros(0, dtype=np.int64)
_EMPTY32 = np.zeros(0, dtype=np.int32)


def _constant_text(text: bytes, rows: int) -> pa.Array:
    """A string column holding ``text`` in every one of ``rows`` rows."""
    assert rows * len(text) <= OFFSET32_MAX
    offsets = np.arange(rows + 1, dtype=np.int32) * len(text)
    return pa.Array.from_buffers(
        pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(text * rows)]
    )
