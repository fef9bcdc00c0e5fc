"""``/readyz``: ready only once the broker serves and, with ZooKeeper, is connected."""

from __future__ import annotations

from types import SimpleNamespace

from meta.status.health import NOT_SERVING, ZOOKEEPER_DISCONNECTED, readiness
from tests.dashboard.fakes import FakeBroker


def test_a_broker_that_serves_without_zookeeper_is_ready():
    assert readiness(FakeBroker(serving=True)) == (200, b"ready\n")


def test_a_broker_that_does_not_serve_yet_is_not_ready():
    code, body = readiness(FakeBroker(serving=False))
    assert code == 503
    assert body == f"not ready: {NOT_SERVING}\n".encode()


def test_a_serving_broker_whose_zookeeper_session_is_suspended_is_not_ready():
    broker = FakeBroker(serving=True, registry=SimpleNamespace(connected=False))
    assert readiness(broker) == (503, f"not ready: {ZOOKEEPER_DISCONNECTED}\n".encode())


def test_a_serving_broker_with_a_connected_session_is_ready():
    broker = FakeBroker(serving=True, registry=SimpleNamespace(connected=True))
    assert readiness(broker)[0] == 200
