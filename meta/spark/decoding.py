"""Bulk decoding of message sets (get replies) into Arrow columns, for the Spark reader.

The per-record path (``meta.protocol.message.iter_messages`` + ``decode_payload``) costs a
few microseconds of Python per message; this module does the same work per *reply*, with
no Python object per record but the one the checksum call needs:

1. ``decode_message_set`` finds the record starts: while records have the size of the
   first one, one strided numpy view of the length fields confirms them all at once, and
   the rest is walked with one ``struct`` call per record. numpy then gathers each header
   field of every record at once (``_header_fields``), the checksums are computed with
   ``meta.protocol.crc.crc32`` over memoryview slices made and dropped by one chain of
   C-level ``map`` calls, and compared with the stored ones as one array; the attribute
   section is split off only for records with flag bit 0. Values stay where they are in
   the reply, as positions and lengths.
2. ``ColumnBuilder.add`` copies the values of each piece into the batch's value buffer
   right away (a run of records of one size as one strided numpy copy, anything else by
   one ``b"".join``), so the reply is free for the connection to receive the next one into;
   ``take_batch`` builds one ``pyarrow.RecordBatch``: ``value`` from that buffer plus
   numpy-computed offsets (``pa.Array.from_buffers``), ``offset``/``msg_id``/``flag``/
   ``timestamp`` from numpy arrays, the constant columns built once per batch size,
   ``attribute`` as all-null unless some record has one.

Semantics are those of the per-record path, which the tests compare it against: records
run ``int32 length | int32 checksum | int64 msg_id | int32 flag | payload`` (see
``meta.protocol.message``); a trailing partial record ends the set quietly; a complete
record with a negative length or a wrong checksum raises ``InvalidRecordError`` (the first
bad record in offset order wins); a malformed attribute section raises
``InvalidRecordError``. Timestamps are ``meta.message_id.id_time_ms`` in microseconds.

Invariants: nothing here trusts the buffer; every complete record decoded has its checksum
checked; memory is the reply plus the batch being built (a ``MessageSet`` references its
reply until ``ColumnBuilder.add`` has copied its values). Pure functions and a single-owner
builder: used by one Spark Python worker thread.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from itertools import repeat
from operator import getitem

import numpy as np
import pyarrow as pa

from meta.errors import InvalidRecordError
from meta.message_id import EPOCH_MS, TIME_SHIFT
from meta.protocol.crc import crc32 as _crc32
from meta.protocol.message import (
    CHECKSUM_MASK,
    FLAG_ATTRIBUTE,
    HEADER_FORMAT,
    HEADER_SIZE,
    decode_payload,
    zero_header_error,
)
from meta.spark.schema import ARROW_SCHEMA

_LENGTH = struct.Struct(">i")
# Where each header field lies in a record (meta.protocol.message.HEADER: length, checksum,
# msg_id, flag), pinned against that format.
_CHECKSUM_AT, _MSG_ID_AT, _FLAG_AT = 4, 8, 16
assert HEADER_FORMAT == ">iiqi"
assert HEADER_SIZE == 20
OFFSET32_MAX = 2**31 - 1  # Arrow binary/string offsets are int32.
VALUE_BUFFER_BYTES_MIN = 1 << 20


@dataclass(frozen=True, slots=True)
class MessageSet:
    """The complete records of one reply that were decoded, as parallel columns.

    ``offsets`` are absolute (the caller's base offset added). The value of record ``i``
    (payload minus attribute section) is ``data[value_starts[i]:][:value_lengths[i]]``;
    ``values`` lists them as memoryviews. ``stride`` is nonzero when the values lie at one
    stride from each other and have one length (records of one size, none with an
    attribute), which lets them be copied as one strided block. ``attributes`` is None
    when no record has flag bit 0 set. ``used`` is the byte length of the decoded records.
    """

    offsets: np.ndarray  # int64
    msg_ids: np.ndarray  # int64
    flags: np.ndarray  # int32
    attributes: list[str | None] | None
    value_starts: np.ndarray  # int64, positions in ``data``
    value_lengths: np.ndarray  # int64
    data: memoryview  # format "B"
    stride: int
    used: int

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def values(self) -> list[memoryview]:
        """The values, one memoryview into ``data`` each."""
        data = self.data
        starts = self.value_starts.tolist()
        ends = (self.value_starts + self.value_lengths).tolist()
        return list(map(data.__getitem__, map(slice, starts, ends)))

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
            self.value_starts[first:last],
            self.value_lengths[first:last],
            self.data,
            self.stride,
            self.used,
        )


def decode_message_set(
    buffer: bytes | bytearray | memoryview,
    base_offset: int = 0,
    stop_offset: int | None = None,
) -> MessageSet:
    """Decode the complete records at the start of ``buffer`` (a get reply body).

    Args:
        buffer: the message set; referenced by the returned set (its ``data``).
        base_offset: the absolute offset of ``buffer[0]``.
        stop_offset: when given, decoding ends after the first record starting at or after
            it (that record is decoded and checked, later ones are not looked at), as a
            reader that stops there would.

    Raises:
        InvalidRecordError: a complete record has a negative length, a wrong checksum, an
            all-zero header (``meta.protocol.message.is_zero_header``) or a malformed
            attribute section.
    """
    view = memoryview(buffer).cast("B")
    stop_at = len(view) if stop_offset is None else stop_offset - base_offset
    positions, used, negative_at, stride = _record_starts(view, stop_at)
    lengths, checksums, msg_ids, flags = _header_fields(view, positions, stride)
    value_starts = positions + HEADER_SIZE
    computed = _checksums(view, value_starts, lengths, stride)
    bad = np.flatnonzero(computed != checksums)
    zeroed = np.flatnonzero((lengths == 0) & (checksums == 0) & (msg_ids == 0) & (flags == 0))
    if zeroed.size and (not bad.size or zeroed[0] < bad[0]):
        raise zero_header_error(base_offset + int(positions[zeroed[0]]))
    if bad.size:
        where = base_offset + int(positions[bad[0]])
        raise InvalidRecordError(f"checksum mismatch at offset {where}")
    if negative_at >= 0:
        (length,) = _LENGTH.unpack_from(view, negative_at)
        where = base_offset + negative_at
        raise InvalidRecordError(f"negative payload length {length} at offset {where}")
    attributes = None
    flagged = np.flatnonzero(flags & FLAG_ATTRIBUTE)
    if flagged.size:
        attributes = _split_attributes(view, flagged, value_starts, lengths)
        stride = 0
    return MessageSet(
        positions + base_offset,
        msg_ids,
        flags,
        attributes,
        value_starts,
        lengths,
        view,
        stride,
        used,
    )


def _header_fields(
    view: memoryview, positions: np.ndarray, stride: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(lengths, checksums, msg_ids, flags)`` of the records at ``positions``, native.

    Records at one ``stride``: each field is one strided view of the buffer. Otherwise each
    field is gathered with one fancy index into a view of the buffer that has an integer at
    every byte position (stride 1), so any record start works.
    """
    count = len(positions)
    if not count:
        return _EMPTY64, _EMPTY64, _EMPTY64, _EMPTY32
    if stride:
        first = int(positions[0])

        def field(at: int, dtype: str) -> np.ndarray:
            return np.ndarray((count,), dtype, view, first + at, (stride,))

    else:
        by_byte = {
            ">i4": np.ndarray((len(view) - 3,), ">i4", view, 0, (1,)),
            ">i8": np.ndarray((len(view) - 7,), ">i8", view, 0, (1,)),
        }

        def field(at: int, dtype: str) -> np.ndarray:
            return by_byte[dtype][positions + at]

    return (
        field(0, ">i4").astype(np.int64),
        field(_CHECKSUM_AT, ">i4").astype(np.int64),
        field(_MSG_ID_AT, ">i8").astype(np.int64),
        field(_FLAG_AT, ">i4").astype(np.int32),
    )


def _checksums(
    view: memoryview, starts: np.ndarray, lengths: np.ndarray, stride: int
) -> np.ndarray:
    """The masked CRC-32 of every payload, as int64.

    One ``crc32`` call per record is the floor in Python; around it, the memoryview slices
    are made by C-level ``map`` calls (``operator.getitem``, which takes no argument tuple)
    and each is dropped as soon as its checksum is taken. A strided set takes its ``slice``
    objects from ``_strided_slices``: replies of one fetch size and one record size need the
    same ones, and making them costs about as much as the slicing itself.
    """
    count = len(starts)
    if stride and count:
        slices = _strided_slices(int(starts[0]), int(lengths[0]), stride, count)
    else:
        slices = map(slice, starts.tolist(), (starts + lengths).tolist())
    views = map(getitem, repeat(view, count), slices)
    computed = np.fromiter(map(_crc32, views), np.int64, count)
    return computed & CHECKSUM_MASK


@functools.lru_cache(maxsize=4)
def _strided_slices(first: int, length: int, stride: int, count: int) -> tuple[slice, ...]:
    """The ``count`` slices of ``length`` bytes from ``first``, one per ``stride`` bytes."""
    end = first + count * stride
    return tuple(map(slice, range(first, end, stride), range(first + length, end, stride)))


def _record_starts(view: memoryview, stop_at: int) -> tuple[np.ndarray, int, int, int]:
    """``(starts, used, negative_at, stride)`` of the complete records of ``view``.

    ``negative_at`` is the position of a complete header with a negative length, or -1.
    ``stride`` is the record size when every start found is a multiple of it (the fast
    path alone found them), else 0.
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
        return uniform[:kept], kept * stride, -1, stride
    starts, position, negative_at = _walk(view, prefix * stride, stop_at)
    used = position if negative_at < 0 else negative_at
    if not starts:
        return uniform, used, negative_at, stride if prefix else 0
    walked = np.fromiter(starts, dtype=np.int64, count=len(starts))
    return np.concatenate((uniform, walked)), used, negative_at, 0


def _walk(view: memoryview, position: int, stop_at: int) -> tuple[list[int], int, int]:
    """``(starts, end, negative_at)``: the record walk from ``position``, one header at a
    time, up to a torn tail, a negative length or the first start at or after ``stop_at``."""
    total = len(view)
    starts: list[int] = []
    append = starts.append
    unpack_length = _LENGTH.unpack_from
    while total - position >= HEADER_SIZE:
        (length,) = unpack_length(view, position)
        if length < 0:
            return starts, position, position
        end = position + HEADER_SIZE + length
        if end > total:
            break
        append(position)
        start, position = position, end
        if start >= stop_at:
            break
    return starts, position, -1


def _split_attributes(
    view: memoryview, flagged: np.ndarray, value_starts: np.ndarray, lengths: np.ndarray
) -> list[str | None]:
    """The attribute of every record (None where its flag bit 0 is clear); moves the value
    start and length of each flagged record past its attribute section (in place)."""
    attributes: list[str | None] = [None] * len(value_starts)
    for index in flagged.tolist():
        start, length = int(value_starts[index]), int(lengths[index])
        payload = view[start : start + length]
        attribute, value = decode_payload(FLAG_ATTRIBUTE, payload)
        attributes[index] = attribute
        value_starts[index] = start + length - len(value)
        lengths[index] = len(value)
    return attributes


@dataclass(frozen=True, slots=True)
class _Columns:
    """The columns of a piece a ``ColumnBuilder`` took (its values are in the builder)."""

    offsets: np.ndarray
    msg_ids: np.ndarray
    flags: np.ndarray
    attributes: list[str | None] | None
    value_lengths: np.ndarray


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
        self._pieces: list[_Columns] = []
        self._values = np.empty(0, dtype=np.uint8)
        self._constants: tuple[int, list[pa.Array]] = (-1, [])
        self.rows = 0
        self.value_bytes = 0

    def add(self, piece: MessageSet) -> None:
        """Take the rows of ``piece``; its values are copied now (the reply is not kept)."""
        if not len(piece):
            return
        count = len(piece)
        if piece.stride:
            size = count * int(piece.value_lengths[0])
        else:
            size = int(piece.value_lengths.sum())
        destination = self._reserve(size)
        if piece.stride:
            shape, strides = (count, size // count), (piece.stride, 1)
            first = int(piece.value_starts[0])
            source = np.ndarray(shape, np.uint8, piece.data, first, strides)
            destination.reshape(shape)[...] = source
        else:
            destination[...] = np.frombuffer(b"".join(piece.values), np.uint8)
        self._pieces.append(
            _Columns(
                piece.offsets, piece.msg_ids, piece.flags, piece.attributes, piece.value_lengths
            )
        )
        self.rows += count
        self.value_bytes += size

    def _reserve(self, size: int) -> np.ndarray:
        """The next ``size`` bytes of the value buffer, grown if needed."""
        end = self.value_bytes + size
        if end > len(self._values):
            grown = np.empty(max(end, 2 * len(self._values), VALUE_BUFFER_BYTES_MIN), np.uint8)
            grown[: self.value_bytes] = self._values[: self.value_bytes]
            self._values = grown
        return self._values[self.value_bytes : end]

    def take_batch(self) -> pa.RecordBatch:
        """All rows added since the last call as one batch (in the order added)."""
        pieces, rows, value_bytes = self._pieces, self.rows, self.value_bytes
        assert value_bytes <= OFFSET32_MAX
        values = self._values[:value_bytes]
        # The batch keeps its buffer; the next batch gets one of the same capacity.
        self._values = np.empty(len(self._values) if rows else 0, dtype=np.uint8)
        self._pieces, self.rows, self.value_bytes = [], 0, 0
        offsets = _concatenate([piece.offsets for piece in pieces], _EMPTY64)
        msg_ids = _concatenate([piece.msg_ids for piece in pieces], _EMPTY64)
        flags = _concatenate([piece.flags for piece in pieces], _EMPTY32)
        lengths = _concatenate([piece.value_lengths for piece in pieces], _EMPTY64)
        if any(piece.attributes is not None for piece in pieces):
            texts = [
                text
                for piece in pieces
                for text in (piece.attributes or [None] * len(piece.offsets))
            ]
            attribute = pa.array(texts, pa.string())
        else:
            attribute = pa.nulls(rows, pa.string())
        times_us = ((msg_ids >> TIME_SHIFT) + EPOCH_MS) * 1000
        value_offsets = np.zeros(rows + 1, dtype=np.int32)
        np.cumsum(lengths, out=value_offsets[1:], dtype=np.int32)
        columns = [
            *self._constant_columns(rows),
            pa.array(offsets),
            pa.array(msg_ids),
            pa.Array.from_buffers(
                ARROW_SCHEMA.field("timestamp").type, rows, [None, pa.py_buffer(times_us)]
            ),
            pa.array(flags),
            attribute,
            pa.Array.from_buffers(
                pa.binary(), rows, [None, pa.py_buffer(value_offsets), pa.py_buffer(values)]
            ),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)

    def _constant_columns(self, rows: int) -> list[pa.Array]:
        """``topic``, ``partition``, ``broker_id``, ``partition_id`` for ``rows`` rows; built
        once per batch size (most batches are full), as Arrow arrays are immutable."""
        if self._constants[0] != rows:
            columns = [
                _constant_text(self.topic, rows),
                _constant_text(self.partition, rows),
                pa.array(np.full(rows, self.broker_id, dtype=np.int32)),
                pa.array(np.full(rows, self.partition_id, dtype=np.int32)),
            ]
            self._constants = (rows, columns)
        return self._constants[1]


_EMPTY64 = np.zeros(0, dtype=np.int64)
_EMPTY32 = np.zeros(0, dtype=np.int32)


def _concatenate(arrays: list[np.ndarray], empty: np.ndarray) -> np.ndarray:
    if len(arrays) == 1:
        return arrays[0]
    return np.concatenate(arrays) if arrays else empty


def _constant_text(text: bytes, rows: int) -> pa.Array:
    """A string column holding ``text`` in every one of ``rows`` rows."""
    assert rows * len(text) <= OFFSET32_MAX
    offsets = np.arange(rows + 1, dtype=np.int32) * len(text)
    return pa.Array.from_buffers(
        pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(text * rows)]
    )
