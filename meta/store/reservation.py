"""Staged appends of a ``PartitionLog``: reservations and what a commit takes from the stage.

``Reservation`` holds log bytes for a batch given later (transaction commits), and
``take_filled`` joins what is staged before the first unfilled one; ``take_written`` takes
what a commit writes (and the appends it counts for); ``fire`` is the ack behind
``PartitionLog.append``. Reactor thread only.
"""

from __future__ import annotations

from typing import cast


class Reservation:
    """Bytes of a partition log held for a batch that ``PartitionLog.fill`` gives later."""

    __slots__ = ("data", "length", "offset")

    def __init__(self, offset: int, length: int) -> None:
        self.offset = offset
        self.length = length
        self.data: bytes | None = None


def fire(deferred, offset: int | None, error: BaseException | None) -> None:
    """An ack that fires ``deferred`` with the offset, or fails it with the error."""
    if error is None:
        deferred.callback(offset)
    else:
        deferred.errback(error)


def take_filled(staged: list[bytes | memoryview | Reservation]) -> tuple[bytes, int]:
    """Remove and join the staged entries before the first unfilled reservation.

    Returns:
        The joined bytes and how many (filled) reservations were among the removed entries.
    """
    parts: list[bytes | memoryview] = []
    filled = 0
    for entry in staged:
        if entry.__class__ is Reservation:
            if entry.data is None:
                break
            filled += 1
            parts.append(entry.data)
        else:
            parts.append(cast("bytes | memoryview", entry))
    del staged[: len(parts)]
    return b"".join(parts), filled


def take_written(
    staged: list[bytes | memoryview | Reservation], counts: list[int], reservations: int
) -> tuple[bytes | memoryview, int, int]:
    """Remove what a commit writes now from ``staged`` and the parallel ``counts``: every
    entry, or, while ``reservations`` > 0, those before the first unfilled reservation.

    Returns:
        The joined bytes, the filled reservations among them, and the appends they count for.
    """
    if not reservations:  # so no entry is a Reservation
        entries = cast("list[bytes | memoryview]", staged)
        data = entries[0] if len(entries) == 1 else b"".join(entries)
        written = counts[0] if len(counts) == 1 else sum(counts)
        staged.clear()
        counts.clear()
        return data, 0, written
    before = len(staged)
    data, filled = take_filled(staged)
    taken = before - len(staged)
    written = sum(counts[:taken])
    del counts[:taken]
    return data, filled, written
