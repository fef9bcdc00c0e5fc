"""The durable write floor of a slave's replay: receive a backlog over TCP and make it durable.

A slave replaying a backlog at least receives its bytes over a loopback TCP connection, writes
them to a file and fdatasyncs them; ``meta.bench.slave`` runs that much, and nothing more, as a
turn of its own (``measure_floor``) so that the slave's replay rate and CPU can be read against
what the machine and its disk allow in the same run:

* a **receiver** process (``python -m meta.bench.slave_floor``, a child of the bench) listens
  on 127.0.0.1, prints its port, accepts one connection and receives ``--bytes`` bytes in
  reads of up to ``CHUNK_BYTES`` into one reused buffer, ``pwrite``\\ s each read to a new file
  in ``--directory`` (the slave's data directory), and has a flusher thread ``fdatasync`` the
  file as the store's group commit does: after each write it asks for a flush, and one
  ``fdatasync`` covers every write made before it started (``--flush-bytes`` > 0: a flush is
  asked for only once that many bytes are unflushed, the count rule of ``unflushThreshold``
  >= 1). Once the last byte is durable it prints one JSON line: seconds from the accept to
  the last ``fdatasync``'s end, and its own user and system CPU seconds over that interval
  (``getrusage``: both of its threads), then removes the file and exits;
* the **sender** is the caller's thread: it sends the same number of bytes in 1 MiB
  ``sendall`` calls. Its CPU is not the receiver's, so the receiver's CPU per MiB compares
  with the slave process's.

Every socket operation and wait is bounded (``TIMEOUT_S``); the receiver is killed if it
does not exit in time. Only 127.0.0.1. ``measure_floor`` runs on the caller's thread.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from meta.bench.broker import REPO
from meta.bench.load import BenchError

HOST = "127.0.0.1"
CHUNK_BYTES = 1 << 20
"""The receiver's read size and the sender's write size (the slave's fetch size is 1 MiB)."""
TIMEOUT_S = 120.0
"""Longest wait for any one step: the port line, a send, a receive, the result, the exit."""
FILE_NAME = "durable-write-floor.tmp"


class Receiver:
    """The receiver's state: the file, what is written and what is durable (two threads)."""

    def __init__(self, fd: int, flush_bytes: int) -> None:
        self.fd = fd
        self.flush_bytes = flush_bytes
        self.condition = threading.Condition()
        self.written = 0  # bytes written; guarded by ``condition``
        self.requested = 0  # bytes a flush was asked for
        self.durable = 0  # bytes covered by a finished fdatasync
        self.done = False  # the last write is made and its flush asked for
        self.fdatasyncs = 0
        self.error: BaseException | None = None

    def wrote(self, end: int, last: bool) -> None:
        """Receiving thread: bytes up to ``end`` are written; ask for a flush if due."""
        with self.condition:
            self.written = end
            if last or end - self.requested >= self.flush_bytes:
                self.requested = end
                self.done = last
                self.condition.notify_all()

    def flush_loop(self, deadline: float) -> None:
        """Flusher thread: one fdatasync per batch of requests, until the last is durable."""
        try:
            while True:
                with self.condition:
                    while self.requested == self.durable and not self.done:
                        if time.monotonic() > deadline:
                            raise TimeoutError("no flush request before the deadline")
                        self.condition.wait(1.0)
                    target, last = self.requested, self.done
                    if target == self.durable and last:
                        return
                os.fdatasync(self.fd)
                self.fdatasyncs += 1
                with self.condition:
                    self.durable = target
                    self.condition.notify_all()
        except BaseException as error:  # reported by receive()
            with self.condition:
                self.error = error
                self.done = True
                self.condition.notify_all()


def receive(listener: socket.socket, path: Path, size_bytes: int, flush_bytes: int) -> dict:
    """The receiver's run (see the module docstring); returns its result."""
    listener.settimeout(TIMEOUT_S)
    connection, _peer = listener.accept()
    connection.settimeout(TIMEOUT_S)
    usage_began = resource.getrusage(resource.RUSAGE_SELF)
    began = time.monotonic()
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        receiver = Receiver(fd, flush_bytes)
        flusher = threading.Thread(
            target=receiver.flush_loop, args=(began + TIMEOUT_S,), name="floor-flusher"
        )
        flusher.start()
        try:
            receive_into_file(connection, receiver, size_bytes)
        finally:
            receiver.wrote(receiver.written, last=True)
            flusher.join(TIMEOUT_S)
        seconds = time.monotonic() - began
        usage = resource.getrusage(resource.RUSAGE_SELF)
        if flusher.is_alive() or receiver.error is not None:
            raise BenchError(f"the floor's flusher failed: {receiver.error!r}")
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
        connection.close()
    return {
        "bytes": receiver.written,
        "seconds": seconds,
        "user_s": usage.ru_utime - usage_began.ru_utime,
        "system_s": usage.ru_stime - usage_began.ru_stime,
        "fdatasyncs": receiver.fdatasyncs,
    }


def receive_into_file(connection: socket.socket, receiver: Receiver, size_bytes: int) -> None:
    """Receive ``size_bytes`` in reads of up to ``CHUNK_BYTES`` into one buffer, pwrite each."""
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    position = 0
    while position < size_bytes:
        received = connection.recv_into(view, min(CHUNK_BYTES, size_bytes - position))
        if not received:
            raise BenchError(f"the sender closed after {position} of {size_bytes} bytes")
        written = os.pwrite(receiver.fd, view[:received], position)
        if written != received:
            raise BenchError(f"short pwrite: {written} of {received} bytes")
        position += received
        receiver.wrote(position, last=position == size_bytes)


def measure_floor(directory: Path, size_bytes: int, flush_bytes: int = 0) -> dict:
    """Run the receiver (a child process writing into ``directory``) and send it
    ``size_bytes`` from this thread; returns its result (``receive``'s dict).

    Raises:
        BenchError: the receiver failed, or a step took longer than ``TIMEOUT_S``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "meta.bench.slave_floor", "--directory", str(directory),
               "--bytes", str(size_bytes), "--flush-bytes", str(flush_bytes)]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with subprocess.Popen(command, stdout=subprocess.PIPE, env=env) as receiver:
        try:
            port = int(read_line(receiver, "its port"))
            send(port, size_bytes)
            result = json.loads(read_line(receiver, "its result"))
            receiver.wait(TIMEOUT_S)
        finally:
            if receiver.poll() is None:
                receiver.kill()
                receiver.wait(TIMEOUT_S)
    if receiver.returncode != 0:
        raise BenchError(f"the floor's receiver exited with {receiver.returncode}")
    return result


def read_line(receiver: subprocess.Popen, what: str) -> str:
    """One line of the receiver's output, waiting at most ``TIMEOUT_S``."""
    assert receiver.stdout is not None
    ready, _, _ = select.select([receiver.stdout], [], [], TIMEOUT_S)
    line = receiver.stdout.readline().decode() if ready else ""
    if not line:
        raise BenchError(f"the floor's receiver did not print {what}")
    return line


def send(port: int, size_bytes: int) -> None:
    """Send ``size_bytes`` to the receiver in ``CHUNK_BYTES`` writes, then close."""
    payload = memoryview(os.urandom(CHUNK_BYTES))
    with socket.create_connection((HOST, port), timeout=TIMEOUT_S) as sock:
        sent = 0
        while sent < size_bytes:
            part = min(CHUNK_BYTES, size_bytes - sent)
            sock.sendall(payload[:part])
            sent += part
        sock.shutdown(socket.SHUT_WR)


def main(argv: list[str] | None = None) -> int:
    """The receiver process: print the port, receive, print the result as one JSON line."""
    parser = argparse.ArgumentParser(prog="python -m meta.bench.slave_floor")
    parser.add_argument("--directory", type=Path, required=True)
    parser.add_argument("--bytes", type=int, required=True)
    parser.add_argument("--flush-bytes", type=int, default=0)
    args = parser.parse_args(argv)
    with socket.socket() as listener:
        listener.bind((HOST, 0))
        listener.listen(1)
        print(listener.getsockname()[1], flush=True)
        result = receive(listener, args.directory / FILE_NAME, args.bytes, args.flush_bytes)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
