"""The consumer's fetch loop: one request per owned partition, run by threads.

``FetchManager`` holds one ``FetchRequest`` per owned partition in a delay queue ordered by
due time (ties keep insertion order). ``fetch_threads`` threads take due requests, send
``get T G P offset maxSize opaque [maxWaitMs]`` (long polling, docs/compatibility.md) to the
partition's broker, give every complete message to the topic's listener in order, and put
the request back only after its batch, so each partition is processed strictly in order.

Listeners receive a ``ReceivedMessage`` (a ``Message``). Its ``partition_control`` is the
``PartitionControl`` the fetch request owns (Java's ``message.getPartition()``): in manual
mode (``set_auto_ack(False)``) the stored offset moves only on ``ack()``; ``rollback()``
re-delivers everything since the last ack; ``set_rollback_only()`` on the message fails it.

Invariants:

* A request's ``offset`` (the stored offset, the one committed) is the byte offset of the
  next unacknowledged message; ``tmp_offset`` (manual mode, -1 when unset) is where the
  next fetch reads. Offsets move only by the bytes of messages the listener accepted (and
  acknowledged), by a rejected head message, by a 301 answer (per ``offset_reset``) or by
  the ``offset`` answer after a bad checksum (the segment start, which can re-deliver).
* A listener raising ``StopBatch`` ends the batch before its message without a failure.
* A listener failure stops the batch; ``retries`` counts how often the head message failed
  in a row. Once it exceeds ``max_fetch_retries`` that message goes to the reject handler
  instead of the listener and the offset moves past it: listener calls for one
  message are at most ``max_fetch_retries + 1``.
* After ``stop()`` returns no fetch thread runs and no listener call is in progress;
  ``stop()`` cancels gets still waiting for a reply (a long poll), so it does not wait
  for them.
* A get is long-polled for ``long_poll_ms`` only while another fetch thread is free or no
  other partition waits; else the broker holds it at most until the next partition is due,
  so a partition without new messages never holds up another one sharing its thread.
* While ``paused`` (ZooKeeper connection suspended) no new get is sent, across
  ``stop()``/``start()`` too; only ``resume()`` clears the pause.

Thread-safety: public ``FetchManager`` methods are thread-safe. Listeners and the reject
handler run on the fetch threads. A ``PartitionControl`` belongs to the thread holding its
request: call it only from inside the listener call.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import CancelledError, Future
from typing import TYPE_CHECKING, Any

from meta.client.fetch.received import (
    Delivery,
    PartitionControl,
    ReceivedMessage,
    deliver_batch,
)
from meta.client.fetch.request import FetchRequest, FetchSettings
from meta.client.message import Message
from meta.errors import ClientError, InvalidRecordError
from meta.protocol.commands import LONG_MAX, Data, Get, Offset, Result
from meta.protocol.message import HEADER_SIZE, iter_messages

if TYPE_CHECKING:
    from meta.client.factory import ConnectionPool

log = logging.getLogger("meta.client")

__all__ = ["FetchManager", "FetchRequest", "FetchSettings", "PartitionControl", "ReceivedMessage"]

FETCH_BYTES_MAX = 64 * 1024 * 1024
"""The largest fetch size a request grows to (a client connection's reply limit)."""

CUT_POLL_DELAY_MS = 10
"""The first pause after an empty get that was not long-polled to leave the thread to others."""


class FetchCancelled(ClientError):
    """``stop()`` cancelled a get or offset request that was waiting for its reply."""


Listener = Callable[[Message], Any]
RejectHandler = Callable[[Message], Any]


class FetchManager:
    """Runs the fetch requests of one consumer on ``settings.fetch_threads`` threads.

    Subclasses may override the public hooks ``process_batch`` (what a fetched batch does),
    ``handle_moved`` (a 301) and ``send``, and use ``grow``, ``backoff``, ``ask_offset``,
    ``is_current`` and ``drop``; everything private may change.

    Args:
        pool: the factory's connection pool.
        pool_user: the name this consumer references brokers under in ``pool``.
        settings: the fetch settings.
        listeners: topic -> listener.
        reject: gets each message that failed more than ``max_fetch_retries`` times;
            None drops it with an ERROR log.
    """

    def __init__(
        self,
        pool: ConnectionPool,
        pool_user: str,
        settings: FetchSettings,
        listeners: Mapping[str, Any],
        reject: RejectHandler | None = None,
    ) -> None:
        self._pool = pool
        self._user = pool_user
        self._settings = settings
        self._listeners = dict(listeners)
        self._reject = reject
        self._cond = threading.Condition()
        self._queue: list[tuple[float, int, FetchRequest]] = []
        self._requests: dict[tuple[str, str], FetchRequest] = {}
        self._sequence = itertools.count()
        self._threads: list[threading.Thread] = []
        self._running = False
        self._paused = False
        self._busy = 0  # fetch threads holding a request (see _long_poll_wait_ms)
        self._gets_in_flight: set[Future] = set()  # gets being waited for (stop cancels them)

    def start(self, requests: list[FetchRequest]) -> None:
        """Start fetching ``requests`` (the manager must be stopped)."""
        addresses = {r.address.uri: r.address for r in requests if r.address is not None}
        self._pool.set_brokers(self._user, addresses.values())
        with self._cond:
            assert not self._running, "start() on a running FetchManager"
            self._running = True
            self._requests = {request.key: request for request in requests}
            self._queue = []
            for request in requests:
                self._push(request, 0)
            self._threads = [
                threading.Thread(target=self._run, name=f"meta-fetch-{n}", daemon=True)
                for n in range(self._settings.fetch_threads)
            ]
        for thread in self._threads:
            thread.start()

    def add(self, requests: list[FetchRequest]) -> None:
        """Fetch ``requests`` too, at once, without disturbing the running ones.

        For partitions taken after the others (their owner node was freed late). On a
        stopped manager this does nothing: the next ``start`` gets every request anew.
        """
        with self._cond:
            if not self._running:
                return
            known = [r.address for r in self._requests.values() if r.address is not None]
        added = [r.address for r in requests if r.address is not None]
        addresses = {address.uri: address for address in (*known, *added)}
        self._pool.set_brokers(self._user, addresses.values())
        with self._cond:
            if not self._running:
                return
            for request in requests:
                self._requests[request.key] = request
                self._push(request, 0)

    @property
    def settings(self) -> FetchSettings:
        """The fetch settings this manager was created with."""
        return self._settings

    @property
    def pool(self) -> ConnectionPool:
        """The connection pool the gets go through."""
        return self._pool

    def is_current(self, request: FetchRequest) -> bool:
        """Whether ``request`` is still fetched: running, not paused, not stopped or replaced.

        A snapshot for a fetch thread deciding whether to send more for ``request``.
        """
        return self._running and not self._paused and self._requests.get(request.key) is request

    def drop(self, request: FetchRequest) -> None:
        """Stop fetching ``request`` for good (until the next ``start``); thread-safe."""
        with self._cond:
            if self._requests.get(request.key) is request:
                del self._requests[request.key]

    @property
    def paused(self) -> bool:
        """True between ``pause()`` and ``resume()``."""
        return self._paused

    def pause(self) -> None:
        """Stop taking requests (a batch in progress finishes); never blocks.

        Safe from any thread, kazoo's included: it only sets a flag under the condition.
        """
        with self._cond:
            self._paused = True

    def resume(self) -> None:
        """Take requests again after ``pause()``; due requests are fetched at once."""
        with self._cond:
            self._paused = False
            self._cond.notify_all()

    def stop(self) -> dict[tuple[str, str], FetchRequest]:
        """Stop the threads (waiting for batches in progress) and return the requests by key."""
        with self._cond:
            self._running = False
            self._cond.notify_all()
            threads, self._threads = self._threads, []
            in_flight = list(self._gets_in_flight)
        for future in in_flight:  # A long-polled get must not hold up a rebalance.
            future.cancel()
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join()
        with self._cond:
            return dict(self._requests)

    def requests(self) -> dict[tuple[str, str], FetchRequest]:
        """The current requests by ``(topic, B-P)`` (read their ``offset`` only)."""
        with self._cond:
            return dict(self._requests)

    def take_modified(self) -> list[tuple[str, str, int, int]]:
        """Return ``(topic, B-P, msg_id, offset)`` of every modified request and clear the flags."""
        with self._cond:
            modified = [r for r in self._requests.values() if r.modified]
            for request in modified:
                request.modified = False
            return [(*r.key, r.msg_id, r.offset) for r in modified]

    def mark_modified(self, keys: list[tuple[str, str]]) -> None:
        """Flag ``keys`` modified again (their commit failed)."""
        with self._cond:
            for key in keys:
                if key in self._requests:
                    self._requests[key].modified = True

    def _push(self, request: FetchRequest, delay_ms: int) -> None:
        due = time.monotonic() + delay_ms / 1000
        heapq.heappush(self._queue, (due, next(self._sequence), request))
        self._cond.notify()

    def _take(self) -> FetchRequest | None:
        """Wait for the next due request; None once stopped."""
        with self._cond:
            while self._running:
                if self._paused:
                    self._cond.wait()
                    continue
                now = time.monotonic()
                if self._queue and self._queue[0][0] <= now:
                    self._busy += 1
                    return heapq.heappop(self._queue)[2]
                timeout = self._queue[0][0] - now if self._queue else None
                self._cond.wait(timeout)
            return None

    def _run(self) -> None:
        while (request := self._take()) is not None:
            try:
                requeue = self._fetch_once(request)
            except Exception:  # A bug must not kill the thread and silently stop a partition.
                log.exception("fetch of %s/%s failed", request.topic, request.partition)
                requeue = True
                request.delay_ms = self._settings.max_delay_fetch_ms
            with self._cond:
                self._busy -= 1
                if requeue and self._requests.get(request.key) is request:
                    self._push(request, request.delay_ms)

    def _fetch_once(self, request: FetchRequest) -> bool:
        """Fetch and process one batch; return whether to re-queue the request."""
        if request.address is None:
            self.backoff(request)  # No master or slave serves this broker id right now.
            return True
        started = time.monotonic()
        command = self._get_command(request)
        try:
            reply = self._request(request, command)
        except FetchCancelled:
            return True  # stop(): the request keeps its state for the next start().
        except ClientError as error:
            log.warning("get %s/%s from %s failed: %s", *request.key, request.address.uri, error)
            self.backoff(request)
            return True
        if self._paused:
            return True  # Suspended while the get was out: drop the reply, keep the offset.
        if isinstance(reply, Data):
            self.process_batch(request, reply.data)
            return True
        if reply.code == 301:
            return self.handle_moved(request, int(reply.body))
        if reply.code not in (403, 404):
            log.warning("get %s/%s: %d %r", *request.key, reply.code, reply.body[:200])
        waited_ms = (time.monotonic() - started) * 1000
        long_poll_ms, wait_ms = self._settings.long_poll_ms, command.max_wait_ms or 0
        if long_poll_ms and waited_ms >= long_poll_ms / 2:
            request.delay_ms = 0  # The broker held the get: long polling paces this partition.
        elif wait_ms < long_poll_ms:  # Cut short for the others: soon again, slower while idle.
            request.delay_ms = min(max(2 * request.delay_ms, CUT_POLL_DELAY_MS), long_poll_ms)
        else:
            self.backoff(request)
        return True

    def _long_poll_wait_ms(self) -> int:
        """How long the broker may hold the get this thread sends now: ``long_poll_ms`` while
        another fetch thread is free to serve the other partitions, else only until the next
        of them is due, so a partition without new messages never holds up one with some."""
        long_poll_ms = self._settings.long_poll_ms
        with self._cond:
            if self._busy < self._settings.fetch_threads or not self._queue:
                return long_poll_ms
            due_in_ms = (self._queue[0][0] - time.monotonic()) * 1000
        return max(0, min(long_poll_ms, int(due_in_ms)))

    def _get_command(self, request: FetchRequest) -> Get:
        long_poll = self._long_poll_wait_ms() or None
        return Get(
            request.topic,
            self._settings.group,
            request.partition.partition,
            request.next_offset,
            request.max_size,
            0,
            long_poll,
        )

    def _request(self, request: FetchRequest, command: Get | Offset) -> Result | Data:
        """Send ``command`` and wait for the reply.

        Raises:
            ClientError: no reply in time, the connection failed, or ``stop()`` cancelled
                the request (``FetchCancelled``).
        """
        return self._await_reply(request, self.send(request, command))

    def send(self, request: FetchRequest, command: Get | Offset) -> Future:
        """Send ``command`` to the request's broker; the future of its reply (a hook: every
        get and offset request of the loop goes through it).

        Raises:
            ClientError: the broker cannot be reached or the connection is closed.
        """
        connection = self._pool.get(request.address)
        timeout_s = self._settings.fetch_timeout_s + self._settings.long_poll_ms / 1000
        return connection.request(command, timeout_s)

    def _await_reply(self, request: FetchRequest, future: Future) -> Result | Data:
        """Wait for ``future`` (a sent request's); ``stop()`` cancels it (``FetchCancelled``)."""
        with self._cond:
            if not self._running:
                future.cancel()
            self._gets_in_flight.add(future)
        try:
            return future.result()
        except CancelledError:
            raise FetchCancelled(f"get of {request.topic}/{request.partition} cancelled") from None
        finally:
            with self._cond:
                self._gets_in_flight.discard(future)

    def backoff(self, request: FetchRequest) -> None:
        """Empty fetch or error: the delay grows by a tenth of the maximum."""
        maximum = self._settings.max_delay_fetch_ms
        request.delay_ms = min(request.delay_ms + maximum // 10, maximum)

    def handle_moved(self, request: FetchRequest, offset: int) -> bool:
        """The 301 hook: move per the reset policy (compatibility.md); False stops the partition.

        ``follow-broker`` adopts ``offset``; ``earliest`` asks the broker for the first offset
        (an ``offset`` command at 0), ``latest`` for the end (at ``Long.MAX_VALUE``);
        ``error`` logs and stops. The 301 answering a start at ``Long.MAX_VALUE``
        (``consume_from_max_offset``) is always adopted.
        """
        policy = self._settings.offset_reset
        if request.offset != LONG_MAX and policy == "error":
            log.error(
                "offset %d of %s/%s is out of range (broker suggests %d); offset_reset=error "
                "stops this partition until the next rebalance",
                request.offset,
                *request.key,
                offset,
            )
            return False
        if request.offset != LONG_MAX and policy in ("earliest", "latest"):
            asked = self.ask_offset(request, 0 if policy == "earliest" else LONG_MAX)
            if asked is None:
                self.backoff(request)
                return True  # The next fetch gets the 301 again and retries.
            offset = asked
        log.info("offset of %s/%s moves from %d to %d", *request.key, request.offset, offset)
        request.offset = offset
        request.tmp_offset = -1
        request.modified = True
        request.retries = 0
        request.delay_ms = 0
        return True

    def ask_offset(self, request: FetchRequest, offset: int) -> int | None:
        """The broker's ``offset`` answer for ``offset`` (None, logged, if it failed)."""
        command = Offset(request.topic, self._settings.group, request.partition.partition,
                         offset, 0)  # fmt: skip
        try:
            reply = self._request(request, command)
        except ClientError as failure:
            log.warning("offset request for %s/%s failed: %s", *request.key, failure)
            return None
        if isinstance(reply, Result) and reply.code == 200:
            return int(reply.body)
        log.warning("offset request for %s/%s answered %s", *request.key, reply)
        return None

    def process_batch(self, request: FetchRequest, data: bytes) -> None:
        """The raw-batch hook: what is done with the bytes of one ``Data`` reply (fetch thread).

        Here: reject a head that failed too often, else give the batch to the listener, and
        move the request's offsets, size and delay. A subclass that does something else with
        the raw bytes (the slave appends them verbatim) overrides this.

        Args:
            request: the partition's request, held by the calling fetch thread.
            data: the reply's message set; its first byte is at ``request.next_offset``.
        """
        base = request.next_offset
        if request.retries > self._settings.max_fetch_retries and self._reject_head(request, data):
            return
        listener = self._listeners[request.topic]
        executor = getattr(listener, "executor", None)
        arguments = (listener, data, base, request.topic, request.partition, request.control)
        if executor is None:
            batch = deliver_batch(*arguments)
        else:  # the listener's executor runs the batch; this thread waits (partition order)
            batch = executor.submit(deliver_batch, *arguments).result()
        self._finish(request, base, batch)
        if batch.invalid is not None:
            self._jump_to_segment_start(request, batch.invalid)
        elif not (batch.consumed or batch.failed or batch.stopped or request.control.rolled_back):
            self.grow(request, data)
        elif len(data) < request.max_size // 2 and request.max_size > request.initial_max_size:
            # Shrink back toward the subscription's size.
            request.max_size = max(request.initial_max_size, request.max_size // 2)

    def grow(self, request: FetchRequest, data: bytes) -> None:
        """Bytes came back without one whole message: fetch enough for the head message.

        Java doubles the size after ``maxIncreaseFetchDataRetries`` tries; the head record's
        length says exactly how much is needed, so the next fetch asks for that at once.
        """
        if len(data) < HEADER_SIZE:
            return
        needed = HEADER_SIZE + int.from_bytes(data[:4], "big", signed=True)
        if needed <= request.max_size:
            return
        size = min(max(needed, 2 * request.max_size), FETCH_BYTES_MAX)
        if size <= request.max_size:
            log.error(
                "%s/%s: the message at offset %d has %d bytes, more than a fetch may get",
                *request.key, request.next_offset, needed,
            )  # fmt: skip
            return
        log.info(
            "%s/%s: fetch size %d -> %d for a message of %d bytes at offset %d",
            *request.key, request.max_size, size, needed, request.next_offset,
        )  # fmt: skip
        request.max_size = size
        request.delay_ms = 0

    def _finish(self, request: FetchRequest, base: int, batch: Delivery) -> None:
        """Move the offsets, the retry count and the delay after a batch."""
        control = request.control
        if batch.failed:
            request.retries = request.retries + 1 if batch.consumed == 0 else 1
        elif batch.consumed:
            request.retries = 0
        rolled_back = control.rolled_back
        if rolled_back:
            request.tmp_offset = -1  # The next fetch re-reads from the last acked offset.
        elif batch.consumed:
            self._advance(request, base + batch.consumed, batch.last_id)
        control.reset()
        if (batch.consumed or batch.stopped) and not rolled_back:
            # Progress, or a listener that stopped the batch to take the rest later (it
            # waited for its taker already): fetch again at once.
            request.delay_ms = 0
        else:
            self.backoff(request)

    def _advance(self, request: FetchRequest, offset: int, last_id: int | None) -> None:
        """Commit ``offset`` (auto mode or acked) or only read on from it (manual mode)."""
        control = request.control
        if control.auto_ack or control.acked:
            request.offset = offset
            request.tmp_offset = -1
            request.msg_id = last_id
            request.modified = True
        else:
            request.tmp_offset = offset

    def _reject_head(self, request: FetchRequest, data: bytes) -> bool:
        """Hand the head message to the reject handler and skip it.

        Returns:
            False if ``data`` holds no complete valid message (the batch proceeds normally).
        """
        base = request.next_offset
        try:
            record = next(iter_messages(data, base), None)
            if record is None:
                return False
            message = ReceivedMessage.from_record(request.topic, record, request.partition)
        except InvalidRecordError:
            return False  # The normal path asks the broker where the next segment starts.
        log.warning("message %d at %s/%s@%d failed %d times: rejected", record.msg_id,
                    *request.key, record.offset, request.retries)  # fmt: skip
        try:
            if self._reject is None:
                log.error("dropping rejected message %d of %s", record.msg_id, request.topic)
            else:
                self._reject(message)
        except Exception:  # Logged loudly; blocking the partition forever would be worse.
            log.exception("reject handler failed: message %d of %s lost", record.msg_id,
                          request.topic)  # fmt: skip
        self._advance(request, base + record.size, record.msg_id)
        request.retries = 0
        request.delay_ms = 0
        return True

    def _jump_to_segment_start(self, request: FetchRequest, error: InvalidRecordError) -> None:
        """A bad record: ask the broker for its segment's start and go there."""
        offset = self.ask_offset(request, request.next_offset)
        if offset is not None:
            log.warning("%s in %s/%s: jumping to %d", error, *request.key, offset)
            request.offset = offset
            request.tmp_offset = -1
            request.modified = True
