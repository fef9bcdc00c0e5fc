"""One partition's log (MetaQ's ``MessageStore``): its segments, append, roll, slice, flush.

What lives here: ``PartitionLog``, for a partition directory ``<dataPath>/<topic>-<partition>/``
(docs/formats.md §3); its segments are loaded by ``log_recovery.open_segments``.

Invariants:
    * Segments are sorted by start and contiguous: ``start + written_size == next start``.
      Only the last one is written to.
    * ``durable_end <= written_end`` and ``max_offset <= written_end``. ``max_offset`` (the
      visible end) is the end of the last record whose append was acknowledged; acks are
      released strictly in append order (docs/compatibility.md), so a consumer can read a record
      exactly when its producer was answered.
    * A record that must be durable (``should_flush``) is released only once ``durable_end``
      covers it. A record is never released after its partition failed.
    * After a failed write or fsync the partition is failed for good (docs/durability.md): its files
      are first cut back to ``max_offset`` (``meta.store.tail_cut``), then every waiting
      append errbacks with ``PartitionFailedError`` and every later append is refused. So no
      record answered 500, or left unanswered by the failure, is served after a restart
      (when the disk refuses the cut, its record makes the next start make it:
      ``meta.store.pending_truncation``).
    * Running out of file descriptors (EMFILE, ENFILE) is transient: a roll that cannot open
      the next segment refuses what is staged (500) and is tried again by the next commit; a
      flush that cannot open the directory cuts back and fails what waits for it, the same way.
    * Records are written in offset order: nothing staged after an unfilled ``Reservation``
      is written (or acknowledged) before the reservation is filled.

Thread affinity: reactor thread only; the flusher thread only runs ``PartitionFlushTask.run``.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, cast

from twisted.internet.defer import Deferred

from meta.config import FlushMode
from meta.errors import DescriptorShortageError, PartitionFailedError, StoreError
from meta.protocol.message import HEADER_SIZE
from meta.store.append import Records
from meta.store.corruption import PartitionHealth
from meta.store.files import Files
from meta.store.flush_task import PartitionFlushTask
from meta.store.group_commit import FlushClient, Flusher, FlushPolicy, should_flush
from meta.store.log_recovery import open_segments
from meta.store.pending_truncation import PartitionTruncation, uncut_text
from meta.store.read_slice import AFTER, BEFORE, DATA, SliceResult
from meta.store.reservation import Reservation, fire, take_written
from meta.store.segment import Segment, durable_end, segment_name
from meta.store.tail_cut import cut_back, is_descriptor_shortage

logger = logging.getLogger("meta.store")

Ack = Callable[[int | None, BaseException | None], None]
"""``ack(offset, None)`` when an append may be acknowledged, ``ack(None, error)`` if it failed."""


class PartitionLog:
    """The log of one (topic, partition): appends, acknowledgement order, reads.

    Attributes:
        topic: the topic name.
        partition: the partition number.
        directory: the partition directory.
        message_count: (property) appends written to the current segments since open (a
            transaction batch counts 1) plus the records recovered at start-up.
        failed: the ``PartitionFailedError`` that stopped the partition, or None.
        appended_messages, appended_bytes: appends (a transaction batch counts 1) and record
            bytes acknowledged by this process, never decreasing (the dashboard's counters);
            an append cut back after a failed write or fsync never counts.
        on_visible: None, or a callable given this log each time ``max_offset`` advances;
            the owner (the broker's long-polling ``get``) sets and clears it.
        health: the corrupt ranges known in its files (``meta.store.corruption``): ``slice``
            ends before one, or answers ``"corrupt"`` inside one; scrub and recovery counts.
    """

    def __init__(
        self,
        topic: str,
        partition: int,
        directory: str,
        segments: list[Segment],
        *,
        files: Files,
        flusher: Flusher,
        clock: Any,
        segment_bytes_max: int,
        policy: FlushPolicy,
        new_directories: tuple[str, ...] = (),
    ) -> None:
        assert segments
        self.topic = topic
        self.partition = partition
        self.directory = directory
        self.name = f"{topic}-{partition}"
        self.failed: PartitionFailedError | None = None
        self.appended_messages = 0
        self.appended_bytes = 0
        # Called with this log after acknowledgements moved ``max_offset`` (long polling).
        self.on_visible: Callable[[PartitionLog], None] | None = None
        self.health = PartitionHealth.from_segments(self.name, segments)
        self._files = files
        self._flusher = flusher
        self._clock = clock
        self.segment_bytes_max = segment_bytes_max
        self._policy = policy
        # Group commit syncs every append (should_flush says so); skip the call per record.
        self._always_sync = policy.mode is FlushMode.GROUP_COMMIT
        self._segments = segments
        self._starts = [segment.start for segment in segments]
        self._segment = segments[-1]
        # The segment written allocates its blocks ahead of the writes, up to the roll size.
        self._segment.preallocate_position_max = segment_bytes_max
        end = self._segment.end
        self._written_end = end
        self._visible_end = end
        # Loaded bytes not known to be fsynced (segment.SEGMENTS_UNSYNCED_AT_LOAD) are dirty.
        self._dirty_segments = [s for s in segments if s.flushed_size < s.written_size]
        self._durable_end = durable_end(segments)
        self._pending_directories = list(new_directories)
        # Each entry: (end offset, offset, must be durable, ack, appends it counts for), in
        # append order; ack is called as ack(offset, None) when released or ack(None, error)
        # when failed.
        self._pending: deque[tuple[int, int, bool, Ack, int]] = deque()
        # Records (and reservations) staged since the last commit, written by ``commit``.
        self._staged: list[Records | Reservation] = []
        self._staged_counts: list[int] = []  # appends each staged entry counts for
        self._reservations = 0  # reservations in ``_staged``
        self._staged_end = end
        # Threshold mode: ends of the entries to make durable that no flush request covers yet.
        self._sync_ends: deque[int] = deque()
        # Called with this log when its first record is staged (the manager batches commits).
        self.on_staged: Callable[[PartitionLog], None] | None = None
        self._unflushed_count = 0
        self._flush_requested_s = clock.seconds()
        self._refusal: str | None = None
        self._discarded: list[Segment] = []  # cut off while a flush may use them; closed last
        self.truncation: PartitionTruncation | None = None  # records a failed cut (the store's)

    @classmethod
    def open(
        cls,
        topic: str,
        partition: int,
        directory: str,
        *,
        files: Files,
        flusher: Flusher,
        clock: Any,
        segment_bytes_max: int,
        policy: FlushPolicy,
        new_directories: tuple[str, ...] = (),
        recovery_point: int | None = None,
    ) -> PartitionLog:
        """Load (and recover, from ``recovery_point`` when known) the partition in ``directory``;
        create its first segment if none. ``clock`` provides ``seconds()``; ``segment_bytes_max``
        is the roll size; ``new_directories`` are fsynced before the first durable ack.

        Raises:
            StoreError: see ``log_recovery.open_segments``.
        """
        segments, created = open_segments(files, directory, recovery_point)
        directories = (*new_directories, directory) if created else new_directories
        return cls(
            topic,
            partition,
            directory,
            segments,
            files=files,
            flusher=flusher,
            clock=clock,
            segment_bytes_max=segment_bytes_max,
            policy=policy,
            new_directories=directories,
        )

    # -- appending -------------------------------------------------------------------------

    def append(self, record: Records) -> Deferred:
        """Append one record (or one transaction batch) and return a Deferred for its offset.

        ``stage`` then ``commit``; the Deferred fires with the record's offset when ``stage``
        would ack it, or fails with ``PartitionFailedError`` / ``StoreError`` (closed).
        """
        acknowledged: Deferred = Deferred()
        self.stage(record, partial(fire, acknowledged))
        self.commit()
        return acknowledged

    def stage(self, record: Records, ack: Ack, count: int = 1) -> None:
        """Queue one record for the next ``commit`` (one write per batch) and give it its offset.

        ``ack(offset, None)`` comes, in append order, once ``commit`` wrote it (and its covering
        fsync ran when the policy requires one); ``ack(None, error)`` when the partition fails
        or refuses appends. A staged record is never visible to readers before its ack.
        ``count`` > 1 (put runs): ``record`` is that many records, acked once (first offset) when
        all may be, as if staged one by one; end it at ``room_bytes`` to keep rolls in place.
        """
        if self._refusal is not None:
            ack(None, self._refusal_error())
            return
        size = len(record)
        assert size >= HEADER_SIZE * count
        self._enqueue(record, size, ack, count)

    @property
    def message_count(self) -> int:
        return sum(segment.message_count for segment in self._segments)

    @property
    def room_bytes(self) -> int:
        """Bytes that can be staged before the segment is full (<= 0: the next record fills it)."""
        return self.segment_bytes_max - (self._staged_end - self._segment.start)

    def reserve(self, length: int, ack: Ack) -> Reservation | None:
        """Reserve the next ``length`` bytes of the log for a batch given later by ``fill``.

        A transaction commit uses this: its journal record names the batch's offset before
        the batch is written. Records staged after the reservation keep their offsets but are
        written, and acknowledged, only after the reservation is filled (or fail with the
        partition when it is cancelled). Returns None when the partition refuses appends
        (``ack`` was then called with the error).
        """
        if self._refusal is not None:
            ack(None, self._refusal_error())
            return None
        assert length >= HEADER_SIZE
        reservation = Reservation(self._staged_end, length)
        self._reservations += 1
        self._enqueue(reservation, length, ack)
        return reservation

    def fill(self, reservation: Reservation, batch: bytes) -> None:
        """Give a reservation its bytes; what is staged up to the next gap is written by the
        owner's next ``commit_staged`` (``on_staged``), or at once when there is no owner."""
        assert len(batch) == reservation.length
        assert reservation.data is None
        reservation.data = batch
        if self.on_staged is not None:
            self.on_staged(self)
        else:
            self.commit()

    def cancel(self, reservation: Reservation, error: BaseException) -> None:
        """The reserved batch will never come: fail the partition (its offsets are taken)."""
        if reservation.data is None:
            self._fail(error)

    def _enqueue(self, entry: Records | Reservation, size: int, ack: Ack, count: int = 1) -> None:
        offset = self._staged_end
        end = offset + size
        self._staged_end = end
        staged = self._staged
        staged.append(entry)
        self._staged_counts.append(count)
        self._unflushed_count += count
        policy = self._policy
        must_sync = self._always_sync or should_flush(
            policy.mode,
            self._unflushed_count,
            (self._clock.seconds() - self._flush_requested_s) * 1000,
            policy.threshold,
            policy.interval_ms,
        )
        if must_sync and not self._always_sync:
            self._sync_ends.append(end)
            self._unflushed_count = 0
        self._pending.append((end, offset, must_sync, ack, count))
        if end - self._segment.start >= self.segment_bytes_max:
            self.commit()  # the segment is full: write now, then roll
        elif len(staged) == 1 and self.on_staged is not None:
            self.on_staged(self)

    def commit(self) -> None:
        """Write every staged record with one write, roll if full, then ack or request a flush."""
        staged = self._staged
        if not staged:
            return
        if self._segment.written_size >= self.segment_bytes_max and not self._roll():
            return  # no descriptor for the next segment: what was staged got 500
        data, filled, written = take_written(staged, self._staged_counts, self._reservations)
        self._reservations -= filled
        if not data:
            return
        segment = self._segment
        try:
            segment.append(data)
        except StoreError as error:
            self._fail(error)
            return
        segment.message_count += written
        self._written_end = segment.end
        assert staged or self._written_end == self._staged_end
        dirty = self._dirty_segments
        if not dirty or dirty[-1] is not segment:
            dirty.append(segment)
        if segment.written_size >= self.segment_bytes_max and self.failed is None:
            self._roll()
        sync_ends = self._sync_ends
        if self._always_sync or (sync_ends and sync_ends[0] <= self._written_end):
            # Threshold mode flushes once an entry that must be durable is written; one still
            # staged (behind a reservation) asks when a later commit writes it.
            while sync_ends and sync_ends[0] <= self._written_end:
                sync_ends.popleft()
            self._flush_requested_s = self._clock.seconds()
            self._flusher.request(cast(FlushClient, self))  # its tasks: PartitionFlushTask
        self._release()

    def _refusal_error(self) -> StoreError:
        if self.failed is not None:
            return PartitionFailedError(str(self.failed))
        return StoreError(f"partition {self.name} is {self._refusal}")

    def _roll(self) -> bool:
        """Start a new last segment at the written end; its directory entry needs an fsync.

        Returns whether it did. Without a free descriptor the staged appends get 500 and the
        next commit tries again; any other failure fails the partition.
        """
        start = self._segment.end
        path = os.path.join(self.directory, segment_name(start))
        # First, so that a crash before the new segment exists leaves no block past the end of
        # this one (a crash can leave some only past the end of the last segment).
        self._segment.release_preallocation()
        try:
            segment = Segment.open(self._files, path, start, create=True)
        except StoreError as error:
            if not is_descriptor_shortage(error):
                self._fail(error)
                return False
            logger.warning("partition %s cannot roll yet: %s", self.name, str(error))
            self._refuse_after(self._written_end, DescriptorShortageError(str(error)))
            return False
        if segment.written_size != 0:
            segment.close()
            self._fail(StoreError(f"new segment {path} already holds {segment.written_size} bytes"))
            return False
        segment.preallocate_position_max = self.segment_bytes_max
        self._segments.append(segment)
        self._starts.append(start)
        self._segment = segment
        self._pending_directories.append(self.directory)
        logger.info("partition %s rolled to segment %s", self.name, path)
        return True

    def _release(self) -> None:
        """Acknowledge, in append order, every pending append that may be acknowledged now.

        Then, when the visible end moved, call ``on_visible`` (long-polling gets wake here).
        """
        pending = self._pending
        visible_end = self._visible_end
        released = 0
        while pending:
            end, offset, must_sync, waiter, count = pending[0]
            # Nothing behind an unfilled reservation is written yet.
            if end > self._written_end or (must_sync and end > self._durable_end):
                break
            pending.popleft()
            self._visible_end = end
            released += count
            waiter(offset, None)
        if self._visible_end != visible_end:
            # Counted when acknowledged, so an append cut back by a failure never counts.
            self.appended_messages += released
            self.appended_bytes += self._visible_end - visible_end
            if self.on_visible is not None:
                self.on_visible(self)

    def _fail(self, error: BaseException) -> None:
        """Cut back to the acknowledged end, then stop the partition for good and fail every
        waiting append (compatibility.md)."""
        if self.failed is not None:
            return
        self._refusal = "failed"
        if self.truncation is not None:  # first, so the disk's refusal of the cut is covered
            self.truncation.record(self._visible_end, max(self._written_end, self._segment.end))
        cut = self._cut_back(discard_now=False)
        self.failed = PartitionFailedError(f"partition {self.name} failed: {error}")
        logger.error("%s; %s; it refuses appends until restart", self.failed, cut)
        self._refuse_after(self._visible_end, self.failed)

    def _cut_back(self, *, discard_now: bool) -> str:
        """Truncate the files to the visible end (``tail_cut``); return what happened, for the
        log. ``discard_now``: close unlinked segments at once (no flush of them runs)."""
        end = self._visible_end
        # A failed append that could not cut itself counts its bytes in the segment only.
        written_end = max(self._written_end, self._segment.end)
        if written_end == end:
            return f"nothing after the acknowledged end {end} was written"
        segments = self._segments
        try:
            keep = cut_back(self._files, segments, end, self.directory)
        except OSError as error:
            self._written_end = written_end  # what the files may hold
            return uncut_text(self.truncation, self.directory, end, written_end, error)
        cut = written_end - end
        removed = segments[keep:]
        # The appends written after the end are exactly the pending ones already written;
        # those in removed segments leave with them, the rest leave the last kept segment.
        cut_messages = sum(entry[4] for entry in self._pending if entry[0] <= self._written_end)
        segments[keep - 1].message_count -= cut_messages - sum(s.message_count for s in removed)
        del segments[keep:]
        del self._starts[keep:]
        self._segment = segments[-1]
        self._written_end = end
        self._durable_end = min(self._durable_end, end)
        self._dirty_segments = [s for s in self._dirty_segments if s not in removed]
        if discard_now:
            for segment in removed:
                segment.close()
        else:
            self._discarded.extend(removed)
        return f"cut {cut} unacknowledged bytes: the log ends at {end} again"

    def _refuse_after(self, offset: int, error: BaseException) -> None:
        """Fail (in append order) every waiting append at ``offset`` or later and drop what
        is staged; the next staged record gets ``offset`` again."""
        pending = self._pending
        refused = []
        while pending and pending[-1][1] >= offset:
            refused.append(pending.pop())
        self._staged.clear()
        self._staged_counts.clear()
        self._reservations = 0
        self._staged_end = offset
        self._sync_ends = deque(end for end in self._sync_ends if end <= offset)
        for _end, _offset, _must_sync, ack, _count in reversed(refused):
            ack(None, error.__class__(str(error)))

    # -- flushing (FlushClient) ------------------------------------------------------------

    @property
    def is_dirty(self) -> bool:
        """Whether written bytes or new directory entries are not yet known to be on disk."""
        return self._written_end > self._durable_end or bool(self._pending_directories)

    def request_flush(self) -> None:
        """Ask the flusher to make everything written so far durable (the interval timer)."""
        self._unflushed_count = 0
        self._flush_requested_s = self._clock.seconds()
        self._flusher.request(cast(FlushClient, self))

    def flush_snapshot(self) -> PartitionFlushTask | None:
        """Reactor thread: what a flush started now must cover; None when nothing is dirty."""
        if self.failed is not None or not self.is_dirty:
            return None
        directories, self._pending_directories = self._pending_directories, []
        segments = tuple(self._dirty_segments)
        return PartitionFlushTask(self._files, segments, directories, self._written_end)

    def flush_done(self, task: PartitionFlushTask) -> None:
        """Reactor thread: ``task`` is on disk; advance the durable end and release acks."""
        if self.failed is not None:
            return
        for segment, size in zip(task.segments, task.sizes, strict=True):
            segment.mark_flushed(size)
        self._dirty_segments = [s for s in self._dirty_segments if s.flushed_size < s.written_size]
        if task.end_offset > self._durable_end:
            self._durable_end = task.end_offset
        self._release()

    def flush_failed(self, task: PartitionFlushTask, error: BaseException) -> None:
        """Reactor thread: the fsync failed; fail the partition (compatibility.md). Without a free
        descriptor to open the directory, cut back and fail only what waits (transient)."""
        if self.failed is not None:
            return
        if not is_descriptor_shortage(error):
            self._fail(StoreError(f"fsync failed: {error}"))
            return
        self._pending_directories[:0] = task.directories
        cut = self._cut_back(discard_now=True)
        if self._written_end != self._visible_end:  # the cut failed: nothing can be trusted
            self._fail(StoreError(f"fsync failed: {error}; {cut}"))
            return
        logger.warning("partition %s: fsync failed: %s; %s", self.name, str(error), cut)
        self._refuse_after(self._visible_end, DescriptorShortageError(f"fsync failed: {error}"))

    # -- reading ---------------------------------------------------------------------------

    @property
    def policy(self) -> FlushPolicy:
        """The flush settings this partition was opened with."""
        return self._policy

    @property
    def accepts_appends(self) -> bool:
        """Whether ``stage`` and ``reserve`` would take a record now."""
        return self._refusal is None

    @property
    def next_offset(self) -> int:
        """The offset the next staged record or reservation gets."""
        return self._staged_end

    @property
    def min_offset(self) -> int:
        """Start of the first segment."""
        return self._starts[0]

    @property
    def max_offset(self) -> int:
        """The visible end: end of the last acknowledged record (compatibility.md)."""
        return self._visible_end

    @property
    def written_end(self) -> int:
        """Offset just past the last written byte (acknowledged or not)."""
        return self._written_end

    @property
    def durable_end(self) -> int:
        """Offset up to which every byte is known to be on disk."""
        return self._durable_end

    @property
    def byte_count(self) -> int:
        """Sum of the written sizes of the current segments."""
        return self._written_end - self._starts[0]

    @property
    def segments(self) -> tuple[Segment, ...]:
        """The open segments, sorted by start."""
        return tuple(self._segments)

    def slice(self, offset: int, limit: int) -> SliceResult:
        """Locate the bytes a ``get`` at ``offset`` returns, at most ``limit`` of them.

        Args:
            offset: where the consumer wants to read.
            limit: the most bytes to return (``min(maxTransferSize, maxSize)``), >= 0.
        """
        assert limit >= 0
        if offset < self._starts[0]:
            return SliceResult(BEFORE, self._starts[0])
        visible_end = self._visible_end
        if offset >= visible_end:
            return SliceResult(AFTER, visible_end)
        segment = self._segments[bisect_right(self._starts, offset) - 1]
        position = offset - segment.start
        visible_size = min(segment.written_size, visible_end - segment.start)
        found = SliceResult(DATA, offset, segment, position, min(visible_size - position, limit))
        return self.health.fence(found)  # never into known corrupt data

    def read(self, result: SliceResult) -> bytes:
        """Return the bytes a ``"data"`` slice names (empty for the other kinds)."""
        if result.kind != DATA or result.segment is None:
            return b""
        return result.segment.read(result.position, result.length)

    def nearest_offset(self, offset: int) -> int:
        """The ``offset`` command's answer: clamp, else the containing segment start."""
        if offset < self._starts[0]:
            return self._starts[0]
        if offset >= self._visible_end:
            return self._visible_end
        return self._starts[bisect_right(self._starts, offset) - 1]

    def drop_oldest_segment(self) -> Segment:
        """Retention: take the first segment out of the log (``min_offset`` moves up).

        The caller owns the returned segment and closes it. Never the last segment, and only
        a durable one, so no flush batch still holds its descriptor.
        """
        segment = self._segments[0]
        assert len(self._segments) > 1
        assert segment.flushed_size == segment.written_size
        del self._segments[0]
        del self._starts[0]
        return segment

    # -- closing ---------------------------------------------------------------------------

    def stop_appends(self) -> None:
        """Write what is staged, then refuse every later append; waiting appends still complete."""
        self.commit()
        if self._refusal is None:
            self._refusal = "closed"

    def close(self) -> None:
        """Close the segment files. Call only once the flusher is idle (``StoreManager``).

        Appends still waiting (only possible when the final flush did not run) fail.
        """
        self.stop_appends()
        pending, self._pending = self._pending, deque()
        error = StoreError(f"partition {self.name} closed before the append was acknowledged")
        for _end, _offset, _must_sync, ack, _count in pending:
            ack(None, error)
        self._segment.release_preallocation()
        for segment in (*self._segments, *self._discarded):
            segment.close()

    def __repr__(self) -> str:
        return f"PartitionLog({self.name!r})"
