"""``BrokerProtocol``: bytes -> Decoder -> handlers -> replies, for one TCP connection.

``dataReceived`` feeds the decoder, dispatches every complete command to ``handlers.py`` and
queues the replies; consecutive plain puts go to ``put_run.handle_put_run`` in one call
and consecutive puts of one transaction to ``tx_handlers.handle_tx_put_run``, both found by
``Decoder.next_put_run``, with the same effects and replies as one ``handle_put`` each; on a
gregor slave, consecutive syncs go to ``sync_run.handle_sync_run`` (``next_sync_run``), as
one ``handle_sync`` each, and a read that is exactly one whole sync (``Decoder.one_sync``)
to ``sync_run.handle_single_sync`` without passing through the decoder's buffer.
Replies may leave in a different order from the requests (a put waits for its fsync, a get
does not); each carries its request's opaque.

Output and backpressure (STYLE 3, 13):

* Replies that become ready while handling one read (or one fsync batch) are gathered and
  written together by ``flush_output``. When the transport has nothing buffered they go
  straight to the socket, saving Twisted's extra reactor turn per request. Whether it has
  is read from ``FileDescriptor``'s private buffers, only when an import-time probe
  (``fd_buffers.fd_buffer_layout_known``) finds them where this Twisted keeps them; otherwise every
  reply goes through ``transport.write``.
* The protocol is the transport's streaming producer. A ``FileReply`` is sent with
  ``os.sendfile`` while the socket takes it, else read in chunks of ``CHUNK_BYTES`` while
  the transport is not paused, so a get never builds its whole body in memory.
* Replies that arrive while a stream is running, or while the transport is paused, wait in
  a queue. Reading from the peer stops while the transport's buffer is full (it paused this
  producer: the peer does not read its replies, so its requests wait in its own socket
  rather than being read and answered into a queue), while more than ``INFLIGHT_MAX``
  requests are unanswered or more than ``QUEUED_BYTES_MAX`` reply bytes are queued, and
  resumes once the buffer drained and those are below half.
  Queued bytes also count in the broker's ``reply_budget`` (``maxQueuedReplyBytes`` over all
  connections), which stops reading from the connections holding the most while it is over
  (``hold_reading``) until their queues drain (``release_reading``).
* One read's requests other than plain puts are handled ``TURN_REQUESTS_MAX`` at a time:
  beyond that, reading stops and the rest of the read waits for the next reactor turn
  (``_yield_turn``), so a connection that floods requests (a thousand gets in one read)
  delays the other connections by one slice, not by its whole read. While the transport's
  buffer is full, the rest of the read waits until it has drained (``resumeProducing``).
* Malformed input closes the connection (Java sends nothing either); replies already queued
  are still written first. After the peer's FIN (a half-close), the replies to every request
  read before it are still sent, then the connection closes. A reply whose segment was
  closed by retention before it was sent closes only its connection.

Reactor thread only.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from typing import Any, cast

from twisted.internet.interfaces import IHalfCloseableProtocol
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.python.failure import Failure
from zope.interface import classImplements

from meta.errors import LocalProtocolError, StoreError
from meta.log_limits import PROTOCOL_WARNINGS
from meta.protocol.codec import HEADER_BYTES_MAX, NEED_DATA, Decoder
from meta.protocol.commands import Quit
from meta.server.fd_buffers import FD_BUFFER_LAYOUT_KNOWN, buffer_never_empty, fd_buffer_empty
from meta.server.handlers import HANDLERS, dispatch_key
from meta.server.put_run import handle_put_run
from meta.server.replies import PENDING, FileReply
from meta.server.services import BrokerServices
from meta.server.sync_run import handle_single_sync, handle_sync_run
from meta.server.transport import BrokerTransport
from meta.server.tx_handlers import handle_tx_put_run

log = logging.getLogger("meta.server")

CHUNK_BYTES = 256 * 1024
INFLIGHT_MAX = 16384
QUEUED_BYTES_MAX = 8 * 1024 * 1024
# The memory a queued ``FileReply`` takes on CPython 3.11, in the allocator's 16-byte blocks:
# the object (64), its header (up to 31 bytes of ``value LENGTH OPAQUE``: 64), its position
# and length (32 each: ints of their own, except where one happens to be shared, such as the
# transfer limit as a slice's length in the pure-Python store; the compiled store makes a new
# int for every slice) and the queue's slot (8). Its body stays in the segment file.
FILE_REPLY_COST_BYTES = 200
# Puts decoded per put run; a run is also bounded by the bytes of one read.
PUT_RUN_MAX = 4096
# Requests other than plain puts handled per reactor turn and connection.
TURN_REQUESTS_MAX = 256


class BrokerProtocol(Protocol):
    """One client connection of a ``Broker``.

    Attributes:
        put_runs: take runs of plain puts through ``put_run`` (True); False sends every put
            through ``handle_put`` (the tests compare the two).
    """

    put_runs = True
    # A TCP transport (``tcp.Server``) once connected: its producer and private-buffer
    # methods are used, which ``ITransport`` does not name.
    transport: Any

    def __init__(self, broker: BrokerServices) -> None:
        self._broker = broker
        self._decoder = Decoder(HEADER_BYTES_MAX, broker.config.message_bytes_max)
        self._queue: deque[bytes | FileReply] = deque()
        # Replies ready to go, written with one transport write by ``flush_output``.
        self._out: list[bytes] = []
        self._queued_bytes = 0
        self._stream: list | None = None  # [segment, position, remaining] of the running reply
        self._inflight = 0
        self._put_targets: dict = {}  # the put runs' partition lookups (``puts.Targets``)
        self._transport_paused = False
        self._reading_paused = False
        self._held = False  # not read from for the broker's reply budget
        self._turn_waiting = False  # the rest of a read waits for the next reactor turn
        self._closed = False
        self._read_closed = False  # the peer sent its FIN
        self._requests_stopped = False  # the broker is closing: no request is handled
        self.received_bytes = 0  # every byte read (``connections.ConnectionGuard``)
        self.transport = None  # ``Protocol``'s until ``makeConnection``

    # --- Twisted callbacks ---------------------------------------------------------------------

    def connectionMade(self) -> None:
        # Replies are written whole (one write per batch); Nagle would hold a late reply
        # (a commit after its puts' replies) for the client's delayed ACK, ~40 ms.
        set_no_delay = getattr(self.transport, "setTcpNoDelay", None)
        if set_no_delay is not None:
            set_no_delay(True)
        transport = self.transport
        if transport.__class__ is BrokerTransport:
            broker_transport: BrokerTransport = transport  # typed: a field when compiled
            broker_transport.broker_protocol = self  # its reads call ``dataReceived`` directly
        transport.registerProducer(self, True)
        self._broker.connection_made(self)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._closed = True
        self._queue.clear()
        self._out.clear()
        self._stream = None
        if self._queued_bytes or self._held:
            self._broker.reply_budget.lost(self, self._queued_bytes)
            self._queued_bytes = 0
        self._broker.connection_lost(self)

    def dataReceived(self, data: bytes) -> None:
        self.received_bytes += len(data)
        if self._requests_stopped:
            return
        decoder = self._decoder
        broker = self._broker
        # A gregor slave's syncs take their batch path (``sync_run``).
        sync = broker.sync
        sync_runs = self.put_runs and sync is not None and sync.role == "gregor"
        if sync_runs and not self._closed:
            # A read that is one whole sync (a master replicating a synchronous producer's
            # put) is taken without the decoder's buffer, by the same rules.
            fields = decoder.one_sync(data)
            if fields is not None:
                # Called first: a sync its partition refuses is answered during the call.
                pending = handle_single_sync(broker, fields, self, self._put_targets)
                self._inflight += pending
                broker.end_of_batch()
                self._update_reading()
                return
        decoder.receive_data(data)
        # Plain puts take the batch fast path (``put_run``); a slave answers every put 403.
        put_runs = self.put_runs and not broker.refuses_puts
        handled = 0
        while not self._closed:
            if sync_runs:
                syncs = decoder.next_sync_run(PUT_RUN_MAX)
                if syncs:
                    pending = handle_sync_run(broker, syncs, self, self._put_targets)
                    self._inflight += pending  # after the call, as above
                    if not decoder.buffered_bytes:
                        break
                    continue
            if put_runs:
                key, puts = decoder.next_put_run(PUT_RUN_MAX)
                if puts:
                    if key is None:
                        self._inflight += handle_put_run(broker, puts, self, self._put_targets)
                    else:
                        self._send(handle_tx_put_run(broker, key, puts, self, self._put_targets))
                    if not decoder.buffered_bytes:
                        break
                    continue
            try:
                command = decoder.next_command()
            except LocalProtocolError as error:
                peer = self.transport.getPeer()
                host, address = getattr(peer, "host", "?"), _address(peer)
                PROTOCOL_WARNINGS.warn(log, host, "closing connection from %s: %s", address, error)
                self._close()
                break
            if command is NEED_DATA:
                break
            if command.__class__ is Quit:
                self._close()
                break
            reply = HANDLERS[dispatch_key(command)](broker, command, self)
            if reply is PENDING:
                self._inflight += 1
            elif reply is not None:
                self._send(cast("bytes | FileReply", reply))
            handled += 1
            if decoder.buffered_bytes and (handled >= TURN_REQUESTS_MAX or self._transport_paused):
                self._yield_turn()
                break
        # Puts decoded from this read were staged; one write per partition covers them all,
        # and replies that need no fsync leave right here, in one transport write.
        broker.end_of_batch()
        self._update_reading()

    def respond(self, reply: bytes | FileReply | None) -> None:
        """The later reply of a handler that answered ``PENDING`` (called exactly once)."""
        self._inflight -= 1
        if reply is not None and not self._closed:
            self._send(reply)
            if self._reading_paused:
                self._update_reading()
        if self._read_closed:
            self._close_when_answered()

    def respond_many(self, count: int, replies: bytes) -> None:
        """The later replies of ``count`` pending puts of a put run, encoded and joined."""
        self._inflight -= count
        if replies and not self._closed:
            self._send(replies)
            if self._reading_paused:
                self._update_reading()
        if self._read_closed:
            self._close_when_answered()

    def readConnectionLost(self) -> None:
        """The peer sent its FIN: answer what was read before it, then close."""
        self._read_closed = True
        self._close_when_answered()

    def writeConnectionLost(self) -> None:
        """Our side of the connection was shut down (never asked for): nothing to do."""

    def _close_when_answered(self) -> None:
        """After a half-close, close once every reply is handed to the transport (which
        sends what it holds before the FIN)."""
        if self._closed or self._inflight or self._turn_waiting:
            return
        self.flush_output()
        if self._stream is None and not self._queue:
            self._close()

    def config_changed(self) -> None:
        """The broker reloaded its configuration: forget the put runs' partition lookups."""
        self._put_targets.clear()

    def send_reply(self, reply: bytes | FileReply) -> None:
        """A reply that is ready now (a put run hands over ``handle_put``'s immediate ones)."""
        self._send(reply)

    # --- producer interface (the transport calls these) -----------------------------------------

    def pauseProducing(self) -> None:
        self._transport_paused = True
        self._update_reading()  # the peer does not read: stop reading its requests

    def resumeProducing(self) -> None:
        self._transport_paused = False
        self._pump()
        if self._turn_waiting:  # requests read before the pause wait for this
            self._broker.call_soon(self._next_turn)
        self._update_reading()
        if self._read_closed:
            self._close_when_answered()

    def stopProducing(self) -> None:
        self._closed = True

    # --- output ---------------------------------------------------------------------------------

    def _send(self, reply: bytes | FileReply) -> None:
        if self._closed:
            return
        if self._stream is None and not self._queue and not self._transport_paused:
            if reply.__class__ is bytes:
                out = self._out
                out.append(reply)
                if len(out) == 1:
                    self._broker.output_pending(self)
                return
            self.flush_output()
            self._write(reply)
            return
        self._queue.append(reply)
        size = len(reply) if isinstance(reply, bytes) else FILE_REPLY_COST_BYTES
        self._queued_bytes += size
        self._broker.reply_budget.queued(self, size)

    def flush_output(self) -> None:
        """Write the replies gathered since the last flush with one transport write.

        The broker calls this after each read, each fsync batch and each long-poll timeout:
        one write per batch instead of one per reply (a Twisted write costs microseconds).
        """
        out = self._out
        if out and not self._closed:
            data = out[0] if len(out) == 1 else b"".join(out)
            out.clear()
            self._write(data)

    def _write(self, reply: bytes | FileReply) -> None:
        data = reply if isinstance(reply, bytes) else reply.header
        transport = self.transport
        if transport.__class__ is BrokerTransport:
            broker_transport: BrokerTransport = transport  # typed: a direct call when compiled
            sent = broker_transport.send_now(data)
        else:
            sent = send_now(transport, data)
        if sent < len(data):
            self.transport.write(data[sent:] if sent else data)
        if not isinstance(reply, bytes):
            self._stream = [reply.segment, reply.position, reply.length]
            self._pump()

    def _pump(self) -> None:
        """Write queued replies and stream chunks until done or the transport pauses us."""
        while not self._closed and not self._transport_paused:
            if self._stream is not None:
                self._stream_chunk()
                continue
            if not self._queue:
                return
            reply = self._queue.popleft()
            size = len(reply) if isinstance(reply, bytes) else FILE_REPLY_COST_BYTES
            self._queued_bytes -= size
            self._broker.reply_budget.sent(self, size)
            self._write(reply)

    def _stream_chunk(self) -> None:
        assert self._stream is not None  # _pump calls this while a stream runs
        segment, position, remaining = self._stream
        sent = sendfile_now(self.transport, segment, position, remaining)
        if sent == 0:
            size = min(remaining, CHUNK_BYTES)
            try:
                chunk = segment.read(position, size)
            except StoreError as error:
                # Retention closed the segment under this reply (its descriptor is gone):
                # end this connection only; the consumer reconnects and gets 301.
                log.warning("closing a connection streaming %s: %s", segment.path, error)
                self._close()
                return
            if len(chunk) != size:
                log.error("segment %s shrank while streaming; closing the connection", segment)
                self._close()
                return
            self.transport.write(chunk)
            sent = size
        remaining -= sent
        self._stream = None if remaining == 0 else [segment, position + sent, remaining]

    # --- reading backpressure ---------------------------------------------------------------------

    def _update_reading(self) -> None:
        if self._closed or self._requests_stopped:
            return
        if not self._reading_paused:
            if (
                self._transport_paused
                or self._held
                or self._inflight > INFLIGHT_MAX
                or self._queued_bytes > QUEUED_BYTES_MAX
            ):
                self._reading_paused = True
                self.transport.pauseProducing()  # a TCP transport stops reading
        elif (
            not self._transport_paused
            and not self._held
            and not self._turn_waiting
            and self._inflight <= INFLIGHT_MAX // 2
            and self._queued_bytes <= QUEUED_BYTES_MAX // 2
        ):
            self._reading_paused = False
            self.transport.resumeProducing()

    def _yield_turn(self) -> None:
        """Stop reading and handle the rest of the read in the next reactor turn, so the
        other connections are served in between."""
        self._turn_waiting = True
        self.transport.pauseProducing()
        self._broker.call_soon(self._next_turn)

    def _next_turn(self) -> None:
        if self._transport_paused and not self._closed and not self._requests_stopped:
            return  # the peer reads none of its replies: ``resumeProducing`` goes on
        self._turn_waiting = False
        if self._closed:
            return
        self.dataReceived(b"")
        if not self._turn_waiting and not self._reading_paused:
            self.transport.resumeProducing()
        if self._read_closed:
            self._close_when_answered()

    def hold_reading(self) -> None:
        """Stop reading requests: the broker's reply budget is over and this connection
        holds the most (``reply_budget.ReplyBudget``)."""
        self._held = True
        self._update_reading()

    def stop_requests(self) -> None:
        """The broker is stopping: handle no further request. Requests already handled are
        answered; later ones (read or not) go unanswered with the connection, so a client
        sends them again elsewhere, as after any lost connection, instead of being told
        that they were not stored. What arrives from now on is read and dropped: closing a
        socket that holds unread bytes resets the connection, and a reset can discard
        replies the client has not read yet."""
        self._requests_stopped = True
        self._held = False
        if self._reading_paused and not self._turn_waiting:
            self._reading_paused = False
            self.transport.resumeProducing()

    def finish(self) -> bool:
        """After ``stop_requests`` and the store's close (which answered the waiting puts):
        write every reply, then the FIN. The connection closes when the client closes its
        side (``readConnectionLost``) or the broker closes it. Returns whether the FIN is
        on its way (False: replies are still queued behind a slow reader)."""
        self.flush_output()
        if self._closed or self._stream is not None or self._queue:
            return False
        self.transport.loseWriteConnection()
        return True

    def release_reading(self) -> None:
        """Read requests again once this connection's own bounds allow (its queue drained)."""
        self._held = False
        self._update_reading()

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            self.transport.unregisterProducer()
            self.transport.loseConnection()

    @property
    def inflight(self) -> int:
        return self._inflight

    @property
    def queued_bytes(self) -> int:
        """Bytes of replies waiting in this connection's queue (``FileReply`` at its cost)."""
        return self._queued_bytes

    @property
    def pending_header_bytes(self) -> int:
        """Bytes of a request header received but not complete yet (the header deadline)."""
        return self._decoder.pending_header_bytes

    @property
    def pending_body(self) -> tuple[int, int]:
        """``(received, length)`` of a request body that is due, else ``(0, 0)`` (the body
        deadline)."""
        return self._decoder.pending_body

    @property
    def reading_paused(self) -> bool:
        """Whether the broker stopped reading from this connection (its deadlines wait)."""
        return self._reading_paused or self._turn_waiting


