"""What a partition knows about corrupt data in its files, and the fence that keeps it unserved.

What lives here: ``CorruptRange`` (offsets ``[start, end)`` of one segment that hold no valid
record, and where they are in the file), ``PartitionHealth`` (a partition's known ranges, its
scrub and recovery counters) and its ``fence``, which every read of the partition goes
through (``PartitionLog.slice``): a read that starts inside a known range gets a
``CORRUPT`` result naming the range; a read that runs into one ends before it.

Ranges come from start-up recovery of the segments it scans (``Segment.recovery``) and from the
background scrubber (``meta.store.scrub``); they are kept until the process stops (the
scrubber finds them again after a restart, recovery at once for the segments it scans). A range
is never cleared while the broker runs: the operator acts on the files with the broker
stopped, or moves consumers past it (docs/operations.md, "Corrupt data").

Reactor thread only (the scrubber reports through the reactor).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from meta.store.read_slice import CORRUPT, DATA, SliceResult


@dataclass(frozen=True, slots=True)
class CorruptRange:
    """Offsets ``[start, end)`` of one segment that the broker will not serve.

    Attributes:
        start: offset of the first bad byte (the bad record's start).
        end: offset where valid records resume (or the segment's end).
        path: the segment file.
        position: ``start`` as a position in that file.
        reason: what is wrong with the record at ``start``.
        found_by: ``"recovery"`` (start-up) or ``"scrubber"``.
    """

    start: int
    end: int
    path: str
    position: int
    reason: str
    found_by: str


@dataclass(slots=True)
class PartitionHealth:
    """One partition's known corrupt ranges and its integrity counters.

    Attributes:
        name: ``topic-partition``.
        ranges: known corrupt ranges, sorted by start, not overlapping.
        scrubbed_bytes: bytes the scrubber has checked in this process.
        scrub_passes: complete scrubber passes over this partition in this process.
        recovery_cut_bytes: bytes start-up recovery cut off the end of the log (a torn end).
        recovery_cut_offset: where that cut starts (-1 when nothing was cut).
    """

    name: str
    ranges: list[CorruptRange] = field(default_factory=list)
    scrubbed_bytes: int = 0
    scrub_passes: int = 0
    recovery_cut_bytes: int = 0
    recovery_cut_offset: int = -1

    @classmethod
    def from_segments(cls, name: str, segments: Sequence[Any]) -> PartitionHealth:
        """What start-up recovery found in ``segments`` (each scanned one's ``recovery``)."""
        health = cls(name)
        if segments and segments[-1].recovery is not None:
            last = segments[-1]
            if last.recovery.cut_bytes:  # a cut leaves the segment it cut last
                health.recovery_cut_bytes = last.recovery.cut_bytes
                health.recovery_cut_offset = last.start + last.recovery.valid_size
        for segment in segments:
            for finding in segment.recovery.corrupt if segment.recovery is not None else ():
                health.add(
                    CorruptRange(
                        segment.start + finding.position,
                        segment.start + finding.resume,
                        segment.path,
                        finding.position,
                        finding.reason,
                        "recovery",
                    )
                )
        return health

    def add(self, corrupt: CorruptRange) -> bool:
        """Record a range; return False when a known range already covers its start."""
        assert corrupt.start < corrupt.end
        if self.covering(corrupt.start) is not None:
            return False
        bisect.insort(self.ranges, corrupt, key=lambda known: known.start)
        return True

    def covering(self, offset: int) -> CorruptRange | None:
        """The known range holding ``offset``, or None."""
        index = bisect.bisect_right(self.ranges, offset, key=lambda known: known.start) - 1
        if index >= 0 and self.ranges[index].end > offset:
            return self.ranges[index]
        return None

    def ranges_from(self, offset: int) -> list[CorruptRange]:
        """The known ranges ending after ``offset`` (retention drops the older ones)."""
        return [known for known in self.ranges if known.end > offset]

    def fence(self, found: SliceResult) -> SliceResult:
        """``found`` (a ``slice`` result) with every known range kept out of it.

        A data slice starting inside a range becomes ``CORRUPT`` (its ``corrupt`` names the
        range); one running into a range ends where the range starts.
        """
        if not self.ranges or found.kind != DATA:
            return found
        offset = found.offset
        inside = self.covering(offset)
        if inside is not None:
            return SliceResult(CORRUPT, offset, corrupt=inside)
        index = bisect.bisect_right(self.ranges, offset, key=lambda known: known.start)
        if index < len(self.ranges):
            room = self.ranges[index].start - offset
            if room < found.length:
                return SliceResult(DATA, offset, found.segment, found.position, room)
        return found
