"""One segment file of a partition log: ``%020d.meta``, named by its start offset.

What lives here: ``Segment`` (append / read / fsync / scan for recovery / close),
``segment_name``, ``parse_segment_name``, ``durable_end``, and ``cuts``, the rule of what
start-up recovery cuts. Loading a partition directory's segments and recovering them is
``meta.store.log_recovery``'s. A segment is a plain concatenation of Metamorphosis records
with no header, index or trailer, so a file written by a Java broker opens here unchanged.

Invariants:
    * ``flushed_size <= written_size``; ``written_size`` is the file size as far as this process
      knows (only the last segment of a partition grows).
    * A failed append truncates the file back to ``written_size``; when even that fails,
      ``written_size`` counts the append's bytes (the file may hold them).
    * ``scan_recovery`` never changes the file; the cut it finds is made by
      ``meta.store.log_recovery`` (with ``meta.store.tail_cut``).
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
from dataclasses import dataclass

from meta.errors import StoreError
from meta.protocol.message import HEADER_SIZE
from meta.store.append import Records, finish_write, truncate_after_failed_write
from meta.store.files import Files
from meta.store.integrity import Finding, SegmentScan

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


@dataclass(frozen=True, slots=True)
class Recovery:
    """What start-up recovery found in one segment (``Segment.scan_recovery``).

    Attributes:
        kept_records: valid records kept.
        valid_size: the file's size after the cut.
        cut_bytes: bytes cut from ``valid_size`` to the end of the log (this file's end, and
            the later files a cut removed); 0 when none.
        corrupt: corrupt ranges kept inside the file, in file order (positions).
        cut_records: valid records in what was cut (a power loss's hole leaves some after it).
        cut_reason: what is wrong with the first record cut ("" when nothing was cut).
        point: the partition's recovery point as a position in this file (negative: the point
            is in an earlier file), or None when the partition has none.
    """

    kept_records: int
    valid_size: int
    cut_bytes: int
    corrupt: tuple[Finding, ...]
    cut_records: int = 0
    cut_reason: str = ""
    point: int | None = None


def cuts(finding: Finding, point: int | None, last: bool) -> bool:
    """Whether recovery cuts the log from ``finding`` on (docs/formats.md §3.1).

    With a recovery point (a position in the file): a bad range starting at or after it is
    the torn end of data never fsynced; one starting before it is corruption of synced data,
    kept and fenced. Without one: only a tail of the last segment (no valid record after it).
    """
    if point is None:
        return finding.tail and last
    return finding.position >= point


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
        recovery: what ``scan_recovery`` found (None when recovery did not scan it).
    """

    __slots__ = (
        "_allocated_size",
        "_fd",
        "_files",
        "flushed_size",
        "message_count",
        "path",
        "preallocate_position_max",
        "recovery",
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
        self.recovery: Recovery | None = None
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

    def scan_recovery(
        self, point: int | None, *, last: bool, chunk_bytes: int = RECOVER_CHUNK_BYTES
    ) -> Recovery:
        """Scan the file record by record and decide where recovery cuts it (``cuts``); the
        file is not changed. Sets and returns ``recovery``.

        The scan is ``meta.store.integrity``'s, one bad range at a time, so the records
        before the first range cut are counted apart from those after it.

        Raises:
            StoreError: the file cannot be read.
        """
        assert chunk_bytes >= HEADER_SIZE
        file_size = self.written_size
        cut: Finding | None = None
        kept = 0
        try:
            scan = SegmentScan(self._read_at, file_size, chunk_bytes=chunk_bytes)
            while not scan.done:
                seen = len(scan.findings)
                scan.step(1)  # at most one bad range per step: records counted stop before it
                for finding in scan.findings[seen:]:
                    if cut is None and cuts(finding, point, last):
                        cut, kept = finding, scan.records
        except OSError as error:
            raise StoreError(f"cannot recover segment {self.path}: {error}") from error
        valid_size = cut.position if cut is not None else scan.end
        if cut is None:
            kept = scan.records
        reason = cut.reason if cut is not None else "the file is shorter than its size"
        corrupt = tuple(finding for finding in scan.findings if finding.position < valid_size)
        self.recovery = Recovery(
            kept,
            valid_size,
            file_size - valid_size,
            corrupt,
            scan.records - kept,
            reason if valid_size < file_size else "",
            point,
        )
        return self.recovery

    def count_records(self) -> int:
        """The valid records of the whole file (a scan; for the log of a cut that removes it)."""
        try:
            return SegmentScan(self._read_at, self.written_size).run().records
        except OSError as error:
            logger.warning("cannot count the records of %s: %s", self.path, error)
            return 0

    def _read_at(self, position: int, length: int) -> bytes:
        return self._files.read(self._fd, position, length)

    def log_corrupt(self) -> None:
        """ERROR lines an operator can act on: each corrupt range recovery kept."""
        recovery = self.recovery
        assert recovery is not None
        for finding in recovery.corrupt:
            logger.error(
                "corrupt record in %s at position %d (offset %d): %s; valid records resume at "
                "position %d (offset %d); kept, and not served (docs/durability.md)",
                self.path,
                finding.position,
                self.start + finding.position,
                finding.reason,
                finding.resume,
                self.start + finding.resume,
            )

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


def durable_end(segments: list[Segment]) -> int:
    """The offset up to which every byte of the contiguous ``segments`` is on disk."""
    for segment in segments:
        if segment.flushed_size < segment.written_size:
            return segment.start + segment.flushed_size
    return segments[-1].end
