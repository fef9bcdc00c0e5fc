"""The Java client's and Java broker's own bytes, from the spec's wire trace, as golden data."""

from meta.protocol.codec import NEED_DATA, Decoder, decode_all, encode
from meta.protocol.commands import Data, Get, Put, Result
from meta.protocol.message import HEADER_SIZE, checksum, decode_payload, iter_messages
from tests.protocol.java_trace import load_trace

FRAMES = load_trace()
COMPLETE = [frame for frame in FRAMES if not frame.truncated]


def test_trace_has_puts_gets_and_replies():
    kinds = {type(command) for frame in COMPLETE for command in decode_all(frame.data)}
    assert {Put, Get, Result} <= kinds


def test_every_complete_frame_decodes_to_one_command_and_reencodes_byte_for_byte():
    for frame in COMPLETE:
        (command,) = decode_all(frame.data)
        assert encode(command) == frame.data


def test_java_client_checksums_match_ours():
    puts = [c for f in COMPLETE for c in decode_all(f.data) if isinstance(c, Put)]
    assert len(puts) == 10
    for put in puts:
        assert put.checksum == checksum(put.data)


def test_put_replies_advance_by_twenty_plus_payload_length():
    puts = [c for f in COMPLETE if f.direction == ">" for c in decode_all(f.data)]
    puts = [p for p in puts if isinstance(p, Put)]
    results = [c for f in COMPLETE if f.direction == "<" for c in decode_all(f.data)]
    put_offsets = [int(r.body.split(b" ")[2]) for r in results if r.code == 200]
    assert len(put_offsets) == len(puts)
    for put, offset, next_offset in zip(puts, put_offsets, put_offsets[1:], strict=False):
        assert next_offset == offset + HEADER_SIZE + len(put.data)


def test_value_frame_header_and_records_decode_from_truncated_capture():
    frame = next(f for f in FRAMES if f.data.startswith(b"value"))
    decoder = Decoder()
    decoder.receive_data(frame.data)
    assert decoder.next_command() is NEED_DATA  # the capture is cut before the body ends
    body = frame.data[frame.data.index(b"\r\n") + 2 :]
    records = list(iter_messages(body))
    assert [decode_payload(r.flag, r.payload) for r in records[:2]] == [
        ("attr-0", b"hello-0"),
        (None, b"hello-1"),
    ]
    assert all(r.msg_id < 0 for r in records)  # Java ids use a monotonic clock (spec §3.5)


def test_value_frame_roundtrips_when_complete():
    frame = next(f for f in FRAMES if f.data.startswith(b"value"))
    body = frame.data[frame.data.index(b"\r\n") + 2 :]
    assert decode_all(encode(Data(body, -5))) == [Data(body, -5)]


def test_404_text_matches_java_broker():
    frame = next(f for f in COMPLETE if f.data.startswith(b"result 404"))
    (result,) = decode_all(frame.data)
    assert result.body == b"Could not find message at position 665"
