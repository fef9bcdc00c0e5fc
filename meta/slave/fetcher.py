"""The slave's fetch loop: the client's ``FetchManager``, handing raw batches to the reactor.

``SlaveFetchManager`` keeps everything of ``meta.client.fetch.manager.FetchManager`` (threads, the
delay queue, ``slaveMaxDelayInMills`` as the back-off maximum, long polling, growing the
fetch size for a large record, the connection pool) and replaces what is done with a fetched
batch: instead of decoding messages for a listener, it checks every complete record (length
and CRC, as ``iter_messages`` does), hands the record bytes **verbatim** to the reactor
thread (``callFromThread``) as one write (or two around a segment boundary, below), and
fetches the next batch from the end of this one while the reactor writes it. The check is
two passes (``meta.slave.record_check``): ``frame_records`` reads the length fields (how many
complete records, where the last starts and ends; no list of ends unless a batch reaches
the local roll size or the layout is unknown), then the get for the batch's end is sent
(``_prefetch``; ``send`` gives its future to the next fetch asking exactly that get), then
``check_frame`` checks the CRCs while that reply travels; a bad record still stops the
partition before anything of its batch is handed off (and cancels the get sent ahead).
Where the optional build made its C extension, the walk is one C call and the check
another that releases the GIL, so the socket reader, the reactor's write and the get writer
run meanwhile; the call holds the reply's buffer, which is not reused before it ends.
At most ``APPENDS_IN_FLIGHT_MAX`` batches of a partition are handed off and not yet written
(the fetch thread waits for the oldest, at most ``APPEND_WAIT_S``), so memory stays bounded;
``stop`` waits until every handed-off batch is written and cancels the gets sent ahead. The
reactor appends a batch only if the local end is exactly its offset, so after a refused or
failed append (which stops the partition from the reactor) no later batch can be written
after a gap.

Segment boundaries (byte identity of the files, not only of the offsets). The local store
rolls after a write that fills its last segment to ``maxSegmentSize``, as the master does;
but the master writes a transaction's records (and records staged behind its reservation)
in one write, so its segment can go on past the first record that reaches the size, where
a record-by-record copy would roll. A get never crosses a master segment, and ``offset``
answers the start of the master segment holding an offset. So when a
batch reaches the local roll size (``Layout``), the fetch thread asks the master ``offset``
at the batch's end: if a master segment starts there, the records from the first one that
reaches the size to the end are staged as **one** entry (one write, then the roll, as on
the master); if not, only the records before it are appended and the rest is fetched again
(with a larger size when the reply was cut), at most ``UNCONFIRMED_TRIES_MAX`` times before
the batch is appended anyway with a WARNING (offsets stay identical; file names may not).
That costs one ``offset`` round trip per master segment. Everything else of a fetch (the
records that do not fill the local segment) is staged as one entry too: one write and one
acknowledgement per fetch instead of per record, which is what lets the replay keep up with
a raw client. (Each entry is staged with its record count, so ``stats topics``
message counts and ``unflushThreshold`` count messages as on the master.)

Replay (a backlog on the master): while replies come back full, the fetch size doubles, up
to ``REPLAY_FETCH_BYTES_MAX``, so per-fetch costs (round trip, thread hops, the reactor's
write and acknowledgement) are spread over more records; it halves again, as the client's
does, once replies come back less than half full (caught up). A reply is still at most the
master's ``maxTransferSize`` (1 MiB by default): a master with that default answers 1 MiB
whatever the slave asks. The records handed to the
reactor are a ``memoryview`` of the reply (no copy); the replicator's connections receive a
large reply in place (``Decoder(value_in_place=True)``), so the body the socket read is the
one the store writes.

A 301 for a partition that has **no local data yet** means the master's data starts later
(retention deleted its first segments): the reactor creates the local partition with its
first segment at that offset and fetching goes on from there.

A partition stops (its request leaves the manager; ``halt(key, reason)`` runs on the
reactor, which logs an ERROR) when the master sends a bad record, answers 301 for a
partition that has local data (its data no longer starts at our end), or the append is
refused (local end differs from the fetched offset, the local partition failed, the topic
is not accepted here). Nothing is skipped.

Thread-safety: as ``FetchManager``; ``process_batch`` and ``handle_moved`` run on the fetch
threads (``_layouts`` and ``_prefetched`` entries are only touched by the thread holding the
partition's request, except that stopping a partition from the reactor pops its
``_prefetched`` entry, one atomic ``dict.pop``), ``append``, ``start_at`` and ``halt`` are
called on the reactor thread only. Built on ``FetchManager``'s public hooks only: it
overrides ``process_batch`` (the raw-batch hook), ``handle_moved`` (a 301) and ``send``, and
uses ``grow``, ``backoff``, ``ask_offset``, ``is_current`` and ``drop``.
"""

