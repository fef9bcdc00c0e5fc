"""twisted.web serving the HTTP protocol (docs/http.md) on the broker's reactor.

Every request is turned into the TCP protocol's command (``params``) and handled by the TCP
handler (``meta.server.handlers``): a put goes through ``meta.server.puts`` and its
partition's staging, and its reply is sent only when the store acknowledges it (after the
fsync in group commit, docs/durability.md). Counters, status codes and texts are the TCP ones
(H5), and ``stats http`` counts the HTTP requests among them. A handler's ``result`` frame
is decoded with the shared codec and becomes the status and a ``text/plain; charset=utf-8``
body (H6). A 301 adds ``X-Meta-Offset`` and no
``Location``. A get's data is ``application/octet-stream``, streamed from the segment in
chunks by a producer that honours ``pauseProducing`` (twisted.web writes through its own
channel, so ``os.sendfile`` is not available here).

Bodies (H4): a put whose ``Content-Length`` is over ``maxMessageSize`` is answered 413 with
``puts.too_large``'s text as soon as its headers are read, before any of the body (and with
no ``100 Continue``), and the connection is closed (``ProtocolChannel``). Otherwise
``ProtocolRequest`` keeps at most ``maxMessageSize`` bytes: a chunked body that grows over it
is discarded as it arrives and the put is answered 413 once it ends. The body is never parsed
as a form (``parsePOSTFormSubmission=False``), and a body whose size is not ``length`` is 400.

Connections follow the TCP port's settings: at most ``maxConnections`` open on the HTTP port
(``ConnectionLimit``), and closed after ``idleConnectionTimeoutInSeconds`` without a byte
(twisted.web's timeout). Header size is twisted.web's bound (16 KiB, 500 headers).

Reactor thread only.
"""

from __future__ import annotations

import io
import logging
from typing import Any

from twisted.protocols import policies
from twisted.web import http, resource, server

from meta.errors import MetaError, StoreError
from meta.protocol.codec import decode_all
from meta.protocol.commands import BodyTooLarge, Put, Result
from meta.server.handlers import handle_get, handle_offset, handle_put
from meta.server.http.params import (
    METHODS,
    BadParameter,
    get_command,
    offset_command,
    parse_query,
    put_parameters,
    route,
)
from meta.server.puts import too_large
from meta.server.replies import PENDING, FileReply
from meta.web import listen_site

log = logging.getLogger("meta.server.http")

CHUNK_BYTES = 256 * 1024
TEXT = b"text/plain; charset=utf-8"
OCTETS = b"application/octet-stream"
OFFSET_HEADER = b"X-Meta-Offset"
PORT_KEY = "serverPort"
REFUSED_LOG_INTERVAL_S = 60.0


class HttpListenError(MetaError):
    """The HTTP protocol cannot listen (its port is taken or not allowed)."""


class _Discarded:
    """A request body sink that keeps nothing and counts the bytes (an over-limit body)."""

    def __init__(self, received: int) -> None:
        self.received = received

    def write(self, data: bytes) -> None:
        self.received += len(data)

    def seek(self, *_: int) -> None:
        pass

    def tell(self) -> int:
        return 0

    def read(self, *_: int) -> bytes:
        return b""

    def close(self) -> None:
        pass


class ProtocolRequest(server.Request):
    """A request whose body is kept in memory up to ``maxMessageSize`` and dropped beyond.

    Attributes:
        body_over_limit: the body's size (or its size so far) when it exceeded the limit,
            else None.
    """

    body_over_limit: int | None = None

    def _body_bytes_max(self) -> int:
        return self.channel.site.broker.config.message_bytes_max

    def gotLength(self, length: int | None) -> None:
        if length is not None and length > self._body_bytes_max():
            self.body_over_limit = length
            self.content = _Discarded(0)
        else:
            self.content = io.BytesIO()

    def handleContentChunk(self, data: bytes) -> None:
        content = self.content
        if isinstance(content, _Discarded):
            content.write(data)
            return
        if content.tell() + len(data) > self._body_bytes_max():
            # A chunked body grew past the limit: drop what was kept and the rest.
            self.body_over_limit = content.tell() + len(data)
            self.content = _Discarded(self.body_over_limit)
            return
        content.write(data)


