"""Retention against a real broker process: delete, archive to zip, 301 for a consumer left
behind, and a malformed ``deleteWhen`` refused at start-up (issue 5 items 1 and 2).

The broker runs with ZooKeeper disabled, ``deleteWhen`` firing every second and segments of
about 1 KiB, so a few puts make several segments that are old enough two seconds later. Tests
wait for a condition with a deadline, never for a fixed time.
"""

from __future__ import annotations

import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from meta.protocol.commands import Data, Get, Put, Result
from meta.protocol.message import checksum, iter_messages, pack_message
from tests.integration.broker_process import BrokerProcess

SEGMENT_BYTES_MAX = 1024
EVERY_SECOND = "*/1 * * * * ?"
PAYLOAD_BYTES = 200  # 220-byte records: five fill a segment
DEADLINE_S = 30.0


def wait_for(condition: Callable[[], object], what: str, timeout_s: float = DEADLINE_S):
    """Poll ``condition`` until it is true; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(
        tmp_path_factory.mktemp("retention"),
        system={"maxSegmentSize": SEGMENT_BYTES_MAX},
        topics={
            "deleted": {"deletePolicy": "delete,2s", "deleteWhen": EVERY_SECOND},
            "archived": {"deletePolicy": "archive,2s,true", "deleteWhen": EVERY_SECOND},
            "kept": {"deletePolicy": "delete,2s", "deleteWhen": "0 0 6 1 1 ? 2099"},
        },
    )
    process.start()
    yield process
    process.stop()


@pytest.fixture
def connection(broker):
    with broker.connect() as opened:
        yield opened


def put_many(connection, topic: str, count: int, tag: bytes = b"m") -> list[tuple[int, int, bytes]]:
    """Put ``count`` messages; return ``(msg_id, offset, payload)`` of each."""
    sent = []
    for index in range(count):
        payload = (tag + b"-%04d-" % index).ljust(PAYLOAD_BYTES, b".")
        reply = connection.request(Put(topic, 0, payload, 0, index + 1, checksum(payload)))
        assert reply.code == 200, reply
        msg_id, _partition, offset = (int(field) for field in reply.body.split(b" "))
        sent.append((msg_id, offset, payload))
    return sent


def segment_starts(directory: Path, suffix: str = ".meta") -> list[int]:
    return sorted(int(path.name[:20]) for path in directory.glob("*" + suffix))


def test_old_segments_are_deleted_and_the_active_one_stays(broker, connection):
    """Goal: ``delete,2s`` run every second removes every read-only segment once it is 2 s old,
    and never the active one. Method: fill four segments, wait until one file is left; it is
    the segment new puts go to."""
    sent = put_many(connection, "deleted", 20)
    directory = broker.data_path / "deleted-0"
    assert len(segment_starts(directory)) >= 4
    active = segment_starts(directory)[-1]
    wait_for(lambda: segment_starts(directory) == [active], "only the active segment to remain")
    (later,) = put_many(connection, "deleted", 1, tag=b"later")
    assert later[1] == active == sent[-1][1] + 20 + PAYLOAD_BYTES
    assert "retention: deleted segment" in broker.log()
    assert f"deleted-0 now starts at offset {active}" in broker.log()


def test_a_consumer_behind_the_deleted_range_gets_301_and_continues(broker, connection):
    """Goal: spec 4.8 / wire 2.2: a get below the first remaining segment answers 301 with
    that segment's start, and reading there returns the messages that were kept."""
    sent = put_many(connection, "deleted", 12, tag=b"behind")
    behind = sent[1][1]  # a consumer that had read one message
    directory = broker.data_path / "deleted-0"
    active = segment_starts(directory)[-1]
    wait_for(lambda: segment_starts(directory) == [active], "the old segments to go")
    kept = put_many(connection, "deleted", 2, tag=b"after")
    reply = connection.request(Get("deleted", "g", 0, behind, 1 << 20, 50))
    assert reply == Result(301, b"%d" % active, 50)
    reply = connection.request(Get("deleted", "g", 0, active, 1 << 20, 51))
    assert isinstance(reply, Data)
    payloads = [message.payload for message in iter_messages(reply.data)]
    assert payloads == [payload for _id, offset, payload in sent + kept if offset >= active]
    assert payloads[-2:] == [payload for _id, _offset, payload in kept]


def test_archive_with_compress_writes_zips_of_the_original_segment_bytes(broker, connection):
    """Goal: ``archive,2s,true`` replaces each old segment by ``X.meta.zip`` holding one entry
    ``X.meta`` with the segment's exact bytes. Method: rebuild the expected bytes from the put
    replies (id, offset) and compare with every zip once only the active .meta is left."""
    sent = put_many(connection, "archived", 20)
    stream = b"".join(pack_message(msg_id, 0, payload) for msg_id, _offset, payload in sent)
    assert [offset for _id, offset, _payload in sent] == sorted(o for _i, o, _p in sent)
    directory = broker.data_path / "archived-0"
    active = segment_starts(directory)[-1]
    wait_for(lambda: segment_starts(directory) == [active], "the old segments to be archived")
    zips = segment_starts(directory, ".meta.zip")
    assert zips[0] == 0
    assert not list(directory.glob("*.tmp"))
    position = 0
    for start in zips:
        name = f"{start:020d}.meta"
        assert start == position  # contiguous: every old segment was archived
        with zipfile.ZipFile(directory / (name + ".zip")) as archive:
            assert archive.testzip() is None
            assert archive.namelist() == [name]
            data = archive.read(name)
        assert data == stream[start : start + len(data)]
        position = start + len(data)
    assert position == active
    assert "retention: archived segment" in broker.log()


def test_segments_of_a_topic_whose_delete_when_has_not_come_stay(broker, connection):
    """Goal: each topic follows its own deleteWhen. Method: fill "kept" (deleteWhen in 2099),
    then "deleted"; once the younger "deleted" segments are gone, the older "kept" ones,
    just as old enough for delete,2s, must all still be there."""
    put_many(connection, "kept", 12)
    kept = broker.data_path / "kept-0"
    before = segment_starts(kept)
    assert len(before) >= 3
    put_many(connection, "deleted", 12, tag=b"later-than-kept")
    deleted = broker.data_path / "deleted-0"
    active = segment_starts(deleted)[-1]
    wait_for(lambda: segment_starts(deleted) == [active], "the younger segments to go")
    assert segment_starts(kept) == before


def test_a_malformed_delete_when_stops_start_up_with_a_clear_error(tmp_path):
    process = BrokerProcess(
        tmp_path / "bad",
        topics={"test": {"deleteWhen": "0 0 25 * * ?"}},
    )
    with pytest.raises(RuntimeError) as info:
        process.start()
    text = str(info.value)
    assert "broker exited with 2" in text
    assert "configuration error" in text
    assert "[topic=test] deleteWhen='0 0 25 * * ?'" in text
    assert "hour value '25' is not a number 0-23" in text
