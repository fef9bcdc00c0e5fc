"""The producer's view of the cluster in ZooKeeper. kazoo is
imported only by the client's ``meta.client.zk`` package (this module, ``group``, ``spark``).

``connect_zookeeper`` starts a ``KazooClient`` bounded by the connection timeout.
``ZkClusterView`` keeps, for every published topic, a ``TopicSnapshot``: the topic's producer
partitions (the ``B-m`` children of ``R/brokers/topics-pub/T``, numerically sorted) and the
master URI of each of those brokers (the data of ``R/brokers/ids/B/master``). Slave nodes are
never read, so producers never write to a slave.

Invariants:

* ``snapshot(topic)`` returns an immutable object that is replaced as a whole, so a reader
  never sees half-built state; an unpublished topic has ``EMPTY_SNAPSHOT``.
* Every rebuild reads the children and the node data afresh under one lock, so rebuilds are
  serialized and the last one reflects the latest state (a stale read never wins).
* ``on_change(topic, snapshot)`` is called, under that lock, whenever a topic's snapshot
  changes, and with ``EMPTY_SNAPSHOT`` when its last publisher unpublishes. It runs on
  kazoo's event thread or the publishing thread and must only hand work over (the producer
  updates pool bookkeeping; brokers are connected lazily by senders, never from here).
* A caller never waits for ZooKeeper longer than the operation timeout per read; kazoo's
  own unbounded waits (a ``ChildrenWatch`` being set up) run on kazoo's worker threads.
* SUSPENDED or LOST: the last snapshots stay in use (logged). On the next CONNECTED every
  published topic is rebuilt on a kazoo worker thread, because kazoo's ``ChildrenWatch``
  re-arms itself after a reconnect but skips its callback when the child names did not
  change, which would miss a broker that came back on another port under the same names.

Thread-safety: every public method is thread-safe. Kazoo runs watch callbacks on its event
thread and state listeners on its connection thread; the state listener only sets a flag and
spawns the rebuild, it never calls ZooKeeper itself (STYLE 12).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch

from meta.client.cluster import BrokerAddress, Partition, master_broker_ids, producer_partitions
from meta.client.zk.bounded import BoundedCalls
from meta.errors import ClientError

log = logging.getLogger("meta.client")

ZK_ERRORS = (KazooException, ClientError)
"""What a ZooKeeper read can raise here (``BoundedCalls`` turns most into ClientError)."""


@dataclass(frozen=True)
class TopicSnapshot:
    """A topic's producer partitions and the master address of each of their brokers."""

    partitions: tuple[Partition, ...] = ()
    brokers: Mapping[int, BrokerAddress] = field(default_factory=lambda: MappingProxyType({}))


EMPTY_SNAPSHOT = TopicSnapshot()

# kazoo reconnects forever, but its back-off grows to a minute by default: a client could then
# miss a recovered ZooKeeper until its session expired. Two seconds at most between attempts.
RECONNECT_DELAY_MAX_S = 2.0

SnapshotCallback = Callable[[str, TopicSnapshot], None]


def normalize_root(root: str) -> str:
    """Java's root normalisation: add a leading ``/``, drop one trailing ``/``."""
    if not root.startswith("/"):
        root = "/" + root
    if root.endswith("/") and len(root) > 1:
        root = root[:-1]
    return root


def connect_zookeeper(
    connect: str, session_timeout_ms: int, connection_timeout_ms: int
) -> KazooClient:
    """Start a ``KazooClient``; fail within the connection timeout if ZooKeeper is unreachable.

    Raises:
        ClientError: no connection within ``connection_timeout_ms`` (the text names
            ``connect``), or a malformed connect string.
    """
    try:
        client = KazooClient(
            hosts=connect,
            timeout=session_timeout_ms / 1000,
            connection_retry={"max_tries": -1, "max_delay": RECONNECT_DELAY_MAX_S},
        )
    except ValueError as error:
        raise ClientError(f"malformed ZooKeeper connect string {connect!r}: {error}") from error
    try:
        client.start(timeout=connection_timeout_ms / 1000)
    except KazooTimeoutError:
        # kazoo has stopped and closed the client already.
        raise ClientError(
            f"cannot connect to ZooKeeper at {connect} within {connection_timeout_ms} ms"
        ) from None
    return client


