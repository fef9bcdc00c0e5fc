"""The transaction scenario ``tx`` of ``tools/bench``: local transactions of 10 messages.

``run_transactions`` opens ``connections`` connections and keeps ``in_flight`` local
transactions open on each: BEGIN, the puts carrying the key ``TX:<session>:<n>`` to partition
0, COMMIT_ONE_PHASE, all frames of one transaction written at once (pipelined per
transaction). ``tools/bench`` runs it with ``run_paired``: in turns with the pipelined
producer on the same broker (``flushTxLogAtCommit=1``: every commit is answered after the
journal's fsync), and reports the ratio tx / pipelined against ``TX_TARGET_RATIO``. This
machine's speed moves by up to 2x within a minute, so the two rates are measured in
alternating slices rather than one after the other.

Invariants: every reply must be a 200 answering an opaque still outstanding on its
connection; every loop is bounded in count and time and every socket has a timeout (the
broker silent for ``REPLY_TIMEOUT_S`` fails the run). Single-threaded, one client process.
"""

from __future__ import annotations

import os
import selectors
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from meta.bench import load as bench
from meta.bench.load import BenchError
from meta.protocol.codec import Decoder
from meta.protocol.commands import Result
from meta.protocol.message import checksum

TX_TOPIC = "bench-tx"
TX_TARGET_RATIO = 0.5
"""Target: transactional messages/s >= this fraction of pipelined puts on the same broker."""


# --- frames ------------------------------------------------------------------------------------


