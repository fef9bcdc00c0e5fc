"""Message ids: 42 bits of milliseconds, 10 bits of broker id, 12 bits of sequence.

Layout as Java's ``IdWorker``, but the time is wall-clock milliseconds since
the Metamorphosis epoch 1303895660503 (compatibility.md), so ids are positive and their time can be
read back. The clock is guarded: it never goes backwards, and when one millisecond's 4096
sequence numbers are used up the worker borrows the next millisecond instead of spinning.

Not thread-safe: one ``IdWorker`` per broker, used on the reactor thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable

EPOCH_MS = 1303895660503
WORKER_BITS = 10
SEQUENCE_BITS = 12
WORKER_MAX = (1 << WORKER_BITS) - 1
SEQUENCE_MASK = (1 << SEQUENCE_BITS) - 1
TIME_SHIFT = WORKER_BITS + SEQUENCE_BITS


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class IdWorker:
    """Allocates strictly increasing message ids for one broker.

    Args:
        worker_id: the broker id, 0..1023.
        clock_ms: a millisecond clock (injectable for tests).
    """

    def __init__(self, worker_id: int, clock_ms: Callable[[], int] = wall_clock_ms) -> None:
        if not 0 <= worker_id <= WORKER_MAX:
            raise ValueError(f"worker id {worker_id} is outside 0..{WORKER_MAX}")
        self._worker_bits = worker_id << SEQUENCE_BITS
        self._clock_ms = clock_ms
        self._last_ms = -1
        self._sequence = 0

    def next_id(self) -> int:
        now_ms = self._clock_ms()
        if now_ms > self._last_ms:
            self._last_ms = now_ms
            self._sequence = 0
        else:
            self._sequence = (self._sequence + 1) & SEQUENCE_MASK
            if self._sequence == 0:
                self._last_ms += 1
        return ((self._last_ms - EPOCH_MS) << TIME_SHIFT) | self._worker_bits | self._sequence

    def next_ids(self, count: int) -> range | list[int]:
        """``count`` ids, exactly as ``count`` calls of ``next_id`` in the same millisecond.

        The clock is read once; a batch that runs out of sequence numbers borrows the next
        milliseconds, as ``next_id`` does.
        """
        assert count >= 1
        first = self.next_id()
        rest = count - 1
        if rest <= SEQUENCE_MASK - self._sequence:
            self._sequence += rest
            return range(first, first + count)
        ids = [first]
        for _ in range(rest):
            self._sequence = (self._sequence + 1) & SEQUENCE_MASK
            if self._sequence == 0:
                self._last_ms += 1
            time_bits = (self._last_ms - EPOCH_MS) << TIME_SHIFT
            ids.append(time_bits | self._worker_bits | self._sequence)
        return ids


def id_time_ms(msg_id: int) -> int:
    """Wall-clock milliseconds encoded in an id made by this project (compatibility.md)."""
    return (msg_id >> TIME_SHIFT) + EPOCH_MS


def id_worker(msg_id: int) -> int:
    """The broker id encoded in a message id."""
    return (msg_id >> SEQUENCE_BITS) & WORKER_MAX
