"""``PipelinedConnection``: one broker connection shared by threads, replies matched by opaque.

``PipelinedConnection`` is one TCP connection to one broker, shared by every thread of a
session factory. ``request(command)`` gives the command a fresh opaque, registers a
``PendingFuture`` (``meta.client.net.futures``) under it and queues the encoded bytes, all under
one lock acquisition; a writer thread sends everything queued in one ``sendall`` per wake-up
(so a burst of async sends costs few system calls and few thread switches), and a reader
thread decodes every complete reply in its receive buffer (runs of ``result`` frames in bulk
with ``Decoder.next_result_run``, anything else with ``next_command``), takes their futures
out of the table under one lock acquisition, converts the replies, and completes the whole
batch under one more (``futures.complete_batch``). Replies may come back in any order;
requests leave in the order they were registered. With ``value_in_place`` (the slave's
connections) the reader reads the rest of a large get reply straight into its body
(``Decoder.body_space``), and ``wait_sent`` lets a caller wait until its requests have left.
Plain blocking sockets and threads: there is no reactor anywhere in ``meta.client``, so this
is safe inside Spark executors.

Invariants:

* At most ``pending_max`` requests are in flight and about ``OUTGOING_BYTES_MAX`` bytes are
  queued per connection; ``request`` blocks (bounded by its timeout) while either is full,
  then raises ``OperationTimeoutError``.
* Every pending entry leaves the table exactly once: by its reply, by its deadline (the
  reader thread sweeps expired entries every ``SWEEP_INTERVAL_S``), by ``Future.cancel()``,
  or by the connection failing; whoever removes it completes its future, once. So timed-out
  entries cannot leak, whatever the caller does.
* After ``close_when_idle()`` the connection closes as soon as no request is in flight
  (each one still ends by its reply, its deadline or its cancel).
* Once failed or closed, a connection stays closed: every pending future fails with a
  ``ClientError`` naming the broker (``ClientClosedError`` after ``close()``) and later
  requests raise at once. Reconnecting means a new connection (``factory.ConnectionPool``).
* Opaques are per connection, in ``1 .. 2**31 - 1``, wrapping, never one still pending.
* Bytes queued for the writer leave even if their future was cancelled meanwhile (a one-way
  command is sent by requesting it and cancelling the future at once).

Thread-safety: ``PipelinedConnection`` is thread-safe. One ``RLock`` guards the table and the
outgoing queue and is also the condition every future of the connection waits on. Futures
are completed on the connection's reader thread, so ``convert`` and done-callbacks run
there (outside the lock): they must be short and must never wait for another reply of the
same connection.
"""

from __future__ import annotations

import dataclasses
import logging
import select
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from meta.client.net.futures import Outcome, PendingFuture, complete_batch, convert_reply
from meta.errors import ClientClosedError, ClientError, MetaError, OperationTimeoutError
from meta.protocol.codec import NEED_DATA, Decoder, encode
from meta.protocol.commands import BodyTooLarge, Command, Data, Put, Result

log = logging.getLogger("meta.client")

PENDING_MAX = 10_000
"""Default bound on requests in flight per connection."""
REPLY_BYTES_MAX = 64 * 1024 * 1024
"""Default bound on one reply body (a get answer is at most the broker's maxTransferSize)."""
RECEIVE_BYTES = 256 * 1024
IN_PLACE_RECEIVE_BYTES = 16 * 1024
"""Largest read into the receive buffer when value bodies are received in place: the part
of a body's start such a read takes is copied into the body."""
OUTGOING_BYTES_MAX = 4 * 1024 * 1024
"""Bound on encoded requests queued for the writer thread; ``request`` waits for room."""
RESULT_RUN_MAX = 4096
"""Most ``result`` frames decoded in one ``next_result_run`` call."""
SWEEP_INTERVAL_S = 0.1
"""How often the reader thread fails requests whose deadline has passed."""
CLOSE_JOIN_S = 5.0
"""How long ``close()`` waits for the reader thread (a slow done-callback may hold it)."""
OPAQUE_MAX = 2**31 - 1
_PUT_HEADER = b"put %b %d %d %d %d %d\r\n"
"""The 7-token put header exactly as ``codec.encode`` writes it (the tests compare both)."""


class ResultConverter:
    """A ``convert`` that also takes a ``result`` frame's code and body without a ``Result``.

    The reader thread calls ``from_result(code, body)`` for replies decoded in bulk, and
    ``__call__(reply)`` for any other reply (a ``Data`` frame, or a ``Result`` decoded alone).
    """

    __slots__ = ()

    def from_result(self, code: int, body: bytes) -> Any:
        raise NotImplementedError

    def __call__(self, reply: Result | Data) -> Any:
        raise NotImplementedError


