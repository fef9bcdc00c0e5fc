"""``/metrics``: the broker's numbers in Prometheus' text format, via ``prometheus_client``.

``BrokerCollector`` reads the counters the broker already keeps (``BrokerCounters``, the
per-topic failure counters, the transactions, the async slave's lag) when Prometheus
scrapes, so the put and get paths count nothing twice; ``partitions_text`` writes each
``PartitionLog``'s numbers (see there why it writes them itself).
The only metric fed as events happen is ``metaq_fsync_seconds``: the flusher reports each
batch's duration (one observation per fsync batch, not per message).

The names and labels are those of docs/dashboard.md. Consumer lag needs ZooKeeper reads, so it is
only exposed for the groups a scrape names (``/metrics?groups=G1,G2``): see
``consumer_lag_text``. Families of features this broker does not run
(synchronous replication, an async slave's lag on a master) are exposed with no samples, so
that dashboards and alerts can name them everywhere.

Collection runs on the reactor thread (``render`` is called by the web resource); the
histogram is thread-safe (``prometheus_client`` locks it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from meta import __version__
from meta.status.facts import broker_role, exact_topic_names, unwritten_partitions
from meta.sync import link_states
from meta.tx import states

__all__ = ["CONTENT_TYPE", "BrokerCollector", "BrokerMetrics", "consumer_lag_text"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text format 0.0.4, which ``generate_latest`` writes (newer releases of
``prometheus_client`` label the same text ``version=1.0.0`` by default)."""

FSYNC_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
"""Buckets of ``metaq_fsync_seconds``: an fsync takes from tens of microseconds to seconds."""

PARTITION_LABELS = ("topic", "partition")
OPEN_STATES = frozenset({states.START, states.IN_USE})


class BrokerMetrics:
    """The broker's ``CollectorRegistry``: its collector and the fsync histogram.

    Args:
        broker: the ``Broker``.
        clock: seconds, the same clock as ``started_at_s``.
        started_at_s: when the process started serving, for ``metaq_uptime_seconds``.
    """

    def __init__(self, broker: Any, clock: Callable[[], float], started_at_s: float) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.fsync = Histogram(
            "metaq_fsync_seconds",
            "Duration of one flush batch (the fsync of every file it covers), in seconds.",
            buckets=FSYNC_BUCKETS_S,
            registry=self.registry,
        )
        self.registry.register(BrokerCollector(broker, clock, started_at_s))
        self._broker = broker

    def render(self) -> bytes:
        """The text exposition of every metric."""
        broker = self._broker
        partitions = partitions_text(broker.store.partitions(), unwritten_partitions(broker))
        return generate_latest(self.registry) + partitions.encode("utf-8")


