"""A consumer group's owner nodes ``consumers/G/owners/T/B-P`` (ephemeral, data = the owning
consumer's id string): ``take_owner``, ``delete_owner``, and ``PendingOwners``, the
partitions a consumer was assigned but could not take yet.

After a rebalance, an owner node ``consumers/G/owners/T/B-P`` may still be held by the
previous owner: it releases the partition on its own rebalance, which can come a moment
later, or, if it crashed, when its ZooKeeper session expires. Such a partition waits here
while the consumer fetches the partitions it did take; it is tried again alone when its
owner node goes away (a ZooKeeper watch) or, should that event be missed, after a backoff
that doubles from ``RETRY_DELAY_FIRST_S`` up to a maximum (the consumer's ``zk_sync_s``).

Invariants:

* ``keys`` never holds a partition the consumer owns (the group moves it out on success).
* ``wait_s()`` is None exactly when nothing waits; otherwise it is the time to the next
  retry, never negative.

Thread-safety: ``PendingOwners`` has none (the consumer group uses it under its own lock);
the functions keep no state and use the caller's (thread-safe) kazoo client.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from meta.client.zk.group_reads import read_data

__all__ = ["RETRY_DELAY_FIRST_S", "PendingOwners", "delete_owner", "take_owner"]

RETRY_DELAY_FIRST_S = 0.1
"""The first retry of a waiting partition without a watch event (the watch is the fast path)."""


class PendingOwners:
    """The waiting partitions and when to try them again.

    Args:
        delay_max_s: the largest backoff between two retries.
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(self, delay_max_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._delay_max_s = max(delay_max_s, RETRY_DELAY_FIRST_S)
        self._clock = clock
        self._keys: set[tuple[str, str]] = set()
        self._delay_s = RETRY_DELAY_FIRST_S
        self._due = 0.0

    @property
    def keys(self) -> set[tuple[str, str]]:
        """A copy of the waiting ``(topic, B-P)`` pairs."""
        return set(self._keys)

    def __bool__(self) -> bool:
        return bool(self._keys)

    def replace(self, keys: Iterable[tuple[str, str]]) -> None:
        """Wait for exactly ``keys`` (a new assignment); the backoff starts again."""
        self._keys = set(keys)
        self._delay_s = RETRY_DELAY_FIRST_S
        self._due = self._clock() + self._delay_s

    def taken(self, keys: Iterable[tuple[str, str]]) -> None:
        """``keys`` are owned now: they wait no more."""
        self._keys.difference_update(keys)

    def clear(self) -> None:
        """Nothing waits (the consumer released everything or lost its session)."""
        self._keys.clear()

    def is_due(self) -> bool:
        """Whether the backoff has run out (something waits and its retry time has come)."""
        return bool(self._keys) and self._clock() >= self._due

    def still_held(self) -> None:
        """A retry left partitions waiting: double the backoff, up to the maximum."""
        self._delay_s = min(self._delay_s * 2, self._delay_max_s)
        self._due = self._clock() + self._delay_s

    def wait_s(self) -> float | None:
        """Seconds until the next retry is due; None when nothing waits."""
        if not self._keys:
            return None
        return max(0.0, self._due - self._clock())


def take_owner(client: KazooClient, path: str, consumer_id: str) -> bool:
    """Create the owner node ``path`` for ``consumer_id``.

    Returns:
        True once the node is ours (created now, or already ours), False while another
        consumer holds it.
    """
    mine = consumer_id.encode()
    for _ in range(2):  # Once more when the holder's node vanished between the calls.
        try:
            client.create(path, mine, ephemeral=True, makepath=True)
            return True
        except NodeExistsError:
            owner = read_data(client, path)
            if owner is not None:
                return owner == mine
    return False


def delete_owner(client: KazooClient, path: str, consumer_id: str) -> None:
    """Delete the owner node ``path`` if ``consumer_id`` holds it; a missing node is fine."""
    if read_data(client, path) == consumer_id.encode():
        try:
            client.delete(path)
        except NoNodeError:
            pass
