"""What ``meta-admin`` reads from and writes to ZooKeeper.

``ZkAdmin`` is a short-lived kazoo session of one CLI run: it reads the broker registrations
(``R/brokers/ids/B`` with ``master``, ``slave<N>``, ``master_config_checksum``), the topic
registrations (``R/brokers/topics-pub|topics-sub|topics/T/B-m|B-s<N>``) and the consumer
groups (``R/consumers/G/ids|owners|offsets``); it writes offset nodes (``<msgId>-<offset>``)
and deletes a stopped group's tree, the only changes the tool makes. Every node is parsed
with the client's own rules (``meta.client.cluster``), so the tool sees what consumers and
producers see.

Errors name what is wrong: an unreachable ZooKeeper names the connect string, a missing root
names the path (``ZooKeeperUnreachableError`` / ``NotFoundError``). Every call is bounded by
the session's timeout. Single-threaded (one CLI invocation); kazoo's own threads only run the
connection.
"""

from __future__ import annotations

import difflib
import json
import logging
from dataclasses import dataclass, field

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from meta.admin.client import (
    AdminError,
    NotFoundError,
    RefusedError,
    UsageError,
    ZooKeeperUnreachableError,
)
from meta.client.cluster import (
    BrokerAddress,
    consumer_partition_strings,
    format_offset,
    java_string_key,
    parse_offset,
    producer_partitions,
)
from meta.errors import ClientError

REGISTRATION_KINDS = ("topics-pub", "topics-sub", "topics")
"""The three registration trees of a topic (the last one is the deprecated pre-1.4.3 copy)."""


@dataclass(frozen=True)
class BrokerNode:
    """One ``R/brokers/ids/B``: the master URI (None while no master is up) and the slaves."""

    broker_id: int
    master: str | None
    slaves: dict[int, str] = field(default_factory=dict)
    config_checksum: str | None = None

    @property
    def address(self) -> BrokerAddress | None:
        """Where to read this broker: the master, else the lowest-numbered slave."""
        for uri in [self.master] + [self.slaves[n] for n in sorted(self.slaves)]:
            if uri:
                try:
                    return BrokerAddress.parse_uri(uri)
                except ClientError:
                    continue
        return None


@dataclass(frozen=True)
class Registration:
    """One broker's registration of one topic: ``node`` is ``B-m`` or ``B-s<N>``."""

    topic: str
    node: str
    broker_id: int
    partitions: int | None
    publish: bool
    subscribe: bool


@dataclass(frozen=True)
class CommittedOffset:
    """An offsets node: ``msg_id`` of the last acknowledged message (-1 unknown) and the
    ``offset`` of the next message to read; ``error`` when the node could not be parsed."""

    msg_id: int
    offset: int
    text: str
    error: str | None = None


def connect(connect_string: str, timeout_s: float) -> KazooClient:
    """Start a kazoo session, bounded by ``timeout_s``.

    Raises:
        UsageError: a malformed connect string.
        ZooKeeperUnreachableError: no session within the timeout (names the address).
    """
    try:
        client = KazooClient(hosts=connect_string, timeout=max(timeout_s, 1.0))
    except ValueError as error:
        raise UsageError(f"invalid ZooKeeper address {connect_string!r}: {error}") from None
    # kazoo logs every failed connection attempt; the one-line error below says it all.
    kazoo_log = logging.getLogger("kazoo")
    level = kazoo_log.level
    kazoo_log.setLevel(logging.CRITICAL)
    try:
        client.start(timeout=timeout_s)
    except KazooTimeoutError:
        # kazoo has stopped and closed the client already.
        raise ZooKeeperUnreachableError(
            f"cannot connect to ZooKeeper at {connect_string} within {timeout_s:g} s"
        ) from None
    finally:
        kazoo_log.setLevel(level)
    return client


