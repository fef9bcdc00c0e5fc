"""Checkpoint files (docs/formats.md section 6.2): bytes, atomic writing, choice on read."""

from __future__ import annotations

import os
import zlib

import pytest

from meta.tx.checkpoint import (
    checkpoint_numbers,
    decode_checkpoint,
    encode_checkpoint,
    read_latest,
    write_checkpoint,
)
from meta.tx.journal_location import JournalLocation
from tests.store.conftest import EIO

DOC_EXAMPLE = b"1\n3 1234\n1796572722\n"


@pytest.fixture
def directory(tmp_path):
    path = tmp_path / "transactions"
    path.mkdir()
    return str(path)


def test_encode_gives_the_documented_example():
    assert encode_checkpoint(JournalLocation(3, 1234)) == DOC_EXAMPLE


def test_decode_reads_the_documented_example():
    assert decode_checkpoint(DOC_EXAMPLE) == JournalLocation(3, 1234)


def test_decode_refuses_a_bad_crc():
    with pytest.raises(ValueError, match="CRC"):
        decode_checkpoint(b"1\n3 1235\n1796572722\n")


def test_decode_refuses_another_version_even_with_a_good_crc():
    data = encode_checkpoint(JournalLocation(3, 1234)).replace(b"1\n", b"2\n", 1)
    lines = data.split(b"\n")
    body = lines[0] + b"\n" + lines[1] + b"\n"
    with pytest.raises(ValueError, match="version"):
        decode_checkpoint(body + b"%d\n" % zlib.crc32(body))


def test_decode_refuses_a_missing_final_newline():
    with pytest.raises(ValueError):
        decode_checkpoint(DOC_EXAMPLE[:-1])


def test_decode_refuses_java_json():
    with pytest.raises(ValueError):
        decode_checkpoint(b'{"number":3,"offset":1234}')


def test_a_checkpoint_is_written_to_tmp_fsynced_renamed_then_the_directory_fsynced(
    directory, files
):
    write_checkpoint(files, directory, 1, JournalLocation(3, 1234), keep=3)
    significant = [event for event in files.events if event[0] != "truncate"]
    assert significant == [
        ("write", "transactions/checkpoint.1.tmp"),
        ("fsync", "transactions/checkpoint.1.tmp"),
        ("rename", "transactions/checkpoint.1"),
        ("fsync_directory", "transactions"),
    ]


def test_a_written_checkpoint_holds_the_encoded_location(directory, files):
    write_checkpoint(files, directory, 4, JournalLocation(3, 1234), keep=3)
    with open(os.path.join(directory, "checkpoint.4"), "rb") as file:
        assert file.read() == DOC_EXAMPLE


def test_no_temporary_file_is_left_after_a_write(directory, files):
    write_checkpoint(files, directory, 1, JournalLocation(1, 8), keep=3)
    assert sorted(os.listdir(directory)) == ["checkpoint.1"]


def test_only_the_newest_max_checkpoints_are_kept(directory, files):
    for number in range(1, 6):
        write_checkpoint(files, directory, number, JournalLocation(1, 8 * number), keep=3)
    assert checkpoint_numbers(files, directory) == [3, 4, 5]


def test_old_checkpoints_are_removed_only_after_the_new_one_is_in_place(directory, files):
    write_checkpoint(files, directory, 1, JournalLocation(1, 8), keep=1)
    files.events.clear()
    write_checkpoint(files, directory, 2, JournalLocation(1, 16), keep=1)
    kinds = [kind for kind, _ in files.events]
    assert kinds.index("remove") > kinds.index("fsync_directory")


def test_a_failed_fsync_leaves_the_previous_checkpoints_untouched(directory, files):
    write_checkpoint(files, directory, 1, JournalLocation(1, 8), keep=1)
    files.fsync_error = EIO
    with pytest.raises(OSError):
        write_checkpoint(files, directory, 2, JournalLocation(1, 16), keep=1)
    assert read_latest(files, directory) == (1, JournalLocation(1, 8))


def test_read_latest_returns_the_newest_checkpoint(directory, files):
    write_checkpoint(files, directory, 1, JournalLocation(1, 8), keep=3)
    write_checkpoint(files, directory, 2, JournalLocation(2, 30), keep=3)
    assert read_latest(files, directory) == (2, JournalLocation(2, 30))


def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one(directory, files):
    write_checkpoint(files, directory, 1, JournalLocation(1, 8), keep=3)
    write_checkpoint(files, directory, 2, JournalLocation(2, 30), keep=3)
    with open(os.path.join(directory, "checkpoint.2"), "r+b") as file:
        file.write(b"1\n2 31")
    assert read_latest(files, directory) == (2, JournalLocation(1, 8))


def test_an_empty_newest_checkpoint_falls_back_to_the_previous_one(directory, files):
    write_checkpoint(files, directory, 1, JournalLocation(1, 8), keep=3)
    open(os.path.join(directory, "checkpoint.2"), "wb").close()
    assert read_latest(files, directory) == (2, JournalLocation(1, 8))


def test_a_damaged_checkpoint_is_logged(directory, files, caplog):
    open(os.path.join(directory, "checkpoint.2"), "wb").close()
    read_latest(files, directory)
    assert "checkpoint.2" in caplog.text


def test_no_checkpoint_reads_as_none(directory, files):
    assert read_latest(files, directory) == (0, None)


def test_only_damaged_checkpoints_read_as_none_with_the_highest_number(directory, files):
    for number in (3, 7):
        with open(os.path.join(directory, f"checkpoint.{number}"), "wb") as file:
            file.write(b"garbage\n")
    assert read_latest(files, directory) == (7, None)


def test_a_leftover_temporary_file_is_not_a_checkpoint(directory, files):
    with open(os.path.join(directory, "checkpoint.9.tmp"), "wb") as file:
        file.write(encode_checkpoint(JournalLocation(5, 8)))
    assert read_latest(files, directory) == (0, None)
