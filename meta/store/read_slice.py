"""Where a read lands in a partition log: ``SliceResult`` and its three kinds.

``PartitionLog.slice`` returns one; the server turns ``BEFORE`` and ``AFTER`` into the 301
replies of a ``get`` and streams a ``DATA`` slice. Immutable, so thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

from meta.store.segment import Segment

BEFORE = "before"
AFTER = "after"
DATA = "data"


@dataclass(frozen=True, slots=True)
class SliceResult:
    """Where a read at ``offset`` lands.

    ``kind`` is ``"before"`` (``offset`` is then the first offset of the log), ``"after"``
    (``offset`` is then ``max_offset``) or ``"data"``: ``length`` bytes of ``segment`` from
    ``position``, never crossing into the next segment nor past the visible end.
    """

    kind: str
    offset: int
    segment: Segment | None = None
    position: int = 0
    length: int = 0
