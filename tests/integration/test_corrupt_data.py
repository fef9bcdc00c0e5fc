"""Corrupt segment data is never served: real broker processes, real segment files altered.

Goal: for each kind of damage (a flipped payload bit or a zeroed record in an older segment,
a flipped length bit, a flipped bit in the middle of the last segment) nothing invalid
reaches a consumer, the broker reports the damage (an ERROR log line naming the file and
position, and the metrics), a consumer reading up to it gets a 500 that names the partition,
the offsets and what to do, and ``meta-admin verify`` finds it offline.

Method: a broker with 1,000-byte segments gets 65 puts of 100-byte records (seven segments);
the test alters a segment file (between a stop and a start, or under the running broker for
the scrubber), then reads the partition from offset 0 as a consumer does: decoding every
reply with the client's decoder, which raises on any invalid record, until the broker
answers 500 or 404. The scrubber runs at its default rate, which covers these few KiB at once.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from meta.protocol.commands import Data, Get, Put, Result
from meta.protocol.message import checksum, iter_messages
from tests.integration.broker_process import REPO, BrokerProcess
from tests.integration.client_helpers import make_root

WAIT_S = 60.0
PAYLOAD_BYTES = 80
RECORD_BYTES = 100
RECORDS = 65  # six full segments of ten records, and the last one holding five
SEGMENT_BYTES = 1000
SERVING = re.compile(r"dashboard serving http://[^:]+:(\d+)/")


def start_broker(directory: Path) -> BrokerProcess:
    process = BrokerProcess(directory, system={"maxSegmentSize": SEGMENT_BYTES})
    return process.start()


def fill(broker: BrokerProcess) -> list[int]:
    """Put ``RECORDS`` messages to test-0; return their offsets."""
    offsets = []
    with broker.connect() as connection:
        for index in range(RECORDS):
            data = b"%-80d" % index
            assert len(data) == PAYLOAD_BYTES
            reply = connection.request(Put("test", 0, data, 0, index, checksum(data)))
            assert reply.code == 200, reply
            offsets.append(int(reply.body.split(b" ")[2]))
    assert offsets == [index * RECORD_BYTES for index in range(RECORDS)]
    return offsets


def segment_path(broker: BrokerProcess, start: int) -> Path:
    return broker.data_path / "test-0" / f"{start:020d}.meta"


def alter(path: Path, position: int, change) -> None:
    data = bytearray(path.read_bytes())
    change(data, position)
    path.write_bytes(bytes(data))


def flip_bit(data: bytearray, position: int) -> None:
    data[position] ^= 0x04


def zero_record(data: bytearray, position: int) -> None:
    data[position : position + RECORD_BYTES] = bytes(RECORD_BYTES)


def consume(broker: BrokerProcess, offset: int = 0) -> tuple[list, int, Result]:
    """Read test-0 from ``offset`` as a consumer: ``(records, next offset, final reply)``.

    Every value frame is decoded with ``iter_messages``, which raises on any invalid record
    (bad CRC, zeroed header); reading stops at the first result frame (404 at the end, 500
    at known corrupt data). Bounded: one get per record at most, plus one.
    """
    records = []
    with broker.connect() as connection:
        for _ in range(RECORDS + 1):
            reply = connection.request(Get("test", "g", 0, offset, 1 << 20, 1))
            if not isinstance(reply, Data):
                return records, offset, reply
            decoded = list(iter_messages(reply.data, offset))
            assert decoded, f"a reply at {offset} with no complete record"
            records += decoded
            offset = decoded[-1].offset + decoded[-1].size
    raise AssertionError("the partition did not end")


def wait_for_log(broker: BrokerProcess, text: str) -> str:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        log = broker.log()
        if text in log:
            return log
        assert broker.process.poll() is None, log
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not in the log within {WAIT_S} s:\n{broker.log()[-3000:]}")


def metrics(broker: BrokerProcess) -> dict[str, float]:
    """``name`` -> value of test-0's samples (and the unlabelled ones) from ``/metrics``."""
    ports = SERVING.findall(broker.log())
    assert ports, broker.log()
    url = f"http://127.0.0.1:{ports[-1]}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = response.read().decode()
    values = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.labels in ({}, {"topic": "test", "partition": "0"}):
                values[sample.name] = sample.value
    return values


