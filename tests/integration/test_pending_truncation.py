"""After a disk failure, a plain restart serves exactly the puts answered 200.

A partition whose write or fsync fails answers 500 to the puts waiting for it and cuts them
from its files; when the disk refuses the cut too, the broker records the cut it owes
(``meta.store.pending_truncation``) and its next start makes it before serving, with no
operator command. Each test runs real broker processes under pipelined load on three
partitions (``test_disk_faults.Producer``: every put's outcome is kept), breaks the disk,
repairs it, restarts the broker plainly and reads every partition back with a consumer:
the records readable are exactly those answered 200.

* ``fault_broker``: segment fsyncs and truncations fail with EIO once a trigger file
  exists (the written bytes stay in the page cache, so the restart reads them back); the
  record goes next to the partition. Needs nothing special.
* An ext4 image turned read-only by an injected error (``disk_mounts``; needs root): the data
  disk refuses every write, so the record goes to ``dataLogPath`` on another file system.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from meta.store.pending_truncation import FALLBACK_DIRECTORY, RECORD_NAME
from tests.integration.broker_process import BrokerProcess
from tests.integration.disk_mounts import ext4_image, remount_ext4
from tests.integration.test_disk_faults import (
    PARTITIONS,
    load_until_read_only,
    load_until_refused,
    stored_after_restart,
)

APPLIED = "pending truncation record written when its disk failed"


def assert_exactly_the_200s(producers, stored, log: str) -> None:
    for producer in producers:
        readable, acked = stored[producer.partition], producer.acked
        assert producer.refused, producer.partition
        served_500 = sorted(offset for offset in readable if offset not in acked)
        assert served_500 == [], (producer.partition, served_500[:5], log[-3000:])
        assert readable == acked, (producer.partition, log[-3000:])


def test_a_disk_that_refuses_fsync_and_cut_is_cut_at_the_next_plain_start(tmp_path):
    """Goal: puts answered 500 are not served after a plain restart, though the disk refused
    the cut. Method: ``fault_broker`` fails every segment fsync and truncation once the
    trigger exists; load until each partition answered 500; stop; remove the trigger; start
    the plain broker; every partition holds exactly its 200s, and no record is left."""
    trigger = tmp_path / "disk-fails"
    broker = BrokerProcess(
        tmp_path / "broker", system={"numPartitions": PARTITIONS, "unflushThreshold": 0}
    )
    broker.module = "tests.integration.fault_broker"
    broker.arguments = ["--fail-when", str(trigger), "--refuse-cut"]
    broker.start()
    try:
        producers = load_until_refused(broker, trigger.touch, fault_after_acks=3000)
    finally:
        broker.stop()
    trigger.unlink()  # the disk works again
    broker.module, broker.arguments = "meta.server", []
    stored = stored_after_restart(broker)
    log = broker.log()
    assert_exactly_the_200s(producers, stored, log)
    assert "recorded in" in log and "the next start cuts offsets" in log, log[-3000:]
    assert APPLIED in log, log[-3000:]
    records = list(broker.data_path.glob(f"*/{RECORD_NAME}"))
    assert records == []


@pytest.mark.parametrize("threshold", [pytest.param(0, id="group-commit"), 1])
def test_after_the_disk_turns_read_only_a_plain_restart_serves_exactly_the_200s(
    tmp_path, threshold
):
    """Goal: an ext4 error turns the data disk read-only under load; after the repair (its
    journal replays) a plain restart, with no operator command, serves exactly the puts
    answered 200. Method: a loop-mounted ext4 image as ``dataPath``, ``dataLogPath`` on
    another file system (where the record goes when the data disk refuses it)."""
    data_log = tmp_path / "data-log"
    data_log.mkdir()
    broker = BrokerProcess(
        tmp_path / "broker",
        system={
            "numPartitions": PARTITIONS,
            "unflushThreshold": threshold,
            "dataLogPath": data_log,
        },
    )
    image = tmp_path / "disk.img"
    with ext4_image(image, broker.data_path, 64 * 1024 * 1024):
        producers = load_until_read_only(broker)
        records = data_log / FALLBACK_DIRECTORY
        recorded = sorted(os.listdir(records)) if records.is_dir() else []
        remount_ext4(image, broker.data_path)
        stored = stored_after_restart(broker)
    log = broker.log()
    assert_exactly_the_200s(producers, stored, log)
    assert "run `meta-admin truncate-partition" not in log
    assert recorded, log[-3000:]
    assert log.count(APPLIED) == len(recorded), log[-3000:]
    assert sorted(os.listdir(data_log / FALLBACK_DIRECTORY)) == []


def test_a_record_that_cannot_be_read_stops_the_start_naming_it(tmp_path):
    """Goal: a damaged record is never guessed at: the broker does not start and names the
    record and the command. Method: a partition with a record whose checksum is wrong."""
    broker = BrokerProcess(tmp_path / "broker")
    partition = broker.data_path / "test-0"
    partition.mkdir(parents=True)
    (partition / RECORD_NAME).write_bytes(b"metaq-pending-truncation 1\ntest-0 21\n1\n")
    broker.launch()
    assert broker.process is not None
    try:
        status = broker.process.wait(60)
    finally:
        broker.kill()  # a broker that started after all must not outlive the test
    assert status != 0
    log = broker.log()
    assert str(Path(partition / RECORD_NAME)) in log and "meta-admin truncate-partition" in log
