"""Tests of ``meta.bench.slave_floor``, the durable write floor of the slave bench."""

from __future__ import annotations

import os

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


def test_group_commit_asks_for_a_flush_after_every_write(tmp_path):
    fd = os.open(tmp_path / "file", os.O_CREAT | os.O_WRONLY)
    try:
        receiver = slave_floor.Receiver(fd, flush_bytes=0)
        receiver.wrote(10, last=False)
        assert receiver.requested == 10
        receiver.wrote(11, last=False)
        assert receiver.requested == 11
    finally:
        os.close(fd)


def test_a_flush_threshold_asks_once_that_many_bytes_are_unflushed_and_at_the_end(tmp_path):
    fd = os.open(tmp_path / "file", os.O_CREAT | os.O_WRONLY)
    try:
        receiver = slave_floor.Receiver(fd, flush_bytes=100)
        receiver.wrote(60, last=False)
        assert receiver.requested == 0
        receiver.wrote(100, last=False)
        assert receiver.requested == 100
        receiver.wrote(150, last=True)
        assert (receiver.requested, receiver.done) == (150, True)
    finally:
        os.close(fd)


def test_flusher_makes_every_requested_byte_durable_then_returns(tmp_path):
    """Goal: the flusher's loop ends once the last request is durable. Method: requests
    made before the loop runs, on this thread, with a deadline far ahead."""
    fd = os.open(tmp_path / "file", os.O_CREAT | os.O_WRONLY)
    try:
        receiver = slave_floor.Receiver(fd, flush_bytes=0)
        receiver.wrote(5, last=False)
        receiver.wrote(9, last=True)
        receiver.flush_loop(deadline=float("inf"))
        assert (receiver.durable, receiver.fdatasyncs, receiver.error) == (9, 1, None)
    finally:
        os.close(fd)
