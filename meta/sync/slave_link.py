"""``SlaveLink``: the one TCP connection a samsa master opens to its gregor slave.

The link sends requests (``sync`` frames, the status probe, ``stats``) and matches the
slave's ``result`` replies to them by opaque. Every request is answered exactly once through
its callback ``done(code, body)``: the slave's result code and body, or ``TIMED_OUT`` when no
reply came within ``sendToSlaveTimeoutInMills``, or ``DISCONNECTED`` when the connection
was lost first (every request in flight then fails at once). A request made while the link
is down is refused (``send`` returns False) and its callback is never called.

The connection is re-opened by Twisted's ``ReconnectingClientFactory``, with its jittered
exponential back-off from ``RECONNECT_DELAY_MIN_S`` to ``RECONNECT_DELAY_MAX_S``.
The owner hears of each connection made and lost through ``on_up`` and ``on_down``.

Requests are gathered and written together by ``flush_output``, straight to the socket when
the transport holds nothing yet (``send_now``, given by the broker; while every write of the
connection so far went to the socket whole, the link knows that itself and sends on the
socket, ``getHandle()``, without asking the transport): the broker flushes the
link at the end of its batch, after its own write of the batch's records (``on_output``), so
a put's ``sync`` leaves in the reactor turn that took the put, and never before the master
wrote the record (a master killed in between leaves the slave behind it, never ahead). A
put's ``sync`` is sent ``batched``: the caller stages the put's record in the same turn,
and that record, too, is written only by the batch end (``StoreManager.commit_staged`` has
no timer either), so a forgotten batch end would hang the put with or without the link.
Any other request (a probe from a timer, a catch-up, the slave's detection) arms a timer
of ``FLUSH_LATE_S`` that flushes what no batch end covers; a flush cancels it. So a
synchronous producer's put costs no timer. What the socket does not take is buffered by
Twisted in order, as usual.

Timeouts cost one timer, not one per request: requests are kept in send order, and the
timeout is the same for all, so the oldest request is always the next to expire.

Reactor thread only.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from twisted.internet import protocol
from twisted.python.failure import Failure

from meta.errors import LocalProtocolError
from meta.protocol.codec import HEADER_BYTES_MAX, NEED_DATA, Decoder
from meta.protocol.commands import Result
from meta.protocol.patterns import RESULT_RUN

log = logging.getLogger("meta.sync")

TIMED_OUT = -1
"""The code a request's callback gets when the slave did not answer in time."""
DISCONNECTED = -2
"""The code a request's callback gets when the connection was lost before the reply."""

RECONNECT_DELAY_MIN_S = 0.05
RECONNECT_DELAY_MAX_S = 1.0
REPLY_BODY_BYTES_MAX = 16 * 1024 * 1024  # a reply larger than this is not one of ours
REPLIES_PER_READ_MAX = 4096
FLUSH_LATE_S = 0.002  # the longest a request waits for a flush no batch end made
OPAQUE_MAX = 2**31 - 1

Done = Callable[[int, bytes], None]
SendNow = Callable[[Any, bytes], int]
"""``send_now(transport, data)``: bytes of ``data`` sent to the socket at once (0: none)."""


def send_later(transport: Any, data: bytes) -> int:
    """The default ``SendNow``: sends nothing at once; every write goes through
    ``transport.write``."""
    return 0