class PipelinedConnection:
    """One TCP connection to a broker, shared by threads, with replies matched by opaque.

    Args:
        host: broker host.
        port: broker port.
        connect_timeout_s: bound on connecting, and on each blocked write afterwards.
        reply_bytes_max: largest reply body accepted; a larger one fails its request only.
        pending_max: most requests in flight at once.
        value_in_place: a large get reply's ``Data.data`` is the ``bytearray`` the socket
            read it into (``Decoder(value_in_place=True)``: no copy of it after the read).

    Raises:
        ClientError: the broker cannot be reached (the text names it).
    """

    def __init__(
        self,
        host: str,
        port: int,
        connect_timeout_s: float = 10.0,
        reply_bytes_max: int = REPLY_BYTES_MAX,
        pending_max: int = PENDING_MAX,
        value_in_place: bool = False,
    ) -> None:
        assert connect_timeout_s > 0
        assert pending_max > 0
        self.host = host
        self.port = port
        self.name = f"{host}:{port}"
        try:
            self._socket = socket.create_connection((host, port), timeout=connect_timeout_s)
        except OSError as error:
            raise ClientError(f"cannot connect to broker {self.name}: {error}") from error
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._decoder = Decoder(body_bytes_max=reply_bytes_max, value_in_place=value_in_place)
        self._pending_max = pending_max
        # One lock for the table and the outgoing queue. Futures wait on _done (notified once
        # per completed batch); requesters wait on _room while the table or queue is full;
        # the writer waits on _send_ready for data.
        self._lock = threading.RLock()
        self._done = threading.Condition(self._lock)
        self._room = threading.Condition(self._lock)
        self._send_ready = threading.Condition(self._lock)
        self._room_waiters = 0
        self._outgoing: list[bytes] = []
        self._outgoing_bytes = 0
        self._writer_idle = False
        self._pending: dict[int, PendingFuture] = {}
        self._next_opaque = 1
        self._failure: tuple[type[ClientError], str] | None = None
        self._close_when_idle = False
        self._next_sweep = time.monotonic() + SWEEP_INTERVAL_S
        self._timeouts_total = 0
        self._reader = threading.Thread(
            target=self._read_loop, name=f"metaq-reader-{self.name}", daemon=True
        )
        self._writer = threading.Thread(
            target=self._write_loop, name=f"metaq-writer-{self.name}", daemon=True
        )
        self._writer.start()
        self._reader.start()

    @property
    def closed(self) -> bool:
        """True once the connection failed or was closed; it never reopens."""
        return self._failure is not None

    @property
    def timeouts_total(self) -> int:
        """Requests failed so far because no reply came before their deadline."""
        return self._timeouts_total

    @property
    def pending_count(self) -> int:
        """Requests registered and not yet completed."""
        return len(self._pending)

    def request(
        self,
        command: Command,
        timeout_s: float = 3.0,
        convert: Callable[[Result | Data], Any] | None = None,
    ) -> Future:
        """Send ``command`` under a fresh opaque and return the future of its reply.

        Args:
            command: a command with an ``opaque`` field; its value is replaced.
            timeout_s: the future fails with ``OperationTimeoutError`` when no reply came
                within this time; also bounds the wait for room in the table and the queue.
            convert: applied to the reply on the reader thread; the future gets its return
                value, or the exception it raises. A ``ResultConverter`` is given the code
                and body of a ``result`` reply directly.

        Returns:
            A ``concurrent.futures.Future`` of the ``Result``/``Data`` reply (or of
            ``convert(reply)``).

        Raises:
            OperationTimeoutError: ``pending_max`` requests stayed in flight, or
                ``OUTGOING_BYTES_MAX`` bytes stayed queued, for ``timeout_s``.
            ClientError: the connection is closed or failed (``ClientClosedError`` if closed).
        """
        deadline = time.monotonic() + timeout_s
        future = PendingFuture(self, deadline, timeout_s, convert, self._done)
        fast_put = type(command) is Put and command.tx_key is None and command.checksum is not None
        with self._lock:
            if (
                self._failure is not None
                or len(self._pending) >= self._pending_max
                or self._outgoing_bytes >= OUTGOING_BYTES_MAX
            ):
                self._wait_for_room(deadline, timeout_s)
            pending = self._pending
            opaque = self._next_opaque
            while opaque in pending:  # Only after a wrap; the table is never full here.
                opaque = opaque + 1 if opaque < OPAQUE_MAX else 1
            # Encoded before anything is registered: an encoding error leaves no trace.
            if fast_put:
                data = command.data
                header = _PUT_HEADER % (
                    command.topic.encode(),
                    command.partition,
                    len(data),
                    command.flag,
                    command.checksum,
                    opaque,
                )
                self._outgoing += (header, data)
                self._outgoing_bytes += len(header) + len(data)
            else:
                frame = encode(dataclasses.replace(command, opaque=opaque))
                self._outgoing.append(frame)
                self._outgoing_bytes += len(frame)
            self._next_opaque = opaque + 1 if opaque < OPAQUE_MAX else 1
            future.opaque = opaque
            pending[opaque] = future
            if self._writer_idle:
                self._writer_idle = False
                self._send_ready.notify()
        return future

    def wait_sent(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until the writer thread has taken every request queued
        so far: it needs the GIL to send them, so a caller about to hold the GIL for a while
        (the slave's CRC check) lets its request leave first. Returns early if closed."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._outgoing and self._failure is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._room_waiters += 1
                try:
                    self._room.wait(remaining)
                finally:
                    self._room_waiters -= 1

    def forget(self, opaque: int) -> bool:
        """Drop a pending request without completing its future (a late reply is dropped).

        Returns:
            True if the request was still in the table (so nothing else will complete it).
        """
        with self._lock:
            if self._pending.pop(opaque, None) is None:
                return False
            if self._room_waiters:
                self._room.notify_all()
        self._close_if_retired()
        return True

    def close_when_idle(self) -> None:
        """Close once no request is in flight, at once if none is.

        For a connection its pool no longer lists (its broker left ZooKeeper): a broker that
        leaves gracefully still answers what it was sent before it closes, and closing under
        those requests would fail them (a put so failed may be sent again and stored twice).
        """
        with self._lock:
            self._close_when_idle = True
        self._close_if_retired()

    def _close_if_retired(self) -> None:
        if self._close_when_idle and not self._pending:
            self.close()

    def close(self) -> None:
        """Close the connection: pending futures fail with ``ClientClosedError``. Idempotent.

        Waits (bounded) for the reader thread, which waits for the writer thread, unless
        called from the reader (a done-callback).
        """
        self._fail(ClientClosedError, f"connection to broker {self.name} was closed")
        if threading.current_thread() is not self._reader:
            self._reader.join(CLOSE_JOIN_S)
            if self._reader.is_alive():
                log.warning("reader of broker %s still busy after %s s", self.name, CLOSE_JOIN_S)

    def _wait_for_room(self, deadline: float, timeout_s: float) -> None:
        """Block (lock held) until the table and queue have room; raise if closed or late."""
        while True:
            if self._failure is not None:
                error_type, text = self._failure
                raise error_type(text)
            table_full = len(self._pending) >= self._pending_max
            if not table_full and self._outgoing_bytes < OUTGOING_BYTES_MAX:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if table_full:
                    raise OperationTimeoutError(
                        f"{self._pending_max} requests stayed in flight to broker {self.name} "
                        f"for {timeout_s} s"
                    )
                raise OperationTimeoutError(
                    f"{OUTGOING_BYTES_MAX} bytes stayed queued for broker {self.name} "
                    f"for {timeout_s} s"
                )
            self._room_waiters += 1
            try:
                self._room.wait(remaining)
            finally:
                self._room_waiters -= 1

    def _fail(self, error_type: type[ClientError], text: str) -> None:
        """Mark the connection failed (first reason wins), fail every pending future."""
        with self._lock:
            if self._failure is not None:
                return
            self._failure = (error_type, text)
            futures = list(self._pending.values())
            self._pending.clear()
            self._outgoing = []
            self._outgoing_bytes = 0
            self._room.notify_all()
            self._send_ready.notify_all()
        try:
            # Wakes the reader (poll reports EOF) and the writer if blocked in sendall.
            self._socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        complete_batch(self._done, [(future, None, error_type(text)) for future in futures])

    def _read_loop(self) -> None:
        """Reader thread: receive, decode, complete futures, sweep deadlines; close at end."""
        poller = select.poll()
        poller.register(self._socket, select.POLLIN)
        # One receive buffer for the connection's life: no fresh allocation (and page
        # faults) per recv; the decoder copies what it keeps. The rest of a value body
        # received in place is read straight into that body instead.
        buffer = bytearray(RECEIVE_BYTES)
        view = memoryview(buffer)
        decoder = self._decoder
        size = IN_PLACE_RECEIVE_BYTES if decoder.value_in_place else RECEIVE_BYTES
        try:
            while self._failure is None:
                if poller.poll(SWEEP_INTERVAL_S * 1000):
                    space = decoder.body_space()
                    if space is None:
                        received = self._socket.recv_into(buffer, size)
                    else:
                        with space:
                            received = self._socket.recv_into(space)
                    if not received:
                        raise ConnectionError("the broker closed the connection")
                    if space is None:
                        decoder.receive_data(view[:received])
                    else:
                        decoder.body_received(received)
                    self._dispatch()
                if time.monotonic() >= self._next_sweep:
                    self._sweep()
        except (OSError, MetaError) as error:
            self._fail(ClientError, f"connection to broker {self.name} lost: {error}")
        except BaseException as error:  # A bug: fail loudly, but never strand the futures.
            self._fail(ClientError, f"reader of broker {self.name} crashed: {error!r}")
            raise
        finally:
            # The writer has been woken by ``_fail``; the socket is closed once it is gone.
            self._writer.join()
            self._socket.close()

    def _write_loop(self) -> None:
        """Writer thread: send everything queued in one ``sendall`` per wake-up."""
        try:
            while True:
                with self._lock:
                    while not self._outgoing and self._failure is None:
                        self._writer_idle = True
                        self._send_ready.wait()
                    self._writer_idle = False
                    if self._failure is not None:
                        return
                    chunks, self._outgoing = self._outgoing, []
                    self._outgoing_bytes = 0
                    if self._room_waiters:
                        self._room.notify_all()
                self._socket.sendall(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        except OSError as error:
            self._fail(ClientError, f"connection to broker {self.name} failed on send: {error}")
        except BaseException as error:  # A bug: fail loudly, but never strand the futures.
            self._fail(ClientError, f"writer of broker {self.name} crashed: {error!r}")
            raise

    def _dispatch(self) -> None:
        """Complete the futures of every complete reply frame in the decoder, as one batch."""
        decoder = self._decoder
        # (code, opaque, body) tuples from result runs, or frames decoded one by one.
        replies: list[tuple[int, int, bytes] | Result | Data | BodyTooLarge] = []
        while True:
            run = decoder.next_result_run(RESULT_RUN_MAX)
            if run:
                replies += run
                continue
            frame = decoder.next_command()
            if frame is NEED_DATA:
                break
            if not isinstance(frame, Result | Data | BodyTooLarge):
                raise MetaError(f"unexpected frame from broker: {type(frame).__name__}")
            replies.append(frame)
        if not replies:
            return
        with self._lock:
            take = self._pending.pop
            futures = [
                take(reply[1] if type(reply) is tuple else reply.opaque, None) for reply in replies
            ]
            if self._room_waiters:
                self._room.notify_all()
        outcomes: list[Outcome] = []
        for reply, future in zip(replies, futures, strict=True):
            if future is None:
                opaque = reply[1] if type(reply) is tuple else reply.opaque
                # Normal after a timeout or cancel: the reply came too late.
                log.debug("dropping reply with unknown opaque %d from %s", opaque, self.name)
            elif type(reply) is tuple:
                outcomes.append(_convert_run_reply(future, reply))
            elif isinstance(reply, BodyTooLarge):
                text = f"reply of {reply.length} bytes from broker {self.name} is over the limit"
                outcomes.append((future, None, ClientError(text)))
            else:
                outcomes.append(convert_reply(future, reply))
        complete_batch(self._done, outcomes)
        self._close_if_retired()

    def _sweep(self) -> None:
        """Fail every pending request whose deadline has passed."""
        now = time.monotonic()
        self._next_sweep = now + SWEEP_INTERVAL_S
        with self._lock:
            expired = [future for future in self._pending.values() if future.deadline <= now]
            if not expired:
                return
            for future in expired:
                del self._pending[future.opaque]
            self._timeouts_total += len(expired)
            if self._room_waiters:
                self._room.notify_all()
        name = self.name
        complete_batch(
            self._done,
            [
                (
                    future,
                    None,
                    OperationTimeoutError(
                        f"no reply from broker {name} within {future.timeout_s} s"
                    ),
                )
                for future in expired
            ],
        )
        self._close_if_retired()


def _convert_run_reply(future: PendingFuture, reply: tuple[int, int, bytes]) -> Outcome:
    """The outcome of a ``result`` reply decoded in bulk: ``(code, opaque, body)``."""
    convert = future.convert
    if isinstance(convert, ResultConverter):
        try:
            return (future, convert.from_result(reply[0], reply[2]), None)
        except Exception as error:  # Handed to the caller through the future.
            return (future, None, error)
    code, opaque, body = reply
    return convert_reply(future, Result(code, body, opaque))
