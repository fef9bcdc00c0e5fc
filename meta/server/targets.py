"""The connection's cache of partition lookups for put runs (plain and transactional).

What lives here: ``Targets`` and ``cached_target``. A run of puts names its partitions as the
header's bytes; the cache maps those bytes to the partition log the running configuration
accepts, so a run pays one dict lookup per partition instead of a decode and a validation.
Invariant: an entry names an existing partition the configuration accepted when it was made;
each connection clears its cache on every reload (partition logs are never replaced in a
running store). Reactor thread only.
"""

from __future__ import annotations

TARGETS_MAX = 1024
Targets = dict[tuple[bytes, bytes], tuple]
"""(topic, partition) header bytes -> (partition log, topic, partition): lookups kept per
connection, at most ``TARGETS_MAX`` (then cleared)."""


def cached_target(broker, targets: Targets, key: tuple[bytes, bytes]) -> tuple | None:
    """(partition log, topic, partition) of an existing partition that the running config
    accepts and that takes appends; None: the caller's one-by-one path decides (a new
    partition, a refused topic or partition, a failed partition ...)."""
    target = targets.get(key)
    if target is None:
        topic_bytes, partition_bytes = key
        topic = topic_bytes.decode("ascii")  # the decoder took only legal (ASCII) names
        partition = int(partition_bytes)
        partition_log = broker.store.accepting(topic, partition)
        if partition_log is None:
            return None
        if len(targets) >= TARGETS_MAX:
            targets.clear()
        target = targets[key] = (partition_log, topic, partition)
    return target if target[0].accepts_appends else None
