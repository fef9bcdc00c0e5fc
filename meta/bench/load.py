"""Single-connection load generators for ``tools/bench``.

``BenchBroker`` (``meta.bench.broker``, re-exported here) starts a real broker process and
always stops it. The generators drive a broker over raw sockets:

* ``run_sync``: one connection, one put at a time;
* ``run_pipelined``: one connection, a sliding window of unanswered puts, written in batches;
* ``run_unbatched``: the same window, each put written by its own ``send`` (the Java client's
  asynchronous sends arrive so);
* ``run_consume``: gets of ``max_size`` bytes from offset 0 until caught up;
* ``run_latency``: synchronous puts paced by a fixed-rate schedule;
* ``run_sync_paired``: ``run_sync`` in turns with ``FdatasyncLoop``, the disk measurement.

``tools/bench`` adds the many-connection scenario (workers using ``PutFrames``, ``connect``,
``take_replies``, ``receive_into``), the disk measurement and the report (``meta.bench.tx``:
scenario ``tx``). The client is lean, as it shares the CPUs with the broker: a put is
pre-encoded but for its opaque, and every reply is checked via the shared ``Decoder``'s
``next_result_run``. Every loop is bounded in count and time, every socket has a timeout.
"""

from __future__ import annotations

import os
import selectors
import socket
import struct
import time
from collections.abc import Callable

# The broker launcher lives in meta.bench.broker; callers import it from here too.
from meta.bench.broker import (  # noqa: F401
    HOST,
    MAX_SIZE_DEFAULT,
    REPO,
    SCENARIO_NAMES,
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    TOPICS,
    ZK_ROOT,
    BenchBroker,
    BenchError,
    free_port,
    server_ini,
    wait_until_answering,
)
from meta.protocol.codec import HEADER_BYTES_MAX, NEED_DATA, Decoder
from meta.protocol.commands import Result
from meta.protocol.message import HEADER_SIZE, checksum

REPLY_TIMEOUT_S = 30.0
RECEIVE_BYTES = 64 * 1024
RESULT_RUN_MAX = 4096
PAIRED_SLICES = 8
OPAQUE_MAX = 2**31 - 1
_LENGTH = struct.Struct(">i")


# --- frames and replies ----------------------------------------------------------------------


