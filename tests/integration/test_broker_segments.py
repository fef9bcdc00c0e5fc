"""Segments on disk as a Java broker leaves them, several segments, and the 301 rules."""

from __future__ import annotations

import pytest

from meta.protocol.commands import LONG_MAX, Data, Get, Offset, Put, Result
from meta.protocol.message import checksum, iter_messages, pack_message
from tests.integration.broker_process import BrokerProcess
from tests.protocol.java_trace import load_trace

SEGMENT_BYTES_MAX = 200


def java_records() -> bytes:
    """The complete records a Java broker returned in the spec's wire trace."""
    frame = next(f for f in load_trace() if f.data.startswith(b"value"))
    body = frame.data[frame.data.index(b"\r\n") + 2 :]
    records = list(iter_messages(body))
    end = records[-1].offset + records[-1].size
    return body[:end]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    directory = tmp_path_factory.mktemp("segments")
    data = directory / "data"
    (data / "java-0").mkdir(parents=True)
    (data / "java-0" / "00000000000000000000.meta").write_bytes(java_records())
    (data / "late-0").mkdir()
    late = pack_message(1, 0, b"first kept") + pack_message(2, 0, b"second kept")
    (data / "late-0" / "00000000000000001000.meta").write_bytes(late)
    process = BrokerProcess(
        directory,
        system={"maxSegmentSize": SEGMENT_BYTES_MAX, "updateConsumerOffsets": "true"},
        topics={"java": {}, "late": {}, "multi": {}},
    )
    process.start()
    yield process
    process.stop()


@pytest.fixture
def connection(broker):
    with broker.connect() as opened:
        yield opened


def test_a_segment_written_in_the_java_format_is_served_byte_for_byte(connection):
    expected = java_records()
    reply = connection.request(Get("java", "g", 0, 0, 1 << 20, 1))
    assert isinstance(reply, Data)
    assert reply.data == expected


def test_a_put_after_a_java_segment_continues_at_its_end(connection):
    size = len(java_records())
    reply = connection.request(Put("java", 0, b"py", 0, 2, checksum(b"py")))
    assert int(reply.body.split(b" ")[2]) == size


def test_get_below_the_first_segment_is_301_with_its_start(connection):
    assert connection.request(Get("late", "g", 0, 0, 1024, 3)) == Result(301, b"1000", 3)


def test_get_beyond_the_end_is_301_with_update_consumer_offsets(connection):
    end = 1000 + 2 * 20 + len(b"first kept") + len(b"second kept")
    assert connection.request(Get("late", "g", 0, end + 5, 1024, 4)) == Result(301, b"%d" % end, 4)


def test_get_exactly_at_the_end_is_still_404(connection):
    end = 1000 + 2 * 20 + len(b"first kept") + len(b"second kept")
    assert connection.request(Get("late", "g", 0, end, 1024, 5)).code == 404


def test_get_at_long_max_is_301(connection):
    assert connection.request(Get("late", "g", 0, LONG_MAX, 1024, 6)).code == 301


def write_multi(connection, count: int) -> list[int]:
    offsets = []
    for index in range(count):
        data = b"segment-test-%03d" % index
        reply = connection.request(Put("multi", 0, data, 0, index, checksum(data)))
        offsets.append(int(reply.body.split(b" ")[2]))
    return offsets


def test_offset_answers_the_containing_segment_start_over_several_segments(connection, broker):
    """Goal: `offset` rewinds to a segment start (wire spec §2.3). Method: fill several
    200-byte segments, then ask for offsets inside each and compare with the file names."""
    offsets = write_multi(connection, 30)
    directory = broker.data_path / "multi-0"
    starts = sorted(int(path.name[:20]) for path in directory.glob("*.meta"))
    assert len(starts) >= 3
    for offset in offsets:
        expected = max(start for start in starts if start <= offset)
        reply = connection.request(Offset("multi", "g", 0, offset + 3, 7))
        assert reply == Result(200, b"%d" % expected, 7)


def test_get_never_crosses_a_segment(connection, broker):
    write_multi(connection, 30)
    directory = broker.data_path / "multi-0"
    first, second = sorted(directory.glob("*.meta"))[:2]
    reply = connection.request(Get("multi", "g", 0, 0, 1 << 20, 8))
    assert reply.data == first.read_bytes()
    reply = connection.request(Get("multi", "g", 0, int(second.name[:20]), 1 << 20, 9))
    assert reply.data == second.read_bytes()
