"""The slave's check of a fetched batch: where its complete records end, and their CRCs.

A get reply from the master is a run of stored records (``meta.protocol.message``: a 20-byte
header, then the payload) cut at the fetch size, so its last record may be partial.
``record_ends`` reads only the length fields and ``check_records`` the CRCs, in two passes,
so that the fetch loop (``meta.slave.fetcher``) can send the get for the next batch in
between. Both do what ``meta.protocol.message.iter_messages`` checks, without building a
record or copying a payload per message: for the slave, these loops bound the replay rate.

A batch of records of one size (a replay of a fixed-size producer's backlog) is framed at C
speed (``uniform_run``) and its CRCs checked with nothing per record but the payload's slice
and the CRC-32 call (``check_uniform``); anything else is walked and checked one record at a
time (``walk_ends``, ``check_each``), with the same results. Pure functions over the batch;
thread-safe.

The fetch thread uses the same two passes without a list of ends: ``frame_records`` finds
how many complete records a batch holds and where the last one starts and ends
(``Frame``), ``check_frame`` checks their CRCs. With the optional extension
``meta.slave._record_crc`` built (``setup.py``, ``METAQ_COMPILE=1``; it calls ISA-L's
``crc32_gzip_refl``, the same CRC-32), the walk is one C call that builds no object per
record and the check one C call that releases the GIL, so the slave's other threads (the
socket reader, the reactor's write, the get writer) run while a batch is checked; the list
API's ``check_records`` is one such call too. Without it, both are the Python loops above,
with the same results and the same errors (``negative_length``, ``checksum_mismatch``: one
text each). ``IMPLEMENTATION`` says which check runs.
"""

from __future__ import annotations

import importlib
import struct
import sys
from array import array
from types import ModuleType
from typing import NamedTuple

from meta.errors import InvalidRecordError
from meta.protocol.crc import crc32 as _crc32
from meta.protocol.message import CHECKSUM_MASK, HEADER_SIZE, zero_header_error


def _load_extension() -> ModuleType | None:
    try:
        return importlib.import_module("meta.slave._record_crc")
    except ImportError:  # not built (setup.py): the pure check, same results
        return None


EXTENSION = _load_extension()
"""The C check (``meta.slave._record_crc``, ``first_bad``) when the install built it (``setup.py``,
``meta.compiled.C_EXTENSIONS``)."""
NATIVE_CHECK = "C (ISA-L crc32_gzip_refl, GIL released)"
IMPLEMENTATION = NATIVE_CHECK if EXTENSION is not None else "pure Python"
"""Which check ``check_records`` runs: the extension's or the pure one."""

LENGTH = struct.Struct(">i")
CHECKSUM = struct.Struct(">4xi")
"""Fields of a record header (``meta.protocol.message.HEADER``) read one at a time."""


class Frame(NamedTuple):
    """The complete records at the start of a batch (``frame_records``).

    Attributes:
        count: how many (0: not one complete record).
        end: where the last of them ends (0 if none): the bytes they take.
        last_start: where the last of them starts (0 if none).
        ends: every record's end, when the pure walk found them (None from the extension,
            which builds no list: ``frame_ends`` makes one when wanted).
    """

    count: int
    end: int
    last_start: int
    ends: list[int] | None = None


def negative_length(length: int, offset: int) -> InvalidRecordError:
    """The error for a complete record header at ``offset`` with a negative length."""
    return InvalidRecordError(f"negative payload length {length} at offset {offset}")


def checksum_mismatch(offset: int) -> InvalidRecordError:
    """The error for a record at ``offset`` whose payload does not match its checksum."""
    return InvalidRecordError(f"checksum mismatch at offset {offset}")


_LITTLE_ENDIAN = sys.byteorder == "little"
_CLEAR_TOP_BIT = bytes(byte & (CHECKSUM_MASK >> 24) for byte in range(256))
assert array("I").itemsize == 4, "the checksum arrays hold 32-bit unsigned ints"


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
                raise negative_length(length, base + position)
            break
        add(end)
        position = end


