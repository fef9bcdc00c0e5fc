"""Keyless sends avoid unreachable brokers: ``BrokerRotation``, ``is_broker_failure`` and the
``SendRetryPolicy`` checks, with stand-ins (no network). The producer's retries are tested
against real brokers (tests/integration/test_client_dead_broker.py)."""

from __future__ import annotations

import threading

import pytest

from meta.client.cluster import BrokerAddress
from meta.client.produce.rotation import (
    BrokerRotation,
    SendRetryPolicy,
    avoids_unreachable_brokers,
    is_broker_failure,
)
from meta.client.produce.selectors import (
    HashPartitionSelector,
    RandomPartitionSelector,
    RoundRobinPartitionSelector,
)
from meta.errors import (
    ClientClosedError,
    ClientError,
    NoBrokerError,
    OperationTimeoutError,
    TopicNotServedError,
)

NO_PROBE = SendRetryPolicy(broker_retry_first_ms=60_000, broker_retry_max_ms=60_000)
ONE = BrokerAddress("127.0.0.1", 9001)
TWO = BrokerAddress("127.0.0.1", 9002)


class Connection:
    def __init__(self) -> None:
        self.timeouts_total = 0


def never_probed(address):
    raise ClientError("down")


def test_only_the_keyless_selectors_avoid_brokers():
    assert avoids_unreachable_brokers(RoundRobinPartitionSelector())
    assert avoids_unreachable_brokers(RandomPartitionSelector())
    assert not avoids_unreachable_brokers(HashPartitionSelector())


def test_connection_failures_and_timeouts_are_broker_failures_routing_errors_are_not():
    assert is_broker_failure(ClientError("cannot connect to broker x"), pool_closed=False)
    assert is_broker_failure(OperationTimeoutError("no reply"), pool_closed=False)
    assert is_broker_failure(ClientClosedError("connection closed"), pool_closed=False)
    assert not is_broker_failure(ClientClosedError("factory shut down"), pool_closed=True)
    assert not is_broker_failure(TopicNotServedError("no broker"), pool_closed=False)


def test_a_timeout_since_the_last_look_is_reported_once():
    rotation = BrokerRotation(NO_PROBE, never_probed)
    connection = Connection()
    rotation.check_timeouts(ONE, connection)  # The first look only records.

    connection.timeouts_total = 2
    with pytest.raises(OperationTimeoutError, match=ONE.uri):
        rotation.check_timeouts(ONE, connection)
    rotation.check_timeouts(ONE, connection)  # Seen: no second report.
    rotation.check_timeouts(ONE, Connection())  # A new connection starts afresh.


def test_taking_out_lists_the_broker_with_its_error():
    rotation = BrokerRotation(NO_PROBE, never_probed)

    rotation.take_out(ONE, ClientError("cannot connect"))
    rotation.take_out(ONE, ClientError("again"))  # Already out: kept as it was.

    assert rotation.any_out and rotation.out_uris() == {ONE.uri}
    assert "cannot connect" in rotation.describe() and "next probe in" in rotation.describe()
    rotation.close()
    assert rotation.out_uris() == set()


def test_a_probe_that_connects_brings_the_broker_back():
    probed = threading.Event()

    def probe(address):
        probed.set()

    rotation = BrokerRotation(SendRetryPolicy(broker_retry_first_ms=1), probe)
    rotation.take_out(ONE, ClientError("cannot connect"))

    assert probed.wait(5)
    wait_until_all_back(rotation)
    rotation.close()


def wait_until_all_back(rotation: BrokerRotation) -> None:
    for _ in range(500):  # bounded: 5 s
        if not rotation.any_out:
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"still out: {rotation.describe()}")


def test_probes_go_on_while_the_broker_stays_down():
    """Two probes fail (the broker stays out), the third finds it gone from the producer's
    brokers (``NoBrokerError``), which ends its time out of rotation."""
    tries: list[BrokerAddress] = []
    tried = threading.Semaphore(0)

    def probe(address):
        tries.append(address)
        tried.release()
        raise NoBrokerError("gone") if len(tries) == 3 else ClientError("down")

    policy = SendRetryPolicy(broker_retry_first_ms=1, broker_retry_max_ms=2)
    rotation = BrokerRotation(policy, probe)
    rotation.take_out(ONE, ClientError("cannot connect"))

    for _ in range(3):
        assert tried.acquire(timeout=5)
    wait_until_all_back(rotation)
    assert tries == [ONE, ONE, ONE]
    rotation.close()


@pytest.mark.parametrize(
    "fields",
    [
        {"attempts": 0},
        {"broker_retry_first_ms": 0},
        {"broker_retry_first_ms": 10, "broker_retry_max_ms": 5},
        {"attempts": True},
    ],
)
def test_a_retry_policy_out_of_range_is_refused(fields):
    with pytest.raises(ClientError, match="SendRetryPolicy"):
        SendRetryPolicy(**fields)
