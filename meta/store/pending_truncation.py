"""Pending truncations: the cut a failed partition still owes, recorded so a restart makes it.

What lives here: ``PendingTruncations``, which a ``PartitionLog`` asks to record, when a write
or fsync fails, the offset its files must be cut back to (its acknowledged end: the end of
the last put answered 200); ``apply_pending``, which the store runs for every partition at
start-up, before the partition is opened: it makes every recorded cut, durably, and only
then deletes the record; ``cut_partition_files``, the cut itself on a closed partition
(also ``meta-admin truncate-partition``'s); and the record's text (docs/formats.md §3.5).

Why a record: the failed partition cuts its unacknowledged tail at once
(``meta.store.tail_cut``), but a disk that failed may refuse the cut too (an ext4 file system
turned read-only), while the bytes that were answered 500 may still reach the disk (its
journal committed them before the error). After the disk is repaired, a plain restart would
serve them. The record makes the next start cut them first, without an operator.

Where a record lives, first that accepts it (docs/durability.md):

1. ``<partition directory>/pending-truncation``, next to the segments it is about;
2. ``<root>/.pending_truncations/<topic>-<partition>`` for each other root of the broker,
   ``dataLogPath`` first, then ``[system] dataPath`` and each topic ``dataPath``: when the
   data disk refuses every write, a root on another file system still takes it.

Each is written as ``<name>.tmp``, fsynced, renamed, its directory fsynced, and fsynced
again under its final name (``Files.fsync``'s journal check), so a record under its final
name is whole and a place whose journal aborted under the rename counts as refusing it.
The record is written before the cut is tried: a cut that works leaves a record that the
next start finds already made (it only deletes it). When no place takes the record, the
partition stays fenced in memory (it serves only up to its acknowledged end and refuses
puts) and the store tries again when it closes; if that fails too, the log names the
``meta-admin truncate-partition`` command, the one case a plain restart cannot cover.

Thread affinity: reactor thread (the failing partition's ``_fail``, the store's ``load`` and
``close``); the admin command's own thread offline.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence

from meta.errors import StoreError
from meta.protocol.crc import crc32
from meta.store.files import Files, read_small_file, replace_file
from meta.store.recovery_point import lower_point
from meta.store.segment import SEGMENT_SUFFIX, Segment, parse_segment_name
from meta.store.tail_cut import cut_back

logger = logging.getLogger("meta.store")

RECORD_NAME = "pending-truncation"
"""The record's name in the partition directory."""
FALLBACK_DIRECTORY = ".pending_truncations"
"""The directory of records in another root (no ``-``: the partition scan skips it)."""
TEMPORARY_SUFFIX = ".tmp"
MAGIC = "metaq-pending-truncation"
VERSION = 1
RECORD_BYTES_MAX = 4096  # a record is three short lines; anything longer is not one


def record_text(partition_name: str, end: int) -> bytes:
    """The record of a cut of ``partition_name`` back to ``end`` (docs/formats.md §3.5)."""
    assert end >= 0
    assert " " not in partition_name and "\n" not in partition_name
    body = f"{MAGIC} {VERSION}\n{partition_name} {end}\n".encode("ascii")
    return body + b"%d\n" % crc32(body)


def parse_record(data: bytes, partition_name: str, path: str) -> int:
    """The end a record names; StoreError naming ``path`` when it is not a whole record of
    ``partition_name``."""
    lines = data.split(b"\n")
    body = b"\n".join(lines[:2]) + b"\n"
    ok = len(lines) == 4 and lines[3] == b"" and lines[2].isdigit()
    if ok and int(lines[2]) == crc32(body):
        words = lines[1].decode("ascii", "replace").split(" ")
        header = lines[0].decode("ascii", "replace")
        if header != f"{MAGIC} {VERSION}":
            raise StoreError(f"pending truncation record {path} has an unknown version {header!r}")
        if len(words) == 2 and words[0] == partition_name and words[1].isdigit():
            return int(words[1])
        raise StoreError(f"pending truncation record {path} is not about {partition_name}")
    raise StoreError(f"pending truncation record {path} is damaged (checksum or layout)")


