"""The dashboard's own ZooKeeper worker (``meta.dashboard.zk_reads.ZooKeeperReads``).

Goal: reads run on the worker's threads, never the caller's; identical reads in work share one
run and, for a while, its result; a full worker refuses at once (503 text naming ZooKeeper);
a slow read gives its callers a timeout naming ZooKeeper, and its late result still serves
the next caller; a write is never shared. Method: real worker threads; a ``Clock`` whose
``callFromThread`` hands results to the test thread, which runs them (``Reactor.drain``).
"""

from __future__ import annotations

import queue
import threading

from twisted.internet.task import Clock

from meta.dashboard.zk_reads import ZooKeeperBusy, ZooKeeperReads, ZooKeeperSlow

WAIT_S = 30.0


class Reactor(Clock):
    """A ``Clock`` with ``callFromThread`` (queued; ``drain`` runs them on the test thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.handed: queue.SimpleQueue = queue.SimpleQueue()
        self.triggers: list = []

    def callFromThread(self, function, *args) -> None:  # noqa: N802 - Twisted's name
        self.handed.put((function, args))

    def addSystemEventTrigger(self, phase, event, function) -> None:  # noqa: N802
        self.triggers.append(function)

    def drain(self, count: int) -> None:
        """Run ``count`` calls handed over by the worker (bounded wait for each)."""
        for _ in range(count):
            function, args = self.handed.get(timeout=WAIT_S)
            function(*args)


def outcomes(deferred) -> list:
    found: list = []
    deferred.addBoth(found.append)
    return found


def test_identical_reads_share_one_run_and_its_result_for_a_while():
    reactor = Reactor()
    reads = ZooKeeperReads(reactor, cache_s=2.0)
    release = threading.Event()
    runs: list[str] = []

    def read() -> str:
        runs.append(threading.current_thread().name)
        release.wait(WAIT_S)
        return "groups"

    first, second = outcomes(reads.read("k", read)), outcomes(reads.read("k", read))
    release.set()
    reactor.drain(1)
    assert first == second == ["groups"]
    assert len(runs) == 1 and runs[0].startswith("meta-dashboard-zk-")
    assert outcomes(reads.read("k", read)) == ["groups"]  # cached: no run
    reactor.advance(2.0)
    third = outcomes(reads.read("k", read))
    reactor.drain(1)
    assert third == ["groups"] and len(runs) == 2
    reads.stop()


def test_a_full_worker_refuses_at_once_naming_zookeeper():
    reactor = Reactor()
    reads = ZooKeeperReads(reactor, threads=1, queued_max=1)
    release = threading.Event()
    held = [outcomes(reads.read(n, lambda: release.wait(WAIT_S))) for n in range(2)]
    (refused,) = outcomes(reads.read(2, lambda: None))
    assert refused.check(ZooKeeperBusy)
    assert "ZooKeeper reads of the dashboard are busy" in refused.getErrorMessage()
    release.set()
    reactor.drain(2)
    assert held == [[True], [True]]
    reads.stop()


def test_a_slow_read_times_out_and_its_late_result_serves_the_next_caller():
    reactor = Reactor()
    reads = ZooKeeperReads(reactor, wait_s=5.0)
    release = threading.Event()
    slow = outcomes(reads.read("k", lambda: release.wait(WAIT_S) and "late"))
    reactor.advance(5.0)
    (failure,) = slow
    assert failure.check(ZooKeeperSlow)
    assert "ZooKeeper did not answer the dashboard's read within 5 s" in str(failure.value)
    release.set()
    reactor.drain(1)
    assert outcomes(reads.read("k", lambda: "again")) == ["late"]
    reads.stop()


def test_a_write_is_never_shared_and_a_failure_is_not_cached():
    reactor = Reactor()
    reads = ZooKeeperReads(reactor)
    runs: list[int] = []
    writes = [outcomes(reads.read(None, lambda: runs.append(1) or len(runs))) for _ in range(2)]
    reactor.drain(2)
    assert sorted(w[0] for w in writes) == [1, 2]

    def broken() -> None:
        raise RuntimeError("no session")

    failed = outcomes(reads.read("k", broken))
    reactor.drain(1)
    assert failed[0].check(RuntimeError)
    again = outcomes(reads.read("k", lambda: "read"))
    reactor.drain(1)
    assert again == ["read"]
    reads.stop()
