"""``ConnectionGuard`` on ``task.Clock`` with fake connections: the caps per port and overall,
idle, the header deadline and the rate-limited log."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from twisted.internet.task import Clock

from meta.protocol.codec import Decoder
from meta.server.connections import LOG_INTERVAL_S, ConnectionGuard, connections_allowed


class FakeTransport:
    def __init__(self) -> None:
        self.aborted = False
        self.lost = False

    def getPeer(self):
        return SimpleNamespace(host="127.0.0.1", port=4242)

    def abortConnection(self) -> None:
        self.aborted = True

    def loseConnection(self) -> None:
        self.lost = True


class FakeConnection:
    def __init__(self) -> None:
        self.transport = FakeTransport()
        self.received_bytes = 0
        self.pending_header_bytes = 0
        self.pending_body = (0, 0)
        self.reading_paused = False
        self.inflight = 0

    @property
    def closed(self) -> bool:
        return self.transport.aborted or self.transport.lost


def guard(
    connections_max: int = 10, idle_s: int = 0, header_s: int = 0, total_max: int = 0
) -> tuple:
    config = SimpleNamespace(
        connections_max=connections_max,
        total_connections_max=total_max,
        idle_connection_timeout_s=idle_s,
        header_timeout_s=header_s,
    )
    clock = Clock()
    return ConnectionGuard(config, clock), clock


def test_a_connection_beyond_the_maximum_is_aborted():
    connection_guard, _clock = guard(connections_max=2)
    first, second, third = FakeConnection(), FakeConnection(), FakeConnection()
    assert connection_guard.admit(first)
    assert connection_guard.admit(second)
    assert not connection_guard.admit(third)
    assert third.transport.aborted
    assert connection_guard.refused == 1
    connection_guard.lost(first)
    assert connection_guard.admit(FakeConnection())


def test_an_idle_connection_is_closed_with_a_fin_after_the_timeout():
    connection_guard, clock = guard(idle_s=8)
    connection = FakeConnection()
    connection_guard.admit(connection)
    clock.advance(6)
    assert not connection.closed
    clock.advance(connection_guard.sweep_period_s * 2)
    assert connection.transport.lost


def test_reading_keeps_a_connection_from_being_idle():
    connection_guard, clock = guard(idle_s=8)
    connection = FakeConnection()
    connection_guard.admit(connection)
    for _ in range(10):
        clock.advance(4)
        connection.received_bytes += 10
    assert not connection.closed


def test_a_connection_with_a_request_in_flight_is_not_idle():
    connection_guard, clock = guard(idle_s=8)
    connection = FakeConnection()
    connection.inflight = 1
    connection_guard.admit(connection)
    clock.advance(60)
    assert not connection.closed
    connection.inflight = 0
    clock.advance(10)
    assert connection.closed


def test_a_header_that_stays_incomplete_is_reset_after_the_deadline():
    connection_guard, clock = guard(header_s=4)
    connection = FakeConnection()
    connection_guard.admit(connection)
    for _ in range(20):  # one byte a second, never a CR LF
        clock.advance(1)
        connection.received_bytes += 1
        connection.pending_header_bytes += 1
        if connection.closed:
            break
    assert connection.transport.aborted
    assert clock.seconds() <= 4 + 2 * connection_guard.sweep_period_s


def test_each_new_header_gets_its_own_deadline():
    connection_guard, clock = guard(header_s=4)
    connection = FakeConnection()
    connection_guard.admit(connection)
    for _ in range(40):  # a partial header at every sweep, but a new one each second
        connection.received_bytes += 30
        connection.pending_header_bytes = 5
        clock.advance(1)
    assert not connection.closed


def test_the_decoder_reports_only_incomplete_header_bytes():
    decoder = Decoder()
    decoder.receive_data(b"vers")
    assert decoder.pending_header_bytes == 4
    decoder.receive_data(b"ion 1\r\nput t 0 10 0 2\r\nabc")
    assert decoder.next_command() is not None  # the version
    decoder.next_command()  # the put waits for its body
    assert decoder.pending_header_bytes == 0


def test_a_body_that_stays_incomplete_is_reset_after_its_deadline():
    """Goal: a put body trickled a byte at a time does not hold the connection. Method: a
    100-byte body growing by one byte a second; the deadline is the header timeout (plus
    that again per MiB)."""
    connection_guard, clock = guard(header_s=4, idle_s=600)
    connection = FakeConnection()
    connection_guard.admit(connection)
    connection.received_bytes = 40  # the header line, then the body began
    for received in range(1, 40):
        clock.advance(1)
        connection.received_bytes += 1
        connection.pending_body = (received, 100)
        if connection.closed:
            break
    assert connection.transport.aborted
    assert clock.seconds() <= 4 + 3 * connection_guard.sweep_period_s + 1
    assert connection_guard.body_closed == 1


def test_a_large_body_gets_more_time_by_its_length():
    connection_guard, clock = guard(header_s=4, idle_s=600)
    connection = FakeConnection()
    connection_guard.admit(connection)
    body_bytes = 4 * 1024 * 1024  # 4 + 4 * 4 = 20 s
    for second in range(1, 18):
        clock.advance(1)
        connection.received_bytes += 100_000
        connection.pending_body = (second * 100_000, body_bytes)
    assert not connection.closed
    clock.advance(6)
    assert connection.transport.aborted


def test_each_new_body_gets_its_own_deadline():
    connection_guard, clock = guard(header_s=4, idle_s=600)
    connection = FakeConnection()
    connection_guard.admit(connection)
    for _ in range(40):  # a partial body at every sweep, but a new put each second
        connection.received_bytes += 200
        connection.pending_body = (10, 100)
        clock.advance(1)
    assert not connection.closed


def test_deadlines_wait_while_the_broker_does_not_read():
    """Goal: backpressure of the broker's own never closes a connection as slow. Method: an
    incomplete header and body while reading is paused for a minute, then resumed."""
    connection_guard, clock = guard(header_s=4, idle_s=600)
    slow_header, slow_body = FakeConnection(), FakeConnection()
    for connection in (slow_header, slow_body):
        connection_guard.admit(connection)
        connection.received_bytes = 50
        connection.reading_paused = True
    slow_header.pending_header_bytes = 10
    slow_body.pending_body = (10, 100)
    clock.advance(60)
    assert not slow_header.closed
    assert not slow_body.closed
    for connection in (slow_header, slow_body):
        connection.reading_paused = False
    clock.advance(10)
    assert slow_header.closed
    assert slow_body.closed


def test_the_decoder_reports_a_due_body_and_a_skipped_one():
    decoder = Decoder(body_bytes_max=50)
    decoder.receive_data(b"put t 0 10 0 2\r\nabc")
    decoder.next_command()  # the put waits for its body
    assert decoder.pending_body == (3, 10)
    decoder.receive_data(b"defghij")
    decoder.next_command()
    assert decoder.pending_body == (0, 0)
    decoder.receive_data(b"put t 0 100 0 3\r\n" + b"x" * 30)
    decoder.next_command()  # too large: skipped
    assert decoder.pending_body == (30, 100)


def test_each_port_has_its_own_cap():
    connection_guard, _clock = guard(connections_max=1)
    http = connection_guard.add_port("http", "the HTTP port", "maxHttpConnections", 2)
    assert connection_guard.admit(FakeConnection())
    assert not connection_guard.admit(FakeConnection())  # the text port is full
    assert connection_guard.admit(FakeConnection(), http)
    assert connection_guard.admit(FakeConnection(), http)
    refused = FakeConnection()
    assert not connection_guard.admit(refused, http)
    assert refused.transport.aborted
    assert (connection_guard.text_port.refused, http.refused) == (1, 1)
    assert (connection_guard.text_port.open, http.open, connection_guard.open) == (1, 2, 3)


def test_the_overall_cap_counts_every_port(caplog):
    caplog.set_level(logging.INFO, "meta.server")
    connection_guard, _clock = guard(connections_max=5, total_max=3)
    dashboard = connection_guard.add_port(
        "dashboard", "the dashboard", "maxDashboardConnections", 5
    )
    first = FakeConnection()
    assert connection_guard.admit(first)
    assert connection_guard.admit(FakeConnection(), dashboard)
    assert connection_guard.admit(FakeConnection(), dashboard)
    assert not connection_guard.admit(FakeConnection(), dashboard)
    assert "(maxTotalConnections=3)" in caplog.text
    assert "to the dashboard" in caplog.text
    connection_guard.lost(first)
    assert connection_guard.admit(FakeConnection(), dashboard)


def test_refusals_are_logged_once_per_interval_with_the_count(caplog):
    caplog.set_level(logging.INFO, "meta.server")
    connection_guard, clock = guard(connections_max=1)
    connection_guard.admit(FakeConnection())
    for _ in range(50):
        connection_guard.admit(FakeConnection())
    assert len(caplog.records) == 1
    clock.advance(LOG_INTERVAL_S)
    connection_guard.admit(FakeConnection())
    assert len(caplog.records) == 2
    assert "50 refused since the last such line, 51 since start" in caplog.records[1].message


def test_header_timeouts_are_logged_once_per_interval(caplog):
    caplog.set_level(logging.INFO, "meta.server")
    connection_guard, clock = guard(header_s=2)
    connections = [FakeConnection() for _ in range(30)]
    for connection in connections:
        connection_guard.admit(connection)
        connection.received_bytes = connection.pending_header_bytes = 1
    clock.advance(1)
    clock.advance(3)
    assert all(connection.transport.aborted for connection in connections)
    lines = [r.message for r in caplog.records if "headerTimeoutInSeconds" in r.message]
    assert len(lines) == 1
    assert "to the text port (serverPort)" in lines[0]
    assert connection_guard.text_port.open == 0


def test_connections_allowed_counts_the_ports_that_are_on():
    config = SimpleNamespace(
        connections_max=100,
        http_connections_max=20,
        dashboard_connections_max=5,
        dashboard_http_port=8120,
        total_connections_max=0,
    )
    assert connections_allowed(config, http=True) == 125
    assert connections_allowed(config, http=False) == 105
    config.dashboard_http_port = -1
    assert connections_allowed(config, http=False) == 100
    config.total_connections_max = 50
    assert connections_allowed(config, http=True) == 50


def test_a_full_port_resets_its_oldest_slow_header_to_admit_a_new_connection(caplog):
    caplog.set_level(logging.INFO, "meta.server")
    connection_guard, clock = guard(connections_max=2, header_s=40)
    slow, quick = FakeConnection(), FakeConnection()
    for connection in (slow, quick):
        connection_guard.admit(connection)
    assert not connection_guard.admit(FakeConnection())  # no header is incomplete
    slow.received_bytes = slow.pending_header_bytes = 3  # a header that never completes
    clock.advance(connection_guard.sweep_period_s)
    newcomer = FakeConnection()
    assert connection_guard.admit(newcomer)
    assert slow.transport.aborted and not quick.closed and not newcomer.closed
    assert "to make room for one to the text port" in caplog.text
    assert not connection_guard.admit(FakeConnection())  # no slow header left


def test_a_header_completed_since_the_sweep_is_not_reset():
    connection_guard, clock = guard(connections_max=1, header_s=40)
    connection = FakeConnection()
    connection_guard.admit(connection)
    connection.received_bytes = connection.pending_header_bytes = 3
    clock.advance(connection_guard.sweep_period_s)
    connection.received_bytes, connection.pending_header_bytes = 30, 0
    assert not connection_guard.admit(FakeConnection())
    assert not connection.closed
