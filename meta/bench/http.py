"""Benchmark of the HTTP protocol beside the TCP protocol on one broker, measured in turns.

``python -m meta.bench.http`` starts one broker (``unflushThreshold=1000``, ``--http``) and
measures, alternating the two transports ``--rounds`` times so that both see the same
machine load:

* put: ``--connections`` keep-alive HTTP connections, one put in flight on each, against
  as many synchronous TCP connections (both driven by one selector loop in this process);
* get: a ``--backlog-mb`` backlog read from offset 0 with 1 MiB gets over one HTTP
  keep-alive connection, against the raw TCP consume of ``meta.bench.load.run_consume``;
  both clients read each response straight into one reused buffer.

Besides the rates, the broker's CPU time (user + system, from ``/proc``) per put and per MB
got is reported for each transport: it moves less with the machine's load than the rates.

Targets: HTTP puts at least 30% of the TCP rate, HTTP gets at least 50% of the TCP rate
(medians of the rounds). Output: a table, or JSON with ``--json``. Single-threaded.
"""

from __future__ import annotations

import argparse
import selectors
import statistics
import time
from pathlib import Path

from meta.bench.broker import HOST, BenchBroker, BenchError, report_in_work_directory
from meta.bench.load import (
    REPLY_TIMEOUT_S,
    PutFrames,
    connect,
    count_records,
    run_consume,
    run_pipelined,
)
from meta.ports import free_port

PUT_TOPIC = "bench-concurrent"
GET_TOPIC = "bench-consume"
GET_BYTES = 1024 * 1024
HEAD_BYTES_MAX = 16 * 1024
PUT_TARGET = 0.30
GET_TARGET = 0.50


