"""twisted.web for the broker's HTTP ports: the dashboard and the HTTP protocol.

* ``listen_site`` listens on ``interface:port`` (all interfaces when ``interface`` is empty,
  as the broker's TCP port does without ``hostName``, docs/compatibility.md) and turns a port
  that cannot be taken into a ``MetaError`` subclass whose text names the address and what
  to change.
* ``GuardedChannel`` is an HTTP/1.x connection under the broker's connection policy
  (``meta.server.connections.ConnectionGuard``), as the text port's connections are: the
  guard admits it against its port's cap and the overall one, closes it when idle, and
  resets it when a request's head is not complete within ``headerTimeoutInSeconds`` of its
  first byte (twisted.web's own timeout, which every byte restarts, is off).

  It also bounds the work one connection makes. twisted.web answers pipelined requests
  that are already buffered one after the other in one go, so a connection that pipelines
  thousands of gets would hold the reactor for all of them, and would go on answering them
  into the transport's buffer while its peer reads nothing. So after ``TURN_REQUESTS_MAX``
  requests in one reactor turn, and after any request while the transport's buffer is full
  (it paused this channel), parsing and reading stop (``LineReceiver``'s ``paused``, the
  transport's ``pauseProducing``) until the next turn, or until the buffer has drained. A
  response's producer registered while the buffer is full starts paused (twisted.web's
  ``registerProducer`` does not pause it, so a get would write its whole body).
* ``GuardedSite`` is a ``twisted.web.server.Site`` whose connections are ``GuardedChannel``
  (the dashboard's); the HTTP protocol's site (``meta.server.http.resource``) uses the channel
  through its own.

Reactor thread only.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.error import CannotListenError
from twisted.web import http, server

from meta.errors import MetaError

__all__ = ["TURN_REQUESTS_MAX", "GuardedChannel", "GuardedSite", "listen_site"]

TURN_REQUESTS_MAX = 4
"""Requests one HTTP connection is answered per reactor turn. The text port's slice is 256
requests (``meta.server.protocol``); an HTTP request through twisted.web costs some fifty
times as much, so a slice here takes no longer than one there (under a millisecond).
Clients that do not pipeline never reach it (a read carries one request)."""


def listen_site(
    reactor: Any,
    site: Any,
    port: int,
    interface: str,
    what: str,
    advice: str,
    error: type[MetaError] = MetaError,
) -> Any:
    """Listen on ``interface:port`` with ``site``; return the listening port.

    Args:
        reactor: the broker's reactor.
        site: a ``twisted.web.server.Site``, or a factory wrapping one.
        port: the TCP port, 0 for any free one.
        interface: the address to listen on, empty for all interfaces.
        what: names the listener in the error text (``the dashboard``).
        advice: the end of the error text, saying what to change.
        error: the class of the error raised.

    Raises:
        MetaError: (``error``) the port cannot be taken.
    """
    try:
        return reactor.listenTCP(port, site, interface=interface)
    except CannotListenError as failure:
        where = f"{interface}:{port}" if interface else f"port {port} (all interfaces)"
        raise error(f"{what} cannot listen on {where}: {failure.socketError}; {advice}") from None


class GuardedChannel(http.HTTPChannel):
    """An HTTP/1.x connection under the broker's ``ConnectionGuard`` (see the module doc).

    Its factory provides ``connection_guard``, ``port_limit`` (the port's
    ``connections.PortLimit``) and ``reactor``.

    Attributes:
        received_bytes: every byte read from the peer (the guard's idle check).
        turn_requests: requests answered in this reactor turn.
    """

    received_bytes = 0
    turn_requests = 0
    _replaying = False  # twisted.web hands buffered pipelined bytes back to dataReceived
    _receiving = True  # a request's head is awaited or arriving
    _request_start = -1  # stream offset of the first byte of that head, -1 before it
    _handling = False  # a request was received and is not answered yet
    _sliced = False  # the rest waits for the next reactor turn
    _output_paused = False  # the transport's buffer is full: the rest waits for it to drain
    _lost = False

    def connectionMade(self) -> None:
        super().connectionMade()
        factory = self.factory
        factory.connection_guard.admit(self, factory.port_limit)

    def connectionLost(self, reason: Any) -> None:
        self._lost = True
        self.factory.connection_guard.lost(self)
        super().connectionLost(reason)

    @property
    def pending_header_bytes(self) -> int:
        """Bytes received since a request's head began, while it is not complete."""
        start = self._request_start
        return self.received_bytes - start if start >= 0 else 0

    @property
    def pending_body(self) -> tuple[int, int]:
        """Always ``(0, 0)``: a request's body counts in ``pending_header_bytes`` (the whole
        request must arrive within the head's deadline)."""
        return 0, 0

    @property
    def reading_paused(self) -> bool:
        """Whether reading stopped for a slice or a full buffer (the deadlines wait)."""
        return bool(self.paused) or self._output_paused

    @property
    def inflight(self) -> int:
        """1 while a received request is being answered (never idle then), else 0."""
        return 1 if self._handling else 0

    def dataReceived(self, data: bytes) -> None:
        if self._replaying:  # buffered bytes handed back after a response (``setLineMode``)
            super().dataReceived(data)
            return
        if data:
            if self._receiving and self._request_start < 0:
                self._request_start = self.received_bytes
            self.received_bytes += len(data)
        self.turn_requests = 0  # a read starts a reactor turn's slice
        super().dataReceived(data)

    def setLineMode(self, extra: bytes = b"") -> Any:
        """twisted.web's replay of the bytes that arrived while a request was answered:
        they were received already (not counted again), and the next head starts there."""
        if extra and self._receiving and self._request_start < 0:
            self._request_start = self.received_bytes - len(extra)
        self._replaying = True
        try:
            return super().setLineMode(extra)
        finally:
            self._replaying = False

    def allContentReceived(self) -> None:
        self._receiving = False
        self._request_start = -1
        self._handling = True
        super().allContentReceived()

    def requestDone(self, request: Any) -> None:
        self._handling = False
        self._receiving = True
        self.turn_requests += 1
        if self.turn_requests >= TURN_REQUESTS_MAX and not self._sliced:
            self._sliced = True
            self.factory.reactor.callLater(0, self._next_turn)
        if self._sliced or self._output_paused:
            self.paused = True  # ``LineReceiver``'s loop stops before the next request
        super().requestDone(request)  # resumes reading; parses buffered bytes unless paused
        if self.paused and not self._lost:
            self.transport.pauseProducing()

    def _next_turn(self) -> None:
        """Serve the next slice of buffered requests, unless the buffer is still full."""
        self._sliced = False
        if not self._output_paused:
            self._resume_parsing()

    def _resume_parsing(self) -> None:
        """Parse the buffered requests and read again (after a slice or a full buffer)."""
        if self._lost or not self.paused:
            return
        self.paused = False
        self.transport.resumeProducing()
        self.dataReceived(b"")

    def pauseProducing(self) -> None:
        """The transport's buffer is full: the response's producer pauses, and reading stops
        even while a request is answered (twisted.web would read on, keeping every pipelined
        request in memory); ``requestDone`` holds the requests already buffered."""
        self._output_paused = True
        super().pauseProducing()
        if not self._lost:
            self.transport.pauseProducing()

    def resumeProducing(self) -> None:
        """The transport's buffer has drained: go on with the response and the requests."""
        self._output_paused = False
        super().resumeProducing()
        if self._sliced:
            if not self._lost:
                self.transport.pauseProducing()  # twisted.web resumed reading: not this turn
        else:
            self._resume_parsing()

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        super().registerProducer(producer, streaming)
        if streaming and self._output_paused:
            producer.pauseProducing()  # it would write until the next pause, which never comes


class GuardedSite(server.Site):
    """A ``twisted.web.server.Site`` whose connections are ``GuardedChannel``.

    Args:
        resource: the root resource.
        guard: the broker's ``ConnectionGuard``.
        port_limit: this site's port, from ``guard.add_port``.
        reactor: the broker's reactor.
    """

    protocol = GuardedChannel

    def __init__(self, resource: Any, guard: Any, port_limit: Any, reactor: Any) -> None:
        super().__init__(resource, timeout=None, reactor=reactor)
        self.connection_guard = guard
        self.port_limit = port_limit
