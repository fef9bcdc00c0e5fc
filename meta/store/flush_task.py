"""``PartitionFlushTask``: one partition's share of a flush batch of the group-commit flusher.

Built on the reactor thread from what a partition has written but not fsynced; ``run`` runs on
the flusher thread and fsyncs the new directory entries, then each dirty segment once.
"""

from __future__ import annotations

from meta.store.files import Files, Sync, run_syncs
from meta.store.segment import Segment


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

    def syncs(self) -> tuple[Sync, ...]:
        """The new directory entries, then each dirty segment's descriptor once."""
        return (*self.directories, *[segment.fileno() for segment in self.segments])

    def run(self) -> None:
        """Worker thread: fsync new directory entries, then each dirty segment once."""
        run_syncs(self.files, self.syncs())
