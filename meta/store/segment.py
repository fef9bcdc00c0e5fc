"""One segment file of a partition log: ``%020d.meta``, named by its start offset.

What lives here: ``Segment`` (append / read / fsync / recover / close), ``segment_name``,
``parse_segment_name``, ``durable_end``, and ``load_segments`` / ``open_segments``, which
open a partition directory's segments (contiguity checked, the last one recovered;
``open_segments`` creates the first one when there is none). A segment is a plain concatenation of
Metamorphosis records with no header, index or trailer, so a file written by a
Java broker opens here unchanged.

Invariants:
    * ``flushed_size <= written_size``; ``written_size`` is the file size as far as this process
      knows (only the last segment of a partition grows).
    * A failed append truncates the file back to ``written_size``; when even that fails,
      ``written_size`` counts the append's bytes (the file may hold them).
    * Only the last segment of a partition is validated at load (``recover``); earlier ones are
      trusted by size, as Java does.
    * The last ``SEGMENTS_UNSYNCED_AT_LOAD`` segments load as not yet durable
      (``flushed_size`` 0): the first flush of the partition fsyncs them.
    * The file's size is always its data: blocks allocated ahead of the writes
      (``preallocate_position_max``) keep the size, and ``release_preallocation`` frees those
      left unused (the owner calls it when the segment stops being the one written).

Thread affinity: reactor thread only, except ``fsync``, which the flusher's worker thread
calls; it touches only the descriptor, never the sizes (``mark_flushed`` and ``cut`` run on the
reactor; a ``cut`` may race a running fsync, which then covers either size).
"""

from __future__ import annotations

import logging
import os

from meta.errors import StoreError
from meta.protocol.message import HEADER, HEADER_SIZE, scan_valid_prefix
from meta.store.append import Records, finish_write, truncate_after_failed_write
from meta.store.files import Files

logger = logging.getLogger("meta.store")

SEGMENT_SUFFIX = ".meta"
SEGMENT_NAME_DIGITS = 20
# Recovery reads the last segment in pieces of this size, so a 1 GiB segment is not loaded
# into memory at start-up; a record larger than this is read whole on its own.
RECOVER_CHUNK_BYTES = 4 * 1024 * 1024
# After a crash of the process, the bytes it wrote but did not fsync are still in the page
# cache: they read back intact, yet a power loss can drop them. A flush covers every
# written segment, so only the segment being written and the one a roll has just left can
# hold such bytes while rolls are at most one per fsync (README, Durability); these last
# segments load as not yet durable.
SEGMENTS_UNSYNCED_AT_LOAD = 2
# An append that writes past the blocks allocated so far allocates this much more ahead of
# its end (``Files.allocate``): ext4 then finds the blocks of the next writes allocated and
# skips its delayed allocation inside each ``pwrite``, in one call per this many bytes.
PREALLOCATE_BYTES = 8 * 1024 * 1024


