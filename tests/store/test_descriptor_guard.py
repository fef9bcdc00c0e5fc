"""The descriptor guard (``tests.descriptors``) the in-process tests run under
(``tests.conftest.GUARDED_DIRECTORIES``): it names what a test leaves open, and only that."""

from __future__ import annotations

import os

import pytest

from tests.conftest import GUARDED_DIRECTORIES, TESTS_DIR, UNGUARDED_DIRECTORIES
from tests.descriptors import Closers, guard_descriptors, leaked, open_descriptors


def test_every_test_directory_is_guarded_or_said_not_to_be():
    """A new directory of tests runs under the guard unless the conftest says why not."""
    with_tests = {path.parent for path in TESTS_DIR.glob("*/test_*.py")}
    assert with_tests <= set(GUARDED_DIRECTORIES) | set(UNGUARDED_DIRECTORIES)
    assert not set(GUARDED_DIRECTORIES) & set(UNGUARDED_DIRECTORIES)


def test_the_guard_names_a_file_the_test_left_open(tmp_path):
    """Goal: a descriptor opened during the test and still open after it fails the test,
    with its path. Method: the guard's fixture body driven by hand around an ``os.open``."""
    path = tmp_path / "left.meta"
    guard = guard_descriptors()
    next(guard)
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        with pytest.raises(AssertionError, match="left.meta"):
            next(guard)
    finally:
        os.close(fd)


def test_the_guard_passes_a_test_that_closed_what_it_opened(tmp_path):
    guard = guard_descriptors()
    next(guard)
    os.close(os.open(tmp_path / "closed.meta", os.O_RDWR | os.O_CREAT))
    with pytest.raises(StopIteration):
        next(guard)


def test_a_descriptor_number_reused_for_another_file_is_a_leak(tmp_path):
    """Goal: the guard compares targets, not only numbers. Method: readings whose only
    difference is the file one number names."""
    before = {7: str(tmp_path / "a.meta")}
    assert leaked(before, {7: str(tmp_path / "b.meta")}) == {7: str(tmp_path / "b.meta")}
    assert leaked(before, dict(before)) == {}


def test_the_closers_run_last_first_and_all_run_when_one_fails():
    closers = Closers()
    ran: list[str] = []

    def failing() -> None:
        ran.append("failing")
        raise OSError("close failed")

    closers.add(lambda: ran.append("first"))
    closers.add(failing)
    closers.add(lambda: ran.append("last"))
    with pytest.raises(OSError, match="close failed"):
        closers.close_all()
    assert ran == ["last", "failing", "first"]
    closers.close_all()  # emptied: nothing runs twice
    assert ran == ["last", "failing", "first"]


def test_the_reading_holds_every_open_descriptor_with_its_target(tmp_path):
    path = tmp_path / "seen.meta"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        assert open_descriptors()[fd] == str(path)
    finally:
        os.close(fd)
