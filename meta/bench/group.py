"""Consumer-group scenario of ``tools/bench``: group throughput and rebalance time, with ZooKeeper.

``run_group`` starts, in a temporary directory, a standalone ZooKeeper
(``tools/zookeeper.sh`` on a free port, ``meta.bench.spark.ZooKeeper``) and one broker
registered in it (``GroupBenchBroker``: topic ``bench-group`` with ``partitions``
partitions), puts a backlog of ``count`` messages spread evenly over the partitions, then:

1. **join**: ``members`` consumers of one group (each in its own session factory, as
   separate processes would be; the client refuses one topic twice per group and factory)
   join one after the other; the time until the last ``complete_subscribe`` returned and
   every partition has exactly one owner is ``join_s``;
2. **group throughput**: the time from the first join until every backlog message was
   delivered (``msg_per_s``, so it includes ``join_s``: members fetch from the moment they
   own partitions; process CPU per message in ``client_cpu_us_per_msg``; everything runs
   in this process, so that is the whole group's client CPU, ZooKeeper work included);
3. **rebalance**: one more member joins (``rebalance_join_s``: until it owns its share and
   the partitions have exactly one owner each) and then one member leaves
   (``rebalance_leave_s``: until the rest own every partition again).

Every wait is bounded by ``timeout_s`` and raises ``BenchError``; ZooKeeper, the broker and
every client are stopped on return. Thread affinity: the caller drives; listeners run on
the consumers' fetch threads.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from meta.bench.load import ZK_ROOT, BenchError, PutFrames, run_pipelined
from meta.bench.spark import SparkBenchBroker, ZooKeeper

TOPIC = "bench-group"
GROUP = "bench-group"
FETCH_BYTES = 1 << 20
POLL_S = 0.005


@dataclass
class GroupBenchBroker(SparkBenchBroker):
    """A ZooKeeper-registered broker serving ``TOPIC`` with ``partitions`` partitions."""

    partitions: int = 4

    def __post_init__(self) -> None:
        self.topics = {TOPIC: self.partitions}


class _Counter:
    """Counts deliveries of every member (fetch threads of several consumers)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.seen = 0
        self.lock = threading.Lock()
        self.done = threading.Event()

    def __call__(self, _message) -> None:
        with self.lock:
            self.seen += 1
            if self.seen >= self.count:
                self.done.set()


def _wait(condition, timeout_s: float, what: str) -> float:
    """Poll ``condition`` until true; return when it became true (``time.monotonic()``)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(POLL_S)
    return time.monotonic()


def _balanced(members: list, partitions: int) -> bool:
    """Every partition owned by exactly one member, and every member owns its share."""
    owned = [member.owned_partitions() for member in members]
    every = [key for keys in owned for key in keys]
    fair = partitions // len(members)
    return len(every) == partitions == len(set(every)) and all(len(o) >= fair for o in owned)


def run_group(
    count: int,
    message_bytes: int = 1024,
    partitions: int = 4,
    members: int = 2,
    timeout_s: float = 300.0,
    zk_sync_s: float = 0.2,
) -> dict:
    """Run the consumer-group scenario (see the module docstring); returns its result row."""
    work = Path(tempfile.mkdtemp(prefix="metaq-bench-group-"))
    try:
        with ZooKeeper(work / "zk") as zookeeper:
            broker = GroupBenchBroker(
                work / "broker", 1000, zk_connect=zookeeper.connect, partitions=partitions
            )
            broker.start()
            try:
                per_partition = max(1, count // partitions)
                for partition in range(partitions):
                    frames = PutFrames(TOPIC, message_bytes, partition)
                    run_pipelined(broker.address, frames, timeout_s, per_partition)
                _wait_registered(zookeeper.connect, timeout_s)
                row = _measure_group(
                    zookeeper.connect, per_partition * partitions, partitions, members,
                    timeout_s, zk_sync_s,
                )  # fmt: skip
            finally:
                broker.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    row["mb_per_s"] = row["msg_per_s"] * message_bytes / 1e6
    return row


def _measure_group(
    zk_connect: str, total: int, partitions: int, members: int, timeout_s: float, zk_sync_s: float
) -> dict:
    """Join ``members``, consume the ``total`` backlog, then one join and one leave."""
    from meta.client import ConsumerConfig, MetaClientConfig, MetaMessageSessionFactory

    counter = _Counter(total)
    config = MetaClientConfig(zk_connect=zk_connect, zk_root=ZK_ROOT)
    factories: list = []

    def join():
        factory = MetaMessageSessionFactory(config)
        factories.append(factory)
        consumer = factory.create_consumer(
            ConsumerConfig(GROUP, zk_sync_s=zk_sync_s, max_delay_fetch_ms=500)
        )
        consumer.subscribe(TOPIC, FETCH_BYTES, counter)
        consumer.complete_subscribe()
        return consumer

    try:
        cpu_start = time.process_time()
        start = time.monotonic()
        group = [join() for _ in range(members)]
        joined = _wait(lambda: _balanced(group, partitions), timeout_s, "the group")
        if not counter.done.wait(timeout_s):
            raise BenchError(f"the group got {counter.seen} of {total} in {timeout_s} s")
        finished = time.monotonic()
        cpu_s = time.process_time() - cpu_start
        rebalance_start = time.monotonic()
        group.append(join())
        rebalanced = _wait(lambda: _balanced(group, partitions), timeout_s, "a join")
        leave_start = time.monotonic()
        factories.pop(0).shutdown()
        group.pop(0)
        left = _wait(lambda: _balanced(group, partitions), timeout_s, "a leave")
    finally:
        for factory in factories:
            factory.shutdown()
    consume_s = max(finished - start, 1e-9)
    return {
        "messages": total,
        "seconds": consume_s,
        "msg_per_s": total / consume_s,
        "client_cpu_s": cpu_s,
        "client_cpu_us_per_msg": cpu_s / total * 1e6,
        "members": members,
        "partitions": partitions,
        "join_s": joined - start,
        "rebalance_join_s": rebalanced - rebalance_start,
        "rebalance_leave_s": left - leave_start,
    }


def _wait_registered(zk_connect: str, timeout_s: float) -> None:
    """Wait until the broker's ``topics-sub`` node of ``TOPIC`` exists."""
    from meta.client.zk.spark import ZkSparkReader

    with ZkSparkReader(zk_connect, ZK_ROOT) as reader:
        _wait(lambda: TOPIC in reader.topics(), timeout_s, "the topic in ZooKeeper")
