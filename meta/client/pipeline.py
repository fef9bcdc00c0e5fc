"""``PipelinedConnection``: one broker connection shared by threads, replies matched by opaque.

``PipelinedConnection`` is one TCP connection to one broker, shared by every thread of a
session factory. ``request(command)`` gives the command a fresh opaque, registers a
``Future`` under it and queues the encoded bytes; a writer thread sends everything queued
in one ``sendall`` (so a burst of async sends costs few system calls), and a reader thread
decodes replies with the shared codec (``meta.protocol.codec``) and completes the future
whose opaque the reply carries. Replies may come back in any order; requests leave in the
order they were queued. Plain blocking sockets and threads: there is no reactor anywhere in
``meta.client``, so this is safe inside Spark executors.

Invariants:

* At most ``pending_max`` requests are in flight and about ``OUTGOING_BYTES_MAX`` bytes are
  queued per connection; ``request`` blocks (bounded by its timeout) while either is full,
  then raises ``OperationTimeoutError``.
* Every pending entry leaves the table exactly once: by its reply, by its deadline (the
  reader thread sweeps expired entries every ``SWEEP_INTERVAL_S``), by ``Future.cancel()``,
  or by the connection failing. So timed-out entries cannot leak, whatever the caller does.
* Once failed or closed, a connection stays closed: every pending future fails with a
  ``ClientError`` naming the broker (``ClientClosedError`` after ``close()``) and later
  requests raise at once. Reconnecting means a new connection (``factory.ConnectionPool``).
* Opaques are per connection, in ``1 .. 2**31 - 1``, wrapping, never one still pending.

Thread-safety: ``PipelinedConnection`` is thread-safe. Futures are
completed on the connection's reader thread, so their done-callbacks (and ``convert``) run
there: they must be short and must never wait for another reply of the same connection.
"""

from __future__ import annotations

import dataclasses
import logging
import select
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any

from meta.errors import ClientClosedError, ClientError, MetaError, OperationTimeoutError
from meta.protocol.codec import NEED_DATA, Decoder, encode
from meta.protocol.commands import BodyTooLarge, Command, Data, Put, Result

log = logging.getLogger("meta.client")

PENDING_MAX = 10_000
"""Default bound on requests in flight per connection."""
REPLY_BYTES_MAX = 64 * 1024 * 1024
"""Default bound on one reply body (a get answer is at most the broker's maxTransferSize)."""
RECEIVE_BYTES = 256 * 1024
OUTGOING_BYTES_MAX = 4 * 1024 * 1024
"""Bound on encoded requests queued for the writer thread; ``request`` waits for room."""
SWEEP_INTERVAL_S = 0.1
"""How often the reader thread fails requests whose deadline has passed."""
CLOSE_JOIN_S = 5.0
"""How long ``close()`` waits for the reader thread (a slow done-callback may hold it)."""
OPAQUE_MAX = 2**31 - 1


class _PendingFuture(Future):
    """A request's future; cancelling it removes the request from its connection's table."""

    def __init__(
        self,
        connection: PipelinedConnection,
        deadline: float,
        timeout_s: float,
        convert: Callable[[Result | Data], Any] | None,
    ) -> None:
        super().__init__()
        self.connection = connection
        self.opaque = 0
        self.deadline = deadline
        self.timeout_s = timeout_s
        self.convert = convert

    def cancel(self) -> bool:
        cancelled = super().cancel()
        if cancelled:
            self.connection.forget(self.opaque)
        return cancelled


