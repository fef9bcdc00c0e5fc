"""The one scan of a segment file's records (``meta.store.integrity``): what is corrupt,
where valid records resume, what is a tail, and that the chunk size changes nothing."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from meta.protocol.message import pack_message
from meta.store.integrity import SegmentScan, check_record_at, resync

PAYLOAD = b"p" * 80  # 100-byte records


def records(count: int, first_id: int = 1) -> bytes:
    return b"".join(pack_message(first_id + index, 0, PAYLOAD) for index in range(count))


def reader(data: bytes):
    return lambda position, length: data[position : position + length]


def scan(data: bytes, chunk_bytes: int = 1 << 20) -> SegmentScan:
    return SegmentScan(reader(data), len(data), chunk_bytes=chunk_bytes).run()


def flip(data: bytes, index: int, bit: int = 0x01) -> bytes:
    changed = bytearray(data)
    changed[index] ^= bit
    return bytes(changed)


def ranges(found: SegmentScan) -> list[tuple[int, int, bool]]:
    return [(f.position, f.resume, f.tail) for f in found.findings]


def test_clean_records_have_no_finding():
    found = scan(records(10))
    assert (found.records, found.findings) == (10, [])


def test_a_flipped_payload_bit_is_that_record_alone():
    found = scan(flip(records(10), 450))
    assert ranges(found) == [(400, 500, False)]
    assert found.records == 9
    assert found.findings[0].reason.startswith("checksum mismatch")


def test_a_flipped_length_bit_resumes_at_the_next_real_record():
    for bit in (0x01, 0x04, 0x40):  # length 81, 84, 144: inside the next record, or beyond
        assert ranges(scan(flip(records(10), 303, bit))) == [(300, 400, False)]


def test_a_high_length_bit_running_past_the_end_resumes_too():
    assert ranges(scan(flip(records(10), 300, 0x10))) == [(300, 400, False)]


def test_a_zeroed_record_is_one_range():
    data = records(10)
    found = scan(data[:500] + bytes(100) + data[600:])
    assert ranges(found) == [(500, 600, False)]
    assert "all-zero" in found.findings[0].reason


def test_a_zeroed_region_across_records_resumes_at_the_first_whole_record_after_it():
    data = records(10)
    assert ranges(scan(data[:250] + bytes(200) + data[450:])) == [(200, 500, False)]


def test_bad_bytes_with_nothing_valid_after_them_are_a_tail():
    assert ranges(scan(records(5) + bytes(64))) == [(500, 564, True)]
    assert ranges(scan(records(5) + records(1)[:60])) == [(500, 560, True)]
    assert ranges(scan(flip(records(5), 450))) == [(400, 500, True)]


def test_a_real_empty_message_is_valid():
    data = records(2) + pack_message(99, 0, b"") + records(2, 3)
    assert (scan(data).records, scan(data).findings) == (5, [])


def test_check_record_at_names_what_is_wrong():
    data = records(2)
    assert check_record_at(reader(data), 0, len(data)) == (None, 100)
    assert check_record_at(reader(data), 0, 99)[0].startswith("payload length 80 runs past")
    assert check_record_at(reader(data), 190, len(data))[0].startswith("torn header: 10 bytes")


def test_resync_needs_two_valid_records_or_the_end():
    data = records(3)
    assert resync(reader(data), 1, len(data)) == 100
    assert resync(reader(bytes(300)), 1, 300) is None


@settings(max_examples=100, deadline=None)
@given(
    count=st.integers(1, 12),
    damage=st.lists(st.tuples(st.integers(0, 1199), st.integers(0, 7)), max_size=3),
    chunk_bytes=st.integers(20, 400),
)
def test_the_chunk_size_changes_no_finding(count, damage, chunk_bytes):
    data = records(count)
    for index, bit in damage:
        if index < len(data):
            data = flip(data, index, 1 << bit)
    whole = scan(data)
    pieces = scan(data, chunk_bytes)
    assert (ranges(pieces), pieces.records) == (ranges(whole), whole.records)
