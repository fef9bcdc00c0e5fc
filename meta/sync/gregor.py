"""The gregor slave's role object: admission of ``sync`` commands, bookkeeping, ``stats sync``.

A gregor slave takes ``sync`` from its samsa master (``meta.server.handlers.handle_sync``
applies the put rules and stages the record; ``meta.server.sync_run`` does the same for a run
of syncs of one read, one staged entry per partition); this module holds what is the slave's
own:

* **Admission**: at most ``SYNCS_WAITING_MAX`` syncs, and at most
  ``SYNC_BYTES_WAITING_MAX`` body bytes, wait for their write (and fsync) per partition. A sync
  over either bound is refused with 503 and gecko's pool-busy text (``POOL_BUSY``), as a Java
  slave refuses a task its thread pool cannot take; in a run of syncs to one partition, the
  first refused one and every later one of the run are refused (``admit_run``). Order is per
  partition, across connections and reconnects: every sync is staged on the reactor thread
  in arrival order, and a partition log writes and acknowledges in staging order.
* **Who may sync** (``meta.sync.peers``): the callers ask ``refusal`` before they admit a
  sync; a connection that is not the configured master's (address, ``syncSecret``) gets 403
  with the reason and nothing is stored. ``hello`` answers the master's ``sync-hello``.
* **The master**: the peer of the connection that sent the last accepted sync, while it is
  open.
* **``stats sync``** (S4): ``role gregor``, ``master <host:port or ->``, then one line per
  partition, sorted by topic then partition number:
  ``partition <topic>-<p> <end> <last sync, ms since the epoch, or 0>``.
* **The status-test topic** ``_metaq_slave_status_test`` (one partition), which a samsa
  master probes: ``with_status_topic`` adds it to the slave's configuration.

The slave registers nothing in ZooKeeper (``without_zookeeper``) and refuses plain puts with
403 (the broker's ``refuses_puts``). Reactor thread only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from meta.sync.peers import SyncPeers

STATUS_TEST_TOPIC = "_metaq_slave_status_test"
"""The topic a samsa master's probe syncs to (Java's ``metaq.slave.status.test.topic``)."""

POOL_BUSY = "线程池繁忙"
"""gecko's text when a worker pool rejects a task: a full sync queue."""

SYNCS_WAITING_MAX = 10_000
"""Syncs of one partition waiting for their write and fsync before new ones get 503."""

SYNC_BYTES_WAITING_MAX = 64 * 1024 * 1024
"""Body bytes of one partition's waiting syncs before new ones get 503."""

ROLE = "gregor"

Key = tuple[str, int]


class PartitionEnd(Protocol):
    """What ``stats sync`` reads of a partition log."""

    topic: str
    partition: int

    @property
    def max_offset(self) -> int: ...


