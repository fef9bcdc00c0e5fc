"""A broker's facts as plain dicts and lists: the JSON API (``/api/v1/...``) and ``stats json:``.

Each function reads the broker's public state at the moment of the request and returns
values ``json.dumps`` can write. Nothing here reads ZooKeeper, files or the environment.
Reactor thread only.
"""

from __future__ import annotations

import os
import platform
import sys
import threading
from typing import Any

from meta import __version__
from meta.status.health import not_ready_reasons

COUNTER_NAMES = (
    "cmd_put",
    "cmd_get",
    "cmd_offset",
    "tx_begin",
    "tx_xa_begin",
    "tx_commit",
    "tx_rollback",
    "get_miss",
    "put_failed",
)
"""The command counters the ``stats`` general item shows, in its order (``BrokerCounters``)."""

UNKNOWN_TOPIC_RESULT = 1
"""The ``resultCode`` of ``stats <topic>`` for a topic neither configured nor stored: how the
broker, as Java's, answers an item it does not know (it reads it as a topic name)."""


def is_unknown_topic_block(lines: list[str]) -> bool:
    """Whether ``lines``, a ``stats`` reply's lines after ``STATS`` (the topic, then
    ``resultCode N``, ...), are the block of an unknown topic (``UNKNOWN_TOPIC_RESULT``)."""
    return len(lines) >= 2 and lines[1] == f"resultCode {UNKNOWN_TOPIC_RESULT}"


class UnknownTopicError(LookupError):
    """The topic is neither configured nor stored on this broker (a 404 on the pages)."""


SYNC_ROLES = {"samsa": "sync_master", "gregor": "sync_slave"}
"""``Broker.sync.role`` -> the role the status reports (synchronous replication)."""


def broker_role(broker: Any) -> str:
    """``master``, ``async_slave``, ``sync_master`` (samsa) or ``sync_slave`` (gregor)."""
    if broker.slave_id >= 0:
        return "async_slave"
    return SYNC_ROLES.get(getattr(getattr(broker, "sync", None), "role", None), "master")


