"""Stand-ins for the broker parts the dashboard reads: plain objects, no reactor, no store."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from twisted.internet.task import Clock

from meta.server.connections import ConnectionGuard
from meta.server.stats import BrokerCounters
from meta.server.topic_counters import TopicCounters
from meta.store.corruption import PartitionHealth
from tests.store.conftest import topic_config


@dataclass
class FakePartition:
    topic: str
    partition: int
    min_offset: int = 0
    max_offset: int = 0
    message_count: int = 0
    byte_count: int = 0
    appended_messages: int = 0
    appended_bytes: int = 0
    segments: tuple = (object(),)
    accepts_appends: bool = True
    failed: Any = None
    health: PartitionHealth = field(default_factory=lambda: PartitionHealth("fake"))


@dataclass
class FakeBroker:
    partitions: list[FakePartition] = field(default_factory=list)
    serving: bool = True
    registry: Any = None
    slave_id: int = -1
    replication: Any = None
    sync: Any = None
    live_transactions: list = field(default_factory=list)
    configured: dict[str, int] = field(default_factory=dict)  # [topic=NAME] -> numPartitions
    version: str = "1.4.6.2"

    def __post_init__(self) -> None:
        self.config = SimpleNamespace(
            broker_id=3,
            dashboard_admin_token_file=None,
            topics=tuple(SimpleNamespace(name=name) for name in self.configured),
            topic_config=lambda name: topic_config(
                name, "/data", num_partitions=self.configured.get(name, 1)
            ),
        )
        self.connections: set = set()
        limits = SimpleNamespace(
            connections_max=2,
            total_connections_max=0,
            idle_connection_timeout_s=0,
            header_timeout_s=0,
        )
        self.connection_guard = ConnectionGuard(limits, Clock())
        self.counters = BrokerCounters()
        self.put_failed_by_topic = TopicCounters()
        self.get_miss_by_topic = TopicCounters()
        self.store = SimpleNamespace(
            partitions=lambda: list(self.partitions),
            scrubber=SimpleNamespace(bytes_per_s=4194304, passes=0, corrupt_found=0),
        )
        self.transactions = SimpleNamespace(describe=lambda: list(self.live_transactions))