# Declared here rather than with ``@implementer``: mypyc compiles a class that has a class
# decorator as a plain Python class, whose every ``self.`` attribute is a dictionary lookup;
# without one, ``BrokerProtocol`` is a native class (its own attributes are struct fields)
# that still subclasses Twisted's ``Protocol``.
classImplements(BrokerProtocol, IHalfCloseableProtocol)


# Bound at import from ``fd_buffers``' probe; a module global, so tests may replace it.
_buffer_empty = fd_buffer_empty if FD_BUFFER_LAYOUT_KNOWN else buffer_never_empty
"""Whether the transport has nothing buffered, so a reply may go straight to the socket."""


def send_now(transport, data: bytes | bytearray | memoryview) -> int:
    """Send ``data`` straight to the socket when nothing is buffered; return bytes sent.

    Twisted buffers every write until the next reactor turn; for a request/reply client that
    is a whole extra epoll round per request. Sending at once when the buffer is empty keeps
    the order of bytes and saves that turn; whatever the socket does not take is buffered by
    the caller as usual (``transport.write`` of the rest). Also used by the samsa master's
    link to its slave (``meta.sync.slave_link``, given it by ``meta.server.main``).
    """
    if not _buffer_empty(transport):
        return 0
    sent = transport.writeSomeData(data)
    return sent if isinstance(sent, int) else 0


def sendfile_now(transport, segment, position: int, length: int) -> int:
    """``os.sendfile`` from the segment to the socket when nothing is buffered; bytes sent.

    0 when the transport has bytes buffered, the socket takes none, or ``sendfile`` fails
    (the caller then writes a chunk it read). Also used by the HTTP protocol's gets
    (``meta.server.http.channel``).
    """
    if not _buffer_empty(transport):
        return 0
    try:
        return os.sendfile(transport.fileno(), segment.fileno(), position, length)
    except (BlockingIOError, InterruptedError):
        return 0
    except OSError as error:
        log.debug("sendfile failed (%s); falling back to reads", error)
        return 0


def _address(peer) -> str:
    return f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}"


class BrokerFactory(Factory):
    """Builds a ``BrokerProtocol`` per accepted connection."""

    def __init__(self, broker: BrokerServices) -> None:
        self._broker = broker

    def buildProtocol(self, addr) -> BrokerProtocol:
        return BrokerProtocol(self._broker)
