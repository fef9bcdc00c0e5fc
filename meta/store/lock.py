"""``DataPathLock``: at most one broker process per data directory.

Two brokers on one ``dataPath`` (a slave given a copy of its master's ``server.ini`` without
its own ``dataPath``, or a second start of the same config) would append to the same segment
files and corrupt them. At start-up the broker takes an exclusive ``flock`` on
``<root>/.lock`` in each of its data roots (``[system] dataPath``, every topic ``dataPath``,
``dataLogPath``) and keeps the files open until it stops; a second broker fails to start
with an error naming the directory and the pid written in the lock file.

The lock is the kernel's: it goes with the process, so a broker killed with ``kill -9``
leaves no stale lock (the file stays, empty of meaning). The lock file is a plain file, which
the partition scan (``StoreManager``, and Java's broker) skips.

A reload that adds a topic ``dataPath`` locks it too (``acquire`` again), before the topic
takes puts.

Invariants: an ``acquire`` locks every root it names that was not held yet, or none of them
(a failed one releases what it took, and only that).

Thread affinity: any one thread (the reactor thread in the broker); blocking calls are a few
local system calls at start, reload and stop.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterable

from meta.errors import StoreError

LOCK_NAME = ".lock"


class DataPathLock:
    """Exclusive locks on the data roots of one broker process."""

    def __init__(self) -> None:
        self._held: dict[str, int] = {}  # root -> open lock file descriptor

    @property
    def roots(self) -> list[str]:
        """The roots locked now."""
        return list(self._held)

    def acquire(self, roots: Iterable[str]) -> None:
        """Lock every root not held yet (created if missing), or none of them.

        Roots held before the call stay held either way: a reload that adds a topic
        ``dataPath`` calls this again with the new roots.

        Raises:
            StoreError: a root is locked by another process (or another broker of this one),
                or cannot be created or locked; the text names the directory.
        """
        taken: list[str] = []
        try:
            for root in dict.fromkeys(os.path.normpath(root) for root in roots):
                if root not in self._held:
                    self._held[root] = _lock(root)
                    taken.append(root)
        except BaseException:
            for root in taken:
                with contextlib.suppress(OSError):
                    os.close(self._held.pop(root))
            raise

    def release(self) -> None:
        """Unlock every root (idempotent)."""
        held, self._held = self._held, {}
        for fd in held.values():
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the descriptor drops the flock


def _lock(root: str) -> int:
    path = os.path.join(root, LOCK_NAME)
    try:
        os.makedirs(root, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise StoreError(f"cannot lock data directory {root}: {error}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_pid(fd)
        os.close(fd)
        raise StoreError(
            f"data directory {root} is in use by another broker (pid {holder}, lock file "
            f"{path}): give each broker, master or slave, its own dataPath"
        ) from None
    except OSError as error:
        os.close(fd)
        raise StoreError(f"cannot lock data directory {root}: {error}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, b"%d\n" % os.getpid(), 0)
    return fd


def _read_pid(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"
