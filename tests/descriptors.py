"""The descriptor guard of the in-process tests: every test closes what it opens.

``guard_descriptors`` is the body of an autouse fixture (``tests/conftest.py``, for the
directories of its ``GUARDED_DIRECTORIES``): it reads the process's descriptors and their
targets (``/proc/self/fd``) before the test, runs the closers the test registered, and reads
them again after. A descriptor that is new, or that now names another target, is the test's
leak; the fixture fails, naming each leaked target.

Only what the test made is counted. Whatever existed before it (pytest's capture files, the
session's ZooKeeper, log files) is in the first reading. The descriptors Twisted opens once
for the whole process (the global reactor's, its reserved ``/dev/null``), which the first test
to need them creates, are not the test's: they are left out. Before a leak is reported,
garbage is collected and the descriptors read again, so an object that closes in its
finalizer counts the same whatever the collector's timing; no test waits.

``closers`` holds what the running test asks to be closed after it (a fixture finalizer that
helpers which open stores can reach without a ``request``): the guard runs them, last
registered first, before its second reading.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

FD_DIRECTORY = "/proc/self/fd"


def open_descriptors() -> dict[int, str]:
    """Every open descriptor of this process and its target (path, ``pipe:[...]``, ...)."""
    found = {}
    for name in os.listdir(FD_DIRECTORY):
        try:
            found[int(name)] = os.readlink(os.path.join(FD_DIRECTORY, name))
        except OSError:
            pass  # the descriptor ``listdir`` itself used, closed by now
    return found


def twisted_process_descriptors() -> set[int]:
    """The descriptors Twisted opens once for the whole process: the installed reactor's
    (once something imported it) and the ``/dev/null`` it keeps reserved from the first
    listening port on (``tcp._reservedFD``, closed and reopened around an EMFILE)."""
    found = global_reactor_descriptors()
    tcp = sys.modules.get("twisted.internet.tcp")
    reserved = getattr(getattr(tcp, "_reservedFD", None), "_fileDescriptor", None)
    if reserved is not None and hasattr(reserved, "fileno"):
        found.add(reserved.fileno())
    return found


def global_reactor_descriptors() -> set[int]:
    """The descriptors of the installed Twisted reactor, once something imported it."""
    module = sys.modules.get("twisted.internet.reactor")
    if module is None:
        return set()
    found: set[int] = set()
    # The poller and the waker are created with the reactor and live as long as the process;
    # neither has a public accessor, so both are looked up defensively.
    poller = getattr(module, "_poller", None)
    if poller is not None and hasattr(poller, "fileno"):
        found.add(poller.fileno())
    waker = getattr(module, "waker", None)
    for name in ("i", "o"):
        fd = getattr(waker, name, None)
        if isinstance(fd, int):
            found.add(fd)
    if waker is not None and hasattr(waker, "fileno"):
        found.add(waker.fileno())
    return found


class Closers:
    """What the running test opened and asked to have closed after it, in order."""

    def __init__(self) -> None:
        self._closers: list[Callable[[], Any]] = []

    def add(self, close: Callable[[], Any]) -> None:
        """Run ``close`` after the test (before the guard reads the descriptors again)."""
        self._closers.append(close)

    def close_all(self) -> None:
        """Run every closer, last added first; raise the first error once all have run."""
        first: BaseException | None = None
        while self._closers:
            close = self._closers.pop()
            try:
                close()
            except BaseException as error:  # noqa: BLE001 - the others must still run
                first = first or error
        if first is not None:
            raise first


closers = Closers()


def close_reactor(reactor: Any) -> None:
    """Close the waker and the poller of a reactor instance a test made (never the global
    one). Twisted has no public close: its waker is lost as ``disconnectAll`` would lose a
    reader, and the poller (epoll) is closed."""
    waker = reactor.waker
    if waker is not None:
        reactor.removeReader(waker)
        waker.connectionLost(None)
        reactor.waker = None
    poller = getattr(reactor, "_poller", None)
    if poller is not None:
        poller.close()


def closing_reactor(reactor: Any) -> Any:
    """``reactor``, closed (``close_reactor``) after the running test."""
    closers.add(lambda: close_reactor(reactor))
    return reactor


def leaked(before: dict[int, str], after: dict[int, str]) -> dict[int, str]:
    """The descriptors of ``after`` that are not in ``before`` with the same target, minus
    the ones Twisted keeps for the whole process (``twisted_process_descriptors``)."""
    ignored = twisted_process_descriptors()
    return {
        fd: target
        for fd, target in sorted(after.items())
        if before.get(fd) != target and fd not in ignored
    }


def guard_descriptors() -> Iterator[None]:
    """The autouse fixture's body: yields while the test runs; raises ``AssertionError``
    naming every descriptor the test left open."""
    before = open_descriptors()
    try:
        yield
    finally:
        closers.close_all()
    left = leaked(before, open_descriptors())
    if left:  # collecting garbage costs ~0.1 s: only when it could change the answer
        gc.collect()
        left = leaked(before, open_descriptors())
    assert not left, "the test left descriptors open:\n" + "\n".join(
        f"  {fd} -> {target}" for fd, target in left.items()
    )