def verify(broker: BrokerProcess) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "meta.admin", "verify", str(broker.data_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def assert_fenced(broker: BrokerProcess, start: int, end: int) -> None:
    """A consumer from 0 gets every record before ``start``, all valid, then a 500 naming
    the range; from ``end`` on it gets the rest, all valid."""
    records, offset, reply = consume(broker)
    assert offset == start
    assert len(records) == start // RECORD_BYTES
    assert all(record.msg_id != 0 for record in records)
    assert reply.code == 500, reply
    text = reply.body.decode()
    assert f"partition test-0: offsets {start} to {end}" in text
    assert "are corrupt and not served" in text
    assert f"--partition 0-0 --to {end} --execute" in text
    rest, final, last = consume(broker, end)
    total = RECORDS * RECORD_BYTES
    assert (len(rest), final, last.code) == ((total - end) // RECORD_BYTES, total, 404)


@pytest.fixture
def broker(tmp_path):
    process = start_broker(tmp_path / "broker")
    fill(process)
    yield process
    process.stop()


def test_a_flipped_payload_bit_in_an_older_segment_under_the_running_broker(broker):
    path = segment_path(broker, 1000)
    alter(path, 300 + 50, flip_bit)  # the payload of the record at offset 1300
    log = wait_for_log(broker, f"scrubber: corrupt record in {path} at position 300")
    assert "checksum mismatch" in log and "offsets 1300 to 1400 are not served" in log
    assert_fenced(broker, 1300, 1400)
    found = metrics(broker)
    assert found["metaq_partition_corrupt_ranges"] == 1
    assert found["metaq_partition_corrupt_bytes"] == 100
    assert found["metaq_scrub_corrupt_found_total"] == 1
    assert found["metaq_scrub_bytes_total"] >= RECORDS * RECORD_BYTES - 100
    broker.stop()
    checked = verify(broker)
    assert checked.returncode == 1, checked
    assert f"CORRUPT test-0 {path} position 300 (offset 1300): checksum mismatch" in checked.stdout


def test_a_zeroed_record_in_an_older_segment_is_never_served_as_empty_messages(broker):
    broker.stop()
    path = segment_path(broker, 2000)
    alter(path, 400, zero_record)  # the record at offset 2400
    checked = verify(broker)
    assert checked.returncode == 1
    assert f"{path} position 400 (offset 2400): all-zero record header" in checked.stdout
    broker.start()
    wait_for_log(broker, f"scrubber: corrupt record in {path} at position 400")
    assert_fenced(broker, 2400, 2500)
    assert metrics(broker)["metaq_partition_corrupt_ranges"] == 1


def test_a_flipped_length_bit_is_fenced_up_to_where_records_resume(broker):
    broker.stop()
    path = segment_path(broker, 3000)
    alter(path, 500 + 3, flip_bit)  # the length of the record at offset 3500: 80 -> 84
    checked = verify(broker)
    assert checked.returncode == 1
    assert f"{path} position 500 (offset 3500)" in checked.stdout
    broker.start()
    wait_for_log(broker, f"scrubber: corrupt record in {path} at position 500")
    assert_fenced(broker, 3500, 3600)


def test_a_flipped_bit_in_the_last_segment_keeps_the_records_after_it(broker):
    """One flipped payload bit in the middle of the last segment: recovery keeps the
    acknowledged records after it (Java cut them all), reports the record at ERROR and
    fences it; nothing is cut."""
    broker.stop()
    path = segment_path(broker, 6000)
    alter(path, 200 + 20, flip_bit)  # the record at offset 6200
    checked = verify(broker)
    assert checked.returncode == 1
    assert f"{path} position 200 (offset 6200): checksum mismatch" in checked.stdout
    broker.start()
    log = wait_for_log(broker, f"ERROR meta.store: corrupt record in {path} at position 200")
    assert "(offset 6200)" in log
    assert "valid records resume at position 300 (offset 6300); kept" in log
    assert path.stat().st_size == 500
    assert_fenced(broker, 6200, 6300)
    found = metrics(broker)
    assert (found["metaq_partition_corrupt_ranges"], found["metaq_recovery_cut_bytes"]) == (1, 0)


def test_a_torn_tail_is_cut_and_reported_at_error_with_its_position(broker):
    broker.stop()
    path = segment_path(broker, 6000)
    with path.open("ab") as file:
        file.write(bytes(64))  # a zero-filled tail, as a crash can leave
    broker.start()
    wait_for_log(
        broker, f"ERROR meta.store: recovered {path}: cut 64 bytes at position 500 (offset 6500)"
    )
    records, offset, reply = consume(broker)
    assert (len(records), offset, reply.code) == (RECORDS, RECORDS * RECORD_BYTES, 404)
    assert metrics(broker)["metaq_recovery_cut_bytes"] == 64


def consumed_ids(path: Path) -> list[int]:
    if not path.exists():
        return []
    return [int(line) for line in path.read_text().split("\n")[:-1]]  # last may be partial


def start_consumer(zookeeper, root: str, out: Path, log: Path) -> subprocess.Popen:
    """A real group member (``tests.integration.consumer_process``) of group ``g`` on test."""
    command = [sys.executable, "-m", "tests.integration.consumer_process"]
    command += [zookeeper.connect_string, root, "test", "g", "c1", str(out)]
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
    with log.open("ab") as stderr:  # the child keeps its own descriptor
        return subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=stderr
        )


def reset_offsets(zookeeper, root: str, to: int) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "meta.admin", "reset-offsets", "g", "--topic", "test"]
    command += ["--partition", "0-0", "--to", str(to), "--execute"]
    command += ["--zk-connect", zookeeper.connect_string, "--zk-root", root]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO)


