"""Segment files: naming, append, read, short and failed writes, tail recovery."""

from __future__ import annotations

import logging
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meta.errors import StoreError
from meta.protocol.message import pack_message, scan_valid_prefix
from meta.store.files import Files
from meta.store.integrity import SegmentScan
from meta.store.log_recovery import recover_segments
from meta.store.segment import RECOVER_CHUNK_BYTES, Segment, parse_segment_name, segment_name
from tests.descriptors import closers
from tests.store.conftest import ENOSPC, RecordingFiles, record


def open_segment(path, files=None, start=0):
    """The segment file ``path`` (created), closed after the test."""
    segment = Segment.open(files or Files(), str(path), start, create=True)
    closers.add(segment.close)
    return segment


def recover(segment, chunk_bytes=RECOVER_CHUNK_BYTES, point=None):
    """Start-up recovery of ``segment`` as its partition's only segment."""
    directory = os.path.dirname(segment.path)
    return recover_segments(Files(), directory, [segment], point, chunk_bytes)


def write_file(path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)


def test_segment_name_is_the_start_offset_in_twenty_digits():
    assert segment_name(1073741849) == "00000000001073741849.meta"


def test_parse_segment_name_reads_the_start_offset():
    assert parse_segment_name("00000000001073741849.meta") == 1073741849


def test_parse_segment_name_ignores_archived_files():
    assert parse_segment_name("00000000000000000000.meta.arc") is None


def test_parse_segment_name_refuses_a_non_numeric_name():
    with pytest.raises(StoreError, match="abc.meta"):
        parse_segment_name("abc.meta")


def test_append_returns_the_position_where_the_data_starts(tmp_path):
    segment = open_segment(tmp_path / "s.meta")
    first = segment.append(record(b"one"))
    second = segment.append(record(b"two"))
    assert (first, second) == (0, 23)


def test_appended_bytes_are_exactly_the_records_on_disk(tmp_path):
    segment = open_segment(tmp_path / "s.meta")
    segment.append(record(b"one"))
    segment.append(record(b"second"))
    assert (tmp_path / "s.meta").read_bytes() == record(b"one") + record(b"second")


def test_append_finishes_a_short_write(tmp_path):
    files = RecordingFiles()
    files.short_write_bytes = 7
    segment = open_segment(tmp_path / "s.meta", files)
    segment.append(record(b"a payload of some length"))
    assert (tmp_path / "s.meta").read_bytes() == record(b"a payload of some length")


def test_a_failed_write_raises_store_error_and_keeps_the_size(tmp_path):
    files = RecordingFiles()
    segment = open_segment(tmp_path / "s.meta", files)
    segment.append(record(b"kept"))
    files.write_error = ENOSPC
    with pytest.raises(StoreError, match="No space left"):
        segment.append(record(b"lost"))
    assert segment.written_size == len(record(b"kept"))


def test_a_failed_write_truncates_the_file_back(tmp_path):
    files = RecordingFiles()
    segment = open_segment(tmp_path / "s.meta", files)
    segment.append(record(b"kept"))
    files.short_write_bytes = 5
    original_write = files.write
    calls = []

    def fail_second_piece(fd, data, position):
        calls.append(position)
        if len(calls) > 1:
            raise OSError(ENOSPC, "No space left on device")
        return original_write(fd, data, position)

    files.write = fail_second_piece
    with pytest.raises(StoreError):
        segment.append(record(b"torn record"))
    assert (tmp_path / "s.meta").read_bytes() == record(b"kept")


def test_read_returns_bytes_at_a_position(tmp_path):
    segment = open_segment(tmp_path / "s.meta")
    segment.append(record(b"one") + record(b"two"))
    assert segment.read(23, 23) == record(b"two")


def test_read_past_the_end_is_short(tmp_path):
    segment = open_segment(tmp_path / "s.meta")
    segment.append(record(b"one"))
    assert segment.read(20, 100) == b"one"


def test_mark_flushed_never_moves_backwards(tmp_path):
    segment = open_segment(tmp_path / "s.meta")
    segment.append(record(b"one"))
    segment.mark_flushed(23)
    segment.mark_flushed(10)
    assert segment.flushed_size == 23


