"""The broadcast consumer, as Java's ``BroadcastMessageConsumer``.

``create_broadcast_consumer`` is Java's ``MetaBroadcastMessageSessionFactory
.createBroadcastConsumer``: the group becomes ``cluster.broadcast_group(group)``
(``<group>-<host>``), so every host is a group of its own and receives every message, and the
offsets go to a ``LocalOffsetStorage`` JSON file (default ``~/.metaq-py_offsets``) instead of
ZooKeeper. Membership and ownership still use ZooKeeper (the normal rebalance runs within the
one-host group).

Invariants: the broadcast group never reads or writes ``consumers/G/offsets``; a failed local
commit keeps its entries modified, so the next commit retries them.

Thread-safety: as ``MessageConsumer``; the storage serialises writers of one file.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from meta.client.cluster import Partition, broadcast_group
from meta.client.consume.local_offsets import LocalOffsetStorage, default_path, java_path
from meta.errors import ClientError

if TYPE_CHECKING:
    from meta.client.consume.consumer import ConsumerConfig, MessageConsumer
    from meta.client.factory import MetaMessageSessionFactory

log = logging.getLogger("meta.client")


def local_group_class(storage: LocalOffsetStorage, group: str) -> type:
    """A ``ZkConsumerGroup`` whose offsets live in ``storage`` (imported lazily: kazoo)."""
    from meta.client.zk.group import ZkConsumerGroup

    class LocalOffsetGroup(ZkConsumerGroup):
        """Membership in ZooKeeper, offsets in a local file."""

        def commit(self) -> None:
            entries = self.fetcher.take_modified()
            updates = [(t, Partition.parse(p), offset, msg_id) for t, p, msg_id, offset in entries]
            try:
                storage.commit(group, updates)
            except ClientError as error:
                log.warning("cannot commit offsets of %s to %s: %s", group, storage.path, error)
                self.fetcher.mark_modified([(t, p) for t, p, _i, _o in entries])

        def load_offset(self, topic: str, partition: str) -> tuple[int, int]:
            stored = storage.load(topic, group, Partition.parse(partition))
            return (-1, self.start_offset) if stored is None else stored

    return LocalOffsetGroup


def create_broadcast_consumer(
    factory: MetaMessageSessionFactory,
    config: ConsumerConfig,
    offsets_path: str | None = None,
    host: str | None = None,
) -> MessageConsumer:
    """Return a broadcast consumer: a per-host group whose offsets are kept locally.

    Args:
        factory: the session factory (ZooKeeper mode).
        config: the settings; ``config.group`` is the group asked for.
        offsets_path: the offsets file; None: ``~/.metaq-py_offsets``, with the Java
            client's ``~/.meta_offsets`` read for partitions it holds no entry of.
        host: the host in the group name; None: ``cluster.local_host()``.

    Raises:
        ClientClosedError: the factory was shut down.
        ClientError: direct mode; ``InvalidGroupError`` for an invalid rewritten group.
    """
    if factory.cluster_view is None:
        raise ClientError("a broadcast consumer needs ZooKeeper; direct mode is not supported")
    group = broadcast_group(config.group, host)
    config = dataclasses.replace(config, group=group)
    if offsets_path is None:
        storage = LocalOffsetStorage(default_path(), fallback_path=java_path())
    else:
        storage = LocalOffsetStorage(offsets_path)
    return factory.create_consumer(config, group_class=local_group_class(storage, group))
