"""Blocks allocated ahead of a segment's writes: the size stays the data's, the unused blocks
are freed when the segment stops being written, and a file system without ``fallocate``
writes without them."""

from __future__ import annotations

import errno
import os

import pytest

from meta.store import files as files_module
from meta.store.files import Files
from meta.store.segment import PREALLOCATE_BYTES, Segment
from tests.descriptors import closers
from tests.store.conftest import open_partition, record

BLOCK_BYTES = 4096


class AllocationFiles(Files):
    """The OS file layer, recording each ``allocate`` (position, length, answer) and each
    ``trim_allocation`` (size)."""

    def __init__(self) -> None:
        self.allocations: list[tuple[int, int, bool]] = []
        self.trims: list[int] = []

    def allocate(self, fd: int, position: int, length: int) -> bool:
        allocated = super().allocate(fd, position, length)
        self.allocations.append((position, length, allocated))
        return allocated

    def trim_allocation(self, fd: int, size: int) -> None:
        self.trims.append(size)
        super().trim_allocation(fd, size)


POSITION_MAX_BYTES = 64 * 1024 * 1024
"""Where the segments of these tests stop allocating ahead: far past their appends."""


def open_segment(path, files: Files, position_max: int) -> Segment:
    """A new segment at ``path`` allocating ahead up to ``position_max`` (0: not at all,
    the default), closed after the test."""
    segment = Segment.open(files, str(path), 0, create=True)
    segment.preallocate_position_max = position_max
    closers.add(segment.close)
    return segment


@pytest.fixture
def files() -> AllocationFiles:
    """This module's file layer: the OS's, recording allocations and trims."""
    return AllocationFiles()


@pytest.fixture
def segment(tmp_path, files: AllocationFiles) -> Segment:
    """A new segment ``s.meta`` on ``files`` allocating ahead up to ``POSITION_MAX_BYTES``."""
    return open_segment(tmp_path / "s.meta", files, POSITION_MAX_BYTES)


def allocated_bytes(path) -> int:
    return os.stat(path).st_blocks * 512