def truncate_command(directory: str, partition_name: str, end: int) -> str:
    """The operator's command that makes (with ``--execute``) or shows the cut."""
    root = os.path.dirname(os.path.normpath(directory))
    return f"meta-admin truncate-partition {root} {partition_name} --end {end}"


class PendingTruncations:
    """Where the records of a store's partitions go and are found.

    Args:
        files: the file layer.
        roots: the broker's other roots, in the order tried after the partition directory
            (``dataLogPath`` first, then the data paths); or a callable returning them now
            (the store's, which follow a reloaded configuration).
    """

    def __init__(self, files: Files, roots: Sequence[str] | Callable[[], Sequence[str]]) -> None:
        self._files = files
        self._roots = roots

    @property
    def roots(self) -> tuple[str, ...]:
        """The other roots now, each once."""
        roots = self._roots() if callable(self._roots) else self._roots
        return tuple(dict.fromkeys(os.path.normpath(root) for root in roots))

    def of(self, directory: str, partition_name: str) -> PartitionTruncation:
        """The side of one partition (``PartitionLog.truncation``)."""
        return PartitionTruncation(self, directory, partition_name)

    def places(self, directory: str, partition_name: str) -> list[tuple[str, str]]:
        """(directory, record path) of each place of the partition's record, in order."""
        places = [(directory, os.path.join(directory, RECORD_NAME))]
        for root in self.roots:
            folder = os.path.join(root, FALLBACK_DIRECTORY)
            places.append((folder, os.path.join(folder, partition_name)))
        return places

    def record(self, directory: str, partition_name: str, end: int) -> tuple[str | None, str]:
        """Record durably that ``directory`` must be cut back to ``end``.

        Returns:
            The record's path (None when no place took it) and what each refusal was.
        """
        data = record_text(partition_name, end)
        refusals = []
        for folder, path in self.places(directory, partition_name):
            try:
                self._write(folder, path, data)
            except OSError as error:
                refusals.append(f"{path}: {error.strerror or error}")
                continue
            return path, "; ".join(refusals)
        return None, "; ".join(refusals)

    def _write(self, folder: str, path: str, data: bytes) -> None:
        """tmp, fsync, rename, fsync the directory (and its parent when it was created)."""
        files = self._files
        if not files.is_directory(folder):
            files.mkdir(folder)
            files.fsync_directory(os.path.dirname(folder))
        replace_file(files, path, data, TEMPORARY_SUFFIX)
        # A directory fsync has no journal check (``Files.fsync`` has): an fsync of the
        # record under its final name makes one, so a journal aborted under the rename
        # refuses this place instead of losing the record.
        fd = files.open(path)
        try:
            files.fsync(fd)
        finally:
            files.close(fd)

    def found(
        self, directory: str, partition_name: str, *, tidy: bool = False
    ) -> list[tuple[str, str, int]]:
        """(directory, path, end) of every record of the partition; StoreError naming a
        record that cannot be read. ``tidy`` (start-up): delete leftover ``.tmp`` files."""
        records = []
        files = self._files
        for folder, path in self.places(directory, partition_name):
            if tidy and files.is_file(path + TEMPORARY_SUFFIX):
                _remove_quietly(files, path + TEMPORARY_SUFFIX)  # never renamed: not a record
            if not files.is_file(path):
                continue
            try:
                data = read_small_file(files, path, RECORD_BYTES_MAX)
            except OSError as error:
                raise StoreError(f"cannot read pending truncation record {path}: {error}") from None
            records.append((folder, path, parse_record(data, partition_name, path)))
        return records

    def apply_pending(self, directory: str, partition_name: str) -> None:
        """Start-up, before the partition is opened: make the cut its records name, durably,
        then delete them.

        Raises:
            StoreError: a record cannot be read, or the cut or a deletion fails: the broker
                does not start, and the text names the record and the command.
        """
        try:
            records = self.found(directory, partition_name, tidy=True)
        except StoreError as error:
            raise StoreError(
                f"{error}; partition {partition_name} may hold records answered 500 after a "
                f"disk failure: cut it with `meta-admin truncate-partition` at the end the "
                f"broker logged, then delete the record"
            ) from None
        if not records:
            return
        end = min(found_end for _folder, _path, found_end in records)
        command = truncate_command(directory, partition_name, end)
        try:
            cut = cut_partition_files(self._files, directory, end, durable=True)
            for folder, path, _end in records:
                self._files.remove(path)
                self._files.fsync_directory(folder)
        except (OSError, StoreError) as error:
            paths = ", ".join(path for _folder, path, _end in records)
            raise StoreError(
                f"partition {partition_name} must be cut back to offset {end} before it is "
                f"served (pending truncation record {paths}), and that failed: {error}; fix "
                f"the disk and start again, or run `{command} --execute` and delete the record"
            ) from None
        logger.warning(
            "partition %s: %s (pending truncation record written when its disk failed)",
            partition_name,
            f"cut {cut} bytes after offset {end}: puts answered 500 or never answered"
            if cut
            else f"it ends at offset {end} or before: nothing to cut",
        )

    def fallback_records(self) -> list[tuple[str, str]]:
        """(partition name, path) of every record in the other roots."""
        records = []
        for root in self.roots:
            folder = os.path.join(root, FALLBACK_DIRECTORY)
            if not self._files.is_directory(folder):
                continue
            try:
                names = self._files.listdir(folder)
            except OSError as error:
                logger.warning("cannot list %s: %s", folder, error)
                continue
            for name in names:
                if not name.endswith(TEMPORARY_SUFFIX):
                    records.append((name, os.path.join(folder, name)))
        return records

    def discard(self, partition_name: str) -> None:
        """Delete the records of ``partition_name`` in the other roots (a partition created
        afresh: nothing of an older one of that name is left to cut). Raises OSError."""
        for root in self.roots:
            folder = os.path.join(root, FALLBACK_DIRECTORY)
            path = os.path.join(folder, partition_name)
            if self._files.is_file(path):
                self._files.remove(path)
                self._files.fsync_directory(folder)
                logger.warning(
                    "deleted pending truncation record %s: partition %s was created afresh",
                    path,
                    partition_name,
                )

    def report_strays(self, loaded: set[str]) -> None:
        """Start-up: warn about records of partitions not ``loaded`` (their directory is gone,
        or its ``dataPath`` is not configured now); they are kept."""
        for name, path in self.fallback_records():
            if name not in loaded:
                logger.warning(
                    "pending truncation record %s names partition %s, which was not loaded: "
                    "kept; it is applied when the partition is loaded, deleted when it is "
                    "created afresh",
                    path,
                    name,
                )

    def settle(self, directory: str, partition_name: str, *, created: bool) -> None:
        """A partition opened after start-up: a record of a deleted partition of that name
        does not apply to a new directory (deleted); one found by a reload is applied.

        Raises:
            StoreError: as ``apply_pending``, or the deletion failed.
        """
        if not created:
            self.apply_pending(directory, partition_name)
            return
        try:
            self.discard(partition_name)
        except OSError as error:
            raise StoreError(
                f"cannot delete the pending truncation record of the new partition "
                f"{directory}: {error}"
            ) from error


