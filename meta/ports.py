"""Free TCP ports for the servers that tests, benchmarks and tools start on 127.0.0.1.

What lives here: ``free_port``. A port the kernel hands out for ``bind(0)`` lies in its
ephemeral range, which outgoing connections draw from too: between choosing such a port and
the server's own bind, a client socket of another process (a Spark JVM, a ZooKeeper client)
may take it, and the server fails with "Address already in use". So a port is chosen at
random below the ephemeral range, checked by binding it, and never handed out twice by one
process. When the ephemeral range starts too low to leave room, ``bind(0)`` is used.

Invariants: a returned port was free when checked and is not returned again by this process.
Thread-safe (one lock).
"""

from __future__ import annotations

import random
import socket
import threading

LOWEST = 10000
ATTEMPTS = 500
_EPHEMERAL_DEFAULT = (32768, 60999)
_lock = threading.Lock()
_given: set[int] = set()


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (Linux's default otherwise)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as file:
            low, high = (int(value) for value in file.read().split())
        return low, high
    except (OSError, ValueError):
        return _EPHEMERAL_DEFAULT


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing was bound to when checked, outside the ephemeral
    range when there is room below it.

    Raises:
        RuntimeError: no free port was found in ``ATTEMPTS`` tries.
    """
    low, _high = ephemeral_range()
    with _lock:
        for _ in range(ATTEMPTS):
            port = random.randint(LOWEST, low - 1) if low > LOWEST + 1000 else 0
            if port in _given:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                try:
                    probe.bind((host, port))
                except OSError:
                    continue
                port = probe.getsockname()[1]
            if port not in _given:
                _given.add(port)
                return port
    raise RuntimeError(f"no free TCP port found on {host} in {ATTEMPTS} tries")