def check_records(data: bytes | bytearray | memoryview, ends: list[int], base: int) -> None:
    """Check the CRC of every record ``record_ends`` found (the checks of ``iter_messages``,
    without building a record or copying a payload per message: this loop bounds the replay
    rate).

    A batch of records of one size (``is_uniform``) is checked by ``check_uniform``, whose
    loop per record only slices the payload and calls the CRC-32; anything else one record
    at a time (``check_each``), with the same results.

    With the extension built (``IMPLEMENTATION``), all of the batch's CRCs are checked in
    one C call that releases the GIL (``check_native``) instead.

    Raises:
        InvalidRecordError: a record's payload does not match its CRC, or its header is all
            zeros (``check_no_zero_header``).
    """
    if EXTENSION is not None:
        check_native(EXTENSION, data, ends, base)
    else:
        check_pure(data, ends, base)
    check_no_zero_header(data, ends, base)


ZERO_HEADER = bytes(HEADER_SIZE)


def _find_zero_header(data: bytes | bytearray | memoryview, end: int) -> int:
    """Where 20 zero bytes first occur before ``end`` (-1: nowhere); no copy of bytes."""
    if isinstance(data, (bytes, bytearray)):
        return data.find(ZERO_HEADER, 0, end)
    return bytes(data[:end]).find(ZERO_HEADER)


def check_no_zero_header(data: bytes | bytearray | memoryview, ends: list[int], base: int) -> None:
    """Refuse a record whose header is all zeros (``meta.protocol.message.is_zero_header``):
    zeroed bytes pass the CRC check (length 0, checksum 0). Zeros are looked for at C speed
    first; only a batch holding 20 zero bytes somewhere has its record starts looked at.

    Raises:
        InvalidRecordError: a record's header is all zeros.
    """
    found = _find_zero_header(data, ends[-1]) if ends else -1
    if found < 0:
        return
    start = 0
    for end in ends:
        if start >= found and data[start : start + HEADER_SIZE] == ZERO_HEADER:
            raise zero_header_error(base + start)
        start = end


def frame_records(data: bytes | bytearray | memoryview, base: int) -> Frame:
    """The complete records at the start of a get reply (``record_ends``'s walk): with the
    extension, one C call (``frame_native``), else the pure walk, which keeps its ends.

    Raises:
        InvalidRecordError: a complete header has a negative payload length.
    """
    if EXTENSION is not None:
        return frame_native(EXTENSION, data, base)
    return frame_pure(data, base)


def frame_native(native: ModuleType, data: bytes | bytearray | memoryview, base: int) -> Frame:
    """``frame_records`` by the extension ``native``: its walk, ``walk_ends``' error.

    Raises:
        InvalidRecordError: a complete header has a negative payload length.
    """
    count, end, last_start, negative = native.frame(data)
    if negative >= 0:
        raise negative_length(LENGTH.unpack_from(data, negative)[0], base + negative)
    return Frame(count, end, last_start)


def frame_pure(data: bytes | bytearray | memoryview, base: int) -> Frame:
    """``frame_records`` in Python: ``record_ends``, summed up.

    Raises:
        InvalidRecordError: a complete header has a negative payload length.
    """
    ends = record_ends(data, base)
    if not ends:
        return Frame(0, 0, 0, ends)
    return Frame(len(ends), ends[-1], ends[-2] if len(ends) > 1 else 0, ends)


def frame_ends(data: bytes | bytearray | memoryview, frame: Frame, base: int) -> list[int]:
    """Every end of ``frame``'s records (the pure walk's list, else walked now in Python:
    for the rare batch that needs them, such as one reaching a segment's roll size)."""
    if frame.ends is not None:
        return frame.ends
    return record_ends(memoryview(data)[: frame.end], base)


def check_frame(data: bytes | bytearray | memoryview, frame: Frame, base: int) -> None:
    """Check the CRC of every record of ``frame``, as ``check_records`` does: with the
    extension in one C call that walks them again and releases the GIL
    (``check_frame_native``), else the pure check of the frame's ends.

    Raises:
        InvalidRecordError: a record's payload does not match its CRC, or its header is all
            zeros (``check_no_zero_header``).
    """
    if EXTENSION is not None:
        check_frame_native(EXTENSION, data, frame, base)
    else:
        check_pure(data, frame_ends(data, frame, base), base)
    if frame.count and _find_zero_header(data, frame.end) >= 0:
        check_no_zero_header(data, frame_ends(data, frame, base), base)