class TransactionFrames:
    """Pre-encoded pieces of one local transaction; the key and opaques vary per transaction.

    A transaction uses ``count + 2`` consecutive opaques: BEGIN, each put, COMMIT_ONE_PHASE.
    """

    def __init__(self, topic: str, message_bytes: int, count: int, partition: int = 0) -> None:
        self.topic = topic
        self.count = count
        pattern = bytes(range(32, 127))
        self.body = (pattern * (message_bytes // len(pattern) + 1))[:message_bytes]
        self.put_prefix = b"put %s %d %d 0 %d " % (
            topic.encode(),
            partition,
            message_bytes,
            checksum(self.body),
        )

    @property
    def opaques(self) -> int:
        return self.count + 2

    def transaction(self, session_id: bytes, number: int, first_opaque: int) -> bytes:
        """Every frame of transaction ``TX:<session_id>:<number>``, joined into one buffer."""
        key = b"TX:%s:%d" % (session_id, number)
        prefix, body = self.put_prefix + key, self.body
        frames = [b"transaction %s %s BEGIN %d\r\n" % (key, session_id, first_opaque)]
        frames += [
            b"%s %d\r\n%s" % (prefix, opaque, body)
            for opaque in range(first_opaque + 1, first_opaque + 1 + self.count)
        ]
        commit_opaque = first_opaque + self.count + 1
        frames.append(
            b"transaction %s %s COMMIT_ONE_PHASE %d\r\n" % (key, session_id, commit_opaque)
        )
        return b"".join(frames)


@dataclass
class TxConnection:
    """One connection of the tx scenario: its decoder and what is still unanswered on it."""

    sock: socket.socket
    session_id: bytes
    decoder: Decoder = field(default_factory=Decoder)
    outstanding: dict[int, bool] = field(default_factory=dict)  # opaque -> is the commit
    open_transactions: int = 0
    next_number: int = 1


def take_transaction_replies(connection: TxConnection) -> int:
    """Decode every complete reply; each must be a 200 for an outstanding opaque.

    Returns:
        The number of transactions whose COMMIT_ONE_PHASE was answered.
    """
    committed = 0
    decoder, outstanding = connection.decoder, connection.outstanding
    while replies := decoder.next_result_run(bench.RESULT_RUN_MAX) or bench.other_reply(
        decoder, "transaction request"
    ):
        for code, opaque, body in replies:
            if code != 200:
                raise BenchError(f"transaction request failed: {Result(code, body, opaque)!r}")
            is_commit = outstanding.pop(opaque, None)
            if is_commit is None:
                raise BenchError(f"reply with unexpected opaque {opaque}")
            committed += is_commit
    return committed


# --- the tx scenario ---------------------------------------------------------------------------


def run_transactions(
    address: tuple[str, int],
    frames: TransactionFrames,
    duration_s: float,
    max_transactions: int,
    connections: int,
    in_flight: int,
) -> dict:
    """``connections`` connections, ``in_flight`` transactions open on each, refilled as their
    commits are answered, until ``duration_s`` or ``max_transactions`` started; then drain."""
    selector = selectors.DefaultSelector()
    open_connections = []
    sent = committed = 0
    cpu_start, start = time.process_time(), time.monotonic()
    deadline = last_progress = last_commit = start
    deadline += duration_s
    try:
        for index in range(connections):
            sock = bench.connect(address)
            session = b"bench-%d-%d" % (os.getpid(), index)
            open_connections.append(TxConnection(sock, session))
            selector.register(sock, selectors.EVENT_READ, open_connections[-1])
        while True:
            for connection in open_connections:
                while connection.open_transactions < in_flight and sent < max_transactions:
                    if time.monotonic() >= deadline:
                        break
                    _send_transaction(connection, frames)
                    sent += 1
            if not any(connection.outstanding for connection in open_connections):
                break
            for key, _events in selector.select(1.0):
                connection = key.data
                bench.receive_into(connection.sock, connection.decoder)
                done = take_transaction_replies(connection)
                connection.open_transactions -= done
                committed += done
                last_progress = time.monotonic()
                if done:
                    last_commit = last_progress
            if time.monotonic() - last_progress > bench.REPLY_TIMEOUT_S:
                raise BenchError(f"no reply for {bench.REPLY_TIMEOUT_S} s")
    finally:
        selector.close()
        for connection in open_connections:
            connection.sock.close()
    seconds = max(last_commit - start, 1e-9)
    messages = committed * frames.count
    return {
        "messages": messages,
        "transactions": committed,
        "messages_per_transaction": frames.count,
        "seconds": seconds,
        "msg_per_s": messages / seconds,
        "tx_per_s": committed / seconds,
        "mb_per_s": messages * len(frames.body) / seconds / 1e6,
        "client_cpu_s": time.process_time() - cpu_start,
        "connections": connections,
        "tx_in_flight": in_flight,
    }


def run_paired(
    address: tuple[str, int],
    frames: TransactionFrames,
    put_frames: bench.PutFrames,
    duration_s: float,
    max_transactions: int,
    connections: int,
    in_flight: int,
    window: int,
    cpu: Callable[[], float] | None = None,
    slices: int = bench.PAIRED_SLICES,
) -> dict:
    """``run_transactions`` in ``slices`` turns with ``bench.run_pipelined`` (``window``
    unanswered puts of ``put_frames``), each turn ``duration_s / slices`` long.

    Returns ``run_transactions``' result for all the tx turns together, with
    ``paired_pipelined_msg_per_s`` (the pipelined rate over its turns), ``paired_ratios``
    (tx / pipelined per turn) and, given the broker's CPU clock ``cpu``, ``broker_cpu_s``
    of the tx turns only.
    """
    rows, puts = [], []
    broker_cpu = 0.0
    for _ in range(slices):
        puts.append(
            bench.run_pipelined(
                address, put_frames, duration_s / slices, max_transactions * frames.count, window
            )
        )
        before = cpu() if cpu else 0.0
        rows.append(
            run_transactions(
                address, frames, duration_s / slices, max(1, max_transactions // slices),
                connections, in_flight,
            )
        )  # fmt: skip
        broker_cpu += cpu() - before if cpu else 0.0
    transactions = sum(row["transactions"] for row in rows)
    seconds = max(sum(row["seconds"] for row in rows), 1e-9)
    messages = transactions * frames.count
    result = {
        "messages": messages,
        "transactions": transactions,
        "messages_per_transaction": frames.count,
        "seconds": seconds,
        "msg_per_s": messages / seconds,
        "tx_per_s": transactions / seconds,
        "mb_per_s": messages * len(frames.body) / seconds / 1e6,
        "client_cpu_s": sum(row["client_cpu_s"] for row in rows),
        "connections": connections,
        "tx_in_flight": in_flight,
        "paired_pipelined_msg_per_s": sum(row["messages"] for row in puts)
        / max(sum(row["seconds"] for row in puts), 1e-9),
        "paired_ratios": [
            row["msg_per_s"] / put["msg_per_s"] if put["msg_per_s"] else 0.0
            for row, put in zip(rows, puts, strict=True)
        ],
    }
    if cpu:
        result["broker_cpu_s"] = broker_cpu
    return result


def _send_transaction(connection: TxConnection, frames: TransactionFrames) -> None:
    number = connection.next_number
    first_opaque = (number - 1) * frames.opaques + 1
    if first_opaque + frames.opaques > bench.OPAQUE_MAX:
        raise BenchError("opaques exhausted on one connection; lower --max-transactions")
    data = frames.transaction(connection.session_id, number, first_opaque)
    for opaque in range(first_opaque, first_opaque + frames.opaques):
        connection.outstanding[opaque] = False
    connection.outstanding[first_opaque + frames.opaques - 1] = True
    connection.sock.sendall(data)
    connection.next_number += 1
    connection.open_transactions += 1
