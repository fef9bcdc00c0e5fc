"""One redo file of the transaction journal, and the fsync task over redo files.

``RedoFile`` is the journal's bookkeeping of one ``redo.<N>`` file: its descriptor, its
format version, ``size`` (staged bytes included), ``written_size``, ``flushed_size``, the
records staged for it and how many open transactions count on it (``references``).
``cut_unsynced`` cuts the files of a failed group-commit journal back to what a ``sync`` may
have answered. ``RedoSyncTask`` is the journal's share of a flush batch: the directory entry
and the files to fsync, with the sizes that fsync makes durable and the ``sync`` callers
waiting for it.

Invariant: ``flushed_size <= written_size <= size``. Thread affinity: the journal's (reactor
thread), except ``RedoSyncTask.run``, which runs on the flusher thread and touches only the
descriptors.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from meta.store.files import Files, Sync, run_syncs

logger = logging.getLogger("meta.tx")


class RedoFile:
    """One redo file: ``size`` counts staged bytes, ``written_size`` only written ones."""

    __slots__ = (
        "fd", "flushed_size", "number", "path", "references", "size", "staged", "version",
        "written_size",
    )  # fmt: skip

    def __init__(self, number: int, path: str, fd: int, size: int, version: int = 2) -> None:
        self.version = version
        self.number = number
        self.path = path
        self.fd = fd
        self.size = size
        self.written_size = size
        self.flushed_size = size
        self.references = 0
        self.staged: list[bytes] = []

    def cut_unsynced(self, files: Files, magic_bytes: int) -> int:
        """Truncate the file to ``flushed_size`` (never into its first ``magic_bytes``) and
        fsync it; return the bytes cut. A failed journal in group-commit mode calls this: a
        record after ``flushed_size`` was never answered as durable.

        Raises:
            OSError: the truncation or the fsync failed.
        """
        size = max(self.flushed_size, magic_bytes)
        cut = self.written_size - size
        if cut <= 0:
            return 0
        files.truncate(self.fd, size)
        files.fsync(self.fd)
        self.size = self.written_size = self.flushed_size = size
        return cut


class RedoSyncTask:
    """One flush batch's share: the directory entry and the files to fsync."""

    __slots__ = ("directory", "files", "redo_files", "sizes", "waiters")

    def __init__(
        self,
        files: Files,
        directory: str | None,
        redo_files: list[RedoFile],
        waiters: list[Callable[[BaseException | None], None]],
    ) -> None:
        self.files = files
        self.directory = directory
        self.redo_files = redo_files
        self.sizes = tuple(redo.written_size for redo in redo_files)
        self.waiters = waiters

    def syncs(self) -> tuple[Sync, ...]:
        """The directory entry (when new), then each written file's descriptor once."""
        descriptors = [redo.fd for redo in self.redo_files]
        if self.directory is None:
            return tuple(descriptors)
        return (self.directory, *descriptors)

    def run(self) -> None:
        """Flusher thread: fsync the directory entry, then each written file once."""
        run_syncs(self.files, self.syncs())


def cut_unsynced(files: Files, redo_files: Iterable[RedoFile], magic_bytes: int) -> None:
    """``RedoFile.cut_unsynced`` for each file of a failed journal; failures are logged (the
    journal has failed anyway, and a restart replays what could not be cut)."""
    for redo in redo_files:
        try:
            cut = redo.cut_unsynced(files, magic_bytes)
        except OSError as error:
            logger.error(
                "cannot cut %s back to %d: %s; a restart may replay records after it "
                "whose sync failed",
                redo.path,
                redo.flushed_size,
                str(error),
            )
            continue
        if cut:
            logger.error("journal %s: cut %d bytes that were never synced", redo.path, cut)
