"""The ``sync`` frame a samsa master sends: golden bytes from the sync spec §1.3, the status
probe of §1.7, and agreement with the generic encoder and the decoder."""

from __future__ import annotations

from meta.protocol.codec import Decoder
from meta.protocol.commands import Sync
from meta.protocol.message import checksum
from meta.protocol.sync_frame import (
    STATUS_TEST_BODY,
    STATUS_TEST_CHECKSUM,
    encode_status_probe,
    encode_sync,
    partition_sync_format,
)


def test_sync_matches_the_spec_example_byte_for_byte():
    frame = encode_sync(b"test", 0, 0, 2061191510652616704, 907060870, 7, b"hello")
    assert frame == b"sync test 0 5 0 2061191510652616704 907060870 7\r\nhello"


def test_a_negative_java_id_and_no_checksum_are_written_as_decimals():
    frame = encode_sync(b"t.x", 3, 1, -4611686018427387904, -1, 2147483647, b"")
    assert frame == b"sync t.x 3 0 1 -4611686018427387904 -1 2147483647\r\n"


def test_the_status_probe_is_javas():
    assert encode_status_probe(42, 9) == (
        b"sync _metaq_slave_status_test 0 4 0 42 1484750348 9\r\ntest"
    )
    assert checksum(STATUS_TEST_BODY) == STATUS_TEST_CHECKSUM


def test_the_decoder_reads_back_every_field_byte_by_byte():
    frame = encode_sync(b"test", 2, 1, 123456789, 907060870, 11, b"hello")
    decoder = Decoder()
    commands = []
    for byte in frame:
        decoder.receive_data(bytes([byte]))
        command = decoder.next_command()
        if isinstance(command, Sync):
            commands.append(command)
    assert commands == [Sync("test", 2, b"hello", 1, 123456789, 11, 907060870)]


def test_a_partitions_sync_format_gives_encode_syncs_header():
    head = partition_sync_format(b"t.x", 3) % (5, 1, -4611686018427387904, -1, 2147483647)
    assert head + b"hello" == encode_sync(
        b"t.x", 3, 1, -4611686018427387904, -1, 2147483647, b"hello"
    )
    assert head == b"sync t.x 3 5 1 -4611686018427387904 -1 2147483647\r\n"