class GregorSlave:
    """The synchronous-replication slave role of a broker (``Broker.sync`` on a gregor slave).

    Args:
        partitions: returns the broker's partition logs (``StoreManager.partitions``).
        is_open: whether a connection is still open (``connection in broker.connections``).
        now_s: the clock, in seconds since the epoch (the reactor's ``seconds``).
        peers: who may send ``sync`` (``SyncPeers.from_config``).

    Attributes:
        role: ``"gregor"`` (a samsa master's role object says ``"samsa"``).
        refuses_puts: True: a plain put to a gregor slave gets 403.
    """

    role = ROLE
    refuses_puts = True

    def __init__(
        self,
        partitions: Callable[[], Iterable[PartitionEnd]],
        is_open: Callable[[Any], bool],
        now_s: Callable[[], float],
        peers: SyncPeers,
    ) -> None:
        self._partitions = partitions
        self.peers = peers
        self._is_open = is_open
        self._now_s = now_s
        # key -> [syncs, body bytes] admitted and not yet answered, and the time of the last
        # stored one (0: none). A partition's entry stays: a slave has few partitions.
        self._waiting: dict[Key, list] = {}
        self._master_connection: Any = None
        self._master_address = "-"

    def refusal(self, connection: Any) -> str | None:
        """Why ``connection`` may not send ``sync`` (answer 403 with it, store nothing), or
        None when it is the master's. Asked before every admission."""
        if connection is self._master_connection:  # accepted already: no lookup
            return None
        reason = self.peers.refusal(connection)
        if reason is None:
            self._master_connection = connection
            self._master_address = _peer_text(connection)
        return reason

    def hello(self, item: str, connection: Any) -> tuple[int, bytes]:
        """Answer a master's ``stats sync-hello:...`` (``SyncPeers.hello``)."""
        code, body = self.peers.hello(item, connection)
        if code != 200 and connection is self._master_connection:
            self._master_connection = None  # its next sync is checked again, and refused
        return code, body

    def admit(self, topic: str, partition: int, size: int, connection: Any) -> bool:
        """Count one sync of ``size`` body bytes as waiting; False when the partition's queue
        is full (answer 503 ``POOL_BUSY``; nothing was counted).

        Every admitted sync must be ended by exactly one ``finished`` call.
        """
        return self.admit_one(topic, partition, size, connection) is not None

    def admit_one(self, topic: str, partition: int, size: int, connection: Any) -> list | None:
        """``admit``, for a caller that ends the sync with ``finished_one``: the partition's
        waiting counts to hand it, or None when the queue is full (nothing was counted)."""
        waiting = None
        if connection is self._master_connection:  # the usual sync: no call for the lookup
            waiting = self._waiting.get((topic, partition))
        if waiting is None:
            waiting = self._waiting_of(topic, partition, connection)
        count, size_total = waiting[0], waiting[1]
        if not _takes(count, size_total, size):
            return None
        waiting[0] = count + 1
        waiting[1] = size_total + size
        return waiting

    def admit_run(self, topic: str, partition: int, sizes: list[int], connection: Any) -> int:
        """``admit`` for consecutive syncs of one partition, of ``sizes`` body bytes each:
        returns how many, from the first, were admitted (the rest get 503 ``POOL_BUSY``).

        Every admitted sync must be ended by a ``finished`` or ``finished_run`` call.
        """
        waiting = self._waiting_of(topic, partition, connection)
        count, size_total = waiting[0], waiting[1]
        admitted = 0
        takes = _takes
        for size in sizes:
            if not takes(count, size_total, size):
                break
            count += 1
            size_total += size
            admitted += 1
        waiting[0], waiting[1] = count, size_total
        return admitted

    def _waiting_of(self, topic: str, partition: int, connection: Any) -> list:
        """The partition's waiting counts; ``connection`` sent the last sync (``refusal``
        accepted it)."""
        key = (topic, partition)
        waiting = self._waiting.get(key)
        if waiting is None:
            waiting = self._waiting[key] = [0, 0, 0.0]
        return waiting

    def finished_run(self, topic: str, partition: int, count: int, size: int, stored: bool) -> None:
        """``finished`` for ``count`` admitted syncs of ``size`` body bytes in all."""
        waiting = self._waiting[(topic, partition)]
        waiting[0] -= count
        waiting[1] -= size
        assert waiting[0] >= 0
        assert waiting[1] >= 0
        if stored:
            waiting[2] = self._now_s()

    def finished(self, topic: str, partition: int, size: int, stored: bool) -> None:
        """An admitted sync was answered; ``stored``: it was appended (its time is kept)."""
        self.finished_run(topic, partition, 1, size, stored)

    def finished_one(self, waiting: list, size: int, stored: bool) -> None:
        """``finished`` for a sync ``admit_one`` admitted, given what it returned."""
        waiting[0] -= 1
        waiting[1] -= size
        assert waiting[0] >= 0
        assert waiting[1] >= 0
        if stored:
            waiting[2] = self._now_s()

    def waiting(self, topic: str, partition: int) -> int:
        """Syncs of the partition admitted and not yet answered."""
        waiting = self._waiting.get((topic, partition))
        return 0 if waiting is None else waiting[0]

    @property
    def master(self) -> str:
        """``host:port`` of the connection that sent the last sync while it is open, or ``-``."""
        connection = self._master_connection
        if connection is None or not self._is_open(connection):
            return "-"
        return self._master_address

    def stats_body(self) -> bytes:
        """The body of ``stats sync`` on a gregor slave (see the module docstring)."""
        lines = [f"role {ROLE}", f"master {self.master}"]
        logs = sorted(self._partitions(), key=lambda log: (log.topic, log.partition))
        for partition_log in logs:
            waiting = self._waiting.get((partition_log.topic, partition_log.partition))
            last_sync_ms = 0 if waiting is None else int(waiting[2] * 1000)
            lines.append(
                f"partition {partition_log.topic}-{partition_log.partition} "
                f"{partition_log.max_offset} {last_sync_ms}"
            )
        return ("\r\n".join(lines) + "\r\n").encode()


def _takes(count: int, size_total: int, size: int) -> bool:
    """The admission rule: whether a partition with ``count`` syncs of ``size_total`` body
    bytes waiting takes one more of ``size`` bytes."""
    return count < SYNCS_WAITING_MAX and size_total + size <= SYNC_BYTES_WAITING_MAX


def _peer_text(connection: Any) -> str:
    peer = connection.transport.getPeer()
    host, port = getattr(peer, "host", None), getattr(peer, "port", None)
    if host is None:
        return "-"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def with_status_topic(config: Any) -> Any:
    """``config`` (a ``BrokerConfig``) with the status-test topic, one partition, added
    unless a section names it exactly; its other settings are the ``[system]`` ones."""
    if any(topic.name == STATUS_TEST_TOPIC for topic in config.topics):
        return config
    status = dataclasses.replace(config.topic_config(STATUS_TEST_TOPIC), num_partitions=1)
    return config.with_overrides(topics=(*config.topics, status))


def without_zookeeper(config: Any) -> Any:
    """``config`` with ZooKeeper disabled: a gregor slave registers nothing and needs none."""
    return config.with_overrides(zookeeper=dataclasses.replace(config.zookeeper, enabled=False))
