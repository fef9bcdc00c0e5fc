"""``ConsumerNode``: the async slave's membership node in its consumer group.

Java's slave is a consumer of its master, built by its own session factory with its own
ZooKeeper client (``SlaveConsumerZooKeeper``). What it writes there, and all it writes
(as Java's slave does):

* the ephemeral ``R/consumers/<slaveGroup>/ids/<slaveGroup>_<host>-<pid>-<uuid>`` whose data
  is the subscribed topics, comma-joined with no spaces (here sorted; Java's order is
  arbitrary), with ``R/consumers/<slaveGroup>/ids`` created as a persistent parent;
* **no owner nodes** (``consumers/G/owners/...``) and **no offsets**
  (``consumers/G/offsets/...``): ``SlaveOffsetStorage.commitOffset`` is a no-op, the copy
  resumes from the local end of each partition.

Several slaves may share a group: each has its own id node (the uuid differs) and ignores
the others. The node is written when the copied topics change, and again after the session
was lost (the ephemeral node went with it); it is deleted and the client closed at
``close``. The id is made once per process (``meta.client.cluster.consumer_id_string``).

Its client is started and closed with ``meta.client.zk.cluster_view`` (``connect_zookeeper``,
``close_zookeeper``); this module imports nothing from kazoo itself (tests/test_tidy.py).

Thread affinity: blocking; run it off the reactor (``threads.deferToThread``), one call at a
time (the replicator serialises its polls and its stop). kazoo's state listener only sets a
flag.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from meta.client.cluster import consumer_id_string

# kazoo's names through the client's ZooKeeper module: tests/test_tidy.py lets only the
# server's registry and the client's zk_* modules import kazoo themselves.
from meta.client.zk.cluster_view import KazooException, close_zookeeper, connect_zookeeper
from meta.config import ZkConfig
from meta.errors import ClientError, MetaError

log = logging.getLogger("meta.slave")

LOST = "LOST"
"""``kazoo.client.KazooState.LOST``: the session expired, its ephemeral nodes are gone."""


def connect(zookeeper: ZkConfig) -> Any:
    """A started kazoo client for ``zookeeper`` (``connect_zookeeper``).

    Raises:
        ClientError: no connection within ``zk.zkConnectionTimeoutMs``.
    """
    return connect_zookeeper(
        zookeeper.connect, zookeeper.session_timeout_ms, zookeeper.connection_timeout_ms
    )


class ConsumerNodeError(MetaError):
    """The node could not be written now (the text says why); the next poll tries again."""


class ConsumerNode:
    """Args:
    zookeeper: the slave broker's ``[zookeeper]`` settings (connect string, root, timeouts).
    group: ``slaveGroup``.
    connector: ``connect`` (tests pass a stand-in).
    """

    def __init__(
        self,
        zookeeper: ZkConfig,
        group: str,
        connector: Callable[[ZkConfig], Any] = connect,
    ) -> None:
        self._zookeeper = zookeeper
        self.consumer_id = consumer_id_string(group, None)
        self.ids_path = f"{zookeeper.root}/consumers/{group}/ids"
        self.path = f"{self.ids_path}/{self.consumer_id}"
        self._connector = connector
        self._client: Any = None
        self._written: bytes | None = None
        self._lost = False  # Set by kazoo's connection thread: the ephemeral node is gone.

    def write(self, topics: Iterable[str]) -> bool:
        """Make the node hold ``topics`` (comma-joined, sorted); True when ZooKeeper was written.

        Raises:
            ConsumerNodeError: no connection, or ZooKeeper refused the write.
        """
        data = ",".join(sorted(set(topics))).encode("utf-8")
        if self._lost:
            self._lost = False
            self._written = None
        if data == self._written:
            return False
        client = self._connect()
        try:
            client.ensure_path(self.ids_path)
            if client.exists(self.path):  # ours: the name is unique to this process
                client.set(self.path, data)
            else:
                client.create(self.path, data, ephemeral=True)
        except KazooException as error:
            self._written = None
            raise ConsumerNodeError(f"cannot write {self.path}: {error!r}") from None
        self._written = data
        return True

    def close(self) -> None:
        """Delete the node (errors are logged: it is ephemeral anyway) and close the client."""
        client, self._client = self._client, None
        if client is None:
            return
        try:
            if self._written is not None and client.exists(self.path):
                client.delete(self.path)
        except KazooException as error:
            log.warning("could not delete %s: %r", self.path, error)
        finally:
            self._written = None
            close_zookeeper(client)

    def _connect(self) -> Any:
        if self._client is not None:
            return self._client
        try:
            client = self._connector(self._zookeeper)
        except ClientError as error:
            raise ConsumerNodeError(str(error)) from None
        client.add_listener(self._state_changed)
        self._client = client
        return client

    def _state_changed(self, state: Any) -> None:
        """kazoo's connection thread: never call ZooKeeper here."""
        if state == LOST:
            self._lost = True