def rounded_to_blocks(size: int) -> int:
    return -(-size // BLOCK_BYTES) * BLOCK_BYTES


def append_all_records(log, records) -> None:
    for data in records:
        log.append(data)
    log.commit()


def require_allocation(files: AllocationFiles) -> None:
    if not files.allocations or not files.allocations[0][2]:
        pytest.skip("the temporary directory's file system has no fallocate")


def test_an_append_allocates_blocks_ahead_and_keeps_the_size_of_the_data(segment, files):
    data = record(b"x" * 1000)
    segment.append(data)
    require_allocation(files)
    assert files.allocations == [(0, len(data) + PREALLOCATE_BYTES, True)]
    assert os.path.getsize(segment.path) == len(data)
    assert allocated_bytes(segment.path) >= PREALLOCATE_BYTES


def test_appends_inside_the_allocated_blocks_allocate_nothing_more(segment, files):
    for _ in range(10):
        segment.append(record(b"x" * 1000))
    assert len(files.allocations) == 1


def test_the_next_allocation_starts_where_the_last_one_ended(segment, files):
    first = record(b"x" * 1000)
    big = record(b"y" * PREALLOCATE_BYTES)
    segment.append(first)
    segment.append(big)
    end = len(first) + len(big)
    allocated = len(first) + PREALLOCATE_BYTES
    assert files.allocations[1][:2] == (allocated, end + PREALLOCATE_BYTES - allocated)


def test_allocation_stops_at_the_position_max(tmp_path, files):
    segment = open_segment(tmp_path / "s.meta", files, 5000)
    segment.append(record(b"x" * 1000))
    segment.append(record(b"x" * 5000))  # crosses the maximum: nothing more to allocate
    assert [allocation[:2] for allocation in files.allocations] == [(0, 5000)]


def test_a_segment_allocates_nothing_by_default(tmp_path, files):
    segment = Segment.open(files, str(tmp_path / "s.meta"), 0, create=True)
    closers.add(segment.close)
    segment.append(record(b"x" * 1000))
    assert files.allocations == []


def test_release_frees_the_unused_blocks_past_the_end(segment, files):
    data = record(b"x" * 10000)
    segment.append(data)
    require_allocation(files)
    segment.release_preallocation()
    assert files.trims == [len(data)]
    assert os.path.getsize(segment.path) == len(data)
    assert allocated_bytes(segment.path) <= rounded_to_blocks(len(data))
    segment.append(data)  # released: later appends allocate nothing
    assert len(files.allocations) == 1


def test_release_without_unused_blocks_leaves_the_file_alone(tmp_path, files):
    """Goal: a segment this process allocated nothing for (one only read, or one loaded and
    never written) is not truncated, so its modification time, which retention reads, stays."""
    segment = open_segment(tmp_path / "s.meta", files, 0)
    segment.append(record(b"x" * 100))
    segment.release_preallocation()
    assert files.trims == []


def test_a_file_system_without_fallocate_writes_without_it(tmp_path, files, monkeypatch):
    """Goal: where ``fallocate`` answers EOPNOTSUPP, appends write as before and the segment
    asks once only. Method: the C function is replaced by one that fails."""

    def unsupported(fd: int, mode: int, offset: object, length: object) -> int:
        return -1

    monkeypatch.setattr(files_module, "_fallocate", unsupported)
    monkeypatch.setattr(files_module.ctypes, "get_errno", lambda: errno.EOPNOTSUPP)
    segment = open_segment(tmp_path / "s.meta", files, POSITION_MAX_BYTES)
    data = record(b"x" * 1000)
    segment.append(data)
    segment.append(data)
    segment.release_preallocation()
    assert files.allocations == [(0, len(data) + PREALLOCATE_BYTES, False)]
    assert files.trims == []
    assert segment.read(0, 2 * len(data)) == data + data


def test_a_c_library_without_fallocate_writes_without_it(tmp_path, files, monkeypatch):
    monkeypatch.setattr(files_module, "_fallocate", None)
    segment = open_segment(tmp_path / "s.meta", files, POSITION_MAX_BYTES)
    data = record(b"x" * 1000)
    segment.append(data)
    assert files.allocations == [(0, len(data) + PREALLOCATE_BYTES, False)]
    assert segment.read(0, len(data)) == data


def test_a_cut_frees_the_allocated_blocks_with_the_tail(segment, files):
    data = record(b"x" * 1000)
    segment.append(data)
    segment.append(data)
    require_allocation(files)
    segment.cut(len(data))
    segment.release_preallocation()
    assert files.trims == []  # the truncation of the cut freed them already
    assert allocated_bytes(segment.path) <= rounded_to_blocks(len(data))


def test_a_roll_frees_the_unused_blocks_of_the_full_segment(tmp_path, files):
    """Goal: once a partition rolls, the segment it left holds no block past its end, and
    every segment's size is its data. Method: a 1 MiB roll size, appends past it."""
    log = open_partition(str(tmp_path / "test-0"), files=files, segment_bytes_max=1024 * 1024)
    append_all_records(log, [record(b"x" * 100_000) for _ in range(12)])
    require_allocation(files)
    first, second = log.segments
    assert first.written_size > 1024 * 1024
    assert os.path.getsize(first.path) == first.written_size
    assert allocated_bytes(first.path) <= rounded_to_blocks(first.written_size)
    assert os.path.getsize(second.path) == second.written_size
    assert allocated_bytes(second.path) > rounded_to_blocks(second.written_size)
    assert all(position + length <= 1024 * 1024 for position, length, _ in files.allocations)


def test_closing_the_partition_frees_the_unused_blocks_of_its_last_segment(tmp_path, files):
    log = open_partition(str(tmp_path / "test-0"), files=files, segment_bytes_max=1 << 30)
    append_all_records(log, [record(b"x" * 1000) for _ in range(3)])
    require_allocation(files)
    path = log.segments[-1].path
    log.close()
    assert os.path.getsize(path) == 3 * len(record(b"x" * 1000))
    assert allocated_bytes(path) <= rounded_to_blocks(os.path.getsize(path))
