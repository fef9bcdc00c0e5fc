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
* Each reconnection arms new watches: kazoo's own re-arming misses in a race.
* An owner node still held by another consumer does not fail the rebalance: that partition
  waits (``meta.client.zk.owners``) and is tried again alone when its owner node goes away
  or its backoff runs out, while the partitions taken are fetched. Partitions gained are
  added to the running fetcher; it is stopped only when this consumer gives partitions up
  or a kept partition's broker moves, and only until the offsets are committed.
* Offsets are committed (modified entries only) before a partition is released, so its
  next owner reads where this consumer stopped.
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
from functools import partial

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from meta.client.cluster import BrokerAddress, Partition, format_offset, parse_offset
from meta.client.fetch.manager import FetchManager, FetchRequest
from meta.client.zk.balance import share
from meta.client.zk.cluster_view import normalize_root
from meta.client.zk.group_reads import (
    AttemptFailed,
    read_cluster,
    read_consumers,
    read_partitions,
)
from meta.client.zk.owners import PendingOwners, delete_owner, take_owner
from meta.errors import ClientError
from meta.protocol.commands import LONG_MAX

log = logging.getLogger("meta.client")

ATTEMPTS = 7
"""Rebalance attempts per trigger (Java's ``maxRebalanceRetries`` default)."""

