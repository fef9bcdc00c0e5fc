"""``TopicRetry`` with a fake registry on ``task.Clock``: backoff, order, gating, forgetting."""

from __future__ import annotations

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from meta.server.topic_retry import (
    CONNECTED_POLL_S,
    RETRY_DELAY_FIRST_S,
    RETRY_DELAY_MAX_S,
    TopicRetry,
    describe_error,
)


class FakeRegistry:
    """Fails ``register_topic`` for the topics in ``failing``, recording each call; tells the
    retry the outcome first, as ``BrokerRegistry`` does."""

    def __init__(self) -> None:
        self.connected = True
        self.calls: list[str] = []
        self.failing: set[str] = set()
        self.retry: TopicRetry | None = None

    def register_topic(self, topic: str, force: bool = False) -> defer.Deferred:
        assert force
        self.calls.append(topic)
        if topic in self.failing:
            failure = Failure(TimeoutError())
            self.retry.done(topic, failure)
            return defer.fail(failure)
        self.retry.done(topic, None)
        return defer.succeed(None)


def make() -> tuple[FakeRegistry, TopicRetry, Clock]:
    clock = Clock()
    registry = FakeRegistry()
    retry = TopicRetry(registry, clock)
    registry.retry = retry
    return registry, retry, clock


def failure() -> Failure:
    return Failure(TimeoutError())


def test_a_failed_topic_is_retried_after_the_first_delay():
    registry, retry, clock = make()
    retry.failed("a", failure())
    clock.advance(RETRY_DELAY_FIRST_S - 0.01)
    assert registry.calls == []
    clock.advance(0.01)
    assert registry.calls == ["a"]
    assert retry.pending_topics == []


def test_failures_double_the_delay_up_to_the_maximum():
    registry, retry, clock = make()
    registry.failing.add("a")
    retry.failed("a", failure())
    times = []
    while len(times) < 7:
        clock.advance(0.25)  # exact in binary, as every delay is a multiple of it
        if len(registry.calls) > len(times):
            times.append(round(clock.seconds(), 2))
    delays = [
        round(later - earlier, 2) for earlier, later in zip(times[:-1], times[1:], strict=True)
    ]
    assert times[0] == RETRY_DELAY_FIRST_S
    assert delays == [1.0, 2.0, 4.0, RETRY_DELAY_MAX_S, RETRY_DELAY_MAX_S, RETRY_DELAY_MAX_S]
    assert retry.pending_topics == ["a"]


def test_nothing_is_sent_while_the_registry_is_not_connected():
    registry, retry, clock = make()
    registry.connected = False
    retry.failed("a", failure())
    clock.advance(30)
    assert registry.calls == []
    registry.connected = True
    clock.advance(CONNECTED_POLL_S)
    assert registry.calls == ["a"]


def test_after_a_success_the_next_pending_topic_follows_at_once():
    registry, retry, clock = make()
    retry.failed("a", failure())
    retry.failed("b", failure())
    clock.advance(RETRY_DELAY_FIRST_S)
    clock.advance(0)
    assert registry.calls == ["a", "b"]


def test_a_topic_that_keeps_failing_does_not_hold_the_others():
    registry, retry, clock = make()
    registry.failing.add("a")
    retry.failed("a", failure())
    retry.failed("b", failure())
    clock.advance(RETRY_DELAY_FIRST_S)
    clock.advance(RETRY_DELAY_MAX_S)
    assert registry.calls[:2] == ["a", "b"]
    assert retry.pending_topics == ["a"]


def test_an_unregistered_topic_is_not_retried():
    registry, retry, clock = make()
    retry.failed("a", failure())
    retry.forget("a")
    clock.advance(RETRY_DELAY_MAX_S)
    assert registry.calls == []


def test_stop_cancels_every_retry():
    registry, retry, clock = make()
    retry.failed("a", failure())
    retry.stop()
    retry.failed("b", failure())
    clock.advance(RETRY_DELAY_MAX_S)
    assert registry.calls == []
    assert clock.getDelayedCalls() == []


def test_a_failure_with_an_empty_message_is_described_by_its_type():
    assert describe_error(Failure(TimeoutError())) == "TimeoutError"
    assert describe_error(ValueError("bad")) == "ValueError: bad"
