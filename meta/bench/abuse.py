"""Misbehaving clients, for the ``abuse`` benchmark and the hardening tests.

* ``NonReadingGets``: connections that send ``get ... 1048576`` in a loop and never read a
  reply; the broker stops reading from them once their queued replies pass
  ``maxQueuedReplyBytes``;
* ``LongPollStorm``: connections that each hold many long-polled gets at the end of a
  partition, all woken by one put; the broker answers them in slices.

Each abuse runs in threads of this process until ``close``; every socket has a timeout and
every loop ends with its abuse.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from typing import BinaryIO

from meta.protocol.codec import encode
from meta.protocol.commands import Get, Put, Version
from meta.protocol.message import HEADER_SIZE as HEADER_BYTES
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


def request(sock: socket.socket, frame: bytes) -> tuple[list[bytes], bytes]:
    """Send ``frame`` and read one whole reply; return its header words and its body."""
    sock.sendall(frame)
    received = b""
    while b"\r\n" not in received:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        received += chunk
    header, _, body = received.partition(b"\r\n")
    words = header.split()
    length = int(words[2]) if words[0] == b"result" else int(words[1])
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        body += chunk
    return words, body


def put_end(sock: socket.socket, topic: str, data: bytes, partition: int = 0) -> int:
    """Put ``data``; return the partition's end after it (the offset of the next record)."""
    words, body = request(sock, encode(Put(topic, partition, data, 0, 1, checksum(data))))
    if words[1] != b"200":
        raise ConnectionError(f"the put was answered {words} {body!r}")
    return int(body.split()[2]) + HEADER_BYTES + len(data)


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


def read_reply(reader: BinaryIO) -> list[bytes]:
    """Read one whole reply (a result or a value) from a buffered reader; its header words."""
    header = reader.readline()
    if not header.endswith(b"\r\n"):
        raise ConnectionError("the broker closed the connection")
    words = header.split()
    length = int(words[2]) if words[0] == b"result" else int(words[1])
    if len(reader.read(length)) != length:
        raise ConnectionError("the broker closed the connection")
    return words


class LongPollStorm(Abuse):
    """``connections`` connections, each holding ``polls`` long-polled gets at the end of
    partition 0 of ``topic``, which one put wakes all at once.

    Use: ``hold()`` (returns once the broker holds every get), ``wake()`` (the put; returns
    how long it took to be answered), ``drain()`` (reads every woken get's reply); again.
    ``run_in_turns`` does this in a thread until ``close``.
    """

    def __init__(
        self,
        address: tuple[str, int],
        topic: str,
        connections: int,
        polls: int,
        wait_ms: int = 60_000,
    ) -> None:
        super().__init__()
        self._topic = topic
        self._polls = polls
        self._wait_ms = wait_ms
        self._producer = _connect(address)
        self.sockets.append(self._producer)
        self._end = put_end(self._producer, topic, b"start")
        self.put_seconds: list[float] = []
        self._readers = []
        for _ in range(connections):
            sock = _connect(address)
            self.sockets.append(sock)
            self._readers.append((sock, sock.makefile("rb")))

    def hold(self) -> None:
        """Send each connection's long-polled gets at the end of the partition, then a
        ``version`` whose reply says the broker took them all (requests run in order)."""
        gets = b"".join(
            encode(Get(self._topic, GROUP, 0, self._end, GET_BYTES, n, self._wait_ms))
            for n in range(self._polls)
        )
        for sock, _reader in self._readers:
            sock.sendall(gets + encode(Version(self._polls)))
        for _sock, reader in self._readers:
            words = read_reply(reader)
            assert words[:2] == [b"result", b"200"], words

    def wake(self) -> float:
        """Put one message (waking every held get); seconds until it was answered."""
        began = time.monotonic()
        self._end = put_end(self._producer, self._topic, b"wake")
        seconds = time.monotonic() - began
        self.put_seconds.append(seconds)
        return seconds

    def drain(self) -> None:
        """Read the reply of every woken get."""
        for _sock, reader in self._readers:
            for _ in range(self._polls):
                read_reply(reader)

    def run_in_turns(self, interval_s: float = PUT_INTERVAL_S) -> LongPollStorm:
        """Hold, wake and drain in a thread, every ``interval_s``, until ``close``."""

        def turns() -> None:
            try:
                while not self.stop.wait(interval_s):
                    self.hold()
                    self.wake()
                    self.drain()
            except OSError:
                return

        self.threads.append(threading.Thread(target=turns, daemon=True))
        return self.start()