class HttpBenchBroker(BenchBroker):
    """A ``BenchBroker`` that also serves the HTTP protocol on ``http_port``."""

    http_port: int = 0

    def extra_arguments(self) -> list[str]:
        if not self.http_port:
            self.http_port = free_port()
        properties = self.directory / "jettyBroker.properties"
        properties.write_text(f"serverPort={self.http_port}\n")
        return ["--http", str(properties)]

    def wait_for_http(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while "HTTP protocol serving" not in self.log_tail(100_000):
            if time.monotonic() > deadline or not self.alive():
                raise BenchError(f"the HTTP port did not open:\n{self.log_tail()}")
            time.sleep(0.05)


def http_put_request(frames: PutFrames) -> bytes:
    path = b"/put/0?topic=%s&partition=0&flag=0&length=%d" % (
        frames.topic.encode(),
        len(frames.body),
    )
    head = b"POST %s HTTP/1.1\r\nHost: b\r\nContent-Length: %d\r\n\r\n" % (path, len(frames.body))
    return head + frames.body


def drive(address: tuple[str, int], requests, connections: int, duration_s: float) -> dict:
    """``connections`` sockets, one request in flight on each, for ``duration_s``.

    ``requests(number)`` is the bytes of request ``number``; an answer is complete when
    ``complete(buffer)`` of the transport says so (HTTP: headers and Content-Length body;
    TCP: one ``result`` frame).
    """
    make, complete = requests
    selector = selectors.DefaultSelector()
    sockets = [connect(address) for _ in range(connections)]
    buffers = {sock: bytearray() for sock in sockets}
    sent = answered = 0
    start = time.monotonic()
    deadline = start + duration_s
    for sock in sockets:
        sent += 1
        sock.sendall(make(sent))
        selector.register(sock, selectors.EVENT_READ)
    try:
        open_count = connections
        while open_count:
            events = selector.select(REPLY_TIMEOUT_S)
            if not events:
                raise BenchError(f"no answer for {REPLY_TIMEOUT_S} s")
            for key, _ in events:
                sock = key.fileobj
                data = sock.recv(65536)
                if not data:
                    raise BenchError("the broker closed a connection")
                buffer = buffers[sock]
                buffer += data
                if not complete(buffer):
                    continue
                buffer.clear()
                answered += 1
                if time.monotonic() < deadline:
                    sent += 1
                    sock.sendall(make(sent))
                else:
                    selector.unregister(sock)
                    open_count -= 1
    finally:
        selector.close()
        for sock in sockets:
            sock.close()
    seconds = time.monotonic() - start
    return {"messages": answered, "seconds": seconds, "msg_per_s": answered / seconds}


def http_complete(buffer: bytearray) -> bool:
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return False
    if not buffer.startswith(b"HTTP/1.1 200"):
        raise BenchError(f"HTTP answer {bytes(buffer[:200])!r}")
    marker = buffer.find(b"Content-Length: ", 0, end)
    length = int(buffer[marker + 16 : buffer.find(b"\r\n", marker)])
    return len(buffer) >= end + 4 + length


def tcp_complete(buffer: bytearray) -> bool:
    end = buffer.find(b"\r\n")
    if end < 0:
        return False
    tokens = bytes(buffer[:end]).split(b" ")
    if tokens[1] != b"200":
        raise BenchError(f"TCP answer {bytes(buffer[:200])!r}")
    return len(buffer) >= end + 2 + int(tokens[2])


def read_http_response(sock, buffer: bytearray) -> tuple[int, memoryview]:
    """Read one HTTP/1.1 response with a ``Content-Length`` into ``buffer``: its status and
    its body, with no copy (as ``meta.bench.load.read_reply`` reads a TCP reply).

    Only for one request in flight: nothing may follow the response on the wire.
    """
    view, have = memoryview(buffer), 0
    while (end := buffer.find(b"\r\n\r\n", 0, have)) < 0:
        if have >= HEAD_BYTES_MAX:
            raise BenchError("HTTP response head too long")
        have += _receive_some(sock, view[have:HEAD_BYTES_MAX])
    head = bytes(buffer[:end]).lower()
    marker = head.find(b"\r\ncontent-length:")
    if marker < 0:
        raise BenchError(f"HTTP response without Content-Length: {head[:200]!r}")
    length = int(head[marker + 17 :].split(b"\r\n", 1)[0])
    total = end + 4 + length
    if total > len(buffer) or have > total:
        raise BenchError(f"HTTP response of {total} bytes does not fit, or bytes follow it")
    while have < total:
        have += _receive_some(sock, view[have:total])
    return int(head[9:12]), view[end + 4 : total]


def _receive_some(sock, target: memoryview) -> int:
    count = sock.recv_into(target)
    if not count:
        raise BenchError("the broker closed the connection")
    return count


def http_consume(address: tuple[str, int], topic: str, max_bytes: int) -> dict:
    """Read from offset 0 with 1 MiB HTTP gets on one keep-alive connection until caught up;
    each response is read straight into one reused buffer, as ``run_consume`` reads."""
    offset = records = gets = 0
    buffer = bytearray(GET_BYTES + HEAD_BYTES_MAX)
    start = time.monotonic()
    with connect(address) as sock:
        while offset < max_bytes:
            gets += 1
            sock.sendall(
                b"GET /get/0?topic=%s&partition=0&offset=%d&maxsize=%d HTTP/1.1\r\nHost: b\r\n\r\n"
                % (topic.encode(), offset, GET_BYTES)
            )
            status, body = read_http_response(sock, buffer)
            if status == 404:
                break
            if status != 200:
                raise BenchError(f"HTTP get at {offset}: {status} {bytes(body[:200])!r}")
            count, used = count_records(body)
            if count == 0:
                raise BenchError(f"HTTP get at {offset} returned no complete record")
            records, offset = records + count, offset + used
    seconds = max(time.monotonic() - start, 1e-9)
    return {"messages": records, "bytes": offset, "gets": gets, "mb_per_s": offset / seconds / 1e6}


def run(arguments: argparse.Namespace, work: Path) -> dict:
    broker = HttpBenchBroker(work / "broker", threshold=1000)
    broker.directory.mkdir(parents=True)
    with broker:
        broker.wait_for_http()
        http_address = (HOST, broker.http_port)
        frames = PutFrames(PUT_TOPIC, arguments.message_bytes)
        http_put = http_put_request(frames)
        tcp_requests = (lambda number: frames.header(number) + frames.body, tcp_complete)
        http_requests = (lambda number: http_put, http_complete)
        puts: dict[str, list[float]] = {"tcp": [], "http": []}
        cpu_us: dict[str, list[float]] = {"tcp": [], "http": []}
        totals = {"messages": 0, "seconds": 0.0}  # of the HTTP put turns
        for _ in range(arguments.rounds):
            for name, address, requests in (
                ("tcp", broker.address, tcp_requests),
                ("http", http_address, http_requests),
            ):
                cpu_before = broker.cpu_seconds()
                result = drive(address, requests, arguments.connections, arguments.duration_s)
                cpu = broker.cpu_seconds() - cpu_before
                puts[name].append(result["msg_per_s"])
                cpu_us[name].append(cpu / max(result["messages"], 1) * 1e6)
                if name == "http":
                    totals["messages"] += result["messages"]
                    totals["seconds"] += result["seconds"]
        backlog = arguments.backlog_mb * 1_000_000
        backlog_frames = PutFrames(GET_TOPIC, 1024)
        run_pipelined(broker.address, backlog_frames, 600.0, backlog // (1024 + 20) + 1)
        gets: dict[str, list[float]] = {"tcp": [], "http": []}
        get_cpu_ms: dict[str, list[float]] = {"tcp": [], "http": []}  # broker CPU per MB
        for _ in range(arguments.rounds):
            for name, consume in (
                ("tcp", lambda: run_consume(broker.address, GET_TOPIC, 600.0, backlog)),
                ("http", lambda: http_consume(http_address, GET_TOPIC, backlog)),
            ):
                cpu_before = broker.cpu_seconds()
                result = consume()
                cpu = broker.cpu_seconds() - cpu_before
                gets[name].append(result["mb_per_s"])
                get_cpu_ms[name].append(cpu * 1e3 / max(result["bytes"] / 1e6, 1e-9))
    put_ratio = statistics.median(puts["http"]) / statistics.median(puts["tcp"])
    get_ratio = statistics.median(gets["http"]) / statistics.median(gets["tcp"])
    return {
        "connections": arguments.connections,
        "message_bytes": arguments.message_bytes,
        "backlog_mb": arguments.backlog_mb,
        "put_msg_per_s": puts,
        "put_broker_cpu_us": cpu_us,
        "http_put_totals": totals,
        "get_mb_per_s": gets,
        "get_broker_cpu_ms_per_mb": get_cpu_ms,
        "put_ratio": put_ratio,
        "get_ratio": get_ratio,
        "put_target_met": put_ratio >= PUT_TARGET,
        "get_target_met": get_ratio >= GET_TARGET,
    }


def bench_row(report: dict) -> dict:
    """``tools/bench``'s ``http`` row from ``run``'s report: the HTTP put rate and its
    broker CPU per message beside TCP's, measured in turns, and the get rates (medians)."""
    puts, gets, cpu = report["put_msg_per_s"], report["get_mb_per_s"], report["put_broker_cpu_us"]
    return {
        "messages": report["http_put_totals"]["messages"],
        "seconds": report["http_put_totals"]["seconds"],
        "msg_per_s": statistics.median(puts["http"]),
        "tcp_msg_per_s": statistics.median(puts["tcp"]),
        "broker_cpu_us_per_msg": statistics.median(cpu["http"]),
        "tcp_broker_cpu_us_per_msg": statistics.median(cpu["tcp"]),
        "put_ratio": report["put_ratio"],
        "mb_per_s": statistics.median(gets["http"]),
        "tcp_mb_per_s": statistics.median(gets["tcp"]),
        "broker_cpu_ms_per_mb": statistics.median(report["get_broker_cpu_ms_per_mb"]["http"]),
        "tcp_broker_cpu_ms_per_mb": statistics.median(report["get_broker_cpu_ms_per_mb"]["tcp"]),
        "get_ratio": report["get_ratio"],
        "connections": report["connections"],
    }


def format_report(report: dict) -> str:
    def rates(values: list[float]) -> str:
        return " ".join(f"{value:,.0f}" for value in values)

    puts, gets = report["put_msg_per_s"], report["get_mb_per_s"]
    cpu, get_cpu = report["put_broker_cpu_us"], report["get_broker_cpu_ms_per_mb"]
    return "\n".join(
        [
            f"put, {report['connections']} connections, {report['message_bytes']} B (msg/s; "
            "broker CPU per message, median):",
            f"  tcp   {rates(puts['tcp'])}   {statistics.median(cpu['tcp']):.1f} us",
            f"  http  {rates(puts['http'])}   {statistics.median(cpu['http']):.1f} us",
            f"  http/tcp {report['put_ratio']:.2f} (target {PUT_TARGET:.2f}: "
            f"{'met' if report['put_target_met'] else 'MISSED'})",
            f"get of a {report['backlog_mb']} MB backlog, 1 MiB gets (MB/s; broker CPU per MB, "
            "median):",
            f"  tcp   {rates(gets['tcp'])}   {statistics.median(get_cpu['tcp']):.2f} ms",
            f"  http  {rates(gets['http'])}   {statistics.median(get_cpu['http']):.2f} ms",
            f"  http/tcp {report['get_ratio']:.2f} (target {GET_TARGET:.2f}: "
            f"{'met' if report['get_target_met'] else 'MISSED'})",
        ]
    )


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m meta.bench.http", description=__doc__)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--message-bytes", type=int, default=1024)
    parser.add_argument("--duration-s", type=float, default=3.0, help="per turn")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backlog-mb", type=int, default=500)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    return report_in_work_directory(arguments, "metaq-bench-http-", run, format_report)


if __name__ == "__main__":
    raise SystemExit(main())