class ZkAdmin:
    """Reads (and offset writes) under one MetaQ root.

    Args:
        client: a started kazoo client (closed by ``close``).
        connect_string: for error texts.
        root: the normalised MetaQ root.
        timeout_s: bound on each ZooKeeper call.
    """

    def __init__(self, client: KazooClient, connect_string: str, root: str, timeout_s: float):
        self._client = client
        self._connect_string = connect_string
        self.root = root
        self._timeout_s = timeout_s

    # --- plain reads -----------------------------------------------------------------------

    def children(self, path: str) -> list[str]:
        """The children of ``path``, sorted; ``[]`` when it does not exist."""
        try:
            return sorted(self._call(self._client.get_children_async(path), path))
        except NoNodeError:
            return []

    def data(self, path: str) -> bytes | None:
        """The data of ``path``; None when it does not exist."""
        try:
            data, _stat = self._call(self._client.get_async(path), path)
        except NoNodeError:
            return None
        return data or b""

    def exists(self, path: str) -> bool:
        return self._call(self._client.exists_async(path), path) is not None

    def text(self, path: str) -> str | None:
        data = self.data(path)
        return None if data is None else data.decode("utf-8", "replace")

    def check_root(self) -> None:
        """Raise ``NotFoundError`` naming the root when it does not exist."""
        if not self.exists(self.root):
            raise NotFoundError(
                f"ZooKeeper at {self._connect_string} has no node {self.root}: "
                "is --zk-root the brokers' zk.zkRoot?"
            )

    # --- brokers and topics ----------------------------------------------------------------

    def brokers(self) -> list[BrokerNode]:
        """Every numeric child of ``R/brokers/ids``, by id."""
        ids_path = f"{self.root}/brokers/ids"
        nodes = []
        for name in sorted((n for n in self.children(ids_path) if n.isdigit()), key=int):
            path = f"{ids_path}/{name}"
            children = self.children(path)
            slaves = {}
            for child in children:
                if child.startswith("slave") and child[5:].isdigit():
                    uri = self.text(f"{path}/{child}")
                    if uri is not None:
                        slaves[int(child[5:])] = uri
            master = self.text(f"{path}/master") if "master" in children else None
            checksum = None
            if "master_config_checksum" in children:
                checksum = self.text(f"{path}/master_config_checksum")
            nodes.append(BrokerNode(int(name), master or None, slaves, checksum))
        return nodes

    def broker(self, broker_id: int) -> BrokerNode:
        """One broker's node; ``NotFoundError`` when it is not registered."""
        for node in self.brokers():
            if node.broker_id == broker_id:
                return node
        raise NotFoundError(
            f"no broker {broker_id} is registered under {self.root}/brokers/ids "
            f"(brokers: {', '.join(str(n.broker_id) for n in self.brokers()) or 'none'})"
        )

    def topics(self) -> list[str]:
        """Topics registered in any of the three trees, sorted."""
        names: set[str] = set()
        for kind in REGISTRATION_KINDS:
            names.update(self.children(f"{self.root}/brokers/{kind}"))
        return sorted(names)

    def registrations(self, topic: str) -> list[Registration]:
        """Each broker node (``B-m`` / ``B-s<N>``) registering ``topic``, with its role."""
        found: dict[str, dict[str, bytes]] = {}
        for kind in ("topics-pub", "topics-sub"):
            path = f"{self.root}/brokers/{kind}/{topic}"
            for name in self.children(path):
                data = self.data(f"{path}/{name}")
                if data is not None:
                    found.setdefault(name, {})[kind] = data
        legacy_path = f"{self.root}/brokers/topics/{topic}"
        for name in self.children(legacy_path):
            found.setdefault(name, {})
        registrations = []
        for name, kinds in found.items():
            broker_text = name.split("-", 1)[0]
            if not broker_text.isdigit():
                continue
            partitions = None
            for data in kinds.values():
                partitions = _num_parts(data)
                if partitions is not None:
                    break
            if partitions is None:
                partitions = _legacy_count(self.text(f"{legacy_path}/{name}"))
            publish, subscribe = "topics-pub" in kinds, "topics-sub" in kinds
            registrations.append(
                Registration(topic, name, int(broker_text), partitions, publish, subscribe)
            )
        return sorted(registrations, key=lambda r: (r.broker_id, r.node))

    def publish_partitions(self, topic: str) -> int:
        """How many partitions producers see (``B-m`` children of topics-pub)."""
        return len(producer_partitions(self._children_data(f"brokers/topics-pub/{topic}")))

    def subscribe_partitions(self, topic: str) -> list[str]:
        """The partitions consumers see, in consumer (string) order."""
        return consumer_partition_strings(self._children_data(f"brokers/topics-sub/{topic}"))

    def check_topic(self, topic: str) -> None:
        """``NotFoundError`` naming ``topic`` when no tree registers it: one line with the
        registered topics and, when one is close, a "did you mean"."""
        topics = self.topics()
        if topic not in topics:
            raise NotFoundError(unknown_topic_text(topic, topics, self.root))

    # --- consumer groups -------------------------------------------------------------------

    def group_path(self, group: str) -> str:
        return f"{self.root}/consumers/{group}"

    def groups(self) -> list[str]:
        return sorted(self.children(f"{self.root}/consumers"), key=java_string_key)

    def check_group(self, group: str) -> None:
        """``NotFoundError`` naming ``group`` when ``R/consumers/G`` does not exist."""
        if not self.exists(self.group_path(group)):
            known = ", ".join(self.groups()) or "none"
            raise NotFoundError(
                f"unknown consumer group {group}: no node {self.group_path(group)} "
                f"(groups: {known})"
            )

    def members(self, group: str) -> dict[str, list[str]]:
        """Live consumer id string -> its subscribed topics (``consumers/G/ids``)."""
        path = f"{self.group_path(group)}/ids"
        members = {}
        for name in sorted(self.children(path), key=java_string_key):
            text = self.text(f"{path}/{name}")
            if text is not None:
                members[name] = sorted(topic for topic in text.split(",") if topic)
        return members

    def check_stopped(self, group: str, reason: str) -> None:
        """``RefusedError`` naming the live members of ``group``, if it has any.

        Args:
            group: the consumer group.
            reason: why they must stop, e.g. "their next commit would overwrite the reset
                offsets".
        """
        members = self.members(group)
        if members:
            raise RefusedError(
                f"consumer group {group} has {len(members)} live member(s): "
                f"{', '.join(members)}; stop them first ({reason})"
            )

    def group_topics(self, group: str) -> list[str]:
        """Topics the group has offsets or owners for, or that a live member subscribes."""
        names: set[str] = set()
        for kind in ("offsets", "owners"):
            names.update(self.children(f"{self.group_path(group)}/{kind}"))
        for topics in self.members(group).values():
            names.update(topics)
        return sorted(names)

    def owners(self, group: str, topic: str) -> dict[str, str]:
        """Partition ``B-P`` -> owning consumer id string."""
        path = f"{self.group_path(group)}/owners/{topic}"
        found = {}
        for name in self.children(path):
            text = self.text(f"{path}/{name}")
            if text is not None:
                found[name] = text
        return found

    def offsets(self, group: str, topic: str) -> dict[str, CommittedOffset]:
        """Partition ``B-P`` -> committed offset; missing nodes are simply absent."""
        path = f"{self.group_path(group)}/offsets/{topic}"
        found = {}
        for name in self.children(path):
            text = self.text(f"{path}/{name}")
            if text is None:
                continue
            try:
                msg_id, offset = parse_offset(text.strip())
                found[name] = CommittedOffset(msg_id, offset, text)
            except ClientError as error:
                found[name] = CommittedOffset(-1, 0, text, str(error))
        return found

    def write_offset(self, group: str, topic: str, partition: str, msg_id: int, offset: int):
        """Write ``<msgId>-<offset>`` to the offsets node, creating it (and parents) if needed."""
        path = f"{self.group_path(group)}/offsets/{topic}/{partition}"
        data = format_offset(msg_id, offset).encode()
        try:
            self._call(self._client.set_async(path, data), path)
        except NoNodeError:
            parent = path.rsplit("/", 1)[0]
            self._call(self._client.ensure_path_async(parent), parent)
            self._call(self._client.create_async(path, data), path)

    def delete_group(self, group: str) -> None:
        """Delete ``R/consumers/G`` with everything under it (ids, owners, offsets).

        Raises:
            AdminError: a node could not be deleted (a member created one meanwhile).
        """
        self._delete_tree(self.group_path(group))

    def _delete_tree(self, path: str) -> None:
        for name in self.children(path):
            self._delete_tree(f"{path}/{name}")
        try:
            self._call(self._client.delete_async(path), path)
        except NoNodeError:
            pass  # Deleted meanwhile: what this call wanted.

    # --- plumbing --------------------------------------------------------------------------

    def close(self) -> None:
        try:
            self._client.stop()
        finally:
            self._client.close()

    def _children_data(self, relative: str) -> dict[str, bytes]:
        path = f"{self.root}/{relative}"
        children = {}
        for name in self.children(path):
            data = self.data(f"{path}/{name}")
            if data is not None:
                children[name] = data
        return children

    def _call(self, async_result, path: str):
        """Wait for a kazoo async result; turn every failure but NoNodeError into an error
        naming ZooKeeper and the path."""
        try:
            return async_result.get(timeout=self._timeout_s)
        except NoNodeError:
            raise
        except KazooTimeoutError:
            raise ZooKeeperUnreachableError(
                f"ZooKeeper at {self._connect_string} did not answer about {path} "
                f"within {self._timeout_s:g} s"
            ) from None
        except KazooException as error:
            raise AdminError(
                f"ZooKeeper at {self._connect_string} failed on {path}: "
                f"{type(error).__name__} {error}"
            ) from None


def unknown_topic_text(topic: str, topics: list[str], root: str) -> str:
    """The one-line error of a command naming a topic that is not registered."""
    close = difflib.get_close_matches(topic, topics, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    known = ", ".join(topics) or "none"
    return f"unknown topic {topic}: not registered under {root} (topics: {known}){hint}"


def _num_parts(data: bytes) -> int | None:
    """``numParts`` of a topics-pub/sub node's JSON (None if unusable)."""
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    count = document.get("numParts") if isinstance(document, dict) else None
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        return None
    return count


def _legacy_count(text: str | None) -> int | None:
    return int(text) if text and text.strip().isdigit() else None
