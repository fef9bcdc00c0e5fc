"""Start-up loading of a partition directory: tail recovery, layout checks, Java files."""

from __future__ import annotations

import logging

import pytest

from meta.errors import StoreError
from meta.protocol.message import iter_messages
from tests.store.conftest import PowerLossFiles, collect, open_partition, record

# The spec's example record (section 3.3): payload "hello", id 4194316293, flag 0.
JAVA_HELLO_RECORD = bytes.fromhex("00000005 3610a686 00000000fa003005 00000000 68656c6c6f")


def make_directory(tmp_path, files: dict[str, bytes]):
    """Create ``test-0`` holding ``files`` (name -> bytes); return its path as text."""
    directory = tmp_path / "test-0"
    directory.mkdir()
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return str(directory)


def name(start: int) -> str:
    return f"{start:020d}.meta"


def test_a_torn_last_record_is_cut_at_load(tmp_path):
    directory = make_directory(tmp_path, {name(0): record(b"one") + record(b"two")[:-2]})
    log = open_partition(directory)
    assert (log.max_offset, (tmp_path / "test-0" / name(0)).read_bytes()) == (23, record(b"one"))


def test_the_bytes_cut_at_load_are_logged(tmp_path, caplog):
    directory = make_directory(tmp_path, {name(0): record(b"one") + record(b"two")[:21]})
    with caplog.at_level(logging.WARNING, logger="meta.store"):
        open_partition(directory)
    assert "cut 21 bytes" in caplog.text and name(0) in caplog.text


def test_a_garbage_tail_is_cut_at_load(tmp_path):
    directory = make_directory(tmp_path, {name(0): record(b"one") + b"\x7f" * 64})
    log = open_partition(directory)
    assert log.max_offset == 23


def test_a_corrupt_record_in_the_middle_is_kept_with_the_records_after_it(tmp_path):
    """A flipped bit followed by valid records is corruption, not a torn tail: the acknowledged
    records after it stay (Java cut them all)."""
    corrupt = bytearray(record(b"two"))
    corrupt[5] ^= 0x01  # the checksum no longer matches
    data = record(b"one") + bytes(corrupt) + record(b"three") + record(b"four")
    directory = make_directory(tmp_path, {name(0): data})
    log = open_partition(directory)
    assert (log.max_offset, log.message_count) == (len(data), 3)
    assert (tmp_path / "test-0" / name(0)).read_bytes() == data


def test_earlier_segments_are_not_validated(tmp_path):
    garbage = b"\xff" * 40
    directory = make_directory(tmp_path, {name(0): garbage, name(40): record(b"tail")})
    log = open_partition(directory)
    assert log.read(log.slice(0, 1000)) == garbage


def test_only_the_last_segments_records_are_counted(tmp_path):
    first = record(b"a") + record(b"b")
    directory = make_directory(tmp_path, {name(0): first, name(42): record(b"c")})
    log = open_partition(directory)
    assert log.message_count == 1


def test_non_contiguous_segments_fail_the_load_naming_both_files(tmp_path):
    directory = make_directory(tmp_path, {name(0): record(b"a"), name(30): record(b"b")})
    with pytest.raises(StoreError) as caught:
        open_partition(directory)
    assert name(0) in str(caught.value) and name(30) in str(caught.value)


def test_a_non_numeric_segment_name_fails_the_load(tmp_path):
    directory = make_directory(tmp_path, {"junk.meta": b""})
    with pytest.raises(StoreError, match="junk.meta"):
        open_partition(directory)


def test_archived_segments_are_ignored(tmp_path):
    directory = make_directory(
        tmp_path, {name(0) + ".arc": b"x", name(0) + ".zip": b"y", name(21): record(b"a")}
    )
    log = open_partition(directory)
    assert (log.min_offset, log.max_offset) == (21, 42)


def test_an_empty_directory_gets_the_first_segment(tmp_path):
    directory = make_directory(tmp_path, {})
    open_partition(directory)
    assert (tmp_path / "test-0" / "00000000000000000000.meta").read_bytes() == b""


