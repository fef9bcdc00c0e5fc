"""``JournalLocation``: where a record lies in the transaction journal. Pure; thread-safe."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True, slots=True)
class JournalLocation:
    """Byte ``position`` in ``redo.<number>``; ordered by file number, then position."""

    number: int
    position: int
