"""The transaction scenario ``tx`` of the benchmark, side by side with pipelined puts.

``python -m meta.bench_tx`` (see ``--help``) starts one broker per flush mode with
``meta.bench.BenchBroker`` (ZooKeeper disabled, ``flushTxLogAtCommit=1``: every commit is
answered after the journal's fsync) or uses ``--broker``, and measures on the same broker:

* ``pipelined``: ``meta.bench.run_pipelined``, one connection with a window of plain puts;
* ``tx``: ``run_transactions``, local transactions of ``--tx-messages`` (10) messages each:
  BEGIN, the puts carrying the key ``TX:<session>:<n>`` to partition 0, COMMIT_ONE_PHASE, all
  frames of one transaction written at once (pipelined per transaction), over
  ``--connections`` connections with ``--tx-in-flight`` transactions open on each.

It prints both rows (tools/bench's table), the ratio tx / pipelined against the issue's
target (``TX_TARGET_RATIO``: tx at least half the pipelined rate) and writes every number as
JSON. Exit status 1 when a scenario failed, 2 on bad arguments; a missed target is reported,
not an error.

Invariants: every reply must be a 200 answering an opaque still outstanding on its
connection; every loop is bounded in count and time and every socket has a timeout (the
broker silent for ``REPLY_TIMEOUT_S`` fails the run). Single-threaded, one client process.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import selectors
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from meta import bench
from meta.bench import BenchError, PutFrames
from meta.errors import MetaError
from meta.protocol.codec import NEED_DATA, Decoder
from meta.protocol.commands import Result
from meta.protocol.message import checksum

MODES = {"0": 0, "1": 1, "1000": 1000}
MODE_LABELS = {"0": "0/group", "1": "1", "1000": "1000", "ext": "ext"}
UNFLUSH_INTERVAL_MS = 10000
TX_TOPIC = "bench-tx"
PIPELINED_TOPIC = "bench-pipelined"
TX_TARGET_RATIO = 0.5
"""Target: transactional messages/s >= this fraction of pipelined puts on the same broker."""

QUICK = {"duration_s": 0.5, "max_transactions": 50, "max_messages": 2000, "window": 100}


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
    while (reply := decoder.next_command()) is not NEED_DATA:
        if not isinstance(reply, Result) or reply.code != 200:
            raise BenchError(f"transaction request failed: {reply!r}")
        is_commit = outstanding.pop(reply.opaque, None)
        if is_commit is None:
            raise BenchError(f"reply with unexpected opaque {reply.opaque}")
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


# --- arguments -------------------------------------------------------------------------------


def comma_modes(text: str) -> list[str]:
    modes = [mode.strip() for mode in text.split(",") if mode.strip()]
    if not modes or any(mode not in MODES for mode in modes):
        raise argparse.ArgumentTypeError(f"expected a comma list of {', '.join(MODES)}")
    return modes


def broker_address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError("expected HOST:PORT")
    return host, int(port)


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m meta.bench_tx",
        description="Measure local transactions (BEGIN, N puts, COMMIT_ONE_PHASE) against "
        "pipelined plain puts on the same broker (flushTxLogAtCommit=1); print both rates and "
        "their ratio, write JSON.",
        epilog=f"Target: tx msg/s >= {TX_TARGET_RATIO:.0%} of pipelined msg/s. Flush modes: "
        "0 = group commit, 1 = fsync every message, 1000 = every 1000 messages.",
    )
    add = parser.add_argument
    add("--broker", type=broker_address, help="use this broker (HOST:PORT) instead of starting")
    add("--modes", type=comma_modes, default=["0"], help="flush modes of the started brokers")
    add("--duration-s", type=float, default=5.0, help="time bound per scenario")
    add("--max-transactions", type=int, default=1_000_000, help="count bound of tx")
    add("--max-messages", type=int, default=5_000_000, help="count bound of pipelined")
    add("--message-bytes", type=int, default=1024, help="put body size")
    add("--tx-messages", type=int, default=10, help="messages per transaction")
    add("--connections", type=int, default=16, help="connections of the tx scenario")
    add("--tx-in-flight", type=int, default=8, help="open transactions per connection")
    add("--window", type=int, default=1000, help="unanswered puts in the pipelined scenario")
    add("--data-dir", type=Path, help="parent of the brokers' data directories")
    add("--json", type=Path, default=Path("bench-tx-results.json"), help="JSON output path")
    add("--keep-data", action="store_true", help="keep the temporary broker directories")
    add("--quick", action="store_true", help="tiny numbers, for a smoke test")
    arguments = parser.parse_args(argv)
    if arguments.quick:
        for key, value in QUICK.items():
            if getattr(arguments, key) == parser.get_default(key):
                setattr(arguments, key, value)
    positive = ("duration_s", "max_transactions", "max_messages", "message_bytes")
    for key in (*positive, "tx_messages", "connections", "tx_in_flight", "window"):
        if getattr(arguments, key) <= 0:
            parser.error(f"--{key.replace('_', '-')} must be positive")
    if arguments.max_messages >= bench.OPAQUE_MAX:
        parser.error("--max-messages must stay below 2**31 (they are opaques)")
    return arguments


# --- running ---------------------------------------------------------------------------------

CpuClock = Callable[[], float] | None
"""The broker's CPU seconds so far; None for an external broker."""


