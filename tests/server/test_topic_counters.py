"""``TopicCounters``: per-topic counts, bounded."""

from __future__ import annotations

from meta.server.topic_counters import OTHER_TOPIC, TopicCounters


def test_counts_add_up_per_topic_in_topic_order():
    counters = TopicCounters()
    counters.add("b")
    counters.add("a", 2)
    counters.add("b")
    assert counters.items() == [("a", 2), ("b", 2)]


def test_topics_past_the_bound_are_counted_together():
    counters = TopicCounters(topics_max=2)
    for topic in ("a", "b", "c", "d", "a"):
        counters.add(topic)
    assert counters.items() == [(OTHER_TOPIC, 2), ("a", 2), ("b", 1)]
