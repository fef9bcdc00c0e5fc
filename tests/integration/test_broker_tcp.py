"""The broker over real TCP: put forms, get/offset status rules, pipelining, bad input.

One broker process serves the module; each test uses its own topic under the ``t-*``
wildcard section so tests do not see each other's data.
"""

from __future__ import annotations

import socket
import threading

import pytest

from meta.client.net.connection import BrokerConnection, ConnectionClosedError
from meta.compiled import describe
from meta.protocol.commands import LONG_MAX, Data, Get, Offset, Put, Result, Stats, Version
from meta.protocol.message import checksum, iter_messages, pack_message
from tests.integration.broker_process import BrokerProcess

MESSAGE_BYTES_MAX = 65536


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(
        tmp_path_factory.mktemp("broker"),
        system={"numPartitions": 2, "maxMessageSize": MESSAGE_BYTES_MAX},
        topics={"test": {}, "t-*": {}},
    )
    process.start()
    yield process
    process.stop()


@pytest.fixture
def connection(broker):
    with broker.connect() as opened:
        yield opened


def put(connection: BrokerConnection, topic: str, data: bytes, partition: int = 0) -> int:
    reply = connection.request(Put(topic, partition, data, 0, 1, checksum=checksum(data)))
    assert reply.code == 200, reply
    return int(reply.body.split(b" ")[2])


def test_six_token_put_is_stored_at_offset_zero(connection):
    reply = connection.request(Put("t-six", 0, b"hello", 0, 7))
    msg_id, partition, offset = reply.body.split(b" ")
    assert (reply.code, reply.opaque, partition, offset) == (200, 7, b"0", b"0")
    assert int(msg_id) > 0


def test_seven_token_put_with_the_right_checksum_follows_the_previous_record(connection):
    first = put(connection, "t-seven", b"hello")
    second = put(connection, "t-seven", b"world!")
    assert second == first + 20 + len(b"hello")


def test_put_with_a_wrong_checksum_gets_500(connection):
    reply = connection.request(Put("t-crc", 0, b"hello", 0, 9, checksum=12345))
    assert reply.code == 500
    assert b"Checksum failure" in reply.body
    assert b"[partition 't-crc-0']" in reply.body


def test_put_to_partition_minus_one_picks_a_partition(connection):
    reply = connection.request(Put("t-any", -1, b"x", 0, 1))
    assert reply.code == 200
    assert reply.body.split(b" ")[1] in (b"0", b"1")


def test_put_outside_the_partition_range_gets_500(connection):
    reply = connection.request(Put("t-range", 5, b"x", 0, 1))
    assert reply.code == 500
    assert b"wrong partition 5" in reply.body


def test_put_to_an_unconfigured_topic_gets_500(connection):
    reply = connection.request(Put("nope", 0, b"x", 0, 1))
    assert reply.code == 500
    assert b"The server do not accept topic nope" in reply.body


def test_the_topic_dot_dot_slash_x_is_refused_before_touching_the_disk(connection, broker):
    reply = connection.request(Put("../x", 0, b"x", 0, 1))
    assert reply.code == 500
    assert b"../x" in reply.body
    assert not (broker.data_path.parent / "x-0").exists()


def test_get_returns_the_stored_records(connection):
    put(connection, "t-get", b"a")
    put(connection, "t-get", b"bc")
    reply = connection.request(Get("t-get", "g", 0, 0, 1024, 3))
    assert isinstance(reply, Data)
    assert [r.payload for r in iter_messages(reply.data)] == [b"a", b"bc"]


def test_get_at_the_end_is_404_with_the_java_text(connection):
    end = put(connection, "t-end", b"abc") + 23
    reply = connection.request(Get("t-end", "g", 0, end, 1024, 4))
    assert reply == Result(404, b"Could not find message at position %d" % end, 4)


def test_get_beyond_the_end_is_404_without_update_consumer_offsets(connection):
    put(connection, "t-beyond", b"abc")
    reply = connection.request(Get("t-beyond", "g", 0, 1000, 1024, 5))
    assert reply.code == 404


def test_get_at_long_max_is_301_with_the_end(connection):
    end = put(connection, "t-max", b"abc") + 23
    reply = connection.request(Get("t-max", "g", 0, LONG_MAX, 1024, 6))
    assert reply == Result(301, b"%d" % end, 6)


@pytest.mark.parametrize("max_size", [0, -1])
def test_get_with_max_size_not_positive_is_400(connection, max_size):
    put(connection, "t-bad-size", b"x")
    reply = connection.request(Get("t-bad-size", "g", 0, 0, max_size, 8))
    assert reply == Result(400, b"Bad request,invalid max size:%d" % max_size, 8)


def test_get_on_a_partition_without_store_is_404(connection):
    reply = connection.request(Get("t-none", "g", 1, 0, 1024, 9))
    assert reply == Result(404, b"The topic `t-none` in partition `1` is not exists", 9)


def test_get_is_bounded_by_max_size(connection):
    for _ in range(10):
        put(connection, "t-bounded", b"x" * 100)
    reply = connection.request(Get("t-bounded", "g", 0, 0, 250, 1))
    assert len(reply.data) == 250
    assert len(list(iter_messages(reply.data))) == 2


def test_a_long_poll_get_is_held_until_data_arrives(broker):
    """Goal: DECISIONS 16. Method: a get at the end with maxWaitMs gets no answer while the
    partition is idle, then the data as soon as another connection puts it."""
    with broker.connect() as waiting, broker.connect() as producer:
        end = put(producer, "t-poll", b"first") + 25
        waiting.send(Get("t-poll", "g", 0, end, 1024, 1, max_wait_ms=30_000))
        assert not waiting.reply_ready(0.3)
        put(producer, "t-poll", b"second")
        reply = waiting.receive()
    assert isinstance(reply, Data)
    assert [r.payload for r in iter_messages(reply.data)] == [b"second"]


