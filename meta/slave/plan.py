"""What an async slave copies, worked out from what it read in ZooKeeper (pure).

What lives here (the slave's view of its master, as Java's slave has it): ``MasterView``, the
master's address and the (topic, partition) pairs it serves to subscribers, built by
``master_view`` from the raw node data that ``BrokerRegistry.read_master`` returns; and
``check_slave_setup``, the start-up checks of a slave that ``meta.config`` cannot make alone.

Invariants: nothing here does I/O. A topic node whose JSON is unreadable is left out (and
named in ``MasterView.problems``), never guessed at. Thread-safe: pure functions, frozen values.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from meta.client.cluster import PARTITIONS_PER_BROKER_MAX, BrokerAddress, validate_group
from meta.config import BrokerConfig, SlaveConfig
from meta.errors import ClientError, ConfigError, InvalidGroupError


@dataclass(frozen=True)
class MasterView:
    """The master of one broker id, as a slave sees it.

    Attributes:
        address: where the master listens, or None when ``ids/B/master`` is missing (then
            nothing is fetched while the master is down, as in Java).
        partitions: every (topic, partition) to copy, sorted.
        problems: one text per topic node that could not be read.
    """

    address: BrokerAddress | None
    partitions: tuple[tuple[str, int], ...] = ()
    problems: tuple[str, ...] = ()


NO_MASTER = MasterView(None)


def num_parts(data: bytes) -> int:
    """The ``numParts`` of a ``topics-sub`` node's JSON ``{"numParts":n,"broker":"B-m"}``.

    Raises:
        ValueError: not that JSON, or ``numParts`` is not an int in ``0..65536``.
    """
    try:
        parsed = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"not JSON: {error}") from None
    count = parsed.get("numParts") if isinstance(parsed, dict) else None
    if isinstance(count, bool) or not isinstance(count, int):
        raise ValueError(f"no integer numParts in {data[:200]!r}")
    if not 0 <= count <= PARTITIONS_PER_BROKER_MAX:
        raise ValueError(f"numParts {count} is out of range")
    return count


def master_view(master: bytes | None, topics: dict[str, bytes]) -> MasterView:
    """Build the view from ``BrokerRegistry.read_master``'s answer.

    Args:
        master: the data of ``ids/B/master`` (``meta://host:port``), or None.
        topics: topic -> data of its ``topics-sub/T/B-m`` node.

    Returns:
        ``NO_MASTER`` when there is no master (or its URI is unreadable, named in
        ``problems``); else the master's address and partitions ``0..numParts-1`` of
        every topic except wildcard section names (``meta-*``).
    """
    if master is None:
        return NO_MASTER
    try:
        address = BrokerAddress.parse_uri(master.decode("utf-8"))
    except (ClientError, UnicodeDecodeError) as error:
        return MasterView(None, problems=(f"unreadable master node {master[:200]!r}: {error}",))
    partitions: list[tuple[str, int]] = []
    problems: list[str] = []
    for topic, data in sorted(topics.items()):
        if "*" in topic:
            continue  # a wildcard section, registered literally: never has data
        try:
            count = num_parts(data)
        except ValueError as error:
            problems.append(f"topic {topic}: {error}")
            continue
        partitions.extend((topic, partition) for partition in range(count))
    return MasterView(address, tuple(partitions), tuple(problems))


def check_slave_setup(config: BrokerConfig, slave: SlaveConfig, slave_path: str) -> None:
    """Refuse a slave set-up that cannot work, naming the file, key and value.

    Raises:
        ConfigError: ZooKeeper is disabled (the master is found through it), or
            ``slaveGroup`` is not a valid consumer group name.
    """
    if not config.zookeeper.enabled:
        raise ConfigError(
            f"{config.path}: [zookeeper] zk.zkEnable=false: an async slave ({slave_path}) "
            "finds its master through ZooKeeper; set zk.zkEnable=true"
        )
    try:
        validate_group(slave.slave_group)
    except InvalidGroupError as error:
        raise ConfigError(f"{slave_path}: slaveGroup={slave.slave_group!r}: {error}") from None
