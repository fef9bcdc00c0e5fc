"""A power loss's torn end is cut at start-up without an operator: a real broker process.

Goal: after a crash whose disk holds, past the partition's recovery point, what a power loss
leaves of data never fsynced (a hole of zeros followed by valid-looking records), a plain
restart cuts the hole and everything after it, serves every put that was answered 200, and
leaves no consumer stuck (no 500 waiting for an operator): a consumer reads to the end and
on into new puts.

Method: a broker in group commit (every 200 is fsynced) writing its recovery points every
second gets 30 puts; once its ``recovery-point-offset-checkpoint`` names their end, it is
killed with SIGKILL; the test then writes onto the segment what the disk would hold had the
broker written more records that never reached an fsync, with a page of them lost (zeros,
then three whole records), and starts the broker again.
"""

from __future__ import annotations

import time
from pathlib import Path

from meta.protocol.commands import Put
from meta.protocol.message import checksum, pack_message
from meta.store.files import Files
from meta.store.recovery_point import FILE_NAME, read_points
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_corrupt_data import consume

WAIT_S = 60.0
PUTS = 30
PAYLOAD_BYTES = 80
RECORD_BYTES = PAYLOAD_BYTES + 20
HOLE_BYTES = 4096 - 4 * RECORD_BYTES  # the rest of a page the disk never wrote


def payload(index: int) -> bytes:
    return b"%-80d" % index


def put_all(broker: BrokerProcess, indexes: range) -> list[int]:
    offsets = []
    with broker.connect() as connection:
        for index in indexes:
            data = payload(index)
            reply = connection.request(Put("test", 0, data, 0, index, checksum(data)))
            assert reply.code == 200, reply
            offsets.append(int(reply.body.split(b" ")[2]))
    return offsets


def wait_for_point(broker: BrokerProcess, point: int) -> None:
    """Until the data path's recovery point file says test-0 is fsynced up to ``point``."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = read_points(Files(), str(broker.data_path))
        if found is not None and found.get("test-0") == point:
            return
        assert broker.process is not None and broker.process.poll() is None, broker.log()
        time.sleep(0.05)
    raise AssertionError(
        f"{FILE_NAME} did not name test-0 at {point} within {WAIT_S} s:\n{broker.log()[-3000:]}"
    )


def test_a_power_loss_hole_after_the_recovery_point_is_cut_and_every_200_is_served(tmp_path):
    broker = BrokerProcess(tmp_path / "broker", system={"recoveryPointIntervalInSeconds": 1})
    broker.start()
    try:
        offsets = put_all(broker, range(PUTS))
        end = PUTS * RECORD_BYTES
        assert offsets == [index * RECORD_BYTES for index in range(PUTS)]
        wait_for_point(broker, end)
        broker.kill()
        segment = broker.data_path / "test-0" / f"{0:020d}.meta"
        assert segment.stat().st_size == end
        never_synced = [pack_message(1000 + index, 0, payload(1000 + index)) for index in range(7)]
        torn = b"".join(never_synced[:4])  # reached the disk, then a lost page, then 3 more
        torn += bytes(HOLE_BYTES) + b"".join(never_synced[4:])
        with segment.open("ab") as handle:
            handle.write(torn)
        broker.start()
        log = broker.log()
        # The first four never-synced records are whole: the cut starts at the hole.
        hole = end + 4 * RECORD_BYTES
        cut = len(torn) - 4 * RECORD_BYTES
        assert f"recovered {segment}: cut {cut} bytes at position {hole} (offset {hole})" in log
        assert "3 valid records among them" in log
        assert "corrupt record" not in log
        assert segment.stat().st_size == hole
        records, _next, reply = consume(broker)
        assert [r.payload for r in records[:PUTS]] == [payload(i) for i in range(PUTS)]
        assert [r.offset for r in records[:PUTS]] == offsets  # every 200 is served
        assert (len(records), reply.code) == (PUTS + 4, 404)  # to the end: nobody is stuck
        (later,) = put_all(broker, range(PUTS, PUTS + 1))
        assert later == hole
        more, _next, final = consume(broker, hole)
        assert ([r.payload for r in more], final.code) == ([payload(PUTS)], 404)
    finally:
        broker.stop()


def test_a_clean_stop_leaves_every_partitions_end_as_its_point(tmp_path):
    broker = BrokerProcess(tmp_path / "broker")
    broker.start()
    try:
        put_all(broker, range(3))
    finally:
        broker.stop()
    assert read_points(Files(), str(broker.data_path)) == {"test-0": 3 * RECORD_BYTES}
    assert Path(broker.data_path, FILE_NAME).read_bytes().startswith(b"metaq-recovery-point 1\n")