def test_a_long_poll_get_times_out_with_404(connection):
    end = put(connection, "t-poll-idle", b"only") + 24
    reply = connection.request(Get("t-poll-idle", "g", 0, end, 1024, 2, max_wait_ms=200))
    assert reply.code == 404


def test_offset_command_on_a_single_segment_answers_its_start(connection):
    put(connection, "t-offset", b"abc")
    reply = connection.request(Offset("t-offset", "g", 0, 10, 2))
    assert reply == Result(200, b"0", 2)


def test_version_answers_200(connection):
    reply = connection.request(Version(11))
    assert reply.code == 200
    assert reply.body.startswith(b"1.4.6.3")


def test_stats_answers_the_general_block(connection):
    reply = connection.request(Stats("", 12))
    assert reply.code == 200
    assert reply.body.startswith(b"STATS\r\npid ")
    assert reply.body.endswith(b"END\r\n")


def test_sync_gets_503_on_a_plain_broker(connection):
    connection.send_bytes(b"sync test 0 1 0 5 -1 5\r\nx")
    reply = connection.receive()
    assert (reply.code, reply.opaque) == (503, 5)
    assert reply.body.endswith(b"SyncCommand")


def test_an_unknown_command_closes_the_connection(connection):
    connection.send_bytes(b"hello broker\r\n")
    with pytest.raises(ConnectionClosedError):
        connection.receive()


def test_garbage_closes_only_its_own_connection(broker):
    with broker.connect() as bad, broker.connect() as good:
        bad.send_bytes(b"\x00\xff garbage \r\n" * 3)
        with pytest.raises(ConnectionClosedError):
            bad.receive()
        assert good.request(Version(1)).code == 200


def test_a_header_line_over_4_kib_closes_the_connection(connection):
    connection.send_bytes(b"get " + b"t" * 5000)
    with pytest.raises(ConnectionClosedError):
        connection.receive()


def test_quit_closes_the_connection_without_a_reply(connection):
    connection.send_bytes(b"quit\r\n")
    with pytest.raises(ConnectionClosedError):
        connection.receive()


def test_ten_thousand_pipelined_puts_get_ten_thousand_correct_replies(broker):
    """Goal: pipelining keeps opaques and order. Method: a writer thread sends 10,000 puts
    and finishes before the first reply is read; then every reply is checked."""
    count = 10_000
    payloads = [b"message-%05d" % index for index in range(count)]
    with broker.connect(timeout_s=60) as connection:
        wire = b"".join(
            pack_put("t-pipeline", payload, opaque) for opaque, payload in enumerate(payloads)
        )
        writer = threading.Thread(target=connection.send_bytes, args=(wire,))
        writer.start()
        writer.join(60)
        assert not writer.is_alive()
        replies = [connection.receive() for _ in range(count)]
    assert [reply.opaque for reply in replies] == list(range(count))
    assert all(reply.code == 200 for reply in replies)
    offsets = [int(reply.body.split(b" ")[2]) for reply in replies]
    assert offsets == [index * (20 + len(payloads[0])) for index in range(count)]


def pack_put(topic: str, data: bytes, opaque: int) -> bytes:
    header = f"put {topic} 0 {len(data)} 0 {checksum(data)} {opaque}\r\n"
    return header.encode() + data


def test_an_oversized_put_gets_500_and_the_connection_keeps_working(broker):
    """Goal: DECISIONS 8. Method: announce a 2 GB body; the 500 arrives before the body is
    sent; then stream the 2 GB through and check the broker's memory and the connection."""
    length = 2_000_000_000
    with broker.connect(timeout_s=120) as connection:
        connection.send_bytes(b"put t-huge 0 %d 0 77\r\n" % length)
        reply = connection.receive()
        assert (reply.code, reply.opaque) == (500, 77)
        assert b"larger than maxMessageSize %d" % MESSAGE_BYTES_MAX in reply.body
        chunk = bytes(4 * 1024 * 1024)
        for _ in range(length // len(chunk)):
            connection.send_bytes(chunk)
        connection.send_bytes(bytes(length % len(chunk)))
        assert broker.rss_bytes() < 300 * 1024 * 1024
        assert connection.request(Version(78)).code == 200
        assert put(connection, "t-huge", b"after") == 0


def test_a_connection_reset_mid_body_does_not_disturb_the_broker(broker):
    raw = socket.create_connection(("127.0.0.1", broker.port))
    raw.sendall(b"put t-reset 0 100 0 1\r\nonly-part")
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    raw.close()
    with broker.connect() as connection:
        assert connection.request(Version(1)).code == 200


def test_java_client_bytes_from_the_trace_are_answered_like_the_java_broker(connection):
    data = b"\x00\x00\x00\x06attr-0hello-0"
    connection.send_bytes(b"put t-trace 0 17 1 119204292 -2147483648\r\n" + data)
    reply = connection.receive()
    assert (reply.code, reply.opaque) == (200, -2147483648)
    served = connection.request(Get("t-trace", "g-trace", 0, 0, 1048576, -2147483638))
    record = next(iter_messages(served.data))
    assert served.data == pack_message(record.msg_id, 1, data)


def test_the_broker_runs_on_the_lean_reactor(broker, connection):
    assert connection.request(Version(1)).code == 200
    assert "reactor: LeanEPollReactor" in broker.log()


def test_the_broker_logs_which_build_it_runs(broker, connection):
    assert connection.request(Version(1)).code == 200
    assert f"build: {describe()}" in broker.log()
