"""The HTTP protocol's requests and site (docs/http.md), on twisted.web and the broker's reactor.

Every request is turned into the TCP protocol's command (``params``) and handled by the TCP
handler (``meta.server.handlers``). A put takes the TCP path's single put
(``put_run.handle_single_put``, the rules of ``meta.server.puts``, and ``handle_put`` for a
put that is not plain or reaches a slave) and its partition's staging; its reply is sent
only when the store acknowledges it (after the fsync in group commit, docs/durability.md).
Counters, status codes and texts are the TCP ones
(H5), and ``stats http`` counts the HTTP requests among them. A handler's ``result`` frame
is decoded with the shared codec and becomes the status and a ``text/plain; charset=utf-8``
body (H6). A 301 adds ``X-Meta-Offset`` and no ``Location``. A get's data is
``application/octet-stream``, sent from the segment by ``sender.SegmentSender``.

``ProtocolRequest`` is a ``twisted.web.http.Request`` whose ``process`` dispatches on the
path itself: the protocol has three fixed paths and no resource tree, so twisted.web's
``server`` layer (resource traversal, sessions, error pages) is not used. Responses carry
``Server`` and ``Date`` as twisted.web's ``server.Request`` writes them.

Bodies (H4): a put whose ``Content-Length`` is over ``maxMessageSize`` is answered 413 with
``puts.too_large``'s text as soon as its headers are read (``ProtocolSite.refuse_early``,
``channel.ProtocolChannel``). Otherwise ``ProtocolRequest`` keeps at most ``maxMessageSize``
bytes: a chunked body that grows over it is discarded as it arrives and the put is answered
413 once it ends. The body is never parsed as a form, and a body whose size is not
``length`` is 400.

Connections follow the broker's connection policy (``meta.server.connections``, through
``meta.web.GuardedChannel``): at most ``maxHttpConnections`` open on the HTTP port (and
``maxTotalConnections`` over all ports), closed after ``idleConnectionTimeoutInSeconds``
with no request in flight, reset when a request's head is not complete within
``headerTimeoutInSeconds`` of its first byte, and at most ``meta.web.TURN_REQUESTS_MAX``
pipelined requests answered per reactor turn. Header size is twisted.web's bound (16 KiB,
500 headers). There is no access log.

Reactor thread only.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from twisted import copyright
from twisted.web import http

from meta.errors import MetaError
from meta.protocol.codec import decode_result
from meta.protocol.commands import BodyTooLarge, Put, Result
from meta.server.handlers import handle_get, handle_offset, handle_put
from meta.server.http.channel import ProtocolChannel
from meta.server.http.params import (
    METHODS,
    BadParameter,
    get_command,
    offset_command,
    parse_query,
    put_parameters,
    route,
)
from meta.server.http.sender import SegmentSender
from meta.server.put_run import handle_single_put
from meta.server.puts import Targets, too_large
from meta.server.replies import PENDING, FileReply
from meta.server.stats import BrokerCounters
from meta.web import listen_site

log = logging.getLogger("meta.server.http")

TEXT = b"text/plain; charset=utf-8"
OCTETS = b"application/octet-stream"
OFFSET_HEADER = b"X-Meta-Offset"
SERVER = f"TwistedWeb/{copyright.version}".encode()
"""The ``Server`` header, as twisted.web's ``server.Request`` sends it."""
PORT_KEY = "serverPort"
CAP_KEY = "maxHttpConnections"


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


@contextmanager
def http_share(counters: BrokerCounters, command: str) -> Iterator[None]:
    """Count in ``http_<command>`` what the TCP handler run inside counts in
    ``cmd_<command>``: the HTTP share of that counter.

    The handlers own the rule of what ``cmd_put``, ``cmd_get`` and ``cmd_offset`` count
    (Java's: a put refused for its size counts, a request refused here for a bad
    parameter or a body that does not match ``length`` never reaches them and does not).
    Taking the share from them, rather than counting again here, keeps ``cmd_<command> -
    http_<command>`` (the TCP requests of ``metaq_requests_total``) from ever going down.
    A handler counts before it can fail, so the share is taken even when it raises.

    Args:
        counters: the broker's counters.
        command: ``put``, ``get`` or ``offset``.
    """
    name = f"cmd_{command}"
    before = getattr(counters, name)
    try:
        yield
    finally:
        share = f"http_{command}"
        setattr(counters, share, getattr(counters, share) + getattr(counters, name) - before)


