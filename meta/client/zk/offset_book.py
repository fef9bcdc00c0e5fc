"""Every consumer group's committed offsets of one broker's partitions, read and written.

``ZkOffsetBook`` reads ``R/consumers/G/offsets/T/B-P`` (``<msgId>-<offset>``)
for every group and topic of one broker id and writes new texts to those nodes: the
ZooKeeper side of offset recovery (``meta.sync.recover_offsets``) on a broker that takes
over a partition's data. Blocking kazoo calls on a client the caller started and closes
(``cluster_view.connect_zookeeper``); single-threaded by use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from meta.client.cluster import parse_offset
from meta.errors import ClientError

PARTITION_NODE = re.compile(r"(\d+)-(\d+)")


@dataclass(frozen=True)
class CommittedEntry:
    """One consumer group's committed offset of one partition of this broker."""

    group: str
    topic: str
    partition: int
    msg_id: int
    offset: int
    text: str


class ZkOffsetBook:
    """The committed offsets under one MetaQ root, read and written with a started kazoo
    client (blocking calls; the caller owns the client).

    Args:
        client: a started kazoo client.
        root: the normalised MetaQ root (``/meta``; ``""`` for the ZooKeeper root).
    """

    def __init__(self, client: KazooClient, root: str) -> None:
        self._client = client
        self._root = root

    def _children(self, path: str) -> list[str]:
        try:
            return sorted(self._client.get_children(path))
        except NoNodeError:
            return []

    def entries(self, broker_id: int) -> tuple[list[CommittedEntry], list[str]]:
        """Every committed entry of a partition ``<broker_id>-P``, and the problems (nodes
        whose text does not parse), each naming its path."""
        found, problems = [], []
        consumers = f"{self._root}/consumers"
        for group in self._children(consumers):
            offsets = f"{consumers}/{group}/offsets"
            for topic in self._children(offsets):
                for name in self._children(f"{offsets}/{topic}"):
                    matched = PARTITION_NODE.fullmatch(name)
                    if matched is None or int(matched.group(1)) != broker_id:
                        continue
                    path = f"{offsets}/{topic}/{name}"
                    try:
                        text = self._client.get(path)[0].decode("utf-8", "replace")
                        msg_id, offset = parse_offset(text.strip())
                    except NoNodeError:
                        continue
                    except ClientError as error:
                        problems.append(f"{path}: {error}: left alone")
                        continue
                    partition = int(matched.group(2))
                    found.append(CommittedEntry(group, topic, partition, msg_id, offset, text))
        return found, problems

    def path(self, entry: CommittedEntry, broker_id: int) -> str:
        """The offsets node of ``entry``."""
        return (
            f"{self._root}/consumers/{entry.group}/offsets/{entry.topic}/"
            f"{broker_id}-{entry.partition}"
        )

    def write(self, entry: CommittedEntry, text: str, broker_id: int) -> None:
        """Write ``text`` (``<msgId>-<offset>``) to the node of ``entry``."""
        self._client.set(self.path(entry, broker_id), text.encode())