def broker_facts(broker: Any, started_at_s: float, now_s: float) -> dict[str, Any]:
    """The broker's identity and state (``/api/v1/broker``)."""
    config = broker.config
    return {
        "broker_id": config.broker_id,
        "version": __version__,
        "wire_version": broker.version,
        "role": broker_role(broker),
        "slave_id": broker.slave_id,
        "uri": broker.uri,
        "host": broker.host,
        "port": broker.port,
        "data_path": config.data_path,
        "data_log_path": config.data_log_path,
        "config_path": config.path,
        "config_checksum": config.checksum,
        "zookeeper": config.zookeeper.connect if config.zookeeper.enabled else None,
        "uptime_seconds": max(0.0, now_s - started_at_s),
        "ready": not not_ready_reasons(broker),
        "not_ready_reasons": not_ready_reasons(broker),
        "connections": len(broker.connections),
        "pid": os.getpid(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }


def partition_facts(partition_log: Any) -> dict[str, Any]:
    """One partition's numbers (offsets in bytes, as the store keeps them)."""
    return {
        "topic": partition_log.topic,
        "partition": partition_log.partition,
        "store": True,
        "min_offset": partition_log.min_offset,
        "max_offset": partition_log.max_offset,
        "messages": partition_log.message_count,
        "bytes": partition_log.byte_count,
        "segments": len(partition_log.segments),
        "accepts_puts": partition_log.accepts_appends,
        "failed": None if partition_log.failed is None else str(partition_log.failed),
        "put_messages_total": partition_log.appended_messages,
        "put_bytes_total": partition_log.appended_bytes,
    }


def unwritten_partition_facts(topic: str, partition: int) -> dict[str, Any]:
    """The numbers of a configured partition that has no store yet: empty, at offset 0."""
    return {
        "topic": topic,
        "partition": partition,
        "store": False,
        "min_offset": 0,
        "max_offset": 0,
        "messages": 0,
        "bytes": 0,
        "segments": 0,
        "accepts_puts": True,
        "failed": None,
        "put_messages_total": 0,
        "put_bytes_total": 0,
    }


def partitions_facts(broker: Any) -> list[dict[str, Any]]:
    """Every partition store, sorted by topic and partition (``/api/v1/partitions``)."""
    logs = sorted(broker.store.partitions(), key=lambda log: (log.topic, log.partition))
    return [partition_facts(partition_log) for partition_log in logs]


def unwritten_partitions(broker: Any) -> list[tuple[str, int]]:
    """``(topic, partition)`` of every configured partition that has no store yet, sorted.

    A store is made by a partition's first put, as in Java (it is not made at start-up), so
    the partitions ``numPartitions`` gives an exact ``[topic=NAME]`` section exist before
    they hold a byte: the dashboard and the metrics show them empty. The ``stats`` text
    items keep Java's view (a topic without stores is ``*Empty*``).
    """
    stored = {(log.topic, log.partition) for log in broker.store.partitions()}
    config = broker.config
    configured = (
        (name, partition)
        for name in exact_topic_names(config)
        for partition in range(config.topic_config(name).num_partitions)
    )
    return sorted(key for key in configured if key not in stored)


def topic_partitions_facts(broker: Any) -> list[dict[str, Any]]:
    """Every partition this broker serves, sorted: each store's facts, and each configured
    partition without a store as ``unwritten_partition_facts``."""
    found = partitions_facts(broker)
    found += [unwritten_partition_facts(*key) for key in unwritten_partitions(broker)]
    return sorted(found, key=lambda partition: (partition["topic"], partition["partition"]))


def topics_facts(broker: Any) -> list[dict[str, Any]]:
    """Every configured or stored topic (``/topics``), sorted: partitions (stored or
    configured), messages, bytes, publish/subscribe."""
    totals: dict[str, dict[str, Any]] = {}
    for partition in topic_partitions_facts(broker):
        name = partition["topic"]
        topic = totals.setdefault(name, {"topic": name, "partitions": 0, "messages": 0})
        topic["partitions"] += 1
        topic["messages"] += partition["messages"]
        topic["bytes"] = topic.get("bytes", 0) + partition["bytes"]
    for name, topic in totals.items():
        section = broker.config.topic_config(name)
        topic["average_bytes"] = average_bytes(topic["bytes"], topic["messages"])
        topic["accept_publish"] = section.accept_publish
        topic["accept_subscribe"] = section.accept_subscribe
    return list(totals.values())


def average_bytes(byte_count: int, message_count: int) -> int | None:
    """Bytes per message (record headers included), rounded; None without messages.

    Both counts are the store's (``stats``' rules): a transaction batch counts one
    message, and a segment that was not the last one at start-up counts its bytes but no
    message, so the average reads high until such a segment is deleted.
    """
    return round(byte_count / message_count) if message_count else None


def topic_facts(broker: Any, topic: str) -> dict[str, Any]:
    """One topic's settings and partitions (``/topics/<t>``).

    Raises:
        UnknownTopicError: the topic is neither configured nor stored here.
    """
    partitions = [p for p in topic_partitions_facts(broker) if p["topic"] == topic]
    if not partitions:
        raise UnknownTopicError(
            f"no topic {topic} on this broker: it is not configured and has no partition store"
        )
    section = broker.config.topic_config(topic)
    return {
        "topic": topic,
        "num_partitions": section.num_partitions,
        "accept_publish": section.accept_publish,
        "accept_subscribe": section.accept_subscribe,
        "unflush_threshold": section.unflush_threshold,
        "unflush_interval_ms": section.unflush_interval_ms,
        "data_path": section.data_path,
        "delete_policy": section.delete_policy,
        "delete_when": section.delete_when,
        "messages": sum(p["messages"] for p in partitions),
        "bytes": sum(p["bytes"] for p in partitions),
        "partitions": partitions,
    }


def replication_facts(broker: Any) -> dict[str, Any]:
    """An async slave's lag per partition, as ``stats slave`` (``/api/v1/replication``)."""
    replication = broker.replication
    rows = replication.lag_rows() if replication is not None else []
    return {
        "role": broker_role(broker),
        "async_slave": [
            {
                "topic": row.topic,
                "partition": row.partition,
                "slave_end": row.slave_end,
                "master_end": row.master_end,
                "lag_bytes": row.lag_bytes,
                "lag_seconds": row.lag_seconds,
                "state": row.state,
            }
            for row in rows
        ],
    }


def transactions_facts(broker: Any) -> list[dict[str, Any]]:
    """Live transactions (``/api/v1/transactions``), as ``stats transactions`` lists them."""
    return [
        {"key": key, "state": state, "messages": count, "bytes": size}
        for key, state, count, size in broker.transactions.describe()
    ]


def exact_topic_names(config: Any) -> list[str]:
    """Configured topic names in file order; wildcard sections are patterns, not topics."""
    return [section.name for section in config.topics if "*" not in section.name]


def general_facts(broker: Any, started_at_s: float, now_s: float) -> dict[str, Any]:
    """The ``stats`` general item's facts: ``broker_facts`` plus the command counters.

    ``topics`` counts topics with stores and configured topics without stores yet, as the
    text item does; ``total_messages`` sums every store.
    """
    logs = broker.store.partitions()
    with_stores = {partition_log.topic for partition_log in logs}
    return {
        **broker_facts(broker, started_at_s, now_s),
        "threads": threading.active_count(),
        "counters": {name: getattr(broker.counters, name) for name in COUNTER_NAMES},
        "total_messages": sum(partition_log.message_count for partition_log in logs),
        "topics": len(with_stores | set(exact_topic_names(broker.config))),
    }


def topics_without_stores(broker: Any) -> list[str]:
    """Configured topics that have no store yet (the text ``topics`` item's ``*Empty*``)."""
    with_stores = {partition_log.topic for partition_log in broker.store.partitions()}
    return [name for name in exact_topic_names(broker.config) if name not in with_stores]


def rejected_facts(broker: Any) -> dict[str, Any]:
    """Puts refused for their size (compatibility.md): how many, the last one, the limit.

    ``put_too_large_last`` is ``<topic>-<partition> <bytes>``, or None before any.
    """
    counters = broker.counters
    last = counters.put_too_large_last
    return {
        "put_too_large": counters.put_too_large,
        "put_too_large_last": None if last == "-" else last,
        "max_message_size": broker.config.message_bytes_max,
    }
