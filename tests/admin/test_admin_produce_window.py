"""``meta-admin produce --window N`` against a scripted broker: what reaches the broker
before its first answer, and which line a failure in the middle of a window is blamed on.

Method: a stand-in broker on 127.0.0.1 (``HoldingBroker``), registered by hand under a fresh
root of the session's real ZooKeeper, decodes the puts with the project's codec and answers
none until it holds ``hold`` of them (or ``HOLD_S`` passed), then answers each in order, the
ones listed in ``refuse`` with a 500.
"""

from __future__ import annotations

import io
import socket
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from meta.admin.main import main
from meta.protocol.codec import NEED_DATA, Decoder, encode
from meta.protocol.commands import Put, Result
from meta.protocol.put_reply import encode_put_reply

TOPIC = "windowed"
HOLD_S = 5.0
"""The longest the broker holds its answers waiting for ``hold`` puts."""
SERVE_S = 30.0
"""The longest the broker serves one connection."""


class HoldingBroker:
    """Answers puts only once ``hold`` of them arrived (or ``HOLD_S`` passed)."""

    def __init__(self, hold: int, refuse: frozenset[int] = frozenset()) -> None:
        self.hold = hold
        self.refuse = refuse  # 1-based put numbers answered with a 500
        self.received: list[bytes] = []
        self.received_before_first_answer: int | None = None
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(SERVE_S)
        self.port = self.server.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            connection, _ = self.server.accept()
        except OSError:
            return
        with connection:
            connection.settimeout(0.05)
            self._answer(connection)

    def _answer(self, connection: socket.socket) -> None:
        decoder = Decoder()
        held: list[Put] = []
        deadline = time.monotonic() + SERVE_S
        hold_until = time.monotonic() + HOLD_S
        while time.monotonic() < deadline:
            try:
                data = connection.recv(65536)
            except TimeoutError:
                data = None
            except OSError:
                return
            if data == b"":
                return
            if data:
                decoder.receive_data(data)
            while (command := decoder.next_command()) is not NEED_DATA:
                assert isinstance(command, Put), command
                self.received.append(command.data)
                held.append(command)
            if held and (len(self.received) >= self.hold or time.monotonic() > hold_until):
                if self.received_before_first_answer is None:
                    self.received_before_first_answer = len(self.received)
                connection.sendall(b"".join(self._reply(put) for put in held))
                held.clear()

    def _reply(self, put: Put) -> bytes:
        number = self.received.index(put.data) + 1
        if number in self.refuse:
            return encode(Result(500, b"disk failed", put.opaque))
        return encode_put_reply(number, put.partition, 100 * number, put.opaque)

    def close(self) -> None:
        self.server.close()
        self.thread.join(timeout=SERVE_S)


@pytest.fixture
def registered(kazoo_client) -> Iterator:
    """Register a broker 1 at the ``HoldingBroker`` the test makes; close it afterwards."""
    brokers: list[HoldingBroker] = []

    def register(hold: int, refuse: frozenset[int] = frozenset()) -> HoldingBroker:
        broker = HoldingBroker(hold, refuse)
        brokers.append(broker)
        uri = b"meta://127.0.0.1:%d" % broker.port
        kazoo_client.create("/brokers/ids/1/master", uri, makepath=True)
        kazoo_client.create(
            f"/brokers/topics-pub/{TOPIC}/1-m", b'{"numParts":1,"broker":"1-m"}', makepath=True
        )
        return broker

    yield register
    for broker in brokers:
        broker.close()


def produce(monkeypatch, zookeeper, zk_root, lines: list[bytes], *argv: str) -> int:
    class Stdin:
        buffer = io.BytesIO(b"".join(line + b"\n" for line in lines))

    monkeypatch.setattr(sys, "stdin", Stdin())
    options = ["--zk-connect", zookeeper.connect_string, "--zk-root", zk_root]
    return main(["produce", TOPIC, *argv, *options])


def test_produce_sends_a_whole_window_before_it_reads_an_answer(
    registered, monkeypatch, zookeeper, zk_root, capsys
):
    broker = registered(hold=8)
    lines = [b"line %d" % n for n in range(1, 21)]
    status = produce(monkeypatch, zookeeper, zk_root, lines, "--window", "8")
    assert status == 0, capsys.readouterr().err
    assert broker.received_before_first_answer == 8
    assert broker.received == lines  # one partition: stored in the order of the input
    assert capsys.readouterr().err == f"sent 20 message(s) to {TOPIC} (1-0: 20)\n"


def test_a_failure_inside_a_window_names_its_own_line(
    registered, monkeypatch, zookeeper, zk_root, capsys
):
    """Goal: put 3 of a window of 4 is refused while later puts are in flight: the error
    names line 3, the puts in flight are still counted, none after them is sent."""
    broker = registered(hold=4, refuse=frozenset({3}))
    lines = [b"line %d" % n for n in range(1, 11)]
    status = produce(monkeypatch, zookeeper, zk_root, lines, "--window", "4")
    err = capsys.readouterr().err
    assert status == 1
    # Answers 1-4 came together; 1 and 2 freed room for lines 5 and 6, 3 stopped the reading.
    assert broker.received == lines[:6]
    assert "message 3 not sent: the broker refused it: disk failed" in err
    assert "(5 message(s) sent, none after message 6)" in err
    assert f"sent 5 message(s) to {TOPIC} (1-0: 5)" in err
