"""``PipelinedConnection`` and ``ConnectionPool`` against a real broker process.

Requests that must stay pending are long-polling gets (DECISIONS 16) at a partition's end:
the broker holds them until data arrives or their wait ends, which is how these tests get
replies that come late, or never, on demand.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeoutError
from concurrent.futures import wait

import pytest

from meta.client.cluster import BrokerAddress
from meta.client.factory import ConnectionPool
from meta.client.net import futures as client_futures
from meta.client.net import pipeline
from meta.client.net.pipeline import OPAQUE_MAX, PipelinedConnection
from meta.errors import ClientClosedError, ClientError, NoBrokerError, OperationTimeoutError
from meta.protocol.commands import Data, Get, Put, Result, Version
from meta.protocol.message import checksum
from tests.integration.broker_process import BrokerProcess, free_port

WAIT_S = 10.0


def wait_for(condition, timeout_s: float = WAIT_S, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.01)
    raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("broker"), topics={"t-*": {}})
    process.start()
    yield process
    process.stop()


@pytest.fixture(params=["fast", "public"])
def connection(broker, request, monkeypatch):
    """A connection to the broker, on the fast futures and on their public-API fallback."""
    if request.param == "public":
        monkeypatch.setattr(pipeline, "PendingFuture", client_futures.PublicPendingFuture)
        monkeypatch.setattr(pipeline, "complete_batch", client_futures.complete_batch_public)
    opened = PipelinedConnection("127.0.0.1", broker.port)
    yield opened
    opened.close()


def put(topic: str, data: bytes) -> Put:
    return Put(topic, 0, data, 0, 0, checksum(data))


def held_get(connection: PipelinedConnection, topic: str, wait_ms: int = 30_000, **request):
    """Put one message, then return the future of a get the broker holds at the end."""
    reply = connection.request(put(topic, b"x")).result(WAIT_S)
    end = int(reply.body.split()[2]) + 21
    return connection.request(Get(topic, "g", 0, end, 1024, 0, max_wait_ms=wait_ms), **request)


def test_5000_pipelined_requests_from_4_threads_complete_with_matching_opaques(connection):
    futures_by_thread: list[list] = [[] for _ in range(4)]

    def send(index: int) -> None:
        for number in range(1250):
            data = b"%d-%d" % (index, number)
            futures_by_thread[index].append((data, connection.request(put("t-many", data))))

    threads = [threading.Thread(target=send, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    pairs = [pair for futures in futures_by_thread for pair in futures]
    assert len(pairs) == 5000
    offsets = set()
    for _data, future in pairs:
        reply = future.result(WAIT_S)
        assert isinstance(reply, Result)
        assert reply.code == 200, reply
        assert reply.opaque == future.opaque
        offsets.add(int(reply.body.split()[2]))
    assert len(offsets) == 5000
    assert len({future.opaque for _data, future in pairs}) == 5000
    assert connection.pending_count == 0


def test_replies_are_matched_by_opaque_even_out_of_order(connection):
    held = held_get(connection, "t-order")
    quick = connection.request(put("t-order", b"second"))
    assert quick.result(WAIT_S).code == 200
    reply = held.result(WAIT_S)  # the put above woke the held get
    assert isinstance(reply, Data)
    assert reply.opaque == held.opaque


def test_killing_the_broker_fails_pending_futures_fast_with_a_client_error(tmp_path):
    broker = BrokerProcess(tmp_path, topics={"t-*": {}}).start()
    try:
        connection = PipelinedConnection("127.0.0.1", broker.port)
        futures = [held_get(connection, f"t-kill-{n}") for n in range(3)]
        started = time.monotonic()
        broker.kill()
        for future in futures:
            with pytest.raises(ClientError, match=f"127.0.0.1:{broker.port}"):
                future.result(WAIT_S)
        assert time.monotonic() - started < 2.0
        assert connection.closed
        with pytest.raises(ClientError, match="lost"):
            connection.request(put("t-kill-0", b"y"))
        connection.close()
    finally:
        broker.kill()


def test_close_fails_pending_futures_with_client_closed_error(connection):
    futures = [held_get(connection, f"t-close-{n}") for n in range(3)]
    connection.close()
    for future in futures:
        with pytest.raises(ClientClosedError):
            future.result(WAIT_S)
    with pytest.raises(ClientClosedError):
        connection.request(put("t-close", b"y"))
    assert not [thread for thread in threading.enumerate() if thread.name.startswith("metaq-")]


def test_a_timed_out_request_fails_and_leaves_no_entry_behind(connection, caplog):
    caplog.set_level(logging.DEBUG, logger="meta.client")
    future = held_get(connection, "t-timeout", timeout_s=0.3)
    with pytest.raises(OperationTimeoutError, match="0.3 s"):
        future.result(WAIT_S)
    assert connection.pending_count == 0
    # A put wakes the held get: its late reply is dropped, and the connection keeps working.
    assert connection.request(put("t-timeout", b"after")).result(WAIT_S).code == 200
    wait_for(lambda: f"unknown opaque {future.opaque}" in caplog.text, what="the late reply")
    assert connection.request(put("t-timeout", b"again")).result(WAIT_S).code == 200
    assert connection.pending_count == 0


def test_cancelling_a_future_forgets_its_request(connection):
    future = held_get(connection, "t-cancel")
    with pytest.raises(FutureTimeoutError):
        future.result(0.1)
    assert future.cancel()
    assert connection.pending_count == 0


def test_a_full_pending_table_blocks_then_raises_operation_timeout(broker):
    connection = PipelinedConnection("127.0.0.1", broker.port, pending_max=2)
    try:
        first = held_get(connection, "t-full-a")
        second = held_get(connection, "t-full-b")
        started = time.monotonic()
        with pytest.raises(OperationTimeoutError, match="2 requests stayed in flight"):
            connection.request(put("t-full-a", b"z"), timeout_s=0.3)
        assert 0.25 <= time.monotonic() - started < 2.0
        first.cancel()
        assert connection.request(put("t-full-c", b"z")).result(WAIT_S).code == 200
        assert not second.done()
    finally:
        connection.close()


def test_a_reply_over_the_limit_fails_only_its_request(broker):
    connection = PipelinedConnection("127.0.0.1", broker.port, reply_bytes_max=100)
    try:
        assert connection.request(put("t-big", b"b" * 500)).result(WAIT_S).code == 200
        get = connection.request(Get("t-big", "g", 0, 0, 4096, 0))
        with pytest.raises(ClientError, match="over the limit"):
            get.result(WAIT_S)
        assert connection.request(put("t-big", b"small")).result(WAIT_S).code == 200
    finally:
        connection.close()


def test_opaques_wrap_within_the_int32_range(connection):
    connection._next_opaque = OPAQUE_MAX
    last = connection.request(put("t-wrap", b"a"))
    first = connection.request(put("t-wrap", b"b"))
    assert (last.opaque, first.opaque) == (OPAQUE_MAX, 1)
    assert last.result(WAIT_S).opaque == OPAQUE_MAX
    assert first.result(WAIT_S).opaque == 1


def test_a_converter_result_or_error_reaches_the_future(connection):
    ok = connection.request(put("t-convert", b"a"), convert=lambda reply: reply.code)
    assert ok.result(WAIT_S) == 200

    def refuse(reply):
        raise ClientError("refused")

    with pytest.raises(ClientError, match="refused"):
        connection.request(put("t-convert", b"b"), convert=refuse).result(WAIT_S)


def test_connecting_to_a_closed_port_raises_a_client_error_naming_it():
    port = free_port()
    with pytest.raises(ClientError, match=f"127.0.0.1:{port}"):
        PipelinedConnection("127.0.0.1", port, connect_timeout_s=2.0)


def test_the_pool_shares_connections_and_closes_them_when_unreferenced(broker):
    pool = ConnectionPool()
    address = BrokerAddress("127.0.0.1", broker.port)
    try:
        pool.set_brokers("topic-a", [address])
        pool.set_brokers("topic-b", [address])
        connection = pool.get(address)
        assert pool.get(address) is connection
        pool.set_brokers("topic-a", [])
        assert not connection.closed
        pool.set_brokers("topic-b", [])
        assert connection.closed
        with pytest.raises(NoBrokerError):
            pool.get(address)
    finally:
        pool.close()


def test_close_when_idle_closes_only_once_the_requests_in_flight_are_answered(broker):
    connection = PipelinedConnection("127.0.0.1", broker.port)
    waker = PipelinedConnection("127.0.0.1", broker.port)
    try:
        held = held_get(connection, "t-retire")
        connection.close_when_idle()
        assert not connection.closed and connection.pending_count == 1
        assert waker.request(put("t-retire", b"wake")).result(WAIT_S).code == 200
        assert isinstance(held.result(WAIT_S), Data)  # answered, not failed by the close
        wait_for(lambda: connection.closed, what="the close after the last reply")
        idle = PipelinedConnection("127.0.0.1", broker.port)
        idle.close_when_idle()
        assert idle.closed
    finally:
        connection.close()
        waker.close()


def test_the_pool_lets_a_dropped_brokers_requests_finish_and_close_ends_them(broker):
    """A broker no user lists any more gets no new request, but its requests in flight are
    answered before its connection closes; ``pool.close()`` closes it at once."""
    pool = ConnectionPool()
    address = BrokerAddress("127.0.0.1", broker.port)
    waker = PipelinedConnection("127.0.0.1", broker.port)
    try:
        pool.set_brokers("topic", [address])
        dropped = pool.get(address)
        answered, failed = held_get(dropped, "t-drop"), held_get(dropped, "t-drop-never")
        pool.set_brokers("topic", [])
        with pytest.raises(NoBrokerError):
            pool.get(address)
        assert waker.request(put("t-drop", b"wake")).result(WAIT_S).code == 200
        assert isinstance(answered.result(WAIT_S), Data)
        assert not dropped.closed  # the other get is still in flight
        pool.close()
        assert dropped.closed
        with pytest.raises(ClientClosedError):
            failed.result(WAIT_S)
    finally:
        pool.close()
        waker.close()


def test_the_pool_reconnects_after_a_connection_failed(broker):
    pool = ConnectionPool()
    address = BrokerAddress("127.0.0.1", broker.port)
    try:
        pool.set_brokers("topic", [address])
        first = pool.get(address)
        first.close()
        second = pool.get(address)
        assert second is not first
        assert second.request(put("t-pool", b"a")).result(WAIT_S).code == 200
    finally:
        pool.close()
    assert second.closed
    with pytest.raises(ClientClosedError):
        pool.get(address)


def test_requests_complete_while_another_thread_waits_on_the_futures(connection):
    futures = [connection.request(put("t-wait", b"%d" % n)) for n in range(100)]
    done, not_done = wait(futures, timeout=WAIT_S)
    assert not not_done
    assert all(future.result().code == 200 for future in done)


def test_the_pool_fails_fast_for_a_while_after_a_failed_connect():
    pool = ConnectionPool(connect_timeout_s=2.0)
    address = BrokerAddress("127.0.0.1", free_port())
    try:
        pool.set_brokers("topic", [address])
        with pytest.raises(ClientError, match="cannot connect"):
            pool.get(address)
        with pytest.raises(ClientError, match="next attempt within"):
            pool.get(address)
    finally:
        pool.close()


def test_the_fast_put_header_is_what_the_codec_encodes():
    from meta.client.net.pipeline import _PUT_HEADER
    from meta.protocol.codec import encode

    for command in (put("t-a", b"x" * 1000), Put("topic-b", 17, b"", 3, 99, 4294967295)):
        header = _PUT_HEADER % (
            command.topic.encode(), command.partition, len(command.data), command.flag,
            command.checksum, command.opaque,
        )  # fmt: skip
        assert header + command.data == encode(command)


def test_futures_complete_under_as_completed_and_wait_all(connection):
    from concurrent.futures import ALL_COMPLETED, as_completed

    futures = [connection.request(put("t-asc", b"%d" % n)) for n in range(500)]
    assert sum(future.result().code == 200 for future in as_completed(futures, WAIT_S)) == 500
    more = [connection.request(put("t-asc", b"%d" % n)) for n in range(500)]
    done, not_done = wait(more, timeout=WAIT_S, return_when=ALL_COMPLETED)
    assert len(done) == 500 and not not_done


def test_a_cancelled_request_is_still_sent(connection):
    """A one-way command is a request whose future is cancelled at once: it must leave."""
    connection.request(put("t-oneway", b"first")).cancel()
    reply = connection.request(put("t-oneway", b"second")).result(WAIT_S)
    assert int(reply.body.split()[2]) > 0  # "first" is stored before it
    assert connection.pending_count == 0


def test_many_timed_out_requests_each_fail_once_and_leave_the_table(connection):
    futures = [held_get(connection, f"t-sweep-{n}", timeout_s=0.3) for n in range(5)]
    calls: list = []
    for future in futures:
        future.add_done_callback(calls.append)
    for future in futures:
        with pytest.raises(OperationTimeoutError, match="0.3 s"):
            future.result(WAIT_S)
    assert connection.pending_count == 0
    assert sorted(map(id, calls)) == sorted(map(id, futures))


def test_closing_with_thousands_of_puts_in_flight_completes_each_future_once(broker):
    connection = PipelinedConnection("127.0.0.1", broker.port)
    calls: list = []
    futures = []
    try:
        for n in range(3000):
            future = connection.request(put("t-loss", b"%d" % n))
            future.add_done_callback(calls.append)
            futures.append(future)
    finally:
        connection.close()
    done, not_done = wait(futures, timeout=WAIT_S)
    assert not not_done
    assert sorted(map(id, calls)) == sorted(map(id, futures))
    for future in futures:
        error = future.exception(0)
        assert error is None or isinstance(error, ClientClosedError)
    assert connection.pending_count == 0


def test_an_in_place_value_reply_dribbled_over_many_reads_arrives_byte_exactly():
    """``value_in_place``: a get reply's body split across many sends (so many reads into the
    body) is the exact bytes sent, as a ``bytearray``, and the frame after it still decodes."""
    body = bytes(range(256)) * 1200  # 300 KiB: received in place
    wire = b"value %d 1\r\n" % len(body) + body + b"result 200 2 2\r\nok"
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        peer, _ = server.accept()
        with peer:
            peer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer.recv(4096)  # the get, then the version request (pipelined, opaques 1 and 2)
            for start in range(0, len(wire), 7001):
                peer.sendall(wire[start : start + 7001])
                time.sleep(0.0005)
            peer.recv(1)  # until the client closes

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    opened = PipelinedConnection("127.0.0.1", port, value_in_place=True)
    try:
        got = opened.request(Get("t", "g", 0, 0, 1 << 20, 0))
        version = opened.request(Version(0))
        reply = got.result(WAIT_S)
        assert type(reply.data) is bytearray and reply.data == body
        assert version.result(WAIT_S) == Result(200, b"ok", 2)
    finally:
        opened.close()
        server.close()
        thread.join(WAIT_S)


def test_wait_sent_returns_once_the_writer_took_the_queued_requests(connection):
    futures = [connection.request(put("t-sent", b"%d" % n)) for n in range(200)]
    connection.wait_sent(WAIT_S)
    assert connection._outgoing == []
    wait(futures, WAIT_S)
    assert all(future.result().code == 200 for future in futures)
    connection.close()
    connection.wait_sent(WAIT_S)  # returns at once once closed