class ProtocolChannel(http.HTTPChannel):
    """An HTTP/1.x connection that refuses an oversized put before reading its body.

    When a request's ``Content-Length`` is over ``maxMessageSize`` and the request is a
    well-formed ``/put`` (``ProtocolResource.refuse_early``), the 413 is written as soon as
    the headers are in, with ``Connection: close``, and the connection closes after it:
    nothing of the body is read or kept, and a client that sent ``Expect: 100-continue`` never
    sends it. Bytes of the body already received are dropped.
    """

    _refused = False

    def allHeadersReceived(self) -> None:
        refusal = None
        if self.length is not None:
            resource = self.site.resource
            refusal = resource.refuse_early(self._command, self._path, self.length)
        if refusal is None:
            super().allHeadersReceived()
            return
        self._refused = True
        self.requests[-1].gotLength(self.length)  # a sink for body bytes already received
        self.transport.write(refusal)
        self.loseConnection()

    def allContentReceived(self) -> None:
        if not self._refused:
            super().allContentReceived()

    def dataReceived(self, data: bytes) -> None:
        if not self._refused:
            super().dataReceived(data)


class ProtocolSite(server.Site):
    """The site of the HTTP protocol: one ``ProtocolResource``, bodies never parsed as forms."""

    protocol = ProtocolChannel
    requestFactory = ProtocolRequest

    def __init__(self, broker: Any) -> None:
        timeout = broker.config.idle_connection_timeout_s or None
        super().__init__(ProtocolResource(broker), timeout=timeout, parsePOSTFormSubmission=False)
        self.broker = broker
        self.noisy = False

    def log(self, request: Any) -> None:
        """No access log (a busy producer would flood the broker's log)."""


class ProtocolResource(resource.Resource):
    """Every path: dispatch on the first segment (H2) to put, get or offset."""

    isLeaf = True

    def __init__(self, broker: Any) -> None:
        super().__init__()
        self._broker = broker

    def render(self, request: Any) -> Any:
        counters = self._broker.counters
        counters.http_requests += 1
        name = route(request.path)
        if name is None:
            return _text(request, 404, b"Not found: the paths are /get, /put and /offset\n")
        if request.method not in METHODS[name]:
            request.setHeader(b"Allow", b", ".join(METHODS[name]))
            allowed = " or ".join(method.decode() for method in METHODS[name])
            return _text(request, 405, f"/{name} takes {allowed}\n".encode())
        try:
            params = parse_query(request.uri)
            if name == "put":
                return self._put(request, params)
            command = get_command(params) if name == "get" else offset_command(params)
        except BadParameter as error:
            return _text(request, 400, f"{error}\n".encode())
        exchange = Exchange(request)
        if name == "get":
            counters.http_get += 1
            handler = handle_get
        else:
            counters.http_offset += 1
            handler = handle_offset
        exchange.respond(handler(self._broker, command, exchange))
        return server.NOT_DONE_YET

    def refuse_early(self, method: bytes, uri: bytes, length: int) -> bytes | None:
        """The whole HTTP response refusing a put of ``length`` body bytes, when it is over
        ``maxMessageSize`` and ``method``/``uri`` are a well-formed put; None otherwise (the
        request is then read and answered as usual). Counts the request and the refusal."""
        broker = self._broker
        if length <= broker.config.message_bytes_max or route(uri.partition(b"?")[0]) != "put":
            return None
        if method not in METHODS["put"]:
            return None
        try:
            put = put_parameters(parse_query(uri))
        except BadParameter:
            return None
        broker.counters.http_requests += 1
        broker.counters.http_put += 1
        event = BodyTooLarge("put", max(length, put.length), 0, put.topic, put.partition)
        body = _result(too_large(broker, event)).body
        head = (
            b"HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: %s\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (TEXT, len(body))
        )
        return head + body

    def _put(self, request: Any, params: dict[str, str]) -> Any:
        put = put_parameters(params)
        broker = self._broker
        broker.counters.http_put += 1  # counted as handle_put and too_large count cmd_put
        if request.body_over_limit is not None or put.length > broker.config.message_bytes_max:
            size = max(request.body_over_limit or 0, put.length)
            event = BodyTooLarge("put", size, 0, put.topic, put.partition)
            return _text(request, 413, _result(too_large(broker, event)).body)
        body = request.content.getvalue()
        if len(body) != put.length:
            text = f"parameter length is {put.length} but the body has {len(body)} bytes\n"
            return _text(request, 400, text.encode())
        exchange = Exchange(request)
        command = Put(put.topic, put.partition, body, put.flag, 0, put.checksum)
        exchange.respond(handle_put(broker, command, exchange))
        broker.end_of_batch()  # stage the record now: the reply comes with the store's ack
        return server.NOT_DONE_YET


