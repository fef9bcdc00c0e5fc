"""The HTTP protocol on an in-memory transport, with a recording file layer.

No real network, no real time (STYLE 21): requests are raw HTTP/1.1 bytes fed to the
twisted.web channel of ``ProtocolSite``, a ``task.Clock`` reactor drives the broker, and a
manual flush executor runs fsync batches only when the test says so.
"""

from __future__ import annotations

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.web import http

from meta.config import ZkConfig
from meta.protocol.codec import encode
from meta.protocol.commands import Put
from meta.protocol.message import checksum, iter_messages
from meta.server.broker import Broker
from meta.server.http.resource import ProtocolRequest, ProtocolSite
from meta.server.protocol import BrokerProtocol
from meta.store.manager import StoreManager
from meta.web import TURN_REQUESTS_MAX
from tests.server.memory_broker import closing_broker
from tests.store.conftest import ManualExecutor, RecordingFiles, broker_config, topic_config

PEER = IPv4Address("TCP", "127.0.0.1", 40000)


class RecordingTransport(StringTransport):
    """A transport that logs each response write into the file layer's event list."""

    def __init__(self, events: list) -> None:
        super().__init__()
        self.events = events

    def write(self, data: bytes) -> None:
        self.events.append(("reply", data[:12]))
        super().write(data)


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def setup(tmp_path, clock):
    files = RecordingFiles()
    executor = ManualExecutor()
    config = broker_config(
        str(tmp_path),
        topics=(topic_config("test", str(tmp_path), num_partitions=1),),
        zookeeper=ZkConfig(connect="127.0.0.1:1", enabled=False),
        message_bytes_max=1000,
    )
    store = StoreManager(config, clock, files=files, executor=executor)
    broker = closing_broker(Broker(config, clock, store=store), clock, executor)
    broker.start(listen=False)
    return broker, files, executor


def exchange(broker, raw: bytes, events: list | None = None) -> RecordingTransport:
    """Feed ``raw`` to a new HTTP connection; return its transport (the response so far)."""
    channel = ProtocolSite(broker, Clock()).buildProtocol(PEER)
    transport = RecordingTransport(events if events is not None else [])
    channel.makeConnection(transport)
    channel.dataReceived(raw)
    return transport