class PartitionTruncation:
    """One partition's side: the record written when it failed, or the cut still owed.

    Attributes:
        record_path: the record written (None: none yet).
        owed: the end of a cut that failed unrecorded (None: none).
    """

    def __init__(self, truncations: PendingTruncations, directory: str, name: str) -> None:
        self._truncations = truncations
        self.directory = directory
        self.name = name
        self.record_path: str | None = None
        self.owed: int | None = None

    def record(self, end: int, written_end: int) -> None:
        """A write or fsync failed: before the cut is tried, record durably that the files
        must be cut back to ``end`` (nothing to record when they end there)."""
        if written_end == end:
            return
        path, refusals = self._truncations.record(self.directory, self.name, end)
        if path is not None:
            self.record_path, self.owed = path, None
        if refusals:
            logger.warning(
                "partition %s: a place refused its truncation record: %s", self.name, refusals
            )

    def retry(self) -> None:
        """Closing: try again to record a cut that failed unrecorded (the disk may take it
        now); log the command when it still cannot."""
        end = self.owed
        if end is None:
            return
        path, refusals = self._truncations.record(self.directory, self.name, end)
        command = truncate_command(self.directory, self.name, end)
        if path is None:
            logger.error(
                "partition %s: the cut back to offset %d is still neither made nor recorded "
                "(%s): a restart may serve records answered 500 unless `%s --execute` drops "
                "them before it",
                self.name,
                end,
                refusals,
                command,
            )
            return
        self.record_path, self.owed = path, None
        logger.warning(
            "partition %s: recorded the cut back to offset %d in %s: the next start makes it",
            self.name,
            end,
            path,
        )


