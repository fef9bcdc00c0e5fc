"""What one rebalance reads from ZooKeeper: the group's consumers and their
topics, a topic's consumer partitions, and the brokers' addresses.

Each function reads afresh (no cache) with the caller's ``KazooClient``; a node that vanishes
while being read counts as absent, except a consumer node, whose loss means the group changed
during the read (``AttemptFailed``: the rebalance tries again).

Thread-safety: the functions keep no state; the kazoo client is thread-safe.
"""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from meta.client.cluster import BrokerAddress, consumer_partition_strings, java_string_key
from meta.errors import ClientError

__all__ = ["AttemptFailed", "read_cluster", "read_consumers", "read_data", "read_partitions"]

log = logging.getLogger("meta.client")


class AttemptFailed(Exception):
    """One rebalance attempt cannot complete (a consumer node vanished, ours is missing)."""


def read_consumers(client: KazooClient, group_path: str, consumer_id: str) -> dict[str, list[str]]:
    """Topic -> the ids of every registered consumer subscribed to it, sorted as Java strings.

    Raises:
        AttemptFailed: a consumer left during the read, or ``consumer_id`` is not registered.
    """
    ids_path = f"{group_path}/ids"
    per_topic: dict[str, list[str]] = {}
    for name in client.get_children(ids_path):
        try:
            data, _stat = client.get(f"{ids_path}/{name}")
        except NoNodeError:
            raise AttemptFailed(f"consumer {name} left during the rebalance") from None
        for topic in data.decode("utf-8", "replace").split(","):
            if topic:
                per_topic.setdefault(topic, []).append(name)
    if consumer_id not in {c for members in per_topic.values() for c in members}:
        raise AttemptFailed(f"own node {ids_path}/{consumer_id} is missing")
    return {topic: sorted(members, key=java_string_key) for topic, members in per_topic.items()}


def read_partitions(client: KazooClient, root: str, topic: str) -> list[str]:
    """``topic``'s consumer partition strings from ``R/brokers/topics-sub/T``."""
    path = f"{root}/brokers/topics-sub/{topic}"
    children = {}
    for name in read_children(client, path):
        data = read_data(client, f"{path}/{name}")
        if data is not None:
            children[name] = data
    return consumer_partition_strings(children)


def read_cluster(client: KazooClient, root: str) -> dict[int, BrokerAddress]:
    """Broker id -> the master's address, else a slave's (masters preferred)."""
    ids_path = f"{root}/brokers/ids"
    cluster: dict[int, BrokerAddress] = {}
    for name in read_children(client, ids_path):
        if not name.isdigit():
            continue
        children = read_children(client, f"{ids_path}/{name}")
        slaves = sorted(c for c in children if c.startswith("slave") and c[5:].isdigit())
        for child in (["master"] if "master" in children else []) + slaves:
            data = read_data(client, f"{ids_path}/{name}/{child}")
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


def read_children(client: KazooClient, path: str) -> list[str]:
    """The children of ``path``; ``[]`` when it does not exist."""
    try:
        return client.get_children(path)
    except NoNodeError:
        return []


def read_data(client: KazooClient, path: str) -> bytes | None:
    """The data of ``path``; None when it does not exist."""
    try:
        return client.get(path)[0]
    except NoNodeError:
        return None
