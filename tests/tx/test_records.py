"""Journal records (docs/formats.md section 6.1): golden bytes, round trips, damage detection."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meta.errors import InvalidRecordError
from meta.tx.records import (
    BODY_BYTES_MAX,
    FILE_MAGIC,
    FILE_MAGIC_V1,
    HEADER_SIZE,
    AppendRecord,
    BatchLocation,
    CommitDataRecord,
    CommitRecord,
    ForgetRecord,
    InlineBatch,
    PrepareRecord,
    RollbackRecord,
    decode_body,
    encode,
    encode_commit,
    read_record,
)

# Each golden record: the pinned CRC, then length | kind | body, written field by field.
GOLDEN = {
    "prepare": (
        PrepareRecord("TX:s:1"),
        "73afc5ae00000008 020006 54583a733a31",
    ),
    "append": (
        AppendRecord("TX:s:1", "t", 1, b"\x01\x02\x03"),
        "dcdb1ed600000016 010006 54583a733a310001 740000000100000003 010203",
    ),
    "commit": (
        CommitRecord("TX:s:1", True, 4, (BatchLocation("t", 2, 100, 42, 0x12345678),)),
        "17a92941"
        "00000023 03"
        "0006 54583a733a31"
        "01 04"
        "0001"
        "0001 74 00000002 0000000000000064 0000002a 12345678",
    ),
    "rollback": (
        RollbackRecord("TX:s:1", False, 0),
        "9edd92d40000000a 040006 54583a733a3100 00",
    ),
    "heuristic rollback": (
        RollbackRecord("TX:s:1", True, 5),
        "f7ac571a0000000a 040006 54583a733a3101 05",
    ),
    "forget": (
        ForgetRecord("XID:1:0a:0b:q"),
        "f7392e660000000f 05000d 5849443a313a30613a30623a71",
    ),
    "commit with data": (
        CommitDataRecord("TX:s:1", (InlineBatch("t", 2, 100, b"\x01\x02\x03"),)),
        "2edea73000000020 060006 54583a733a3100010001 74 00000002 0000000000000064 00000003 010203",
    ),
}

SAMPLES = [record for record, _ in GOLDEN.values()] + [
    CommitRecord(
        "XID:7:ab:cd:q",
        False,
        0,
        (BatchLocation("alpha", 0, 0, 21, 1), BatchLocation("beta", 3, 2**40, 99, 2**31 - 1)),
    ),
    AppendRecord("TX:\u00e9:2", "topic", 2**31 - 1, b"\x00" * 40),
    CommitDataRecord(
        "XID:7:ab:cd:q",
        (InlineBatch("alpha", 0, 0, b"\x05" * 21), InlineBatch("beta", 3, 2**40, b"")),
    ),
]


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_each_record_kind_encodes_to_its_golden_bytes(name):
    record, golden = GOLDEN[name]
    assert encode(record) == bytes.fromhex(golden)


DOC_EXAMPLE = "73afc5ae 00000008 02 0006 54583a733a31"  # docs/formats.md section 6.1


DOC_COMMIT_DATA = (  # docs/formats.md section 6.1
    "2edea730 00000020 06 0006 54583a733a31 0001 0001 74 00000002 0000000000000064 00000003 010203"
)


def test_the_documented_commit_data_example_is_the_41_bytes_of_formats_md():
    record = CommitDataRecord("TX:s:1", (InlineBatch("t", 2, 100, b"\x01\x02\x03"),))
    assert encode(record) == bytes.fromhex(DOC_COMMIT_DATA)
    assert len(bytes.fromhex(DOC_COMMIT_DATA)) == 41
    docs = (Path(__file__).resolve().parents[2] / "docs" / "formats.md").read_text()
    assert DOC_COMMIT_DATA in docs and DOC_EXAMPLE in docs


def test_the_documented_prepare_example_is_the_17_bytes_of_formats_md():
    assert encode(PrepareRecord("TX:s:1")) == bytes.fromhex(DOC_EXAMPLE)
    assert len(bytes.fromhex(DOC_EXAMPLE)) == 17


def test_the_file_magic_is_metaqtx_and_a_version_byte():
    assert FILE_MAGIC == b"metaqtx\x02"
    assert FILE_MAGIC_V1 == b"metaqtx\x01"


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_bytes_decode_to_their_record(name):
    record, golden = GOLDEN[name]
    data = bytes.fromhex(golden)
    assert read_record(data, 0) == (record, len(data))


keys = st.text(max_size=40)
partitions = st.integers(-(2**31), 2**31 - 1)
u32 = st.integers(0, 2**32 - 1)
batches = st.builds(BatchLocation, keys, partitions, st.integers(-(2**63), 2**63 - 1), u32, u32)
records = st.one_of(
    st.builds(AppendRecord, keys, keys, partitions, st.binary(max_size=200)),
    st.builds(PrepareRecord, keys),
    st.builds(CommitRecord, keys, st.booleans(), st.sampled_from([0, 4, 5]), st.tuples(batches)),
    st.builds(
        CommitRecord, keys, st.booleans(), st.sampled_from([0, 4, 5]), st.lists(batches).map(tuple)
    ),
    st.builds(RollbackRecord, keys, st.booleans(), st.sampled_from([0, 4, 5])),
    st.builds(ForgetRecord, keys),
    st.builds(
        CommitDataRecord,
        keys,
        st.lists(
            st.builds(
                InlineBatch,
                keys,
                partitions,
                st.integers(-(2**63), 2**63 - 1),
                st.binary(max_size=60),
            )
        ).map(tuple),
    ),
)


@given(records)
def test_every_record_kind_round_trips(record):
    data = encode(record)
    assert read_record(data, 0) == (record, len(data))


@given(records)
def test_decode_body_gives_back_the_record(record):
    data = encode(record)
    assert decode_body(data[8], data[HEADER_SIZE:]) == record


@given(st.binary(max_size=30), records)
def test_a_record_is_read_at_any_position_of_a_buffer(prefix, record):
    data = encode(record)
    assert read_record(prefix + data + b"\xff" * 3, len(prefix)) == (record, len(data))


@pytest.mark.parametrize("record", SAMPLES, ids=repr)
def test_flipping_any_single_byte_is_detected(record):
    """Goal: the CRC covers every byte after it, and damage to the CRC itself shows too.

    Method: flip each byte of an encoded record in turn (every bit at once); reading must
    raise InvalidRecordError, or return None when the damaged length runs past the buffer.
    """
    data = encode(record)
    undetected = []
    for index in range(len(data)):
        damaged = bytearray(data)
        damaged[index] ^= 0xFF
        try:
            found = read_record(bytes(damaged), 0)
        except InvalidRecordError:
            continue
        if found is not None:
            undetected.append(index)
    assert undetected == []


@pytest.mark.parametrize("record", SAMPLES, ids=repr)
def test_flipping_one_bit_anywhere_is_detected(record):
    data = encode(record)
    undetected = []
    for bit in range(len(data) * 8):
        damaged = bytearray(data)
        damaged[bit // 8] ^= 1 << (bit % 8)
        try:
            if read_record(bytes(damaged), 0) is not None:
                undetected.append(bit)
        except InvalidRecordError:
            pass
    assert undetected == []


@pytest.mark.parametrize("record", SAMPLES, ids=repr)
def test_every_truncation_of_a_record_reads_as_none(record):
    data = encode(record)
    assert [read_record(data[:size], 0) for size in range(len(data))] == [None] * len(data)


def test_an_implausible_length_raises_from_the_header_alone():
    header = struct.pack(">IIB", 0, BODY_BYTES_MAX + 1, 2)
    with pytest.raises(InvalidRecordError, match="implausible"):
        read_record(header, 0)


def test_the_largest_plausible_length_is_only_waited_for():
    header = struct.pack(">IIB", 0, BODY_BYTES_MAX, 2)
    assert read_record(header, 0) is None


def framed(kind: int, body: bytes) -> bytes:
    """A record with a correct CRC around any ``kind`` and ``body``."""
    after_crc = struct.pack(">IB", len(body), kind) + body
    return struct.pack(">I", zlib.crc32(after_crc)) + after_crc


def test_an_unknown_kind_with_a_good_crc_is_invalid():
    with pytest.raises(InvalidRecordError, match="kind 9"):
        read_record(framed(9, b"\x00\x01k"), 0)


def test_a_body_with_trailing_bytes_is_invalid():
    with pytest.raises(InvalidRecordError, match="trailing"):
        read_record(framed(2, b"\x00\x01k" + b"\x00"), 0)


def test_a_body_shorter_than_its_fields_is_invalid():
    with pytest.raises(InvalidRecordError, match="ends early"):
        read_record(framed(4, b"\x00\x01k"), 0)


def test_a_key_that_is_not_utf8_is_invalid():
    with pytest.raises(InvalidRecordError, match="UTF-8"):
        read_record(framed(2, b"\x00\x02\xff\xfe"), 0)


def test_an_append_whose_message_length_overruns_the_body_is_invalid():
    body = b"\x00\x01k" + b"\x00\x01t" + struct.pack(">iI", 0, 100) + b"xx"
    with pytest.raises(InvalidRecordError, match="ends early"):
        read_record(framed(1, body), 0)


def test_fewer_than_header_bytes_read_as_none():
    assert read_record(b"\x00" * (HEADER_SIZE - 1), 0) is None


placements = st.lists(
    st.tuples(keys, partitions, st.integers(-(2**63), 2**63 - 1), st.binary(max_size=60)),
    max_size=4,
)


@given(keys, placements)
def test_encode_commit_without_prepare_is_the_commit_data_record(key, placed):
    batches = tuple(InlineBatch(*batch) for batch in placed)
    assert encode_commit(key, False, 0, placed) == encode(CommitDataRecord(key, batches))


@given(keys, st.sampled_from([0, 4, 5]), placements)
def test_encode_commit_after_prepare_names_each_batch_with_its_crc(key, outcome, placed):
    locations = tuple(
        BatchLocation(topic, partition, offset, len(data), zlib.crc32(data) & 0x7FFFFFFF)
        for topic, partition, offset, data in placed
    )
    expected = encode(CommitRecord(key, True, outcome, locations))
    assert encode_commit(key, True, outcome, placed) == expected
