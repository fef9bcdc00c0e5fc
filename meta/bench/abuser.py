"""``Abuse``: misbehaving clients run in threads until closed (``meta.bench.abuse``,
``meta.bench.http_abuse``; the integration tests use them too); ``NonReaders``, connections
that send a block of requests over and over and read nothing.

Every socket has ``SOCKET_TIMEOUT_S``; ``close`` stops the threads (each joined for at most
``JOIN_TIMEOUT_S``) and closes the sockets.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections.abc import Callable

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


class NonReaders(Abuse):
    """``connections`` connections sending ``block`` over and over, reading nothing.

    Args:
        connect: opens one connection to the broker.
        block: whole requests; the stream is the block repeated, whatever a send cuts.
        connections: how many connections.

    Attributes:
        sent_at: per connection, when it last sent a byte (the broker stopped reading from
            it when that stays old).
    """

    def __init__(
        self, connect: Callable[[], socket.socket], block: bytes, connections: int
    ) -> None:
        super().__init__()
        self._block = block
        self.sent_at = [time.monotonic()] * connections
        for index in range(connections):
            sock = connect()
            sock.setblocking(False)
            self.sockets.append(sock)
            self.threads.append(threading.Thread(target=self._send, args=(index,), daemon=True))

    def stalled(self, quiet_s: float) -> bool:
        """Whether no connection could send anything for ``quiet_s``."""
        now = time.monotonic()
        return all(now - sent >= quiet_s for sent in self.sent_at)

    def _send(self, index: int) -> None:
        sock, block = self.sockets[index], memoryview(self._block)
        position = 0
        with selectors.DefaultSelector() as selector:
            selector.register(sock, selectors.EVENT_WRITE)
            while not self.stop.is_set():
                if not selector.select(0.1):
                    continue
                try:
                    sent = sock.send(block[position:])
                except BlockingIOError:
                    continue
                except OSError:
                    return
                self.sent_at[index] = time.monotonic()
                position = (position + sent) % len(block)
