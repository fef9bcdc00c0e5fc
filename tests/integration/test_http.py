"""The HTTP protocol of a real broker process (``--http`` / ``-FjettyBroker=``), over real HTTP.

Each test module's broker serves HTTP on a free port (``serverPort=0`` in its
``jettyBroker.properties``), read from the broker's log. Requests are sent with the stdlib's
``http.client`` and, for the Java HTTP client's requests, as raw bytes on a socket.
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import subprocess
import sys
import time

import pytest

from meta.protocol.commands import Data, Get, Put, Result, Stats
from meta.protocol.message import iter_messages
from tests.integration.broker_process import REPO, BrokerProcess, free_port, server_ini

WAIT_S = 30.0
SERVING = re.compile(r"HTTP protocol serving http://[^:]+:(\d+)/")


def http_port(broker: BrokerProcess, run: int = 1) -> int:
    """The port from the "HTTP protocol serving" log line of the broker's ``run``-th start
    (bounded wait)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = SERVING.findall(broker.log())
        if len(found) >= run:
            return int(found[run - 1])
        assert broker.process.poll() is None, broker.log()
        time.sleep(0.05)
    raise AssertionError(f"no HTTP line in the log:\n{broker.log()}")


def start(directory, plugin_form: bool = False, port: int = 0, **ini) -> BrokerProcess:
    properties = directory / "jettyBroker.properties"
    directory.mkdir(parents=True, exist_ok=True)
    properties.write_text(f"# the HTTP protocol\nserverPort={port}\n")
    broker = BrokerProcess(directory, **ini)
    if plugin_form:
        broker.arguments = [f"-FjettyBroker={properties}"]
    else:
        broker.arguments = ["--http", str(properties)]
    return broker.start()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    names = ("test", "example", "form", "java", "both", "client", "moved", "large")
    topics = {name: {} for name in names}
    system = {"maxMessageSize": 4096, "maxTransferSize": 8 << 20}  # 8 MiB: a get over the
    # socket's send buffer (the slow reader's test)
    broker = start(tmp_path_factory.mktemp("http"), system=system, topics=topics)
    broker.http_port = http_port(broker)
    yield broker
    broker.stop()


def request(broker, method: str, path: str, body: bytes | None = None, headers=None):
    connection = http.client.HTTPConnection("127.0.0.1", broker.http_port, timeout=10)
    try:
        connection.request(method, path, body, headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def raw_exchange(broker, raw: bytes) -> tuple[int, bytes]:
    """Send ``raw`` request bytes; return the status and body of the answer (Content-Length)."""
    with socket.create_connection(("127.0.0.1", broker.http_port), timeout=10) as sock:
        sock.sendall(raw)
        received = b""
        while b"\r\n\r\n" not in received:
            received += sock.recv(65536)
        head, _, body = received.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
        while len(body) < length:
            body += sock.recv(65536)
    return int(head.split()[1]), body


def tcp_stats(broker) -> dict[str, str]:
    """The general ``stats`` block of the broker, read over TCP: ``{name: value}``."""
    with broker.connect() as connection:
        reply = connection.request(Stats("", connection.next_opaque()))
    assert isinstance(reply, Result) and reply.code == 200, reply
    lines = reply.body.decode().split("\r\n")[1:-2]  # between STATS and END
    return dict(line.split(" ", 1) for line in lines)


def test_put_get_and_offset_answer_as_the_spec_example(broker):
    status, headers, body = request(
        broker, "POST", "/put/0?topic=example&partition=0&flag=0&length=5", b"hello"
    )
    assert status == 200
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    msg_id, partition, offset = body.split(b" ")
    assert (partition, offset) == (b"0", b"0")
    status, headers, body = request(
        broker, "GET", "/get/0?topic=example&partition=0&offset=0&group=g&maxsize=1048576"
    )
    assert (status, headers["Content-Type"], len(body)) == (200, "application/octet-stream", 25)
    (record,) = list(iter_messages(body))
    assert (record.msg_id, record.payload) == (int(msg_id), b"hello")
    status, _headers, body = request(broker, "GET", "/offset/0?topic=example&partition=0&offset=10")
    assert (status, body) == (200, b"0")


def test_error_cases_answer_their_status_as_text(broker):
    cases = [
        ("GET", "/ping", None, 404),
        ("GET", "/put/0?topic=test&partition=0&flag=0&length=0", None, 405),
        ("POST", "/get/0?topic=test&partition=0&offset=0&maxsize=9", b"", 405),
        ("GET", "/get/0?topic=test&partition=zero&offset=0&maxsize=9", None, 400),
        ("GET", "/get/0?topic=nothing&partition=0&offset=0&maxsize=9", None, 404),
        ("GET", "/offset/0?topic=nothing&partition=0&offset=0", None, 404),
        ("POST", "/put/0?topic=test&partition=0&flag=0&length=9", b"short", 400),
        ("POST", "/put/0?topic=test&partition=0&flag=0&length=5&checksum=1", b"hello", 500),
        ("POST", "/put/0?topic=test&partition=0&flag=0&length=5000", b"x" * 5000, 413),
    ]
    for method, path, body, expected in cases:
        status, headers, text = request(broker, method, path, body)
        assert (path, status) == (path, expected), text
        assert headers["Content-Type"] == "text/plain; charset=utf-8"


def test_an_oversized_put_is_refused_before_its_body_is_sent(broker):
    """Goal: a 100 MB upload is refused from its headers. Method: ``Expect: 100-continue`` and
    a ``Content-Length`` over ``maxMessageSize``, no body sent: the 413 (no ``100 Continue``)
    arrives, then the connection closes; the put counts as failed and nothing is stored."""
    before = tcp_stats(broker)
    head = (
        b"POST /put/0?topic=test&partition=0&flag=0&length=100000000 HTTP/1.1\r\n"
        b"Host: 127.0.0.1\r\nExpect: 100-continue\r\nContent-Length: 100000000\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", broker.http_port), timeout=10) as sock:
        sock.sendall(head)
        received = b""
        while chunk := sock.recv(65536):  # ends at the broker's close (10 s socket timeout)
            received += chunk
    status_line, _, rest = received.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 413 Request Entity Too Large", received
    assert b"Connection: close" in rest
    assert b"maxMessageSize 4096" in rest
    after = tcp_stats(broker)
    assert int(after["put_failed"]) == int(before["put_failed"]) + 1
    assert int(after["cmd_put"]) == int(before["cmd_put"]) + 1


