"""Cluster changes under a steady load stall no partition whose owner stays, and lose nothing.

Real processes throughout: two broker processes, a real ZooKeeper, up to four consumer
processes of one group (``tests.integration.member_process``) and a producer thread that
sends ``RATE_PER_S`` messages a second round robin through ZooKeeper. The planned changes
run in turn: the second broker starts, three consumers join one by one, one leaves on
SIGTERM, the second broker stops and starts again, and a reload raises the first broker's
partitions from 2 to 4.

A stall is measured against the producer, not the wall clock: a message's wait is the
time from its acknowledgement to its receipt, so a producer that itself pauses (a loaded
machine) makes no stall. For each change, every message acknowledged from ``LEAD_S`` before
it until ``TRAFFIC_AFTER_S`` after the group settled again must wait less than
``STALL_S_MAX`` on each partition whose owner did not change (the same member before and
after, and no other member received any of its messages meanwhile). At the end every
acknowledged message was received exactly once (every change here is graceful), with the
id and partition it was acknowledged with, and nothing else was received.

Every wait polls a condition with a deadline, and every process is stopped, on failure too.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from meta.client import MetaMessageSessionFactory
from meta.client.zk.balance import assign_default
from tests.integration.broker_process import BrokerProcess
from tests.integration.client_helpers import make_root, owners, wait_for, zk_config
from tests.integration.steady_load import Ack, Member, PacedProducer, Receipt

log = logging.getLogger(__name__)

TOPIC = "steady"
GROUP = "changes"
RATE_PER_S = 1000
SENDS_MAX = RATE_PER_S * 120  # far more than the test runs: the producer is bounded anyway
UNFLUSH_THRESHOLD = 1000
BROKER_LEAVE_MS = 1000
STALL_S_MAX = 0.5
LEAD_S = 0.5
TRAFFIC_AFTER_S = 1.0
SETTLE_S = 30.0
MEMBER_START_S = 60.0


@dataclass
class Change:
    """One planned change: when it began, when the traffic after it was measured to, and
    the owners (``B-P`` -> consumer id) before it and once the group settled after it."""

    name: str
    began: float
    ended: float
    before: dict[str, str]
    after: dict[str, str]


class Cluster:
    """The brokers, the group's members and the producer of one test; ``close`` stops all."""

    def __init__(self, tmp_path, zookeeper, admin) -> None:
        self.tmp_path = tmp_path
        self.zookeeper = zookeeper
        self.admin = admin
        self.root = make_root(zookeeper)
        self.brokers: dict[int, BrokerProcess] = {}
        self.serving: set[int] = set()
        self.partition_counts = {1: 2, 2: 2}
        self.members: dict[str, Member] = {}
        self.left: list[Member] = []
        self.changes: list[Change] = []
        self.factory = MetaMessageSessionFactory(zk_config(zookeeper, self.root))
        self.producer: PacedProducer | None = None

    def broker_ini(self, broker_id: int) -> dict:
        return {
            # Puts are answered before their fsync (one every UNFLUSH_THRESHOLD messages), so
            # one synchronous producer thread keeps up the rate on a shared disk.
            "system": {"brokerId": broker_id, "unflushThreshold": UNFLUSH_THRESHOLD},
            "topics": {TOPIC: {"numPartitions": self.partition_counts[broker_id]}},
            "zk_connect": self.zookeeper.connect_string,
            # A stopping broker leaves ZooKeeper, then waits this long for its clients to
            # move away before it closes (shipped: 5 s); 0 would close under their puts.
            "zk": {
                "zk.zkRoot": self.root,
                "zk.zkSessionTimeoutMs": 4000,
                "zk.zkSyncTimeMs": BROKER_LEAVE_MS,
            },
        }

    def start_broker(self, broker_id: int) -> None:
        broker = self.brokers.get(broker_id)
        if broker is None:
            directory = self.tmp_path / f"broker{broker_id}"
            broker = BrokerProcess(directory, **self.broker_ini(broker_id))
            self.brokers[broker_id] = broker
        broker.start()
        self.serving.add(broker_id)

    def stop_broker(self, broker_id: int) -> None:
        broker = self.brokers[broker_id]
        self.serving.discard(broker_id)
        assert broker.stop() == 0, broker.log()

    def reload_partitions(self, broker_id: int, count: int) -> None:
        broker = self.brokers[broker_id]
        self.partition_counts[broker_id] = count
        broker.write_config(**self.broker_ini(broker_id))
        offset = broker.log_path.stat().st_size
        broker.process.send_signal(signal.SIGHUP)
        wait_for(lambda: "config reload done" in broker.log(since=offset), what="the reload")

    def join(self, name: str) -> None:
        member = Member(name, self.zookeeper.connect_string, self.root, TOPIC, GROUP, self.tmp_path)
        self.members[name] = member
        member.wait_for_line("ready", MEMBER_START_S)

    def leave(self, name: str) -> None:
        member = self.members.pop(name)
        self.left.append(member)
        member.leave()

    def expected_owners(self) -> dict[str, str]:
        """The DEFAULT strategy's answer for the serving brokers and the current members."""
        partitions = [
            f"{broker_id}-{number}"
            for broker_id in sorted(self.serving)
            for number in range(self.partition_counts[broker_id])
        ]
        ids = [member.consumer_id for member in self.members.values()]
        return {
            partition: consumer_id
            for consumer_id in ids
            for partition in assign_default(consumer_id, ids, partitions)
        }

    def owners(self) -> dict[str, str]:
        return owners(self.admin, self.root, GROUP, TOPIC)

    def settle(self) -> dict[str, str]:
        """Wait (bounded) until the group owns exactly its expected share; return it."""
        expected = self.expected_owners()
        wait_for(lambda: self.owners() == expected, SETTLE_S, f"the owners {expected}")
        return expected

    def change(self, name: str, action: Callable[[], None]) -> None:
        """Run ``action`` under load, wait for the group to settle and for
        ``TRAFFIC_AFTER_S`` of traffic after it, and record the change."""
        before = self.settle()
        began = time.monotonic()
        action()
        after = self.settle()
        settled = time.monotonic()
        wait_for(lambda: time.monotonic() > settled + TRAFFIC_AFTER_S, what="traffic after")
        self.changes.append(Change(name, began, time.monotonic(), before, after))

    def all_members(self) -> list[Member]:
        return [*self.left, *self.members.values()]

    def close(self) -> None:
        if self.producer is not None:
            self.producer.stop()
        for member in self.all_members():
            member.kill()
        for broker in self.brokers.values():
            broker.stop()
        self.factory.shutdown()


