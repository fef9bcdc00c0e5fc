"""What a synchronous producer with an fsync per ack can reach here: floors and the broker.

``python -m meta.bench.fsync_floor`` runs one synchronous producer (1 KB puts, one at a time,
over 127.0.0.1) against minimal servers in plain Python, no Twisted and no protocol parsing,
each a forked child, and against the broker itself:

* ``no-fsync``: read, write to the file, reply: the loopback round trip;
* ``inline``: read, write, fdatasync, reply, all on the thread that reads the socket (what
  the broker may not do: its fsync stays off the reactor thread);
* ``worker``: the reading thread writes and hands the fdatasync to a worker thread, which
  wakes the reading thread through a pipe to send the reply (the broker's design);
* ``worker-replies``: as ``worker``, but the worker thread sends the reply itself;
* ``aio``: no Python thread: the reading thread submits a Linux AIO ``IOCB_CMD_FDSYNC``
  (``io_submit`` through ctypes, x86_64 only) and sends the reply when its eventfd fires;
* ``broker``: ``meta.server`` at ``unflushThreshold=1`` (``meta.bench.broker.BenchBroker``).

The disk's rate moves a lot on a shared machine, so each producer is paired with the
fdatasync loop of ``tools/bench`` (1 KB appends, each followed by ``os.fdatasync``) run in
turns with it, ``--slices`` turns of each per round, and reported as a fraction of it
(median over ``--rounds``). The figures bound the ``tools/bench`` target "sync producer at
``unflushThreshold=1`` >= 80% of the fdatasync rate": the broker does at least what one of
these loops does. Every loop is bounded in time; servers exit when their client closes and
are killed if they do not. Runs on the caller's thread.
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
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from meta.bench.load import BenchBroker, FdatasyncLoop, PutFrames

_FRAMES = PutFrames("bench-sync", 1024)
MESSAGE = _FRAMES.header(1) + _FRAMES.body  # a put of 1 KB; one is outstanding at a time
MESSAGE_BYTES = len(MESSAGE)
REPLY = b"result 200 0 1\r\n"
VARIANTS = ("no-fsync", "inline", "worker", "worker-replies", "aio", "broker")
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

    def woken() -> None:
        connection.sendall(REPLY * sum(os.read(wake_read, 4096)))

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        _poll_loop(connection, fd, wake_read, woken, jobs.put)
    finally:
        jobs.put(None)
        thread.join(JOIN_TIMEOUT_S)
        os.close(wake_read)
        os.close(wake_write)


def _serve_aio(connection: socket.socket, fd: int) -> None:
    aio = AioFdatasync(fd)
    waiting: list[int] = []

    def woken() -> None:
        for _ in range(aio.completed()):
            connection.sendall(REPLY * waiting.pop(0))

    def ended_messages(ended: int) -> None:
        waiting.append(ended)
        aio.submit()

    try:
        _poll_loop(connection, fd, aio.eventfd, woken, ended_messages)
    finally:
        aio.close()


def _poll_loop(connection: socket.socket, fd: int, wake_fd: int, woken, ended_messages) -> None:
    """Serve ``connection`` until it closes: each read is written to ``fd`` and the messages
    it ends go to ``ended_messages(count)``; ``woken()`` runs when ``wake_fd`` is readable."""
    poller = select.epoll()
    poller.register(connection.fileno(), select.EPOLLIN)
    poller.register(wake_fd, select.EPOLLIN)
    missing = MESSAGE_BYTES
    try:
        while True:
            for ready, _event in poller.poll():
                if ready == wake_fd:
                    woken()
                    continue
                data = connection.recv(65536)
                if not data:
                    return
                ended, missing = _messages(fd, data, missing)
                if ended:
                    ended_messages(ended)
    finally:
        poller.close()


def aio_available() -> bool:
    try:
        AioFdatasync(-1).close()
    except OSError:
        return False
    return True


# --- the client and the report -----------------------------------------------------------------


class _Producer:
    """One synchronous producer: a put, then its whole reply (``result <code> <length>
    <opaque>`` and a body of that length), in slices."""

    def __init__(self, port: int, message: bytes, name: str) -> None:
        self.socket = socket.create_connection(("127.0.0.1", port), timeout=JOIN_TIMEOUT_S)
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.message, self.name = message, name
        self.count, self.seconds = 0, 0.0

    def run_for(self, seconds: float) -> None:
        client, message, start = self.socket, self.message, time.monotonic()
        while time.monotonic() - start < seconds:
            client.sendall(message)
            reply = client.recv(4096)
            while not (end := reply.find(b"\r\n")) >= 0 or len(reply) < end + 2 + int(
                reply.split(b" ", 3)[2]
            ):
                more = client.recv(4096)
                if not more:
                    raise ConnectionError(f"the {self.name} server closed the connection")
                reply += more
            if not reply.startswith(b"result 200 "):
                raise ConnectionError(f"the {self.name} server answered {reply[:200]!r}")
            self.count += 1
        self.seconds += time.monotonic() - start


def paired_rates(variant: str, directory: str, seconds: float, slices: int) -> dict | None:
    """The producer against a fresh ``variant`` server and the fdatasync loop, in turns of
    ``seconds / slices`` each, so both see the same disk; None: ``variant`` cannot run here."""
    if variant == "aio" and not aio_available():
        return None
    with _Server(variant, directory) as port:
        producer = _Producer(port, MESSAGE, variant)
        disk = FdatasyncLoop(directory)
        try:
            producer.run_for(min(0.2, seconds))  # warm up (connection, first pages)
            producer.count, producer.seconds = 0, 0.0
            for _ in range(slices):
                disk.run_for(seconds / slices)
                producer.run_for(seconds / slices)
        finally:
            producer.socket.close()
            disk.close()
    fdatasync_per_s = disk.count / max(disk.seconds, 1e-9)
    per_s = producer.count / max(producer.seconds, 1e-9)
    return {"per_s": per_s, "fdatasync_per_s": fdatasync_per_s, "fraction": per_s / fdatasync_per_s}


class _Server:
    """A context manager giving the port of a ``variant`` server, stopped on exit: a child
    process for the minimal servers, ``meta.bench.broker.BenchBroker`` (``unflushThreshold=1``) for
    ``broker``."""

    def __init__(self, variant: str, directory: str) -> None:
        self.variant, self.directory = variant, directory

    def __enter__(self) -> int:
        if self.variant == "broker":
            self.broker_directory = tempfile.mkdtemp(prefix="floor-broker-", dir=self.directory)
            self.broker = BenchBroker(Path(self.broker_directory), threshold=1).start()
            return self.broker.port
        context = multiprocessing.get_context("fork")
        ports = context.Queue()
        self.process = context.Process(
            target=_serve, args=(self.variant, self.directory, ports), daemon=True
        )
        self.process.start()
        return ports.get(timeout=JOIN_TIMEOUT_S)

    def __exit__(self, *_exc) -> None:
        if self.variant == "broker":
            self.broker.stop()
            shutil.rmtree(self.broker_directory, ignore_errors=True)
            return
        self.process.join(JOIN_TIMEOUT_S)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(JOIN_TIMEOUT_S)


def run(arguments: argparse.Namespace) -> dict:
    directory = str(arguments.data_dir or tempfile.gettempdir())
    rounds = [
        {v: paired_rates(v, directory, arguments.seconds, arguments.slices) for v in VARIANTS}
        for _ in range(arguments.rounds)
    ]
    summary = {}
    for variant in VARIANTS:
        rows = [r[variant] for r in rounds if r[variant] is not None]
        summary[variant] = (
            {
                "median_per_s": statistics.median(row["per_s"] for row in rows),
                "median_fdatasync_per_s": statistics.median(row["fdatasync_per_s"] for row in rows),
                "median_fraction": statistics.median(row["fraction"] for row in rows),
                "fractions": [row["fraction"] for row in rows],
            }
            if rows
            else None
        )
    return {
        "data_dir": directory,
        "seconds": arguments.seconds,
        "slices": arguments.slices,
        "rounds": rounds,
        "summary": summary,
    }


def format_report(report: dict) -> str:
    lines = [
        f"one synchronous producer, 1 KB puts, fdatasync in {report['data_dir']}; each rate is "
        f"paired with the fdatasync loop run in turns with it ({report['slices']} slices of "
        "each per round); medians of the rounds:",
        f"  {'server':15s} {'puts/s':>8s} {'fdatasync/s':>12s} {'fraction':>9s}  rounds",
    ]
    for variant, row in report["summary"].items():
        if row is None:
            lines.append(f"  {variant:15s} unavailable here")
            continue
        each = ", ".join(f"{fraction:.0%}" for fraction in row["fractions"])
        lines.append(
            f"  {variant:15s} {row['median_per_s']:8.0f} {row['median_fdatasync_per_s']:12.0f} "
            f"{row['median_fraction']:9.0%}  {each}"
        )
    return "\n".join(lines)


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m meta.bench.fsync_floor",
        description="What one synchronous producer reaches, as a fraction of the disk's "
        "fdatasync rate measured in turns with it, against minimal Python servers that "
        "fdatasync before each reply (on the reading thread, on a worker thread, through "
        "Linux AIO) and against the broker at unflushThreshold=1: the floor under the "
        "broker's fsync-per-ack target.",
    )
    add = parser.add_argument
    add("--seconds", type=float, default=2.0, help="producer time per server and round")
    add("--slices", type=int, default=8, help="turns of producer and fdatasync loop per round")
    add("--rounds", type=int, default=3, help="rounds (the median is reported)")
    add("--data-dir", type=Path, help="directory to write and fsync in")
    add("--json", action="store_true", help="print JSON instead of a table")
    arguments = parser.parse_args(argv)
    if arguments.seconds <= 0 or arguments.rounds < 1 or arguments.slices < 1:
        parser.error("--seconds must be > 0, --rounds and --slices >= 1")
    return arguments


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    report = run(arguments)
    print(json.dumps(report, indent=2) if arguments.json else format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
