"""Start-up recovery of a partition's segment files: loading them, scanning, cutting a torn end.

What lives here: ``load_segments`` / ``open_segments``, which open a partition directory's
segments (contiguity checked, recovered; ``open_segments`` creates the first one when there
is none), and ``recover_segments``, the recovery itself.

The rule (``segment.cuts``, docs/formats.md §3.1): without a recovery point only the last
segment is scanned and only a bad range with no valid record after it (a torn or zeroed tail)
is cut. With the partition's recovery point (``meta.store.recovery_point``: the offset up to
which its data was fsynced), every segment from the one holding the point is scanned, as
Kafka does, and the first bad range starting at or after the point is cut with everything
after it: the end of data never fsynced, which a power loss can leave with a hole followed by
valid records. Every other bad range is corruption of synced data: kept in the file
(``Segment.recovery``) for the partition to fence. Earlier segments are trusted by size, as
Java does, and checked later by the scrubber (``meta.store.scrub``).

Thread affinity: the caller's (the reactor thread at start-up, before the partition serves).
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from dataclasses import replace

from meta.errors import StoreError
from meta.store.files import Files
from meta.store.segment import (
    RECOVER_CHUNK_BYTES,
    SEGMENTS_UNSYNCED_AT_LOAD,
    Segment,
    parse_segment_name,
    segment_name,
)
from meta.store.tail_cut import cut_back

logger = logging.getLogger("meta.store")


def load_segments(
    files: Files, directory: str, point: int | None = None
) -> tuple[list[Segment], int]:
    """Open the segments of a partition directory and recover them (``recover_segments``).

    Args:
        files: the file layer.
        directory: the partition directory.
        point: the partition's recovery point (``meta.store.recovery_point``), or None.

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
    # The segments recovery may cut open for writing; earlier ones read-only, as in Java.
    first = first_scanned([start for start, _path in found], point)
    segments: list[Segment] = []
    try:
        for index, (start, path) in enumerate(found):
            segments.append(Segment.open(files, path, start, writable=index >= first))
        _check_contiguous(segments)
        count = recover_segments(files, directory, segments, point) if segments else 0
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    for segment in segments[-SEGMENTS_UNSYNCED_AT_LOAD:]:
        segment.flushed_size = 0
    return segments, count


def first_scanned(starts: list[int], point: int | None) -> int:
    """The index of the first segment recovery scans: the last one without a recovery point,
    else the one holding the point (every segment after the point is scanned)."""
    if point is None:
        return len(starts) - 1
    return max(0, min(bisect_right(starts, point) - 1, len(starts) - 1))


def recover_segments(
    files: Files,
    directory: str,
    segments: list[Segment],
    point: int | None,
    chunk_bytes: int = RECOVER_CHUNK_BYTES,
) -> int:
    """Start-up recovery of a partition's segments; return the records kept in the last one.

    Scans the last segment, and with a recovery point every segment from the one holding it
    (``first_scanned``). The first bad range that ``cuts`` says is a torn end is cut, with
    everything after it (later segment files are removed, ``tail_cut.cut_back``) and logged at
    ERROR; the other bad ranges stay (``recovery.corrupt``) for the partition to fence. Sets
    each scanned segment's ``recovery`` and ``message_count``; ``segments`` loses the files
    a cut removed.

    Raises:
        StoreError: a file cannot be read or cut.
    """
    first = first_scanned([segment.start for segment in segments], point)
    cut_index: int | None = None
    for index in range(first, len(segments)):
        segment = segments[index]
        local = None if point is None else point - segment.start
        recovery = segment.scan_recovery(
            local, last=index == len(segments) - 1, chunk_bytes=chunk_bytes
        )
        segment.log_corrupt()
        segment.message_count = recovery.kept_records
        if recovery.valid_size < segment.written_size or recovery.cut_reason:
            cut_index = index
            break
    if cut_index is not None:
        _cut_torn_end(files, directory, segments, cut_index)
    last = segments[-1].recovery
    return last.kept_records if last is not None else 0


def _cut_torn_end(files: Files, directory: str, segments: list[Segment], index: int) -> None:
    """Cut the log at segment ``index``'s recovery cut; log it at ERROR."""
    segment = segments[index]
    recovery = segment.recovery
    assert recovery is not None
    end = segment.start + recovery.valid_size
    later = segments[index + 1 :]
    cut_bytes = segments[-1].end - end
    cut_records = recovery.cut_records + sum(other.count_records() for other in later)
    try:
        keep = cut_back(files, segments, end, directory)
    except OSError as error:
        raise StoreError(f"cannot recover segment {segment.path}: {error}") from error
    for removed in segments[keep:]:
        removed.close()
    del segments[keep:]
    segment.recovery = replace(recovery, cut_bytes=cut_bytes, cut_records=cut_records)
    if recovery.point is None:
        why = "and no valid record after it (a torn or zeroed tail)"
    else:
        why = (
            f"at or after the recovery point (offset {segment.start + recovery.point}): the "
            "end of data never fsynced, which a crash or power loss left incomplete"
        )
    logger.error(
        "recovered %s: cut %d bytes at position %d (offset %d) to the end of the log (%d "
        "valid records among them%s): %s, %s; kept %d records (%d bytes) in that file",
        segment.path,
        cut_bytes,
        recovery.valid_size,
        end,
        cut_records,
        f"; {len(later)} later segment files removed" if later else "",
        recovery.cut_reason,
        why,
        recovery.kept_records,
        recovery.valid_size,
    )


def open_segments(
    files: Files, directory: str, point: int | None = None
) -> tuple[list[Segment], bool]:
    """``load_segments`` (``point``: the recovery point, or None), or a first segment at
    offset 0 when the directory has none.

    Returns:
        The segments (the last one's ``message_count`` is what recovery kept) and whether
        the first segment was created (its directory entry then needs an fsync).
    """
    segments, _count = load_segments(files, directory, point)
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
