"""A 500 means "not stored" (DECISIONS 3, 4) when the disk fills up or turns read-only.

Each test runs a real broker process whose data path is a file system that fails on purpose
(``disk_mounts``): producers pipeline puts to every partition until each partition has
answered 500, the broker is stopped, the disk is repaired (a full tmpfs grows; a read-only
ext4 is unmounted and mounted again, replaying its journal) and the broker restarted. Then
the records readable in each partition are compared with the puts answered 200.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from meta.client.net.connection import BrokerConnection
from meta.errors import MetaError
from meta.protocol.commands import Put, Stats
from meta.protocol.message import checksum
from tests.integration.broker_process import BrokerProcess
from tests.integration.disk_mounts import (
    ext4_image,
    grow_tmpfs,
    remount_ext4,
    tmpfs,
    trigger_ext4_error,
)
from tests.integration.test_crash import read_partition

PARTITIONS = 3
WINDOW = 256  # puts in flight per connection
BATCH = 16  # puts per send
LOAD_SECONDS_MAX = 60
PAYLOAD_BYTES = 200
# Group commit, threshold 1 (fsync before every 200) and threshold 1000 (200 before the fsync).
THRESHOLDS = [pytest.param(0, id="group-commit"), 1, 1000]


class Producer(threading.Thread):
    """Pipelines puts to one partition: a sender keeps up to ``WINDOW`` puts in flight (in
    batches of ``BATCH``) while a receiver reads the replies, until a 500 comes, the
    connection ends or ``stop`` is set. Keeps every (offset, payload) answered 200."""

    def __init__(self, port: int, partition: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.partition = partition
        self.stop = stop
        self.acked: dict[int, bytes] = {}
        self.refused = 0
        self._payloads: dict[int, bytes] = {}
        self._answered = 0
        self._window = threading.Semaphore(WINDOW)
        self._done = threading.Event()

    def run(self) -> None:
        try:
            with BrokerConnection("127.0.0.1", self.port, timeout_s=30) as connection:
                receiver = threading.Thread(target=self._receive, args=(connection,), daemon=True)
                receiver.start()
                try:
                    self._send(connection)
                finally:
                    receiver.join(LOAD_SECONDS_MAX)
                    self._done.set()
        except (OSError, MetaError):
            return  # the connection ended: the puts still in flight were never answered

    def _send(self, connection: BrokerConnection) -> None:
        deadline = time.monotonic() + LOAD_SECONDS_MAX
        sequence = 0
        while not (self.stop.is_set() or self.refused or self._done.is_set()):
            if time.monotonic() > deadline:
                return
            wire = []
            for _ in range(BATCH):
                if not self._window.acquire(timeout=1):
                    break
                sequence += 1
                data = b"%d-%08d-" % (self.partition, sequence)
                data += b"x" * (PAYLOAD_BYTES - len(data))
                self._payloads[sequence] = data
                wire.append(
                    b"put test %d %d 0 %d %d\r\n%s"
                    % (self.partition, len(data), checksum(data), sequence, data)
                )
            if wire:
                connection.send_bytes(b"".join(wire))

    def _receive(self, connection: BrokerConnection) -> None:
        try:
            # After the first 500 the sender stops; every put it sent is still answered.
            while not self.refused or len(self._payloads) > self._answered:
                reply = connection.receive()
                self._answered += 1
                if reply.code == 200:
                    self.acked[int(reply.body.split(b" ")[2])] = self._payloads[reply.opaque]
                else:
                    self.refused += 1
                self._window.release()
        except (OSError, MetaError):
            pass
        finally:
            self._done.set()


def load_until_refused(broker: BrokerProcess, fault=None, fault_after_acks: int = 0):
    """Run one producer per partition until each saw a 500; call ``fault()`` once the
    producers together have ``fault_after_acks`` puts answered 200. Returns the producers."""
    stop = threading.Event()
    producers = [Producer(broker.port, partition, stop) for partition in range(PARTITIONS)]
    with broker.connect() as connection:  # every partition exists before the disk can fill
        for producer in producers:
            data = b"first of %d" % producer.partition
            reply = connection.request(Put("test", producer.partition, data, 0, 1, checksum(data)))
            assert reply.code == 200, reply
            producer.acked[int(reply.body.split(b" ")[2])] = data
    for producer in producers:
        producer.start()
    try:
        if fault is not None:
            deadline = time.monotonic() + LOAD_SECONDS_MAX
            while sum(len(p.acked) for p in producers) < fault_after_acks:
                assert time.monotonic() < deadline, "the load did not get going"
                time.sleep(0.01)
            fault()
        for producer in producers:
            producer.join(LOAD_SECONDS_MAX + 30)
    finally:
        stop.set()
        for producer in producers:
            producer.join(30)
    assert all(producer.refused for producer in producers), "a partition never answered 500"
    return producers


def load_until_read_only(broker: BrokerProcess) -> list:
    """Start ``broker`` (its ``dataPath`` an ext4 image), load it, turn its file system
    read-only by an ext4 error after 3,000 puts answered 200, stop it; return the producers."""
    broker.start()
    try:
        producers = load_until_refused(
            broker, lambda: trigger_ext4_error(broker.data_path), fault_after_acks=3000
        )
    finally:
        broker.stop()
    assert "Read-only file system" in broker.log()
    return producers


def stored_after_restart(broker: BrokerProcess) -> dict[int, dict[int, bytes]]:
    broker.start()
    try:
        return {p: read_partition(broker, "test", p) for p in range(PARTITIONS)}
    finally:
        broker.stop()


def counted_messages(broker: BrokerProcess) -> int:
    """The ``message_count`` that ``stats topics`` shows for the topic ``test``."""
    with broker.connect() as connection:
        reply = connection.request(Stats("topics", connection.next_opaque()))
    assert reply.code == 200, reply
    for line in reply.body.decode().splitlines():
        words = line.split()
        if words and words[0] == "test":
            return int(words[words.index("message_count") + 1])
    raise AssertionError(f"no line for the topic in {reply.body!r}")


def make_broker(tmp_path: Path, threshold: int) -> BrokerProcess:
    return BrokerProcess(
        tmp_path / "broker",
        system={"numPartitions": PARTITIONS, "unflushThreshold": threshold},
    )


@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_after_a_full_disk_exactly_the_puts_answered_200_are_stored(tmp_path, threshold):
    """Goal: after ENOSPC, the readable records are exactly the acknowledged ones. Method: a
    1 MiB tmpfs as the data path fills up under pipelined load on three partitions; the
    broker's ``stats topics`` must count the 200s alone (the puts cut back are not stored);
    the tmpfs is then grown, the broker restarted, and each partition compared with its 200s."""
    broker = make_broker(tmp_path, threshold)
    with tmpfs(broker.data_path, 1024 * 1024):
        broker.start()
        try:
            producers = load_until_refused(broker)
            assert counted_messages(broker) == sum(len(p.acked) for p in producers)
        finally:
            broker.stop()
        assert "No space left on device" in broker.log()
        grow_tmpfs(broker.data_path, 64 * 1024 * 1024)
        stored = stored_after_restart(broker)
    for producer in producers:
        assert len(producer.acked) > 100, f"partition {producer.partition} took few puts"
        assert stored[producer.partition] == producer.acked


def uncertain_ranges(log: str) -> dict[int, range]:
    """Per partition, the offsets the broker logged it could not cut (a read-only disk)."""
    pattern = (
        r"partition test-(\d+) failed: .*a restart may serve records of offsets (\d+) to (\d+)"
    )
    return {int(p): range(int(a), int(b)) for p, a, b in re.findall(pattern, log)}


def truncate_announced(broker: BrokerProcess) -> None:
    """Do what the broker's log tells the operator: cut each partition whose disk refused the
    cut back to its acknowledged end, with ``meta-admin truncate-partition``."""
    commands = re.findall(r"run `meta-admin (truncate-partition [^`]*)`", broker.log())
    assert len(commands) == len(uncertain_ranges(broker.log()))
    for command in commands:
        done = subprocess.run(
            [sys.executable, "-m", "meta.admin", *command.split()],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_after_the_disk_turns_read_only_exactly_the_puts_answered_200_are_served(
    tmp_path, threshold
):
    """Goal: after an ext4 error (errors=remount-ro), once the operator did what the log says,
    the records served are exactly the puts answered 200 after their fsync.
    Method: a loop-mounted ext4 image as the data path; an injected error under pipelined
    load turns it read-only; the image is unmounted, mounted again (its journal replays),
    ``meta-admin truncate-partition`` run as the broker's log says, and the broker restarted.

    A read-only disk refuses the cut, and the kernel may report an fsync as failed (EIO)
    after its journal committed it: those records come back after the remount, and the
    broker's log names their offsets and the command that drops them. With threshold 1000 a
    200 comes before its fsync (threshold mode) and an aborted ext4 journal drops what it
    never wrote: there the acknowledged records that are lost are the newest ones."""
    broker = make_broker(tmp_path, threshold)
    image = tmp_path / "disk.img"
    with ext4_image(image, broker.data_path, 64 * 1024 * 1024):
        producers = load_until_read_only(broker)
        remount_ext4(image, broker.data_path)
        truncate_announced(broker)
        stored = stored_after_restart(broker)
    for producer in producers:
        readable, acked = stored[producer.partition], producer.acked
        if threshold < 1000:
            assert readable == acked
        else:
            unacknowledged = sorted(o for o, data in readable.items() if acked.get(o) != data)
            assert unacknowledged == [], (producer.partition, max(acked), broker.log()[-3000:])
            lost = set(acked) - set(readable)
            assert not lost or min(lost) > max(readable, default=-1)