def test_a_segment_written_by_java_opens_and_reads_back_byte_for_byte(tmp_path):
    """Goal: a data directory written by a Java broker opens here unchanged.

    Method: build a segment from the spec's golden 25-byte record (no code of ours involved),
    open it, read it back and decode it.
    """
    directory = make_directory(tmp_path, {name(0): JAVA_HELLO_RECORD * 2})
    log = open_partition(directory)
    data = log.read(log.slice(0, 1000))
    (first, second) = iter_messages(data)
    assert data == JAVA_HELLO_RECORD * 2
    assert (first.msg_id, first.flag, first.payload, second.offset) == (4194316293, 0, b"hello", 25)


def test_new_appends_continue_after_the_recovered_end(tmp_path):
    directory = make_directory(tmp_path, {name(0): JAVA_HELLO_RECORD + b"\x00\x00\x00"})
    log = open_partition(directory)
    offsets = collect(log.append(record(b"next")))
    data = (tmp_path / "test-0" / name(0)).read_bytes()
    assert (offsets, data) == ([25], JAVA_HELLO_RECORD + record(b"next"))


def test_every_acknowledged_record_survives_a_crash(tmp_path):
    """Goal: after a crash (no close) every acked record is readable and intact.

    Method: append with acks, tear a half-written record onto the end as a crash would, then
    open the directory again and decode everything.
    """
    directory = str(tmp_path / "test-0")
    log = open_partition(directory)
    payloads = [b"payload-%d" % index for index in range(20)]
    acked = [collect(log.append(record(payload)))[0] for payload in payloads]
    with open(tmp_path / "test-0" / name(0), "ab") as handle:
        handle.write(record(b"torn")[:-1])
    reopened = open_partition(directory)
    messages = list(iter_messages(reopened.read(reopened.slice(0, 1 << 20))))
    assert [(m.offset, m.payload) for m in messages] == list(zip(acked, payloads, strict=True))


def crash(log) -> None:
    """Stop as a crashed process would: close the descriptors, flush nothing."""
    for segment in log.segments:
        segment.close()


def test_records_found_at_load_are_fsynced_by_the_first_flush(tmp_path):
    """Goal: records a crashed process wrote but never fsynced are durable once the
    partition's first flush after the restart has run.

    Method: append in threshold mode (no fsync), crash, open again, flush, lose power, open
    again and read.
    """
    files = PowerLossFiles()
    directory = str(tmp_path / "test-0")
    log = open_partition(directory, files=files, threshold=1000)
    for payload in (b"one", b"two"):
        collect(log.append(record(payload)))
    crash(log)
    reopened = open_partition(directory, files=files, threshold=1000)
    reopened.request_flush()
    crash(reopened)
    files.power_loss()
    after = open_partition(directory, files=files)
    assert after.max_offset == 2 * len(record(b"one"))


def test_a_segment_a_roll_just_left_is_fsynced_by_the_first_flush(tmp_path):
    """Goal: a crash right after a roll leaves the full segment unsynced; the first flush
    after the restart fsyncs it too.

    Method: fill a one-record segment in threshold mode (it rolls; no fsync), crash, open
    again, flush, lose power, open again.
    """
    files = PowerLossFiles()
    directory = str(tmp_path / "test-0")
    size = len(record(b"one"))
    log = open_partition(directory, files=files, threshold=1000, segment_bytes_max=size)
    collect(log.append(record(b"one")))
    assert len(log.segments) == 2
    crash(log)
    reopened = open_partition(directory, files=files, threshold=1000, segment_bytes_max=size)
    assert (reopened.is_dirty, reopened.durable_end) == (True, 0)
    reopened.request_flush()
    crash(reopened)
    files.power_loss()
    after = open_partition(directory, files=files, segment_bytes_max=size)
    assert after.read(after.slice(0, size)) == record(b"one")
