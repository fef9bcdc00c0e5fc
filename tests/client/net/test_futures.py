"""``meta.client.net.futures``: pipelined futures, on the fast path and on the public fallback.

Every behaviour test runs on both pairs (future class, ``complete_batch``): the fast one that
uses ``concurrent.futures`` internals and the public-API one used when those do not fit.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass
from typing import Any

import pytest

from meta.client.net import futures
from meta.errors import ClientError

WAIT_S = 10.0


def wait_for(condition, timeout_s: float = WAIT_S, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


@dataclass(frozen=True)
class Pair:
    future: Any
    complete_batch: Any


PAIRS = {
    "fast": Pair(futures.FastPendingFuture, futures.complete_batch_fast),
    "public": Pair(futures.PublicPendingFuture, futures.complete_batch_public),
}


@pytest.fixture(params=sorted(PAIRS))
def pair(request) -> Pair:
    return PAIRS[request.param]


def test_this_python_uses_the_fast_pair():
    assert futures.INTERNALS_FIT
    assert futures.PendingFuture is futures.FastPendingFuture
    assert futures.complete_batch is futures.complete_batch_fast


def test_an_untested_python_version_uses_the_public_pair():
    assert not futures.internals_fit((3, 7))
    assert not futures.internals_fit(futures.TESTED_VERSIONS[1])


def test_a_future_with_other_internals_uses_the_public_pair(monkeypatch):
    monkeypatch.setattr(futures, "FUTURE_ATTRIBUTES", futures.FUTURE_ATTRIBUTES | {"_new"})
    assert not futures.internals_fit()


def test_a_pipelined_future_is_a_real_future_with_every_attribute_of_one(pair):
    future = pair.future(Owner(), time.monotonic() + 5, 5.0, None)
    assert isinstance(future, Future)
    assert set(vars(Future())) <= set(vars(future))


class Owner:
    """Stands in for a connection: ``forget`` reports whether it removed the request."""

    def __init__(self, holds: bool = False) -> None:
        self.holds = holds
        self.forgotten: list[int] = []

    def forget(self, opaque: int) -> bool:
        self.forgotten.append(opaque)
        return self.holds


def shared_futures(pair: Pair, count: int, owner=None):
    condition = threading.Condition(threading.RLock())
    owner = owner or Owner()
    deadline = time.monotonic() + 5
    return condition, [pair.future(owner, deadline, 5.0, None, condition) for _ in range(count)]


def test_complete_batch_sets_results_and_errors_and_runs_each_callback_once(pair):
    condition, futures = shared_futures(pair, 3)
    calls: list = []
    for future in futures:
        future.add_done_callback(calls.append)
    outcomes = [(futures[0], "a", None), (futures[1], None, ClientError("gone"))]
    waiter = threading.Thread(target=wait, args=(futures[:2],), kwargs={"timeout": WAIT_S})
    waiter.start()
    pair.complete_batch(condition, outcomes)
    waiter.join(WAIT_S)
    assert not waiter.is_alive()
    assert futures[0].result(0) == "a"
    with pytest.raises(ClientError, match="gone"):
        futures[1].result(0)
    assert not futures[2].done()
    pair.complete_batch(condition, [(futures[0], "again", None), (futures[2], "c", None)])
    assert futures[0].result(0) == "a"  # completed once: a second outcome is ignored
    assert [future.result(0) for future in (futures[0], futures[2])] == ["a", "c"]
    assert calls == [futures[0], futures[1], futures[2]]


def test_complete_batch_leaves_a_cancelled_future_cancelled_and_wakes_its_waiters(pair):
    """A future cancelled while its reply was converted stays cancelled; ``wait()`` hears."""
    condition, (cancelled,) = shared_futures(pair, 1)
    waiter = threading.Thread(target=wait, args=([cancelled],), kwargs={"timeout": WAIT_S,
                              "return_when": FIRST_COMPLETED})  # fmt: skip
    assert cancelled.cancel()
    waiter.start()
    pair.complete_batch(condition, [(cancelled, "late", None)])
    waiter.join(WAIT_S)
    assert not waiter.is_alive() and cancelled.cancelled()


def test_cancelling_a_future_its_owner_still_held_notifies_wait_at_once(pair):
    condition, (future,) = shared_futures(pair, 1, Owner(holds=True))
    future.opaque = 7
    assert future.cancel()
    done, not_done = wait([future], timeout=WAIT_S)
    assert done == {future} and not not_done
    assert future.owner.forgotten == [7]


def test_result_keeps_waiting_when_another_future_of_the_condition_completes(pair):
    """Futures share one condition: a wake-up for another future is not a timeout."""
    condition, (mine, other) = shared_futures(pair, 2)
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(mine.result(WAIT_S)))
    waiter.start()
    wait_for(lambda: len(mine._condition._waiters) == 1, what="the waiter to wait")
    pair.complete_batch(condition, [(other, "other", None)])
    wait_for(lambda: len(mine._condition._waiters) == 1 or not waiter.is_alive(), what="a re-wait")
    assert waiter.is_alive()
    pair.complete_batch(condition, [(mine, "mine", None)])
    waiter.join(WAIT_S)
    assert got == ["mine"]
    with pytest.raises(FutureTimeoutError):
        shared_futures(pair, 1)[1][0].result(0.05)
