"""The background scrubber: every segment's records checked, at a bounded rate, again and again.

What lives here: ``Scrubber``, which walks every partition of the store (sorted by topic and
partition), every segment from the oldest, up to the partition's visible end, checking each
record's framing and CRC with ``meta.store.integrity.SegmentScan`` (the checks of start-up
recovery and ``meta-admin verify``). A corrupt range it finds is logged at ERROR with its
file and position, added to the partition's ``health`` (``meta.store.corruption``), which
fences it from every read from then on, and counted in the metrics. After a full pass it
starts again from the beginning, at most once every ``PASS_INTERVAL_MIN_S`` (10 s).
Progress is not kept across restarts: a restarted broker scrubs from the start again
(recovery has checked the segments it scans by then).

Pacing: the reactor thread only chooses what to check next and keeps the counts; the reading
and the CRCs run as one piece of at most ``step_bytes`` at a time on ``executor`` (the
reactor's thread pool in the broker), through a descriptor the piece opens and closes itself
(a segment that retention deletes meanwhile is simply skipped). After each piece of ``n``
bytes that took ``t`` seconds the next one starts ``n / bytes_per_s - t`` seconds later, so
the average rate stays at or below ``bytes_per_s`` (``scrubBytesPerSecond``) and the worker
thread sleeps between pieces. A piece of 64 KiB holds the GIL for well under a millisecond of
Python, so the reactor (puts, gets) never waits long for it.

Thread affinity: reactor thread, except ``scan_piece``, which runs on the executor's thread.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from meta.store.corruption import CorruptRange
from meta.store.integrity import Finding, SegmentScan, file_reader

logger = logging.getLogger("meta.store.scrub")

STEP_BYTES = 64 * 1024
# With nothing to check (an empty store), look again this much later.
IDLE_S = 10.0
# A pass starts at most this often: a small store is checked in milliseconds, and checking
# it again at once would only spend CPU.
PASS_INTERVAL_MIN_S = 10.0


@dataclass(frozen=True, slots=True)
class Piece:
    """One unit of work: positions ``[position, end)`` of the segment file ``path``."""

    key: tuple[str, int]
    path: str
    start: int
    position: int
    end: int


@dataclass(frozen=True, slots=True)
class PieceResult:
    """What ``scan_piece`` found: where it stopped and the corrupt ranges on the way."""

    position: int
    findings: tuple[Finding, ...]
    missing: bool = False


def scan_piece(piece: Piece, step_bytes: int) -> PieceResult:
    """Check about ``step_bytes`` of ``piece``. Worker thread; opens its own descriptor.

    A file that is gone (retention deleted or archived it) gives ``missing``.
    """
    try:
        fd = os.open(piece.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return PieceResult(piece.position, (), missing=True)
    try:
        scan = SegmentScan(file_reader(fd), piece.end, piece.position, chunk_bytes=step_bytes)
        scan.step(step_bytes)
    finally:
        os.close(fd)
    return PieceResult(scan.position, tuple(scan.findings))


class Scrubber:
    """Checks every partition's records in the background, ``bytes_per_s`` at most.

    Args:
        store: its ``partitions()`` (every open partition log) and ``get(topic, partition)``
            (one of them, or None) are used (a ``StoreManager``).
        reactor: provides ``seconds`` and ``callLater`` (``task.Clock`` in tests).
        executor: runs ``scan_piece`` off the reactor thread, returns a Deferred.
        bytes_per_s: the rate; 0 turns the scrubber off.
        step_bytes: bytes checked per piece.
        pass_interval_min_s: the least time from the start of a pass to the next one's.

    Attributes:
        passes: complete passes over the whole store in this process.
        bytes_scrubbed: bytes checked in this process.
        corrupt_found: corrupt ranges found by the scrubber in this process.
    """

    def __init__(
        self,
        store: Any,
        reactor: Any,
        executor: Callable[[Callable[[], Any]], Any],
        bytes_per_s: int,
        step_bytes: int = STEP_BYTES,
        pass_interval_min_s: float = PASS_INTERVAL_MIN_S,
    ) -> None:
        assert bytes_per_s >= 0
        assert step_bytes > 0
        self._store = store
        self._reactor = reactor
        self._executor = executor
        self.bytes_per_s = bytes_per_s
        self._step_bytes = step_bytes
        self._pass_interval_min_s = pass_interval_min_s
        self._pass_started_s: float | None = None
        self._in_pass = False
        self.passes = 0
        self.bytes_scrubbed = 0
        self.corrupt_found = 0
        self._order: list[tuple[str, int]] = []  # this pass's partitions, sorted
        self._index = 0  # into ``_order``
        self._offset = -1  # where the current partition goes on (-1: its start)
        self._call: Any = None
        self._running = False  # a piece is on the executor
        self._stopped = True

    @property
    def enabled(self) -> bool:
        return self.bytes_per_s > 0

    def start(self) -> None:
        """Begin scrubbing (nothing when ``bytes_per_s`` is 0)."""
        if not self.enabled or not self._stopped:
            return
        self._stopped = False
        logger.info("scrubber: checking every segment at %d bytes per second", self.bytes_per_s)
        self._schedule(0.0)

    def stop(self) -> None:
        """Stop scrubbing; a piece still running finishes and reports nothing more."""
        self._stopped = True
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def _schedule(self, delay_s: float) -> None:
        if not self._stopped:
            self._call = self._reactor.callLater(max(0.0, delay_s), self._tick)

    def _tick(self) -> None:
        """Reactor: hand the next piece to the executor, or wait for the next pass."""
        self._call = None
        if self._stopped or self._running:
            return
        piece = self._next_piece()
        if not isinstance(piece, Piece):
            self._schedule(piece)
            return
        self._running = True
        started_s = self._reactor.seconds()
        done = self._executor(lambda: scan_piece(piece, self._step_bytes))
        done.addCallbacks(
            self._piece_done,
            self._piece_failed,
            callbackArgs=(piece, started_s),
            errbackArgs=(piece,),
        )

    def _next_piece(self) -> Piece | float:
        """The next piece of this pass, starting a new pass when it is time; otherwise the
        seconds to wait (until the next pass may start, or ``IDLE_S`` with no partition)."""
        for _attempt in range(2):
            while self._index < len(self._order):
                piece = self._piece_in(self._order[self._index])
                if piece is not None:
                    return piece
                self._index += 1
                self._offset = -1
            if self._in_pass:
                self._pass_done()
            now_s = self._reactor.seconds()
            if self._pass_started_s is not None:
                wait_s = self._pass_started_s + self._pass_interval_min_s - now_s
                if wait_s > 0:
                    return wait_s
            self._order = sorted((log.topic, log.partition) for log in self._store.partitions())
            if not self._order:
                return IDLE_S
            self._index = 0
            self._offset = -1
            self._pass_started_s = now_s
            self._in_pass = True
        return self._pass_interval_min_s  # a pass over partitions that are all empty

    def _pass_done(self) -> None:
        self._in_pass = False
        self.passes += 1
        took_s = self._reactor.seconds() - (self._pass_started_s or 0.0)
        # The first pass after a start says the store is checked; later ones only at DEBUG.
        level = logging.INFO if self.passes == 1 else logging.DEBUG
        logger.log(
            level,
            "scrubber: pass %d over every segment done in %.1f s (%d corrupt ranges found)",
            self.passes,
            took_s,
            self.corrupt_found,
        )

    def _piece_in(self, key: tuple[str, int]) -> Piece | None:
        """The next piece of partition ``key`` from ``_offset`` (None: it is done or gone)."""
        log = self._log(key)
        if log is None:
            return None
        offset = max(self._offset, log.min_offset)
        visible_end = log.max_offset
        if offset >= visible_end:
            if self._offset != -2:
                log.health.scrub_passes += 1
                self._offset = -2  # counted: the partition is done for this pass
            return None
        segments = log.segments
        starts = [segment.start for segment in segments]
        segment = segments[bisect.bisect_right(starts, offset) - 1]
        end = min(segment.written_size, visible_end - segment.start)
        return Piece(key, segment.path, segment.start, offset - segment.start, end)

    def _log(self, key: tuple[str, int]) -> Any:
        return self._store.get(*key)

    def _piece_done(self, result: PieceResult, piece: Piece, started_s: float) -> None:
        """Reactor: count the bytes, report new ranges, and pace the next piece."""
        self._running = False
        if self._stopped:
            return
        log = self._log(piece.key)
        checked = result.position - piece.position
        if result.missing or log is None:
            checked = 0
            self._offset = piece.start + piece.end  # the segment is gone: go on after it
        else:
            self._offset = piece.start + result.position
            self.bytes_scrubbed += checked
            log.health.scrubbed_bytes += checked
            for finding in result.findings:
                self._report(log, piece, finding)
        elapsed_s = self._reactor.seconds() - started_s
        self._schedule(checked / self.bytes_per_s - elapsed_s)

    def _piece_failed(self, failure: Any, piece: Piece) -> None:
        """Reactor: a read failed (EIO, ...): log it, skip the segment, go on."""
        self._running = False
        logger.error(
            "scrubber: cannot check %s from position %d: %s; skipping the rest of it",
            piece.path,
            piece.position,
            failure.getErrorMessage(),
        )
        self._offset = piece.start + piece.end
        self._schedule(1.0)

    def _report(self, log: Any, piece: Piece, finding: Finding) -> None:
        corrupt = CorruptRange(
            piece.start + finding.position,
            piece.start + finding.resume,
            piece.path,
            finding.position,
            finding.reason,
            "scrubber",
        )
        if not log.health.add(corrupt):
            return
        self.corrupt_found += 1
        logger.error(
            "scrubber: corrupt record in %s at position %d (partition %s offset %d): %s; "
            "valid records resume at position %d (offset %d); offsets %d to %d are not "
            "served from now on (docs/operations.md, Corrupt data)",
            piece.path,
            finding.position,
            log.name,
            corrupt.start,
            finding.reason,
            finding.resume,
            corrupt.end,
            corrupt.start,
            corrupt.end,
        )
