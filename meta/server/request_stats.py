"""``RequestStats``: the broker's realtime statistics per request (Java's ``MetaStatLog``
events), and which topics keep them.

A put, get or offset command of a topic whose ``stat`` key is on (``stats.stat_enabled``)
is recorded in ``RealtimeStats``; failed puts and missed gets are also counted per topic
for the dashboard's metrics (``TopicCounters``), whatever the ``stat`` key says. Whether a
topic keeps statistics is cached per topic name (at most ``STAT_TOPICS_MAX`` names, then
the cache starts over) until the configuration changes (``set_config``).

``record_put`` runs once per put; it is compiled in the compiled build
(``meta.compiled``), and the broker hands out its bound methods, so a put's count is a
call from compiled code to compiled code. Reactor thread only.
"""

from __future__ import annotations

from meta.server.stats import RealtimeStats, StatsConfig, stat_enabled
from meta.server.topic_counters import TopicCounters

STAT_TOPICS_MAX = 100_000
"""Topic names whose ``stat`` switch is cached; names come from peers, hence a bound."""


class RequestStats:
    """Records requests in the realtime statistics of the topics that keep them.

    Args:
        config: the running configuration, a ``meta.config.BrokerConfig`` (``set_config``
            replaces it).
        realtime: the counters the ``stats`` command reads.
        put_failed_by_topic: failed puts per topic (the dashboard's metrics).
        get_miss_by_topic: gets that found nothing, per topic (the dashboard's metrics).
    """

    def __init__(
        self,
        config: StatsConfig,
        realtime: RealtimeStats,
        put_failed_by_topic: TopicCounters,
        get_miss_by_topic: TopicCounters,
    ) -> None:
        self._config = config
        self._realtime = realtime
        self._put_failed_by_topic = put_failed_by_topic
        self._get_miss_by_topic = get_miss_by_topic
        self._stat_topics: dict[str, bool] = {}

    def set_config(self, config: StatsConfig) -> None:
        """Use ``config`` from now on (a reload): every topic's ``stat`` switch is read again."""
        self._config = config
        self._stat_topics.clear()

    def stat_enabled(self, topic: str) -> bool:
        """Whether realtime statistics are kept for ``topic`` (its ``stat`` key, cached)."""
        enabled = self._stat_topics.get(topic)
        if enabled is None:
            if len(self._stat_topics) > STAT_TOPICS_MAX:
                self._stat_topics.clear()
            enabled = self._stat_topics[topic] = stat_enabled(self._config, topic)
        return enabled

    def record_put(self, topic: str, partition: int, size: int) -> None:
        """Count a put of ``size`` body bytes to ``topic``'s ``partition``."""
        enabled = self._stat_topics.get(topic)  # ``stat_enabled``'s lookup inlined: per put
        if enabled or (enabled is None and self.stat_enabled(topic)):
            key = f"{self._config.broker_id}-{partition}"
            self._realtime.record("put", topic, key)
            self._realtime.record("message_size", topic, "*", size)

    def record_put_failed(self, topic: str, partition: int) -> None:
        """Count a failed put."""
        self._put_failed_by_topic.add(topic)
        if self.stat_enabled(topic):
            key = f"{self._config.broker_id}-{partition}"
            self._realtime.record("put_failed", topic, key)

    def record_get(self, topic: str, group: str) -> None:
        """Count a get that found data."""
        if self.stat_enabled(topic):
            self._realtime.record("get", topic, group)

    def record_get_miss(self, topic: str, group: str) -> None:
        """Count a get that found nothing."""
        self._get_miss_by_topic.add(topic)
        if self.stat_enabled(topic):
            self._realtime.record("get_miss", topic, group)

    def record_offset(self, topic: str, group: str) -> None:
        """Count an ``offset`` command."""
        if self.stat_enabled(topic):
            self._realtime.record("offset", topic, group)