_REBALANCE, _RETRY, _REWATCH, _STOP = "rebalance", "retry", "rewatch", "stop"
CLOSE_WAIT_S = 10.0
"""How long ``close`` waits for a rebalance in progress (one stuck in a ZooKeeper call that
waits for the connection) before it stops the fetcher without the ZooKeeper cleanup."""


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
        self._pending = PendingOwners(zk_sync_s)
        self._addresses: dict[tuple[str, str], BrokerAddress | None] = {}
        self._previous: object = None
        self._needs_register = False
        self._suspended = False
        self._rebalance_pending = False  # a rebalance was skipped or cut short while suspended
        self._watch_generation = 0  # of the ChildrenWatches in force (``_arm_watches``)
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

    def waiting(self) -> set[tuple[str, str]]:
        """The ``(topic, B-P)`` pairs assigned to this consumer whose owner node another
        consumer still holds."""
        with self._lock:
            return self._pending.keys

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
            self._arm_watches()
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

    def _arm_watches(self) -> None:
        """Watch the members and the topics' brokers with a new generation of watches (at
        start and after each reconnection, since kazoo's re-arming misses when the connection
        drops while a watch reads); an older one stops at its next call."""
        self._watch_generation += 1
        changed = partial(self._children_changed, self._watch_generation)
        ChildrenWatch(self._client, f"{self._group_path}/ids", changed)
        for topic in self._topics:
            path = f"{self._root}/brokers/topics-sub/{topic}"
            self._client.ensure_path(path)
            ChildrenWatch(self._client, path, changed)

    def _children_changed(self, generation: int, _children: list[str]) -> bool | None:
        """ChildrenWatch callback (kazoo's event thread): only enqueue."""
        if self._closed or generation != self._watch_generation:
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
            self._tokens.put(_REWATCH)
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
            wait_s = None if self._suspended else self._pending.wait_s()
            try:
                tokens = [self._tokens.get(timeout=wait_s)]
            except queue.Empty:
                tokens = []  # The backoff of a waiting partition ran out.
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
                if _REWATCH in tokens:
                    try:
                        self._arm_watches()
                    except KazooException as error:  # Gone again: CONNECTED re-queues this.
                        log.info("consumer %s cannot watch yet: %s", self.consumer_id, error)
                if _REBALANCE in tokens:
                    self._rebalance_pending = False
                    if self._needs_register and not self._reregister():
                        continue
                    self._synced_rebalance()
                if _RETRY in tokens or self._pending.is_due():
                    self._retry_pending()

    def _reregister(self) -> bool:
        """After session expiry: drop the state and register again (False: not yet)."""
        self._fetcher.stop()
        self._owned.clear()
        self._pending.clear()
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
            except (AttemptFailed, KazooException, ClientError) as error:
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
                self._pending.clear()
                self._previous = None
                if attempt < ATTEMPTS and not self._closed:
                    threading.Event().wait(self._zk_sync_s)
        log.error("consumer %s: rebalance failed %d times", self.consumer_id, ATTEMPTS)
        return False

    def _attempt(self) -> None:
        """One rebalance attempt; raises ``AttemptFailed`` to retry."""
        consumers = read_consumers(self._client, self._group_path, self.consumer_id)
        partitions = {
            topic: read_partitions(self._client, self._root, topic) for topic in self._topics
        }
        cluster = read_cluster(self._client, self._root)
        state = (consumers, partitions, cluster)
        if state == self._previous:
            return
        wanted = share(self._strategy, self.consumer_id, consumers, partitions)
        addresses = {key: cluster.get(Partition.parse(key[1]).broker_id) for key in wanted}
        if (
            self._previous is not None
            and wanted == self._owned | self._pending.keys
            and addresses == self._addresses
        ):
            self._previous = state  # The same share on the same brokers: fetching goes on.
            return
        removed = self._owned - wanted
        moved = [k for k in self._owned & wanted if addresses[k] != self._addresses.get(k)]
        if self._previous is None or removed or moved:
            # Stopped only until the offsets are committed: the kept partitions fetch again
            # before the released owner nodes go and while the new ones are taken.
            old = self._fetcher.stop()
            self.commit()
            kept = sorted(self._owned & wanted)
            self._fetcher.start([self._request(key, old.get(key), cluster) for key in kept])
            for key in sorted(removed):
                delete_owner(self._client, self._owner_path(key), self.consumer_id)
                self._owned.discard(key)
        held = {
            key
            for key in sorted(wanted - self._owned)
            if not take_owner(self._client, self._owner_path(key), self.consumer_id)
        }
        taken = sorted(wanted - self._owned - held)
        self._owned.update(taken)
        self._pending.replace(held)
        self._fetcher.add([self._request(key, None, cluster) for key in taken])
        self._previous, self._addresses = state, addresses
        log.info("consumer %s owns %s", self.consumer_id, sorted(self._owned))
        if held:
            log.info("consumer %s waits for %s, still held by their previous owner",
                     self.consumer_id, sorted(held))  # fmt: skip
            self._watch_owners()

    def _retry_pending(self) -> None:
        """Try the waiting partitions again, each alone; fetch those taken at once."""
        if self._previous is None or not self._pending:
            return
        taken = []
        try:
            for key in sorted(self._pending.keys):
                if take_owner(self._client, self._owner_path(key), self.consumer_id):
                    self._owned.add(key)
                    self._pending.taken([key])
                    taken.append(key)
            cluster = self._previous[2]  # type: ignore[index]
            requests = [self._request(key, None, cluster) for key in taken]
        except (KazooException, ClientError) as error:
            # What was taken is owned; a full rebalance fetches it (or releases it).
            log.info("consumer %s: retry of waiting partitions failed: %s", self.consumer_id,
                     error)  # fmt: skip
            self._previous = None
            self._tokens.put(_REBALANCE)
            return
        if taken:
            self._fetcher.add(requests)
            log.info("consumer %s took %s; owns %s", self.consumer_id, taken, sorted(self._owned))
        if self._pending:
            self._pending.still_held()
            self._watch_owners()

    def _watch_owners(self) -> None:
        """Watch each waiting partition's owner node: its deletion retries at once."""
        try:
            for key in sorted(self._pending.keys):
                if self._client.exists(self._owner_path(key), watch=self._owner_changed) is None:
                    self._tokens.put(_RETRY)
        except KazooException as error:
            log.info("consumer %s cannot watch owner nodes (the backoff retries): %s",
                     self.consumer_id, error)  # fmt: skip

    def _owner_changed(self, _event: object) -> None:
        """Data watch on a waiting partition's owner node (kazoo's event thread)."""
        if not self._closed:
            self._tokens.put(_RETRY)

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

    def _owner_path(self, key: tuple[str, str]) -> str:
        return f"{self._group_path}/owners/{key[0]}/{key[1]}"

    def _release_all(self) -> None:
        for key in sorted(self._owned):
            delete_owner(self._client, self._owner_path(key), self.consumer_id)
        self._owned.clear()
        self._pending.clear()
