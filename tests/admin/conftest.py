"""Fixtures of the ``meta-admin`` tests.

``admin_cluster`` is one cluster for every end-to-end admin test of this package: brokers 1
and 2 (real processes) with small segments, registered under a fresh root of the session's
real ZooKeeper. Tests keep out of each other's way by using their own topics and groups.
``cli`` runs ``meta-admin`` in-process against it and returns ``(status, out, err)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from meta.admin.main import main
from tests.integration.broker_process import BrokerProcess

SEGMENT_BYTES_MAX = 1024
"""Small segments, so a few dozen messages roll several of them."""

TOPICS = {
    "orders": {"numPartitions": 2},
    "segments": {"numPartitions": 1},
    "rolled": {"numPartitions": 1},
    "browse": {"numPartitions": 1},
    "find": {"numPartitions": 2},
    "lag": {"numPartitions": 2},
    "reset": {"numPartitions": 2},
    "live": {"numPartitions": 1},
    "stale": {"numPartitions": 1},
    "bytime": {"numPartitions": 2},
    "quiet": {"numPartitions": 1},
    # Thousands of puts from one synchronous ``meta-admin produce``: without a wait for the
    # group commit's fsync per put (what the console tests check is what reaches the reader).
    "console": {"numPartitions": 2, "unflushThreshold": 1000},
    # One test each, so what a test reads from the beginning is only what it wrote itself,
    # whatever ran before it.
    "console-lines": {"numPartitions": 1, "unflushThreshold": 1000},
    "console-pipe": {"numPartitions": 2, "unflushThreshold": 1000},
    "console-group": {"numPartitions": 2},
    "console-follow": {"numPartitions": 1},
    "console-stop": {"numPartitions": 1},
    "console-empty": {"numPartitions": 1},
    "json-empty": {"numPartitions": 1},
}


@dataclass
class AdminCluster:
    root: str
    connect_string: str
    brokers: list[BrokerProcess]

    @property
    def options(self) -> list[str]:
        return ["--zk-connect", self.connect_string, "--zk-root", self.root]

    def broker(self, broker_id: int) -> BrokerProcess:
        return self.brokers[broker_id - 1]


@pytest.fixture(scope="package")
def admin_cluster(tmp_path_factory, zookeeper) -> Iterator[AdminCluster]:
    from tests.integration.client_helpers import broker_cluster

    with broker_cluster(tmp_path_factory, zookeeper, TOPICS, maxSegmentSize=SEGMENT_BYTES_MAX) as (
        root,
        brokers,
    ):
        yield AdminCluster(root, zookeeper.connect_string, brokers)


@pytest.fixture
def cli(admin_cluster, capsys) -> Callable[..., tuple[int, str, str]]:
    """Run ``meta-admin ARGV --zk-connect ... --zk-root ...``; return (status, out, err)."""

    def run(*argv: str) -> tuple[int, str, str]:
        status = main([*argv, *admin_cluster.options])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


@pytest.fixture
def factory(zookeeper, admin_cluster):
    """A session factory on the admin cluster, shut down afterwards."""
    from meta.client import MetaMessageSessionFactory
    from tests.integration.client_helpers import zk_config

    session_factory = MetaMessageSessionFactory(zk_config(zookeeper, admin_cluster.root))
    yield session_factory
    session_factory.shutdown()
