"""``RateHistory``: put and get rates from samples of the broker's counters."""

from __future__ import annotations

from twisted.internet.task import Clock

from meta.dashboard.history import SAMPLE_INTERVAL_S, SAMPLES_MAX, RateHistory
from tests.dashboard.fakes import FakeBroker, FakePartition


def test_rates_are_the_counter_differences_per_second_between_samples():
    clock = Clock()
    partition = FakePartition("t", 0)
    broker = FakeBroker(partitions=[partition])
    history = RateHistory(broker, clock)
    history.start()
    partition.appended_messages = 10 * SAMPLE_INTERVAL_S
    broker.counters.cmd_get = 4
    clock.advance(SAMPLE_INTERVAL_S)
    assert history.put_rates() == [("t", [10.0])]
    assert history.get_rates() == [4 / SAMPLE_INTERVAL_S]
    history.stop()


def test_samples_are_bounded():
    clock = Clock()
    history = RateHistory(FakeBroker(partitions=[FakePartition("t", 0)]), clock)
    history.start()
    for _ in range(SAMPLES_MAX * 2):
        clock.advance(SAMPLE_INTERVAL_S)
    assert len(history.get_rates()) == SAMPLES_MAX
    history.stop()
