"""Tests of the local message file (``meta.client.local.message_file``), on ``tmp_path``."""

from __future__ import annotations

import logging

import pytest

from meta.client.cluster import Partition
from meta.client.local.message_file import FILE_HEADER, RecoverFile, encode_record
from meta.client.message import Message
from meta.errors import ClientError


def message(n: int, attribute: str | None = None) -> Message:
    return Message("t", f"m{n}".encode(), attribute, id=n, partition=Partition(1, 2), offset=n * 30)


def stored(recover_file: RecoverFile) -> list[tuple[int, bytes, str | None]]:
    return [(s.message.id, s.message.data, s.message.attribute) for s in recover_file.pending()]


def test_appended_messages_come_back_in_order_with_their_fields(tmp_path):
    recover_file = RecoverFile(tmp_path / "t@g", "t", 10)
    assert recover_file.append(message(1, "attr")) and recover_file.append(message(2))
    assert stored(recover_file) == [(1, b"m1", "attr"), (2, b"m2", None)]
    first = next(recover_file.pending()).message
    assert (first.topic, first.partition, first.offset) == ("t", Partition(1, 2), 30)


def test_messages_survive_a_reopen(tmp_path):
    RecoverFile(tmp_path / "t@g", "t", 10).append(message(1))
    again = RecoverFile(tmp_path / "t@g", "t", 10)
    assert len(again) == 1 and stored(again) == [(1, b"m1", None)]


def test_remove_drops_only_the_given_records_and_keeps_appending(tmp_path):
    recover_file = RecoverFile(tmp_path / "t@g", "t", 10)
    for n in range(4):
        recover_file.append(message(n))
    positions = [s.position for s in recover_file.pending()]
    recover_file.remove([positions[0], positions[2]])
    assert [m for m, _d, _a in stored(recover_file)] == [1, 3]
    recover_file.append(message(9))
    assert [m for m, _d, _a in stored(RecoverFile(tmp_path / "t@g", "t", 10))] == [1, 3, 9]
    assert not (tmp_path / "t@g.tmp").exists()


def test_a_torn_tail_is_truncated_on_open_and_logged(tmp_path, caplog):
    path = tmp_path / "t@g"
    RecoverFile(path, "t", 10).append(message(1))
    whole = path.stat().st_size
    with open(path, "ab") as handle:
        handle.write(encode_record(message(2))[:-3])
    with caplog.at_level(logging.WARNING, logger="meta.client"):
        recover_file = RecoverFile(path, "t", 10)
    assert stored(recover_file) == [(1, b"m1", None)]
    assert path.stat().st_size == whole
    assert "cut" in caplog.text


def test_a_corrupt_record_ends_the_valid_region(tmp_path):
    path = tmp_path / "t@g"
    recover_file = RecoverFile(path, "t", 10)
    for n in range(3):
        recover_file.append(message(n))
    second = [s.position for s in recover_file.pending()][1]
    with open(path, "r+b") as handle:
        handle.seek(second + 30)
        byte = handle.read(1)
        handle.seek(second + 30)
        handle.write(bytes([byte[0] ^ 0xFF]))
    reopened = RecoverFile(path, "t", 10)
    assert [m for m, _d, _a in stored(reopened)] == [0]
    assert path.stat().st_size == second


def test_a_foreign_file_is_refused_rather_than_truncated(tmp_path):
    path = tmp_path / "t@g"
    path.write_bytes(b"not a recover file at all")
    with pytest.raises(ClientError):
        RecoverFile(path, "t", 10)
    assert path.read_bytes() == b"not a recover file at all"


def test_a_torn_header_is_rewritten(tmp_path):
    path = tmp_path / "t@g"
    path.write_bytes(b"MQ")
    recover_file = RecoverFile(path, "t", 10)
    assert recover_file.append(message(1))
    assert path.stat().st_size > FILE_HEADER.size


def test_compaction_is_atomic_a_leftover_tmp_does_not_matter(tmp_path):
    """A crash before the rename leaves the old file whole and a stale ``.tmp`` beside it."""
    path = tmp_path / "t@g"
    recover_file = RecoverFile(path, "t", 10)
    recover_file.append(message(1))
    (tmp_path / "t@g.tmp").write_bytes(b"half-written garbage")
    assert stored(RecoverFile(path, "t", 10)) == [(1, b"m1", None)]
    recover_file.remove([next(recover_file.pending()).position])
    assert stored(RecoverFile(path, "t", 10)) == []


def test_a_full_file_drops_new_rejects_with_an_error_log(tmp_path, caplog):
    recover_file = RecoverFile(tmp_path / "t@g", "t", 2)
    assert recover_file.append(message(1)) and recover_file.append(message(2))
    with caplog.at_level(logging.ERROR, logger="meta.client"):
        assert recover_file.append(message(3)) is False
    assert "DROPPED" in caplog.text and "message 3" in caplog.text
    assert len(recover_file) == 2
