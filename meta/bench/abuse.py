"""Misbehaving clients, for the ``abuse`` benchmark and the hardening tests.

* ``NonReadingGets``: connections that send ``get ... 1048576`` in a loop and never read a
  reply; the broker stops reading from them once their queued replies pass
  ``maxQueuedReplyBytes``.

Each abuse runs in threads of this process until ``close``; every socket has a timeout and
every loop ends with its abuse.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time

from meta.protocol.codec import encode
from meta.protocol.commands import Get, Put
from meta.protocol.message import checksum

TOPIC = "bench-abuse"
GROUP = "abuse"
GET_BYTES = 1024 * 1024
VICTIM_INTERVAL_S = 0.01
PUT_INTERVAL_S = 0.5
SLOW_BYTE_INTERVAL_S = 0.5
SOCKET_TIMEOUT_S = 30.0
GETS_PER_SEND = 1000
JOIN_TIMEOUT_S = 30.0
ABUSES = ("gets", "long-poll", "idle", "slowloris")


def _connect(address: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(address, timeout=SOCKET_TIMEOUT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def request(sock: socket.socket, frame: bytes) -> bytes:
    """Send ``frame`` and read one whole reply (header line and body); return the header."""
    sock.sendall(frame)
    received = b""
    while b"\r\n" not in received:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        received += chunk
    header, _, rest = received.partition(b"\r\n")
    words = header.split()
    length = int(words[2]) if words[0] == b"result" else int(words[1])
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        rest += chunk
    return header


def put_one(address: tuple[str, int], topic: str, data: bytes, partition: int = 0) -> int:
    """Put ``data`` and return the offset the broker answered."""
    with _connect(address) as sock:
        frame = encode(Put(topic, partition, data, 0, 1, checksum(data)))
        sock.sendall(frame)
        reply = sock.recv(65536)
    words = reply.split(b"\r\n")[1].split()
    return int(words[2])


class Abuse:
    """Threads that misbehave until ``close``; a context manager."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.sockets: list[socket.socket] = []

    def start(self) -> Abuse:
        for thread in self.threads:
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


class NonReadingGets(Abuse):
    """``connections`` connections sending ``get <topic> ... 1048576`` forever, reading nothing.

    Attributes:
        sent_at: per connection, when it last sent a byte (the broker stopped reading from
            it when that stays old).
    """

    def __init__(self, address: tuple[str, int], topic: str, connections: int) -> None:
        super().__init__()
        gets = (encode(Get(topic, GROUP, 0, 0, GET_BYTES, n)) for n in range(GETS_PER_SEND))
        self._block = b"".join(gets)
        self.sent_at = [time.monotonic()] * connections
        for index in range(connections):
            sock = _connect(address)
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
                # The stream is the block repeated: whole requests, whatever the send cut.
                position = (position + sent) % len(block)