def test_an_oversized_put_sent_whole_gets_one_answer(broker):
    """The same refusal when the body follows the headers in the same segments: one 413,
    then the close, and the connection never reads the body as a next request."""
    body = b"x" * 5000 + b"GET /offset/0?topic=test&partition=0&offset=0 HTTP/1.1\r\n\r\n"
    head = b"POST /put/0?topic=test&partition=0&flag=0&length=5000 HTTP/1.1\r\n"
    head += b"Host: 127.0.0.1\r\nContent-Length: 5000\r\n\r\n"
    with socket.create_connection(("127.0.0.1", broker.http_port), timeout=10) as sock:
        sock.sendall(head + body)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    assert received.count(b"HTTP/1.1 ") == 1, received
    assert received.startswith(b"HTTP/1.1 413 ")


def test_a_form_encoded_body_is_stored_byte_exact(broker):
    body = b"name=a%20b&x=1"
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    path = f"/put/0?topic=form&partition=0&flag=0&length={len(body)}"
    assert request(broker, "POST", path, body, form)[0] == 200
    status, _headers, data = request(
        broker, "GET", "/get/0?topic=form&partition=0&offset=0&maxsize=999"
    )
    assert [record.payload for record in iter_messages(data)] == [body]


def test_the_java_http_clients_requests_get_answers_it_parses(broker):
    """Goal: spec §2.6 unchanged. Method: SimpleHttpProducer's and SimpleHttpConsumer's
    requests as raw bytes (commons-httpclient: no checksum, no group, no content type)."""
    put = (
        b"POST /put/0?topic=java&partition=0&flag=0&length=5 HTTP/1.1\r\n"
        b"User-Agent: Jakarta Commons-HttpClient/3.1\r\n"
        b"Host: 127.0.0.1:%d\r\nContent-Length: 5\r\n\r\nhello" % broker.http_port
    )
    status, body = raw_exchange(broker, put)
    msg_id, partition, offset = (int(token) for token in body.split(b" "))
    assert (status, partition, offset) == (200, 0, 0)
    get = (
        b"GET /get/0?topic=java&partition=0&offset=0&maxsize=1048576 HTTP/1.1\r\n"
        b"User-Agent: Jakarta Commons-HttpClient/3.1\r\nHost: 127.0.0.1\r\n\r\n"
    )
    status, body = raw_exchange(broker, get)
    (record,) = list(iter_messages(body))
    assert (status, record.msg_id, record.payload) == (200, msg_id, b"hello")
    offset_request = (
        b"GET /offset/0?topic=java&partition=0&offset=0 HTTP/1.1\r\n"
        b"User-Agent: Jakarta Commons-HttpClient/3.1\r\nHost: 127.0.0.1\r\n\r\n"
    )
    assert raw_exchange(broker, offset_request) == (200, b"0")


