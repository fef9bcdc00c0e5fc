"""The crash matrix of transactions: kill -9 of a real broker at each point, then restart.

Each test runs its own broker directory. Kills are real SIGKILLs: ``BrokerProcess.kill``
from outside, or ``tests.integration.crash_broker`` killing itself in the middle of a
commit's append. After the restart the outcome must be exactly what the client was told,
and a committed batch must be there exactly once, contiguous and in put order.
"""

from __future__ import annotations

import pytest

from meta.client.net.connection import ConnectionClosedError
from tests.integration.broker_process import BrokerProcess
from tests.integration.client_helpers import wait_for
from tests.integration.test_transactions import TOPIC, Wire

MESSAGES = [b"m%02d-" % n + b"x" * 1000 for n in range(10)]
BATCH_BYTES = 5000  # a batch of MESSAGES is ~10 KB; one message ~1 KB


def start_broker(directory, **system) -> BrokerProcess:
    return BrokerProcess(
        directory, system={"numPartitions": 2, **system}, topics={TOPIC: {}}
    ).start()


def restart(broker: BrokerProcess) -> BrokerProcess:
    broker.module, broker.arguments = "meta.server", []
    return broker.start()


def fill(wire: Wire, key: str, partition: int = 0) -> None:
    assert wire.tx(key, "BEGIN").code == 200
    for message in MESSAGES:
        assert wire.put(key, partition, message).code == 200


@pytest.fixture
def broker(tmp_path):
    process = start_broker(tmp_path)
    yield process
    process.kill()


def test_an_open_transaction_is_rolled_back_by_a_crash(broker):
    with broker.connect() as connection:
        fill(Wire(connection), "TX:sid:1")
    broker.kill()
    restart(broker)
    with broker.connect() as connection:
        wire = Wire(connection)
        assert wire.messages(0) == []
        reply = wire.tx("TX:sid:1", "COMMIT_ONE_PHASE")
        assert reply.body == b"Local transaction 'TX:sid:1' has not been started."


def test_a_prepared_branch_survives_a_crash_and_commits_exactly_once(broker):
    key = "XID:1:0102:0304:crash"
    with broker.connect() as connection:
        wire = Wire(connection)
        fill(wire, key)
        assert wire.tx(key, "PREPARE").body == b"0"
    broker.kill()
    restart(broker)
    with broker.connect() as connection:
        wire = Wire(connection)
        assert wire.tx("null", "RECOVER", qualifier="crash").body == key.encode()
        assert wire.messages(0) == []
        assert wire.tx(key, "COMMIT_TWO_PHASE").code == 200
        assert wire.messages(0) == MESSAGES
        assert wire.tx("null", "RECOVER").body == b""


def test_a_committed_transaction_survives_a_crash_after_the_reply(broker):
    with broker.connect() as connection:
        wire = Wire(connection)
        fill(wire, "TX:sid:2")
        assert wire.tx("TX:sid:2", "COMMIT_ONE_PHASE").code == 200
    broker.kill()
    restart(broker)
    with broker.connect() as connection:
        assert Wire(connection).messages(0) == MESSAGES


