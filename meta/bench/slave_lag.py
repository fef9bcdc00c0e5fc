"""Replication lag probes of the async slave bench: the slave's end, read over ``offset``, and a
paced producer.

``meta.bench.slave`` (steps 3 and 4 of its docstring) uses them: ``EndReader`` asks a broker
for the end of ``TOPIC`` partition 0; ``wait_for_end`` polls it (catch-up); ``EndPoller``
polls it on a thread while ``run_paced`` puts ``rate`` messages/s to the master, and ``lags``
matches each acknowledged put with the first poll that saw the slave serve it.

Everything runs on the caller's thread except ``EndPoller`` (one thread of its own); every
wait has a deadline; only 127.0.0.1.
"""

from __future__ import annotations

import bisect
import selectors
import threading
import time

from meta.bench.load import REPLY_TIMEOUT_S, BenchError, PutFrames, connect, receive_into
from meta.protocol.codec import NEED_DATA, Decoder
from meta.protocol.commands import LONG_MAX, Result
from meta.protocol.message import HEADER_SIZE

TOPIC = "bench-slave"
POLL_S = 0.002
"""How often the slave's end is read (lag and catch-up)."""
TICK_S = 0.005
"""The paced producer sends what is due every tick."""


class EndReader:
    """One connection asking a broker for the end of ``TOPIC`` partition 0 (``offset``)."""

    def __init__(self, address: tuple[str, int]) -> None:
        self._sock = connect(address)
        self._decoder = Decoder()
        self._opaque = 0

    def end(self) -> int:
        """The visible end (0 while the partition does not exist: 404)."""
        self._opaque += 1
        self._sock.sendall(
            b"offset %s bench 0 %d %d\r\n" % (TOPIC.encode(), LONG_MAX, self._opaque)
        )
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        while (reply := self._decoder.next_command()) is NEED_DATA:
            if time.monotonic() > deadline:
                raise BenchError(f"no offset reply within {REPLY_TIMEOUT_S} s")
            receive_into(self._sock, self._decoder)
        if not isinstance(reply, Result) or reply.opaque != self._opaque:
            raise BenchError(f"unexpected offset reply {reply!r}")
        if reply.code == 404:
            return 0
        if reply.code != 200:
            raise BenchError(f"offset failed: {reply!r}")
        return int(reply.body)

    def close(self) -> None:
        self._sock.close()


def wait_for_end(reader: EndReader, end: int, timeout_s: float, poll_s: float = POLL_S) -> float:
    """Poll every ``poll_s`` until the broker's end is at least ``end``; return the monotonic
    time it was seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = time.monotonic()
        if reader.end() >= end:
            return now
        if now > deadline:
            raise BenchError(f"the slave did not reach offset {end} within {timeout_s} s")
        time.sleep(poll_s)


class EndPoller(threading.Thread):
    """Reads the slave's end every ``POLL_S`` until stopped; keeps ``(time, end)`` samples.

    A sample is kept only when the end moved, so memory is bounded by the number of
    distinct ends (at most one per message)."""

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(name="bench-slave-poller", daemon=True)
        self._reader = EndReader(address)
        self._stop_event = threading.Event()
        self.times: list[float] = []
        self.ends: list[int] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self._stop_event.is_set():
                sent = time.monotonic()
                end = self._reader.end()
                if not self.ends or end > self.ends[-1]:
                    # The end was read after ``sent``: credit the earliest possible time.
                    self.times.append(sent)
                    self.ends.append(end)
                self._stop_event.wait(POLL_S)
        except BaseException as error:  # Reported by the caller.
            self.error = error
        finally:
            self._reader.close()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(REPLY_TIMEOUT_S + 5)


def run_paced(
    address: tuple[str, int], frames: PutFrames, rate: float, duration_s: float
) -> tuple[list[float], list[int], float]:
    """Put ``rate`` messages/s for ``duration_s`` on one connection, all acked.

    Returns:
        ``(ack_times, ends, seconds)``: per message, the monotonic time its reply was read
        and the offset just past its record; and the time the whole run took.
    """
    total = max(1, int(rate * duration_s))
    record_bytes = HEADER_SIZE + len(frames.body)
    sock = connect(address)
    sock.setblocking(False)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    decoder = Decoder()
    ack_times: list[float] = []
    ends: list[int] = []
    pending = memoryview(b"")
    sent = 0
    start = time.monotonic()
    last_progress = start
    try:
        while len(ack_times) < total:
            now = time.monotonic()
            due = min(total, int((now - start) * rate) + 1)
            if not pending and due > sent:
                pending = memoryview(frames.batch(sent + 1, due - sent))
                sent = due
            if now - last_progress > REPLY_TIMEOUT_S:
                raise BenchError(f"no reply for {REPLY_TIMEOUT_S} s ({sent - len(ack_times)} open)")
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if pending else 0)
            selector.modify(sock, events)
            for _key, ready in selector.select(TICK_S):
                if ready & selectors.EVENT_WRITE and pending:
                    try:
                        pending = pending[sock.send(pending) :]
                    except BlockingIOError:
                        pass
                if ready & selectors.EVENT_READ:
                    receive_into(sock, decoder)
                    read_at = time.monotonic()
                    while (reply := decoder.next_command()) is not NEED_DATA:
                        if not isinstance(reply, Result) or reply.code != 200:
                            raise BenchError(f"put failed: {reply!r}")
                        ack_times.append(read_at)
                        ends.append(int(reply.body.rsplit(b" ", 1)[1]) + record_bytes)
                        last_progress = read_at
    finally:
        selector.close()
        sock.close()
    return ack_times, ends, time.monotonic() - start


def lags(ack_times: list[float], ends: list[int], seen_times: list[float], seen_ends: list[int]):
    """Per message: seconds from its ack until the slave's end covered it (>= 0).

    Raises:
        BenchError: a message the slave never reached.
    """
    result = []
    for acked, end in zip(ack_times, ends, strict=True):
        index = bisect.bisect_left(seen_ends, end)
        if index == len(seen_ends):
            raise BenchError(f"the slave never reached offset {end}")
        result.append(max(0.0, seen_times[index] - acked))
    return result


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]
