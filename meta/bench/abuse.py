"""Misbehaving clients and a victim's round trip: ``python -m meta.bench.abuse [--json]``.

One broker process is started here (``AbuseBroker``: a ``meta.bench.http.HttpBenchBroker``,
group commit, ZooKeeper off, the HTTP protocol on, at most ``HTTP_CONNECTIONS_MAX`` HTTP
connections and a ``HEADER_TIMEOUT_S`` head deadline, so that the HTTP abuses reach the cap
and the deadline within a turn). A victim connection sends ``version`` and waits for the
reply, every ``VICTIM_INTERVAL_S``, for ``--seconds``: first alone (the quiet p99), then
under each abuse in turn, each abuse stopped before the next starts:

* ``gets``: ``--get-connections`` connections send ``get ... 1048576`` in a loop and never
  read a reply (``NonReadingGets``); the broker stops reading from them once their queued
  replies pass ``maxQueuedReplyBytes``;
* ``long-poll``: ``--poll-connections`` connections each hold ``--polls`` long-polled gets
  at the end of a partition, and one put wakes them all, again and again
  (``LongPollStorm.run_in_turns``); the broker answers them in slices;
* ``idle``: ``--idle-connections`` connections that connect and send nothing;
* ``slowloris``: ``--slow-connections`` connections that send a request header one byte at
  a time, a byte each every ``SLOW_BYTE_INTERVAL_S`` (``Slowloris``);
* ``http-slowloris``: ``--http-slow-connections`` HTTP connections, more than the cap, that
  send a header line every 2 s and never end the head (``http_abuse.HttpSlowloris``);
* ``http-pipelined``: ``--http-pipelined-connections`` HTTP connections that pipeline 500
  gets each, read the responses and start again (``http_abuse.HttpPipelined``);
* ``http-nonreading``: ``--http-nonreading-connections`` HTTP connections that pipeline
  1 MiB gets forever and never read (``http_abuse.HttpNonReaders``).

Under the HTTP abuses a legitimate HTTP client also sends ``/offset`` on a new connection
every ``VICTIM_INTERVAL_S`` (``http_abuse.http_request``): its p99 and worst, and how many
of its requests failed, are reported too.

Reported per abuse: the victim's round trips, p50, p99 and worst in ms, beside the quiet
ones, and the broker's RSS at the end. The abusers run in threads of this process; every
socket has a timeout and every loop ends with its abuse. ``tools/bench`` runs the same
measurement as its ``abuse`` scenario (``bench_row``); ``tests/integration`` use the clients.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from meta.bench import http_abuse
from meta.bench.abuser import SOCKET_TIMEOUT_S, Abuse, NonReaders
from meta.bench.broker import BenchBroker, report_in_work_directory
from meta.bench.http import HttpBenchBroker
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
GETS_PER_SEND = 1000
ABUSES = (
    "gets",
    "long-poll",
    "idle",
    "slowloris",
    "http-slowloris",
    "http-pipelined",
    "http-nonreading",
)
ROW_NAMES = tuple(name.replace("-", "_") for name in ABUSES)
"""The abuses as ``bench_row`` names its columns (``gets_p99_ms``, ``http_slowloris_p99_ms``)."""
HTTP_CONNECTIONS_MAX = 64
HEADER_TIMEOUT_S = 4
HTTP_VICTIM_TIMEOUT_S = 10.0


class AbuseBroker(HttpBenchBroker):
    """The abuse benchmark's broker: ``HttpBenchBroker`` with ``maxHttpConnections`` at
    ``HTTP_CONNECTIONS_MAX`` and ``headerTimeoutInSeconds`` at ``HEADER_TIMEOUT_S``."""

    def server_ini(self) -> str:
        limits = (
            f"maxHttpConnections={HTTP_CONNECTIONS_MAX}\n"
            f"headerTimeoutInSeconds={HEADER_TIMEOUT_S}\n"
        )
        return super().server_ini().replace("[system]\n", "[system]\n" + limits, 1)


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


class NonReadingGets(NonReaders):
    """``connections`` connections sending ``get <topic> ... 1048576`` forever, reading
    nothing (``NonReaders``)."""

    def __init__(self, address: tuple[str, int], topic: str, connections: int) -> None:
        gets = (encode(Get(topic, GROUP, 0, 0, GET_BYTES, n)) for n in range(GETS_PER_SEND))
        super().__init__(lambda: _connect(address), b"".join(gets), connections)


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


class IdleConnections(Abuse):
    """``connections`` connections that connect and never send a byte."""

    def __init__(self, address: tuple[str, int], connections: int) -> None:
        super().__init__()
        self.sockets = [_connect(address) for _ in range(connections)]


class Slowloris(Abuse):
    """``connections`` connections sending a request header a byte each at a time, every
    ``interval_s``, never finishing it (a reconnect replaces one the broker closed)."""

    HEADER = b"get " + b"x" * 4000 + b" group 0 0 1048576 1\r\n"

    def __init__(
        self, address: tuple[str, int], connections: int, interval_s: float = SLOW_BYTE_INTERVAL_S
    ) -> None:
        super().__init__()
        self._address = address
        self._interval_s = interval_s
        self.sockets = [_connect(address) for _ in range(connections)]
        self.threads.append(threading.Thread(target=self._trickle, daemon=True))

    def _trickle(self) -> None:
        position = 0
        while not self.stop.wait(self._interval_s):
            byte = self.HEADER[position : position + 1]
            position = (position + 1) % len(self.HEADER)
            for index, sock in enumerate(self.sockets):
                try:
                    sock.send(byte)
                except OSError:
                    sock.close()
                    try:
                        self.sockets[index] = _connect(self._address)
                    except OSError:
                        return


def victim_round_trips(address: tuple[str, int], seconds: float) -> list[float]:
    """``version`` round trips on one connection, one every ``VICTIM_INTERVAL_S``, for
    ``seconds``; each in seconds."""
    rounds: list[float] = []
    deadline = time.monotonic() + seconds
    with _connect(address) as sock:
        while time.monotonic() < deadline:
            began = time.monotonic()
            request(sock, encode(Version(len(rounds) + 1)))
            rounds.append(time.monotonic() - began)
            time.sleep(VICTIM_INTERVAL_S)
    return rounds


def summary(rounds: list[float]) -> dict:
    """Round trips, p50, p99 and worst, in ms."""
    ordered = sorted(rounds)
    return {
        "round_trips": len(ordered),
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[max(0, int(len(ordered) * 0.99) - 1)] * 1000,
        "max_ms": ordered[-1] * 1000,
    }


def broker_rss_mib(broker: BenchBroker) -> float:
    status = Path(f"/proc/{broker.process.pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def abuses(
    args: argparse.Namespace, address: tuple[str, int], http_address: tuple[str, int]
) -> dict[str, Callable[[], Abuse]]:
    """Each abuse's name and how to start it."""
    return {
        "gets": lambda: NonReadingGets(address, TOPIC, args.get_connections).start(),
        "long-poll": lambda: LongPollStorm(
            address, TOPIC + "-poll", args.poll_connections, args.polls
        ).run_in_turns(),
        "idle": lambda: IdleConnections(address, args.idle_connections).start(),
        "slowloris": lambda: Slowloris(address, args.slow_connections).start(),
        "http-slowloris": lambda: http_abuse.HttpSlowloris(
            http_address, args.http_slow_connections
        ).start(),
        "http-pipelined": lambda: http_abuse.HttpPipelined(
            http_address, TOPIC, args.http_pipelined_connections
        ).start(),
        "http-nonreading": lambda: http_abuse.HttpNonReaders(
            http_address, TOPIC, args.http_nonreading_connections
        ).start(),
    }


