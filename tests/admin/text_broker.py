"""A raw-socket stand-in for a broker that answers only text stats items (a Java broker).

``TextOnlyBroker`` answers ``stats <item>`` with the body given for that item and, like a
Java broker, any other item as a topic name it does not know (``resultCode 1``), ``json:``
items included. It records every item asked, in order, and closes the connection on any
other command (a subclass answers more through ``reply``). One thread accepts and serves
connections one at a time.
"""

from __future__ import annotations

import socket
import threading


def unknown_topic_body(item: str) -> bytes:
    """A Java broker's ``stats <item>`` body for an item it reads as an unknown topic."""
    lines = [item, "resultCode 1", "partitions 0", "message_count 0", "bytes 0"]
    return ("STATS\r\n" + "".join(line + "\r\n" for line in lines) + "END\r\n").encode()


def stats_body(*lines: str) -> bytes:
    return ("STATS\r\n" + "".join(line + "\r\n" for line in lines) + "END\r\n").encode()


class TextOnlyBroker:
    """Serves ``stats`` from ``bodies`` (item -> body) on a free loopback port."""

    def __init__(self, bodies: dict[str, bytes]) -> None:
        self.bodies = bodies
        self.asked: list[str] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            with connection:
                self._answer(connection.makefile("rb"), connection)

    def _answer(self, reader, connection: socket.socket) -> None:
        for line in reader:
            tokens = line.decode().rstrip("\r\n").split(" ")
            body = self.reply(tokens)
            if body is None:
                return
            connection.sendall(b"result 200 %d %s\r\n%s" % (len(body), tokens[-1].encode(), body))

    def reply(self, tokens: list[str]) -> bytes | None:
        """The body of the 200 answering a command's tokens; None closes the connection."""
        if tokens[0] != "stats":
            return None
        item = " ".join(tokens[1:-1])
        self.asked.append(item)
        return self.bodies.get(item, unknown_topic_body(item))

    def close(self) -> None:
        # ``close`` alone does not wake a thread blocked in ``accept``; ``shutdown`` does.
        self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()
        self.thread.join(timeout=5)
