"""Tests of the consumer's recover store and its manager (``meta.client.consume.recover``).

On ``tmp_path``."""

from __future__ import annotations

import os
import time

from meta.client.cluster import Partition
from meta.client.consume.recover import RecoverManager, RecoverStore
from meta.client.local.message_file import RecoverFile
from meta.client.message import Message
from tests.descriptors import closers


def message(n: int, attribute: str | None = None) -> Message:
    return Message("t", f"m{n}".encode(), attribute, id=n, partition=Partition(1, 2), offset=n * 30)


def open_store(directory) -> RecoverStore:
    """The recover store of group ``g`` (10 messages a file) on ``directory``, closed after
    the test (``tests.descriptors.closers``)."""
    store = RecoverStore(directory, "g", 10)
    closers.add(store.close)
    return store


def stored(recover_file: RecoverFile) -> list[tuple[int, bytes, str | None]]:
    return [(s.message.id, s.message.data, s.message.attribute) for s in recover_file.pending()]


def test_the_store_keeps_one_file_per_topic_and_group(tmp_path):
    store = open_store(tmp_path / "recover")
    store.append(message(1))
    store.append(Message("u", b"x", id=5))
    store.close()
    assert sorted(os.listdir(tmp_path / "recover")) == ["t@g", "u@g"]


def test_the_manager_removes_a_message_only_after_its_listener_succeeded(tmp_path):
    """Round 1: the listener fails on m1 and accepts m2; round 2: it accepts m1."""
    store = open_store(tmp_path)
    store.append(message(1))
    store.append(message(2))
    seen = []
    failing = {1}

    def listener(received):
        seen.append(received.id)
        if received.id in failing:
            raise RuntimeError("not yet")

    manager = RecoverManager(store, {"t": listener}, 1000)
    assert manager.run_once() == 1
    assert [s.message.id for s in store.file("t").pending()] == [1]
    failing.clear()
    assert manager.run_once() == 1
    assert seen == [1, 2, 1] and list(store.file("t").pending()) == []


def test_a_recovered_message_rolled_back_stays_in_the_store(tmp_path):
    store = open_store(tmp_path)
    store.append(message(1))
    manager = RecoverManager(store, {"t": lambda received: received.set_rollback_only()}, 1000)
    assert manager.run_once() == 0
    assert len(store.file("t")) == 1


def test_the_manager_thread_redelivers_and_stops(tmp_path):
    store = open_store(tmp_path)
    store.append(message(1))
    seen = []
    manager = RecoverManager(store, {"t": seen.append}, 20)
    manager.start()
    try:
        for _ in range(250):
            if seen:
                break
            time.sleep(0.02)
    finally:
        manager.stop()
    assert [m.id for m in seen] == [1]


def test_a_store_that_never_rejected_writes_nothing(tmp_path):
    store = open_store(tmp_path / "recover")
    assert RecoverManager(store, {"t": print}, 1000).run_once() == 0
    assert not (tmp_path / "recover").exists()
