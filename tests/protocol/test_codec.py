"""Decoder and encoder of the text protocol: golden bytes, byte-at-a-time, round trips, limits."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meta.errors import LocalProtocolError
from meta.protocol.codec import (
    BODY_PARTS_BYTES_MIN,
    NEED_DATA,
    Decoder,
    decode_all,
    decode_result,
    encode,
)
from meta.protocol.commands import (
    OPAQUE_DEFAULT,
    BodyTooLarge,
    Data,
    Get,
    Offset,
    Put,
    Quit,
    Result,
    Stats,
    Sync,
    Transaction,
    Version,
)
from meta.protocol.headers import parse_header, split_header

EVERY_COMMAND = [
    Put("test", 0, b"hello", 0, 1),
    Put("test", 0, b"\x00\x00\x00\x01ahello", 1, 2, checksum=1986522790),
    Put("test", 1, b"x", 0, 3, tx_key="TX:s-1:1"),
    Put("test", 1, b"x\r\ny", 0, 4, checksum=-1, tx_key="XID:1:aa:bb:q"),
    Get("test", "group", 0, 1024, 1048576, 5),
    Get("test", "group", 0, 0, 1, 6, max_wait_ms=500),
    Offset("test", "group", 3, 99, 7),
    Version(8),
    Stats("", 9),
    Stats("topics", 10),
    Quit(),
    Transaction("TX:s:1", "s", "BEGIN", 11),
    Transaction("TX:s:1", "s", "BEGIN", 12, timeout=30),
    Transaction("XID:1:aa:bb:q", "s", "PREPARE", 13, unique_qualifier="q"),
    Transaction("XID:1:aa:bb:q", "s", "RECOVER", 14, timeout=5, unique_qualifier="q"),
    Transaction("null", "s", "RECOVER", 15, unique_qualifier="123"),
    Sync("test", 0, b"abc", 0, -5468931592497922048, 16),
    Sync("test", 0, b"abc", 1, 42, 17, checksum=891568578),
    Result(200, b"4194316293 0 1024", 18),
    Result(404, b"", 19),
    Data(b"\x00" * 30, 20),
]


def feed_one_byte_at_a_time(data: bytes) -> list:
    decoder = Decoder()
    commands = []
    for index in range(len(data)):
        decoder.receive_data(data[index : index + 1])
        while (command := decoder.next_command()) is not NEED_DATA:
            commands.append(command)
    return commands


@pytest.mark.parametrize("command", EVERY_COMMAND, ids=repr)
def test_every_command_decodes_when_fed_one_byte_at_a_time(command):
    assert feed_one_byte_at_a_time(encode(command)) == [command]


def test_pipelined_commands_decode_in_order_from_one_buffer():
    data = b"".join(encode(command) for command in EVERY_COMMAND)
    assert decode_all(data) == EVERY_COMMAND


@pytest.mark.parametrize(
    ("command", "wire"),
    [
        (Put("t", 0, b"ab", 0, 1), b"put t 0 2 0 1\r\nab"),
        (Put("t", 0, b"ab", 1, 1, checksum=5), b"put t 0 2 1 5 1\r\nab"),
        (Put("t", 0, b"", 0, 1, tx_key="TX:s:1"), b"put t 0 0 0 TX:s:1 1\r\n"),
        (Put("t", 0, b"", 0, 1, 5, "TX:s:1"), b"put t 0 0 0 5 TX:s:1 1\r\n"),
        (Stats("", 7), b"stats  7\r\n"),
        (Version(3), b"version 3\r\n"),
        (Offset("t", "g", 0, 5, 1), b"offset t g 0 5 1\r\n"),
        (Result(200, b"", 9), b"result 200 0 9\r\n"),
        (Transaction("TX:s:1", "s", "END", 4), b"transaction TX:s:1 s END 4\r\n"),
        (Transaction("null", "s", "RECOVER", 4, 0, "9"), b"transaction null s RECOVER 0 9 4\r\n"),
    ],
)
def test_encoding_matches_the_java_wire_form(command, wire):
    assert encode(command) == wire


def test_version_and_stats_without_opaque_use_the_java_default():
    assert decode_all(b"version\r\nstats\r\n") == [Version(), Stats("", OPAQUE_DEFAULT)]


def test_dispatch_looks_at_the_first_character_only():
    assert decode_all(b"vxyz 5\r\nqwerty\r\n") == [Version(5), Quit()]


def test_extra_tokens_after_fixed_positions_are_ignored():
    assert decode_all(b"offset t g 0 5 1 junk\r\nversion 4 x\r\n") == [
        Offset("t", "g", 0, 5, 1),
        Version(4),
    ]


def test_get_ignores_an_extra_token_that_is_not_a_wait_time():
    assert decode_all(b"get t g 0 0 10 1 soon\r\n") == [Get("t", "g", 0, 0, 10, 1)]


def test_transaction_six_tokens_tell_timeout_from_qualifier():
    assert decode_all(b"transaction TX:s:1 s BEGIN 30 1\r\n")[0].timeout == 30
    assert decode_all(b"transaction TX:s:1 s BEGIN q 1\r\n")[0].unique_qualifier == "q"


def test_a_bare_lf_is_not_a_terminator():
    decoder = Decoder()
    decoder.receive_data(b"version 1\n")
    assert decoder.next_command() is NEED_DATA


def test_a_partial_body_waits_for_the_rest():
    decoder = Decoder()
    decoder.receive_data(b"put t 0 5 0 1\r\nhel")
    assert decoder.next_command() is NEED_DATA
    decoder.receive_data(b"lo")
    assert decoder.next_command() == Put("t", 0, b"hello", 0, 1)


@pytest.mark.parametrize(
    "wire",
    [
        b"\r\n",
        b"   \r\n",
        b"xyz\r\n",
        b"pot t 0 1 0 1\r\nx",
        b"put t 0 1 0\r\nx",
        b"put t 0 1 0 1 2 3 4\r\nx",
        b"put t zero 1 0 1\r\nx",
        b"put t 0 -1 0 1\r\n",
        b"put t 0 2147483648 0 1\r\n",
        b"put t 0 1 0  1\r\nx",
        b"put t 0 1 0 BAD:key 1\r\nx",
        b"get t g 0 0 10\r\n",
        b"get t g 0 zero 10 1\r\n",
        b"get t g 0 0 10 1_0\r\n",
        b"offset t g 0 1\r\n",
        b"transaction TX:s:1 s START 1\r\n",
        b"transaction TX:s:1 s BEGIN\r\n",
        b"transaction TX:s:1 s BEGIN  1\r\n",
        b"transaction nokey s BEGIN 1\r\n",
        b"sink t 0 1 0 5 1\r\nx",
        b"sync t 0 1 0 1\r\nx",
        b"result 200 x 1\r\n",
        b"version x\r\n",
        b"get t \xff 0 0 10 1\r\n",
    ],
)
def test_malformed_input_raises_a_protocol_error(wire):
    with pytest.raises(LocalProtocolError):
        decode_all(wire)


def test_after_a_protocol_error_the_decoder_stays_broken():
    decoder = Decoder()
    decoder.receive_data(b"xyz\r\nversion 1\r\n")
    for _ in range(2):
        with pytest.raises(LocalProtocolError):
            decoder.next_command()


def test_commands_before_a_malformed_one_are_still_returned():
    decoder = Decoder()
    decoder.receive_data(b"version 1\r\nxyz\r\n")
    assert decoder.next_command() == Version(1)
    with pytest.raises(LocalProtocolError):
        decoder.next_command()


def test_a_header_longer_than_the_limit_is_refused_before_its_end_arrives():
    decoder = Decoder(header_bytes_max=4096)
    decoder.receive_data(b"get " + b"t" * 5000)
    with pytest.raises(LocalProtocolError):
        decoder.next_command()


def test_an_oversized_put_is_reported_and_its_body_skipped_without_buffering():
    """Goal: a 2 GB put over the limit costs no memory and leaves the stream usable.

    Method: announce 2e9 bytes, feed 8 MiB of them in 64 KiB chunks, check the buffer stays
    empty, then feed the rest of the announced length in 64 MiB chunks (one zero-filled
    object, fed again and again), the last one ending with the next command, and decode it.
    """
    length = 2_000_000_000
    decoder = Decoder(body_bytes_max=1 << 20)
    decoder.receive_data(b"put big 0 %d 0 77\r\n" % length)
    assert decoder.next_command() == BodyTooLarge("put", length, 77, "big", 0)
    chunk = b"\x00" * 65536
    for _ in range(128):
        decoder.receive_data(chunk)
        assert decoder.next_command() is NEED_DATA
        assert decoder.buffered_bytes == 0
    rest = length - 128 * 65536
    big = bytes(64 << 20)
    for _ in range(rest // len(big)):
        decoder.receive_data(big)
        assert decoder.next_command() is NEED_DATA
        assert decoder.buffered_bytes == 0
    decoder.receive_data(big[: rest % len(big)] + b"version 5\r\n")
    assert decoder.next_command() == Version(5)


def test_a_body_exactly_at_the_limit_is_accepted():
    assert decode_all(b"put t 0 4 0 1\r\nabcd", body_bytes_max=4) == [Put("t", 0, b"abcd", 0, 1)]


# --- property tests ---------------------------------------------------------------------------

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_.-", min_size=1, max_size=20)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
bodies = st.binary(max_size=64)
tx_keys = st.sampled_from(["TX:s-1:1", "XID:1:aa:bb:q", "null", "TX:h-2-3:2147483647"])
qualifiers = st.none() | st.text(alphabet="abcXYZ0123456789-", min_size=1, max_size=8)

commands = st.one_of(
    st.builds(Put, names, int32, bodies, int32, int32, st.none() | int32, st.none() | tx_keys),
    st.builds(Get, names, names, int32, int64, int32, int32, st.none() | st.integers(0, 2**31 - 1)),
    st.builds(Offset, names, names, int32, int64, int32),
    st.builds(Version, int32),
    st.builds(Stats, st.just("") | names, int32),
    st.just(Quit()),
    st.builds(
        Transaction,
        tx_keys,
        names,
        st.sampled_from(["BEGIN", "END", "PREPARE", "COMMIT_ONE_PHASE", "ROLLBACK", "RECOVER"]),
        int32,
        st.integers(0, 2**31 - 1),
        qualifiers,
    ),
    st.builds(Sync, names, int32, bodies, int32, int64, int32, st.none() | int32),
    st.builds(Result, st.integers(100, 599), bodies, int32),
    st.builds(Data, bodies, int32),
)


@given(st.lists(commands, max_size=8))
def test_any_sequence_of_commands_round_trips(sequence):
    data = b"".join(encode(command) for command in sequence)
    assert decode_all(data) == sequence


@given(commands, st.integers(1, 7))
def test_any_command_round_trips_in_arbitrary_chunks(command, chunk_size):
    data = encode(command)
    decoder = Decoder()
    decoded = []
    for index in range(0, len(data), chunk_size):
        decoder.receive_data(data[index : index + chunk_size])
        while (item := decoder.next_command()) is not NEED_DATA:
            decoded.append(item)
    assert decoded == [command]


def drain_with_bounded_memory(decoder: Decoder, data: bytes, bound: int) -> None:
    for index in range(0, len(data), 512):
        decoder.receive_data(data[index : index + 512])
        while decoder.next_command() is not NEED_DATA:
            pass
        assert decoder.buffered_bytes <= bound


@settings(max_examples=300)
@given(st.binary(max_size=4096))
def test_random_bytes_raise_only_protocol_errors_with_bounded_memory(data):
    decoder = Decoder(header_bytes_max=256, body_bytes_max=1024)
    try:
        drain_with_bounded_memory(decoder, data, 256 + 1024 + 512 + 2)
    except LocalProtocolError:
        pass


@settings(max_examples=300)
@given(st.lists(commands, min_size=1, max_size=4), st.data())
def test_mutated_valid_commands_raise_only_protocol_errors(sequence, data):
    wire = bytearray(b"".join(encode(command) for command in sequence))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(wire) - 1))
        wire[position] = data.draw(st.integers(0, 255))
    decoder = Decoder(header_bytes_max=256, body_bytes_max=1024)
    try:
        drain_with_bounded_memory(decoder, bytes(wire), 256 + 1024 + 512 + 2)
    except LocalProtocolError:
        pass


# --- the broker's put runs ----------------------------------------------------------------


def _as_put(fields) -> Put:
    topic, partition, flag, checksum, opaque, body = fields
    return Put(topic.decode(), int(partition), bytes(body), flag, int(opaque), checksum, None)


def test_a_put_run_holds_exactly_what_next_command_returns():
    wire = b"".join(
        [
            encode(Put("t", 0, b"abc", 0, 1)),
            encode(Put("t.x-y_z", 12, b"", -5, -2, 123)),
            encode(Put("t", 3, b"x" * 100, 7, 0, -1)),
            encode(Put("t", 0, b"abc", 0, 4, 2**31 - 1)),
        ]
    )
    decoder = Decoder()
    decoder.receive_data(wire)
    key, run = decoder.next_put_run(100)
    assert key is None
    assert [_as_put(fields) for fields in run] == decode_all(wire)
    assert decoder.next_command() is NEED_DATA


@pytest.mark.parametrize(
    "wire",
    [
        b"put t 0 3 0 007\r\nabc",  # leading zero in the opaque
        b"put t 00 3 0 7\r\nabc",  # leading zero in the partition
        b"put t -1 3 0 7\r\nabc",  # the broker picks the partition
        b"put t 0 3 0 -0\r\nabc",
        b"put t 0 3 0 1234567890\r\nabc",  # ten-digit opaque
        b"put t 0 3 0 TX:1 7\r\nabc",  # a key that does not parse
        b"put t/x 0 3 0 7\r\nabc",  # not a legal topic name
        b"put t 0 3 0 +7\r\nabc",
        b"put t 0 3 0 7 \r\nabc",
        b"put  t 0 3 0 7\r\nabc",
        b"put t 0 3 0 1 2 3 7\r\nabc",
        b"put t 0 3 0 9999999999 7\r\nabc",  # checksum out of range: a protocol error
        b"pux t 0 3 0 7\r\nabc",
        b"get t g 0 0 100 7\r\n",
    ],
)
def test_a_put_run_leaves_every_other_form_to_next_command(wire):
    decoder = Decoder()
    decoder.receive_data(encode(Put("t", 0, b"first", 0, 1)) + wire)
    assert len(decoder.next_put_run(100)[1]) == 1
    assert decoder.next_put_run(100) == (None, [])
    try:
        expected = decode_all(wire)[0]
    except LocalProtocolError:
        with pytest.raises(LocalProtocolError):
            decoder.next_command()
    else:
        assert decoder.next_command() == expected


def _as_tx_put(key: str, fields) -> Put:
    return dataclasses.replace(_as_put(fields), tx_key=key)


def test_a_transaction_run_holds_exactly_what_next_command_returns():
    """One key per run (as ``next_command`` spells it in ``tx_key``); plain puts, another
    key or another spelling of the same transaction end it."""
    runs = [
        [Put("t", 0, b"abc", 0, 1, None, "TX:s:1"), Put("t", 2, b"", 3, 2, 99, "TX:s:1")],
        [Put("t", 0, b"x" * 70, 0, 3, -1, "XID:1:0a:0b:q1")],
        [Put("t", 0, b"y", 0, 4, None, "TX:s:01")],  # the same transaction, spelled otherwise
        [Put("t", 1, b"plain", 0, 5)],
        [Put("t", 1, b"z", 0, 6, None, "TX:s:1")],
    ]
    wire = b"".join(encode(put) for run in runs for put in run)
    decoder = Decoder()
    decoder.receive_data(wire)
    for expected in runs:
        key, run = decoder.next_put_run(100)
        assert key == expected[0].tx_key
        assert [_as_tx_put(key, fields) for fields in run] == expected
    assert decoder.next_put_run(100) == (None, [])
    assert decoder.next_command() is NEED_DATA


def test_a_put_run_stops_at_an_incomplete_or_oversized_put():
    whole = encode(Put("t", 0, b"abcdef", 0, 1))
    for cut in range(len(whole)):
        decoder = Decoder()
        decoder.receive_data(whole + whole[:cut])
        assert len(decoder.next_put_run(100)[1]) == 1
        assert decoder.next_put_run(100) == (None, [])
        assert decoder.next_command() is NEED_DATA
        decoder.receive_data(whole[cut:])
        # Taken by the run, or (a header parked by the general decoder) by next_command.
        rest = [_as_put(fields) for fields in decoder.next_put_run(100)[1]]
        rest += [command for command in iter(decoder.next_command, NEED_DATA)]
        assert rest == decode_all(whole), f"cut at {cut}"
    decoder = Decoder(body_bytes_max=5)
    decoder.receive_data(whole)
    assert decoder.next_put_run(100) == (None, [])
    assert isinstance(decoder.next_command(), BodyTooLarge)


def test_a_put_run_is_bounded_by_its_limit():
    decoder = Decoder()
    decoder.receive_data(encode(Put("t", 0, b"a", 0, 1)) * 5)
    assert len(decoder.next_put_run(3)[1]) == 3
    assert len(decoder.next_put_run(3)[1]) == 2


def test_a_result_run_holds_exactly_what_next_command_returns():
    frames = [Result(200, b"1 0 20", 1), Result(500, b"failed", -7), Result(200, b"", 2**31 - 1)]
    wire = b"".join(encode(frame) for frame in frames) + encode(Result(200, b"partial", 9))[:-2]
    decoder = Decoder()
    decoder.receive_data(wire)
    run = decoder.next_result_run(100)
    assert [Result(code, body, opaque) for code, opaque, body in run] == frames
    assert decoder.next_result_run(100) == []
    assert decoder.next_command() is NEED_DATA


@pytest.mark.parametrize(
    "wire",
    [
        b"result 200 1 9999999999\r\nx",  # opaque out of range: a protocol error
        b"result 200 1234567890 1\r\n",  # ten-digit length
        b"result +200 1 1\r\nx",
        b"value 1 1\r\nx",
        b"result 200 1 1 extra\r\nx",
    ],
)
def test_a_result_run_leaves_every_other_form_to_next_command(wire):
    decoder = Decoder()
    decoder.receive_data(encode(Result(200, b"ok", 1)) + wire)
    assert len(decoder.next_result_run(100)) == 1
    assert decoder.next_result_run(100) == []
    reference = Decoder()
    reference.receive_data(wire)
    try:
        expected = reference.next_command()
    except LocalProtocolError:
        with pytest.raises(LocalProtocolError):
            decoder.next_command()
    else:
        assert decoder.next_command() == expected


# --- large bodies: collected as the caller's chunks (BODY_PARTS_BYTES_MIN) -------------------

LARGE = bytes(range(256)) * ((BODY_PARTS_BYTES_MIN + 4099) // 256)
LARGE_FRAMES = [Data(LARGE, 7), Result(200, LARGE, 8), Put("t", 0, LARGE, 0, 9), Version(10)]


def feed_in_chunks(decoder: Decoder, data: bytes, cuts: list[int]) -> list:
    decoded = []
    bounds = [0, *sorted(set(cuts)), len(data)]
    for start, end in zip(bounds, bounds[1:], strict=False):
        decoder.receive_data(data[start:end])
        while (item := decoder.next_command()) is not NEED_DATA:
            decoded.append(item)
    return decoded


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 3 * len(LARGE) + 200), max_size=12))
def test_large_bodies_decode_identically_however_the_input_is_cut(cuts):
    data = b"".join(encode(frame) for frame in LARGE_FRAMES)
    assert feed_in_chunks(Decoder(), data, [cut for cut in cuts if cut < len(data)]) == (
        LARGE_FRAMES
    )


def test_a_large_body_decodes_when_fed_one_byte_at_a_time():
    data = encode(Data(LARGE, 1)) + encode(Version(2))
    decoder = Decoder()
    decoded = []
    for index in range(len(data)):
        decoder.receive_data(data[index : index + 1])
        while (item := decoder.next_command()) is not NEED_DATA:
            decoded.append(item)
        assert decoder.buffered_bytes <= index + 1
    assert decoded == [Data(LARGE, 1), Version(2)]
    assert decoder.buffered_bytes == 0


def test_a_large_body_keeps_no_reference_to_a_mutable_input_buffer():
    data = encode(Data(LARGE, 1))
    decoder = Decoder()
    half = len(data) // 2
    for start, end in ((0, 100), (100, half), (half, len(data))):
        chunk = bytearray(data[start:end])
        decoder.receive_data(memoryview(chunk) if start else chunk)
        chunk[:] = b"\xff" * len(chunk)  # the caller reuses its buffer
    assert decoder.next_command() == Data(LARGE, 1)


def test_a_pending_large_body_counts_as_buffered_and_the_next_frame_follows_it():
    wire = encode(Data(LARGE, 1)) + encode(Result(200, b"ok", 2))
    decoder = Decoder()
    decoder.receive_data(wire[:1000])
    assert decoder.next_command() is NEED_DATA
    assert decoder.buffered_bytes == 1000 - len(b"value %d 1\r\n" % len(LARGE))
    decoder.receive_data(wire[1000:-3])  # the body's end and most of the next frame
    assert decoder.next_command() == Data(LARGE, 1)
    assert decoder.next_command() is NEED_DATA
    assert decoder.buffered_bytes == len(encode(Result(200, b"ok", 2))) - 3
    decoder.receive_data(wire[-3:])
    assert decoder.next_command() == Result(200, b"ok", 2)
    assert decoder.buffered_bytes == 0


def test_a_large_body_over_the_limit_is_still_skipped_unbuffered():
    decoder = Decoder(body_bytes_max=BODY_PARTS_BYTES_MIN)
    wire = encode(Data(LARGE, 1)) + encode(Version(2))
    decoder.receive_data(wire[:5000])
    assert decoder.next_command() == BodyTooLarge("value", len(LARGE), 1)
    decoder.receive_data(wire[5000:])
    assert decoder.next_command() == Version(2)
    assert decoder.buffered_bytes == 0


# --- value bodies received in place (value_in_place, the slave's connections) ---------------


def receive_in_place(decoder: Decoder, data: bytes, sizes: list[int]) -> list:
    """Feed ``data`` as a socket reader does: into ``body_space()`` while there is one (at
    most the next size of ``sizes``, cycled), else through ``receive_data``."""
    decoded, position, turn = [], 0, 0
    while position < len(data):
        size = sizes[turn % len(sizes)]
        turn += 1
        space = decoder.body_space()
        if space is None:
            decoder.receive_data(data[position : position + size])
            position += min(size, len(data) - position)
        else:
            count = min(size, len(space), len(data) - position)
            space[:count] = data[position : position + count]
            space.release()
            decoder.body_received(count)
            position += count
        while (item := decoder.next_command()) is not NEED_DATA:
            decoded.append(item)
    return decoded


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 70_000), min_size=1, max_size=8))
def test_an_in_place_value_body_reassembles_byte_exactly_however_the_reads_are_cut(sizes):
    frames = [Data(LARGE, 1), Result(200, LARGE, 2), Data(LARGE[::-1], 3), Version(4)]
    decoded = receive_in_place(Decoder(value_in_place=True), b"".join(map(encode, frames)), sizes)
    assert decoded == frames
    assert [type(frame.data) for frame in decoded if isinstance(frame, Data)] == [bytearray] * 2
    assert type(decoded[1].body) is bytes  # only value bodies are received in place


def test_in_place_bodies_fed_as_chunks_decode_too_and_small_ones_stay_bytes():
    frames = [Data(LARGE, 1), Data(b"small", 2), Version(3)]
    decoded = feed_in_chunks(Decoder(value_in_place=True), b"".join(map(encode, frames)), [999])
    assert decoded == frames
    assert [type(frame.data) for frame in decoded[:2]] == [bytearray, bytes]


def test_an_in_place_block_is_reused_only_once_nothing_else_references_it():
    """A body still held (here, by a memoryview of it) is never overwritten: the next body
    gets a new block; once dropped, its block is reused for a body of the same length."""
    decoder = Decoder(value_in_place=True)
    other = bytes(reversed(LARGE))
    [first] = receive_in_place(decoder, encode(Data(LARGE, 1)), [4096])
    held = memoryview(first.data)
    block_id = id(first.data)
    del first
    [second] = receive_in_place(decoder, encode(Data(other, 2)), [4096])
    assert id(second.data) != block_id
    assert held == LARGE  # untouched
    second_id = id(second.data)
    del second
    [third] = receive_in_place(decoder, encode(Data(LARGE, 3)), [4096])
    assert id(third.data) == second_id and third.data == LARGE


@pytest.mark.parametrize(
    "header",
    [
        "transaction TX:s:1 s BEGIN 7",
        "transaction TX:s:01 s COMMIT_ONE_PHASE -7",
        "transaction XID:1:0a:0b:q1 s END 0",
        "transaction TX:s:1 s BEGIN 30 7",  # a timeout
        "transaction TX:s:1 s BEGIN 0030 7",  # leading zeros in the timeout
        "transaction TX:s:1 s BEGIN q 7",  # a unique qualifier
        "transaction TX:s:1 s BEGIN 30 q 7",
        "transaction TX:s:1 s BEGIN 07",  # leading zero in the opaque
        "transaction TX:s:1 s BEGIN 2147483647",
        "transaction TX:s:1 sé BEGIN 7",  # not ASCII
        "transaction TX:s:1  BEGIN 7",  # an empty token
        "transaction TX:1 s BEGIN 7",  # a key that does not parse
        "transaction TX:s:1 s NOPE 7",  # an unknown type
        "transaction TX:s:1 s BEGIN 2147483648",  # opaque out of range
    ],
)
def test_transaction_headers_decode_as_the_general_parser_decodes_them(header):
    """The decoder's fast path for ``transaction`` gives the general parser's command, or
    leaves the header to it (which then raises the same error)."""
    decoder = Decoder()
    decoder.receive_data(header.encode() + b"\r\n")
    try:
        expected = parse_header(split_header(header))[0]
    except LocalProtocolError:
        with pytest.raises(LocalProtocolError):
            decoder.next_command()
    else:
        assert decoder.next_command() == expected
        assert decoder.next_command() is NEED_DATA


@pytest.mark.parametrize(
    "result",
    [Result(200, b"4194316293 0 1024", 18), Result(404, b"", -7), Result(500, b"a\r\nb", 0)],
)
def test_decode_result_reads_back_an_encoded_result(result):
    assert decode_result(encode(result)) == result


def test_decode_result_takes_what_the_decoder_takes_beyond_the_fast_pattern():
    frame = b"result 200 2 +5\r\nok"  # a sign the fast pattern does not take
    assert decode_result(frame) == decode_all(frame)[0]


@pytest.mark.parametrize("frame", [b"result 200 5 1\r\nok", b"version 1\r\n", b""])
def test_decode_result_refuses_anything_but_one_whole_result(frame):
    with pytest.raises(LocalProtocolError):
        decode_result(frame)