class BrokerCollector(Collector):
    """Reads the broker's counters at scrape time. Reactor thread only."""

    def __init__(self, broker: Any, clock: Callable[[], float], started_at_s: float) -> None:
        self._broker = broker
        self._clock = clock
        self._started_at_s = started_at_s

    def collect(self) -> Iterator[Any]:
        yield from self._broker_families()
        yield from self._request_families()
        yield from self._replication_families()
        yield from self._transaction_families()

    def _broker_families(self) -> Iterator[Any]:
        broker = self._broker
        info = GaugeMetricFamily(
            "metaq_broker_info",
            "The broker's id, version and role; always 1.",
            labels=("broker_id", "version", "role"),
        )
        info.add_metric((str(broker.config.broker_id), __version__, broker_role(broker)), 1)
        yield info
        yield GaugeMetricFamily(
            "metaq_uptime_seconds",
            "Seconds since the broker process started.",
            value=max(0.0, self._clock() - self._started_at_s),
        )
        yield GaugeMetricFamily(
            "metaq_connections", "Open TCP client connections.", value=len(broker.connections)
        )
        yield from _port_families(broker.connection_guard.ports)
        yield from _scrubber_families(broker.store.scrubber)

    def _request_families(self) -> Iterator[Any]:
        broker = self._broker
        counters = broker.counters
        requests = CounterMetricFamily(
            "metaq_requests_total",
            "Commands received, by command and transport.",
            labels=("cmd", "transport"),
        )
        # ``http_*`` are the HTTP share of the ``cmd_*`` counters (``BrokerCounters``), so
        # each difference only grows; ``cmd_offset`` also counts the gets answered 301
        # (Java's stats), which are gets here.
        for cmd, count in (
            ("put", counters.cmd_put - counters.http_put),
            ("get", counters.cmd_get - counters.http_get),
            ("offset", counters.cmd_offset - counters.get_moved - counters.http_offset),
            ("transaction_begin", counters.tx_begin + counters.tx_xa_begin),
            ("transaction_commit", counters.tx_commit),
            ("transaction_rollback", counters.tx_rollback),
        ):
            requests.add_metric((cmd, "tcp"), count)
        for cmd, count in (
            ("put", counters.http_put),
            ("get", counters.http_get),
            ("offset", counters.http_offset),
        ):
            requests.add_metric((cmd, "http"), count)
        yield requests
        configured = exact_topic_names(broker.config)
        yield _topic_counter(
            "metaq_put_failed",
            "Puts answered with an error, by topic (when the store refused them).",
            configured,
            broker.put_failed_by_topic.items(),
        )
        yield _topic_counter(
            "metaq_get_miss",
            "Gets of a partition store that found no message at their offset, by topic.",
            configured,
            broker.get_miss_by_topic.items(),
        )

    def _replication_families(self) -> Iterator[Any]:
        lag_bytes = GaugeMetricFamily(
            "metaq_async_slave_lag_bytes",
            "On an async slave: bytes the master holds that this slave has not copied yet.",
            labels=PARTITION_LABELS,
        )
        lag_seconds = GaugeMetricFamily(
            "metaq_async_slave_lag_seconds",
            "On an async slave: age of the oldest master data not copied yet, in seconds.",
            labels=PARTITION_LABELS,
        )
        replication = self._broker.replication
        for row in replication.lag_rows() if replication is not None else ():
            labels = (row.topic, str(row.partition))
            if row.lag_bytes is not None:
                lag_bytes.add_metric(labels, row.lag_bytes)
            if row.lag_seconds is not None:
                lag_seconds.add_metric(labels, row.lag_seconds)
        yield lag_bytes
        yield lag_seconds
        yield from _sync_families(self._broker.sync)

    def _transaction_families(self) -> Iterator[Any]:
        live = self._broker.transactions.describe()
        yield GaugeMetricFamily(
            "metaq_transactions_open",
            "Transactions begun and not yet prepared, committed or rolled back.",
            value=sum(1 for _key, state, _count, _bytes in live if state in OPEN_STATES),
        )
        yield GaugeMetricFamily(
            "metaq_transactions_prepared",
            "XA transactions prepared and waiting for their commit or rollback.",
            value=sum(1 for _key, state, _count, _bytes in live if state == states.PREPARED),
        )


PARTITION_FAMILIES: tuple[tuple[str, str, str], ...] = (
    (
        "metaq_put_messages_total",
        "counter",
        "Appends acknowledged by the partition in this process (a transaction batch counts 1).",
    ),
    (
        "metaq_put_bytes_total",
        "counter",
        "Record bytes (headers included) acknowledged by the partition in this process.",
    ),
    ("metaq_partition_min_offset_bytes", "gauge", "Offset of the oldest segment."),
    ("metaq_partition_max_offset_bytes", "gauge", "Visible end of the partition."),
    ("metaq_partition_segments", "gauge", "Segment files of the partition."),
    ("metaq_partition_closed", "gauge", "1 when the partition takes no more puts."),
    (
        "metaq_partition_halted",
        "gauge",
        "1 when a failed write or fsync stopped the partition until an operator acts.",
    ),
    (
        "metaq_partition_corrupt_ranges",
        "gauge",
        "Known corrupt ranges of the partition, which the broker refuses to serve.",
    ),
    (
        "metaq_partition_corrupt_bytes",
        "gauge",
        "Bytes in the partition's known corrupt ranges.",
    ),
    (
        "metaq_scrub_bytes_total",
        "counter",
        "Bytes of the partition's records the background scrubber checked in this process.",
    ),
    (
        "metaq_scrub_passes_total",
        "counter",
        "Complete scrubber passes over the partition in this process.",
    ),
    (
        "metaq_recovery_cut_bytes",
        "gauge",
        "Bytes start-up recovery cut off the partition's last segment (a torn or zeroed tail).",
    ),
)
"""The per-partition families: name as written (counters with ``_total``), type, help."""

