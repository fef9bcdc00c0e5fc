"""The append primitive of the store's files: write a record batch at the end, or cut it back.

``append_at`` is how a segment (``meta.store.segment``) and a transaction journal file
(``meta.tx.journal``) write: every byte of ``data`` at ``position``, a short write finished
(``Files.write`` reports short writes and never retries), a write that makes no progress
refused with ``EIO``. On failure the file is truncated back to ``position``, so no partial
record stays behind the caller's idea of the file's size; when even that fails, an error is
logged and the write's error is raised all the same (a segment then counts the write's bytes
as possibly written, so the partition's cut back covers them).

``Segment.append`` inlines ``append_at``'s three lines (its first write, ``finish_write``
for a short one, ``truncate_after_failed_write`` on failure): it runs once per partition
commit on the reactor thread, where one more call is a measurable share of an append's CPU
while the write itself only reaches the page cache. The journal calls ``append_at``.

Thread affinity: the caller's (the reactor thread for both callers); no state of its own.
"""

from __future__ import annotations

import errno
import logging

from meta.store.files import Files

logger = logging.getLogger("meta.store")

Records = bytes | memoryview
"""Whole records to write: the slave stages views of what it fetched, the broker ``bytes``."""


def append_at(files: Files, fd: int, data: Records, position: int, path: str) -> None:
    """Write all of ``data`` at ``position`` of the file ``fd``.

    Args:
        files: the file layer.
        fd: the open file.
        data: the bytes to write (whole records).
        position: where they go: the file's current end as far as the caller knows.
        path: the file's path, for the log line of a failed truncation.

    Raises:
        OSError: a write failed, or stalled (``EIO``); the file was cut back to ``position``
            when possible. The caller names the file in its own error.
    """
    try:
        written = files.write(fd, data, position)
        if written != len(data):
            finish_write(files, fd, data, position, written)
    except OSError:
        truncate_after_failed_write(files, fd, position, path)
        raise


def finish_write(files: Files, fd: int, data: Records, position: int, written: int) -> None:
    """Finish a short write: ``written`` of ``data``'s bytes are already at ``position``.

    Raises:
        OSError: a write failed, or wrote nothing (``EIO``, so a stalled file cannot loop).
    """
    view = memoryview(data)
    total = len(data)
    while written < total:
        more = files.write(fd, view[written:], position + written)
        if more <= 0:
            raise OSError(errno.EIO, f"write stalled after {written} of {total} bytes")
        written += more


def truncate_after_failed_write(files: Files, fd: int, position: int, path: str) -> bool:
    """Cut what a failed write may have left after ``position``; return whether it is cut.

    When even the cut fails, the error is logged: the file may now hold any prefix of the
    write's bytes, whole records included, which start-up recovery would keep. The owner then
    counts them as written, so its own cut back names them (``PartitionLog``).
    """
    try:
        files.truncate(fd, position)
    except OSError as error:
        logger.error(
            "cannot truncate %s back to %d after a failed write: %s", path, position, error
        )
        return False
    return True