class ProtocolRequest(http.Request):
    """One request of the HTTP protocol, and the ``connection`` its TCP handler answers.

    Its body is kept in memory up to ``maxMessageSize`` and dropped beyond.

    Attributes:
        body_over_limit: the body's size (or its size so far) when it exceeded the limit,
            else None.
        lost: the connection closed before the response was finished.
    """

    body_over_limit: int | None = None
    lost = False

    def __init__(self, channel: Any, *arguments: Any) -> None:
        super().__init__(channel, *arguments, parsePOSTFormSubmission=False)

    def _body_bytes_max(self) -> int:
        return self.channel.factory.broker.config.message_bytes_max

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

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        """twisted.web's ``requestReceived`` without its query parsing: the query is parsed
        once, by ``params.parse_query``, so ``args`` stays empty (and bodies are never forms)."""
        self.content.seek(0, 0)
        self.args = {}
        self.method, self.uri = command, path
        self.clientproto = version
        self.path = path.partition(b"?")[0]
        self.process()

    def connectionLost(self, reason: Any) -> None:
        self.lost = True
        super().connectionLost(reason)

    def process(self) -> None:
        """Answer the request (twisted.web calls this once its body is in)."""
        site = self.channel.factory
        self.setHeader(b"Server", SERVER)
        self.setHeader(b"Date", site.date_header())
        try:
            if site.broker.serving:
                self._dispatch(site.broker)
            else:
                self._refuse_while_stopping()
        except Exception:
            # A bug, not a bad request: log it and answer 500 rather than leave it hanging.
            log.exception("HTTP %r %r failed", self.method, self.uri)
            if self.lost or self.finished:
                return
            if self.startedWriting:
                self.channel.loseConnection()
            else:
                self._answer(500, b"internal error\n")

    def _refuse_while_stopping(self) -> None:
        """The broker is stopping (or not serving yet): 503 and ``Connection: close``, so a
        keep-alive client sends this request again elsewhere, or here once the broker serves,
        rather than read a 500 as "not stored" for good."""
        self.channel.persistent = False
        self.setHeader(b"Connection", b"close")
        self._answer(503, b"the broker is not serving: it is stopping or starting\n")

    def _dispatch(self, broker: Any) -> None:
        """Route the request (H2), parse its query (H3) and hand it to its TCP handler."""
        counters = broker.counters
        counters.http_requests += 1
        name = route(self.path)
        if name is None:
            self._answer(404, b"Not found: the paths are /get, /put and /offset\n")
            return
        if self.method not in METHODS[name]:
            self.setHeader(b"Allow", b", ".join(METHODS[name]))
            allowed = " or ".join(method.decode() for method in METHODS[name])
            self._answer(405, f"/{name} takes {allowed}\n".encode())
            return
        try:
            params = parse_query(self.uri)
            if name == "put":
                with http_share(counters, "put"):
                    self._put(broker, params)
                return
            command = get_command(params) if name == "get" else offset_command(params)
        except BadParameter as error:
            self._answer(400, f"{error}\n".encode())
            return
        handler = handle_get if name == "get" else handle_offset
        with http_share(counters, name):
            reply = handler(broker, command, self)
        self.respond(reply)

    def _put(self, broker: Any, params: dict[str, str]) -> None:
        put = put_parameters(params)
        if self.body_over_limit is not None or put.length > broker.config.message_bytes_max:
            size = max(self.body_over_limit or 0, put.length)
            event = BodyTooLarge("put", size, 0, put.topic, put.partition)
            self._answer(413, decode_result(too_large(broker, event)).body)
            return
        body = self.content.getvalue()
        if len(body) != put.length:
            text = f"parameter length is {put.length} but the body has {len(body)} bytes\n"
            self._answer(400, text.encode())
            return
        if broker.refuses_puts:  # a slave: handle_put answers it (refused_by_slave)
            command = Put(put.topic, put.partition, body, put.flag, 0, put.checksum)
            self.respond(handle_put(broker, command, self))
            return
        # The TCP path's single put: the same rules, and handle_put for anything not plain.
        fields = (put.topic.encode("ascii"), b"%d" % put.partition, put.flag, put.checksum)
        targets = self.channel.factory.put_targets(broker)
        handle_single_put(broker, [(*fields, b"0", body)], self, targets)
        broker.end_of_batch()  # stage the record now: the reply comes with the store's ack

    def send_reply(self, reply: Any) -> None:
        """A reply that is ready now (``put_run.handle_single_put`` hands over
        ``handle_put``'s immediate ones)."""
        self.respond(reply)

    def respond(self, reply: Any) -> None:
        """Send a handler's reply: a ``result`` frame, a ``FileReply``, or later (PENDING)."""
        if reply is PENDING or self.lost:
            return
        if isinstance(reply, FileReply):
            self.setResponseCode(200)
            self.setHeader(b"Content-Type", OCTETS)
            self.setHeader(b"Content-Length", b"%d" % reply.length)
            SegmentSender(self, reply.segment, reply.position, reply.length).start()
            return
        result: Result = decode_result(reply)
        if result.code == 301:
            self.setHeader(OFFSET_HEADER, result.body)
        self._answer(result.code, result.body)

    def _answer(self, code: int, body: bytes) -> None:
        """The whole response: ``code`` and ``body`` as ``text/plain``."""
        self.setResponseCode(code)
        self.setHeader(b"Content-Type", TEXT)
        self.setHeader(b"Content-Length", b"%d" % len(body))
        self.write(body)  # for HEAD, twisted.web sends the headers only
        self.finish()


