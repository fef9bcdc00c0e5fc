"""One-shot ZooKeeper reads for the Spark driver.

The Spark source (``meta.spark``) plans a read on the driver: it needs the topics under
``R/brokers/topics-sub``, each topic's partitions with the broker that serves them, and a
group's committed offsets. ``ZkSparkReader`` reads those once, without watches, and returns
plain values that pickle to executors (which never talk to ZooKeeper). It also writes group
offsets for the streaming source's ``commitToGroup``.

Which broker serves a partition (``topics-sub/T`` children, docs/formats.md §4): a ``B-m`` child is
read from ``ids/B/master``. A ``B-s<N>`` child is a slave's copy, read from
``ids/B/slave<N>`` only when slaves are included and no master of ``B`` serves that
partition (masters are preferred, as in Java's ``getBrokerRandom``).

Invariants: every ZooKeeper call is bounded by ``operation_timeout_s``; a connection that
cannot be made within its timeout raises ``ClientError`` naming the connect string. Nothing
here keeps state between calls beyond the client. Not thread-safe: one reader per thread.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from kazoo.exceptions import KazooException, NoNodeError

from meta.client.cluster import (
    BrokerAddress,
    Partition,
    consumer_partition_strings,
    format_offset,
    parse_offset,
)
from meta.client.zk.bounded import BoundedCalls
from meta.client.zk.cluster_view import close_zookeeper, connect_zookeeper, normalize_root
from meta.errors import ClientError

log = logging.getLogger("meta.client")


@dataclass(frozen=True)
class ServedPartition:
    """One partition of a topic and the broker a reader asks for it."""

    topic: str
    partition: Partition
    address: BrokerAddress


class ZkSparkReader:
    """Reads the cluster once for a Spark plan; use as a context manager.

    Args:
        connect: the ZooKeeper connect string.
        root: the MetaQ root (``zk.zkRoot``), normalised as Java does.
        connection_timeout_ms: bound on connecting and on every read.
        session_timeout_ms: the ZooKeeper session timeout.

    Raises:
        ClientError: ZooKeeper is unreachable within ``connection_timeout_ms``.
    """

    def __init__(
        self,
        connect: str,
        root: str,
        connection_timeout_ms: int = 10_000,
        session_timeout_ms: int = 30_000,
    ) -> None:
        self._root = normalize_root(root)
        self._client = connect_zookeeper(connect, session_timeout_ms, connection_timeout_ms)
        self._calls = BoundedCalls(self._client, connection_timeout_ms / 1000, connect)

    def close(self) -> None:
        close_zookeeper(self._client)

    def __enter__(self) -> ZkSparkReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def topics(self) -> list[str]:
        """Every topic some broker registers under ``R/brokers/topics-sub``, sorted."""
        names = self._calls.children(f"{self._root}/brokers/topics-sub")
        return sorted(name for name in names if self._calls.children(self._sub_path(name)))

    def served_partitions(self, topic: str, include_slaves: bool) -> list[ServedPartition]:
        """The readable partitions of ``topic``, sorted by (broker, partition).

        Returns:
            One entry per partition that a master serves, or (``include_slaves``) that only
            a slave serves; ``[]`` when no broker registers the topic.
        """
        path = self._sub_path(topic)
        children = {}
        for name in self._calls.children(path):
            data = self._calls.data(f"{path}/{name}")
            if data is not None:
                children[name] = data
        served: dict[Partition, BrokerAddress] = {}
        for name in sorted(children, key=_master_first):
            broker_text, _, role = name.partition("-")
            if role != "m" and not (include_slaves and role[:1] == "s" and role[1:].isdigit()):
                continue
            address = self._address(broker_text, role)
            if address is None:
                continue
            for text in consumer_partition_strings({name: children[name]}):
                served.setdefault(Partition.parse(text), address)
        return [ServedPartition(topic, key, served[key]) for key in sorted(served)]

    def group_offsets(self, group: str, topic: str) -> dict[Partition, int]:
        """The committed offsets ``consumers/G/offsets/T/B-P`` of one topic.

        Raises:
            ClientError: an offset node holds malformed text (the text names it).
        """
        path = f"{self._root}/consumers/{group}/offsets/{topic}"
        offsets = {}
        for name in self._calls.children(path):
            data = self._calls.data(f"{path}/{name}")
            if data is None:
                continue
            try:
                partition = Partition.parse(name)
            except ClientError:
                log.warning("ignoring offset node %s/%s: not a partition name", path, name)
                continue
            _msg_id, offsets[partition] = parse_offset(data.decode("utf-8", "replace"))
        return offsets

    def commit_group_offsets(
        self, group: str, topic: str, offsets: Mapping[Partition, int]
    ) -> None:
        """Write ``-1-<offset>`` into each ``consumers/G/offsets/T/B-P``."""
        for partition, offset in offsets.items():
            path = f"{self._root}/consumers/{group}/offsets/{topic}/{partition}"
            data = format_offset(-1, offset).encode()
            try:
                self._calls.wait(self._client.set_async(path, data), path)
            except NoNodeError:
                self._call(lambda p=path, d=data: self._client.create(p, d, makepath=True), path)

    def _address(self, broker_text: str, role: str) -> BrokerAddress | None:
        if not broker_text.isdigit():
            return None
        node = "master" if role == "m" else f"slave{role[1:]}"
        data = self._calls.data(f"{self._root}/brokers/ids/{broker_text}/{node}")
        if data is None:
            return None
        try:
            address = BrokerAddress.parse_uri(data.decode("utf-8", "replace"))
        except ClientError as error:
            log.warning("ignoring broker %s/%s: %s", broker_text, node, error)
            return None
        slave_id = -1 if role == "m" else int(role[1:])
        return BrokerAddress(address.host, address.port, slave_id)

    def _sub_path(self, topic: str) -> str:
        return f"{self._root}/brokers/topics-sub/{topic}"

    def _call(self, function, what: str):
        try:
            return function()
        except KazooException as error:
            raise ClientError(f"ZooKeeper failed on {what}: {error!r}") from error


def _master_first(name: str) -> tuple[int, str]:
    """Sort ``B-m`` children before slave children so masters win ``setdefault``."""
    return (0 if name.endswith("-m") else 1, name)
