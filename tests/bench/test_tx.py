"""Tests of the transaction scenario of the benchmark (``meta.bench.tx``).

The frames of one transaction are checked through the shared decoder; the ``--quick`` run of
``tools/bench`` (tests/test_bench.py) runs the scenario itself and checks its row and target.
"""

from __future__ import annotations

from pathlib import Path

from meta.bench.tx import TransactionFrames
from meta.protocol.codec import NEED_DATA, Decoder
from meta.protocol.commands import Put, Transaction
from meta.protocol.message import checksum

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 120


def test_transaction_frames_decode_as_begin_puts_and_one_phase_commit():
    frames = TransactionFrames("bench-tx", 100, 3)
    decoder = Decoder()
    decoder.receive_data(frames.transaction(b"s-1", 7, 41))
    commands = []
    while (command := decoder.next_command()) is not NEED_DATA:
        commands.append(command)
    assert [type(command) for command in commands] == [Transaction, Put, Put, Put, Transaction]
    begin, *puts, commit = commands
    assert (begin.tx_key, begin.session_id, begin.type, begin.opaque) == (
        "TX:s-1:7",
        "s-1",
        "BEGIN",
        41,
    )
    assert [put.opaque for put in puts] == [42, 43, 44]
    assert all(put.tx_key == "TX:s-1:7" and put.partition == 0 for put in puts)
    assert all(put.checksum == checksum(put.data) and len(put.data) == 100 for put in puts)
    assert (commit.type, commit.opaque) == ("COMMIT_ONE_PHASE", 45)
    assert frames.opaques == 5