def test_a_message_put_over_http_reads_back_over_tcp_and_the_reverse(broker):
    data = bytes(range(256))
    path = f"/put/0?topic=both&partition=0&flag=3&length={len(data)}"
    status, _headers, body = request(broker, "POST", path, data)
    assert status == 200
    with broker.connect() as connection:
        reply = connection.request(Get("both", "g", 0, 0, 1 << 20, 1))
        assert isinstance(reply, Data)
        (record,) = list(iter_messages(reply.data))
        assert (record.payload, record.flag) == (data, 3)
        put_reply = connection.request(Put("both", 0, data[::-1], 5, 2))
        assert isinstance(put_reply, Result) and put_reply.code == 200
    offset = len(reply.data)
    status, _headers, body = request(
        broker, "GET", f"/get/0?topic=both&partition=0&offset={offset}&maxsize=99999"
    )
    (record,) = list(iter_messages(body))
    assert (record.payload, record.flag) == (data[::-1], 5)


def test_the_plugin_form_starts_the_http_protocol_and_a_taken_port_stops_the_broker(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        broker = BrokerProcess(tmp_path / "taken")
        properties = tmp_path / "jettyBroker.properties"
        properties.write_text(f"serverPort={taken.getsockname()[1]}\n")
        broker.arguments = [f"-FjettyBroker={properties}"]
        try:
            broker.start()  # TCP serves first; the HTTP port fails just after
        except RuntimeError:
            pass  # the broker exited before its "serving" line
        assert broker.process.wait(WAIT_S) == 1
    finally:
        taken.close()
        broker.stop()
    assert "the HTTP protocol cannot listen on 127.0.0.1:" in broker.log()


def test_metaserver_sh_start_http_serves_the_http_protocol(tmp_path):
    """Goal: ``tools/metaServer.sh start --http``. Method: a private run dir and config; the
    broker it starts answers a put over HTTP on ``$META_HTTP_CONF``'s port; stop cleans up."""
    http_port_number = free_port()
    (tmp_path / "jettyBroker.properties").write_text(f"serverPort={http_port_number}\n")
    (tmp_path / "server.ini").write_text(server_ini(free_port(), tmp_path / "data"))
    env = dict(
        os.environ,
        META_RUN_DIR=str(tmp_path / "run"),
        META_CONF=str(tmp_path / "server.ini"),
        META_HTTP_CONF=str(tmp_path / "jettyBroker.properties"),
        META_PYTHON=sys.executable,
        PYTHONPATH=str(REPO),
    )
    script = str(REPO / "tools" / "metaServer.sh")

    def run(*arguments: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [script, *arguments], env=env, capture_output=True, text=True, timeout=150, cwd=REPO
        )

    started = run("start", "--http")
    try:
        assert started.returncode == 0, started.stderr
        log_path = tmp_path / "run" / "meta-server.log"
        deadline = time.monotonic() + WAIT_S
        while "HTTP protocol serving" not in log_path.read_text():
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)
        connection = http.client.HTTPConnection("127.0.0.1", http_port_number, timeout=10)
        connection.request("POST", "/put/0?topic=test&partition=0&flag=0&length=2", b"hi")
        assert connection.getresponse().status == 200
        connection.close()
    finally:
        stopped = run("stop")
    assert stopped.returncode == 0, stopped.stderr


def test_a_get_to_a_slow_reader_is_the_tcp_gets_bytes_and_the_connection_serves_on(broker):
    """Goal: a get's body sent with sendfile until the socket is full, then in chunks while
    the transport pauses and resumes, is byte-identical to the TCP get's. Method: 6 MB of
    puts (more than a socket's send buffer takes); an HTTP get of all of it on a socket with
    a 4 KiB receive buffer, read in 64 KiB pieces; then a second request on the connection."""
    payloads = [bytes([n % 251]) * 4000 for n in range(1500)]
    with broker.connect() as connection:
        for opaque, payload in enumerate(payloads, 1):
            connection.send(Put("large", 0, payload, 0, opaque))
        assert all(connection.receive().code == 200 for _ in payloads)
        expected = connection.request(Get("large", "g", 0, 0, 8 << 20, 1)).data
    assert len(expected) == len(payloads) * 4020
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(10)
        sock.connect(("127.0.0.1", broker.http_port))
        path = b"/get/0?topic=large&partition=0&offset=0&maxsize=%d" % (8 << 20)
        sock.sendall(b"GET %s HTTP/1.1\r\nHost: b\r\n\r\nGET /x HTTP/1.1\r\nHost: b\r\n\r\n" % path)
        pieces = []
        while not pieces or not pieces[-1].endswith(b"/get, /put and /offset\n"):
            pieces.append(sock.recv(65536))
            assert pieces[-1], b"".join(pieces)[-200:]
    head, _, rest = b"".join(pieces).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"Content-Length: %d" % len(expected) in head
    assert rest[: len(expected)] == expected
    assert rest[len(expected) :].startswith(b"HTTP/1.1 404")
