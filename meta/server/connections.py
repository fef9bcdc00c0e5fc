"""The broker's one connection policy, for every listening port: how many, how idle, how slow.

What lives here: ``ConnectionGuard``, which every listening port of the broker (the text
port, the HTTP protocol's port, the dashboard's port) asks to admit each accepted connection,
and which closes the connections that hold resources without using them; ``PortLimit``, one
port's cap and count; and ``connections_allowed``, the connections a configuration lets in
at once over all ports (the start-up descriptor check counts them).

* at most ``connections_max`` connections at once on each port (``maxConnections`` for the
  text port, ``maxHttpConnections``, ``maxDashboardConnections``), and at most
  ``maxTotalConnections`` over all of them when it is set; one beyond is closed at once,
  without a byte written (the text protocol has no frame for it), and logged at most once
  per ``LOG_INTERVAL_S`` per port with the number refused since. Unless the full port holds
  a connection whose request header was incomplete at the last sweep and still is (a slow
  header): then the one incomplete the longest is reset to make room, and the new connection
  is admitted, so that clients trickling headers cannot keep others out for
  ``headerTimeoutInSeconds`` each time (a complete request arrives in one read or a few
  milliseconds: a sweep rarely finds one incomplete);
* an accepted socket gets ``SO_KEEPALIVE`` (probes after ``KEEPALIVE_IDLE_S`` of silence,
  every ``KEEPALIVE_INTERVAL_S``, ``KEEPALIVE_PROBES`` unanswered ones drop it), so a peer
  that vanished without a FIN or RST is noticed;
* a connection that sent nothing for ``idleConnectionTimeoutInSeconds`` while nothing of it
  is in flight (no put waiting for its fsync, no long-polled get, no transaction command
  waiting, no HTTP request being answered) is closed; a long poll is therefore never idle;
* a request header (the text port's header line; an HTTP request's head) must be complete
  within ``headerTimeoutInSeconds`` of its first byte, so a client that sends one byte a
  second cannot hold a connection for an hour: bytes arriving do not extend the deadline.
* a request body on the text port (a put's or a sync's) must be complete within
  ``headerTimeoutInSeconds`` plus that again per ``BODY_BYTES_PER_TIMEOUT`` (1 MiB) of its
  length, counted from the sweep that first sees it incomplete; an HTTP request's body
  counts in its head's deadline. While the broker itself stopped reading from a
  connection (backpressure, a turn's slice), its deadlines wait.

The checks run on one periodic sweep (``sweep_period_s``: a quarter of the shorter timeout,
between ``SWEEP_PERIOD_MIN_S`` and ``SWEEP_PERIOD_MAX_S``), which reads these public values
of each connection: ``received_bytes`` (every byte read), ``pending_header_bytes``,
``pending_body``, ``reading_paused`` and ``inflight``. Nothing is added to the per-read path
but one addition. A header (or a body) counts as the same one while the stream offset where
it starts (``received_bytes - pending_header_bytes``) stays the same, so a deadline is never
carried over to the next request. Timeouts therefore
act up to one sweep period late. Closures for a timeout are logged like refusals: the first
at once, then at most one line per ``LOG_INTERVAL_S`` per port and cause, with the count.

Thread affinity: reactor thread only.
"""

from __future__ import annotations

import logging
import socket
from collections import deque
from typing import Any

__all__ = ["ConnectionGuard", "PortLimit", "connections_allowed"]

log = logging.getLogger("meta.server")

KEEPALIVE_IDLE_S = 60
KEEPALIVE_INTERVAL_S = 10
KEEPALIVE_PROBES = 6
LOG_INTERVAL_S = 10.0
SWEEP_PERIOD_MIN_S = 0.1
SWEEP_PERIOD_MAX_S = 5.0
TOTAL_KEY = "maxTotalConnections"
DASHBOARD_OFF = -1  # dashboardHttpPort that turns the dashboard off
BODY_BYTES_PER_TIMEOUT = 1024 * 1024
"""A request body gets ``headerTimeoutInSeconds`` once, and once more per this many bytes."""


def connections_allowed(config: Any, http: bool) -> int:
    """The connections ``config`` lets in at once over every listening port: the text
    port's ``maxConnections``, the HTTP port's ``maxHttpConnections`` when ``http`` serves,
    the dashboard's ``maxDashboardConnections`` when it is on, at most
    ``maxTotalConnections`` when that is set."""
    allowed = config.connections_max
    if http:
        allowed += config.http_connections_max
    if config.dashboard_http_port != DASHBOARD_OFF:
        allowed += config.dashboard_connections_max
    total = config.total_connections_max
    return min(allowed, total) if total > 0 else allowed


