"""Recovery points: per partition, the offset up to which its data is known to be fsynced.

What lives here: the ``recovery-point-offset-checkpoint`` file of each data path (its text,
docs/formats.md §3.6: ``encode_points`` / ``decode_points``, ``read_points``,
``write_points``), ``lower_point`` (a cut of a closed partition lowers its entry first), and
``RecoveryPoints``, the store's side: the points of every open partition, written to each data
path's file every ``recoveryPointIntervalInSeconds`` and at a clean stop.

Why (docs/durability.md, "Corrupt data"): after a power loss the unsynced end of the last
segment can hold a hole (pages written out of order) followed by valid records. Start-up
recovery cuts a bad range that starts at or after the partition's recovery point (what was
not fsynced, so never acknowledged in the fsync modes) and fences one below it (corruption of
synced data). Without an entry for a partition, recovery keeps the rule without one.

Invariants:
    * A point never runs ahead of what is fsynced: it is the partition's ``durable_end``
      (advanced only by completed flushes, on the reactor thread) or, until that passes it,
      the point loaded at start-up capped at the end recovery left (those bytes were fsynced
      before the restart); either is capped at the partition's written end, so a cut of the
      partition lowers it with the cut. An online cut goes back to the acknowledged end,
      never below the point; an offline cut (``meta-admin truncate-partition``, a pending
      truncation at start-up) rewrites the entry before it cuts (``lower_point``).
    * A file under its final name is whole (``files.replace_file``); a failed write leaves
      the previous file, is logged, and is tried again at the next interval.
    * The file lists exactly the partitions open under its data path: a partition deleted
      while the broker was stopped loses its entry at the next write.

Thread affinity: reactor thread (``RecoveryPoints``: its fsyncs are of one small file per
data path, at most once per interval, as the journal's checkpoints are); ``lower_point``
runs on its caller's thread with the partition closed (start-up, ``meta-admin``).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Protocol

from twisted.internet.task import LoopingCall

from meta.protocol.crc import crc32
from meta.store.files import Files, read_small_file, replace_file

logger = logging.getLogger("meta.store")

FILE_NAME = "recovery-point-offset-checkpoint"
"""The file's name in each data path (Kafka's name; no ``-`` digits at its end, so the
partition scan of a data path skips it, as it skips every plain file)."""
MAGIC = "metaq-recovery-point"
VERSION = 1
FILE_BYTES_MAX = 64 * 1024 * 1024  # a line per partition: far more than any broker has


class PointedLog(Protocol):
    """What ``RecoveryPoints`` reads of a partition (``PartitionLog``)."""

    directory: str

    @property
    def durable_end(self) -> int: ...

    @property
    def written_end(self) -> int: ...


def data_path_of(directory: str) -> str:
    """The data path holding the partition directory ``directory``."""
    return os.path.dirname(os.path.normpath(directory))


def encode_points(points: dict[str, int]) -> bytes:
    """The file's bytes for ``points`` (partition directory name -> offset), sorted by name."""
    lines = [f"{MAGIC} {VERSION}\n", f"{len(points)}\n"]
    for name in sorted(points):
        assert "\n" not in name and points[name] >= 0
        lines.append(f"{name} {points[name]}\n")
    # A directory name that is not UTF-8 keeps its bytes (as ``os.listdir`` gave them).
    body = "".join(lines).encode("utf-8", "surrogateescape")
    return body + b"%d\n" % crc32(body)


def decode_points(data: bytes) -> dict[str, int]:
    """Parse the file's bytes.

    Raises:
        ValueError: not a whole file of this version (what is wrong, for the log).
    """
    if not data.endswith(b"\n"):
        raise ValueError("the file does not end with a line feed (cut short)")
    body, _, crc_line = data[:-1].rpartition(b"\n")
    body += b"\n"
    if not crc_line.isdigit() or int(crc_line) != crc32(body):
        raise ValueError("checksum mismatch")
    lines = body.decode("utf-8", "surrogateescape").split("\n")[:-1]
    if not lines or lines[0] != f"{MAGIC} {VERSION}":
        raise ValueError(f"unknown header {lines[0] if lines else ''!r}")
    if len(lines) < 2 or not lines[1].isdigit() or int(lines[1]) != len(lines) - 2:
        raise ValueError("the entry count does not match the entries")
    points = {}
    for line in lines[2:]:
        name, _, offset = line.rpartition(" ")
        if not name or not offset.isdigit():
            raise ValueError(f"bad entry {line!r}")
        points[name] = int(offset)
    return points


def read_points(files: Files, data_path: str) -> dict[str, int] | None:
    """The entries of ``data_path``'s file; None when it has none or it cannot be used
    (logged at ERROR: recovery then keeps the rule without a recovery point)."""
    path = os.path.join(data_path, FILE_NAME)
    if not files.is_file(path):
        return None
    try:
        return decode_points(read_small_file(files, path, FILE_BYTES_MAX))
    except (OSError, ValueError) as error:
        logger.error(
            "ignoring the recovery point file %s: %s; its partitions recover without a "
            "recovery point (docs/durability.md)",
            path,
            error,
        )
        return None


def write_points(files: Files, data_path: str, points: dict[str, int]) -> None:
    """Replace ``data_path``'s file with ``points`` atomically. Raises OSError."""
    replace_file(files, os.path.join(data_path, FILE_NAME), encode_points(points))


