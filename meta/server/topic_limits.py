"""The bound on topics created through wildcard sections (``[system] maxTopics``).

What lives here: ``check_new_topic``, which the broker calls before a put creates a
partition. A ``[topic=log-*]`` section makes every matching name legal, so without a bound
one client could create thousands of topics, each with its partitions' directories, open
segment files and ZooKeeper nodes. Topics named by an exact ``[topic=NAME]`` section are
never refused; every other topic (created by a put through a wildcard section, or found on
disk at start-up) counts against ``maxTopics``. A put that would create one more gets 500
with a text naming the key.

Creating a partition is rare, so the count is taken from the open partitions each time
(linear in them) rather than kept in step with every change to the store.

Thread affinity: reactor thread only.
"""

from __future__ import annotations

from typing import Any

from meta.errors import StoreError

__all__ = ["check_new_topic"]


def check_new_topic(config: Any, partitions: list[Any], topic: str) -> None:
    """Refuse ``topic`` when it is new, has no exact section, and ``maxTopics`` are there.

    Args:
        config: the running ``BrokerConfig`` (``topics``, ``topics_max``).
        partitions: every open partition log (``StoreManager.partitions()``).
        topic: the topic a put is about to create a partition of.

    Raises:
        StoreError: the topic would be one more than ``maxTopics`` (a 500 for the put).
    """
    exact = {section.name for section in config.topics if not section.is_pattern}
    if topic in exact:
        return
    topics = {partition_log.topic for partition_log in partitions}
    if topic in topics:
        return
    counted = len(topics - exact)
    if counted >= config.topics_max:
        raise StoreError(
            f"cannot create topic {topic}: the broker already has {counted} topics without "
            f"their own [topic=NAME] section (maxTopics={config.topics_max})"
        )
