"""Producer partition selectors: which of a topic's partitions one message goes to.

The producer passes the topic's partitions in Java's numeric order (``producer_partitions``).

- ``RoundRobinPartitionSelector`` (the default) keeps Java's exact sequence: one 32-bit counter
  per selector, shared by every topic, pre-incremented, so the first message goes to index 1.
- ``RandomPartitionSelector`` picks uniformly.
- ``HashPartitionSelector`` maps ``Message.key`` to a partition with CRC-32, so one key always
  lands on one partition (while the list is unchanged), in any process and any language.

Invariants: an empty or missing partition list raises ``NoPartitionError`` naming the topic
(Java's text, "There is no aviable partition ...", is sent on no wire, so it is not kept). The
producer never hands a selector an empty list: it raises a cause-specific subclass first
(``meta.client.produce.unroutable``).
Thread-safe: each selector may be shared by threads (round robin holds a lock).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from meta.client.cluster import Partition
from meta.client.message import Message
from meta.errors import ClientError, NoPartitionError
from meta.protocol.crc import crc32

_INT32_MASK = 0xFFFFFFFF
_NON_NEGATIVE_MASK = 0x7FFFFFFF


class PartitionSelector(Protocol):
    """Chooses the partition of one message among a topic's partitions."""

    def get_partition(
        self, topic: str, partitions: Sequence[Partition], message: Message
    ) -> Partition:
        """Return one element of ``partitions`` for ``message``.

        Raises:
            NoPartitionError: ``partitions`` is empty or None.
        """
        ...


def _require_partitions(topic: str, partitions: Sequence[Partition] | None) -> None:
    """Raise ``NoPartitionError`` when there is nothing to choose from (Java's
    ``AbstractPartitionSelector`` check)."""
    if not partitions:
        raise NoPartitionError(
            f"no partition to choose from for topic {topic!r}: the selector was given an "
            "empty partition list"
        )


class RoundRobinPartitionSelector:
    """Java's ``RoundRobinPartitionSelector``: counter pre-incremented, masked, modulo size.

    The counter wraps like a Java ``int``; the mask keeps the index non-negative after the wrap.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counter = 0

    def get_partition(
        self, topic: str, partitions: Sequence[Partition], message: Message
    ) -> Partition:
        _require_partitions(topic, partitions)
        with self._lock:
            self._counter = (self._counter + 1) & _INT32_MASK
            counter = self._counter
        return partitions[(counter & _NON_NEGATIVE_MASK) % len(partitions)]


class RandomPartitionSelector:
    """Java's ``RandomPartitionSelector``: a uniformly random partition.

    Args:
        rng: the random source; a fresh ``random.Random`` when None (tests pass a seeded one).
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng if rng is not None else random.Random()
        self._lock = threading.Lock()

    def get_partition(
        self, topic: str, partitions: Sequence[Partition], message: Message
    ) -> Partition:
        _require_partitions(topic, partitions)
        with self._lock:
            index = self._rng.randrange(len(partitions))
        return partitions[index]


class HashPartitionSelector:
    """Same key, same partition: ``(crc32(key) & 0x7FFFFFFF) % len(partitions)``.

    The key is UTF-8 encoded when it is a string. CRC-32 (IEEE, ``zlib.crc32``, Java's
    ``java.util.zip.CRC32``) is stable across processes, unlike Python's ``hash``.

    Args:
        key: returns the ordering key of a message; ``Message.key`` when None.
    """

    def __init__(self, key: Callable[[Message], str | bytes | None] | None = None) -> None:
        self._key = key if key is not None else _message_key

    def get_partition(
        self, topic: str, partitions: Sequence[Partition], message: Message
    ) -> Partition:
        _require_partitions(topic, partitions)
        key = self._key(message)
        if isinstance(key, str):
            key = key.encode("utf-8")
        if not isinstance(key, bytes):
            raise ClientError(
                f"the hash partition selector needs Message.key (str or bytes); topic {topic} "
                f"got {type(key).__name__}"
            )
        return partitions[(crc32(key) & _NON_NEGATIVE_MASK) % len(partitions)]


def _message_key(message: Message) -> str | bytes | None:
    return message.key
