"""Partitions sharing a fetch thread: a long poll on an idle one never holds up a busy one.

A fake connection plays the broker: a get of the busy partition is answered with a message
at once; a get of an idle partition is held for its wait (as a broker holds a long poll
while no data arrives), and answered empty at once when it carries none. Every wait is
bounded; ``stop`` cancels a held get.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

from meta.client.cluster import BrokerAddress, Partition
from meta.client.fetch.manager import FetchManager, FetchRequest, FetchSettings
from meta.protocol.commands import Data, Result
from meta.protocol.message import pack_message

WAIT_S = 5.0
LONG_POLL_MS = 1000
IDLE, BUSY, QUIET = 0, 1, 2


def answer_empty(future: Future) -> None:
    if future.set_running_or_notify_cancel():
        future.set_result(Result(404, b"", 0))


class Broker:
    """The connection and pool of one fake broker; records every get it was sent."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.gets: list = []

    def request(self, command, timeout_s) -> Future:
        future: Future = Future()
        with self.lock:
            self.gets.append(command)
        if command.partition == BUSY:
            future.set_result(Data(pack_message(len(self.gets), 0, b"x"), 0))
        elif not command.max_wait_ms:
            future.set_result(Result(404, b"", 0))
        else:  # held for its wait, then answered empty (unless stop() cancelled it)
            timer = threading.Timer(command.max_wait_ms / 1000, answer_empty, (future,))
            timer.daemon = True
            timer.start()
        return future

    def set_brokers(self, user, addresses) -> None:
        pass

    def get(self, address):
        return self

    def waits_of(self, partition: int) -> list[int | None]:
        with self.lock:
            return [get.max_wait_ms for get in self.gets if get.partition == partition]


def fetching(broker: Broker, received: list, partitions: tuple[int, ...]) -> FetchManager:
    settings = FetchSettings("g", 1.0, 5000, LONG_POLL_MS, "follow-broker", 1)
    manager = FetchManager(broker, "<test>", settings, {"t": received.append})
    address = BrokerAddress("127.0.0.1", 1)
    manager.start([FetchRequest("t", Partition(0, n), address, 0) for n in partitions])
    return manager


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_an_idle_partition_does_not_hold_the_only_fetch_thread_from_a_busy_one():
    broker, received = Broker(), []
    manager = fetching(broker, received, (IDLE, BUSY))
    try:
        wait_for(lambda: len(received) >= 50, "50 messages of the busy partition")
        wait_for(lambda: broker.waits_of(IDLE), "a get of the idle partition")
        assert set(broker.waits_of(IDLE)) == {None}  # the busy one was always due
    finally:
        manager.stop()


def test_a_partition_alone_on_its_thread_is_long_polled_for_the_whole_wait():
    broker, received = Broker(), []
    manager = fetching(broker, received, (IDLE,))
    try:
        wait_for(lambda: broker.waits_of(IDLE), "the get")
        assert broker.waits_of(IDLE) == [LONG_POLL_MS]
    finally:
        manager.stop()


def test_idle_partitions_sharing_a_thread_take_turns_at_the_long_poll_without_spinning():
    """Two idle partitions on one thread: the empty gets cut short back off (doubling from
    ``CUT_POLL_DELAY_MS`` up to the long poll), so over 1.5 s the thread sends a few dozen
    gets, not thousands, and the broker holds them for ever longer waits."""
    broker, received = Broker(), []
    manager = fetching(broker, received, (IDLE, QUIET))
    try:
        deadline = time.monotonic() + 1.5
        wait_for(lambda: time.monotonic() > deadline, "1.5 s")
        waits = broker.waits_of(IDLE) + broker.waits_of(QUIET)
        assert len(waits) < 40
        assert max(wait or 0 for wait in waits) >= LONG_POLL_MS // 4
    finally:
        manager.stop()
