"""``BrokerMetrics``: the broker's counters as Prometheus text, read at scrape time."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from meta.dashboard.metrics import BrokerMetrics
from meta.slave.lag import PartitionLag
from tests.dashboard.fakes import FakeBroker, FakePartition


def scrape(broker, now_s: float = 10.0) -> dict[str, dict[tuple, float]]:
    """sample name -> {sorted label items: value}."""
    text = BrokerMetrics(broker, lambda: now_s, 4.0).render().decode()
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def partition_labels(topic: str, partition: int) -> tuple:
    return (("partition", str(partition)), ("topic", topic))


def test_put_counters_are_read_from_each_partition_log_at_scrape_time():
    partition = FakePartition("test", 0, appended_messages=5, appended_bytes=120)
    broker = FakeBroker(partitions=[partition])
    assert scrape(broker)["metaq_put_messages_total"][partition_labels("test", 0)] == 5
    partition.appended_messages = 1005
    samples = scrape(broker)
    assert samples["metaq_put_messages_total"][partition_labels("test", 0)] == 1005
    assert samples["metaq_put_bytes_total"][partition_labels("test", 0)] == 120


def test_a_failed_partition_is_halted_and_a_refusing_one_closed():
    failed = FakePartition("t", 0, accepts_appends=False, failed=OSError("disk"))
    closed = FakePartition("t", 1, accepts_appends=False)
    samples = scrape(FakeBroker(partitions=[failed, closed]))
    assert samples["metaq_partition_halted"] == {
        partition_labels("t", 0): 1,
        partition_labels("t", 1): 0,
    }
    assert samples["metaq_partition_closed"] == {
        partition_labels("t", 0): 0,
        partition_labels("t", 1): 1,
    }


def test_broker_info_uptime_and_requests():
    broker = FakeBroker()
    broker.counters.cmd_put = 7
    samples = scrape(broker, now_s=10.5)
    (labels,) = samples["metaq_broker_info"]
    assert dict(labels)["broker_id"] == "3"
    assert dict(labels)["role"] == "master"
    assert samples["metaq_uptime_seconds"][()] == 6.5
    assert samples["metaq_requests_total"][(("cmd", "put"), ("transport", "tcp"))] == 7


def test_each_listening_port_shows_its_open_refused_and_closed_connections():
    broker = FakeBroker()
    guard = broker.connection_guard
    guard.add_port("http", "the HTTP port", "maxHttpConnections", 1)

    class Connection:  # what the guard reads of a refused one
        transport = SimpleNamespace(
            getPeer=lambda: SimpleNamespace(host="127.0.0.1", port=1), abortConnection=lambda: None
        )

    for _ in range(3):  # a cap of 2: the third is refused
        guard.admit(Connection())
    samples = scrape(broker)
    assert samples["metaq_port_connections"] == {(("port", "text"),): 2, (("port", "http"),): 0}
    assert samples["metaq_port_connections_refused_total"][(("port", "text"),)] == 1
    closed = samples["metaq_port_connections_closed_total"]
    assert closed[(("port", "text"), ("reason", "header_timeout"))] == 0
    assert {dict(labels)["reason"] for labels in closed} == {
        "header_timeout",
        "body_timeout",
        "idle",
        "evicted",
    }


def test_http_requests_are_their_own_transport():
    broker = FakeBroker()
    broker.counters.cmd_get = 7
    broker.counters.http_get = 2
    samples = scrape(broker)
    assert samples["metaq_requests_total"][(("cmd", "get"), ("transport", "tcp"))] == 5
    assert samples["metaq_requests_total"][(("cmd", "get"), ("transport", "http"))] == 2


def test_failures_and_misses_are_counted_per_topic():
    broker = FakeBroker()
    broker.put_failed_by_topic.add("a")
    broker.get_miss_by_topic.add("b", 3)
    samples = scrape(broker)
    assert samples["metaq_put_failed_total"] == {(("topic", "a"),): 1}
    assert samples["metaq_get_miss_total"] == {(("topic", "b"),): 3}


def test_open_and_prepared_transactions_are_counted_by_state():
    broker = FakeBroker(live_transactions=[("TX:1", "IN_USE", 1, 10), ("XID:2", "PREPARED", 2, 20)])
    samples = scrape(broker)
    assert samples["metaq_transactions_open"][()] == 1
    assert samples["metaq_transactions_prepared"][()] == 1


def test_an_async_slave_exposes_its_lag_per_partition():
    row = PartitionLag("t", 2, 100, 150, 50, 3, "copying")
    broker = FakeBroker(slave_id=0, replication=SimpleNamespace(lag_rows=lambda: [row]))
    samples = scrape(broker)
    assert samples["metaq_async_slave_lag_bytes"] == {partition_labels("t", 2): 50}
    assert samples["metaq_async_slave_lag_seconds"] == {partition_labels("t", 2): 3}
    assert dict(next(iter(samples["metaq_broker_info"])))["role"] == "async_slave"


def test_fsync_durations_fill_the_histogram():
    metrics = BrokerMetrics(FakeBroker(), lambda: 0.0, 0.0)
    metrics.fsync.observe(0.003)
    text = metrics.render().decode()
    assert 'metaq_fsync_seconds_bucket{le="0.005"} 1.0' in text
    assert 'metaq_fsync_seconds_bucket{le="0.0025"} 0.0' in text


def test_consumer_lag_rows_become_one_gauge_family():
    from meta.dashboard.metrics import consumer_lag_text

    text = consumer_lag_text([("g", "t", 1, 25)]).decode()
    (family,) = text_string_to_metric_families(text)
    assert family.name == "metaq_consumer_lag_bytes"
    assert family.samples[0].labels == {"group": "g", "topic": "t", "partition": "1"}
    assert family.samples[0].value == 25


def test_partition_lines_parse_back_with_escaped_label_values():
    from meta.dashboard.metrics import partitions_text

    odd = 'a"b\\c\nd'
    text = partitions_text([FakePartition(odd, 2, appended_messages=7, max_offset=90)])
    families = {family.name: family for family in text_string_to_metric_families(text)}
    (sample,) = families["metaq_put_messages"].samples
    assert sample.labels == {"topic": odd, "partition": "2"}
    assert sample.value == 7
    assert families["metaq_put_messages"].type == "counter"
    assert families["metaq_partition_max_offset_bytes"].samples[0].value == 90
    assert families["metaq_partition_max_offset_bytes"].type == "gauge"


def test_a_configured_topic_never_written_has_its_partitions_at_zero():
    written = FakePartition("test", 0, appended_messages=2)
    broker = FakeBroker(partitions=[written], configured={"test": 1, "orders": 2})
    samples = scrape(broker)
    assert samples["metaq_put_messages_total"] == {
        partition_labels("orders", 0): 0,
        partition_labels("orders", 1): 0,
        partition_labels("test", 0): 2,
    }
    assert samples["metaq_partition_segments"][partition_labels("orders", 1)] == 0
    assert samples["metaq_put_failed_total"] == {(("topic", "orders"),): 0, (("topic", "test"),): 0}
    assert samples["metaq_get_miss_total"][(("topic", "orders"),)] == 0
