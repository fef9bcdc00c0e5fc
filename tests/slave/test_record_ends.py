"""``record_ends``'s run of same-size records (read with one ``iter_unpack``) finds exactly
the ends the record-by-record walk finds, whatever the mix of sizes and the cut."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meta.errors import InvalidRecordError
from meta.protocol.crc import crc32
from meta.protocol.message import HEADER_SIZE, pack_message
from meta.slave.record_check import check_records, record_ends, uniform_run, walk_ends


def walked(data: bytes, base: int = 0) -> list[int]:
    """The ends by the walk alone, from the first byte."""
    ends: list[int] = []
    walk_ends(data, base, 0, ends)
    return ends


def records(sizes: list[int]) -> bytes:
    return b"".join(pack_message(index + 1, 0, bytes([index % 251]) * size)
                    for index, size in enumerate(sizes))  # fmt: skip


def test_a_batch_of_one_size_is_one_run():
    data = records([1024] * 50)
    assert uniform_run(data, 1024, 50) == 50
    assert record_ends(data, 0) == [1044 * n for n in range(1, 51)]


def test_the_run_ends_at_the_first_record_of_another_size_and_the_walk_goes_on():
    data = records([100] * 7 + [30] + [100] * 5)
    assert uniform_run(data, 100, len(data) // 120) == 7
    assert record_ends(data, 0) == walked(data)
    assert len(record_ends(data, 0)) == 13


def test_a_smaller_complete_record_after_the_run_is_found():
    """The bytes after the last full stride may still hold a complete, smaller record."""
    data = records([200] * 4 + [10]) + records([200])[:50]
    assert record_ends(data, 0) == [220, 440, 660, 880, 910]


def test_a_partial_record_after_the_run_is_left_out():
    data = records([64] * 10)
    assert record_ends(data + data[:70], 0) == record_ends(data, 0)


def test_a_negative_length_inside_the_run_is_refused_with_its_offset():
    broken = bytearray(records([16] * 6))
    broken[3 * 36 : 3 * 36 + 4] = (-7).to_bytes(4, "big", signed=True)
    with pytest.raises(InvalidRecordError, match=f"negative payload length -7 at offset {508}"):
        record_ends(bytes(broken), 400)


def test_empty_payloads_make_a_run_too():
    data = records([0] * 9)
    assert record_ends(data, 0) == [HEADER_SIZE * n for n in range(1, 10)]


@given(
    sizes=st.lists(
        st.one_of(st.just(40), st.just(40), st.just(40), st.integers(0, 90)), max_size=40
    ),
    cut=st.integers(0, 200),
    view=st.booleans(),
)
def test_record_ends_equals_the_walk_on_any_mix_of_sizes_and_any_cut(sizes, cut, view):
    data = records(sizes)
    data = data[: max(0, len(data) - cut)]
    body = memoryview(bytearray(data)) if view else data
    ends = record_ends(body, 0)
    assert ends == walked(data)
    check_records(body, ends, 0)


def payload_with_high_crc() -> bytes:
    """A payload whose CRC-32 has its top bit set (stored with it cleared)."""
    for index in range(100):
        payload = index.to_bytes(2, "big") * 8
        if crc32(payload) & 0x80000000:
            return payload
    raise AssertionError("no such payload among the first 100")


def test_a_crc_with_its_top_bit_set_matches_the_stored_masked_checksum():
    record = pack_message(1, 0, payload_with_high_crc())
    for data in (record * 5, record * 2 + records([3]) + record):  # uniform, then mixed
        check_records(data, record_ends(data, 0), 0)


@given(
    sizes=st.lists(st.one_of(st.just(40), st.integers(0, 90)), min_size=1, max_size=30),
    bad=st.integers(0, 29),
    field=st.sampled_from(["payload", "checksum", "checksum top bit"]),
    view=st.booleans(),
)
def test_check_records_names_the_first_bad_record_whatever_the_sizes(sizes, bad, field, view):
    """Goal: a corrupt record stops the check with its offset, in a batch of one size (the
    checksums gathered column by column) or of many (one field at a time). Method: break one
    record's payload byte, or its stored checksum (its top bit included, which a CRC masked
    as stored never has), then check the whole batch."""
    bad %= len(sizes)
    data = bytearray(records(sizes))
    ends = record_ends(data, 0)
    start = ends[bad - 1] if bad else 0
    if field == "payload":
        if sizes[bad] == 0:
            return  # no payload byte to break
        data[start + HEADER_SIZE] ^= 0x10
    elif field == "checksum":
        data[start + 7] ^= 0x01
    else:
        data[start + 4] ^= 0x80
    body = memoryview(data) if view else bytes(data)
    with pytest.raises(InvalidRecordError, match=f"checksum mismatch at offset {700 + start}$"):
        check_records(body, ends, 700)