def measure(rows: list[dict], scenario: str, mode: str, cpu: CpuClock, run: Callable) -> None:
    """Run one scenario; record its row (or its error) with the broker's CPU time."""
    print(f"  {scenario:<11} mode {MODE_LABELS[mode]:<8}", end="", flush=True)
    row: dict = {"scenario": scenario, "mode": mode}
    cpu_before = cpu() if cpu else 0.0
    try:
        row.update(run())
    except (BenchError, MetaError, OSError) as error:
        row["error"] = f"{type(error).__name__}: {error}"
    row["broker_cpu_s"] = cpu() - cpu_before if cpu else None
    rows.append(row)
    print(f" {row.get('msg_per_s', 0):>10.0f} msg/s" if "error" not in row else " failed")


def run_pair(arguments: argparse.Namespace, rows: list[dict], address, mode: str, cpu) -> None:
    """Pipelined puts, then transactions, against one broker."""
    a = arguments
    put_frames = PutFrames(PIPELINED_TOPIC, a.message_bytes)
    tx_frames = TransactionFrames(TX_TOPIC, a.message_bytes, a.tx_messages)

    def pipelined() -> dict:
        return bench.run_pipelined(address, put_frames, a.duration_s, a.max_messages, a.window)

    def transactions() -> dict:
        return run_transactions(
            address, tx_frames, a.duration_s, a.max_transactions, a.connections, a.tx_in_flight
        )

    measure(rows, "pipelined", mode, cpu, pipelined)
    measure(rows, "tx", mode, cpu, transactions)


def run_local(arguments: argparse.Namespace, rows: list[dict], data_root: Path) -> None:
    """One broker process per flush mode, started and stopped here."""
    for mode in arguments.modes:
        directory = Path(tempfile.mkdtemp(prefix=f"metaq-bench-tx-{mode}-", dir=data_root))
        broker = bench.BenchBroker(directory, MODES[mode], UNFLUSH_INTERVAL_MS)
        print(
            f"broker unflushThreshold={MODES[mode]} flushTxLogAtCommit=1 in {directory}",
            flush=True,
        )
        try:
            broker.start()
            run_pair(arguments, rows, broker.address, mode, broker.cpu_seconds)
            if not broker.alive():
                raise BenchError(f"broker exited during the run:\n{broker.log_tail()}")
        except BenchError as error:
            rows.append({"scenario": "broker", "mode": mode, "error": str(error)})
        finally:
            broker.stop()
            if not arguments.keep_data:
                shutil.rmtree(directory, ignore_errors=True)


