"""``meta.bench.load``: the benchmark client checks every put reply; unbatched puts.

Goal: the lean reply path (``Decoder.next_result_run``) still refuses anything but a 200 for
an outstanding opaque. Method: replies built with the shared encoder, fed to a decoder.
"""

from __future__ import annotations

import socket
import threading

import pytest

from meta.bench import load
from meta.bench.load import BenchError, take_replies
from meta.protocol.codec import NEED_DATA, Decoder, encode
from meta.protocol.commands import Data, Result


def decoder_with(*frames) -> Decoder:
    decoder = Decoder()
    decoder.receive_data(b"".join(encode(frame) for frame in frames))
    return decoder


def test_every_reply_answers_an_outstanding_put_once():
    outstanding = {1, 2, 3}
    decoder = decoder_with(Result(200, b"5 0 0", 2), Result(200, b"6 0 20", 1))
    decoder.receive_data(encode(Result(200, b"7 0 40", 3))[:-3])
    assert take_replies(decoder, outstanding) == 2
    assert outstanding == {3}


@pytest.mark.parametrize(
    "frame",
    [
        Result(500, b"Put message failed", 1),
        Result(200, b"5 0 0", 99),  # not outstanding
        Data(b"x", 1),  # not a result at all
        Result(200, b"5 0 0", 1234567890),  # ten digits: the general decoder takes it
    ],
)
def test_a_failed_unexpected_or_foreign_reply_stops_the_run(frame):
    decoder = decoder_with(Result(200, b"5 0 0", 2), frame)
    with pytest.raises(BenchError):
        take_replies(decoder, {1, 2})


def test_unbatched_puts_leave_one_send_each(monkeypatch):
    """Goal: ``run_unbatched`` writes each put by its own ``send`` and checks every reply.
    Method: a loopback server thread answers each put it reads with a 200 and records how
    many puts each read held and how many sends the client made (``socket.send`` counted)."""
    listener = socket.create_server(("127.0.0.1", 0))
    puts_answered = []

    def serve() -> None:
        connection, _ = listener.accept()
        decoder = Decoder()
        with connection:
            while data := connection.recv(65536):
                decoder.receive_data(data)
                while (command := decoder.next_command()) is not NEED_DATA:
                    connection.sendall(encode(Result(200, b"1 0 0", command.opaque)))
                    puts_answered.append(command.opaque)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    frames = load.PutFrames("bench-unbatched", 100)
    sends = []
    real_send = load._send_some

    def counting_send(sock, data):
        sends.append(len(data))
        return real_send(sock, data)

    monkeypatch.setattr(load, "_send_some", counting_send)
    try:
        result = load.run_unbatched(listener.getsockname(), frames, 10.0, 50, window=8)
    finally:
        server.join(10.0)
        listener.close()
    assert result["messages"] == 50
    assert sorted(puts_answered) == list(range(1, 51))
    frame_bytes = len(frames.header(1)) + 100
    assert sends[0] == frame_bytes and len(sends) >= 50