def close_zookeeper(client: KazooClient) -> None:
    """Stop and close a client started by ``connect_zookeeper`` (its threads end). Idempotent."""
    try:
        client.stop()
    finally:
        client.close()


class _Topic:
    __slots__ = ("generation", "references", "watched")

    def __init__(self) -> None:
        self.references = 0
        self.watched = False  # a live ChildrenWatch calls _children_changed for this topic
        self.generation = 0  # of the ChildrenWatch in force; older ones stop at their next call


class ZkClusterView:
    """Per-topic producer snapshots kept up to date by ZooKeeper watches.

    Args:
        client: a started ``KazooClient`` (owned by the caller).
        root: the MetaQ root (``zk.zkRoot``), normalised as Java does.
        on_change: called as ``on_change(topic, snapshot)``; see the module invariants.
        operation_timeout_s: bound on each ZooKeeper read done for a caller.
        connect: the connect string, named in errors.
    """

    def __init__(
        self,
        client: KazooClient,
        root: str,
        on_change: SnapshotCallback | None = None,
        operation_timeout_s: float = 10.0,
        connect: str = "",
    ) -> None:
        self._client = client
        self._calls = BoundedCalls(client, operation_timeout_s, connect)
        self._root = normalize_root(root)
        self._on_change = on_change
        # Re-entrant: creating a ChildrenWatch calls _children_changed on the same thread.
        self._lock = threading.RLock()
        self._topics: dict[str, _Topic] = {}
        self._snapshots: dict[str, TopicSnapshot] = {}
        self._stale = False
        self._closed = False
        client.add_listener(self._state_changed)

    def publish_path(self, topic: str) -> str:
        """``R/brokers/topics-pub/T``."""
        return f"{self._root}/brokers/topics-pub/{topic}"

    def publish(self, topic: str) -> None:
        """Watch ``topic`` (one more reference) and load its snapshot before returning.

        The first publish of a topic reads ZooKeeper: each read waits at most the operation
        timeout (a few reads: the topic node, its publishers, their brokers' master nodes).
        Later ones only count the reference.

        Raises:
            ClientError: ZooKeeper did not answer in time (the text names ZooKeeper, its
                connect string and the timeout), or the view is closed.
        """
        with self._lock:
            if self._closed:
                raise ClientError("the ZooKeeper cluster view is closed")
            entry = self._topics.setdefault(topic, _Topic())
            entry.references += 1
            if entry.references > 1:
                return
            try:
                self._calls.wait(self._client.ensure_path_async(self.publish_path(topic)), topic)
                self._rebuild(topic)
            except ZK_ERRORS as error:
                entry.references -= 1
                raise ClientError(f"cannot publish topic {topic}: {error}") from error
            if not entry.watched:  # else the old watch is still armed: reuse it
                entry.watched = True
                # A new ChildrenWatch reads the children at once with no time bound (kazoo
                # waits for ZooKeeper to come back): a kazoo worker thread creates it, so
                # this caller's wait stays bounded. Its first call rebuilds once more.
                self._client.handler.spawn(self._watch, topic, entry.generation)

    def _watch(self, topic: str, generation: int) -> None:
        """Watch ``topic``'s publishers (a kazoo worker thread, spawned by ``publish``, and
        again after each reconnection)."""
        try:
            ChildrenWatch(
                self._client,
                self.publish_path(topic),
                partial(self._children_changed, topic, generation),
            )
        except ZK_ERRORS as error:
            with self._lock:
                entry = self._topics.get(topic)
                if entry is not None:
                    entry.watched = False
            log.warning("cannot watch topic %s in ZooKeeper: %s", topic, error)

    def unpublish(self, topic: str) -> None:
        """Drop one reference; the last one clears the snapshot (``on_change`` gets it)."""
        with self._lock:
            entry = self._topics.get(topic)
            if entry is None or entry.references == 0:
                return
            entry.references -= 1
            if entry.references == 0 and self._snapshots.pop(topic, None) is not None:
                self._notify(topic, EMPTY_SNAPSHOT)

    def snapshot(self, topic: str) -> TopicSnapshot:
        """The current snapshot of ``topic`` (``EMPTY_SNAPSHOT`` if not published). Lock-free."""
        return self._snapshots.get(topic, EMPTY_SNAPSHOT)

    def read_partitions(self, topic: str) -> list[Partition]:
        """Read ``topic``'s producer partitions once, without watching (``[]`` if none).

        Raises:
            ClientError: ZooKeeper could not be read in time.
        """
        try:
            return producer_partitions(self._read_children(topic))
        except KazooException as error:
            raise ClientError(f"cannot read the partitions of topic {topic}: {error}") from error

    def close(self) -> None:
        """Stop reacting to ZooKeeper (the caller then stops the client). Idempotent."""
        with self._lock:
            self._closed = True
            self._snapshots.clear()
            for entry in self._topics.values():
                entry.references = 0
        self._client.remove_listener(self._state_changed)

    def _children_changed(self, topic: str, generation: int, _children: list[str]) -> bool | None:
        """``ChildrenWatch`` callback (event thread, or the publisher's thread the first time)."""
        with self._lock:
            entry = self._topics.get(topic)
            if entry is not None and generation != entry.generation:
                return False  # A watch replaced after a reconnection: kazoo drops it.
            if self._closed or entry is None or entry.references == 0:
                if entry is not None:
                    entry.watched = False
                return False  # Tells kazoo to drop the watch.
            try:
                self._rebuild(topic)
            except ZK_ERRORS as error:
                # The snapshot stays as it was; the rebuild after reconnecting catches up.
                log.warning("cannot refresh topic %s from ZooKeeper: %s", topic, error)
            return None

    def _state_changed(self, state: str) -> None:
        """kazoo state listener (connection thread): never call ZooKeeper from here."""
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            self._stale = True
            log.warning("ZooKeeper connection %s: producers keep the last broker lists", state)
        elif state == KazooState.CONNECTED and self._stale:
            self._stale = False
            log.info("ZooKeeper connected again: re-reading the published topics")
            self._client.handler.spawn(self._rebuild_all)

    def _rebuild_all(self) -> None:
        """Rebuild every published topic and watch it anew (a kazoo worker thread, after a
        reconnect). kazoo drops every watch with the connection, and its ``ChildrenWatch``
        may miss setting its own again when the connection drops while it is being created;
        so each reconnection arms a new one (the old one stops at its next call)."""
        with self._lock:
            topics = [name for name, entry in self._topics.items() if entry.references]
            for topic in topics:
                if self._closed:
                    return
                try:
                    self._rebuild(topic)
                except ZK_ERRORS as error:
                    log.warning("cannot refresh topic %s after reconnecting: %s", topic, error)
                entry = self._topics[topic]
                entry.generation += 1
                entry.watched = True
                self._client.handler.spawn(self._watch, topic, entry.generation)

    def _rebuild(self, topic: str) -> None:
        """Read ``topic`` afresh and replace its snapshot if it changed (lock held)."""
        children = self._read_children(topic)
        brokers: dict[int, BrokerAddress] = {}
        for broker_id in master_broker_ids(children):
            uri = self._calls.data(f"{self._root}/brokers/ids/{broker_id}/master")
            if uri is None:
                continue  # Registering or leaving: its partitions get NoBrokerError for now.
            try:
                brokers[broker_id] = BrokerAddress.parse_uri(uri.decode("utf-8"))
            except (ClientError, UnicodeDecodeError) as error:
                log.warning("ignoring broker %d of topic %s: %s", broker_id, topic, error)
        snapshot = TopicSnapshot(
            tuple(producer_partitions(children)), MappingProxyType(dict(sorted(brokers.items())))
        )
        if self._snapshots.get(topic) != snapshot:
            self._snapshots[topic] = snapshot
            uris = {broker_id: address.uri for broker_id, address in brokers.items()}
            log.info("topic %s: %d partitions, brokers %s", topic, len(snapshot.partitions), uris)
            self._notify(topic, snapshot)

    def _notify(self, topic: str, snapshot: TopicSnapshot) -> None:
        if self._on_change is None:
            return
        try:
            self._on_change(topic, snapshot)
        except Exception:  # A listener's bug must not stop the watch.
            log.exception("on_change listener failed for topic %s", topic)

    def _read_children(self, topic: str) -> dict[str, bytes]:
        """The children of ``topics-pub/T`` with their data (children gone meanwhile skipped)."""
        path = self.publish_path(topic)
        children = {}
        for name in self._calls.children(path):
            data = self._calls.data(f"{path}/{name}")
            if data is not None:
                children[name] = data
        return children
