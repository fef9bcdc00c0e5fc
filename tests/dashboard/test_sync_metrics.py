"""``/metrics`` of a samsa master: the synchronous-replication families get samples from
``Broker.sync`` (its partition states, link, failure count, advertising and latency)."""

from __future__ import annotations

from types import SimpleNamespace

from meta.sync.samsa import LATENCY_BUCKETS_S
from tests.dashboard.fakes import FakeBroker
from tests.dashboard.test_metrics import partition_labels, scrape


def samsa(**fields) -> SimpleNamespace:
    counts = [0] * (len(LATENCY_BUCKETS_S) + 1)
    counts[1], counts[-1] = 3, 1  # three answers within 1 ms, one after 2.5 s
    values = {
        "role": "samsa",
        "connected": True,
        "consecutive_failures": 2,
        "advertised": False,
        "latency_buckets_s": LATENCY_BUCKETS_S,
        "latency_counts": counts,
        "latency_sum_s": 3.5,
        "partition_states": lambda: [("t", 0, "ok"), ("t", 1, "diverged")],
    }
    values.update(fields)
    return SimpleNamespace(**values)


def state_labels(topic: str, partition: int, state: str) -> tuple:
    return tuple(sorted((*partition_labels(topic, partition), ("state", state))))


def test_a_samsa_master_exposes_its_replication_state():
    samples = scrape(FakeBroker(sync=samsa()))
    states = samples["metaq_sync_partition_state"]
    assert states[state_labels("t", 0, "ok")] == 1
    assert states[state_labels("t", 1, "ok")] == 0
    assert states[state_labels("t", 1, "diverged")] == 1
    assert len(states) == 6
    assert samples["metaq_sync_slave_connected"] == {(): 1}
    assert samples["metaq_sync_slave_consecutive_failures"] == {(): 2}
    assert samples["metaq_sync_published"] == {(): 0}
    assert dict(next(iter(samples["metaq_broker_info"])))["role"] == "sync_master"


def test_the_latency_histogram_is_cumulative_with_an_inf_bucket():
    samples = scrape(FakeBroker(sync=samsa()))
    buckets = samples["metaq_sync_latency_seconds_bucket"]
    assert buckets[(("le", "0.0005"),)] == 0
    assert buckets[(("le", "0.001"),)] == 3
    assert buckets[(("le", "2.5"),)] == 3
    assert buckets[(("le", "+Inf"),)] == 4
    assert samples["metaq_sync_latency_seconds_count"] == {(): 4}
    assert samples["metaq_sync_latency_seconds_sum"] == {(): 3.5}


def test_a_plain_broker_has_the_families_without_samples():
    samples = scrape(FakeBroker())
    assert "metaq_sync_slave_connected" not in samples
    assert "metaq_sync_latency_seconds_count" not in samples