@pytest.fixture
def cluster(tmp_path, zookeeper, admin) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path, zookeeper, admin)
    try:
        yield cluster
    finally:
        cluster.close()


def first_receipts(receipts: list[Receipt]) -> dict[int, Receipt]:
    found: dict[int, Receipt] = {}
    for receipt in receipts:
        found.setdefault(receipt.sequence, receipt)
    return found


def stalls(
    change: Change, acks: dict[int, Ack], receipts: list[Receipt]
) -> dict[str, tuple[float, float]]:
    """The longest wait, acknowledgement to receipt, of the messages acknowledged in the
    change's window, per partition whose owner stayed (a message never received waits
    forever), with when that message was acknowledged (seconds after the change began)."""
    start = change.began - LEAD_S
    in_window = {s: ack for s, ack in acks.items() if start <= ack.acked_at <= change.ended}
    received = first_receipts(receipts)
    receivers: dict[str, set[str]] = {}
    for sequence, ack in in_window.items():
        if sequence in received:
            receivers.setdefault(ack.partition, set()).add(received[sequence].member)
    kept = {
        partition
        for partition, owner in change.after.items()
        if change.before.get(partition) == owner and len(receivers.get(partition, ())) <= 1
    }
    waits: dict[str, tuple[float, float]] = {partition: (0.0, 0.0) for partition in kept}
    for sequence, ack in in_window.items():
        if ack.partition in kept:
            receipt = received.get(sequence)
            wait_s = float("inf") if receipt is None else receipt.received_at - ack.acked_at
            waits[ack.partition] = max(waits[ack.partition], (wait_s, ack.acked_at - change.began))
    return waits


