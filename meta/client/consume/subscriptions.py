"""``SubscribeRegistry``: which topics each group subscribes within one session factory.

Java's ``SubscribeInfoManager``: a topic may be subscribed at most once per group and
factory; a consumer's ``shutdown`` releases its topics. ``meta.client.consume.consumer``
re-exports it (the factory imports it from there).

Thread-safety: thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from meta.errors import ClientError


class SubscribeRegistry:
    """The topics each group subscribes within one session factory (Java's
    ``SubscribeInfoManager``): a topic may be subscribed once per group per factory.

    Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._topics: dict[str, set[str]] = {}

    def claim(self, group: str, topic: str) -> None:
        """Record ``topic`` for ``group``.

        Raises:
            ClientError: ``group`` subscribed ``topic`` already in this factory.
        """
        with self._lock:
            topics = self._topics.setdefault(group, set())
            if topic in topics:
                raise ClientError(
                    f"topic {topic} is already subscribed by group {group} in this session "
                    "factory (a topic may be subscribed once per group and factory)"
                )
            topics.add(topic)

    def release(self, group: str, topics: Iterable[str]) -> None:
        """Forget ``topics`` of ``group`` (its consumer shut down)."""
        with self._lock:
            claimed = self._topics.get(group, set())
            claimed.difference_update(topics)
            if not claimed:
                self._topics.pop(group, None)
