"""Small value types of ``PartitionLog``: read slices, reservations and flush tasks.

``SliceResult`` says where a read lands; ``Reservation`` holds log bytes for a batch given
later (transaction commits), and ``take_filled`` joins what is staged before the first
unfilled one; ``take_written`` takes what a commit writes (and the appends it counts for);
``fire`` is the ack behind ``PartitionLog.append``; ``PartitionFlushTask`` is one partition's
share of a flush batch.
``PartitionFlushTask.run`` runs on the flusher thread; everything else is reactor thread only.
"""

from __future__ import annotations

from dataclasses import dataclass

from meta.store.files import Files
from meta.store.segment import Segment

BEFORE = "before"
AFTER = "after"
DATA = "data"


@dataclass(frozen=True, slots=True)
class SliceResult:
    """Where a read at ``offset`` lands (spec 2.2 step 6-7).

    ``kind`` is ``"before"`` (``offset`` is then the first offset of the log), ``"after"``
    (``offset`` is then ``max_offset``) or ``"data"``: ``length`` bytes of ``segment`` from
    ``position``, never crossing into the next segment nor past the visible end.
    """

    kind: str
    offset: int
    segment: Segment | None = None
    position: int = 0
    length: int = 0


class Reservation:
    """Bytes of a partition log held for a batch that ``PartitionLog.fill`` gives later."""

    __slots__ = ("data", "length", "offset")

    def __init__(self, offset: int, length: int) -> None:
        self.offset = offset
        self.length = length
        self.data: bytes | None = None


def fire(deferred, offset: int | None, error: BaseException | None) -> None:
    """An ack that fires ``deferred`` with the offset, or fails it with the error."""
    if error is None:
        deferred.callback(offset)
    else:
        deferred.errback(error)


def take_filled(staged: list[bytes | Reservation]) -> tuple[bytes, int]:
    """Remove and join the staged entries before the first unfilled reservation.

    Returns:
        The joined bytes and how many (filled) reservations were among the removed entries.
    """
    parts: list[bytes] = []
    filled = 0
    for entry in staged:
        if entry.__class__ is Reservation:
            if entry.data is None:
                break
            filled += 1
            parts.append(entry.data)
        else:
            parts.append(entry)
    del staged[: len(parts)]
    return b"".join(parts), filled


def take_written(
    staged: list[bytes | Reservation], counts: list[int], reservations: int
) -> tuple[bytes, int, int]:
    """Remove what a commit writes now from ``staged`` and the parallel ``counts``: every
    entry, or, while ``reservations`` > 0, those before the first unfilled reservation.

    Returns:
        The joined bytes, the filled reservations among them, and the appends they count for.
    """
    if not reservations:
        data = staged[0] if len(staged) == 1 else b"".join(staged)
        written = counts[0] if len(counts) == 1 else sum(counts)
        staged.clear()
        counts.clear()
        return data, 0, written
    before = len(staged)
    data, filled = take_filled(staged)
    taken = before - len(staged)
    written = sum(counts[:taken])
    del counts[:taken]
    return data, filled, written


class PartitionFlushTask:
    """One partition's share of a flush batch: what to fsync and what that makes durable."""

    __slots__ = ("directories", "end_offset", "files", "segments", "sizes")

    def __init__(
        self, files: Files, segments: tuple[Segment, ...], directories: list[str], end_offset: int
    ) -> None:
        self.files = files
        self.segments = segments
        self.sizes = tuple(segment.written_size for segment in segments)
        self.directories = directories
        self.end_offset = end_offset

    def run(self) -> None:
        """Worker thread: fsync new directory entries, then each dirty segment once."""
        for directory in self.directories:
            self.files.fsync_directory(directory)
        for segment in self.segments:
            segment.fsync()