class PipelinedConnection:
    """One TCP connection to a broker, shared by threads, with replies matched by opaque.

    Args:
        host: broker host.
        port: broker port.
        connect_timeout_s: bound on connecting, and on each blocked write afterwards.
        reply_bytes_max: largest reply body accepted; a larger one fails its request only.
        pending_max: most requests in flight at once.

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
        self._decoder = Decoder(body_bytes_max=reply_bytes_max)
        self._pending_max = pending_max
        self._lock = threading.Lock()
        self._not_full = threading.Condition(self._lock)
        # Guards the outgoing queue; the writer thread waits on _send_ready for data,
        # requesters on _send_room while OUTGOING_BYTES_MAX bytes are queued.
        self._send_lock = threading.Lock()
        self._send_ready = threading.Condition(self._send_lock)
        self._send_room = threading.Condition(self._send_lock)
        self._outgoing: list[bytes] = []
        self._outgoing_bytes = 0
        self._writer_idle = False
        self._pending: dict[int, _PendingFuture] = {}
        self._next_opaque = 1
        self._failure: tuple[type[ClientError], str] | None = None
        self._next_sweep = time.monotonic() + SWEEP_INTERVAL_S
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
                within this time; also bounds the wait for room in the pending table.
            convert: applied to the reply on the reader thread; the future gets its return
                value, or the exception it raises.

        Returns:
            A future of the ``Result``/``Data`` reply (or of ``convert(reply)``).

        Raises:
            OperationTimeoutError: ``pending_max`` requests stayed in flight for ``timeout_s``.
            ClientError: the connection is closed or failed (``ClientClosedError`` if closed).
        """
        deadline = time.monotonic() + timeout_s
        future = _PendingFuture(self, deadline, timeout_s, convert)
        with self._lock:
            self._wait_for_room(deadline, timeout_s)
            future.opaque = self._take_opaque()
            self._pending[future.opaque] = future
        data = encode(_with_opaque(command, future.opaque))
        if not self._enqueue(data, deadline):
            self.forget(future.opaque)
            raise OperationTimeoutError(
                f"{OUTGOING_BYTES_MAX} bytes stayed queued for broker {self.name} for {timeout_s} s"
            )
        return future

    def forget(self, opaque: int) -> None:
        """Drop a pending request without completing its future (a late reply is dropped)."""
        with self._lock:
            if self._pending.pop(opaque, None) is not None:
                self._not_full.notify()

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
        """Block (lock held) until the table has room; raise if closed or out of time."""
        while True:
            if self._failure is not None:
                error_type, text = self._failure
                raise error_type(text)
            if len(self._pending) < self._pending_max:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise OperationTimeoutError(
                    f"{self._pending_max} requests stayed in flight to broker {self.name} "
                    f"for {timeout_s} s"
                )
            self._not_full.wait(remaining)

    def _enqueue(self, data: bytes, deadline: float) -> bool:
        """Queue ``data`` for the writer; False if there was no room before ``deadline``.

        On a failed connection nothing is queued (the request's future has failed already).
        """
        with self._send_lock:
            while self._outgoing_bytes >= OUTGOING_BYTES_MAX and self._failure is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._send_room.wait(remaining)
            if self._failure is None:
                self._outgoing.append(data)
                self._outgoing_bytes += len(data)
                if self._writer_idle:
                    self._send_ready.notify()
            return True

    def _take_opaque(self) -> int:
        """Return the next opaque not in use (lock held); the table is never full here."""
        while True:
            opaque = self._next_opaque
            self._next_opaque = opaque + 1 if opaque < OPAQUE_MAX else 1
            if opaque not in self._pending:
                return opaque

    def _fail(self, error_type: type[ClientError], text: str) -> None:
        """Mark the connection failed (first reason wins), fail every pending future."""
        with self._lock:
            if self._failure is not None:
                return
            self._failure = (error_type, text)
            futures = list(self._pending.values())
            self._pending.clear()
            self._not_full.notify_all()
        with self._send_lock:
            self._send_ready.notify_all()
            self._send_room.notify_all()
        try:
            # Wakes the reader (poll reports EOF) and the writer if blocked in sendall.
            self._socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        for future in futures:
            _settle(future, error=error_type(text))

    def _read_loop(self) -> None:
        """Reader thread: receive, decode, complete futures, sweep deadlines; close at end."""
        poller = select.poll()
        poller.register(self._socket, select.POLLIN)
        # One receive buffer for the connection's life: no fresh allocation (and page
        # faults) per recv; the decoder copies what it keeps.
        buffer = bytearray(RECEIVE_BYTES)
        view = memoryview(buffer)
        try:
            while self._failure is None:
                if poller.poll(SWEEP_INTERVAL_S * 1000):
                    received = self._socket.recv_into(buffer)
                    if not received:
                        raise ConnectionError("the broker closed the connection")
                    self._decoder.receive_data(view[:received])
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
        """Writer thread: send everything queued in one ``sendall``, until the failure."""
        try:
            while True:
                with self._send_lock:
                    while not self._outgoing and self._failure is None:
                        self._writer_idle = True
                        self._send_ready.wait()
                    self._writer_idle = False
                    if self._failure is not None:
                        return
                    chunks, self._outgoing = self._outgoing, []
                    self._outgoing_bytes = 0
                    self._send_room.notify_all()
                self._socket.sendall(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        except OSError as error:
            self._fail(ClientError, f"connection to broker {self.name} failed on send: {error}")
        except BaseException as error:  # A bug: fail loudly, but never strand the futures.
            self._fail(ClientError, f"writer of broker {self.name} crashed: {error!r}")
            raise

    def _dispatch(self) -> None:
        """Complete the futures of every complete reply frame in the decoder."""
        frames: list[Result | Data | BodyTooLarge] = []
        while (frame := self._decoder.next_command()) is not NEED_DATA:
            if not isinstance(frame, Result | Data | BodyTooLarge):
                raise MetaError(f"unexpected frame from broker: {type(frame).__name__}")
            frames.append(frame)
        with self._lock:
            futures = [self._pending.pop(frame.opaque, None) for frame in frames]
            self._not_full.notify(len(frames))
        for frame, future in zip(frames, futures, strict=True):
            if future is None:
                # Normal after a timeout or cancel: the reply came too late.
                log.debug("dropping reply with unknown opaque %d from %s", frame.opaque, self.name)
            elif isinstance(frame, BodyTooLarge):
                text = f"reply of {frame.length} bytes from broker {self.name} is over the limit"
                _settle(future, error=ClientError(text))
            else:
                _settle(future, reply=frame)

    def _sweep(self) -> None:
        """Fail every pending request whose deadline has passed."""
        now = time.monotonic()
        self._next_sweep = now + SWEEP_INTERVAL_S
        with self._lock:
            expired = [future for future in self._pending.values() if future.deadline <= now]
            for future in expired:
                del self._pending[future.opaque]
            self._not_full.notify(len(expired))
        for future in expired:
            text = f"no reply from broker {self.name} within {future.timeout_s} s"
            _settle(future, error=OperationTimeoutError(text))


def _with_opaque(command: Command, opaque: int) -> Command:
    """A copy of ``command`` carrying ``opaque`` (``Put`` built directly: the hot path)."""
    if type(command) is Put:
        return Put(
            command.topic,
            command.partition,
            command.data,
            command.flag,
            opaque,
            command.checksum,
            command.tx_key,
        )
    return dataclasses.replace(command, opaque=opaque)


def _settle(
    future: _PendingFuture, reply: Result | Data | None = None, error: BaseException | None = None
) -> None:
    """Complete a future taken out of the table, unless its caller cancelled it meanwhile.

    A pending future may be completed directly (no RUNNING step: one lock round trip
    less per reply); one cancelled meanwhile refuses with ``InvalidStateError`` and is then
    moved on the way ``set_running_or_notify_cancel`` does, so ``wait()`` callers hear.
    """
    if error is None and future.convert is not None:
        try:
            reply = future.convert(reply)
        except Exception as convert_error:  # Handed to the caller through the future.
            error = convert_error
    try:
        if error is None:
            future.set_result(reply)
        else:
            future.set_exception(error)
    except InvalidStateError:
        if future.cancelled():
            future.set_running_or_notify_cancel()
