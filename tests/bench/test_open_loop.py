"""``meta.bench.open_loop``: puts leave on schedule, whatever the replies do."""

from __future__ import annotations

import socket
import threading
import time

from meta.bench import load
from meta.bench.open_loop import run_open_latency
from meta.protocol.codec import NEED_DATA, Decoder, encode
from meta.protocol.commands import Result

REPLY_DELAY_S = 0.2


def test_puts_leave_on_schedule_while_replies_lag_and_each_latency_counts_from_its_schedule():
    """Goal: the open-loop generator keeps its rate when the broker is slow, and times each
    put from its scheduled send (no coordinated omission). Method: a loopback server thread
    answers every put ``REPLY_DELAY_S`` after it read it; at 100 puts a second for 0.5 s, a
    closed loop would send 3 puts in that time. Every put must have arrived at the server
    within the 0.5 s (plus slack), and every latency must be at least the delay."""
    listener = socket.create_server(("127.0.0.1", 0))
    arrivals: list[float] = []

    def serve() -> None:
        connection, _ = listener.accept()
        decoder = Decoder()
        due: list[tuple[float, int]] = []
        connection.settimeout(0.01)
        with connection:
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline and (len(arrivals) < 50 or due):
                try:
                    data = connection.recv(65536)
                except TimeoutError:
                    data = None
                if data == b"":
                    return
                if data:
                    decoder.receive_data(data)
                while (command := decoder.next_command()) is not NEED_DATA:
                    arrivals.append(time.monotonic())
                    due.append((time.monotonic() + REPLY_DELAY_S, command.opaque))
                while due and due[0][0] <= time.monotonic():
                    connection.sendall(encode(Result(200, b"1 0 0", due.pop(0)[1])))

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        started = time.monotonic()
        result = run_open_latency(
            listener.getsockname(), load.PutFrames("bench-open", 10), 100.0, 0.5
        )
    finally:
        server.join(15.0)
        listener.close()
    assert result["messages"] == 50
    assert arrivals[-1] - started < 0.5 + 0.15 + 0.5  # on schedule, with slack for load
    assert min(result["latencies_s"]) >= REPLY_DELAY_S
    assert result["msg_per_s"] > 60
