"""The bulk decoder (``meta.spark.decoding``) against the per-record one, on random records.

The reference is ``meta.protocol.message.iter_messages`` + ``decode_payload`` (what the
Spark reader used per record before): both must give the same rows, or both must raise
``InvalidRecordError`` with the same message, for random message sets with attributes,
empty and large bodies, torn tails, bad checksums and negative lengths. The batches that
``ColumnBuilder`` makes must equal batches built row by row with ``pa.array``.
"""

from __future__ import annotations

import random
import struct

import pyarrow as pa
import pytest

from meta.errors import InvalidRecordError
from meta.message_id import id_time_ms
from meta.protocol.message import (
    HEADER_SIZE,
    decode_payload,
    encode_payload,
    iter_messages,
    pack_message,
)
from meta.spark.decoding import ColumnBuilder, decode_message_set
from meta.spark.schema import ARROW_SCHEMA

SEEDS = range(40)


def random_records(rng: random.Random, count: int) -> list[bytes]:
    records = []
    for _ in range(count):
        size = rng.choice([0, 0, 1, 7, 100, 1024, 1024, rng.randrange(200_000)])
        body = rng.randbytes(size)
        attribute = rng.choice([None, None, "", "a", "attr-é-✓", "x" * 300])
        payload, flag = encode_payload(body, attribute)
        flag |= rng.choice([0, 0, 2, 4, 1 << 30]) if attribute is not None else rng.choice([0, 2])
        msg_id = rng.choice([rng.randrange(1 << 62), rng.randrange(-(1 << 63), 0)])
        records.append(pack_message(msg_id, flag, payload))
    return records


def reference(buffer: bytes, base: int, stop: int | None) -> tuple[list[tuple], str | None]:
    """The per-record decode: rows until the end, a torn tail, ``stop`` or an error."""
    rows = []
    try:
        for record in iter_messages(buffer, base):
            attribute, value = decode_payload(record.flag, record.payload)
            rows.append((record.offset, record.msg_id, record.flag, attribute, bytes(value)))
            if stop is not None and record.offset >= stop:
                break
    except InvalidRecordError as error:
        return rows, str(error)
    return rows, None


def bulk(buffer: bytes, base: int, stop: int | None) -> tuple[list[tuple], str | None]:
    try:
        decoded = decode_message_set(buffer, base, stop)
    except InvalidRecordError as error:
        return [], str(error)
    attributes = decoded.attributes or [None] * len(decoded)
    rows = list(
        zip(
            decoded.offsets.tolist(),
            decoded.msg_ids.tolist(),
            decoded.flags.tolist(),
            attributes,
            [bytes(value) for value in decoded.values],
            strict=True,
        )
    )
    return rows, None


def assert_same(buffer: bytes, base: int = 0, stop: int | None = None) -> list[tuple]:
    expected_rows, expected_error = reference(buffer, base, stop)
    rows, error = bulk(buffer, base, stop)
    assert error == expected_error
    if error is None:
        assert rows == expected_rows
    return rows


@pytest.mark.parametrize("seed", SEEDS)
def test_random_message_sets_decode_like_the_per_record_decoder(seed):
    rng = random.Random(seed)
    records = random_records(rng, rng.randrange(1, 30))
    buffer = b"".join(records)
    base = rng.randrange(1 << 40)
    rows = assert_same(buffer, base)
    assert len(rows) == len(records)
    assert decode_message_set(buffer, base).used == len(buffer) == end_of_last(buffer, base, rows)
    # A torn tail: cut anywhere, including inside a header.
    cut = rng.randrange(len(buffer) + 1)
    assert_same(buffer[:cut], base)
    # A stop offset: the first record at or after it is the last one decoded.
    stop = base + rng.randrange(len(buffer) + 1)
    assert_same(buffer, base, stop)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_bad_checksum_raises_at_the_same_record(seed):
    rng = random.Random(seed)
    records = [bytearray(record) for record in random_records(rng, rng.randrange(1, 20))]
    victim = rng.randrange(len(records))
    record = records[victim]
    if len(record) > HEADER_SIZE and rng.random() < 0.5:
        record[rng.randrange(HEADER_SIZE, len(record))] ^= 0xFF  # a flipped payload byte
    else:
        record[4:8] = struct.pack(">i", struct.unpack(">i", record[4:8])[0] ^ 0x5A5A)
    buffer = b"".join(records)
    _rows, error = reference(buffer, 0, None)
    assert error is not None and "checksum mismatch" in error
    assert_same(buffer)


def test_negative_length_raises_like_the_per_record_decoder():
    good = pack_message(1 << 30, 0, b"body")
    negative = struct.pack(">iiqi", -5, 0, 0, 0) + b"tail bytes"
    assert_same(good + negative)
    assert "negative payload length -5 at offset 64" in bulk(good + negative, 40, None)[1]


def test_a_bad_checksum_before_a_negative_length_wins():
    bad = bytearray(pack_message(7, 0, b"body"))
    bad[-1] ^= 1
    buffer = bytes(bad) + struct.pack(">iiqi", -1, 0, 0, 0)
    assert "checksum mismatch at offset 0" in bulk(buffer, 0, None)[1]
    assert_same(buffer)