def lower_point(files: Files, directory: str, end: int) -> None:
    """Before a closed partition is cut back to ``end``: lower its entry to ``end`` when it
    is above (the bytes written there later are not fsynced). Raises OSError."""
    data_path = data_path_of(directory)
    points = read_points(files, data_path)
    name = os.path.basename(os.path.normpath(directory))
    if points is None or points.get(name, -1) <= end:
        return
    logger.info("lowering the recovery point of %s from %d to %d", name, points[name], end)
    points[name] = end
    write_points(files, data_path, points)


class RecoveryPoints:
    """The store's recovery points: loaded at start-up, written per data path periodically.

    Args:
        files: the file layer.
        clock: provides ``callLater`` / ``seconds`` (the reactor).
        interval_s: seconds between writes (``recoveryPointIntervalInSeconds``).
    """

    def __init__(self, files: Files, clock: Any, interval_s: float) -> None:
        self._files = files
        self._clock = clock
        self._interval_s = interval_s
        self._found: dict[str, dict[str, int] | None] = {}  # data path -> its file's entries
        self._written: dict[str, dict[str, int]] = {}  # data path -> what its file holds
        self._logs: dict[PointedLog, int | None] = {}  # open partition -> loaded floor
        self._told: set[str] = set()  # data paths whose missing entries were logged
        self._timer: LoopingCall | None = None
        self._failing: set[str] = set()  # data paths whose last write failed

    def entry(self, directory: str) -> int | None:
        """The recovery point recorded for the partition in ``directory`` (before it opens);
        None when there is none, logged once per data path."""
        if self._timer is not None:
            return None  # opened after start-up: a new partition (or one a reload found)
        data_path = data_path_of(directory)
        if data_path not in self._found:
            self._found[data_path] = read_points(self._files, data_path)
        points = self._found[data_path]
        name = os.path.basename(os.path.normpath(directory))
        point = None if points is None else points.get(name)
        if point is None and data_path not in self._told:
            self._told.add(data_path)
            logger.warning(
                "partition %s (and maybe others in %s) has no recovery point in %s (first "
                "start of this version, or a directory from another broker): its last segment "
                "is recovered without one, so a bad range followed by valid records is fenced "
                "for an operator even when a power loss left it (docs/durability.md); this "
                "is logged once per data path",
                name,
                data_path,
                FILE_NAME,
            )
        return point

    def track(self, log: PointedLog, loaded: int | None) -> None:
        """Count ``log`` in from now on; ``loaded`` is ``entry``'s answer at its opening.

        The bytes below the loaded point that recovery left were fsynced before the restart;
        what is appended after them is not, until a flush: the floor is the end recovery left.
        """
        end = log.written_end
        if loaded is not None and loaded > end:
            logger.warning(
                "partition %s ends at offset %d, before its recovery point %d: data fsynced "
                "before the restart is missing (files cut or replaced while it was stopped?)",
                os.path.basename(os.path.normpath(log.directory)),
                end,
                loaded,
            )
        self._logs[log] = None if loaded is None else min(loaded, end)

    def point(self, log: PointedLog) -> int:
        """The partition's recovery point now: never ahead of what is fsynced."""
        floor = self._logs.get(log)
        point = log.durable_end if floor is None else max(floor, log.durable_end)
        return min(point, log.written_end)

    def points_by_data_path(self) -> dict[str, dict[str, int]]:
        """The file contents each data path is due (every data path seen, open or not)."""
        due: dict[str, dict[str, int]] = {path: {} for path in (*self._found, *self._written)}
        for log in self._logs:
            name = os.path.basename(os.path.normpath(log.directory))
            if "\n" not in name:  # a line per entry: such a partition recovers without one
                due.setdefault(data_path_of(log.directory), {})[name] = self.point(log)
        return due

    def start(self) -> None:
        """Write every data path's file now (the points recovery left), then every interval."""
        self._timer = LoopingCall(self.write)
        self._timer.clock = self._clock
        self.write()
        self._timer.start(self._interval_s, now=False)

    def write(self) -> None:
        """Write each data path's file whose entries changed; log a failure (ERROR, the first
        of a run; tried again at the next interval). Never raises; nothing before ``start``."""
        if self._timer is None:
            return
        for data_path, points in self.points_by_data_path().items():
            if self._written.get(data_path) == points:
                continue
            try:
                write_points(self._files, data_path, points)
            except OSError as error:
                if data_path not in self._failing:
                    logger.error(
                        "cannot write the recovery points of %s: %s; the file keeps its older "
                        "(lower) points, and the write is tried again every %g s",
                        data_path,
                        error,
                        self._interval_s,
                    )
                self._failing.add(data_path)
                continue
            if data_path in self._failing:
                self._failing.discard(data_path)
                logger.warning("wrote the recovery points of %s again", data_path)
            self._written[data_path] = points
            self._found[data_path] = points

    def stop_timer(self) -> None:
        """The store is closing: no more periodic writes (``stop`` writes the last points)."""
        if self._timer is not None and self._timer.running:
            self._timer.stop()

    def stop(self) -> None:
        """A clean stop, once the last flush is done: write the final points."""
        if self._timer is None:
            return  # never started: nothing was served, the files stay as they were
        self.stop_timer()
        self.write()
