"""``meta.bench.load.take_replies``: the benchmark client checks every put reply.

Goal: the lean reply path (``Decoder.next_result_run``) still refuses anything but a 200 for
an outstanding opaque. Method: replies built with the shared encoder, fed to a decoder.
"""

from __future__ import annotations

import pytest

from meta.bench.load import BenchError, take_replies
from meta.protocol.codec import Decoder, encode
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
