"""Cutting a partition's segment files back to its acknowledged end (docs/durability.md).

What lives here: ``cut_back``, which a ``PartitionLog`` runs when a write or fsync fails,
before it answers the waiting appends: every byte after the last acknowledged record goes, so
a put answered 500 (or never answered) because of the failure is not served after a restart.
A failed write alone cuts only itself (``meta.store.append``); the records written before it
and still waiting for their fsync would otherwise stay in the file.

Order, so a crash in the middle leaves a directory that loads: the later segment files (a roll
after the acknowledged end) are unlinked first, then the segment holding the end is truncated
and fsynced (on ext4, whose journal commits metadata in order, that fsync also commits the
earlier unlinks), then the directory is fsynced when a file was unlinked. A truncated segment
followed by a surviving later file would not be contiguous (start-up refuses that); the reverse
order risks only keeping unacknowledged records.

Also ``is_descriptor_shortage``: whether an error is EMFILE / ENFILE, which the store treats
as transient (the append gets 500, the partition stays open).

Thread affinity: reactor thread (the caller's); the files' descriptors stay open, and the
caller closes the unlinked segments once no flush can still use them.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Sequence

from meta.store.files import Files
from meta.store.segment import Segment

logger = logging.getLogger("meta.store")

DESCRIPTOR_ERRNOS = frozenset((errno.EMFILE, errno.ENFILE))


def is_descriptor_shortage(error: BaseException | None) -> bool:
    """Whether ``error`` (or the error it was raised from) is EMFILE or ENFILE."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in DESCRIPTOR_ERRNOS:
            return True
        error = error.__cause__
    return False


def segments_kept(segments: Sequence[Segment], end: int) -> int:
    """How many of ``segments`` (sorted by start) a cut back to ``end`` keeps (at least one)."""
    keep = len(segments)
    while keep > 1 and segments[keep - 1].start > end:
        keep -= 1
    return keep


def cut_back(files: Files, segments: Sequence[Segment], end: int, directory: str) -> int:
    """Cut the partition's files back to offset ``end``; return how many segments remain.

    Args:
        files: the file layer.
        segments: the partition's segments, sorted by start; ``end`` is at most the last
            one's end and at least the first one's start.
        end: the acknowledged end (``PartitionLog.max_offset``).
        directory: the partition directory, fsynced when a segment file was unlinked.

    Returns:
        The number of leading segments kept; the caller drops the others from its lists
        (their files are unlinked, their descriptors still open).

    Raises:
        OSError: an unlink or the truncation failed; the files may be partly cut. A failed
            fsync after it is only logged: the cut holds for readers and restarts.
    """
    keep = segments_kept(segments, end)
    for segment in segments[keep:]:
        files.remove(segment.path)
    last = segments[keep - 1]
    assert last.start <= end <= last.end
    if end < last.end or keep < len(segments):
        last.cut(end - last.start)
    # The cut is in force for every reader and for a restart of the process once the
    # truncation returned; the fsyncs make it survive a power loss too, when the disk still
    # can. (The fsync of the truncated segment also commits the earlier unlinks on a file
    # system that journals metadata in order, such as ext4.)
    try:
        last.fsync()
        if keep < len(segments):
            files.fsync_directory(directory)
    except OSError as error:
        logger.warning(
            "the cut of %s to %d may not survive a power loss: %s", last.path, end, str(error)
        )
    return keep
