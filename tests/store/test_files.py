"""``Files.fsync``: an ``fdatasync`` is trusted only when the file system can still write after it.

The race it guards against (an ext4 journal aborted while an ``fdatasync`` waits for it) is
driven with real processes in ``tests/integration/test_disk_faults.py``; here the check's
answers are forced through ``fallocate``, the call it makes.
"""

from __future__ import annotations

import ctypes
import errno
import os

import pytest

from meta.store import files as files_module
from meta.store.files import Files, confirm_journal


def failing_fallocate(code: int):
    def fallocate(fd: int, mode: int, offset: int, length: int) -> int:
        ctypes.set_errno(code)
        return -1

    return fallocate


@pytest.fixture
def segment(tmp_path):
    fd = os.open(tmp_path / "00000000000000000000.meta", os.O_RDWR | os.O_CREAT, 0o644)
    os.pwrite(fd, b"record bytes", 0)
    yield fd
    os.close(fd)


def test_a_file_system_that_cannot_write_after_the_fdatasync_fails_the_fsync(segment, monkeypatch):
    monkeypatch.setattr(files_module, "_fallocate", failing_fallocate(errno.EROFS))
    with pytest.raises(OSError) as raised:
        Files().fsync(segment)
    assert raised.value.errno == errno.EROFS
    assert "failed after an fsync" in str(raised.value)


@pytest.mark.parametrize("code", [errno.EOPNOTSUPP, errno.ENOSYS, errno.EBADF, errno.ENOSPC])
def test_where_the_check_cannot_be_made_the_fdatasync_stands(segment, monkeypatch, code):
    monkeypatch.setattr(files_module, "_fallocate", failing_fallocate(code))
    Files().fsync(segment)


def test_the_check_changes_neither_the_size_nor_the_bytes(segment):
    confirm_journal(segment)
    assert os.fstat(segment).st_size == len(b"record bytes")
    assert os.pread(segment, 100, 0) == b"record bytes"


def test_a_descriptor_open_for_reading_is_fsynced_without_the_check(tmp_path, segment):
    reader = os.open(tmp_path / "00000000000000000000.meta", os.O_RDONLY)
    try:
        Files().fsync(reader)
    finally:
        os.close(reader)


@pytest.mark.skipif(files_module._fallocate is None, reason="no fallocate in this C library")
def test_the_check_calls_fallocate_over_the_first_byte_keeping_the_size(segment):
    """Goal: the arguments reach ``fallocate(2)`` as (int, int, off_t, off_t): a range it
    refuses (EINVAL) would make the check pass without checking anything."""
    blocks = os.fstat(segment).st_blocks
    calls = []

    def recording(fd, mode, offset, length):
        calls.append((mode, getattr(offset, "value", offset), getattr(length, "value", length)))
        return real(fd, mode, offset, length)

    real = files_module._fallocate
    assert (
        real(segment, files_module.FALLOC_FL_KEEP_SIZE, ctypes.c_longlong(0), ctypes.c_longlong(1))
        == 0
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(files_module, "_fallocate", recording)
        confirm_journal(segment)
    assert calls == [(files_module.FALLOC_FL_KEEP_SIZE, 0, 1)]
    assert os.fstat(segment).st_blocks == blocks
    # A length of 0 is EINVAL: what a garbled argument would give.
    assert (
        real(segment, files_module.FALLOC_FL_KEEP_SIZE, ctypes.c_longlong(0), ctypes.c_longlong(0))
        == -1
    )
