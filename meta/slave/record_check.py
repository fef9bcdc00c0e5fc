"""The slave's check of a fetched batch: where its complete records end, and their CRCs.

A get reply from the master is a run of stored records (``meta.protocol.message``: a 20-byte
header, then the payload) cut at the fetch size, so its last record may be partial.
``record_ends`` reads only the length fields and ``check_records`` the CRCs, in two passes,
so that the fetch loop (``meta.slave.fetcher``) can send the get for the next batch in
between. Both do what ``meta.protocol.message.iter_messages`` checks, without building a
record or copying a payload per message: for the slave, these loops bound the replay rate.

A batch of records of one size (a replay of a fixed-size producer's backlog) is framed at C
speed (``uniform_run``); anything else is walked one record at a time (``walk_ends``), with
the same results. Pure functions over the batch; thread-safe.
"""

from __future__ import annotations

import struct

from meta.errors import InvalidRecordError
from meta.protocol.crc import crc32 as _crc32
from meta.protocol.message import CHECKSUM_MASK, HEADER_SIZE

LENGTH = struct.Struct(">i")
CHECKSUM = struct.Struct(">4xi")
"""Fields of a record header (``meta.protocol.message.HEADER``) read one at a time."""


def record_ends(data: bytes | bytearray | memoryview, base: int) -> list[int]:
    """Where each complete record at the start of a get reply ends (positions in ``data``).

    Only the length fields are read; ``check_records`` checks the CRCs afterwards, so the
    next get can be sent in between. Stops quietly at a trailing partial record, as
    ``meta.protocol.message.iter_messages`` does.

    A batch of messages of one size (what a producer of fixed-size messages, and so a replay
    of its backlog, delivers) is read at C speed: the length field of every record at the
    first record's stride is unpacked in one ``iter_unpack``, and those that equal the
    first's make a run of records whose ends need no walk (a record whose length field is
    the first's ends exactly one stride later, where the next one starts). The walk, one
    record at a time, goes on from the first record that differs.

    Args:
        data: the reply body.
        base: the offset of its first byte.

    Raises:
        InvalidRecordError: a complete header has a negative payload length.
    """
    total = len(data)
    if total < HEADER_SIZE:
        return []
    (length,) = LENGTH.unpack_from(data, 0)
    stride = HEADER_SIZE + length
    run = uniform_run(data, length, total // stride) if length >= 0 else 0
    ends = list(range(stride, run * stride + 1, stride))
    walk_ends(data, base, run * stride, ends)
    return ends


def uniform_run(data: bytes | bytearray | memoryview, length: int, count: int) -> int:
    """How many records from the start of ``data`` have payload length ``length``, looking at
    the first ``count`` strides of ``HEADER_SIZE + length`` bytes (all within ``data``).

    Each of the 4 bytes of the length field is compared in one column: that byte of every
    stride, copied out with one strided slice; the run ends at the first stride where a
    column differs from the first record's byte (``lstrip`` finds it at C speed).
    """
    if count < 2:
        return count
    stride = HEADER_SIZE + length
    end = count * stride
    run = count
    for index, byte in enumerate(LENGTH.pack(length)):
        column = data[index:end:stride]
        if type(column) is memoryview:  # a reply handed over as a view: copy its column
            column = column.tobytes()
        run = min(run, count - len(column.lstrip(bytes((byte,)))))
    return run


def walk_ends(
    data: bytes | bytearray | memoryview, base: int, position: int, ends: list[int]
) -> None:
    """``record_ends``'s walk from ``position`` (a record start): appends each complete
    record's end to ``ends``.

    Raises:
        InvalidRecordError: a complete header has a negative payload length.
    """
    add = ends.append
    total = len(data)
    last_header = total - HEADER_SIZE
    unpack = LENGTH.unpack_from
    while position <= last_header:
        (length,) = unpack(data, position)
        end = position + HEADER_SIZE + length
        if end > total or length < 0:  # one test per record for both rare cases
            if length < 0:
                raise InvalidRecordError(
                    f"negative payload length {length} at offset {base + position}"
                )
            break
        add(end)
        position = end


def check_records(data: bytes | bytearray | memoryview, ends: list[int], base: int) -> None:
    """Check the CRC of every record ``record_ends`` found (the checks of ``iter_messages``,
    without building a record or copying a payload per message: this loop bounds the replay
    rate).

    Raises:
        InvalidRecordError: a record's payload does not match its CRC.
    """
    view = memoryview(data)
    unpack, crc32 = CHECKSUM.unpack_from, _crc32
    start = 0
    for end in ends:
        if crc32(view[start + HEADER_SIZE : end]) & CHECKSUM_MASK != unpack(view, start)[0]:
            raise InvalidRecordError(f"checksum mismatch at offset {base + start}")
        start = end