@pytest.mark.parametrize(
    "payload",
    [b"\x00\x00", b"\x00\x00\x00\x09abc", b"\xff\xff\xff\xffabc", b"\x00\x00\x00\x02\xff\xfe"],
    ids=["short", "too-long", "negative", "not-utf8"],
)
def test_a_malformed_attribute_section_raises_like_the_per_record_decoder(payload):
    buffer = pack_message(5, 1, b"ok") + pack_message(6, 1, payload)
    rows, error = bulk(buffer, 0, None)
    assert error is not None
    assert_same(buffer)


def test_empty_and_header_only_buffers_decode_to_nothing():
    for buffer in (b"", b"\x00" * (HEADER_SIZE - 1)):
        decoded = decode_message_set(buffer, 123)
        assert len(decoded) == 0 and decoded.used == 0
    decoded = decode_message_set(pack_message(1, 0, b""), 10)
    assert decoded.offsets.tolist() == [10] and bytes(decoded.values[0]) == b""
    assert decoded.used == HEADER_SIZE


def test_records_after_the_stop_offset_are_not_checked():
    first = pack_message(1, 0, b"a")
    second = pack_message(2, 0, b"b")
    corrupt = bytearray(pack_message(3, 0, b"c"))
    corrupt[-1] ^= 1
    buffer = first + second + bytes(corrupt)
    decoded = decode_message_set(buffer, 0, stop_offset=len(first))
    assert decoded.offsets.tolist() == [0, len(first)]
    assert decoded.used == len(first) + len(second)
    with pytest.raises(InvalidRecordError):
        decode_message_set(buffer, 0)


def row_by_row_batch(topic: str, broker_id: int, partition_id: int, rows: list[tuple]):
    """What the per-record reader built: one ``pa.array`` per column from Python lists."""
    count = len(rows)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([topic] * count, pa.string()),
            pa.array([f"{broker_id}-{partition_id}"] * count, pa.string()),
            pa.array([broker_id] * count, pa.int32()),
            pa.array([partition_id] * count, pa.int32()),
            pa.array([row[0] for row in rows], pa.int64()),
            pa.array([row[1] for row in rows], pa.int64()),
            pa.array([id_time_ms(row[1]) * 1000 for row in rows], pa.timestamp("us", tz="UTC")),
            pa.array([row[2] for row in rows], pa.int32()),
            pa.array([row[3] for row in rows], pa.string()),
            pa.array([row[4] for row in rows], pa.binary()),
        ],
        schema=ARROW_SCHEMA,
    )


@pytest.mark.parametrize("seed", range(10))
def test_column_builder_batches_equal_row_by_row_batches(seed):
    rng = random.Random(seed)
    builder = ColumnBuilder("tópic", 3, 7)
    expected_rows = []
    base = 0
    for _ in range(rng.randrange(1, 5)):
        buffer = b"".join(random_records(rng, rng.randrange(0, 12)))
        decoded = decode_message_set(buffer, base)
        first = rng.randrange(len(decoded) + 1)
        last = rng.randrange(first, len(decoded) + 1)
        builder.add(decoded.slice(first, last))
        expected_rows += reference(buffer, base, None)[0][first:last]
        base += len(buffer)
    assert builder.rows == len(expected_rows)
    batch = builder.take_batch()
    expected = row_by_row_batch("tópic", 3, 7, expected_rows)
    assert batch.schema.equals(ARROW_SCHEMA)
    assert batch.equals(expected)
    assert builder.rows == 0 and builder.value_bytes == 0
    assert builder.take_batch().num_rows == 0