def check_delivery(acks: dict[int, Ack], receipts: list[Receipt], failures: list) -> None:
    """Every acknowledged message received once, as acknowledged; nothing else received."""
    assert failures == [], f"sends failed: {failures[:10]}"
    counts = Counter(receipt.sequence for receipt in receipts)
    duplicates = sorted(sequence for sequence, count in counts.items() if count > 1)
    assert duplicates == [], f"{len(duplicates)} received twice, e.g. {duplicates[:10]}"
    unacknowledged = sorted(counts.keys() - acks.keys())
    assert unacknowledged == [], f"received, never acknowledged: {unacknowledged[:10]}"
    missing = sorted(acks.keys() - counts.keys())
    assert missing == [], f"{len(missing)} acknowledged, never received: {missing[:10]}"
    wrong = [
        receipt
        for receipt in receipts
        if (acks[receipt.sequence].msg_id, acks[receipt.sequence].partition)
        != (receipt.msg_id, receipt.partition)
    ]
    assert wrong == [], f"received with another id or partition: {wrong[:5]}"


def run_planned_changes(cluster: Cluster) -> None:
    cluster.start_broker(1)
    cluster.join("a")
    cluster.producer = PacedProducer(cluster.factory, TOPIC, RATE_PER_S, SENDS_MAX)
    wait_for(lambda: len(cluster.producer.acked()) >= RATE_PER_S // 2, what="traffic")
    cluster.change("broker 2 starts", lambda: cluster.start_broker(2))
    for name in "bcd":
        cluster.change(f"{name} joins", lambda name=name: cluster.join(name))
    cluster.change("d leaves on SIGTERM", lambda: cluster.leave("d"))
    cluster.change("broker 2 stops", lambda: cluster.stop_broker(2))
    cluster.change("broker 2 comes back", lambda: cluster.start_broker(2))
    cluster.change("reload: broker 1 has 4 partitions", lambda: cluster.reload_partitions(1, 4))


@pytest.mark.slow
def test_planned_changes_stall_no_kept_partition_and_lose_nothing(cluster):
    """Goal: the planned changes of a cluster under load neither stall a partition whose
    owner stays nor lose, duplicate or invent a message.

    Method: see the module docstring; the stalls of every change are logged (INFO).
    """
    run_planned_changes(cluster)
    cluster.producer.stop()
    acks = cluster.producer.acked()
    with contextlib.suppress(TimeoutError):  # check_delivery says what is missing
        wait_for(
            lambda: sum(m.received_count() for m in cluster.all_members()) >= len(acks),
            SETTLE_S,
            "every acknowledged message received",
        )
    for name in list(cluster.members):
        cluster.leave(name)
    receipts = [receipt for member in cluster.all_members() for receipt in member.receipts()]
    waits = {change.name: stalls(change, acks, receipts) for change in cluster.changes}
    report = "\n".join(
        f"{change.name} ({change.ended - change.began:.1f} s): "
        + ", ".join(f"{p} {wait:.3f} (acked at {at:+.2f})" for p, (wait, at) in sorted(w.items()))
        for change, w in zip(cluster.changes, waits.values(), strict=True)
    )
    log.info("%d messages; longest wait (s) per kept partition:\n%s", len(acks), report)
    assert all(waits.values()), f"a change where no partition kept its owner:\n{report}"
    longest_s = max(wait for w in waits.values() for wait, _at in w.values())
    assert longest_s < STALL_S_MAX, f"a stall of {longest_s:.3f} s:\n{report}"
    last = cluster.changes[-1]
    sent_to = {ack.partition for ack in acks.values() if ack.acked_at >= last.began}
    assert sent_to == set(last.after), "the producer does not use every partition"
    check_delivery(acks, receipts, cluster.producer.failures)