EMPTY_PARTITION = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
"""The per-partition values of a configured partition without a store (no segment yet)."""

assert len(EMPTY_PARTITION) == len(PARTITION_FAMILIES)


def partitions_text(logs: Iterable[Any], unwritten: Iterable[tuple[str, int]] = ()) -> str:
    """The per-partition families in the text format 0.0.4, sorted by topic and partition:
    each partition log's numbers, and zeros for each ``(topic, partition)`` of ``unwritten``
    (configured partitions that have no store yet, ``facts.unwritten_partitions``).

    Written here rather than through ``prometheus_client``'s ``generate_latest``: with
    1,000 partitions (7,000 samples) the library's per-sample label validation and float
    formatting cost about 60 ms of reactor time per scrape, this about a tenth of that. The
    output is the library's format (tests parse it with the library's own parser): HELP and
    TYPE lines, then one ``name{topic="...",partition="N"} value`` line per partition.
    """
    found = []
    for partition_log in logs:
        halted = partition_log.failed is not None
        closed = not partition_log.accepts_appends and not halted
        health = partition_log.health
        corrupt = health.ranges_from(partition_log.min_offset)
        values = (
            partition_log.appended_messages,
            partition_log.appended_bytes,
            partition_log.min_offset,
            partition_log.max_offset,
            len(partition_log.segments),
            int(closed),
            int(halted),
            len(corrupt),
            sum(known.end - known.start for known in corrupt),
            health.scrubbed_bytes,
            health.scrub_passes,
            health.recovery_cut_bytes,
        )
        found.append((partition_log.topic, partition_log.partition, values))
    found += [(topic, partition, EMPTY_PARTITION) for topic, partition in unwritten]
    found.sort(key=lambda row: (row[0], row[1]))
    rows = [
        (f'topic="{_label_value(topic)}",partition="{partition}"', values)
        for topic, partition, values in found
    ]
    parts = []
    for index, (name, kind, documentation) in enumerate(PARTITION_FAMILIES):
        parts.append(f"# HELP {name} {documentation}\n# TYPE {name} {kind}\n")
        parts.extend(f"{name}{{{labels}}} {values[index]}\n" for labels, values in rows)
    return "".join(parts)


def _port_families(ports: Iterable[Any]) -> Iterator[Any]:
    """Each listening port's connections: open, refused at its cap, and closed by the
    connection policy by reason (``meta.server.connections``)."""
    open_now = GaugeMetricFamily(
        "metaq_port_connections", "Connections open now, by listening port.", labels=("port",)
    )
    refused = CounterMetricFamily(
        "metaq_port_connections_refused",
        "Connections refused at a cap (the port's, or maxTotalConnections), by listening port.",
        labels=("port",),
    )
    closed = CounterMetricFamily(
        "metaq_port_connections_closed",
        "Connections the broker closed: a header (or a whole HTTP request) or a text-port "
        "body not completed in time, idle, or reset to make room on a full port.",
        labels=("port", "reason"),
    )
    for port in ports:
        open_now.add_metric((port.label,), port.open)
        refused.add_metric((port.label,), port.refusals.count)
        for reason, events in (
            ("header_timeout", port.header_timeouts),
            ("body_timeout", port.body_timeouts),
            ("idle", port.idle_timeouts),
            ("evicted", port.evictions),
        ):
            closed.add_metric((port.label, reason), events.count)
    yield open_now
    yield refused
    yield closed


