"""Bounded per-topic event counters the broker keeps (read by the dashboard's metrics).

Topic names come from peers (a ``get`` may name anything), so at most ``TOPICS_MAX`` topics
are counted one by one; events for further topics are counted under ``OTHER_TOPIC``.
Counters never decrease and start at 0 with the process. Reactor thread only.
"""

from __future__ import annotations

TOPICS_MAX = 10_000
"""Topics counted one by one; the rest share ``OTHER_TOPIC``."""

OTHER_TOPIC = "*other*"
"""The label of events for topics beyond ``TOPICS_MAX`` (not a legal topic name)."""


class TopicCounters:
    """Event counts per topic, bounded by ``topics_max``."""

    def __init__(self, topics_max: int = TOPICS_MAX) -> None:
        assert topics_max >= 1
        self._topics_max = topics_max
        self._counts: dict[str, int] = {}

    def add(self, topic: str, count: int = 1) -> None:
        """Count ``count`` events for ``topic``."""
        counts = self._counts
        if topic not in counts and len(counts) >= self._topics_max:
            topic = OTHER_TOPIC
        counts[topic] = counts.get(topic, 0) + count

    def items(self) -> list[tuple[str, int]]:
        """``(topic, count)`` pairs, sorted by topic."""
        return sorted(self._counts.items())