class _RateLimitedLog:
    """One kind of event logged at once, then at most once per ``LOG_INTERVAL_S``."""

    __slots__ = ("count", "logged_at", "since_logged")

    def __init__(self) -> None:
        self.count = 0
        self.since_logged = 0
        self.logged_at: float | None = None

    def due(self, now: float) -> bool:
        """Count one event; whether to log it now (``since_logged`` is then the number
        of events the line covers)."""
        self.count += 1
        self.since_logged += 1
        if self.logged_at is not None and now - self.logged_at < LOG_INTERVAL_S:
            return False
        self.logged_at = now
        return True

    def logged(self) -> None:
        self.since_logged = 0


class PortLimit:
    """One listening port under the guard.

    Attributes:
        label: the port in metrics (``text``, ``http``, ``dashboard``).
        name: the port in the log (``the text port``).
        key: the configuration key of its cap (``maxConnections``).
        connections_max: its cap.
        header: what its header deadline applies to, in the log (``a header line``).
        open: its connections open now.
    """

    def __init__(
        self, label: str, name: str, key: str, connections_max: int, header: str
    ) -> None:
        assert connections_max > 0
        self.label = label
        self.name = name
        self.key = key
        self.connections_max = connections_max
        self.header = header
        self.open = 0
        self.slow_heads: deque[Any] = deque()  # slow header connections, oldest first
        self.refusals = _RateLimitedLog()
        self.evictions = _RateLimitedLog()
        self.header_timeouts = _RateLimitedLog()
        self.body_timeouts = _RateLimitedLog()
        self.idle_timeouts = _RateLimitedLog()

    @property
    def refused(self) -> int:
        """Connections refused on this port since start."""
        return self.refusals.count


class _Watch:
    """What the sweep remembers of one connection."""

    __slots__ = (
        "body_since",
        "body_start",
        "header_since",
        "header_start",
        "port",
        "received_at",
        "received_bytes",
    )

    def __init__(self, now: float, port: PortLimit) -> None:
        self.port = port
        self.received_bytes = 0
        self.received_at = now  # when received_bytes last changed
        self.header_start = -1  # stream offset of the incomplete header seen last, or -1
        self.header_since = now
        self.body_start = -1  # stream offset of the incomplete body seen last, or -1
        self.body_since = now


