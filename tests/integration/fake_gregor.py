"""``FakeGregorSlave``: a raw-socket stand-in for a gregor slave, for samsa master tests.

It listens on 127.0.0.1, records every byte a master sends (``received``), decodes the
frames with the project's decoder, and answers like a gregor slave: a ``sync`` with
``result 200 <n> <opaque>\\r\\n<msgId> <partition> <offset>`` where the offset is its own
end of the partition (which it advances by the record's size, ``ends``), ``stats sync`` with
a body starting ``role gregor`` (or, as a Java slave, a topic's stats), and ``stats offsets``
with its ends. ``hold()`` (or ``held=True``) makes it stop answering (requests are still
recorded) and ``answer()`` answer again, ``code`` makes it answer every sync with another
code, and ``stop()`` closes every socket (a dead slave). Thread-safe.
"""

from __future__ import annotations

import socket
import threading
import time

from meta.protocol.codec import NEED_DATA, Decoder
from meta.protocol.commands import Stats, Sync
from meta.protocol.encoding import encode_result

RECORD_HEADER_BYTES = 20


class FakeGregorSlave:
    """One fake slave on ``port`` (a free one by default)."""

    def __init__(self, port: int, metaq_py: bool = True, held: bool = False) -> None:
        self.port = port
        self.metaq_py = metaq_py
        self.ends: dict[tuple[str, int], int] = {}
        self.received = bytearray()
        self.syncs: list[Sync] = []
        self.stats_items: list[str] = []
        self.code = 200
        self._held = held
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._connections: list[socket.socket] = []
        self._threads: list[threading.Thread] = []

    # --- control ----------------------------------------------------------------------------

    def start(self) -> FakeGregorSlave:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(8)
        self._listener = listener
        self._spawn(self._accept, listener)
        return self

    def stop(self) -> None:
        """Close the listener and every connection, as a killed slave would."""
        with self._lock:
            listener, self._listener = self._listener, None
            connections, self._connections = self._connections, []
        for sock in [listener, *connections]:
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
        for thread in self._threads:
            thread.join(5)
        self._threads = [thread for thread in self._threads if thread.is_alive()]

    def hold(self) -> None:
        """Stop answering (what arrives is still recorded)."""
        self._held = True

    def answer(self) -> None:
        """Answer again (what arrived while held stays unanswered)."""
        self._held = False

    @property
    def connection_count(self) -> int:
        with self._lock:
            return len(self._connections)

    def wait_for(self, condition, timeout_s: float = 20.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if condition(self):
                    return
            time.sleep(0.02)
        raise AssertionError(f"fake slave: {what} not reached within {timeout_s} s")

    # --- serving ----------------------------------------------------------------------------

    def _spawn(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                connection, _address = listener.accept()
            except OSError:
                return
            with self._lock:
                if self._listener is None:
                    connection.close()
                    return
                self._connections.append(connection)
            self._spawn(self._serve, connection)

    def _serve(self, connection: socket.socket) -> None:
        decoder = Decoder()
        while True:
            try:
                data = connection.recv(65536)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                self.received += data
                decoder.receive_data(data)
                replies = self._answer_all(decoder)
            if replies and not self._held:
                try:
                    connection.sendall(replies)
                except OSError:
                    return

    def _answer_all(self, decoder: Decoder) -> bytes:
        replies = []
        while True:
            command = decoder.next_command()
            if command is NEED_DATA:
                return b"".join(replies)
            if isinstance(command, Sync):
                replies.append(self._sync(command))
            elif isinstance(command, Stats):
                replies.append(self._stats(command))

    def _sync(self, command: Sync) -> bytes:
        self.syncs.append(command)
        if self.code != 200:
            return encode_result(self.code, b"refused by the fake slave", command.opaque)
        key = (command.topic, command.partition)
        offset = self.ends.get(key, 0)
        self.ends[key] = offset + RECORD_HEADER_BYTES + len(command.data)
        body = b"%d %d %d" % (command.msg_id, command.partition, offset)
        return encode_result(200, body, command.opaque)

    def _stats(self, command: Stats) -> bytes:
        self.stats_items.append(command.item)
        if command.item == "sync" and self.metaq_py:
            return encode_result(200, b"role gregor\r\nmaster -\r\n", command.opaque)
        if command.item == "offsets":
            lines = [
                f"{topic} part {partition} min_offset 0 max_offset {end}"
                for (topic, partition), end in sorted(self.ends.items())
            ]
            text = "STATS\r\n" + "".join(line + "\r\n" for line in lines) + "END\r\n"
            return encode_result(200, text.encode(), command.opaque)
        # A Java broker answers an unknown item as the stats of a topic of that name.
        text = f"STATS\r\n{command.item}\r\nresultCode 1\r\nEND\r\n"
        return encode_result(200, text.encode(), command.opaque)
