"""Broker-wide bounds on client connections: how many, how long idle, how slow a header.

What lives here: ``ConnectionGuard``, which the ``Broker`` asks to admit every accepted
connection and which closes the connections that hold resources without using them:

* at most ``maxConnections`` connections at once; one beyond is closed at once, without a
  byte written (the text protocol has no frame for it), and logged at most once per
  ``REFUSED_LOG_INTERVAL_S`` with the number refused since;
* an accepted socket gets ``SO_KEEPALIVE`` (probes after ``KEEPALIVE_IDLE_S`` of silence,
  every ``KEEPALIVE_INTERVAL_S``, ``KEEPALIVE_PROBES`` unanswered ones drop it), so a peer
  that vanished without a FIN or RST is noticed;
* a connection that sent nothing for ``idleConnectionTimeoutInSeconds`` while nothing of it
  is in flight (no put waiting for its fsync, no long-polled get, no transaction command
  waiting) is closed; a long poll is therefore never idle;
* a header line must be complete within ``headerTimeoutInSeconds`` of its first byte, so a
  client that sends one byte a second cannot hold a connection for an hour.

The checks run on one periodic sweep (``sweep_period_s``: a quarter of the shorter timeout,
between ``SWEEP_PERIOD_MIN_S`` and ``SWEEP_PERIOD_MAX_S``), which reads two public numbers of
each connection: ``received_bytes`` (every byte read) and ``pending_header_bytes``. Nothing
is added to the per-read path but one addition. A header counts as the same one while the
stream offset where it starts (``received_bytes - pending_header_bytes``) stays the same, so
a deadline is never carried over to the next header. Timeouts therefore act up to one sweep
period late.

Thread affinity: reactor thread only.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

__all__ = ["ConnectionGuard"]

log = logging.getLogger("meta.server")

KEEPALIVE_IDLE_S = 60
KEEPALIVE_INTERVAL_S = 10
KEEPALIVE_PROBES = 6
REFUSED_LOG_INTERVAL_S = 10.0
SWEEP_PERIOD_MIN_S = 0.1
SWEEP_PERIOD_MAX_S = 5.0


class _Watch:
    """What the sweep remembers of one connection."""

    __slots__ = ("header_since", "header_start", "received_bytes", "received_at")

    def __init__(self, now: float) -> None:
        self.received_bytes = 0
        self.received_at = now  # when received_bytes last changed
        self.header_start = -1  # stream offset of the incomplete header seen last, or -1
        self.header_since = now


class ConnectionGuard:
    """Admits connections up to the limit and closes idle and too slow ones.

    Args:
        config: provides ``connections_max``, ``idle_connection_timeout_s`` and
            ``header_timeout_s`` (0 turns a timeout off).
        reactor: provides ``callLater`` and ``seconds``.
    """

    def __init__(self, config: Any, reactor: Any) -> None:
        self.connections_max: int = config.connections_max
        self.idle_timeout_s: float = config.idle_connection_timeout_s
        self.header_timeout_s: float = config.header_timeout_s
        self._reactor = reactor
        self._watched: dict[Any, _Watch] = {}
        self._timer: Any = None
        self._refused = 0
        self._refused_logged_at: float | None = None
        timeouts = [t for t in (self.idle_timeout_s, self.header_timeout_s) if t > 0]
        period = min(timeouts) / 4 if timeouts else SWEEP_PERIOD_MAX_S
        self.sweep_period_s = min(max(period, SWEEP_PERIOD_MIN_S), SWEEP_PERIOD_MAX_S)
        self.idle_closed = 0
        self.header_closed = 0

    @property
    def refused(self) -> int:
        """Connections refused since start (the limit was reached)."""
        return self._refused

    def admit(self, connection: Any) -> bool:
        """Watch a new connection, or close it when ``connections_max`` are open.

        Returns:
            True when admitted; False when it was closed (do not count it as open).
        """
        transport = connection.transport
        if len(self._watched) >= self.connections_max:
            self._refuse(transport)
            return False
        _keep_alive(transport)
        self._watched[connection] = _Watch(self._reactor.seconds())
        if self._timer is None and (self.idle_timeout_s > 0 or self.header_timeout_s > 0):
            self._timer = self._reactor.callLater(self.sweep_period_s, self._sweep)
        return True

    def lost(self, connection: Any) -> None:
        """Stop watching a closed connection."""
        self._watched.pop(connection, None)

    def stop(self) -> None:
        """Stop sweeping (the broker is stopping)."""
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _refuse(self, transport: Any) -> None:
        self._refused += 1
        now = self._reactor.seconds()
        last = self._refused_logged_at
        if last is None or now - last >= REFUSED_LOG_INTERVAL_S:
            self._refused_logged_at = now
            log.warning(
                "refusing a connection from %s: %d connections are open (maxConnections=%d); "
                "%d refused since start",
                _address(transport.getPeer()),
                len(self._watched),
                self.connections_max,
                self._refused,
            )
        transport.abortConnection()

    def _sweep(self) -> None:
        """Close the idle connections and those whose header is overdue; re-arm."""
        self._timer = None
        now = self._reactor.seconds()
        for connection, watch in list(self._watched.items()):
            reason, abort = self._overdue(connection, watch, now)
            if reason is not None:
                log.info("closing the connection from %s: %s", _peer(connection), reason)
                del self._watched[connection]
                # An idle connection has nothing to send: a FIN. A slow header gets a reset.
                if abort:
                    connection.transport.abortConnection()
                else:
                    connection.transport.loseConnection()
        if self._watched:
            self._timer = self._reactor.callLater(self.sweep_period_s, self._sweep)

    def _overdue(self, connection: Any, watch: _Watch, now: float) -> tuple[str | None, bool]:
        """Why ``connection`` must be closed now (or None), and whether by a reset."""
        received = connection.received_bytes
        if received != watch.received_bytes:
            watch.received_bytes = received
            watch.received_at = now
        pending = connection.pending_header_bytes
        if pending and self.header_timeout_s > 0:
            start = received - pending
            if start != watch.header_start:
                watch.header_start = start
                watch.header_since = now
            elif now - watch.header_since >= self.header_timeout_s:
                self.header_closed += 1
                text = (
                    f"a header line was not completed within {self.header_timeout_s:g} s "
                    f"({pending} bytes of it received; headerTimeoutInSeconds)"
                )
                return text, True
        else:
            watch.header_start = -1
        idle_s = now - watch.received_at
        if self.idle_timeout_s > 0 and idle_s >= self.idle_timeout_s and not connection.inflight:
            self.idle_closed += 1
            text = (
                f"idle for {idle_s:.0f} s with no request in flight "
                "(idleConnectionTimeoutInSeconds)"
            )
            return text, False
        return None, False


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