def uncut_text(
    truncation: PartitionTruncation | None,
    directory: str,
    end: int,
    written_end: int,
    error: OSError,
) -> str:
    """The log's words for a cut of the partition in ``directory`` that the disk refused;
    without a record, ``truncation`` keeps the cut as owed (``retry`` at close)."""
    name = os.path.basename(os.path.normpath(directory))
    command = truncate_command(directory, name, end)
    if truncation is not None and truncation.record_path is not None:
        return (
            f"cannot cut it back to the acknowledged end {end} ({error}); recorded in "
            f"{truncation.record_path}: the next start cuts offsets {end} to {written_end} "
            f"before it serves (`{command}` shows the cut)"
        )
    if truncation is not None:
        truncation.owed = end
    return (
        f"cannot cut it back to the acknowledged end {end} ({error}) nor record the cut: "
        f"a restart may serve records of offsets {end} to {written_end} that were not "
        f"acknowledged; to drop them, run `{command} --execute` before the next start"
    )


def segment_paths(files: Files, directory: str) -> list[tuple[int, str]]:
    """(start, path) of each segment file of ``directory``, sorted by start."""
    found = []
    for name in files.listdir(directory):
        start = parse_segment_name(name) if name.endswith(SEGMENT_SUFFIX) else None
        path = os.path.join(directory, name)
        if start is not None and files.is_file(path):
            found.append((start, path))
    return sorted(found)


def cut_partition_files(files: Files, directory: str, end: int, *, durable: bool) -> int:
    """Cut a closed partition's segment files back to ``end`` (``tail_cut.cut_back``); return
    the bytes cut (0 when the files end at ``end`` or before).

    ``durable``: fsync the cut segment and the directory again and raise when that fails
    (``cut_back`` only logs it), for a caller that deletes the record after the cut. Before
    the cut, the partition's recovery point is lowered to ``end`` when it is above
    (``recovery_point.lower_point``).

    Raises:
        StoreError: ``end`` lies before the partition's first segment.
        OSError: the recovery point's lowering, the cut (or, ``durable``, its fsync) failed.
    """
    paths = segment_paths(files, directory)
    if not paths:
        return 0
    if end < paths[0][0]:
        raise StoreError(f"offset {end} is before the first segment of {directory}")
    segments: list[Segment] = []
    try:
        for start, path in paths:
            segments.append(Segment.open(files, path, start))
        written_end = segments[-1].end
        if written_end <= end:
            return 0
        lower_point(files, directory, end)  # first: what is written there later is unsynced
        keep = cut_back(files, segments, end, directory)
        if durable:
            segments[keep - 1].fsync()
            files.fsync_directory(directory)
        return written_end - end
    finally:
        for segment in segments:
            segment.close()


def _remove_quietly(files: Files, path: str) -> None:
    try:
        files.remove(path)
    except OSError as error:
        logger.warning("cannot remove %s: %s", path, error)