def http_victim_round_trips(address: tuple[str, int], seconds: float) -> tuple[list[float], int]:
    """``/offset`` on a new connection every ``VICTIM_INTERVAL_S`` for ``seconds``: the
    seconds of each answered one, and how many were not answered 200."""
    request = http_abuse.offset_request(TOPIC)
    rounds: list[float] = []
    failed = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        began = time.monotonic()
        if http_abuse.http_request(address, request, HTTP_VICTIM_TIMEOUT_S) == 200:
            rounds.append(time.monotonic() - began)
        else:
            failed += 1
        time.sleep(VICTIM_INTERVAL_S)
    return rounds, failed


def abused_turn(name: str, broker: BenchBroker, http_address: tuple[str, int], seconds: float):
    """The victims' round trips while one abuse runs (started by the caller): the TCP
    ``version`` one, and for an HTTP abuse the HTTP ``/offset`` one beside it."""
    http_result: list = []
    http_victim = None
    if name.startswith("http-"):

        def run_http_victim() -> None:
            http_result.append(http_victim_round_trips(http_address, seconds))

        http_victim = threading.Thread(target=run_http_victim, daemon=True)
        http_victim.start()
    row = {"abuse": name, **summary(victim_round_trips(broker.address, seconds))}
    if http_victim is not None:
        http_victim.join(seconds + HTTP_VICTIM_TIMEOUT_S * 2)
        rounds, failed = http_result[0] if http_result else ([], -1)
        http = summary(rounds) if rounds else {"p99_ms": -1.0, "max_ms": -1.0}
        row.update(
            http_answered=len(rounds),
            http_p99_ms=http["p99_ms"],
            http_max_ms=http["max_ms"],
            http_failed=failed,
        )
    row["broker_rss_mib"] = broker_rss_mib(broker)
    return row