class ProtocolSite(http.HTTPFactory):
    """The HTTP protocol's listening factory: ``ProtocolChannel`` connections making
    ``ProtocolRequest`` requests, admitted by the broker's ``connection_guard`` on a port
    of their own (``port_limit``: ``maxHttpConnections``).

    Args:
        broker: the broker whose handlers answer the requests.
        reactor: the broker's reactor (``Date``, the next turn of a pipelined connection).
    """

    protocol = ProtocolChannel
    requestFactory = ProtocolRequest
    noisy = False

    def __init__(self, broker: Any, reactor: Any) -> None:
        # No twisted.web timeout (every byte restarts it): the guard's idle and head checks.
        super().__init__(timeout=None, reactor=reactor)
        self.broker = broker
        self.connection_guard = broker.connection_guard
        self.port_limit = broker.connection_guard.add_port(
            "http", "the HTTP port", CAP_KEY, broker.config.http_connections_max, "a request head"
        )
        self._date_s: int | None = None
        self._date = b""
        self._targets: Targets = {}
        self._targets_config: Any = None

    def startFactory(self) -> None:
        """Nothing to open: there is no access log (a busy producer would flood it)."""

    def stopFactory(self) -> None:
        """Nothing to close (no access log)."""

    def log(self, request: Any) -> None:
        """No access log."""

    def buildProtocol(self, addr: Any) -> ProtocolChannel:
        channel = super().buildProtocol(addr)
        channel.requestFactory = self.requestFactory
        return channel

    def put_targets(self, broker: Any) -> Targets:
        """The puts' partition lookups (``puts.Targets``) of every connection of the site,
        forgotten whenever the broker's configuration is replaced (a reload)."""
        if broker.config is not self._targets_config:
            self._targets_config = broker.config
            self._targets.clear()
        return self._targets

    def date_header(self) -> bytes:
        """The ``Date`` header's value now (made once per second of the reactor's clock)."""
        now_s = int(self.reactor.seconds())
        if now_s != self._date_s:
            self._date_s = now_s
            self._date = http.datetimeToString(now_s)
        return self._date

    def refuse_early(self, method: bytes, uri: bytes, length: int) -> bytes | None:
        """The whole HTTP response refusing a put of ``length`` body bytes, when it is over
        ``maxMessageSize`` and ``method``/``uri`` are a well-formed put; None otherwise (the
        request is then read and answered as usual). Counts the request and the refusal."""
        broker = self.broker
        if length <= broker.config.message_bytes_max or route(uri.partition(b"?")[0]) != "put":
            return None
        if method not in METHODS["put"]:
            return None
        try:
            put = put_parameters(parse_query(uri))
        except BadParameter:
            return None
        broker.counters.http_requests += 1
        event = BodyTooLarge("put", max(length, put.length), 0, put.topic, put.partition)
        with http_share(broker.counters, "put"):
            body = decode_result(too_large(broker, event)).body
        head = (
            b"HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: %s\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (TEXT, len(body))
        )
        return head + body


def start_http(broker: Any, reactor: Any, port: int) -> Any:
    """Serve the HTTP protocol for ``broker`` on ``port`` (``hostName`` when set, H1).

    Returns:
        The listening port (``getHost().port`` is the chosen one when ``port`` is 0).

    Raises:
        HttpListenError: the port cannot be taken.
    """
    interface = broker.config.host_name or ""
    advice = f"set {PORT_KEY} in the jettyBroker properties file to a free port"
    factory = ProtocolSite(broker, reactor)
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
