"""Consumer group membership, rebalance and ZooKeeper offsets.

``ZkConsumerGroup`` registers the ephemeral ``R/consumers/G/ids/<consumerIdString>`` (data:
the comma-joined topics), watches ``consumers/G/ids`` and ``brokers/topics-sub/T``, and runs
Java's ``ZKLoadRebalanceListener``: consumers and partitions are read, the strategy of
``meta.client.zk.balance`` assigns this consumer its share, owner nodes
``consumers/G/owners/T/B-P`` (ephemeral, data = consumerIdString) are released and taken,
and the ``FetchManager`` is restarted on the new set. Offsets live in
``consumers/G/offsets/T/B-P`` as ``<msgId>-<offset>``.

Invariants:

* Watches and state listeners only enqueue a token; one rebalance thread drains duplicate
  tokens and rebalances under ``_lock`` (up to ``ATTEMPTS`` attempts, ``zk_sync_s`` apart).
* Offsets are committed (modified entries only) before any assignment changes, so the next
  owner of a released partition reads where this consumer stopped.
* A partition kept across a rebalance keeps its in-memory offset; a newly owned one loads
  the committed offset (or the configured start offset).
* While the ZooKeeper connection is SUSPENDED, no get is sent and no offset is written
  (the fetcher is paused, modified offsets wait); CONNECTED on the same session resumes.
* After the session expires, in-memory state is dropped (uncommitted progress is lost, as in
  Java) and the consumer registers again and rebalances once reconnected.

Thread-safety: public methods are thread-safe; ZooKeeper is called only from the caller of
``start``/``commit``/``close`` and from the rebalance thread, never from kazoo callbacks.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Mapping

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from meta.client.cluster import (
    BrokerAddress,
    Partition,
    consumer_partition_strings,
    format_offset,
    java_string_key,
    parse_offset,
)
from meta.client.fetch.manager import FetchManager, FetchRequest
from meta.client.zk.balance import assign
from meta.client.zk.cluster_view import normalize_root
from meta.errors import ClientError
from meta.protocol.commands import LONG_MAX

log = logging.getLogger("meta.client")

ATTEMPTS = 7
"""Rebalance attempts per trigger (Java's ``maxRebalanceRetries`` default)."""

_REBALANCE, _STOP = "rebalance", "stop"
CLOSE_WAIT_S = 10.0
"""How long ``close`` waits for a rebalance in progress (one stuck in a ZooKeeper call that
waits for the connection) before it stops the fetcher without the ZooKeeper cleanup."""


class _AttemptFailed(Exception):
    """One rebalance attempt cannot complete (a node vanished, an owner node is taken)."""


class ZkConsumerGroup:
    """One consumer's membership in its group.

    Args:
        client: the factory's started ``KazooClient``.
        root: the MetaQ root (``zk.zkRoot``).
        group: the consumer group.
        consumer_id: this consumer's id string ``<group>_<id>``.
        topics: topic -> fetch ``max_size``.
        strategy: ``"DEFAULT"`` or ``"CONSIST"``.
        fetcher: the consumer's fetch manager (stopped).
        start_offset: the offset of partitions without a committed offset.
        from_max_offset: start those partitions at the newest message instead (compatibility.md).
        zk_sync_s: pause after a failed attempt (Java's ``zkSyncTimeMs``).
        always_from_max: start every newly owned partition at the newest message, committed
            offset or not (Java's ``alwaysConsumeFromMaxOffset``).

    Subclasses that keep offsets elsewhere override ``commit`` and ``load_offset``.
    """

    def __init__(
        self,
        client: KazooClient,
        root: str,
        group: str,
        consumer_id: str,
        topics: Mapping[str, int],
        strategy: str,
        fetcher: FetchManager,
        start_offset: int = 0,
        from_max_offset: bool = False,
        zk_sync_s: float = 1.0,
        always_from_max: bool = False,
    ) -> None:
        self._client = client
        self._root = normalize_root(root)
        self._group_path = f"{self._root}/consumers/{group}"
        self.consumer_id = consumer_id
        self._topics = dict(topics)
        self._strategy = strategy
        self._fetcher = fetcher
        self._start_offset = LONG_MAX if from_max_offset else start_offset
        self._zk_sync_s = zk_sync_s
        self._always_from_max = always_from_max
        self._lock = threading.RLock()
        self._tokens: queue.Queue[str] = queue.Queue()
        self._owned: set[tuple[str, str]] = set()
        self._previous: object = None
        self._needs_register = False
        self._suspended = False
        self._rebalance_pending = False  # a rebalance was skipped or cut short while suspended
        self._close_once = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="meta-rebalance", daemon=True)

    @property
    def fetcher(self) -> FetchManager:
        """The consumer's fetch manager (its modified offsets are what ``commit`` writes)."""
        return self._fetcher

    @property
    def start_offset(self) -> int:
        """Where a partition without a committed offset starts (``LONG_MAX``: the newest)."""
        return self._start_offset

    @property
    def ids_path(self) -> str:
        return f"{self._group_path}/ids/{self.consumer_id}"

    def owned(self) -> set[tuple[str, str]]:
        """The ``(topic, B-P)`` pairs this consumer owns now."""
        with self._lock:
            return set(self._owned)

    def start(self) -> None:
        """Register, watch, rebalance synchronously, then start the thread.

        Raises:
            ClientError: registration or every rebalance attempt failed.
        """
        with self._lock:
            try:
                self._register()
            except KazooException as error:
                raise ClientError(
                    f"cannot register consumer {self.consumer_id}: {error}"
                ) from error
            ChildrenWatch(self._client, f"{self._group_path}/ids", self._children_changed)
            for topic in self._topics:
                path = f"{self._root}/brokers/topics-sub/{topic}"
                self._client.ensure_path(path)
                ChildrenWatch(self._client, path, self._children_changed)
            self._client.add_listener(self._state_changed)
            if not self._synced_rebalance():
                raise ClientError(f"consumer {self.consumer_id}: rebalance failed {ATTEMPTS} times")
        self._thread.start()

    def commit(self) -> None:
        """Write every modified offset to ``consumers/G/offsets/T/B-P``.

        While the connection is suspended nothing is written; the entries stay modified
        for the next commit.
        """
        if self._suspended:
            log.info("offset commit of %s deferred: ZooKeeper is suspended", self.consumer_id)
            return
        entries = self._fetcher.take_modified()
        for index, (topic, partition, msg_id, offset) in enumerate(entries):
            path = f"{self._group_path}/offsets/{topic}/{partition}"
            data = format_offset(msg_id, offset).encode()
            try:
                try:
                    self._client.set(path, data)
                except NoNodeError:
                    self._client.create(path, data, makepath=True)
            except KazooException as error:
                log.warning("cannot commit offsets of %s: %s", self.consumer_id, error)
                self._fetcher.mark_modified([(t, p) for t, p, _i, _o in entries[index:]])
                return

    def close(self) -> None:
        """Stop rebalancing and fetching, commit, delete the owner and ids nodes. Idempotent.

        Bounded: a rebalance stuck in a ZooKeeper call (the connection is down) is waited
        for at most ``CLOSE_WAIT_S``; the fetcher is then stopped without the ZooKeeper
        cleanup (the ephemeral nodes go with the session) and the rebalance thread ends
        once the factory closes the ZooKeeper client.
        """
        with self._close_once:
            if self._closed:
                return
            self._closed = True
        self._tokens.put(_STOP)
        if self._thread.is_alive():
            self._thread.join(CLOSE_WAIT_S)
        self._client.remove_listener(self._state_changed)
        if not self._lock.acquire(timeout=CLOSE_WAIT_S if not self._thread.is_alive() else 0):
            log.warning("consumer %s: a rebalance is stuck on ZooKeeper; closing without it",
                        self.consumer_id)  # fmt: skip
            self._fetcher.stop()
            return
        try:
            self._fetcher.stop()
            if self._suspended or not self._client.connected:
                # Calls would block until ZooKeeper is back; the ephemeral nodes go with the
                # session, and the uncommitted progress is delivered again (at least once).
                log.warning("consumer %s closes without ZooKeeper: offsets not committed",
                            self.consumer_id)  # fmt: skip
                return
            try:
                self.commit()
                self._release_all()
                self._client.delete(self.ids_path)
            except KazooException as error:
                log.warning("consumer %s left nodes behind: %s", self.consumer_id, error)
        finally:
            self._lock.release()

    def _children_changed(self, _children: list[str]) -> bool | None:
        """ChildrenWatch callback (kazoo's event thread): only enqueue."""
        if self._closed:
            return False  # Tells kazoo to drop the watch.
        self._tokens.put(_REBALANCE)
        return None

    @property
    def suspended(self) -> bool:
        """True while the ZooKeeper connection is suspended or the session is lost."""
        return self._suspended

    def _state_changed(self, state: str) -> None:
        """State listener (kazoo's connection thread): never call ZooKeeper from here.

        SUSPENDED pauses fetching and offset commits: the session may expire meanwhile and
        another member take these partitions over, so reading on would only make
        duplicates, and commits cannot reach ZooKeeper. CONNECTED on the same session
        resumes both; LOST keeps them paused until the new session re-registered and
        rebalanced (which restarts the fetcher).
        """
        if state == KazooState.SUSPENDED:
            self._suspended = True
            self._fetcher.pause()
            log.warning("consumer %s: ZooKeeper connection suspended, fetching paused",
                        self.consumer_id)  # fmt: skip
        elif state == KazooState.LOST:
            self._suspended = True
            self._fetcher.pause()
            self._needs_register = True
            self._tokens.put(_REBALANCE)
        elif state == KazooState.CONNECTED:
            self._suspended = False
            if self._needs_register:
                self._tokens.put(_REBALANCE)
            else:
                self._fetcher.resume()
                log.info("consumer %s: ZooKeeper connection back, fetching resumed",
                         self.consumer_id)  # fmt: skip
                if self._rebalance_pending:
                    self._tokens.put(_REBALANCE)

    def _run(self) -> None:
        while True:
            tokens = [self._tokens.get()]
            while not self._tokens.empty():
                tokens.append(self._tokens.get_nowait())
            if _STOP in tokens:
                return
            if self._suspended:
                # ZooKeeper calls would wait for the connection; CONNECTED re-queues this.
                self._rebalance_pending = True
                continue
            with self._lock:
                if self._closed:
                    return
                self._rebalance_pending = False
                if self._needs_register and not self._reregister():
                    continue
                self._synced_rebalance()

    def _reregister(self) -> bool:
        """After session expiry: drop the state and register again (False: not yet)."""
        self._fetcher.stop()
        self._owned.clear()
        self._previous = None
        try:
            self._register()
        except KazooException as error:
            log.warning("consumer %s cannot register again yet: %s", self.consumer_id, error)
            return False
        self._needs_register = False
        if not self._suspended:
            self._fetcher.resume()
        log.info("consumer %s registered again after session expiry", self.consumer_id)
        return True

    def _register(self) -> None:
        data = ",".join(self._topics).encode()
        self._client.ensure_path(f"{self._group_path}/ids")
        try:
            self._client.create(self.ids_path, data, ephemeral=True)
        except NodeExistsError:
            existing, _stat = self._client.get(self.ids_path)
            if existing != data:
                raise ClientError(
                    f"consumer node {self.ids_path} exists with {existing!r}"
                ) from None

    def _synced_rebalance(self) -> bool:
        """Up to ``ATTEMPTS`` attempts; after a failure release everything and pause."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                self._attempt()
                return True
            except (_AttemptFailed, KazooException, ClientError) as error:
                log.info("rebalance attempt %d of %s failed: %s", attempt, self.consumer_id, error)
                self._fetcher.stop()
                if self._suspended:
                    # Cleanup would wait for the connection. Ownership is kept as it is (the
                    # next attempt releases what it must); CONNECTED rebalances again.
                    self._rebalance_pending = True
                    self._previous = None
                    return False
                try:
                    self.commit()
                    self._release_all()
                except KazooException as failure:
                    log.warning("cannot release partitions of %s: %s", self.consumer_id, failure)
                self._owned.clear()
                self._previous = None
                if attempt < ATTEMPTS and not self._closed:
                    threading.Event().wait(self._zk_sync_s)
        log.error("consumer %s: rebalance failed %d times", self.consumer_id, ATTEMPTS)
        return False

    def _attempt(self) -> None:
        """One rebalance attempt; raises ``_AttemptFailed`` to retry."""
        consumers = self._consumers_per_topic()
        partitions = {topic: self._partition_strings(topic) for topic in self._topics}
        cluster = self._read_cluster()
        state = (consumers, partitions, cluster)
        if state == self._previous:
            return
        old = self._fetcher.stop()
        self.commit()
        wanted: set[tuple[str, str]] = set()
        for topic in self._topics:
            members, parts = consumers.get(topic, []), partitions[topic]
            if members and parts:
                chosen = assign(self._strategy, self.consumer_id, members, parts)
                wanted.update((topic, partition) for partition in chosen)
        for key in sorted(self._owned - wanted):
            self._delete_owner(key)
            self._owned.discard(key)
        for key in sorted(wanted - self._owned):
            self._take_owner(key)
            self._owned.add(key)
        requests = [self._request(key, old.get(key), cluster) for key in sorted(self._owned)]
        self._fetcher.start(requests)
        self._previous = state
        log.info("consumer %s owns %s", self.consumer_id, sorted(self._owned))

    def _request(
        self, key: tuple[str, str], old: FetchRequest | None, cluster: dict[int, BrokerAddress]
    ) -> FetchRequest:
        topic, text = key
        partition = Partition.parse(text)
        if old is not None:
            msg_id, offset = old.msg_id, old.offset
        elif self._always_from_max:
            msg_id, offset = -1, LONG_MAX  # The tail, committed offset or not.
        else:
            msg_id, offset = self.load_offset(topic, text)
        address = cluster.get(partition.broker_id)
        return FetchRequest(topic, partition, address, offset, msg_id, max_size=self._topics[topic])

    def load_offset(self, topic: str, partition: str) -> tuple[int, int]:
        """``(msg_id, offset)`` committed for a newly owned partition (ZooKeeper's node).

        Returns:
            ``(-1, start_offset)`` when nothing is committed.
        """
        try:
            data, _stat = self._client.get(f"{self._group_path}/offsets/{topic}/{partition}")
        except NoNodeError:
            return -1, self._start_offset
        return parse_offset(data.decode("utf-8", "replace"))

    def _consumers_per_topic(self) -> dict[str, list[str]]:
        """Group id -> topics of every registered consumer, sorted as Java strings."""
        ids_path = f"{self._group_path}/ids"
        per_topic: dict[str, list[str]] = {}
        for name in self._client.get_children(ids_path):
            try:
                data, _stat = self._client.get(f"{ids_path}/{name}")
            except NoNodeError:
                raise _AttemptFailed(f"consumer {name} left during the rebalance") from None
            for topic in data.decode("utf-8", "replace").split(","):
                if topic:
                    per_topic.setdefault(topic, []).append(name)
        if self.consumer_id not in {c for members in per_topic.values() for c in members}:
            raise _AttemptFailed(f"own node {self.ids_path} is missing")
        return {topic: sorted(members, key=java_string_key) for topic, members in per_topic.items()}

    def _partition_strings(self, topic: str) -> list[str]:
        path = f"{self._root}/brokers/topics-sub/{topic}"
        children = {}
        for name in self._children(path):
            data = self._data(f"{path}/{name}")
            if data is not None:
                children[name] = data
        return consumer_partition_strings(children)

    def _read_cluster(self) -> dict[int, BrokerAddress]:
        """Broker id -> the master's address, else a slave's (masters preferred)."""
        ids_path = f"{self._root}/brokers/ids"
        cluster: dict[int, BrokerAddress] = {}
        for name in self._children(ids_path):
            if not name.isdigit():
                continue
            children = self._children(f"{ids_path}/{name}")
            slaves = sorted(c for c in children if c.startswith("slave") and c[5:].isdigit())
            for child in (["master"] if "master" in children else []) + slaves:
                data = self._data(f"{ids_path}/{name}/{child}")
                if data is None:
                    continue
                try:
                    address = BrokerAddress.parse_uri(data.decode("utf-8", "replace"))
                except ClientError as error:
                    log.warning("ignoring broker node %s/%s: %s", name, child, error)
                    continue
                slave_id = int(child[5:]) if child != "master" else -1
                cluster[int(name)] = BrokerAddress(address.host, address.port, slave_id)
                break
        return cluster

    def _take_owner(self, key: tuple[str, str]) -> None:
        path = f"{self._group_path}/owners/{key[0]}/{key[1]}"
        mine = self.consumer_id.encode()
        try:
            self._client.create(path, mine, ephemeral=True, makepath=True)
        except NodeExistsError:
            owner = self._data(path)
            if owner != mine:
                raise _AttemptFailed(f"{path} is still owned by {owner!r}") from None

    def _delete_owner(self, key: tuple[str, str]) -> None:
        path = f"{self._group_path}/owners/{key[0]}/{key[1]}"
        if self._data(path) == self.consumer_id.encode():
            try:
                self._client.delete(path)
            except NoNodeError:
                pass

    def _release_all(self) -> None:
        for key in sorted(self._owned):
            self._delete_owner(key)
        self._owned.clear()

    def _children(self, path: str) -> list[str]:
        try:
            return self._client.get_children(path)
        except NoNodeError:
            return []

    def _data(self, path: str) -> bytes | None:
        try:
            return self._client.get(path)[0]
        except NoNodeError:
            return None