def test_a_consumer_stops_at_corrupt_data_until_an_operator_moves_it_past(zookeeper, tmp_path):
    """Goal: a real consumer group member never receives a record of a zeroed range, stops at
    it with the broker's text in its log, and after the documented operator action (stop the
    group, ``meta-admin reset-offsets --to END``) consumes every record after the range.

    Method: a ZooKeeper-registered broker, a zeroed record at offset 2400 of an older segment
    found by the scrubber; a consumer process records each message id it receives."""
    root = make_root(zookeeper)
    broker = BrokerProcess(
        tmp_path / "broker",
        system={"maxSegmentSize": SEGMENT_BYTES},
        zk_connect=zookeeper.connect_string,
        zk={"zk.zkRoot": root},
    )
    broker.start()
    consumer = None
    try:
        fill(broker)
        broker.stop()
        alter(segment_path(broker, 2000), 400, zero_record)
        broker.start()
        wait_for_log(broker, "scrubber: corrupt record in")
        out, log = tmp_path / "ids.txt", tmp_path / "consumer.log"
        consumer = start_consumer(zookeeper, root, out, log)
        # The client logs the first 200 bytes of the broker's text with the status.
        stopped = "500 b'partition test-0: offsets 2400 to 2500"
        wait_until(lambda: stopped in log.read_text(), "the 500 in the consumer's log")
        time.sleep(1.0)  # the consumer's retries of the same offset deliver nothing more
        before = consumed_ids(out)
        assert len(before) == 24 and 0 not in before
        consumer.kill()
        consumer.wait(30)
        wait_until(lambda: reset_offsets(zookeeper, root, 2500).returncode == 0, "the reset")
        consumer = start_consumer(zookeeper, root, out, log)
        wait_until(lambda: len(consumed_ids(out)) >= 24 + 40, "the records after the range")
        after = consumed_ids(out)[24:]
        assert len(after) == 40 and 0 not in after and not set(after) & set(before)
    finally:
        if consumer is not None and consumer.poll() is None:
            consumer.kill()
            consumer.wait(30)
        broker.stop()


def wait_until(condition, what: str) -> None:
    """Poll ``condition`` every 0.1 s for at most ``WAIT_S`` (it may raise nothing)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {WAIT_S} s waiting for {what}")