class ConnectionGuard:
    """Admits connections up to the limits and closes idle and too slow ones.

    A connection here has a ``transport`` and the public values ``received_bytes``,
    ``pending_header_bytes``, ``pending_body``, ``reading_paused`` and ``inflight``
    (``protocol.BrokerProtocol``, ``meta.web.GuardedChannel``).

    Args:
        config: provides ``connections_max`` (the text port's cap),
            ``total_connections_max`` (0: none), ``idle_connection_timeout_s`` and
            ``header_timeout_s`` (0 turns a timeout off).
        reactor: provides ``callLater`` and ``seconds``.

    Attributes:
        text_port: the text port's ``PortLimit``; ``add_port`` adds the others.
    """

    def __init__(self, config: Any, reactor: Any) -> None:
        self.total_max: int = config.total_connections_max
        self.idle_timeout_s: float = config.idle_connection_timeout_s
        self.header_timeout_s: float = config.header_timeout_s
        self._reactor = reactor
        self._watched: dict[Any, _Watch] = {}
        self._timer: Any = None
        self._total_refusals = _RateLimitedLog()
        timeouts = [t for t in (self.idle_timeout_s, self.header_timeout_s) if t > 0]
        period = min(timeouts) / 4 if timeouts else SWEEP_PERIOD_MAX_S
        self.sweep_period_s = min(max(period, SWEEP_PERIOD_MIN_S), SWEEP_PERIOD_MAX_S)
        self.idle_closed = 0
        self.header_closed = 0
        self.body_closed = 0
        self.ports: list[PortLimit] = []
        self.text_port = self.add_port(
            "text", "the text port (serverPort)", "maxConnections", config.connections_max
        )

    def add_port(
        self,
        label: str,
        name: str,
        key: str,
        connections_max: int,
        header: str = "a header line",
    ) -> PortLimit:
        """Register a listening port whose connections ``admit`` will take; see
        ``PortLimit`` for the arguments."""
        port = PortLimit(label, name, key, connections_max, header)
        self.ports.append(port)
        return port

    @property
    def refused(self) -> int:
        """Connections refused since start, over every port."""
        return sum(port.refused for port in self.ports)

    @property
    def open(self) -> int:
        """Connections open now, over every port."""
        return len(self._watched)

    def admit(self, connection: Any, port: PortLimit | None = None) -> bool:
        """Watch a new connection of ``port`` (the text port when None), or close it when
        the port's cap or the overall cap is reached.

        Returns:
            True when admitted; False when it was closed (do not count it as open).
        """
        port = self.text_port if port is None else port
        transport = connection.transport
        if port.open >= port.connections_max and not self._evict(port, port):
            self._refuse(transport, port, port.refusals, port.key, port.connections_max)
            return False
        if 0 < self.total_max <= len(self._watched) and not any(
            self._evict(full, port) for full in (port, *self.ports)
        ):
            self._refuse(transport, port, self._total_refusals, TOTAL_KEY, self.total_max)
            port.refusals.count += 1
            return False
        _keep_alive(transport)
        port.open += 1
        self._watched[connection] = _Watch(self._reactor.seconds(), port)
        if self._timer is None and (self.idle_timeout_s > 0 or self.header_timeout_s > 0):
            self._timer = self._reactor.callLater(self.sweep_period_s, self._sweep)
        return True

    def lost(self, connection: Any) -> None:
        """Stop watching a closed connection."""
        watch = self._watched.pop(connection, None)
        if watch is not None:
            watch.port.open -= 1

    def stop(self) -> None:
        """Stop sweeping (the broker is stopping)."""
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _refuse(
        self, transport: Any, port: PortLimit, refusals: _RateLimitedLog, key: str, limit: int
    ) -> None:
        if refusals.due(self._reactor.seconds()):
            log.warning(
                "refusing a connection from %s to %s: %d connections are open there, %d in "
                "all (%s=%d); %d refused since the last such line, %d since start; raise %s "
                "if the clients are legitimate",
                _address(transport.getPeer()),
                port.name,
                port.open,
                len(self._watched),
                key,
                limit,
                refusals.since_logged,
                refusals.count,
                key,
            )
            refusals.logged()
        transport.abortConnection()

    def _evict(self, port: PortLimit, admitting: PortLimit) -> bool:
        """Reset ``port``'s oldest connection with a slow header (``slow_heads``) to make
        room for a connection to ``admitting``; whether there was one."""
        while port.slow_heads:
            connection = port.slow_heads.popleft()
            watch = self._watched.get(connection)
            pending = connection.pending_header_bytes if watch is not None else 0
            if not pending or connection.received_bytes - pending != watch.header_start:
                continue  # gone, or its header completed since the sweep
            now = self._reactor.seconds()
            if port.evictions.due(now):
                log.warning(
                    "closing the connection from %s to %s to make room for one to %s: %s of "
                    "it has been incomplete for %.0f s (%d bytes received); %d such "
                    "connections closed since the last such line, %d since start",
                    _peer(connection),
                    port.name,
                    admitting.name,
                    port.header,
                    now - watch.header_since,
                    pending,
                    port.evictions.since_logged,
                    port.evictions.count,
                )
                port.evictions.logged()
            self._forget(connection)
            connection.transport.abortConnection()
            return True
        return False

    def _forget(self, connection: Any) -> None:
        watch = self._watched.pop(connection)
        watch.port.open -= 1

    def _sweep(self) -> None:
        """Close the idle connections and those whose header is overdue, list the slow
        headers of each port (oldest first); re-arm."""
        self._timer = None
        now = self._reactor.seconds()
        slow: list[tuple[float, int, Any, PortLimit]] = []
        for connection, watch in list(self._watched.items()):
            reason = self._overdue(connection, watch, now)
            if reason is None:
                if watch.header_start >= 0:  # a header still incomplete at this sweep
                    slow.append((watch.header_since, len(slow), connection, watch.port))
                continue
            self._forget(connection)
            # An idle connection has nothing to send: a FIN. A slow header gets a reset.
            if reason is watch.port.idle_timeouts:
                connection.transport.loseConnection()
            else:
                connection.transport.abortConnection()
        for port in self.ports:
            port.slow_heads.clear()
        slow.sort()
        for _since, _order, connection, port in slow:
            port.slow_heads.append(connection)
        if self._watched:
            self._timer = self._reactor.callLater(self.sweep_period_s, self._sweep)

    def _overdue(self, connection: Any, watch: _Watch, now: float) -> _RateLimitedLog | None:
        """Why ``connection`` must be closed now (the port's log of that cause; logged
        here), or None."""
        received = connection.received_bytes
        if received != watch.received_bytes:
            watch.received_bytes = received
            watch.received_at = now
        port = watch.port
        if connection.reading_paused:  # the broker stopped reading: the deadlines wait
            watch.header_since = watch.body_since = now
        body_overdue = self._body_overdue(connection, watch, now)
        if body_overdue is not None:
            return body_overdue
        pending = connection.pending_header_bytes
        if pending and self.header_timeout_s > 0:
            start = received - pending
            if start != watch.header_start:
                watch.header_start = start
                watch.header_since = now
            elif now - watch.header_since >= self.header_timeout_s:
                self.header_closed += 1
                if port.header_timeouts.due(now):
                    log.warning(
                        "closing the connection from %s to %s: %s was not completed within "
                        "%g s (%d bytes of it received; headerTimeoutInSeconds); %d such "
                        "connections closed since the last such line, %d since start",
                        _peer(connection),
                        port.name,
                        port.header,
                        self.header_timeout_s,
                        pending,
                        port.header_timeouts.since_logged,
                        port.header_timeouts.count,
                    )
                    port.header_timeouts.logged()
                return port.header_timeouts
        else:
            watch.header_start = -1
        idle_s = now - watch.received_at
        if self.idle_timeout_s > 0 and idle_s >= self.idle_timeout_s and not connection.inflight:
            self.idle_closed += 1
            if port.idle_timeouts.due(now):
                log.info(
                    "closing the connection from %s to %s: idle for %.0f s with no request "
                    "in flight (idleConnectionTimeoutInSeconds); %d such connections closed "
                    "since the last such line, %d since start",
                    _peer(connection),
                    port.name,
                    idle_s,
                    port.idle_timeouts.since_logged,
                    port.idle_timeouts.count,
                )
                port.idle_timeouts.logged()
            return port.idle_timeouts
        return None

    def _body_overdue(self, connection: Any, watch: _Watch, now: float) -> _RateLimitedLog | None:
        """The body deadline: a request body due must arrive within ``headerTimeoutInSeconds``
        plus that again per ``BODY_BYTES_PER_TIMEOUT`` of its length, counted from the
        sweep that first saw it incomplete; a trickle of bytes does not extend it."""
        received_body, body_bytes = connection.pending_body
        if received_body >= body_bytes or self.header_timeout_s <= 0:
            watch.body_start = -1
            return None
        start = connection.received_bytes - received_body  # where the body begins
        if start != watch.body_start:
            watch.body_start = start
            watch.body_since = now
            return None
        allowed_s = self.header_timeout_s * (1 + body_bytes / BODY_BYTES_PER_TIMEOUT)
        if now - watch.body_since < allowed_s:
            return None
        self.body_closed += 1
        port = watch.port
        if port.body_timeouts.due(now):
            log.warning(
                "closing the connection from %s to %s: a request body of %d bytes was not "
                "completed within %.0f s (%d bytes of it received; headerTimeoutInSeconds, "
                "and that again per MiB of body); %d such connections closed since the last "
                "such line, %d since start",
                _peer(connection),
                port.name,
                body_bytes,
                allowed_s,
                received_body,
                port.body_timeouts.since_logged,
                port.body_timeouts.count,
            )
            port.body_timeouts.logged()
        return port.body_timeouts


def _keep_alive(transport: Any) -> None:
    """Turn on TCP keepalive with probes after ``KEEPALIVE_IDLE_S`` (Linux options when
    present; other systems keep their own timings)."""
    set_keep_alive = getattr(transport, "setTcpKeepAlive", None)
    if set_keep_alive is None:  # not a TCP transport (tests)
        return
    set_keep_alive(True)
    handle = transport.getHandle()
    for name, value in (
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE_S),
        ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_S),
        ("TCP_KEEPCNT", KEEPALIVE_PROBES),
    ):
        option = getattr(socket, name, None)
        if option is not None:
            handle.setsockopt(socket.IPPROTO_TCP, option, value)


def _peer(connection: Any) -> str:
    return _address(connection.transport.getPeer())


def _address(peer: Any) -> str:
    return f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}"
