"""Consumer load-balance strategies: which partitions of a topic one consumer owns.

Both strategies are pure functions of (this consumer, every consumer of the group subscribed to
the topic, the topic's consumer partition strings). Java and Python consumers of one group must
return the same answer, or they fight over owner nodes; so both sort their inputs as Java
strings (UTF-16 code units) before use, which is a no-op when the caller already did.

- ``DEFAULT`` (``DefaultLoadBalanceStrategy``): consecutive ranges of the string-sorted partition
  list; the first ``len(P) % len(C)`` consumers get one extra partition.
- ``CONSIST`` (``ConsisHashStrategy``, ketama): 160 points per consumer on a 32-bit ring; a
  partition belongs to the consumer at the first point at or after its hash, wrapping around.

Thread-safe: pure functions.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Mapping, Sequence

from meta.client.cluster import java_string_key
from meta.errors import ClientError

KETAMA_DIGESTS_PER_CONSUMER = 40
"""MD5 digests per consumer; each gives ``KETAMA_POINTS_PER_DIGEST`` ring points (160 total)."""

KETAMA_POINTS_PER_DIGEST = 4

Strategy = Callable[[str, Sequence[str], Sequence[str]], list[str]]


def assign_default(consumer: str, consumers: Sequence[str], partitions: Sequence[str]) -> list[str]:
    """Return ``consumer``'s share under the DEFAULT strategy.

    With ``C`` and ``P`` sorted, ``k = |P| div |C|``, ``x = |P| mod |C|`` and ``i`` the index of
    ``consumer`` in ``C``, the share is ``P[k*i + min(i, x) : ... + k + (1 if i < x else 0)]``.

    Args:
        consumer: this consumer's id string.
        consumers: every consumer id string of the group subscribed to the topic.
        partitions: the topic's consumer partition strings.

    Returns:
        The partitions owned, in string order; empty when ``consumer`` is not in ``consumers``
        or when there are more consumers than partitions and it comes last.
    """
    ordered_consumers = sorted(consumers, key=java_string_key)
    ordered_partitions = sorted(partitions, key=java_string_key)
    if consumer not in ordered_consumers:
        return []
    # Java uses indexOf, so with a (never expected) duplicate the first position counts.
    index = ordered_consumers.index(consumer)
    per_consumer, extra = divmod(len(ordered_partitions), len(ordered_consumers))
    start = per_consumer * index + min(index, extra)
    count = per_consumer + (1 if index < extra else 0)
    return ordered_partitions[start : start + count]


def _unsigned_le32(digest: bytes, start: int) -> int:
    return int.from_bytes(digest[start : start + 4], "little", signed=False)


def ketama_ring(consumers: Sequence[str]) -> dict[int, str]:
    """Return the ketama ring as point -> consumer, consumers taken in Java string order.

    For consumer ``c`` and ``i`` in 0..39, ``d = MD5(f"{c}-{i}")`` gives four points, the
    little-endian unsigned 32-bit words of ``d``. A later consumer overwrites a colliding point,
    as Java's ``TreeMap.put`` does.
    """
    ring: dict[int, str] = {}
    for consumer in sorted(consumers, key=java_string_key):
        for number in range(KETAMA_DIGESTS_PER_CONSUMER):
            digest = hashlib.md5(f"{consumer}-{number}".encode()).digest()
            for word in range(KETAMA_POINTS_PER_DIGEST):
                ring[_unsigned_le32(digest, 4 * word)] = consumer
    return ring


def ketama_hash(text: str) -> int:
    """Return the ketama key of ``text``: little-endian unsigned 32 bits of ``MD5(text)[0:4]``."""
    return _unsigned_le32(hashlib.md5(text.encode()).digest(), 0)


def assign_consistent(
    consumer: str, consumers: Sequence[str], partitions: Sequence[str]
) -> list[str]:
    """Return ``consumer``'s share under the CONSIST (ketama) strategy.

    Each partition goes to the consumer at the smallest ring point >= its ``ketama_hash``, or
    at the first point when none is (the ring wraps around).

    Args:
        consumer: this consumer's id string.
        consumers: every consumer id string of the group subscribed to the topic.
        partitions: the topic's consumer partition strings.

    Returns:
        The partitions owned, in string order (Java returns them in hash-set order, which the
        caller must not rely on).
    """
    ring = ketama_ring(consumers)
    if not ring:
        return []
    points = sorted(ring)
    owned = []
    for partition in partitions:
        position = bisect.bisect_left(points, ketama_hash(partition))
        point = points[position] if position < len(points) else points[0]
        if ring[point] == consumer:
            owned.append(partition)
    return sorted(set(owned), key=java_string_key)


STRATEGIES: dict[str, Strategy] = {"DEFAULT": assign_default, "CONSIST": assign_consistent}
"""``loadBalanceStrategyType`` name -> strategy function."""


def assign(
    strategy: str, consumer: str, consumers: Sequence[str], partitions: Sequence[str]
) -> list[str]:
    """Return ``consumer``'s share of ``partitions`` under the named strategy.

    Args:
        strategy: ``"DEFAULT"`` or ``"CONSIST"`` (Java's enum names, case-sensitive).
        consumer: this consumer's id string.
        consumers: every consumer id string of the group subscribed to the topic.
        partitions: the topic's consumer partition strings.

    Raises:
        ClientError: the strategy name is unknown.
    """
    function = STRATEGIES.get(strategy)
    if function is None:
        known = ", ".join(sorted(STRATEGIES))
        raise ClientError(f"unknown load-balance strategy {strategy!r}: expected one of {known}")
    return function(consumer, consumers, partitions)


def share(
    strategy: str,
    consumer: str,
    consumers: Mapping[str, Sequence[str]],
    partitions: Mapping[str, Sequence[str]],
) -> set[tuple[str, str]]:
    """Return ``consumer``'s ``(topic, partition)`` pairs of every topic in ``partitions``.

    Args:
        strategy: as for ``assign``.
        consumer: this consumer's id string.
        consumers: topic -> every consumer id string of the group subscribed to it.
        partitions: topic -> its consumer partition strings (each subscribed topic).
    """
    wanted: set[tuple[str, str]] = set()
    for topic, parts in partitions.items():
        members = consumers.get(topic, [])
        if members and parts:
            chosen = assign(strategy, consumer, members, parts)
            wanted.update((topic, partition) for partition in chosen)
    return wanted