def test_recover_counts_the_records_of_a_clean_file(tmp_path):
    write_file(tmp_path / "s.meta", record(b"one") + record(b"two") + record(b""))
    segment = open_segment(tmp_path / "s.meta")
    assert recover(segment) == 3


def test_recover_cuts_a_torn_last_record(tmp_path):
    write_file(tmp_path / "s.meta", record(b"one") + record(b"two")[:-1])
    segment = open_segment(tmp_path / "s.meta")
    recover(segment)
    assert (tmp_path / "s.meta").read_bytes() == record(b"one")


def test_recover_logs_how_many_bytes_were_cut(tmp_path, caplog):
    write_file(tmp_path / "s.meta", record(b"one") + record(b"two")[:-1])
    segment = open_segment(tmp_path / "s.meta")
    with caplog.at_level(logging.WARNING, logger="meta.store"):
        recover(segment)
    assert "cut 22 bytes" in caplog.text


def test_recover_sets_both_sizes_to_the_valid_length(tmp_path):
    write_file(tmp_path / "s.meta", record(b"one") + b"\x00\x01\x02")
    segment = open_segment(tmp_path / "s.meta")
    recover(segment)
    assert (segment.written_size, segment.flushed_size) == (23, 23)


def test_recover_cuts_a_garbage_tail(tmp_path):
    write_file(tmp_path / "s.meta", record(b"one") + os.urandom(7) + b"\xff" * 30)
    segment = open_segment(tmp_path / "s.meta")
    recover(segment)
    assert (tmp_path / "s.meta").read_bytes() == record(b"one")


def test_recover_keeps_valid_records_after_a_corrupt_one_and_reports_the_range(tmp_path):
    corrupt = bytearray(record(b"two"))
    corrupt[-1] ^= 0xFF
    data = record(b"one") + bytes(corrupt) + record(b"three")
    write_file(tmp_path / "s.meta", data)
    segment = open_segment(tmp_path / "s.meta")
    assert recover(segment) == 2
    assert (tmp_path / "s.meta").read_bytes() == data
    (finding,) = segment.recovery.corrupt
    assert (finding.position, finding.resume, finding.tail) == (23, 23 + len(corrupt), False)
    assert segment.recovery.cut_bytes == 0


def test_recover_cuts_a_corrupt_last_record_as_a_torn_tail(tmp_path):
    corrupt = bytearray(record(b"two"))
    corrupt[-1] ^= 0xFF
    write_file(tmp_path / "s.meta", record(b"one") + bytes(corrupt))
    segment = open_segment(tmp_path / "s.meta")
    assert recover(segment) == 1
    assert (tmp_path / "s.meta").read_bytes() == record(b"one")
    assert (segment.recovery.cut_bytes, segment.recovery.corrupt) == (len(corrupt), ())


def test_recover_reads_a_record_larger_than_the_chunk(tmp_path):
    data = record(b"x" * 300) + record(b"y" * 10)
    write_file(tmp_path / "s.meta", data)
    segment = open_segment(tmp_path / "s.meta")
    assert recover(segment, chunk_bytes=64) == 2
    assert segment.written_size == len(data)


def _file_contents():
    one_record = st.builds(
        pack_message, st.integers(-(2**63), 2**63 - 1), st.integers(0, 3), st.binary(max_size=90)
    )
    good = st.lists(one_record, max_size=6).map(b"".join)
    return st.tuples(good, st.binary(max_size=60), st.lists(one_record, max_size=2).map(b"".join))


@settings(max_examples=150, deadline=None)
@given(parts=_file_contents(), chunk_bytes=st.integers(20, 130))
def test_chunked_recovery_keeps_what_a_whole_file_scan_keeps(tmp_path_factory, parts, chunk_bytes):
    data = b"".join(parts)
    path = tmp_path_factory.mktemp("segment") / "s.meta"
    write_file(path, data)
    segment = open_segment(path)
    count = recover(segment, chunk_bytes=chunk_bytes)
    segment.close()
    whole = SegmentScan(lambda position, length: data[position : position + length], len(data))
    whole.run()
    tail = whole.findings[-1].position if whole.findings and whole.findings[-1].tail else len(data)
    assert (segment.written_size, count) == (tail, whole.records)
    if not whole.findings:
        assert (segment.written_size, count) == scan_valid_prefix(data)
