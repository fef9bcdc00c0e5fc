"""The dashboard's web server: twisted.web on the broker's reactor, on ``dashboardHttpPort``.

``start_dashboard`` listens (or not: ``-1`` turns the dashboard off; ``0`` picks a free port,
which is logged) on ``hostName`` when it is set, else on every interface, as the broker's TCP
port does (compatibility.md). A port that cannot be taken is a startup error naming the port and
the key. Its connections follow the broker's connection policy (``meta.web.GuardedSite``:
at most ``maxDashboardConnections``, the idle and head timeouts). It also installs the
``/logging`` ring on the root logger and starts sampling the rates the charts show.

``DashboardResource`` turns each HTTP request into a ``routes.Request`` and writes the
``routes.Reply`` it gets back, at once or when its Deferred fires (the ZooKeeper views and
the actions). A route that raises answers 500 ``Server error: <message>``. Every answer,
pages, JSON, metrics, static files and errors alike, carries ``SECURITY_HEADERS``: a
Content-Security-Policy that lets a page run only this origin's script and style sheet,
talk only to this origin and be framed by no one, plus ``nosniff``, ``no-referrer`` and
``no-store``.

Reactor thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.web import resource, server

from meta.dashboard.actions import ADMIN_HEADER, TOKEN_KEY, Actions, TokenFileError, read_token
from meta.dashboard.history import RateHistory
from meta.dashboard.logring import LogRing
from meta.dashboard.metrics import BrokerMetrics
from meta.dashboard.routes import Reply, Request, route, text_reply
from meta.dashboard.zookeeper import ZooKeeperViews
from meta.errors import MetaError
from meta.web import GuardedSite, listen_site

log = logging.getLogger("meta.dashboard")

PORT_KEY = "dashboardHttpPort"
CAP_KEY = "maxDashboardConnections"
PORT_OFF = -1
JSON_TYPES = ("application/json", "application/vnd")
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = (
    ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),  # frame-ancestors for browsers that predate it
    ("Cross-Origin-Resource-Policy", "same-origin"),
    ("Cache-Control", "no-store"),
)


class DashboardError(MetaError):
    """The dashboard cannot start (its port is taken or not allowed)."""


class Dashboard:
    """The dashboard of one broker: its routes' state, metrics and listening port.

    Args:
        broker: the ``Broker`` (its public state is read at each request).
        reactor: the broker's reactor.
        reload: starts a config reload and returns a Deferred of its outcome (``main``'s
            reload), or None: then ``POST /reload-config`` answers 503.
        ring: the ``/logging`` ring, or None.
    """

    def __init__(
        self,
        broker: Any,
        reactor: Any,
        reload: Callable[[], Any] | None = None,
        ring: LogRing | None = None,
    ) -> None:
        self.broker = broker
        self._reactor = reactor
        self.started_at_s = reactor.seconds()
        self.metrics = BrokerMetrics(broker, reactor.seconds, self.started_at_s)
        broker.store.flusher.on_batch_seconds = self.metrics.fsync.observe
        self.history = RateHistory(broker, reactor)
        self.ring = ring
        self.views = ZooKeeperViews(broker, reactor.seconds, lambda: self.port, reactor)
        self.actions = Actions(self.views, reload, broker.config.dashboard_admin_token_file)
        guard = broker.connection_guard
        port_limit = guard.add_port(
            "dashboard",
            "the dashboard (dashboardHttpPort)",
            CAP_KEY,
            broker.config.dashboard_connections_max,
        )
        self.site = GuardedSite(DashboardResource(self), guard, port_limit, reactor)
        self._port: Any = None

    @property
    def port(self) -> int | None:
        """The port listened on, or None before ``listen``."""
        return self._port.getHost().port if self._port is not None else None

    def listen(self, port: int, interface: str) -> int:
        """Listen on ``interface:port``; return the port (the chosen one when ``port`` is 0).

        Raises:
            DashboardError: the port cannot be taken; the text names the port and the key.
        """
        advice = (
            f"set [system] {PORT_KEY} to a free port, 0 for any free port, or -1 to turn "
            "the dashboard off"
        )
        self._port = listen_site(
            self._reactor, self.site, port, interface, "the dashboard", advice, DashboardError
        )
        self.history.start()
        return self.port

    def stop(self) -> Any:
        """Stop listening and sampling; a Deferred (or None when not listening)."""
        self.history.stop()
        if self.ring is not None:
            logging.getLogger().removeHandler(self.ring)
        port, self._port = self._port, None
        return port.stopListening() if port is not None else None

    def now_s(self) -> float:
        return self._reactor.seconds()


class DashboardResource(resource.Resource):
    """The one twisted.web resource: every path goes to ``routes.route``."""

    isLeaf = True

    def __init__(self, dashboard: Dashboard) -> None:
        super().__init__()
        self._dashboard = dashboard

    def render(self, request: Any) -> Any:
        parsed = _parse(request)
        try:
            reply = route(self._dashboard, parsed)
        except Exception as error:  # a page must not take the broker down: answer 500
            reply = _server_error(error, parsed.path)
        if isinstance(reply, Reply):
            return _write_head(request, reply)
        finished = request.notifyFinish()
        finished.addErrback(lambda _: None)  # the client went away; nothing to write
        reply = defer.maybeDeferred(lambda: reply)
        reply.addErrback(lambda failure: _server_error(failure.value, parsed.path))
        reply.addCallback(_write_later, request, finished)
        return server.NOT_DONE_YET


def _parse(request: Any) -> Request:
    query = {
        key.decode("utf-8", "replace"): values[-1].decode("utf-8", "replace")
        for key, values in request.args.items()
        if values
    }
    accept = (request.getHeader(b"accept") or b"").decode("latin-1")
    content_type = (request.getHeader(b"content-type") or b"").decode("latin-1")
    wants_json = query.get("format") == "json" or any(
        header.startswith(JSON_TYPES) for header in (accept, content_type)
    )
    client = request.getClientAddress()
    return Request(
        method=request.method.decode("latin-1"),
        path=request.path.decode("utf-8", "replace"),
        query=query,
        wants_json=wants_json,
        client_host=getattr(client, "host", ""),
        server_host=getattr(request.getHost(), "host", ""),
        admin_header=request.getHeader(ADMIN_HEADER.encode()) == b"1",
        host_header=(request.getHeader(b"host") or b"").decode("latin-1"),
        authorization=(request.getHeader(b"authorization") or b"").decode("latin-1"),
    )


def _server_error(error: BaseException, path: str) -> Reply:
    log.error("dashboard %s failed: %r", path, error, exc_info=error)
    return text_reply(500, f"Server error: {error}\n")


def _write_head(request: Any, reply: Reply) -> bytes:
    request.setResponseCode(reply.code)
    request.setHeader(b"Content-Type", reply.content_type.encode("ascii"))
    for name, value in SECURITY_HEADERS + reply.headers:
        request.setHeader(name.encode("ascii"), value.encode("ascii"))
    return reply.body


def _write_later(reply: Reply, request: Any, finished: Any) -> None:
    if finished.called:
        return  # the connection was lost before the answer was ready
    body = _write_head(request, reply)
    if request.method != b"HEAD":
        request.write(body)
    request.finish()


def start_dashboard(
    broker: Any, reactor: Any, reload: Callable[[], Any] | None = None
) -> Dashboard | None:
    """Serve ``broker``'s dashboard on ``dashboardHttpPort`` (None when it is ``-1``).

    Args:
        broker: the ``Broker``, not necessarily started yet.
        reactor: its reactor.
        reload: see ``Dashboard``.

    Raises:
        DashboardError: the port cannot be taken.
    """
    config = broker.config
    if config.dashboard_http_port == PORT_OFF:
        log.info("dashboard off (%s=%d)", PORT_KEY, PORT_OFF)
        return None
    ring = LogRing()
    dashboard = Dashboard(broker, reactor, reload, ring)
    interface = config.host_name or ""
    port = dashboard.listen(config.dashboard_http_port, interface)
    logging.getLogger().addHandler(ring)
    log.info(
        "dashboard serving http://%s:%d/ (%s=%d)",
        interface or broker.host,
        port,
        PORT_KEY,
        config.dashboard_http_port,
    )
    token_file = config.dashboard_admin_token_file
    if token_file is None:
        log.info("dashboard actions off: no [system] %s (reads stay open)", TOKEN_KEY)
    else:
        try:
            read_token(token_file)
            log.info("dashboard actions need the operator token in %s (%s)", token_file, TOKEN_KEY)
        except TokenFileError as error:
            log.error("dashboard actions are off until this is fixed: %s", error)
    return dashboard