@pytest.mark.parametrize("point", ["before-batch", "mid-batch"])
@pytest.mark.parametrize("key", ["TX:sid:3", "XID:9:aa:bb:crash"])
def test_a_crash_inside_the_commit_leaves_the_batch_exactly_once(tmp_path, point, key):
    """Goal: a kill -9 between the COMMIT record and the end of the batch's append never
    loses nor duplicates the batch.

    Method: the broker kills itself when it writes the batch (before any byte of it, or after
    half of it); the restarted broker finds the COMMIT record, checks the partition at the
    recorded offset, and appends what is missing. A message put before the transaction shows
    that recovery appends after existing data.
    """
    broker = BrokerProcess(tmp_path, system={"numPartitions": 2}, topics={TOPIC: {}})
    broker.module = "tests.integration.crash_broker"
    broker.arguments = ["--crash-at", point, "--batch-bytes", str(BATCH_BYTES)]
    broker.start()
    try:
        with broker.connect() as connection:
            wire = Wire(connection)
            assert wire.put(None, 0, b"before").code == 200
            fill(wire, key)
            if key.startswith("XID:"):
                assert wire.tx(key, "PREPARE").body == b"0"
            with pytest.raises(ConnectionClosedError):
                wire.tx(key, "COMMIT_TWO_PHASE" if key.startswith("XID:") else "COMMIT_ONE_PHASE")
        broker.process.wait(30)
        assert broker.process.returncode == -9
        restart(broker)
        assert "1 batches appended" in broker.log()
        with broker.connect() as connection:
            wire = Wire(connection)
            assert wire.messages(0) == [b"before", *MESSAGES]
            assert wire.tx("null", "RECOVER").body == b""
            if key.startswith("XID:"):
                assert wire.tx(key, "COMMIT_TWO_PHASE").body.startswith(b"XAException:code=-4")
        broker.kill()
        restart(broker)
        with broker.connect() as connection:
            assert Wire(connection).messages(0) == [b"before", *MESSAGES]
        assert "0 batches appended" in broker.log().rsplit("replaying", 1)[1]
    finally:
        broker.kill()


def test_a_torn_journal_tail_is_cut_and_recovery_completes(broker):
    with broker.connect() as connection:
        wire = Wire(connection)
        fill(wire, "TX:sid:4")
        assert wire.tx("TX:sid:4", "COMMIT_ONE_PHASE").code == 200
        fill(wire, "TX:sid:5")
    broker.kill()
    journal = broker.data_path / "transactions"
    newest = max(journal.glob("redo.*"), key=lambda path: int(path.suffix[1:]))
    with open(newest, "ab") as file:
        file.write(b"\x00\x01garbage that is not a record" * 3)
    restart(broker)
    log = broker.log()
    assert "cutting 90 bytes" in log
    with broker.connect() as connection:
        wire = Wire(connection)
        assert wire.messages(0) == MESSAGES
        fill(wire, "TX:sid:6")
        assert wire.tx("TX:sid:6", "COMMIT_ONE_PHASE").code == 200
        assert wire.messages(0) == MESSAGES * 2


def test_checkpoints_bound_replay_and_old_journal_files_go(tmp_path):
    """Goal: after thousands of committed transactions, a restart replays only from the last
    checkpoint and the old redo files are deleted.

    Method: small journal files (64 KiB) and a 200 ms checkpoint interval; 2000 transactions
    of one small message (6000 records, ~3 s); then kill -9 and restart, and read where
    replay started and how many records it read in the log.
    """
    broker = start_broker(tmp_path, checkpointInterval=200, txJournalFileSize=65536)
    try:
        with broker.connect() as connection:
            wire = Wire(connection)
            for n in range(2000):
                key = f"TX:sid:{n + 1}"
                assert wire.tx(key, "BEGIN").code == 200
                assert wire.put(key, n % 2, b"c%d" % n).code == 200
                assert wire.tx(key, "COMMIT_ONE_PHASE").code == 200
        journal = broker.data_path / "transactions"
        redo = sorted(int(path.suffix[1:]) for path in journal.glob("redo.*"))
        assert redo[0] > 1 and len(redo) <= 2, redo
        wait_for(lambda: len(list(journal.glob("checkpoint.*"))) == 3, what="3 checkpoints")
        broker.kill()
        restart(broker)
        log = broker.log().rsplit("replaying the transaction journal from ", 1)[1]
        first_line = log.splitlines()[0]
        assert "(checkpoint." in first_line
        assert int(first_line.split("redo.", 1)[1].split(" ")[0]) > 1  # not from the start
        replayed = int(log.split("transaction journal replayed: ", 1)[1].split(" records")[0])
        assert replayed < 600  # of the 6000 records written: only those after the checkpoint
        with broker.connect() as connection:
            wire = Wire(connection)
            assert len(wire.messages(0)) + len(wire.messages(1)) == 2000
    finally:
        broker.kill()