def compare(rows: list[dict]) -> list[dict]:
    """Per mode with both rows: tx msg/s over pipelined msg/s, against ``TX_TARGET_RATIO``."""
    comparisons = []
    by_key = {(row["scenario"], row["mode"]): row for row in rows if "error" not in row}
    for (scenario, mode), tx in by_key.items():
        pipelined = by_key.get(("pipelined", mode))
        if scenario != "tx" or pipelined is None or pipelined["msg_per_s"] <= 0:
            continue
        ratio = tx["msg_per_s"] / pipelined["msg_per_s"]
        tx["target"], tx["target_metric"] = TX_TARGET_RATIO * pipelined["msg_per_s"], "msg_per_s"
        tx["ratio"] = tx["msg_per_s"] / tx["target"]
        comparisons.append(
            {
                "mode": mode,
                "tx_msg_per_s": tx["msg_per_s"],
                "pipelined_msg_per_s": pipelined["msg_per_s"],
                "tx_over_pipelined": ratio,
                "target_ratio": TX_TARGET_RATIO,
                "met": ratio >= TX_TARGET_RATIO,
            }
        )
    return comparisons


# --- report ----------------------------------------------------------------------------------

TABLE_HEADER = (
    f"{'scenario':<11} {'mode':<8} {'messages':>9} {'seconds':>7} {'msg/s':>9} {'MB/s':>8} "
    f"{'cli cpu':>7} {'brk cpu':>7} {'target':>11} {'ratio':>6}"
)


def format_row(row: dict) -> str:
    text = f"{row['scenario']:<11} {MODE_LABELS.get(row['mode'], row['mode']):<8}"
    if "error" in row:
        return f"{text} FAILED: {row['error'].splitlines()[0][:200]}"
    cpu = row.get("broker_cpu_s")
    text += f" {row['messages']:>9} {row['seconds']:>7.2f} {row['msg_per_s']:>9.0f}"
    text += f" {row['mb_per_s']:>8.1f} {row['client_cpu_s']:>7.2f}"
    text += f" {'-' if cpu is None else format(cpu, '.2f'):>7}"
    if "target" in row:
        text += f" {row['target']:>9.0f}/s {row['ratio']:>6.2f}"
    return text


def print_report(report: dict) -> None:
    print()
    print(TABLE_HEADER)
    print("-" * len(TABLE_HEADER))
    for row in report["results"]:
        print(format_row(row))
    print(
        f"\ntx = transactions of {report['parameters']['tx_messages']} messages, target: tx >= "
        f"{TX_TARGET_RATIO:.0%} of pipelined puts (ratio = tx / pipelined):"
    )
    for entry in report["comparisons"]:
        mark = "ok  " if entry["met"] else "MISS"
        print(
            f"  {mark} mode {MODE_LABELS[entry['mode']]:<8} tx {entry['tx_msg_per_s']:.0f} msg/s, "
            f"pipelined {entry['pipelined_msg_per_s']:.0f} msg/s, "
            f"ratio {entry['tx_over_pipelined']:.2f}"
        )


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    data_root = Path(arguments.data_dir or tempfile.gettempdir()).resolve()
    data_root.mkdir(parents=True, exist_ok=True)
    parameters = {
        key: value if not isinstance(value, Path | tuple) else str(value)
        for key, value in vars(arguments).items()
    }
    report: dict = {
        "timestamp": datetime.datetime.now(datetime.UTC).isoformat(),
        "parameters": parameters,
        "machine": {
            "cpu_count": os.cpu_count(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
        },
        "results": [],
    }
    if arguments.broker:
        print(f"broker {arguments.broker[0]}:{arguments.broker[1]} (external)", flush=True)
        run_pair(arguments, report["results"], arguments.broker, "ext", None)
    else:
        run_local(arguments, report["results"], data_root)
    report["comparisons"] = compare(report["results"])
    report["errors"] = [row for row in report["results"] if "error" in row]
    print_report(report)
    arguments.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nJSON written to {arguments.json}")
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
