"""Fixtures shared by the integration tests (the ZooKeeper server is in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def admin(zookeeper) -> Iterator[object]:
    """A plain KazooClient on the session ZooKeeper (no chroot), closed afterwards."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper.connect_string, timeout=10)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()