def segment_name(start: int) -> str:
    """Return the file name of the segment starting at offset ``start``."""
    assert start >= 0
    return f"{start:0{SEGMENT_NAME_DIGITS}d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """Return the start offset encoded in a segment file name, or None for other files.

    Raises:
        StoreError: the name ends with ``.meta`` but the rest is not a decimal number (Java
            fails start-up on such a file too).
    """
    if not name.endswith(SEGMENT_SUFFIX):
        return None
    digits = name[: -len(SEGMENT_SUFFIX)]
    if not (digits.isascii() and digits.isdigit()):
        raise StoreError(f"segment file name {name!r} is not a decimal start offset")
    return int(digits)


class Segment:
    """One open segment file.

    Attributes:
        path: the file's path.
        start: offset of the file's first byte in the partition log.
        written_size: bytes written to the file.
        flushed_size: bytes known to be on disk (fsynced, or found at load in a segment
            older than the last ``SEGMENTS_UNSYNCED_AT_LOAD``).
        preallocate_position_max: 0 (the default), or the position up to which appends
            allocate the file's blocks ahead of their end, ``PREALLOCATE_BYTES`` at a time
            (the partition's roll size, on the segment it writes); set to 0 again when the
            file system cannot.
    """

    __slots__ = (
        "_allocated_size",
        "_fd",
        "_files",
        "flushed_size",
        "message_count",
        "path",
        "preallocate_position_max",
        "start",
        "written_size",
    )

    def __init__(self, files: Files, path: str, start: int, fd: int, size: int) -> None:
        self._files = files
        self._fd = fd
        self.path = path
        self.start = start
        self.written_size = size
        self.flushed_size = size
        # Appends written here since open (plus records recovered at start-up, for the last
        # segment): its share of the partition's message count. Kept by the owner.
        self.message_count = 0
        self.preallocate_position_max = 0
        # The position up to which this process allocated the file's blocks ahead of its
        # writes (``Files.allocate``); beyond ``written_size`` only while some are unused.
        self._allocated_size = size

    @classmethod
    def open(
        cls, files: Files, path: str, start: int, *, create: bool = False, writable: bool = True
    ) -> Segment:
        """Open (or create) the segment file at ``path``.

        Args:
            files: the file layer.
            path: the file's path.
            start: the start offset its name encodes.
            create: create the file when missing.
            writable: open for appending; earlier segments open read-only, as in Java.

        Raises:
            StoreError: the file cannot be opened or its size read.
        """
        try:
            fd = files.open(path, create=create, writable=writable)
        except OSError as error:
            raise StoreError(f"cannot open segment {path}: {error}") from error
        try:
            size = files.size(fd)
        except OSError as error:
            files.close(fd)
            raise StoreError(f"cannot read the size of segment {path}: {error}") from error
        return cls(files, path, start, fd, size)

    def fileno(self) -> int:
        """The open descriptor, for ``os.sendfile`` from this segment to a socket."""
        return self._fd

    @property
    def end(self) -> int:
        """Offset just past the last written byte."""
        return self.start + self.written_size

    def append(self, data: Records) -> int:
        """Write ``data`` at the end of the file and return the position it starts at.

        Raises:
            StoreError: the write failed (ENOSPC, EIO, ...); the file was truncated back to the
                previous size when that was possible (``meta.store.append``).
        """
        position = self.written_size
        files = self._files
        if position + len(data) > self._allocated_size and self.preallocate_position_max:
            self._preallocate(position + len(data))
        try:
            # append_at, inlined for the reactor thread's sake (see meta.store.append).
            written = files.write(self._fd, data, position)
            if written != len(data):
                finish_write(files, self._fd, data, position, written)
        except OSError as error:
            if not truncate_after_failed_write(files, self._fd, position, self.path):
                # The file may hold any of these bytes now, whole records included: count
                # them, so that the partition's cut back covers them (or names them).
                self.written_size = position + len(data)
            raise StoreError(
                f"write to {self.path} at position {position} failed: {error}"
            ) from error
        self.written_size = position + len(data)
        return position

    def _preallocate(self, end: int) -> None:
        """Allocate the blocks from what is allocated up to ``end`` plus ``PREALLOCATE_BYTES``,
        at most to ``preallocate_position_max``; stop allocating where the file system cannot."""
        start = max(self._allocated_size, self.written_size)
        target = min(end + PREALLOCATE_BYTES, self.preallocate_position_max)
        if target <= start:
            return  # this append crosses the roll size: it allocates its own blocks
        if self._files.allocate(self._fd, start, target - start):
            self._allocated_size = target
        else:
            self.preallocate_position_max = 0

    def release_preallocation(self) -> None:
        """Free the blocks allocated ahead of the writes and not written, and allocate no more.

        Called when the segment stops being the one written (a roll, the partition's close),
        so that no segment file keeps blocks past its end. A failure is logged: the blocks
        stay allocated past the end, which no reader sees (the size is the data's).
        """
        self.preallocate_position_max = 0
        if self._allocated_size <= self.written_size or self._fd < 0:
            return
        try:
            self._files.trim_allocation(self._fd, self.written_size)
        except OSError as error:
            logger.warning("cannot free the unused blocks past the end of %s: %s", self.path, error)
            return
        self._allocated_size = self.written_size

    def read(self, position: int, length: int) -> bytes:
        """Return up to ``length`` bytes starting at ``position`` (shorter at end of file).

        Raises:
            StoreError: the read failed.
        """
        assert position >= 0
        assert length >= 0
        try:
            return self._files.read(self._fd, position, length)
        except OSError as error:
            raise StoreError(
                f"read of {self.path} at position {position} failed: {error}"
            ) from error

    def fsync(self) -> None:
        """Force the file to disk. Worker thread; raises OSError. Does not touch the sizes."""
        self._files.fsync(self._fd)

    def mark_flushed(self, size: int) -> None:
        """Record that the first ``size`` bytes are on disk. Reactor thread."""
        assert size <= self.written_size
        if size > self.flushed_size:
            self.flushed_size = size

    def cut(self, size: int) -> None:
        """Truncate the file to ``size`` bytes (a failed partition's unacknowledged tail,
        ``meta.store.tail_cut``, which then fsyncs it). Reactor thread.

        Raises:
            OSError: the truncation failed; the sizes are unchanged.
        """
        assert 0 <= size <= self.written_size
        self._files.truncate(self._fd, size)
        self.written_size = size
        self.flushed_size = min(self.flushed_size, size)
        self._allocated_size = size  # the truncation freed every block past ``size``

    def recover(self, chunk_bytes: int = RECOVER_CHUNK_BYTES) -> int:
        """Validate the file record by record, truncate at the first bad one, count records.

        This is Java's ``FileMessageSet.recover``: stop at a short header, a negative length, a
        record running past the end of the file or a checksum mismatch; everything from there
        on, valid records after a corrupt one included, is cut. The cut is logged.

        Args:
            chunk_bytes: how much to read at a time (tests make it small).

        Returns:
            The number of valid records kept.

        Raises:
            StoreError: the file cannot be read or truncated.
        """
        assert chunk_bytes >= HEADER_SIZE
        file_size = self.written_size
        try:
            valid_size, count = self._scan(file_size, chunk_bytes)
            if valid_size < file_size:
                self._files.truncate(self._fd, valid_size)
        except OSError as error:
            raise StoreError(f"cannot recover segment {self.path}: {error}") from error
        if valid_size < file_size:
            logger.warning(
                "recovered %s: kept %d records (%d bytes), cut %d bytes",
                self.path,
                count,
                valid_size,
                file_size - valid_size,
            )
        self.written_size = valid_size
        self.flushed_size = valid_size
        self._allocated_size = valid_size
        return count

    def _scan(self, file_size: int, chunk_bytes: int) -> tuple[int, int]:
        """Return ``(valid_size, record_count)`` of the file, reading it piece by piece."""
        position = 0
        count = 0
        want = chunk_bytes
        while position < file_size:
            buffer = self._files.read(self._fd, position, min(want, file_size - position))
            if not buffer:
                break  # the file is shorter than its size said; keep what was validated
            valid, found = scan_valid_prefix(buffer)
            position += valid
            count += found
            want = chunk_bytes
            if valid == len(buffer):
                continue
            rest = len(buffer) - valid
            if rest < HEADER_SIZE:
                if position + HEADER_SIZE > file_size:
                    break  # a torn header at the end of the file
                continue  # the header straddles the piece: read again from ``position``
            length = HEADER.unpack_from(buffer, valid)[0]
            record_size = HEADER_SIZE + length
            if length < 0 or position + record_size > file_size or record_size <= rest:
                break  # negative length, torn record, or a complete record that failed CRC
            want = max(chunk_bytes, record_size)  # a record larger than the piece: read it whole
        return position, count

    def close(self) -> None:
        """Close the descriptor; the segment must not be used afterwards."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            self._files.close(fd)

    def __repr__(self) -> str:
        return (
            f"Segment({self.path!r}, start={self.start}, written_size={self.written_size}, "
            f"flushed_size={self.flushed_size})"
        )


def load_segments(files: Files, directory: str) -> tuple[list[Segment], int]:
    """Open the segments of a partition directory and recover the last one.

    Args:
        files: the file layer.
        directory: the partition directory.

    Returns:
        The open segments sorted by start (empty when there is none) and the number of
        records kept in the last one.

    Raises:
        StoreError: a ``.meta`` name is not numeric, two neighbours are not contiguous, or a
            file cannot be opened, read or truncated.
    """
    try:
        names = files.listdir(directory)
    except OSError as error:
        raise StoreError(f"cannot list partition directory {directory}: {error}") from error
    found: list[tuple[int, str]] = []
    for name in names:
        path = os.path.join(directory, name)
        if name.endswith(".meta") and files.is_file(path):
            start = parse_segment_name(name)
            assert start is not None
            found.append((start, path))
    found.sort()
    segments: list[Segment] = []
    try:
        for index, (start, path) in enumerate(found):
            last = index == len(found) - 1
            segments.append(Segment.open(files, path, start, writable=last))
        _check_contiguous(segments)
        count = segments[-1].recover() if segments else 0
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    if segments:
        segments[-1].message_count = count
    for segment in segments[-SEGMENTS_UNSYNCED_AT_LOAD:]:
        segment.flushed_size = 0
    return segments, count


def durable_end(segments: list[Segment]) -> int:
    """The offset up to which every byte of the contiguous ``segments`` is on disk."""
    for segment in segments:
        if segment.flushed_size < segment.written_size:
            return segment.start + segment.flushed_size
    return segments[-1].end


def open_segments(files: Files, directory: str) -> tuple[list[Segment], bool]:
    """``load_segments``, or a first segment at offset 0 when the directory has none.

    Returns:
        The segments (the last one's ``message_count`` is what recovery kept) and whether
        the first segment was created (its directory entry then needs an fsync).
    """
    segments, _count = load_segments(files, directory)
    if segments:
        return segments, False
    path = os.path.join(directory, segment_name(0))
    segment = Segment.open(files, path, 0, create=True)
    logger.info("created segment %s", path)
    return [segment], True


def _check_contiguous(segments: list[Segment]) -> None:
    """Raise StoreError naming the two files when a segment does not end where the next starts."""
    for previous, following in zip(segments, segments[1:], strict=False):
        if previous.end != following.start:
            raise StoreError(
                f"segments are not contiguous: {previous.path} starts at {previous.start} and "
                f"holds {previous.written_size} bytes, but the next file {following.path} "
                f"starts at {following.start}"
            )