class Exchange:
    """One request waiting for its reply: the ``connection`` the TCP handlers answer."""

    def __init__(self, request: Any) -> None:
        self._request = request
        self._lost = False
        request.notifyFinish().addErrback(self._gone)

    def _gone(self, _: object) -> None:
        self._lost = True

    def respond(self, reply: Any) -> None:
        """Send a handler's reply: a ``result`` frame, a ``FileReply``, or later (PENDING)."""
        if reply is PENDING or self._lost:
            return
        request = self._request
        if isinstance(reply, FileReply):
            request.setResponseCode(200)
            request.setHeader(b"Content-Type", OCTETS)
            request.setHeader(b"Content-Length", b"%d" % reply.length)
            SegmentSender(request, reply.segment, reply.position, reply.length).start()
            return
        result = _result(reply)
        if result.code == 301:
            request.setHeader(OFFSET_HEADER, result.body)
        request.setHeader(b"Content-Length", b"%d" % len(result.body))
        request.write(_text(request, result.code, result.body))
        request.finish()


class SegmentSender:
    """Streams ``length`` bytes of a segment into a response, pausing with the transport."""

    def __init__(self, request: Any, segment: Any, position: int, length: int) -> None:
        self._request = request
        self._segment = segment
        self._position = position
        self._remaining = length
        self._paused = False
        self._sending = False

    def start(self) -> None:
        if self._request.method == b"HEAD":
            self._request.finish()
            return
        self._request.registerProducer(self, True)
        self._send()

    def _send(self) -> None:
        if self._sending:
            return  # resumed from inside our own write
        self._sending = True
        try:
            while self._remaining > 0 and not self._paused:
                size = min(self._remaining, CHUNK_BYTES)
                chunk = self._segment.read(self._position, size)
                if len(chunk) != size:
                    raise StoreError(f"segment {self._segment} shrank while streaming")
                self._position += size
                self._remaining -= size
                self._request.write(chunk)
        except StoreError as error:
            # Retention closed the segment under this reply: the body is cut short, so the
            # connection is closed (the client sees fewer bytes than Content-Length).
            log.warning("closing an HTTP get: %s", error)
            self._remaining = -1
            self._request.unregisterProducer()
            self._request.channel.transport.loseConnection()
            return
        finally:
            self._sending = False
        if self._remaining == 0:
            self._remaining = -1
            self._request.unregisterProducer()
            self._request.finish()

    def pauseProducing(self) -> None:
        self._paused = True

    def resumeProducing(self) -> None:
        self._paused = False
        if self._remaining > 0:
            self._send()

    def stopProducing(self) -> None:
        self._remaining = -1


class ConnectionLimit(policies.WrappingFactory):
    """The HTTP port's bound on open connections: ``maxConnections``, as the TCP port's.

    A connection beyond it is closed at once; the refusals are counted in ``refused`` and
    logged at most once per ``REFUSED_LOG_INTERVAL_S``.
    """

    noisy = False

    def __init__(self, site: ProtocolSite, reactor: Any) -> None:
        super().__init__(site)
        self._site = site
        self._reactor = reactor
        self.refused = 0
        self._logged_at_s: float | None = None

    def buildProtocol(self, addr: Any) -> Any:
        limit = self._site.broker.config.connections_max
        if len(self.protocols) >= limit:
            self.refused += 1
            now = self._reactor.seconds()
            if self._logged_at_s is None or now - self._logged_at_s >= REFUSED_LOG_INTERVAL_S:
                self._logged_at_s = now
                log.warning(
                    "HTTP connection refused: maxConnections=%d are open (%d refused so far)",
                    limit,
                    self.refused,
                )
            return None
        return super().buildProtocol(addr)


def _result(frame: bytes) -> Result:
    """The ``result`` frame a TCP handler answered, decoded with the shared codec."""
    (result,) = decode_all(frame)
    assert isinstance(result, Result), result  # handlers answer these commands with results
    return result


def _text(request: Any, code: int, body: bytes) -> bytes:
    request.setResponseCode(code)
    request.setHeader(b"Content-Type", TEXT)
    return body


def start_http(broker: Any, reactor: Any, port: int) -> Any:
    """Serve the HTTP protocol for ``broker`` on ``port`` (``hostName`` when set, H1).

    Returns:
        The listening port (``getHost().port`` is the chosen one when ``port`` is 0).

    Raises:
        HttpListenError: the port cannot be taken.
    """
    interface = broker.config.host_name or ""
    advice = f"set {PORT_KEY} in the jettyBroker properties file to a free port"
    factory = ConnectionLimit(ProtocolSite(broker), reactor)
    listening = listen_site(
        reactor, factory, port, interface, "the HTTP protocol", advice, HttpListenError
    )
    log.info(
        "HTTP protocol serving http://%s:%d/ (%s=%d)",
        interface or broker.host,
        listening.getHost().port,
        PORT_KEY,
        port,
    )
    return listening