class PutFrames:
    """A pre-encoded put (7-token form with checksum); only the opaque varies per message."""

    def __init__(self, topic: str, message_bytes: int, partition: int = 0) -> None:
        self.topic = topic
        pattern = bytes(range(32, 127))
        self.body = (pattern * (message_bytes // len(pattern) + 1))[:message_bytes]
        crc = checksum(self.body)
        self.prefix = b"put %s %d %d 0 %d " % (topic.encode(), partition, message_bytes, crc)

    def header(self, opaque: int) -> bytes:
        return b"%s%d\r\n" % (self.prefix, opaque)

    def batch(self, first_opaque: int, count: int) -> bytes:
        """``count`` frames with consecutive opaques, joined into one buffer."""
        prefix, body = self.prefix, self.body
        return b"".join(
            [b"%s%d\r\n%s" % (prefix, o, body) for o in range(first_opaque, first_opaque + count)]
        )


def connect(address: tuple[str, int], timeout_s: float = REPLY_TIMEOUT_S) -> socket.socket:
    """A blocking TCP_NODELAY socket whose send/recv time out in the kernel.

    Kernel timeouts (SO_RCVTIMEO/SO_SNDTIMEO) instead of ``settimeout`` spare a poll() per
    call; a timed-out call raises ``BlockingIOError``.
    """
    sock = socket.create_connection(address, timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    seconds = int(timeout_s)
    timeval = struct.pack("ll", seconds, int((timeout_s - seconds) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
    sock.settimeout(None)
    return sock


def take_replies(decoder: Decoder, outstanding: set[int]) -> int:
    """Decode every complete put reply; each must be 200 and answer an outstanding opaque."""
    count = 0
    while replies := decoder.next_result_run(RESULT_RUN_MAX) or other_reply(decoder):
        for code, opaque, body in replies:
            if code != 200 or opaque not in outstanding:
                raise BenchError(f"put failed or unexpected: {Result(code, body, opaque)!r}")
            outstanding.remove(opaque)
        count += len(replies)
    return count


def other_reply(decoder: Decoder, what: str = "put") -> list[tuple[int, int, bytes]]:
    """A frame ``next_result_run`` did not take, decoded in full ([]: no whole frame yet);
    anything but a ``result`` is a failed ``what``."""
    if not isinstance(reply := decoder.next_command(), Result) and reply is not NEED_DATA:
        raise BenchError(f"{what} failed: {reply!r}")
    return [] if reply is NEED_DATA else [(reply.code, reply.opaque, reply.body)]


def receive_into(sock: socket.socket, decoder: Decoder) -> None:
    data = sock.recv(RECEIVE_BYTES)
    if not data:
        raise BenchError("broker closed the connection")
    decoder.receive_data(data)


# --- producers -------------------------------------------------------------------------------


def run_sync(
    address: tuple[str, int], frames: PutFrames, duration_s: float, max_messages: int
) -> dict:
    """One connection: send a put, wait for its 200, repeat.

    The client's time is part of every round trip here, so a reply costs one ``recv`` and
    one ``next_result_run`` in the usual case (the whole reply in one read).
    """
    sock = connect(address)
    decoder = Decoder()
    body = frames.body
    count = 0
    cpu_start, start = time.process_time(), time.monotonic()
    deadline = start + duration_s
    try:
        while count < max_messages and time.monotonic() < deadline:
            opaque = count + 1
            sock.sendall(frames.header(opaque) + body)
            receive_into(sock, decoder)  # one put is outstanding: nothing is buffered before
            while not (replies := decoder.next_result_run(1) or other_reply(decoder)):
                receive_into(sock, decoder)
            ((code, answered, reply_body),) = replies
            if code != 200 or answered != opaque:
                raise BenchError(
                    f"put failed or unexpected: {Result(code, reply_body, answered)!r}"
                )
            count += 1
    finally:
        sock.close()
    return rate_result(count, frames, time.monotonic() - start, time.process_time() - cpu_start)


class FdatasyncLoop:
    """The disk measurement: 1 KB appends, each followed by ``os.fdatasync``, in slices of
    ``run_for`` (so that it can run in turns with a producer); the file lives until ``close``."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.path = os.path.join(directory, f"bench-fdatasync-{os.getpid()}.tmp")
        self.fd = os.open(self.path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_APPEND, 0o600)
        self.count, self.seconds = 0, 0.0

    def run_for(self, seconds: float, max_ops: int = 1_000_000) -> None:
        block, start, done = b"x" * 1024, time.monotonic(), 0
        while done < max_ops and time.monotonic() - start < seconds:
            os.write(self.fd, block)
            os.fdatasync(self.fd)
            done += 1
        self.count += done
        self.seconds += time.monotonic() - start

    @property
    def per_s(self) -> float:
        return self.count / max(self.seconds, 1e-9)

    def close(self) -> None:
        os.close(self.fd)
        os.unlink(self.path)


def run_sync_paired(
    address: tuple[str, int],
    frames: PutFrames,
    duration_s: float,
    max_messages: int,
    directory: str | os.PathLike,
    slices: int = PAIRED_SLICES,
) -> dict:
    """``run_sync`` in ``slices`` turns with the ``FdatasyncLoop`` in ``directory``: the
    producer and the disk measured under the same conditions (a shared disk's rate moves a
    lot within a run). Adds ``paired_fdatasync_per_s`` to ``run_sync``'s result."""
    disk = FdatasyncLoop(directory)
    rows = []
    try:
        for _ in range(slices):
            disk.run_for(duration_s / slices)
            rows.append(run_sync(address, frames, duration_s / slices, max_messages // slices))
    finally:
        disk.close()
    count = sum(row["messages"] for row in rows)
    seconds = sum(row["seconds"] for row in rows)
    result = rate_result(count, frames, seconds, sum(row["client_cpu_s"] for row in rows))
    result["paired_fdatasync_per_s"] = disk.per_s
    return result


def rate_result(count: int, frames: PutFrames, seconds: float, client_cpu_s: float) -> dict:
    seconds = max(seconds, 1e-9)
    return {
        "messages": count,
        "seconds": seconds,
        "msg_per_s": count / seconds,
        "mb_per_s": count * len(frames.body) / seconds / 1e6,
        "client_cpu_s": client_cpu_s,
    }


def run_pipelined(
    address: tuple[str, int],
    frames: PutFrames,
    duration_s: float,
    max_messages: int,
    window: int = 1000,
) -> dict:
    """One connection, at most ``window`` puts unanswered; refill as replies arrive."""

    def fill(sock: socket.socket, sent: int, room: int, outstanding: set[int]):
        count = min(room, max_messages - sent)
        outstanding.update(range(sent + 1, sent + 1 + count))
        return memoryview(frames.batch(sent + 1, count)), sent + count

    return _run_window(address, frames, duration_s, max_messages, window, fill)


def run_unbatched(
    address: tuple[str, int],
    frames: PutFrames,
    duration_s: float,
    max_messages: int,
    window: int = 1000,
) -> dict:
    """One connection, at most ``window`` puts unanswered, each put its own ``send``.

    ``run_pipelined`` joins the puts it may send into one write, so the broker reads many
    per event; here every put is a separate write (a separate TCP segment with TCP_NODELAY),
    as the Java client's asynchronous sends leave it, so the broker reads whatever arrived
    since its last read.
    """
    body = frames.body

    def fill(sock: socket.socket, sent: int, room: int, outstanding: set[int]):
        for _ in range(min(room, max_messages - sent)):
            sent += 1
            outstanding.add(sent)
            frame = frames.header(sent) + body
            written = _send_some(sock, frame)
            if written < len(frame):
                return memoryview(frame)[written:], sent
        return memoryview(b""), sent

    return _run_window(address, frames, duration_s, max_messages, window, fill)


def _run_window(
    address: tuple[str, int],
    frames: PutFrames,
    duration_s: float,
    max_messages: int,
    window: int,
    fill: Callable[[socket.socket, int, int, set[int]], tuple[memoryview, int]],
) -> dict:
    """The loop of ``run_pipelined`` and ``run_unbatched``: while the window has room and
    nothing is left to write, ``fill(sock, sent, room, outstanding)`` sends more puts and
    returns the bytes still to write and the new count sent; replies empty the window."""
    sock = connect(address)
    sock.setblocking(False)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    decoder = Decoder()
    outstanding: set[int] = set()
    pending = memoryview(b"")
    sent = answered = 0
    cpu_start, start = time.process_time(), time.monotonic()
    deadline, last_progress = start + duration_s, start
    try:
        while True:
            now = time.monotonic()
            if not pending and sent < max_messages and now < deadline and len(outstanding) < window:
                pending, sent = fill(sock, sent, window - len(outstanding), outstanding)
            if not outstanding:
                break
            if now - last_progress > REPLY_TIMEOUT_S:
                raise BenchError(f"no reply for {REPLY_TIMEOUT_S} s ({len(outstanding)} open)")
            pending, replies = _pump(selector, sock, pending, decoder, outstanding)
            if replies is not None:
                answered, last_progress = answered + replies, time.monotonic()
    finally:
        selector.close()
        sock.close()
    return rate_result(answered, frames, time.monotonic() - start, time.process_time() - cpu_start)


def _pump(
    selector: selectors.BaseSelector,
    sock: socket.socket,
    pending: memoryview,
    decoder: Decoder,
    outstanding: set[int],
) -> tuple[memoryview, int | None]:
    """One select round: write what the socket takes, read and check the replies.

    Returns the bytes still to write and the replies taken (None: nothing was read).
    """
    events = selectors.EVENT_READ | (selectors.EVENT_WRITE if pending else 0)
    if selector.get_key(sock).events != events:
        selector.modify(sock, events)
    replies = None
    for _key, ready in selector.select(1.0):
        if ready & selectors.EVENT_WRITE and pending:
            pending = pending[_send_some(sock, pending) :]
        if ready & selectors.EVENT_READ:
            receive_into(sock, decoder)
            replies = take_replies(decoder, outstanding)
    return pending, replies


def _send_some(sock: socket.socket, data: bytes | memoryview) -> int:
    try:
        return sock.send(data)
    except BlockingIOError:
        return 0


# --- consumer --------------------------------------------------------------------------------


def run_consume(
    address: tuple[str, int],
    topic: str,
    timeout_s: float,
    max_bytes: int,
    max_size: int = MAX_SIZE_DEFAULT,
) -> dict:
    """Read from offset 0 with ``max_size`` gets until caught up (404) or ``max_bytes`` read.

    One get in flight; each reply is read straight into one reused buffer (no copies).
    """
    offset = records = received = gets = 0
    buffer = bytearray(max_size + HEADER_BYTES_MAX + 2)
    cpu_start, start = time.process_time(), time.monotonic()
    deadline = start + timeout_s
    with connect(address) as sock:
        while offset < max_bytes and time.monotonic() < deadline:
            gets += 1
            sock.sendall(b"get %s bench 0 %d %d %d\r\n" % (topic.encode(), offset, max_size, gets))
            tokens, body = read_reply(sock, buffer)
            if tokens[0] == b"result" and tokens[1] == b"404":
                break
            if tokens[0] != b"value" or int(tokens[-1]) != gets:
                raise BenchError(f"get at {offset} failed: {tokens!r} {bytes(body[:200])!r}")
            count, used = count_records(body)
            if count == 0:
                raise BenchError(f"get at {offset} returned no complete record")
            records, offset, received = records + count, offset + used, received + len(body)
    seconds = max(time.monotonic() - start, 1e-9)
    return {
        "messages": records,
        "bytes": offset,
        "received_bytes": received,
        "gets": gets,
        "seconds": seconds,
        "msg_per_s": records / seconds,
        "mb_per_s": offset / seconds / 1e6,
        "client_cpu_s": time.process_time() - cpu_start,
    }


def read_reply(sock: socket.socket, buffer: bytearray) -> tuple[list[bytes], memoryview]:
    """Read one ``value``/``result`` frame into ``buffer``: its header tokens and its body.

    Only for one request in flight: nothing may follow the frame on the wire.
    """
    view, have = memoryview(buffer), 0
    while (end := buffer.find(b"\r\n", 0, have)) < 0:
        if have > HEADER_BYTES_MAX:
            raise BenchError("reply header line too long")
        have += _receive_some(sock, view[have : HEADER_BYTES_MAX + 2])
    tokens = bytes(buffer[:end]).split(b" ")
    if tokens[0] not in (b"value", b"result") or len(tokens) < 3:
        raise BenchError(f"unexpected reply header {tokens!r}")
    total = end + 2 + int(tokens[1] if tokens[0] == b"value" else tokens[2])
    if total > len(buffer) or have > total:
        raise BenchError(f"reply of {total} bytes does not fit, or bytes follow it")
    while have < total:
        have += _receive_some(sock, view[have:total])
    return tokens, view[end + 2 : total]


def _receive_some(sock: socket.socket, target: memoryview) -> int:
    count = sock.recv_into(target)
    if not count:
        raise BenchError("broker closed the connection")
    return count


def count_records(data: bytes | bytearray | memoryview) -> tuple[int, int]:
    """Return ``(records, bytes)`` of the complete records at the start of a message set.

    Fast path: when every record has the size of the first, four strided slices compare
    every length field at C speed. Otherwise the headers are walked one by one.
    """
    if len(data) < HEADER_SIZE:
        return 0, 0
    stride = HEADER_SIZE + _LENGTH.unpack_from(data)[0]
    count = len(data) // stride
    if stride > HEADER_SIZE and count > 0:
        span = data[: count * stride]
        if all(bytes(span[i::stride]) == bytes(data[i : i + 1]) * count for i in range(4)):
            return count, count * stride
    position = count = 0
    while len(data) - position >= HEADER_SIZE:
        end = position + HEADER_SIZE + _LENGTH.unpack_from(data, position)[0]
        if end > len(data) or end <= position:
            break
        position, count = end, count + 1
    return count, position


# --- latency at a fixed rate -----------------------------------------------------------------


def run_latency(
    address: tuple[str, int], frames: PutFrames, rate: float, duration_s: float
) -> dict:
    """Synchronous puts, the i-th sent at ``start + i / rate`` (or at once when late).

    ``latencies_s`` in the result holds each put's send-to-reply time, in send order.
    """
    total = max(1, int(rate * duration_s))
    latencies: list[float] = []
    sock = connect(address)
    decoder = Decoder()
    outstanding: set[int] = set()
    start = time.monotonic() + 0.05
    give_up = start + 2 * duration_s + REPLY_TIMEOUT_S
    try:
        for index in range(total):
            wait = start + index / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            sent = time.monotonic()
            if sent > give_up:
                break
            outstanding.add(index + 1)
            sock.sendall(frames.header(index + 1) + frames.body)
            while not take_replies(decoder, outstanding):
                receive_into(sock, decoder)
            latencies.append(time.monotonic() - sent)
    finally:
        sock.close()
    seconds = max(time.monotonic() - start, 1e-9)
    return {
        "messages": len(latencies),
        "seconds": seconds,
        "target_rate": rate,
        "msg_per_s": len(latencies) / seconds,
        "latencies_s": latencies,
    }