def test_column_builder_without_attributes_gives_an_all_null_column():
    builder = ColumnBuilder("t", 1, 0)
    builder.add(decode_message_set(pack_message(9 << 22, 0, b"v") * 3))
    batch = builder.take_batch()
    assert batch.column("attribute").null_count == 3
    assert batch.column("value").to_pylist() == [b"v"] * 3
    assert batch.equals(
        row_by_row_batch("t", 1, 0, reference(pack_message(9 << 22, 0, b"v") * 3, 0, None)[0])
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_uniform_records_with_an_odd_tail_decode_like_the_per_record_decoder(seed):
    # The fast path (records of one size) and where it hands over to the walk.
    rng = random.Random(seed)
    size = rng.choice([0, 1, 100, 1024])
    count = rng.randrange(2, 40)
    records = [pack_message(rng.randrange(1 << 62), rng.choice([0, 2]), rng.randbytes(size))]
    records = [bytearray(records[0]) for _ in range(count)]
    tail = rng.choice(["none", "torn", "smaller", "bigger", "attribute", "bad-crc", "negative"])
    if tail == "torn":
        records.append(
            bytearray(pack_message(1, 0, rng.randbytes(size + 5)))[: rng.randrange(1, 25)]
        )
    elif tail in ("smaller", "bigger"):
        other = max(0, size - 1) if tail == "smaller" else size + 3
        records.insert(rng.randrange(1, count), bytearray(pack_message(2, 0, rng.randbytes(other))))
    elif tail == "attribute":
        payload, flag = encode_payload(rng.randbytes(size), "k=v")
        records.insert(rng.randrange(count), bytearray(pack_message(3, flag, payload)))
    elif tail == "bad-crc":
        records[rng.randrange(count)][4] ^= 0x10
    elif tail == "negative":
        records.insert(rng.randrange(1, count), bytearray(struct.pack(">iiqi", -2, 0, 0, 0)))
    buffer = b"".join(records)
    assert_same(buffer, 1000)
    assert_same(buffer, 1000, 1000 + rng.randrange(len(buffer) + 1))
    assert_same(buffer[: rng.randrange(len(buffer) + 1)], 1000)
    if tail not in ("bad-crc", "negative"):
        rows, _error = reference(buffer, 1000, None)
        assert decode_message_set(buffer, 1000).used == end_of_last(buffer, 1000, rows)


def end_of_last(buffer: bytes, base: int, rows: list[tuple]) -> int:
    """Where the last decoded record ends in ``buffer`` (0 when there is none)."""
    if not rows:
        return 0
    position = rows[-1][0] - base
    (length,) = struct.unpack_from(">i", buffer, position)
    return position + HEADER_SIZE + length


# The wire spec's example record: payload "hello", id 4194316293, flag 0.
GOLDEN_HELLO = bytes.fromhex("00000005 3610a686 00000000fa003005 00000000 68656c6c6f")
# The spec's checksum vector with an attribute section: attribute "a", data "hello".
GOLDEN_ATTRIBUTE_PAYLOAD = bytes.fromhex("00000001 61 68656c6c6f")


def test_golden_records_of_one_size_decode_as_one_strided_run():
    decoded = decode_message_set(GOLDEN_HELLO * 3, 100)
    assert decoded.offsets.tolist() == [100, 125, 150]
    assert decoded.msg_ids.tolist() == [4194316293] * 3
    assert decoded.flags.tolist() == [0] * 3
    assert [bytes(value) for value in decoded.values] == [b"hello"] * 3
    assert decoded.stride == len(GOLDEN_HELLO) and decoded.used == 75


def test_a_golden_record_with_an_attribute_ends_the_strided_run():
    flagged = pack_message(4194316293, 1, GOLDEN_ATTRIBUTE_PAYLOAD)
    assert flagged[4:8] == struct.pack(">i", 1986522790)  # the spec's checksum vector
    decoded = decode_message_set(GOLDEN_HELLO + flagged)
    assert decoded.attributes == [None, "a"]
    assert [bytes(value) for value in decoded.values] == [b"hello", b"hello"]
    assert decoded.value_lengths.tolist() == [5, 5] and decoded.stride == 0


def test_a_corrupt_checksum_in_a_strided_run_names_its_record():
    buffer = bytearray(GOLDEN_HELLO * 4)
    buffer[2 * len(GOLDEN_HELLO) + 4] ^= 0x01
    with pytest.raises(InvalidRecordError, match="checksum mismatch at offset 1050$"):
        decode_message_set(bytes(buffer), 1000)


def test_a_truncated_last_record_is_left_out_of_the_strided_run():
    buffer = GOLDEN_HELLO * 5 + GOLDEN_HELLO[:-1]
    decoded = decode_message_set(buffer)
    assert len(decoded) == 5 and decoded.used == 5 * len(GOLDEN_HELLO)
    assert decoded.stride == len(GOLDEN_HELLO)


def test_records_of_mixed_sizes_are_not_a_strided_run():
    buffer = GOLDEN_HELLO + pack_message(1, 0, b"hello!") + GOLDEN_HELLO
    decoded = decode_message_set(buffer)
    assert [bytes(value) for value in decoded.values] == [b"hello", b"hello!", b"hello"]
    assert decoded.stride == 0


def test_an_empty_set_adds_no_rows():
    builder = ColumnBuilder("t", 1, 0)
    builder.add(decode_message_set(b""))
    assert builder.rows == 0 and builder.take_batch().num_rows == 0


def test_batches_keep_their_values_while_the_builder_fills_the_next():
    """Goal: a batch's value buffer is its own (the builder never writes into it again), and
    pieces of both copy paths (strided and joined) land in order across buffer growth.

    Method: three batches from uniform replies of 1000-byte records interleaved with mixed
    replies, more than ``VALUE_BUFFER_BYTES_MIN`` each; compare every batch with a
    row-by-row batch after all three are built.
    """
    rng = random.Random(5)
    builder = ColumnBuilder("t", 2, 1)
    batches, expected, base = [], [], 0
    for _turn in range(3):
        rows = []
        for index in range(4):
            if index % 2:
                buffer = b"".join(random_records(rng, 5))
            else:
                buffer = pack_message(rng.randrange(1 << 62), 2, rng.randbytes(1000)) * 700
            builder.add(decode_message_set(buffer, base))
            rows += reference(buffer, base, None)[0]
            base += len(buffer)
        batches.append(builder.take_batch())
        expected.append(row_by_row_batch("t", 2, 1, rows))
    for batch, wanted in zip(batches, expected, strict=True):
        assert batch.equals(wanted)