def check_frame_native(
    native: ModuleType, data: bytes | bytearray | memoryview, frame: Frame, base: int
) -> None:
    """``check_frame`` by the extension ``native`` (``first_bad_before``): the same error as
    ``check_each``'s.

    Raises:
        InvalidRecordError: a record's payload does not match its CRC.
    """
    bad = native.first_bad_before(data, frame.end)
    if bad >= 0:
        raise checksum_mismatch(base + bad)


def check_native(
    native: ModuleType, data: bytes | bytearray | memoryview, ends: list[int], base: int
) -> None:
    """``check_records`` by the extension ``native`` (``meta.slave._record_crc``): one call,
    the first bad record's index back, the same error as ``check_each``'s.

    Raises:
        InvalidRecordError: a record's payload does not match its CRC.
    """
    bad = native.first_bad(data, ends)
    if bad >= 0:
        raise checksum_mismatch(base + (ends[bad - 1] if bad else 0))


def check_pure(data: bytes | bytearray | memoryview, ends: list[int], base: int) -> None:
    """``check_records`` in Python (``check_uniform`` or ``check_each``).

    Raises:
        InvalidRecordError: a record's payload does not match its CRC.
    """
    if not ends:
        return
    view = memoryview(data)
    if is_uniform(ends):
        check_uniform(view, ends, base)
    else:
        check_each(view, ends, base)


def is_uniform(ends: list[int]) -> bool:
    """Whether every record ending at ``ends`` (non-empty) has the first one's size (one list
    comparison at C speed)."""
    stride = ends[0]
    return ends[-1] == len(ends) * stride and ends == list(range(stride, ends[-1] + 1, stride))


def check_uniform(view: memoryview, ends: list[int], base: int) -> None:
    """``check_records`` for records of one size: the stored checksums are gathered column by
    column (``stored_checksums``), the computed ones masked afterwards (``masked``), and the
    two arrays compared in one operation; only a mismatch looks for the first bad record."""
    stride = ends[0]
    starts = range(HEADER_SIZE, HEADER_SIZE + ends[-1], stride)
    computed = masked([_crc32(view[start:end]) for start, end in zip(starts, ends, strict=True)])
    if computed != stored_checksums(view, stride, len(ends)):
        check_each(view, ends, base)  # names the first bad record
        raise AssertionError("check_each found no mismatch where the arrays differ")


def check_each(view: memoryview, ends: list[int], base: int) -> None:
    """``check_records`` one record at a time.

    Raises:
        InvalidRecordError: a record's payload does not match its CRC.
    """
    unpack, crc32 = CHECKSUM.unpack_from, _crc32
    start = 0
    for end in ends:
        if crc32(view[start + HEADER_SIZE : end]) & CHECKSUM_MASK != unpack(view, start)[0]:
            raise checksum_mismatch(base + start)
        start = end


def stored_checksums(view: memoryview, stride: int, count: int) -> array:
    """The checksum field of ``count`` records of ``stride`` bytes each, as unsigned ints:
    each of the field's 4 bytes is copied out of every record with one strided slice, into a
    native-order ``array``."""
    packed = bytearray(4 * count)
    for index in range(4):  # the field is big-endian; the array native-order
        position = 3 - index if _LITTLE_ENDIAN else index
        packed[position::4] = view[4 + index : count * stride : stride]
    return array("I", packed)


def masked(crcs: list[int]) -> array:
    """``crcs`` with their top bit cleared (``CHECKSUM_MASK``), as stored: one ``translate``
    of the most significant byte of every element."""
    values = array("I", crcs)
    raw = memoryview(values).cast("B")
    top = slice(3, None, 4) if _LITTLE_ENDIAN else slice(0, None, 4)
    raw[top] = raw[top].tobytes().translate(_CLEAR_TOP_BIT)
    return values
