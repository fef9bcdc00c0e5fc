"""Tests of ``meta.bench.slave_floor``, the durable write floor of the slave bench."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from meta.bench import slave_floor


def test_floor_receives_every_byte_makes_it_durable_and_removes_its_file(tmp_path):
    """Goal: the receiver process writes exactly what was sent, fdatasyncs it, reports its
    own CPU and leaves nothing behind. Method: a size that is not a whole number of reads."""
    size = 3 * slave_floor.CHUNK_BYTES + 12345
    result = slave_floor.measure_floor(tmp_path / "data", size)
    assert result["bytes"] == size
    assert result["fdatasyncs"] >= 1
    assert result["seconds"] > 0
    assert result["user_s"] >= 0 and result["system_s"] >= 0
    assert list((tmp_path / "data").iterdir()) == []


@pytest.fixture
def fd(tmp_path) -> Iterator[int]:
    """A new file open for writing, the receiver's file; closed after the test."""
    fd = os.open(tmp_path / "file", os.O_CREAT | os.O_WRONLY)
    yield fd
    os.close(fd)


def requested_after_each(
    receiver: slave_floor.Receiver, writes: list[tuple[int, bool]]
) -> list[int]:
    """``receiver.requested`` after each of ``writes`` (``(bytes written so far, last)``)."""
    requested = []
    for written, last in writes:
        receiver.wrote(written, last=last)
        requested.append(receiver.requested)
    return requested


def test_group_commit_asks_for_a_flush_after_every_write(fd):
    receiver = slave_floor.Receiver(fd, flush_bytes=0)
    assert requested_after_each(receiver, [(10, False), (11, False)]) == [10, 11]


def test_a_flush_threshold_asks_once_that_many_bytes_are_unflushed_and_at_the_end(fd):
    receiver = slave_floor.Receiver(fd, flush_bytes=100)
    writes = [(60, False), (100, False), (150, True)]
    assert requested_after_each(receiver, writes) == [0, 100, 150]
    assert receiver.done


def test_flusher_makes_every_requested_byte_durable_then_returns(fd):
    """Goal: the flusher's loop ends once the last request is durable. Method: requests
    made before the loop runs, on this thread, with a deadline far ahead."""
    receiver = slave_floor.Receiver(fd, flush_bytes=0)
    receiver.wrote(5, last=False)
    receiver.wrote(9, last=True)
    receiver.flush_loop(deadline=float("inf"))
    assert (receiver.durable, receiver.fdatasyncs, receiver.error) == (9, 1, None)
