"""Keyless sends avoid unreachable brokers: ``send_with_retries``, ``BrokerRotation`` and the
``SendRetryPolicy`` checks, with fake sends (no network)."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from meta.client.cluster import BrokerAddress
from meta.client.produce.rotation import (
    BrokerRotation,
    SendRetryPolicy,
    avoids_unreachable_brokers,
    send_with_retries,
)
from meta.client.produce.selectors import (
    HashPartitionSelector,
    RandomPartitionSelector,
    RoundRobinPartitionSelector,
)
from meta.errors import ClientError, NoBrokerError, OperationTimeoutError, TopicNotServedError

NO_PROBE = SendRetryPolicy(broker_retry_first_ms=60_000, broker_retry_max_ms=60_000)
ONE = BrokerAddress("127.0.0.1", 9001)
TWO = BrokerAddress("127.0.0.1", 9002)


def done(result=None, error=None) -> Future:
    future: Future = Future()
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)
    return future


class Sends:
    """Plays the given outcomes in order, one per send, recording the brokers used."""

    def __init__(self, *outcomes) -> None:
        self.outcomes = list(outcomes)
        self.brokers: list[BrokerAddress | None] = []

    def __call__(self):
        address, future = self.outcomes.pop(0)
        self.brokers.append(address)
        return address, future


def never_probed(address):
    raise ClientError("down")


def test_only_the_keyless_selectors_avoid_brokers():
    assert avoids_unreachable_brokers(RoundRobinPartitionSelector())
    assert avoids_unreachable_brokers(RandomPartitionSelector())
    assert not avoids_unreachable_brokers(HashPartitionSelector())


def test_a_refused_connection_takes_the_broker_out_and_the_send_goes_elsewhere():
    rotation = BrokerRotation(NO_PROBE, never_probed)
    sends = Sends((ONE, done(error=ClientError("cannot connect"))), (TWO, done("stored")))

    future = send_with_retries(sends, rotation, 3, lambda: True)

    assert future.result(1) == "stored"
    assert rotation.out_uris() == {ONE.uri}
    assert "cannot connect" in rotation.describe()
    rotation.close()


def test_a_timeout_counts_as_a_broker_failure():
    rotation = BrokerRotation(NO_PROBE, never_probed)
    sends = Sends((ONE, done(error=OperationTimeoutError("late"))), (TWO, done("stored")))

    assert send_with_retries(sends, rotation, 3, lambda: True).result(1) == "stored"
    assert rotation.out_uris() == {ONE.uri}
    rotation.close()


def test_the_attempts_are_bounded_and_the_last_error_is_reported():
    rotation = BrokerRotation(NO_PROBE, never_probed)
    sends = Sends(
        (ONE, done(error=ClientError("one down"))), (TWO, done(error=ClientError("two down")))
    )

    future = send_with_retries(sends, rotation, 2, lambda: True)

    with pytest.raises(ClientError, match="two down"):
        future.result(1)
    assert sends.outcomes == []
    assert rotation.out_uris() == {ONE.uri, TWO.uri}
    rotation.close()


def test_a_routing_error_or_a_closed_producer_is_not_retried():
    rotation = BrokerRotation(SendRetryPolicy(), never_probed)
    unrouted = Sends((None, done(error=TopicNotServedError("no broker"))))
    with pytest.raises(TopicNotServedError):
        send_with_retries(unrouted, rotation, 3, lambda: True).result(1)

    closed = Sends((ONE, done(error=ClientError("closed"))))
    with pytest.raises(ClientError, match="closed"):
        send_with_retries(closed, rotation, 3, lambda: False).result(1)
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