from __future__ import annotations

import bisect
import concurrent.futures
import itertools
import logging
import struct
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from twisted.internet import defer

from meta.client.fetch.manager import FETCH_BYTES_MAX, FetchManager, FetchRequest, FetchSettings
from meta.errors import ClientError, InvalidRecordError, MetaError
from meta.protocol.commands import Get, Offset
from meta.slave.record_check import Frame, check_frame, frame_ends, frame_records

log = logging.getLogger("meta.slave")

POOL_USER = "meta-slave"
APPEND_WAIT_S = 60.0
"""Longest wait of a fetch thread for the reactor to append and acknowledge its batch."""
APPENDS_IN_FLIGHT_MAX = 2
"""Batches of one partition handed to the reactor and not written yet (memory bound)."""

REPLAY_FETCH_BYTES_MAX = 4 * 1024 * 1024
"""Largest fetch size a partition grows to while the master has a backlog (memory per
partition: ``APPENDS_IN_FLIGHT_MAX`` + 2 replies of at most this size: the appends handed
off, the batch being checked and the reply to the get sent ahead)."""

MSG_ID = struct.Struct(">8xq")
"""The msg_id field of a record header (``meta.protocol.message.HEADER``)."""

SEND_WAIT_S = 0.1
"""Longest wait for the connection's writer thread to take the get sent ahead."""
UNCONFIRMED_TRIES_MAX = 50
"""Fetches of a batch whose master segment end is not confirmed before it is appended anyway."""

Layout = tuple[int, int]
"""``(start of the local last segment, its roll size)`` of one partition."""
Append = Callable[[str, int, int, bytes | memoryview, list[int], list[int]], Any]
"""Reactor side: ``append(topic, partition, base, records, entries, counts)`` ->
Deferred[Layout].

``entries`` are the sizes of the parts of ``records`` staged one by one (each part is one
write at most; a part of several records is written whole, then the store may roll), and
``counts`` how many records each part holds (the store's message counts)."""
StartAt = Callable[[str, int, int], Layout | None]
"""Reactor side: ``start_at(topic, partition, offset)``: create the local partition with its
first segment at ``offset`` and return its layout; None when it has local data already."""
Halt = Callable[[tuple[str, str], str], None]
"""Reactor side: ``halt((topic, "B-P"), reason)`` after a partition stopped."""


class ReplicationHalted(MetaError):
    """A partition cannot be copied on; the text says why (logged as an ERROR)."""


def first_reaching(base: int, ends: list[int], layout: Layout) -> int | None:
    """Index of the first record whose end fills the local last segment, or None.

    Args:
        base: offset of the first record.
        ends: record ends relative to ``base`` (``record_ends``).
        layout: ``(segment start, roll size)``; ``base`` is in that segment.
    """
    limit = layout[0] + layout[1] - base
    if not ends or ends[-1] < limit:  # the common case
        return None
    return bisect.bisect_left(ends, limit)


