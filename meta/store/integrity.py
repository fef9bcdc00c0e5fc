"""Checking a segment file's records: where they are whole and where the bytes are corrupt.

What lives here: ``SegmentScan``, a resumable scan of one segment file that yields
``Finding`` s (corrupt ranges); ``check_record_at``, the check of one record. The broker's
start-up recovery (``Segment.recover``), its background scrubber (``meta.store.scrub``) and
``meta-admin verify`` all scan with it, so the three agree on what is corrupt.

The rule (docs/formats.md §3.1, docs/durability.md "Corrupt data"): a record is valid when
its 20-byte header is there, its length is not negative, it ends inside the data checked,
its header is not all zeros (``meta.protocol.message.is_zero_header``) and the CRC of its
payload matches (``meta.protocol.message.checksum``: the project's one CRC). At a record that
is not valid the scan looks for where valid records resume:

1. Framing intact: the bad record's own length leads exactly to the end, or to a valid record.
   The range is that record (a flipped payload or checksum bit).
2. Otherwise the first position after it, at most ``RESYNC_WINDOW_BYTES`` on, where a
   non-empty valid record starts that is followed by another valid record or by the end (a
   flipped length bit, a zeroed region). Two CRC matches in a row do not happen by chance.
3. Otherwise the range runs to the end of the data.

A range after which no valid record follows is a *tail* (``Finding.tail``): what a crash
leaves at the end of the file being written (a torn record, zeros). Which ranges start-up
recovery cuts is ``meta.store.segment.cuts``'s rule (a tail of the last segment, or with a
recovery point every range after it); the others are corruption, reported and fenced.

Memory is bounded by ``chunk_bytes`` plus the resynchronisation window; a record larger
than a chunk has its CRC computed piece by piece. Pure over a ``read(position, length)``
callable; thread-safe when that is (the scrubber's worker thread reads through its own
descriptor).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from meta.protocol.crc import crc32
from meta.protocol.message import (
    CHECKSUM_MASK,
    HEADER,
    HEADER_SIZE,
    is_zero_header,
    scan_valid_prefix,
)

ReadAt = Callable[[int, int], bytes]
"""``read(position, length)``: up to ``length`` bytes of the file from ``position``."""

CHUNK_BYTES = 1024 * 1024
# How far past a bad record the scan looks for valid records again: one record of the
# default maxMessageSize (1 MiB) and its header, so a record whose length field was hit is
# stepped over. A longer stretch without a valid record counts as corrupt to the end.
RESYNC_WINDOW_BYTES = 1024 * 1024 + 2 * HEADER_SIZE


@dataclass(frozen=True, slots=True)
class Finding:
    """One corrupt range of a segment file: file positions ``[position, resume)``.

    Attributes:
        position: the first byte of the bad record (a record start as far as the scan knows).
        resume: where valid records start again, or the end of the data checked.
        reason: what is wrong with the record at ``position``, for a reader.
        tail: no valid record follows the range before the end of the data checked.
    """

    position: int
    resume: int
    reason: str
    tail: bool


def check_record_at(
    read: ReadAt, position: int, end: int, chunk_bytes: int = CHUNK_BYTES
) -> tuple[str | None, int]:
    """Check the record at ``position`` of data ending at ``end``.

    Returns:
        ``(problem, record_end)``: ``problem`` is None for a valid record, else the reason;
        ``record_end`` is where its length says it ends (-1 when the header is missing, its
        length negative or running past ``end``).
    """
    header = read(position, HEADER_SIZE) if end - position >= HEADER_SIZE else b""
    if len(header) < HEADER_SIZE:
        return f"torn header: {end - position} bytes left, a header takes {HEADER_SIZE}", -1
    length, stored, msg_id, flag = HEADER.unpack(header)
    if length < 0:
        return f"negative payload length {length}", -1
    record_end = position + HEADER_SIZE + length
    if record_end > end:
        return f"payload length {length} runs past the end of the data at {end}", -1
    if is_zero_header(length, stored, msg_id, flag):
        return "all-zero record header (zeroed bytes, not a message)", record_end
    value = 0
    at = position + HEADER_SIZE
    while at < record_end:
        piece = read(at, min(chunk_bytes, record_end - at))
        if not piece:
            return f"the file ends at {at}, inside the record", -1
        value = crc32(piece, value)
        at += len(piece)
    computed = value & CHECKSUM_MASK
    if computed != stored:
        return f"checksum mismatch (stored {stored}, computed {computed})", record_end
    return None, record_end


def _candidate_lengths(buffer: bytes, first: int, end: int) -> list[int]:
    """Positions ``i`` of ``buffer`` (at file position ``first + i``) whose length field could
    start a non-empty record ending by ``end``: a cheap filter before any CRC."""
    found = []
    last = len(buffer) - HEADER_SIZE
    room = end - first - HEADER_SIZE
    for index in range(last + 1):
        length = int.from_bytes(buffer[index : index + 4], "big", signed=True)
        if 0 < length <= room - index:
            found.append(index)
    return found


def resync(
    read: ReadAt, start: int, end: int, window_bytes: int = RESYNC_WINDOW_BYTES
) -> int | None:
    """The first position in ``[start, start + window_bytes)`` where a non-empty valid record
    starts that is followed by a valid record or by ``end``; None when there is none."""
    buffer = read(start, min(window_bytes + HEADER_SIZE, end - start))
    for index in _candidate_lengths(buffer, start, end):
        candidate = start + index
        problem, record_end = check_record_at(read, candidate, end)
        if problem is not None:
            continue
        if record_end == end or check_record_at(read, record_end, end)[0] is None:
            return candidate
    return None


def locate(read: ReadAt, position: int, end: int, reason: str, record_end: int) -> Finding:
    """The corrupt range starting with the bad record at ``position`` (module rules 1 to 3)."""
    if record_end > position:
        if record_end == end:
            return Finding(position, end, reason, tail=True)
        if check_record_at(read, record_end, end)[0] is None:
            return Finding(position, record_end, reason, tail=False)
    resume = resync(read, position + 1, end)
    if resume is None:
        return Finding(position, end, reason, tail=True)
    return Finding(position, resume, reason, tail=False)


class SegmentScan:
    """A resumable scan of one segment file's records from ``position`` to ``end``.

    Attributes:
        position: where the scan goes on (a record start, or ``end`` when done).
        end: the end of the data to check (the file size, or the visible end).
        records: valid records seen so far.
        findings: corrupt ranges found so far, in file order.
    """

    def __init__(
        self, read: ReadAt, end: int, position: int = 0, chunk_bytes: int = CHUNK_BYTES
    ) -> None:
        assert chunk_bytes >= HEADER_SIZE
        assert 0 <= position <= end
        self._read = read
        self._chunk_bytes = chunk_bytes
        self.position = position
        self.end = end
        self.records = 0
        self.findings: list[Finding] = []

    @property
    def done(self) -> bool:
        return self.position >= self.end

    def step(self, bytes_max: int) -> int:
        """Scan about ``bytes_max`` bytes (at least one record or range); return how many.

        A file found shorter than ``end`` (cut or replaced meanwhile) ends the scan there.
        """
        start = self.position
        read, end = self._read, self.end
        while self.position < end and self.position - start < bytes_max:
            buffer = read(self.position, min(self._chunk_bytes, end - self.position))
            if not buffer:
                self.end = self.position
                break
            valid, count = scan_valid_prefix(buffer)
            self.position += valid
            self.records += count
            if valid == len(buffer) or (valid and len(buffer) - valid < HEADER_SIZE):
                continue  # all valid, or a header straddles the chunk: read on from there
            problem, record_end = check_record_at(read, self.position, end, self._chunk_bytes)
            if problem is None:  # a record larger than the chunk, or one crossing its end
                self.position = record_end
                self.records += 1
                continue
            finding = locate(read, self.position, end, problem, record_end)
            self.findings.append(finding)
            self.position = finding.resume
        return self.position - start

    def run(self) -> SegmentScan:
        """Scan to the end; return self."""
        while not self.done:
            self.step(self._chunk_bytes)
        return self


def file_reader(fd: int) -> ReadAt:
    """A ``ReadAt`` over an open descriptor (``os.pread``), for a file read outside the store."""

    def read(position: int, length: int) -> bytes:
        return os.pread(fd, length, position)

    return read