class SlaveLink:
    """The master's connection to ``host:port`` and the requests in flight on it.

    Args:
        host: the slave's host.
        port: the slave's port.
        timeout_ms: how long a request waits for its reply (``sendToSlaveTimeoutInMills``).
        reactor: the reactor (connections and the timeout timer).
        on_up: called when a connection is made.
        on_down: called when it is lost, after every request in flight was failed.
        after_callbacks: called after each group of callbacks (one read of replies, one
            timeout sweep, one connection loss): the owner's end of batch.
        send_now: writes what it can at once when the transport holds nothing
            (``meta.server.protocol.send_now``); by default every write is buffered.
        on_output: called with the link when it gathers requests to write, to have its
            ``flush_output`` called at the owner's end of batch (``Broker.output_pending``).
    """

    def __init__(
        self,
        host: str,
        port: int,
        timeout_ms: int,
        reactor: Any,
        on_up: Callable[[], None],
        on_down: Callable[[], None],
        after_callbacks: Callable[[], None] = lambda: None,
        send_now: SendNow = send_later,
        on_output: Callable[[SlaveLink], None] = lambda link: None,
    ) -> None:
        self.host = host
        self.port = port
        self._timeout_s = timeout_ms / 1000
        self._reactor = reactor
        self._on_up = on_up
        self._on_down = on_down
        self.after_callbacks = after_callbacks
        self._send_now = send_now
        self._on_output = on_output
        self._out: list[bytes] = []  # requests built and not written yet
        # The connection's socket while the transport holds none of its bytes (every write
        # went to the socket whole) and the owner sends at once (``send_now``), else None.
        self._socket: Any = None
        self._flush_late_call: Any = None
        self._factory = _LinkFactory(self)
        self._factory.clock = reactor  # its retry timer (default: the global reactor)
        self._connector: Any = None
        self._protocol: _LinkProtocol | None = None
        # opaque -> (deadline in reactor seconds, callback), oldest first.
        self._in_flight: OrderedDict[int, tuple[float, Done]] = OrderedDict()
        self._timer: Any = None
        self._opaque = 0
        self._stopped = False

    @property
    def connected(self) -> bool:
        """Whether a connection to the slave is open now."""
        return self._protocol is not None

    @property
    def in_flight(self) -> int:
        """Requests sent and not answered yet."""
        return len(self._in_flight)

    def has_room(self, in_flight_max: int) -> bool:
        """Whether the link is up with fewer than ``in_flight_max`` requests in flight
        (``connected`` and ``in_flight`` in one call: a put asks it every time)."""
        return self._protocol is not None and len(self._in_flight) < in_flight_max

    def start(self) -> None:
        """Connect, and keep reconnecting until ``stop``."""
        self._connector = self._reactor.connectTCP(
            self.host, self.port, self._factory, timeout=max(self._timeout_s, 1.0)
        )

    def stop(self) -> None:
        """Close the connection for good; requests in flight fail with ``DISCONNECTED``."""
        self._stopped = True
        self._out.clear()
        if self._flush_late_call is not None and self._flush_late_call.active():
            self._flush_late_call.cancel()
        self._flush_late_call = None
        self._factory.stopTrying()
        if self._connector is not None:
            self._connector.disconnect()
        self._fail_all(DISCONNECTED)
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def reconnect(self) -> None:
        """Drop the connection (its requests fail); the factory opens a new one."""
        if self._protocol is not None:
            transport: Any = self._protocol.transport
            transport.loseConnection()

    def send(
        self,
        build: Callable[[int], bytes],
        done: Done,
        batched: bool = False,
        now_s: float | None = None,
    ) -> bool:
        """Send ``build(opaque)``; ``done(code, body)`` is called once with its outcome.

        ``batched``: the caller's batch ends (``flush_output``) before the reactor waits
        again, so no late flush is armed (a put's ``sync``, see the module doc). ``now_s``:
        the reactor's ``seconds()`` when the caller has just read it (its deadline counts
        from there), else the link reads it.

        Returns:
            False when the link is down: nothing was sent and ``done`` will not be called.
        """
        if now_s is None:
            now_s = self._reactor.seconds()
        opaque = self.open_request(done, now_s)
        if not opaque:
            return False
        if batched:
            self.gather_batched(build(opaque))
        else:
            self._gather(build(opaque), False)
        return True

    def open_request(self, done: Done, now_s: float) -> int:
        """The first half of ``send``, for a caller that builds its frame itself: take an
        opaque and put ``done`` in flight, its deadline counted from ``now_s`` (the reactor's
        ``seconds()``). The caller then hands the frame carrying that opaque to
        ``gather_batched`` before it returns to the reactor.

        Returns:
            The opaque, or 0 when the link is down (nothing is in flight; ``done`` will not
            be called).
        """
        if self._protocol is None:
            return 0
        opaque = self._opaque = self._opaque + 1 if self._opaque < OPAQUE_MAX else 1
        self._in_flight[opaque] = (now_s + self._timeout_s, done)
        if self._timer is None:
            self._timer = self._reactor.callLater(self._timeout_s, self._expire)
        return opaque

    def gather_batched(self, data: bytes) -> None:
        """Add ``data`` to the next ``flush_output``, which the caller's batch end makes (a
        put's ``sync``: no late flush is armed)."""
        out = self._out
        out.append(data)
        if len(out) == 1:
            self._on_output(self)

    def send_many(
        self, build: Callable[[list[int]], bytes], dones: list[Done], batched: bool = False
    ) -> bool:
        """Send ``len(dones)`` requests as one write, ``build(opaques)``; each ``dones[i]`` is
        called once with the outcome of the request of ``opaques[i]`` (as ``send``, and
        ``batched`` as there).

        Returns:
            False when the link is down: nothing was sent and no ``done`` will be called.
        """
        link = self._protocol
        if link is None:
            return False
        deadline = self._reactor.seconds() + self._timeout_s
        in_flight = self._in_flight
        opaque = self._opaque
        opaques = []
        for done in dones:
            opaque = opaque + 1 if opaque < OPAQUE_MAX else 1
            in_flight[opaque] = (deadline, done)
            opaques.append(opaque)
        self._opaque = opaque
        if self._timer is None:
            self._timer = self._reactor.callLater(self._timeout_s, self._expire)
        self._gather(build(opaques), batched)
        return True

    def _gather(self, data: bytes, batched: bool) -> None:
        """Add ``data`` to the next ``flush_output``."""
        self.gather_batched(data)
        if not batched and self._flush_late_call is None:
            self._flush_late_call = self._reactor.callLater(FLUSH_LATE_S, self._flush_late)

    def _flush_late(self) -> None:
        self._flush_late_call = None
        self.flush_output()

    def flush_output(self) -> None:
        """Write the requests gathered since the last flush, with one write."""
        late = self._flush_late_call
        if late is not None:
            self._flush_late_call = None
            if late.active():
                late.cancel()
        out = self._out
        if not out:
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        # A socket is known only while connected (``_disconnected`` forgets it).
        socket = self._socket
        if socket is not None:  # nothing buffered: ``send_now``'s send, without its checks
            try:
                sent = socket.send(data)
            except OSError:  # full, or broken: ``write`` buffers it, or meets the error
                sent = 0
            if sent == len(data):  # the usual write: taken whole
                return
        link = self._protocol
        if link is None:
            return  # lost meanwhile: its requests already failed with DISCONNECTED
        transport: Any = link.transport
        if socket is None:
            sent = self._send_now(transport, data)
        if sent < len(data):
            self._socket = None  # the transport holds bytes now: ask it from here on
            transport.write(data[sent:] if sent else data)
        elif socket is None and self._send_now is not send_later:
            self._socket = link.socket  # all sent at once: it held nothing, and still does

    # --- called by the connection ----------------------------------------------------------

    def _connected(self, link: _LinkProtocol) -> None:
        self._protocol = link
        self._socket = link.socket if self._send_now is not send_later else None
        log.info("connected to gregor slave %s:%d", self.host, self.port)
        self._on_up()

    def _disconnected(self, link: _LinkProtocol, reason: Failure) -> None:
        if self._protocol is not link:
            return
        self._protocol = None
        self._socket = None
        self._out.clear()  # never sent on the next connection: they fail below
        if not self._stopped:
            log.warning(
                "connection to gregor slave %s:%d lost (%s); %d requests in flight fail",
                self.host,
                self.port,
                reason.getErrorMessage(),
                len(self._in_flight),
            )
        self._fail_all(DISCONNECTED)
        self._on_down()
        self.after_callbacks()

    def _reply(self, code: int, opaque: int, body: bytes) -> None:
        entry = self._in_flight.pop(opaque, None)
        if entry is not None:
            entry[1](code, body)

    # --- timeouts ------------------------------------------------------------------------

    def _expire(self) -> None:
        """Fail the requests whose deadline passed; re-arm for the oldest one left."""
        self._timer = None
        now = self._reactor.seconds()
        in_flight = self._in_flight
        expired = []
        while in_flight:
            opaque, (deadline, done) = next(iter(in_flight.items()))
            if deadline > now:
                self._timer = self._reactor.callLater(deadline - now, self._expire)
                break
            del in_flight[opaque]
            expired.append(done)
        if expired:
            log.warning(
                "gregor slave %s:%d did not answer %d requests within %.0f ms",
                self.host,
                self.port,
                len(expired),
                self._timeout_s * 1000,
            )
        for done in expired:
            done(TIMED_OUT, b"")
        self.after_callbacks()

    def _fail_all(self, code: int) -> None:
        failed = [done for _deadline, done in self._in_flight.values()]
        self._in_flight.clear()
        for done in failed:
            done(code, b"")