def _scrubber_families(scrubber: Any) -> Iterator[Any]:
    """The background scrubber's store-wide numbers (``meta.store.scrub``)."""
    yield GaugeMetricFamily(
        "metaq_scrub_rate_bytes_per_second",
        "The scrubber's configured rate (scrubBytesPerSecond); 0 when it is off.",
        value=scrubber.bytes_per_s,
    )
    yield CounterMetricFamily(
        "metaq_scrub_store_passes",
        "Complete scrubber passes over every partition of the store in this process.",
        value=scrubber.passes,
    )
    yield CounterMetricFamily(
        "metaq_scrub_corrupt_found",
        "Corrupt ranges the scrubber found in this process (recovery's are not counted).",
        value=scrubber.corrupt_found,
    )


def _label_value(text: str) -> str:
    """A label value as the text format writes it: backslash, quote and newline escaped."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def consumer_lag_text(rows: list[tuple[str, str, int, int]]) -> bytes:
    """``metaq_consumer_lag_bytes`` for ``(group, topic, partition, lag bytes)`` rows, in the
    text format (appended to the scrape when ``/metrics?groups=`` asks for it)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ConsumerLag(rows))
    return generate_latest(registry)


class _ConsumerLag(Collector):
    def __init__(self, rows: list[tuple[str, str, int, int]]) -> None:
        self._rows = rows

    def collect(self) -> Iterator[Any]:
        lag = GaugeMetricFamily(
            "metaq_consumer_lag_bytes",
            "Bytes between a group's committed offset and the partition's visible end.",
            labels=("group", *PARTITION_LABELS),
        )
        for group, topic, partition, lag_bytes in self._rows:
            lag.add_metric((group, topic, str(partition)), lag_bytes)
        yield lag


def _topic_counter(
    name: str, documentation: str, configured: list[str], items: list[tuple[str, int]]
) -> Any:
    """A per-topic counter: ``items``' counts, and 0 for each ``configured`` topic without
    one (so that a rate over it exists before its first event)."""
    counts = dict.fromkeys(configured, 0)
    counts.update(items)
    family = CounterMetricFamily(name, documentation, labels=("topic",))
    for topic, count in counts.items():
        family.add_metric((topic,), count)
    return family


def _sync_families(sync: Any) -> Iterator[Any]:
    """Synchronous replication's families: samples on a samsa master (``Broker.sync``), none
    on a broker that does not run it."""
    master = sync if sync is not None and getattr(sync, "role", None) == "samsa" else None
    states = GaugeMetricFamily(
        "metaq_sync_partition_state",
        "Synchronous replication state of a partition (1 for its current state).",
        labels=(*PARTITION_LABELS, "state"),
    )
    for topic, partition, current in master.partition_states() if master else ():
        for name in link_states.STATES:
            states.add_metric((topic, str(partition), name), int(name == current))
    yield states
    for name, documentation, value in (
        ("metaq_sync_slave_connected", "1 while the synchronous slave is connected.", "connected"),
        (
            "metaq_sync_slave_consecutive_failures",
            "Synchronous replication failures in a row.",
            "consecutive_failures",
        ),
        (
            "metaq_sync_published",
            "1 while the broker is published as a synchronous master.",
            "advertised",
        ),
    ):
        family = GaugeMetricFamily(name, documentation, labels=())
        if master is not None:
            family.add_metric((), int(getattr(master, value)))
        yield family
    latency = HistogramMetricFamily(
        "metaq_sync_latency_seconds",
        "Time from a put to its synchronous slave's answer, in seconds.",
        labels=(),
    )
    if master is not None:
        latency.add_metric((), _cumulative(master), master.latency_sum_s)
    yield latency


def _cumulative(master: Any) -> list[tuple[str, float]]:
    """``(le, cumulative count)`` of a samsa master's latency buckets, ``+Inf`` last."""
    buckets = []
    total = 0
    bounds = (*master.latency_buckets_s, float("inf"))
    for bound, count in zip(bounds, master.latency_counts, strict=True):
        total += count
        buckets.append(("+Inf" if bound == float("inf") else str(bound), total))
    return buckets