def run(args: argparse.Namespace, work: Path) -> dict:
    topics = {TOPIC: 1, TOPIC + "-poll": 1}
    with AbuseBroker(work / "broker", threshold=0, topics=topics) as broker:
        broker.wait_for_http()
        http_address = (broker.address[0], broker.http_port)
        with _connect(broker.address) as sock:  # about 1 MiB for the gets to return
            for _ in range(4):
                put_end(sock, TOPIC, b"x" * (256 * 1024))
        quiet = summary(victim_round_trips(broker.address, args.seconds))
        rows = []
        for name, start in abuses(args, broker.address, http_address).items():
            with start():
                rows.append(abused_turn(name, broker, http_address, args.seconds))
    return {"seconds": args.seconds, "quiet": quiet, "abuses": rows}


def bench_row(report: dict) -> dict:
    """``tools/bench``'s ``abuse`` row: the quiet p99 and each abuse's p99 and worst; its
    messages are the victim's round trips over all the turns (quiet and abused)."""
    turns = [report["quiet"], *report["abuses"]]
    messages = sum(turn["round_trips"] for turn in turns)
    seconds = report["seconds"] * len(turns)
    row = {
        "messages": messages,
        "seconds": seconds,
        "msg_per_s": messages / seconds,
        "quiet_p99_ms": report["quiet"]["p99_ms"],
    }
    for entry in report["abuses"]:
        name = entry["abuse"].replace("-", "_")
        row[f"{name}_p99_ms"] = entry["p99_ms"]
        row[f"{name}_max_ms"] = entry["max_ms"]
        row[f"{name}_rss_mib"] = entry["broker_rss_mib"]
        if "http_p99_ms" in entry:
            row[f"{name}_http_p99_ms"] = entry["http_p99_ms"]
            row[f"{name}_http_failed"] = entry["http_failed"]
    return row


def format_report(report: dict) -> str:
    quiet = report["quiet"]
    lines = [
        f"victim's version round trip, {report['seconds']:g} s each "
        f"(p50 / p99 / worst, ms; broker RSS; HTTP /offset on a new connection: p99 / worst, "
        f"ms, answered, failed)",
        f"  quiet            {quiet['p50_ms']:8.2f} {quiet['p99_ms']:8.2f} {quiet['max_ms']:8.2f}",
    ]
    for entry in report["abuses"]:
        line = (
            f"  {entry['abuse']:<15}  {entry['p50_ms']:8.2f} {entry['p99_ms']:8.2f} "
            f"{entry['max_ms']:8.2f}  {entry['broker_rss_mib']:.0f} MiB"
        )
        if "http_p99_ms" in entry:
            line += (
                f"  http {entry['http_p99_ms']:8.2f} {entry['http_max_ms']:8.2f} "
                f"{entry['http_answered']} ok {entry['http_failed']} failed"
            )
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m meta.bench.abuse", description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0, help="per abuse and quiet")
    parser.add_argument("--get-connections", type=int, default=20)
    parser.add_argument("--poll-connections", type=int, default=64)
    parser.add_argument("--polls", type=int, default=1500, help="long polls per connection")
    parser.add_argument("--idle-connections", type=int, default=500)
    parser.add_argument("--slow-connections", type=int, default=200)
    parser.add_argument("--http-slow-connections", type=int, default=HTTP_CONNECTIONS_MAX + 16)
    parser.add_argument("--http-pipelined-connections", type=int, default=20)
    parser.add_argument("--http-nonreading-connections", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    return report_in_work_directory(parser.parse_args(argv), "metaq-abuse-", run, format_report)


if __name__ == "__main__":
    raise SystemExit(main())
