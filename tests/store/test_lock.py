"""``DataPathLock``: one broker per data directory (flock on ``<root>/.lock``)."""

from __future__ import annotations

import os

import pytest

from meta.errors import StoreError
from meta.store.lock import LOCK_NAME, DataPathLock


def test_a_second_lock_on_a_root_is_refused_naming_the_directory_and_the_pid(tmp_path):
    first, second = DataPathLock(), DataPathLock()
    first.acquire([tmp_path / "data"])
    assert (tmp_path / "data" / LOCK_NAME).read_text() == f"{os.getpid()}\n"
    with pytest.raises(StoreError) as refused:
        second.acquire([tmp_path / "data"])
    assert str(tmp_path / "data") in str(refused.value)
    assert f"pid {os.getpid()}" in str(refused.value)
    first.release()
    second.acquire([tmp_path / "data"])  # free again once released
    second.release()


def test_a_refusal_releases_the_roots_already_taken(tmp_path):
    holder = DataPathLock()
    holder.acquire([tmp_path / "b"])
    attempt = DataPathLock()
    with pytest.raises(StoreError):
        attempt.acquire([tmp_path / "a", tmp_path / "b"])
    assert attempt.roots == []
    other = DataPathLock()
    other.acquire([tmp_path / "a"])  # "a" was not left locked by the failed attempt
    other.release()
    holder.release()


def test_the_same_root_named_twice_is_locked_once(tmp_path):
    lock = DataPathLock()
    lock.acquire([tmp_path / "d", f"{tmp_path}/d/", tmp_path / "d" / "."])
    assert lock.roots == [os.path.normpath(tmp_path / "d")]
    lock.release()
    lock.release()  # idempotent


def test_a_root_that_cannot_be_created_is_named(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StoreError, match="cannot lock data directory .*file/data"):
        DataPathLock().acquire([tmp_path / "file" / "data"])


def test_a_refusal_keeps_the_roots_held_before_it(tmp_path):
    """A reload locks new topic roots with a second ``acquire``: its refusal must not
    unlock the roots the broker already runs on."""
    holder = DataPathLock()
    holder.acquire([tmp_path / "taken"])
    lock = DataPathLock()
    lock.acquire([tmp_path / "running"])
    with pytest.raises(StoreError):
        lock.acquire([tmp_path / "new", tmp_path / "taken"])
    assert lock.roots == [os.path.normpath(tmp_path / "running")]
    with pytest.raises(StoreError):
        DataPathLock().acquire([tmp_path / "running"])
    fresh = DataPathLock()
    fresh.acquire([tmp_path / "new"])  # not left locked by the refused call
    fresh.release()
    lock.release()
    holder.release()
