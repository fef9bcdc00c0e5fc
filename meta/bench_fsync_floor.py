"""What a synchronous producer with an fsync per ack can reach here, without any broker.

``python -m meta.bench_fsync_floor`` measures, in one run, the disk's fdatasync rate (1 KB
appends, as ``tools/bench``) and one synchronous producer (1 KB puts, one at a time, over
127.0.0.1) against minimal servers in plain Python, no Twisted and no protocol parsing, each
a child process:

* ``no-fsync``: read, write to the file, reply: the loopback round trip;
* ``inline``: read, write, fdatasync, reply, all on the thread that reads the socket (what
  the broker may not do: issue 2 keeps fsync off the reactor thread);
* ``worker``: the reading thread writes and hands the fdatasync to a worker thread, which
  wakes the reading thread through a pipe to send the reply (the broker's design);
* ``worker-replies``: as ``worker``, but the worker thread sends the reply itself;
* ``aio``: no Python thread: the reading thread submits a Linux AIO ``IOCB_CMD_FDSYNC``
  (``io_submit`` through ctypes, x86_64 only) and sends the reply when its eventfd fires.

Each variant's rate is reported as a fraction of the fdatasync rate of the same round
(median over ``--rounds``). The figures bound the ``tools/bench`` target "sync producer at
``unflushThreshold=1`` >= 80% of the fdatasync rate": a broker is a superset of one of these
loops. Every loop is bounded in time; servers exit when their client closes and are killed
if they do not. Runs on the caller's thread; servers in forked children.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import multiprocessing
import os
import platform
import queue
import select
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

MESSAGE_BYTES = 1024 + 40  # a 1 KB body and a put header
REPLY = b"result 200 0 1\r\n"
VARIANTS = ("no-fsync", "inline", "worker", "worker-replies", "aio")
JOIN_TIMEOUT_S = 10.0


# --- Linux AIO fdatasync (x86_64 syscall numbers) ----------------------------------------------


class _Iocb(ctypes.Structure):
    _fields_ = [
        ("aio_data", ctypes.c_uint64),
        ("aio_key", ctypes.c_uint32),
        ("aio_rw_flags", ctypes.c_int32),
        ("aio_lio_opcode", ctypes.c_uint16),
        ("aio_reqprio", ctypes.c_int16),
        ("aio_fildes", ctypes.c_uint32),
        ("aio_buf", ctypes.c_uint64),
        ("aio_nbytes", ctypes.c_uint64),
        ("aio_offset", ctypes.c_int64),
        ("aio_reserved2", ctypes.c_uint64),
        ("aio_flags", ctypes.c_uint32),
        ("aio_resfd", ctypes.c_uint32),
    ]


class _IoEvent(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_uint64),
        ("obj", ctypes.c_uint64),
        ("res", ctypes.c_int64),
        ("res2", ctypes.c_int64),
    ]


class AioFdatasync:
    """One outstanding ``IOCB_CMD_FDSYNC`` at a time; completion signalled on ``eventfd``."""

    SYSCALLS = {"io_setup": 206, "io_destroy": 207, "io_getevents": 208, "io_submit": 209}

    def __init__(self, fd: int) -> None:
        if platform.machine() != "x86_64" or not sys.platform.startswith("linux"):
            raise OSError("Linux AIO is measured on x86_64 Linux only")
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.syscall.restype = ctypes.c_long
        self._context = ctypes.c_ulong(0)
        if self._libc.syscall(self.SYSCALLS["io_setup"], 8, ctypes.byref(self._context)) < 0:
            raise OSError(ctypes.get_errno(), "io_setup failed")
        self.eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._iocb = _Iocb(aio_lio_opcode=3, aio_fildes=fd, aio_flags=1, aio_resfd=self.eventfd)
        self._pointers = (ctypes.POINTER(_Iocb) * 1)(ctypes.pointer(self._iocb))
        self._events = (_IoEvent * 8)()
        self._no_wait = (ctypes.c_long * 2)(0, 0)

    def close(self) -> None:
        self._libc.syscall(self.SYSCALLS["io_destroy"], self._context)
        os.close(self.eventfd)

    def submit(self) -> None:
        if self._libc.syscall(self.SYSCALLS["io_submit"], self._context, 1, self._pointers) != 1:
            raise OSError(ctypes.get_errno(), "io_submit failed")

    def completed(self) -> int:
        """Reap finished fdatasyncs (after the eventfd fired); raise if one failed."""
        os.eventfd_read(self.eventfd)
        count = self._libc.syscall(
            self.SYSCALLS["io_getevents"], self._context, 0, 8, self._events, self._no_wait
        )
        for index in range(max(count, 0)):
            if self._events[index].res < 0:
                raise OSError(-self._events[index].res, "AIO fdatasync failed")
        return max(count, 0)


# --- the servers (child processes) -------------------------------------------------------------


def _serve(variant: str, directory: str, ports: multiprocessing.Queue) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(JOIN_TIMEOUT_S)
    ports.put(listener.getsockname()[1])
    connection, _ = listener.accept()
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    path = os.path.join(directory, f"floor-{variant}-{os.getpid()}.tmp")
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_APPEND, 0o600)
    try:
        if variant in ("no-fsync", "inline"):
            _serve_on_one_thread(connection, fd, fsync=variant == "inline")
        elif variant == "aio":
            _serve_aio(connection, fd)
        else:
            _serve_with_worker(connection, fd, worker_replies=variant == "worker-replies")
    finally:
        os.close(fd)
        os.unlink(path)


def _messages(fd: int, data: bytes, missing: int) -> tuple[int, int]:
    """Write a read to the file; return (whole messages it ended, bytes still missing)."""
    os.write(fd, data)
    ended = 0
    missing -= len(data)
    while missing <= 0:
        ended += 1
        missing += MESSAGE_BYTES
    return ended, missing


def _serve_on_one_thread(connection: socket.socket, fd: int, fsync: bool) -> None:
    missing = MESSAGE_BYTES
    while data := connection.recv(65536):
        ended, missing = _messages(fd, data, missing)
        if ended:
            if fsync:
                os.fdatasync(fd)
            connection.sendall(REPLY * ended)


def _serve_with_worker(connection: socket.socket, fd: int, worker_replies: bool) -> None:
    jobs: queue.SimpleQueue = queue.SimpleQueue()
    wake_read, wake_write = os.pipe()

    def worker() -> None:
        while (ended := jobs.get()) is not None:
            os.fdatasync(fd)
            if worker_replies:
                connection.sendall(REPLY * ended)
            else:
                os.write(wake_write, bytes([ended]))

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    poller = select.epoll()
    poller.register(connection.fileno(), select.EPOLLIN)
    poller.register(wake_read, select.EPOLLIN)
    missing = MESSAGE_BYTES
    try:
        while True:
            for ready, _event in poller.poll():
                if ready == wake_read:
                    connection.sendall(REPLY * sum(os.read(wake_read, 4096)))
                    continue
                data = connection.recv(65536)
                if not data:
                    return
                ended, missing = _messages(fd, data, missing)
                if ended:
                    jobs.put(ended)
    finally:
        jobs.put(None)
        thread.join(JOIN_TIMEOUT_S)
        poller.close()
        os.close(wake_read)
        os.close(wake_write)


def _serve_aio(connection: socket.socket, fd: int) -> None:
    aio = AioFdatasync(fd)
    poller = select.epoll()
    poller.register(connection.fileno(), select.EPOLLIN)
    poller.register(aio.eventfd, select.EPOLLIN)
    missing, waiting = MESSAGE_BYTES, []
    try:
        while True:
            for ready, _event in poller.poll():
                if ready == aio.eventfd:
                    for _ in range(aio.completed()):
                        connection.sendall(REPLY * waiting.pop(0))
                    continue
                data = connection.recv(65536)
                if not data:
                    return
                ended, missing = _messages(fd, data, missing)
                if ended:
                    waiting.append(ended)
                    aio.submit()
    finally:
        poller.close()
        aio.close()


def aio_available() -> bool:
    try:
        AioFdatasync(-1).close()
    except OSError:
        return False
    return True


# --- the client and the report -----------------------------------------------------------------


def fdatasync_rate(directory: str, seconds: float) -> float:
    """1 KB appends, each followed by ``os.fdatasync``, for ``seconds``; per second."""
    path = os.path.join(directory, f"floor-fdatasync-{os.getpid()}.tmp")
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_APPEND, 0o600)
    count, block = 0, b"x" * 1024
    try:
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            os.write(fd, block)
            os.fdatasync(fd)
            count += 1
        return count / (time.monotonic() - start)
    finally:
        os.close(fd)
        os.unlink(path)


def sync_producer_rate(variant: str, directory: str, seconds: float) -> float | None:
    """One put at a time against a fresh ``variant`` server for ``seconds``; puts per second
    (None: the variant cannot run here, e.g. AIO off x86_64)."""
    if variant == "aio" and not aio_available():
        return None
    context = multiprocessing.get_context("fork")
    ports = context.Queue()
    server = context.Process(target=_serve, args=(variant, directory, ports), daemon=True)
    server.start()
    try:
        client = socket.create_connection(("127.0.0.1", ports.get(timeout=JOIN_TIMEOUT_S)))
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client.settimeout(JOIN_TIMEOUT_S)
        message, count = b"p" * MESSAGE_BYTES, 0
        start = time.monotonic()
        with client:
            while time.monotonic() - start < seconds:
                client.sendall(message)
                received = 0
                while received < len(REPLY):
                    chunk = client.recv(len(REPLY) - received)
                    if not chunk:
                        raise ConnectionError(f"the {variant} server closed the connection")
                    received += len(chunk)
                count += 1
            elapsed = time.monotonic() - start
        return count / elapsed
    finally:
        server.join(JOIN_TIMEOUT_S)
        if server.is_alive():
            server.kill()
            server.join(JOIN_TIMEOUT_S)


def run(arguments: argparse.Namespace) -> dict:
    directory = str(arguments.data_dir or tempfile.gettempdir())
    rounds = []
    for _ in range(arguments.rounds):
        disk = fdatasync_rate(directory, arguments.seconds)
        rates = {v: sync_producer_rate(v, directory, arguments.seconds) for v in VARIANTS}
        rounds.append({"fdatasync_per_s": disk, "rates": rates})
    summary = {}
    for variant in VARIANTS:
        fractions = [
            r["rates"][variant] / r["fdatasync_per_s"]
            for r in rounds
            if r["rates"][variant] is not None
        ]
        rates = [r["rates"][variant] for r in rounds if r["rates"][variant] is not None]
        summary[variant] = (
            {
                "median_per_s": statistics.median(rates),
                "median_fraction": statistics.median(fractions),
                "fractions": fractions,
            }
            if rates
            else None
        )
    return {
        "data_dir": directory,
        "seconds": arguments.seconds,
        "rounds": rounds,
        "summary": summary,
    }


def format_report(report: dict) -> str:
    disk = [r["fdatasync_per_s"] for r in report["rounds"]]
    lines = [
        f"fdatasync (1 KB appends) in {report['data_dir']}: "
        + ", ".join(f"{rate:.0f}/s" for rate in disk),
        "one synchronous producer against a minimal Python server (median of rounds):",
    ]
    for variant, row in report["summary"].items():
        if row is None:
            lines.append(f"  {variant:15s} unavailable here")
            continue
        each = ", ".join(f"{fraction:.0%}" for fraction in row["fractions"])
        lines.append(
            f"  {variant:15s} {row['median_per_s']:8.0f}/s  "
            f"{row['median_fraction']:5.0%} of fdatasync  (rounds: {each})"
        )
    return "\n".join(lines)


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m meta.bench_fsync_floor",
        description="Measure the fdatasync rate and what one synchronous producer reaches "
        "against minimal Python servers that fsync before each reply (inline, on a worker "
        "thread, through Linux AIO): the floor under the broker's fsync-per-ack target.",
    )
    parser.add_argument("--seconds", type=float, default=2.0, help="duration of each measurement")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (the median is reported)")
    parser.add_argument("--data-dir", type=Path, help="directory to write and fsync in")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    arguments = parser.parse_args(argv)
    if arguments.seconds <= 0 or arguments.rounds < 1:
        parser.error("--seconds must be > 0 and --rounds >= 1")
    return arguments


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    report = run(arguments)
    print(json.dumps(report, indent=2) if arguments.json else format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