class _LinkProtocol(protocol.Protocol):
    """Reads the slave's replies and hands them to the link (thin, STYLE 2)."""

    def __init__(self, link: SlaveLink) -> None:
        self._link = link
        self._decoder = Decoder(HEADER_BYTES_MAX, REPLY_BODY_BYTES_MAX)
        # True while the decoder holds nothing (no bytes, no body to skip, not broken): a
        # read that is then exactly one whole reply needs no decoder (``_one_reply``).
        self._decoder_idle = True
        self.socket: Any = None  # the transport's socket (``getHandle``), if it has one

    def connectionMade(self) -> None:
        set_no_delay = getattr(self.transport, "setTcpNoDelay", None)
        if set_no_delay is not None:
            set_no_delay(True)
        get_handle = getattr(self.transport, "getHandle", None)
        if get_handle is not None:
            self.socket = get_handle()
        self._link._connected(self)

    def connectionLost(self, reason: Failure = protocol.connectionDone) -> None:
        self._link._disconnected(self, reason)

    def dataReceived(self, data: bytes) -> None:
        if self._decoder_idle and self._one_reply(data):
            return
        decoder = self._decoder
        decoder.receive_data(data)
        self._decoder_idle = False
        reply = self._link._reply
        while True:
            results = decoder.next_result_run(REPLIES_PER_READ_MAX)
            if results:
                # ``_reply`` inlined: a run's replies are the hot path of a pipelined load.
                pop = self._link._in_flight.pop
                for code, opaque, body in results:
                    entry = pop(opaque, None)
                    if entry is not None:
                        entry[1](code, body)
                if not decoder.buffered_bytes:  # the usual read: whole replies only
                    self._decoder_idle = True
                    self._link.after_callbacks()
                    return
                continue
            try:
                frame = decoder.next_command()
            except LocalProtocolError as error:  # not a broker: drop the connection
                link = self._link
                log.error("gregor slave %s sent bad data (%s); reconnecting", link.host, error)
                transport: Any = self.transport
                transport.loseConnection()
                return
            if frame is NEED_DATA:
                self._link.after_callbacks()
                return
            if isinstance(frame, Result):
                reply(frame.code, frame.opaque, frame.body)
            # Anything else (a value frame, a too-large reply) answers none of our requests:
            # it is dropped, and a request it was meant for times out.

    def _one_reply(self, data: bytes) -> bool:
        """Answer the request of a read that is exactly one whole ``result`` frame to one of
        ours (a synchronous producer's put), as ``next_result_run`` would decode it, without
        the decoder: one match of its pattern. False, having done nothing, for any other read.
        """
        found = RESULT_RUN.match(data)
        if found is None:
            return False
        code, length, opaque = found.groups()
        body_start = found.end()
        if body_start + int(length) != len(data):
            return False
        entry = self._link._in_flight.pop(int(opaque), None)
        if entry is None:  # not ours (or out of range): the decoder's way decides
            return False
        entry[1](int(code), data[body_start:])
        self._link.after_callbacks()
        return True


class _LinkFactory(protocol.ReconnectingClientFactory):
    """Reconnects with back-off (Twisted's), quietly: the link logs what matters."""

    # Twisted annotates the delay as int; it is used as seconds, fractions included.
    initialDelay = RECONNECT_DELAY_MIN_S  # type: ignore[assignment]
    maxDelay = RECONNECT_DELAY_MAX_S  # type: ignore[assignment]
    factor = 1.6
    noisy = False

    def __init__(self, link: SlaveLink) -> None:
        self._link = link

    def buildProtocol(self, addr: Any) -> _LinkProtocol:
        self.resetDelay()
        return _LinkProtocol(self._link)