def next_fetch_size(request: FetchRequest, received: int) -> int:
    """The fetch size after a batch of ``received`` bytes was appended: doubled (up to
    ``REPLAY_FETCH_BYTES_MAX``) after a full reply, halved (down to the subscription's
    size) after one less than half full."""
    size = request.max_size
    if received >= size and size < REPLAY_FETCH_BYTES_MAX:
        return min(2 * size, REPLAY_FETCH_BYTES_MAX)  # a backlog
    if received < size // 2 and size > request.initial_max_size:
        return max(request.initial_max_size, size // 2)
    return size


class SlaveFetchManager(FetchManager):
    """Fetches the master's partitions and appends what it gets, verbatim, on the reactor.

    Args:
        pool: a ``ConnectionPool`` (owned by the caller).
        settings: fetch settings (group = ``slaveGroup``).
        reactor: the reactor the appends run on.
        append: see ``Append``.
        halt: see ``Halt``.
        start_at: see ``StartAt``; None: a 301 always stops the partition.
        layouts: ``(topic, "B-P")`` -> the local ``Layout`` of each partition to fetch; a
            partition without one is appended record by record with no boundary check.
    """

    def __init__(
        self,
        pool: Any,
        settings: FetchSettings,
        reactor: Any,
        append: Append,
        halt: Halt,
        start_at: StartAt | None = None,
        layouts: dict[tuple[str, str], Layout] | None = None,
    ) -> None:
        super().__init__(pool, POOL_USER, settings, listeners={})
        self._reactor = reactor
        self._append = append
        self._halt = halt
        self._start_at = start_at
        self._layouts: dict[tuple[str, str], Layout] = dict(layouts or {})
        self._unconfirmed: dict[tuple[str, str], int] = {}
        # Per partition, the appends handed to the reactor and not awaited yet, oldest first,
        # each with the layout the fetch thread expects after it.
        self._in_flight: dict[tuple[str, str], deque[tuple[Future, Layout | None]]] = {}
        # Per partition, the get sent ahead (``_prefetch``): (offset, max size, its future).
        self._prefetched: dict[tuple[str, str], tuple[int, int, Future]] = {}

    def stop(self) -> dict[tuple[str, str], FetchRequest]:
        """Stop the threads, then wait (bounded) until every handed-off batch is written.

        Not on the reactor thread: the appends run there.
        """
        requests = super().stop()
        prefetched, self._prefetched = self._prefetched, {}
        for _offset, _size, get in prefetched.values():
            get.cancel()
        in_flight, self._in_flight = self._in_flight, {}
        for futures in in_flight.values():
            for future, _expected in futures:
                try:
                    future.result(timeout=APPEND_WAIT_S)
                except Exception:  # Reported by _append_failed on the reactor.
                    pass
        return requests

    def process_batch(self, request: FetchRequest, data: bytes) -> None:
        """Append the batch's complete records and move on past them (a fetch thread)."""
        base = request.next_offset
        try:
            frame = frame_records(data, base)
        except InvalidRecordError as error:
            self._stop_partition(request, f"the master sent a bad record: {error}")
            return
        if not frame.count:
            self.backoff(request)
            self.grow(request, data)  # a record larger than the fetch size: ask for it whole
            return
        planned = self._plan(request, data, base, frame)
        if planned is None:
            return  # the master's segment end is not known yet: fetched again
        entries, counts, last_start = planned
        consumed = entries[0] if len(entries) == 1 else sum(entries)
        next_size = next_fetch_size(request, len(data))
        if consumed == frame.end:
            self._prefetch(request, base + consumed, next_size)
        try:
            check_frame(data, frame, base)
        except InvalidRecordError as error:
            self._stop_partition(request, f"the master sent a bad record: {error}")
            return
        expected = self._expected_layout(request.key, base + consumed)
        try:
            records = memoryview(data)[:consumed]
            self._hand_off(request, base, records, entries, counts, expected)
        except ReplicationHalted as error:
            self._stop_partition(request, str(error))
            return
        request.offset = base + consumed
        request.tmp_offset = -1
        request.msg_id = MSG_ID.unpack_from(data, last_start)[0]
        request.retries = 0
        request.delay_ms = 0
        request.max_size = next_size

    def _prefetch(self, request: FetchRequest, offset: int, max_size: int) -> None:
        """Send the get that follows this batch now, before its records are checked and handed
        off, so the reply travels meanwhile; ``send`` hands its future to that next fetch."""
        if not self.is_current(request):
            return
        group, partition = self.settings.group, request.partition.partition
        command = Get(request.topic, group, partition, offset, max_size, 0,
                      self.settings.long_poll_ms or None)  # fmt: skip
        try:
            get = super().send(request, command)
            self._prefetched[request.key] = (offset, max_size, get)
            self.pool.get(request.address).wait_sent(SEND_WAIT_S)  # on the wire before the check
        except ClientError:
            return  # the next fetch sends it itself, and reports the failure

    def send(self, request: FetchRequest, command: Get | Offset) -> Future:
        """The prefetched get's future when ``command`` is exactly that get, else send it."""
        if type(command) is Get:
            prefetched = self._prefetched.pop(request.key, None)
            if prefetched is not None:
                offset, max_size, get = prefetched
                if command.offset == offset and command.max_size == max_size:
                    return get
                get.cancel()
        return super().send(request, command)

    def _plan(
        self, request: FetchRequest, data: bytes, base: int, frame: Frame
    ) -> tuple[list[int], list[int], int] | None:
        """The entries to stage, how many records each covers and where the last record
        staged starts; None: append nothing now.

        See "Segment boundaries" in the module docstring.
        """
        layout = self._layouts.get(request.key)
        if layout is not None and base + frame.end < layout[0] + layout[1]:
            return [frame.end], [frame.count], frame.last_start  # the common case: one write
        ends = frame_ends(data, frame, base)
        planned = self._plan_ends(request, data, base, ends, layout)
        if planned is None:
            return None
        entries, counts = planned
        count = sum(counts)
        return entries, counts, ends[count - 2] if count > 1 else 0

    def _plan_ends(
        self, request: FetchRequest, data: bytes, base: int, ends: list[int], layout: Layout | None
    ) -> tuple[list[int], list[int]] | None:
        """``_plan`` for a batch without a layout or reaching the local roll size."""
        count = len(ends)
        if layout is None:  # unknown layout: record by record, as the master
            return [end - start for start, end in itertools.pairwise([0, *ends])], [1] * count
        reaching = first_reaching(base, ends, layout)
        if reaching is None:
            return [ends[-1]], [count]  # one write that does not fill the segment
        before = ends[reaching - 1] if reaching else 0
        end = base + ends[-1]
        if self.ask_offset(request, end) == end:  # a master segment starts at ``end``
            self._unconfirmed.pop(request.key, None)
            if reaching:
                return [before, ends[-1] - before], [reaching, count - reaching]
            return [ends[-1]], [count]
        if reaching > 0:
            return [before], [reaching]
        tries = self._unconfirmed.get(request.key, 0) + 1
        self._unconfirmed[request.key] = tries
        if tries <= UNCONFIRMED_TRIES_MAX:
            cut = end < base + len(data) or len(data) >= request.max_size
            if cut and request.max_size < FETCH_BYTES_MAX:
                request.max_size = min(2 * request.max_size, FETCH_BYTES_MAX)
                request.delay_ms = 0
            else:
                self.backoff(request)
            return None
        del self._unconfirmed[request.key]
        log.warning(
            "%s/%s: the master's segment holding offset %d does not end where a fetch of %d "
            "bytes ends after %d tries; appending %d bytes as one write: offsets stay "
            "identical, this segment's size may differ from the master's",
            *request.key, base, request.max_size, UNCONFIRMED_TRIES_MAX, end - base,
        )  # fmt: skip
        return [ends[-1]], [count]

    def _expected_layout(self, key: tuple[str, str], end: int) -> Layout | None:
        """The local layout after staging records up to offset ``end`` (the store's roll
        rule: it rolls after a write that fills the segment); None while unknown."""
        layout = self._layouts.get(key)
        if layout is not None and end >= layout[0] + layout[1]:
            layout = (end, layout[1])
            self._layouts[key] = layout
        return layout

    def _hand_off(
        self,
        request: FetchRequest,
        base: int,
        records: bytes | memoryview,
        entries: list[int],
        counts: list[int],
        expected: Layout | None,
    ) -> None:
        """Queue the append on the reactor without waiting for it, unless
        ``APPENDS_IN_FLIGHT_MAX`` of this partition's appends are still unwritten: then wait
        (bounded) for the oldest. So the reactor writes a batch while the next is fetched.

        A refused or failed append stops the partition from the reactor
        (``_append_failed``); a later batch then finds the local end short and is refused
        too, so nothing is written after a gap.

        Raises:
            ReplicationHalted: an earlier append failed, or took too long.
        """
        futures = self._in_flight.setdefault(request.key, deque())
        while len(futures) >= APPENDS_IN_FLIGHT_MAX:
            self._settle(request, *futures.popleft())
        done: Future = Future()
        partition = request.partition.partition
        self._reactor.callFromThread(
            self._append_on_reactor, done, request, request.topic, partition, base, records,
            entries, counts,
        )  # fmt: skip
        futures.append((done, expected))

    def _settle(self, request: FetchRequest, done: Future, expected: Layout | None) -> None:
        """Wait for one handed-off append; adopt the store's layout if it differs.

        Raises:
            ReplicationHalted: the append failed, or was not written within APPEND_WAIT_S.
        """
        try:
            layout = done.result(timeout=APPEND_WAIT_S)
        except concurrent.futures.TimeoutError:
            raise ReplicationHalted(
                f"an append was not written within {APPEND_WAIT_S:g} s"
            ) from None
        except ReplicationHalted:
            raise
        except Exception as error:  # The store's error, e.g. PartitionFailedError.
            raise ReplicationHalted(f"an append failed: {error!r}") from None
        if layout is not None and expected is not None and layout != expected:
            log.warning(
                "%s/%s: local segment layout %s, expected %s; going on with the store's",
                *request.key, layout, expected,
            )  # fmt: skip
            self._layouts[request.key] = layout

    def _append_on_reactor(self, done: Future, request: FetchRequest, *arguments: Any) -> None:
        appended = defer.maybeDeferred(self._append, *arguments)
        appended.addCallbacks(done.set_result, self._append_failed, errbackArgs=(done, request))

    def _append_failed(self, failure: Any, done: Future, request: FetchRequest) -> None:
        """Reactor: a handed-off append was refused or failed: stop its partition."""
        error = failure.value
        done.set_exception(error)
        if isinstance(error, ReplicationHalted):
            reason = str(error)
        else:
            reason = f"an append failed: {error!r}"
        self._stop_partition(request, reason)

    def _start_at_on_reactor(self, done: Future, *arguments: Any) -> None:
        try:
            done.set_result(self._start_at(*arguments))
        except Exception as error:  # The store's error: reported as the halt reason.
            done.set_exception(error)

    def handle_moved(self, request: FetchRequest, offset: int) -> bool:
        """A 301: start a new local partition there, else stop (copying on would leave a gap)."""
        if self._start_at is not None and offset > request.next_offset:
            done: Future = Future()
            self._reactor.callFromThread(
                self._start_at_on_reactor, done, request.topic, request.partition.partition, offset
            )
            try:
                layout = done.result(timeout=APPEND_WAIT_S)
            except Exception as error:
                reason = f"cannot start the local partition at offset {offset}: {error!r}"
                self._stop_partition(request, reason)
                return False
            if layout is not None:
                log.info(
                    "%s/%s: the master's data starts at offset %d: the local partition starts "
                    "there too",
                    *request.key, offset,
                )  # fmt: skip
                self._layouts[request.key] = layout
                request.offset = offset
                request.tmp_offset = -1
                request.retries = 0
                request.delay_ms = 0
                return True
        self._stop_partition(
            request,
            f"the master has no data at offset {request.next_offset} (it answered 301 with "
            f"{offset}: its retention deleted what this slave has not copied yet, or this "
            "slave's data is not a copy of this master's)",
        )
        return False

    def _stop_partition(self, request: FetchRequest, reason: str) -> None:
        """Drop ``request`` (it is not fetched again), its prefetched get, and tell the reactor
        why."""
        self.drop(request)
        prefetched = self._prefetched.pop(request.key, None)
        if prefetched is not None:
            prefetched[2].cancel()
        self._reactor.callFromThread(self._halt, request.key, reason)
