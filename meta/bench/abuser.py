"""``Abuse``: misbehaving clients run in threads until closed (``meta.bench.abuse``,
``meta.bench.http_abuse``; the integration tests use them too).

Every socket has ``SOCKET_TIMEOUT_S``; ``close`` stops the threads (each joined for at most
``JOIN_TIMEOUT_S``) and closes the sockets.
"""

from __future__ import annotations

import socket
import threading

SOCKET_TIMEOUT_S = 30.0
JOIN_TIMEOUT_S = 30.0


class Abuse:
    """Threads that misbehave until ``close``; a context manager."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.sockets: list[socket.socket] = []

    def start(self) -> Abuse:
        """Start the threads not started yet (so a second call does nothing)."""
        for thread in self.threads:
            if thread.ident is None:
                thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(JOIN_TIMEOUT_S)
        for sock in self.sockets:
            sock.close()

    def __enter__(self) -> Abuse:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()