def parse(response: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
    """Status, headers (lower-case names) and body of one HTTP/1.1 response."""
    head, _, body = response.partition(b"\r\n\r\n")
    status_line, *lines = head.split(b"\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


def post(path: bytes, body: bytes, *headers: bytes) -> bytes:
    lines = [b"POST " + path + b" HTTP/1.1", b"Host: broker", *headers]
    lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def get(path: bytes, method: bytes = b"GET") -> bytes:
    return method + b" " + path + b" HTTP/1.1\r\nHost: broker\r\n\r\n"


def put_hello(broker, executor) -> bytes:
    transport = exchange(broker, post(b"/put/0?topic=test&partition=0&flag=0&length=5", b"hello"))
    executor.run_all()
    return transport.value()


def test_in_group_commit_the_put_is_answered_only_after_its_fsync(setup):
    """Goal: H4 and DECISIONS 2 over HTTP. Method: the flush batch is held back; no byte of
    the response may leave before the fsync, and the 200 follows it."""
    broker, files, executor = setup
    raw = post(b"/put/0?topic=test&partition=0&flag=0&length=5", b"hello")
    transport = exchange(broker, raw, files.events)
    assert transport.value() == b""
    executor.run_all()
    kinds = [kind for kind, _ in files.events if kind in ("write", "fsync", "reply")]
    assert kinds.index("write") < kinds.index("fsync") < kinds.index("reply")
    code, headers, body = parse(transport.value())
    assert code == 200
    assert headers[b"content-type"] == b"text/plain; charset=utf-8"
    msg_id, partition, offset = body.split(b" ")
    assert (int(msg_id) > 0, partition, offset) == (True, b"0", b"0")


def test_a_get_answers_the_raw_message_set_as_octet_stream(setup):
    broker, _files, executor = setup
    put_hello(broker, executor)
    transport = exchange(broker, get(b"/get/0?topic=test&partition=0&offset=0&maxsize=1048576"))
    code, headers, body = parse(transport.value())
    assert code == 200
    assert headers[b"content-type"] == b"application/octet-stream"
    assert headers[b"content-length"] == b"25"
    (message,) = list(iter_messages(body))
    assert message.payload == b"hello"


def test_a_get_is_bounded_by_maxsize(setup):
    broker, _files, executor = setup
    put_hello(broker, executor)
    transport = exchange(broker, get(b"/get?topic=test&partition=0&offset=0&maxsize=7"))
    code, _headers, body = parse(transport.value())
    assert (code, len(body)) == (200, 7)


def test_an_offset_answers_the_segment_start(setup):
    broker, _files, executor = setup
    put_hello(broker, executor)
    transport = exchange(broker, get(b"/offset/0?topic=test&partition=0&offset=20"))
    code, _headers, body = parse(transport.value())
    assert (code, body) == (200, b"0")


def test_a_form_encoded_body_is_stored_byte_exact(setup):
    broker, _files, executor = setup
    body = b"a=1&b=%20two"
    form = b"Content-Type: application/x-www-form-urlencoded"
    path = b"/put/0?topic=test&partition=0&flag=0&length=%d" % len(body)
    exchange(broker, post(path, body, form))
    executor.run_all()
    found = broker.store.get("test", 0).slice(0, 1 << 20)
    (message,) = list(iter_messages(found.segment.read(found.position, found.length)))
    assert message.payload == body


def test_a_body_shorter_than_length_is_400_and_nothing_is_stored(setup):
    broker, _files, executor = setup
    transport = exchange(broker, post(b"/put/0?topic=test&partition=0&flag=0&length=9", b"hello"))
    executor.run_all()
    code, _headers, body = parse(transport.value())
    assert code == 400
    assert b"length" in body
    assert broker.store.get("test", 0) is None


def test_a_length_over_max_message_size_is_413_and_the_body_is_not_kept(setup):
    broker, _files, executor = setup
    path = b"/put/0?topic=test&partition=0&flag=0&length=2000"
    site = ProtocolSite(broker, Clock())
    requests = []

    def request_factory(*arguments, **keywords):
        requests.append(ProtocolRequest(*arguments, **keywords))
        return requests[-1]

    site.requestFactory = request_factory
    channel = site.buildProtocol(PEER)
    transport = StringTransport()
    channel.makeConnection(transport)
    channel.dataReceived(post(path, b"")[: -len(b"Content-Length: 0\r\n\r\n")])
    channel.dataReceived(b"Content-Length: 2000\r\n\r\n" + b"x" * 1000)
    assert requests[0].body_over_limit == 2000
    assert requests[0].content.read() == b""  # nothing of the body is buffered
    channel.dataReceived(b"x" * 1000)
    code, _headers, body = parse(transport.value())
    assert code == 413
    assert b"maxMessageSize 1000" in body
    assert broker.counters.put_failed == 1


def test_a_chunked_body_over_max_message_size_is_413(setup):
    broker, _files, _executor = setup
    head = b"POST /put/0?topic=test&partition=0&flag=0&length=900 HTTP/1.1\r\nHost: b\r\n"
    chunked = head + b"Transfer-Encoding: chunked\r\n\r\n"
    chunks = b"".join(b"%x\r\n" % 500 + b"y" * 500 + b"\r\n" for _ in range(3)) + b"0\r\n\r\n"
    code, _headers, body = parse(exchange(broker, chunked + chunks).value())
    assert code == 413
    assert broker.store.get("test", 0) is None


def test_a_wrong_checksum_is_refused_with_the_tcp_text(setup):
    broker, _files, executor = setup
    wrong = (checksum(b"hello") + 1) & 0x7FFFFFFF
    path = b"/put/0?topic=test&partition=0&flag=0&length=5&checksum=%d" % wrong
    transport = exchange(broker, post(path, b"hello"))
    code, _headers, body = parse(transport.value())
    assert code == 500
    assert b"Checksum failure" in body


@pytest.mark.parametrize(
    ("query", "named"),
    [
        (b"partition=0&flag=0&length=5", b"topic"),
        (b"topic=test&flag=0&length=5", b"partition"),
        (b"topic=test&partition=x&flag=0&length=5", b"partition"),
        (b"topic=test&partition=0&length=5", b"flag"),
        (b"topic=test&partition=0&flag=0", b"length"),
        (b"topic=a/b&partition=0&flag=0&length=5", b"topic"),
    ],
)
def test_a_bad_put_parameter_is_400_naming_it(setup, query, named):
    broker, _files, _executor = setup
    transport = exchange(broker, post(b"/put/0?" + query, b"hello"))
    code, headers, body = parse(transport.value())
    assert code == 400
    assert headers[b"content-type"] == b"text/plain; charset=utf-8"
    assert named in body


def test_an_unknown_path_is_404(setup):
    broker, _files, _executor = setup
    code, _headers, _body = parse(exchange(broker, get(b"/ping")).value())
    assert code == 404


@pytest.mark.parametrize(
    ("raw", "allow"),
    [
        (get(b"/put/0?topic=test&partition=0&flag=0&length=0"), b"POST, PUT"),
        (post(b"/get/0?topic=test&partition=0&offset=0&maxsize=10", b""), b"GET, HEAD"),
    ],
)
def test_a_wrong_method_is_405_with_allow(setup, raw, allow):
    broker, _files, _executor = setup
    code, headers, _body = parse(exchange(broker, raw).value())
    assert (code, headers[b"allow"]) == (405, allow)


def test_a_get_of_a_missing_partition_is_404_with_the_tcp_text(setup):
    broker, _files, _executor = setup
    transport = exchange(broker, get(b"/get/0?topic=test&partition=0&offset=0&maxsize=10"))
    code, _headers, body = parse(transport.value())
    assert (code, body) == (404, b"The topic `test` in partition `0` is not exists")


def test_a_get_beyond_the_end_with_long_max_is_301_with_the_offset_header(setup):
    broker, _files, executor = setup
    put_hello(broker, executor)
    path = b"/get/0?topic=test&partition=0&offset=9223372036854775807&maxsize=10"
    code, headers, body = parse(exchange(broker, get(path)).value())
    assert (code, body, headers[b"x-meta-offset"]) == (301, b"25", b"25")
    assert b"location" not in headers


def test_a_long_polling_get_is_answered_when_data_arrives(setup, clock):
    """Goal: DECISIONS 16 over HTTP. Method: a get at the end waits (maxwait); a put over
    TCP makes data visible; the held get then answers with it."""
    broker, _files, executor = setup
    put_hello(broker, executor)
    path = b"/get/0?topic=test&partition=0&offset=25&maxsize=1000&maxwait=5000"
    transport = exchange(broker, get(path))
    assert transport.value() == b""
    tcp = BrokerProtocol(broker)
    tcp.makeConnection(StringTransport())
    tcp.dataReceived(encode(Put("test", 0, b"later", 0, 1)))
    executor.run_all()
    assert transport.value() == b""  # woken gets are answered from the next reactor turn
    clock.advance(0)
    code, _headers, body = parse(transport.value())
    assert code == 200
    assert [message.payload for message in iter_messages(body)] == [b"later"]


def test_http_requests_are_counted_like_tcp_commands(setup):
    broker, _files, executor = setup
    put_hello(broker, executor)
    exchange(broker, get(b"/get/0?topic=test&partition=0&offset=0&maxsize=100"))
    exchange(broker, get(b"/ping"))
    assert (broker.counters.cmd_put, broker.counters.cmd_get) == (1, 1)
    code, body = broker.render_stats("http")
    assert code == 200
    assert body == (
        b"STATS\r\nhttp_requests 3\r\nhttp_put 1\r\nhttp_get 1\r\nhttp_offset 0\r\nEND\r\n"
    )


def test_connections_beyond_max_http_connections_are_refused(tmp_path, clock):
    config = broker_config(
        str(tmp_path),
        topics=(topic_config("test", str(tmp_path), num_partitions=1),),
        zookeeper=ZkConfig(connect="127.0.0.1:1", enabled=False),
        http_connections_max=2,
    )
    limited = ProtocolSite(Broker(config, clock), clock)
    first, second, third = (limited.buildProtocol(PEER) for _ in range(3))
    for protocol in (first, second):
        protocol.makeConnection(StringTransport())
    transport = StringTransport()
    third.makeConnection(transport)
    assert transport.disconnecting  # aborted by the guard
    assert limited.port_limit.refused == 1
    first.connectionLost(None)
    fourth = StringTransport()
    limited.buildProtocol(PEER).makeConnection(fourth)
    assert not fourth.disconnecting


class PausingTransport(StringTransport):
    """A transport whose buffer is 'full' after every write: it pauses its producer."""

    paused = False

    def write(self, data: bytes) -> None:
        super().write(data)
        if self.producer is not None:
            self.paused = True
            self.producer.pauseProducing()


def test_a_get_streams_in_chunks_and_waits_while_the_transport_is_paused(setup, monkeypatch):
    """Goal: STYLE 13 over HTTP. Method: chunks of 100 bytes; the transport pauses the
    producer after each write; the body grows one chunk per resume and ends complete."""
    broker, _files, executor = setup
    monkeypatch.setattr("meta.server.http.sender.CHUNK_BYTES", 100)
    tcp = BrokerProtocol(broker)
    tcp.makeConnection(StringTransport())
    tcp.dataReceived(b"".join(encode(Put("test", 0, b"z" * 280, 0, n)) for n in range(3)))
    executor.run_all()
    channel = ProtocolSite(broker, Clock()).buildProtocol(PEER)
    transport = PausingTransport()
    channel.makeConnection(transport)
    channel.dataReceived(get(b"/get/0?topic=test&partition=0&offset=0&maxsize=100000"))
    sizes = [len(transport.value())]
    while transport.paused and transport.producer is not None:
        transport.paused = False
        transport.producer.resumeProducing()
        sizes.append(len(transport.value()))
    assert sizes == sorted(sizes)
    assert len(sizes) > 5
    code, headers, body = parse(transport.value())
    assert (code, headers[b"content-length"], len(body)) == (200, b"900", 900)
    assert [len(message.payload) for message in iter_messages(body)] == [280, 280, 280]


def test_a_response_leaves_in_one_write_with_server_and_date(setup):
    """Goal: the status line, headers and body of a put's 200 go to the transport together
    (one send on a socket), and still carry twisted.web's Server and Date headers."""
    broker, files, executor = setup
    raw = post(b"/put/0?topic=test&partition=0&flag=0&length=5", b"hello")
    transport = exchange(broker, raw, files.events)
    executor.run_all()
    replies = [data for kind, data in files.events if kind == "reply"]
    assert replies == [b"HTTP/1.1 200"]
    code, headers, body = parse(transport.value())
    assert (code, headers[b"content-length"]) == (200, b"%d" % len(body))
    assert headers[b"server"].startswith(b"TwistedWeb/")
    assert headers[b"date"] == b"Thu, 01 Jan 1970 00:00:00 GMT"  # the site's clock


def test_a_head_get_answers_the_headers_only(setup):
    broker, _files, executor = setup
    put_hello(broker, executor)
    path = b"/get/0?topic=test&partition=0&offset=0&maxsize=1048576"
    transport = exchange(broker, get(path, b"HEAD"))
    code, headers, body = parse(transport.value())
    assert (code, headers[b"content-length"], body) == (200, b"25", b"")


def test_a_failing_handler_is_answered_500_and_the_connection_serves_on(setup, monkeypatch):
    broker, _files, _executor = setup

    def failing(*_arguments):
        raise RuntimeError("a bug")

    monkeypatch.setattr("meta.server.http.resource.handle_offset", failing)
    transport = exchange(broker, get(b"/offset/0?topic=test&partition=0&offset=0") + get(b"/x"))
    first, _, second = transport.value().partition(b"HTTP/1.1 404")
    code, headers, _body = parse(first)
    assert (code, headers[b"content-type"]) == (500, b"text/plain; charset=utf-8")
    assert second


def test_an_idle_connection_is_closed_on_the_brokers_clock(setup, clock):
    broker, _files, _executor = setup
    channel = ProtocolSite(broker, clock).buildProtocol(PEER)
    transport = StringTransport()
    channel.makeConnection(transport)
    clock.advance(broker.config.idle_connection_timeout_s - 1)
    assert not transport.disconnecting
    clock.advance(broker.connection_guard.sweep_period_s * 2)
    assert transport.disconnecting


def test_a_request_head_sent_a_byte_at_a_time_is_reset_at_the_deadline(setup, clock):
    broker, _files, _executor = setup
    channel = ProtocolSite(broker, clock).buildProtocol(PEER)
    transport = StringTransport()
    channel.makeConnection(transport)
    head = b"GET /offset?topic=test&partition=0&offset=0 HTTP/1.1\r\n" + b"X: y\r\n" * 100
    for byte in head:
        channel.dataReceived(bytes([byte]))
        clock.advance(1)
        if transport.disconnecting:
            break
    assert transport.disconnecting
    deadline_s = broker.config.header_timeout_s + 2 * broker.connection_guard.sweep_period_s
    assert clock.seconds() <= deadline_s + 1


def test_pipelined_requests_are_answered_a_slice_per_reactor_turn(setup, clock):
    broker, _files, _executor = setup
    channel = ProtocolSite(broker, clock).buildProtocol(PEER)
    transport = StringTransport()
    channel.makeConnection(transport)
    request = b"GET /offset?topic=test&partition=0&offset=0 HTTP/1.1\r\nHost: h\r\n\r\n"
    channel.dataReceived(request * (TURN_REQUESTS_MAX * 2 + 10))
    assert transport.value().count(b"HTTP/1.1 ") == TURN_REQUESTS_MAX
    assert transport.producerState == "paused"
    (next_turn,) = [c for c in clock.getDelayedCalls() if getattr(c.func, "__self__", 0) is channel]
    clock.calls.remove(next_turn)  # run this turn alone (``advance`` runs the next too)
    next_turn.func(*next_turn.args)
    assert transport.value().count(b"HTTP/1.1 ") == TURN_REQUESTS_MAX * 2
    clock.advance(0)
    assert transport.value().count(b"HTTP/1.1 ") == TURN_REQUESTS_MAX * 2 + 10
    assert transport.producerState == "producing"


@pytest.mark.parametrize(
    "method, uri, body",
    [
        (b"GET", b"/get/0?topic=test&partition=0&offset=0&maxsize=100", b""),
        (b"POST", b"/put/0?topic=test&partition=0&length=3", b"a=b"),
        (b"GET", b"/offset/0", b""),
    ],
)
def test_a_request_is_received_as_twisted_web_receives_it_but_for_its_args(
    setup, method, uri, body
):
    """Goal: ``ProtocolRequest.requestReceived`` (twisted.web's, without parsing the query
    into ``args``) leaves every other attribute as this Twisted's own leaves it, so a Twisted
    upgrade that changes the method fails here. Method: both are run on two requests fed the
    same request line and body, with ``process`` stubbed; their attributes are compared."""
    received = []
    for receive in (ProtocolRequest.requestReceived, http.Request.requestReceived):
        channel = ProtocolSite(setup[0], Clock()).buildProtocol(PEER)
        channel.makeConnection(StringTransport())
        request = ProtocolRequest(channel)
        request.process = lambda: None  # noqa: B023 - called within this iteration only
        request.gotLength(len(body))
        request.handleContentChunk(body)
        receive(request, method, uri, b"HTTP/1.1")
        own = ("args", "channel", "transport", "process")  # per request, or the stub
        state = {name: value for name, value in vars(request).items() if name not in own}
        state["content"] = (request.content.tell(), request.content.getvalue())
        received.append(state)
    ours, twisted_web = received
    assert ours == twisted_web


def test_a_request_while_the_broker_stops_gets_503_and_the_connection_closes(setup):
    """Goal: a keep-alive client whose put arrives while the broker stops is told to send it
    again (503, ``Connection: close``), not that it was not stored (500), and the connection
    closes after the answer. Method: the broker's ``serving`` flag as its stop clears it."""
    broker, _files, executor = setup
    broker.serving = False
    transport = exchange(broker, post(b"/put/0?topic=test&partition=0&flag=0&length=5", b"hello"))
    executor.run_all()
    code, headers, body = parse(transport.value())
    assert (code, headers[b"connection"]) == (503, b"close")
    assert body == b"the broker is not serving: it is stopping or starting\n"
    assert transport.disconnecting
    assert broker.store.get("test", 0) is None
