"""A Java broker's data directory, opened by a metaq-py broker after ``migrate-java-data``.

The directory is laid out as a Java broker leaves it (wire spec §3-4, zk/tx spec §4.4):
partition segments holding the records of the spec's Java wire trace, and a Java
``transactions/`` with an empty ``checkpoint.1`` and an empty ``redo.1`` (a Java broker that
never saw a transaction). Real broker processes, no ZooKeeper.
"""

from __future__ import annotations

import shutil

import pytest

from meta.admin.main import main
from meta.protocol.commands import Data, Get
from meta.protocol.message import iter_messages, pack_message
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_broker_segments import java_records
from tests.tx.java_journal_files import XA_PREPARE, append, operation, write_journal

pytestmark = pytest.mark.integration

LATER = pack_message(11, 0, b"second segment") + pack_message(12, 0, b"and more")


def java_directory(directory) -> BrokerProcess:
    broker = BrokerProcess(directory, topics={"java": {"numPartitions": 2}})
    first = java_records()
    (broker.data_path / "java-0").mkdir()
    (broker.data_path / "java-0" / f"{0:020d}.meta").write_bytes(first)
    (broker.data_path / "java-0" / f"{len(first):020d}.meta").write_bytes(LATER)
    (broker.data_path / "java-1").mkdir()
    (broker.data_path / "java-1" / f"{0:020d}.meta").write_bytes(LATER)
    write_journal(broker.data_path, {1: b""})
    return broker


def read_all(broker: BrokerProcess, partition: int) -> bytes:
    """Every record of the partition, segment by segment (one get never spans two)."""
    data, offset = b"", 0
    with broker.connect() as connection:
        for _ in range(10):
            reply = connection.request(Get("java", "g", partition, offset, 1 << 20, 1))
            if not isinstance(reply, Data):
                return data
            records = list(iter_messages(reply.data))
            size = sum(record.size for record in records)
            data += reply.data[:size]
            offset += size
    raise AssertionError(f"more than 10 reads for partition {partition}")


def test_after_migration_a_java_directory_opens_cleanly_and_serves_every_record(tmp_path):
    broker = java_directory(tmp_path)
    assert main(["migrate-java-data", str(broker.data_path)]) == 0
    assert not (broker.data_path / "transactions").exists()
    broker.start()
    try:
        assert read_all(broker, 0) == java_records() + LATER
        assert read_all(broker, 1) == LATER
    finally:
        broker.stop()
    assert " ERROR " not in broker.log()
    moved = [p for p in broker.data_path.iterdir() if p.name.startswith("transactions.java.")]
    assert [sorted(f.name for f in p.iterdir()) for p in moved] == [["checkpoint.1", "redo.1"]]


def test_without_migration_the_java_journal_is_reported(tmp_path):
    """What the migration avoids: the empty Java checkpoint is logged as an ERROR."""
    broker = java_directory(tmp_path)
    broker.start()
    broker.stop()
    assert " ERROR " in broker.log() and "checkpoint.1" in broker.log()


def test_a_java_journal_with_records_stops_startup_and_names_the_command(tmp_path):
    broker = java_directory(tmp_path)
    xid = "XID:1:6774:6271"
    shutil.rmtree(broker.data_path / "transactions")
    write_journal(broker.data_path, {1: append(xid, "java", 0, b"x") + operation(XA_PREPARE, xid)})
    with pytest.raises(RuntimeError, match="migrate-java-data"):
        broker.start(timeout_s=30)
