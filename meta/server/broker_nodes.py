"""``BrokerNodes``: the broker's ZooKeeper nodes and the kazoo session they live in.

What lives here: the registry's worker-thread half and the pure
path and payload helpers. ``BrokerNodes`` owns the ``KazooClient``: it connects, claims the
broker node, writes, rewrites and deletes topic nodes, unregisters and closes. The nodes
(``R`` = ``zk.zkRoot``, ``B`` = broker id, ``x`` = ``m`` for a master or ``s<N>`` for slave
``N``):

* ``R/brokers/ids/B/master`` (ephemeral, master) or ``R/brokers/ids/B/slave<N>`` (ephemeral,
  slave) = the broker URI; a master also writes the URI into the persistent ``R/brokers/ids/B``;
* ``R/brokers/ids/B/master_config_checksum`` (ephemeral, master) = decimal config CRC32;
* for each registered topic ``T``: ``R/brokers/topics/T/B-x`` = decimal partition count, and
  ``R/brokers/topics-pub/T/B-x`` / ``R/brokers/topics-sub/T/B-x`` = compact JSON
  ``{"numParts":n,"broker":"B-x"}``, each only while ``acceptPublish`` / ``acceptSubscribe``.

An async slave also reads, through the same session, its master's node and the master's
``topics-sub`` entries (``read_master``; the slave's replicator interprets them).

Invariants:

* Every missing parent is created persistent with empty data (kazoo ``makepath``).
* A ``master``/``slave<N>`` node owned by another live session is never taken over:
  ``claim_broker_node`` reports its holder; waiting it out is the caller's business.
* A node whose name is ours alone (the checksum, topic nodes) left by an older session of this
  broker is replaced.
* Every ZooKeeper request waits at most ``zk.zkConnectionTimeoutMs`` for its answer.
* The ``[zookeeper]`` settings and the paths derived from them are fixed at construction.

Thread affinity: ``BrokerNodes`` methods are for the registry's worker thread only; it is one
thread, so ZooKeeper operations are serialised. Its path attributes never change and may be
read from any thread. The callbacks it is given (the state listener, the node-change callback)
run on kazoo's own thread, where ZooKeeper must not be called. ``broker_suffix``,
``topic_payload`` and ``topic_paths`` are pure and thread-safe.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.handlers.threading import KazooTimeoutError

from meta.config import TopicConfig, ZkConfig
from meta.errors import MetaError

log = logging.getLogger("meta.registry")

# kazoo reconnects forever; cap its back-off so a broker notices a recovered server quickly.
RECONNECT_DELAY_MAX_S = 2.0
# How many times a create that races with another session's delete is tried again.
CREATE_ATTEMPTS_MAX = 3
# The three parents of a topic's nodes: legacy partition count, publish JSON, subscribe JSON.
TOPIC_KINDS = ("topics", "topics-pub", "topics-sub")


class RegistryError(MetaError):
    """ZooKeeper registration failed; the text names the connect string or the node."""


def broker_suffix(broker_id: int, slave_id: int = -1) -> str:
    """Return the child name a broker uses under topic nodes: ``B-m`` or ``B-s<N>``."""
    return f"{broker_id}-m" if slave_id < 0 else f"{broker_id}-s{slave_id}"


def topic_payload(num_partitions: int, suffix: str) -> str:
    """Return the topics-pub/topics-sub JSON, ``numParts`` first, no spaces (Jackson's form)."""
    return json.dumps({"numParts": num_partitions, "broker": suffix}, separators=(",", ":"))


def topic_paths(root: str, topic: str, suffix: str) -> tuple[str, str, str]:
    """Return a broker's ``topics``, ``topics-pub`` and ``topics-sub`` nodes of ``topic``.

    Args:
        root: ``zk.zkRoot`` as normalised by the config (``""`` for ``/``).
        topic: the topic name.
        suffix: the broker's ``broker_suffix``.
    """
    legacy, publish, subscribe = (f"{root}/brokers/{kind}/{topic}/{suffix}" for kind in TOPIC_KINDS)
    return legacy, publish, subscribe


class BrokerNodes:
    """The ZooKeeper nodes of one master or slave broker, and the session they live in.

    Args:
        zookeeper: the ``[zookeeper]`` settings: connect string, timeouts and root.
        broker_id: the broker id ``B``.
        broker_uri: ``meta://host:port`` as clients must connect to it.
        slave_id: ``-1`` for a master, ``N >= 0`` for async slave ``N``.
        kazoo_factory: builds the client from ``KazooClient`` keyword arguments (tests).
    """

    def __init__(
        self,
        zookeeper: ZkConfig,
        broker_id: int,
        broker_uri: str,
        slave_id: int = -1,
        kazoo_factory: Callable[..., KazooClient] | None = None,
    ) -> None:
        self._zookeeper = zookeeper
        self._uri = broker_uri
        self._is_master = slave_id < 0
        self._kazoo_factory = kazoo_factory or KazooClient
        self.suffix = broker_suffix(broker_id, slave_id)
        self.master_suffix = broker_suffix(broker_id)
        self.ids_path = f"{zookeeper.root}/brokers/ids/{broker_id}"
        node = "master" if self._is_master else f"slave{slave_id}"
        self.broker_path = f"{self.ids_path}/{node}"
        self.checksum_path = f"{self.ids_path}/master_config_checksum"
        self._client: KazooClient | None = None
        self._listener: Callable[[str], None] | None = None
        self._claimed = False

    def connect(self, listener: Callable[[str], None]) -> int | None:
        """Build and start the client.

        Args:
            listener: kazoo state listener; it runs on kazoo's thread with a ``KazooState``.

        Returns:
            The new session id.

        Raises:
            RegistryError: no connection within ``zk.zkConnectionTimeoutMs``.
        """
        zk = self._zookeeper
        connection_timeout_s = zk.connection_timeout_ms / 1000
        client = self._kazoo_factory(
            hosts=zk.connect,
            timeout=zk.session_timeout_ms / 1000,
            connection_retry={"max_tries": -1, "max_delay": RECONNECT_DELAY_MAX_S},
        )
        try:
            client.start(timeout=connection_timeout_s)
        except KazooTimeoutError:
            raise RegistryError(
                f"cannot connect to ZooKeeper at {zk.connect} within {connection_timeout_s:g} s "
                "(zk.zkConnect / zk.zkConnectionTimeoutMs)"
            ) from None
        client.add_listener(listener)
        self._client = client
        self._listener = listener
        return self.session_id()

    def session_id(self) -> int | None:
        """Return the live session id, or None while kazoo has none.

        Raises:
            RegistryError: not connected (``connect`` not called, or closed).
        """
        client_id = self._connected_client().client_id
        return client_id[0] if client_id else None

    def claim_broker_node(self, on_change: Callable[[], None]) -> str | None:
        """Create our master/slave node (and, for a master, write the URI into ``ids/B``).

        Args:
            on_change: called on kazoo's thread when a node held by another session changes
                or goes away (a one-shot watch).

        Returns:
            None once the node is ours, else the data of the node another session holds.
        """
        client = self._connected_client()
        data = self._uri.encode()
        for _ in range(CREATE_ATTEMPTS_MAX):
            try:
                self._wait(
                    client.create_async(self.broker_path, data, ephemeral=True, makepath=True)
                )
                break
            except NodeExistsError:
                pass
            watch = _node_watch(on_change)
            try:
                holder, stat = self._wait(client.get_async(self.broker_path, watch=watch))
            except NoNodeError:
                continue
            if stat.ephemeralOwner != self.session_id():
                return holder.decode("utf-8", "replace")
            self._wait(client.set_async(self.broker_path, data))
            break
        else:
            return "(a node that keeps coming back)"
        self._claimed = True
        if self._is_master:
            self.set_persistent(self.ids_path, self._uri)
        return None

    def write_checksum(self, checksum: int) -> None:
        """Write ``master_config_checksum`` (ephemeral) with ``checksum`` in decimal."""
        self.ensure_ephemeral(self.checksum_path, str(checksum))

    def set_persistent(self, path: str, value: str) -> None:
        """Make ``path`` a node holding ``value``, creating it persistent if it is missing."""
        client = self._connected_client()
        try:
            self._wait(client.set_async(path, value.encode()))
        except NoNodeError:
            try:
                self._wait(client.create_async(path, value.encode(), makepath=True))
            except NodeExistsError:
                self._wait(client.set_async(path, value.encode()))

    def ensure_ephemeral(self, path: str, value: str) -> None:
        """Make ``path`` an ephemeral node of our session holding ``value``.

        Only for nodes whose name is ours alone (topic nodes, the checksum): a copy left by
        an older session of this broker is replaced.

        Raises:
            RegistryError: another session re-creates the node each time it is deleted.
        """
        client = self._connected_client()
        data = value.encode()
        for _ in range(CREATE_ATTEMPTS_MAX):
            try:
                self._wait(client.create_async(path, data, ephemeral=True, makepath=True))
                return
            except NodeExistsError:
                pass
            try:
                _, stat = self._wait(client.get_async(path))
            except NoNodeError:
                continue
            if stat.ephemeralOwner == self.session_id():
                self._wait(client.set_async(path, data))
                return
            log.warning("replacing %s, left by session 0x%x", path, stat.ephemeralOwner)
            self.delete_if_exists(path)
        raise RegistryError(f"cannot create {path}: another session keeps re-creating it")

    def delete_if_exists(self, path: str) -> None:
        """Delete ``path``; a missing node is fine."""
        try:
            self._wait(self._connected_client().delete_async(path))
        except NoNodeError:
            pass

    def write_topic(self, topic: str, topic_config: TopicConfig, rewrite: bool) -> None:
        """Write the three topic nodes; with ``rewrite`` delete them first (a child event).

        Args:
            topic: the topic name.
            topic_config: the settings the nodes are written from.
            rewrite: delete the nodes first, so watchers see the change.
        """
        paths = topic_paths(self._zookeeper.root, topic, self.suffix)
        if rewrite:
            for path in paths:
                self.delete_if_exists(path)
        count = topic_config.num_partitions
        payload = topic_payload(count, self.suffix)
        legacy_path, publish_path, subscribe_path = paths
        self.ensure_ephemeral(legacy_path, str(count))
        for path, accepted in (
            (publish_path, topic_config.accept_publish),
            (subscribe_path, topic_config.accept_subscribe),
        ):
            if accepted:
                self.ensure_ephemeral(path, payload)
            else:
                self.delete_if_exists(path)

    def delete_topic(self, topic: str) -> None:
        """Delete the three nodes of ``topic``; missing ones are fine."""
        for path in topic_paths(self._zookeeper.root, topic, self.suffix):
            self.delete_if_exists(path)

    def read_master(self) -> tuple[bytes | None, dict[str, bytes]]:
        """Read what an async slave copies (the slave's view of its master).

        Returns:
            ``(master, topics)``: the data of ``ids/B/master`` (None when it is missing) and,
            for every topic whose ``topics-sub/T`` has a ``B-m`` child, that child's data
            (the ``{"numParts":n,...}`` JSON, parsed by the caller). Nodes that vanish while
            being read are left out.
        """
        client = self._connected_client()
        master = self._read_or_none(client, f"{self.ids_path}/master")
        subscribe_root = f"{self._zookeeper.root}/brokers/topics-sub"
        try:
            names = self._wait(client.get_children_async(subscribe_root))
        except NoNodeError:
            names = []
        reads = {
            name: client.get_async(f"{subscribe_root}/{name}/{self.master_suffix}")
            for name in names
        }
        topics: dict[str, bytes] = {}
        for name, pending in sorted(reads.items()):
            try:
                topics[name] = self._wait(pending)[0]
            except NoNodeError:
                continue
        return master, topics

    def read_master_checksum(self) -> bytes | None:
        """The data of ``ids/B/master_config_checksum`` (None when it is missing)."""
        return self._read_or_none(
            self._connected_client(), f"{self.ids_path}/master_config_checksum"
        )

    def _read_or_none(self, client: KazooClient, path: str) -> bytes | None:
        try:
            return self._wait(client.get_async(path))[0]
        except NoNodeError:
            return None

    def unregister_and_close(self, topics: list[str]) -> None:
        """Delete our nodes if connected, then close the client.

        Errors are logged, never raised: the ephemeral nodes go away with the session anyway.

        Args:
            topics: every topic whose nodes may exist.
        """
        try:
            if self._client is not None and self._client.connected:
                self._unregister(topics)
            elif self._client is not None:
                log.warning("not connected to ZooKeeper at stop; nodes are left to expire")
        except (KazooException, KazooTimeoutError, RegistryError) as error:
            log.warning(
                "ZooKeeper unregistration incomplete (%r); ephemeral nodes go with the session",
                error,
            )
        finally:
            client, self._client = self._client, None
            if client is not None:
                if self._listener is not None:
                    client.remove_listener(self._listener)
                client.stop()
                client.close()

    def _unregister(self, topics: list[str]) -> None:
        """As Java unregisters: broker node, checksum, ``ids/B``, then the topic nodes."""
        if self._claimed:
            self.delete_if_exists(self.broker_path)
            if self._is_master:
                self.delete_if_exists(self.checksum_path)
                try:
                    self.delete_if_exists(self.ids_path)
                except NotEmptyError:
                    # Slaves are still registered below it: keep the node, clear the URI.
                    self.set_persistent(self.ids_path, "")
        for topic in topics:
            self.delete_topic(topic)

    def call(self, function: Callable[[KazooClient], Any]) -> Any:
        """``function(client)`` with the connected client (the registry's worker thread)."""
        return function(self._connected_client())

    def _connected_client(self) -> KazooClient:
        if self._client is None:
            raise RegistryError("not connected to ZooKeeper")
        return self._client

    def _wait(self, async_result: Any) -> Any:
        # Bounded: a request queued while disconnected would otherwise wait forever.
        return async_result.get(timeout=self._zookeeper.connection_timeout_ms / 1000)


def _node_watch(on_change: Callable[[], None]) -> Callable[[Any], None]:
    """Wrap ``on_change`` as a kazoo watch, which is called with the event."""

    def watch(_event: Any) -> None:
        on_change()

    return watch
