"""``MetaClientConfig`` and ``MetaMessageSessionFactory`` when ZooKeeper is not there: every
wait is bounded by a documented setting and the error names ZooKeeper."""

from __future__ import annotations

import time

import pytest

from meta.client import MetaClientConfig, MetaMessageSessionFactory
from meta.errors import ClientError


@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_the_zookeeper_operation_timeout_must_be_a_positive_int(value):
    with pytest.raises(ClientError, match="zk_operation_timeout_ms"):
        MetaClientConfig(zk_connect="127.0.0.1:2181", zk_operation_timeout_ms=value)


def test_the_zookeeper_operation_timeout_defaults_to_ten_seconds():
    assert MetaClientConfig(zk_connect="127.0.0.1:2181").zk_operation_timeout_ms == 10000


def test_a_factory_without_zookeeper_fails_within_the_connection_timeout_naming_it():
    config = MetaClientConfig(zk_connect="127.0.0.1:1", zk_connection_timeout_ms=300)
    started = time.monotonic()
    with pytest.raises(ClientError, match="cannot connect to ZooKeeper at 127.0.0.1:1 within 300"):
        MetaMessageSessionFactory(config)
    assert time.monotonic() - started < 5
