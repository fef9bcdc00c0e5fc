"""What an async slave may use of its broker: ``SlaveBroker`` and the two services it exposes.

The replicator (``meta.slave.replicator``) runs inside a ``meta.server.broker.Broker`` but
needs only a small part of it: the running config, the store's partitions (to read local
ends, create a partition at the master's first offset, and append fetched records), the
ZooKeeper registry (to read the master and its config checksum, and to register a topic the
first time it is written), a reload, and flushing gathered replies after an append. These
``typing.Protocol`` classes name exactly that, so the slave depends on this narrow seam and
not on the whole broker; ``Broker``, ``StoreManager`` and ``BrokerRegistry`` satisfy them
structurally (a test checks the names and parameters), and tests pass small fakes.

Thread affinity: every member is called on the reactor thread only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from twisted.internet import defer

    from meta.config import BrokerConfig
    from meta.store.partition import PartitionLog


class SlaveStore(Protocol):
    """The store as the slave uses it (``meta.store.manager.StoreManager``)."""

    def partitions(self) -> list[PartitionLog]:
        """Every local partition log."""
        ...

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        """The local partition log, or None when it does not exist."""
        ...

    def get_or_create(self, topic: str, partition: int, first_offset: int = 0) -> PartitionLog:
        """The local partition log, created with its first segment at ``first_offset``."""
        ...

    def commit_staged(self) -> None:
        """Write every staged record (one write per partition)."""
        ...


class SlaveRegistry(Protocol):
    """The ZooKeeper registry as the slave uses it (``meta.server.registry.BrokerRegistry``)."""

    def register_topic(self, topic: str, force: bool = False) -> defer.Deferred:
        """Register ``topic``'s nodes (as a first put does)."""
        ...

    def read_master(self) -> defer.Deferred:
        """Fires with ``(master data or None, {topic: topics-sub B-m data})``."""
        ...

    def read_master_checksum(self) -> defer.Deferred:
        """Fires with the master's ``master_config_checksum`` data, or None."""
        ...


class SlaveBroker(Protocol):
    """The broker as the slave uses it (``meta.server.broker.Broker``)."""

    @property
    def config(self) -> BrokerConfig:
        """The running config (replaced by a reload)."""
        ...

    @property
    def store(self) -> SlaveStore:
        """The broker's store."""
        ...

    @property
    def registry(self) -> SlaveRegistry | None:
        """The ZooKeeper registry; None when ZooKeeper is disabled."""
        ...

    def partition_for_put(self, topic: str, partition: int) -> PartitionLog:
        """The partition log for an append, created (and registered) on the first one."""
        ...

    def flush_output(self) -> None:
        """Write the replies gathered meanwhile (long-polling gets woken by an append)."""
        ...

    def reload(self, reread: BrokerConfig) -> defer.Deferred:
        """Apply a re-read config (the master's, merged with the slave's own settings)."""
        ...
