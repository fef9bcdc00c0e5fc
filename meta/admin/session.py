"""One run of a cluster command: a lazy ZooKeeper session and lazy broker connections.

``ClusterSession`` opens ZooKeeper on first use (a ``stats HOST:PORT`` run never does), checks
that the root exists, and keeps one ``AdminClient`` per broker it talks to, found through
the broker's registration (the master, else a slave). ``close`` releases all of them.

Single-threaded (one CLI invocation).
"""

from __future__ import annotations

import argparse

from meta.admin.client import AdminClient, NotFoundError
from meta.admin.reads import PartitionStats, partition_stats
from meta.admin.zk import ZkAdmin, connect


class ClusterSession:
    """ZooKeeper and broker connections of one command.

    Args:
        zk_connect: the ZooKeeper connect string.
        zk_root: the normalised MetaQ root.
        timeout_s: bound on connecting and on each request.
    """

    def __init__(self, zk_connect: str, zk_root: str, timeout_s: float) -> None:
        self.zk_connect = zk_connect
        self.zk_root = zk_root
        self.timeout_s = timeout_s
        self._zk: ZkAdmin | None = None
        self._clients: dict[str, AdminClient] = {}
        self._stats: dict[int, dict[tuple[str, int], PartitionStats]] = {}

    @classmethod
    def from_arguments(cls, arguments: argparse.Namespace) -> ClusterSession:
        return cls(arguments.zk_connect, arguments.zk_root, arguments.timeout)

    @property
    def zk(self) -> ZkAdmin:
        """The ZooKeeper reader, connected (and the root checked) on first use."""
        if self._zk is None:
            client = connect(self.zk_connect, self.timeout_s)
            self._zk = ZkAdmin(client, self.zk_connect, self.zk_root, self.timeout_s)
            self._zk.check_root()
        return self._zk

    def client_at(self, host: str, port: int) -> AdminClient:
        """A connection to ``host:port`` (opened once)."""
        name = f"{host}:{port}"
        client = self._clients.get(name)
        if client is None:
            client = self._clients[name] = AdminClient((host, port), self.timeout_s)
        return client

    def broker_client(self, broker_id: int) -> AdminClient:
        """A connection to a registered broker.

        Raises:
            NotFoundError: the broker is not registered, or has neither master nor slave up.
            BrokerUnreachableError: it could not be connected to.
        """
        node = self.zk.broker(broker_id)
        address = node.address
        if address is None:
            raise NotFoundError(f"broker {broker_id} has no master or slave registered now")
        return self.client_at(address.host, address.port)

    def partition_stats(self, broker_id: int) -> dict[tuple[str, int], PartitionStats]:
        """The broker's ``stats offsets`` (read once per run)."""
        if broker_id not in self._stats:
            self._stats[broker_id] = partition_stats(self.broker_client(broker_id))
        return self._stats[broker_id]

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
        if self._zk is not None:
            self._zk.close()
            self._zk = None

    def __enter__(self) -> ClusterSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
