"""Put and get rates over the last minutes, per topic, for the dashboard's charts.

``RateHistory`` samples the broker's own counters every ``SAMPLE_INTERVAL_S`` on the
reactor (a ``LoopingCall`` on the injected clock): the per-partition append counters summed
by topic, and the command counters. It keeps the last ``SAMPLES_MAX`` samples, so a chart
covers five minutes. Topics beyond ``TOPICS_MAX`` (by recent rate) are left out of the
charts. Reactor thread only.
"""

from __future__ import annotations

from collections import deque
from itertools import pairwise
from typing import Any

from twisted.internet import task

SAMPLE_INTERVAL_S = 2.0
SAMPLES_MAX = 150
TOPICS_MAX = 7


class RateHistory:
    """The last ``SAMPLES_MAX`` samples of the broker's put counters."""

    def __init__(self, broker: Any, reactor: Any) -> None:
        self._broker = broker
        self._reactor = reactor
        self._samples: deque[tuple[float, dict[str, int], int]] = deque(maxlen=SAMPLES_MAX + 1)
        self._loop = task.LoopingCall(self.sample)
        self._loop.clock = reactor

    def start(self) -> None:
        self._loop.start(SAMPLE_INTERVAL_S, now=True)

    def stop(self) -> None:
        if self._loop.running:
            self._loop.stop()

    def sample(self) -> None:
        """Record the counters now."""
        by_topic: dict[str, int] = {}
        for partition_log in self._broker.store.partitions():
            topic = partition_log.topic
            by_topic[topic] = by_topic.get(topic, 0) + partition_log.appended_messages
        gets = self._broker.counters.cmd_get
        self._samples.append((self._reactor.seconds(), by_topic, gets))

    def put_rates(self) -> list[tuple[str, list[float]]]:
        """Per topic, messages per second between consecutive samples (oldest first)."""
        samples = list(self._samples)
        rates: dict[str, list[float]] = {}
        for (before_s, before, _), (after_s, after, _) in pairwise(samples):
            elapsed_s = max(after_s - before_s, 1e-9)
            for topic, count in after.items():
                rates.setdefault(topic, []).append((count - before.get(topic, 0)) / elapsed_s)
        busiest = sorted(rates.items(), key=lambda item: -sum(item[1][-6:]))[:TOPICS_MAX]
        return sorted(busiest)

    def get_rates(self) -> list[float]:
        """Gets per second between consecutive samples (oldest first)."""
        samples = list(self._samples)
        return [
            (after - before) / max(after_s - before_s, 1e-9)
            for (before_s, _, before), (after_s, _, after) in pairwise(samples)
        ]
