"""Where a read lands in a partition log: ``SliceResult`` and its four kinds.

``PartitionLog.slice`` returns one; the server turns ``BEFORE`` and ``AFTER`` into the 301
replies of a ``get``, streams a ``DATA`` slice and refuses a ``CORRUPT`` one (the read starts
in a known corrupt range, ``meta.store.corruption``). Immutable, so thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from meta.store.segment import Segment

BEFORE = "before"
AFTER = "after"
DATA = "data"
CORRUPT = "corrupt"


@dataclass(frozen=True, slots=True)
class SliceResult:
    """Where a read at ``offset`` lands.

    ``kind`` is ``"before"`` (``offset`` is then the first offset of the log), ``"after"``
    (``offset`` is then ``max_offset``), ``"data"``: ``length`` bytes of ``segment`` from
    ``position``, never crossing into the next segment, past the visible end or into a known
    corrupt range, or ``"corrupt"``: ``offset`` lies in the known corrupt range ``corrupt``
    (a ``meta.store.corruption.CorruptRange``).
    """

    kind: str
    offset: int
    segment: Segment | None = None
    position: int = 0
    length: int = 0
    corrupt: Any = None
