"""The dashboard's web server: twisted.web on the broker's reactor, on ``dashboardHttpPort``.

``start_dashboard`` listens (or not: ``-1`` turns the dashboard off; ``0`` picks a free port,
which is logged) on ``hostName`` when it is set, else on every interface, as the broker's TCP
port does (DECISIONS 19). A port that cannot be taken is a startup error naming the port and
the key. ``DashboardResource`` routes a request's path to a function of the broker's state
that returns a ``Reply``; it answers at once (no route blocks the reactor or reads ZooKeeper).

Routes: ``/healthz``, ``/readyz``, ``/metrics`` and the JSON API ``/api/v1/{broker,topics,
topics/<t>,partitions,replication,transactions}``. Unknown paths answer 404 with the Java
dashboard's text; a route that raises answers 500 ``Server error: <message>``.

Reactor thread only.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from twisted.internet.error import CannotListenError
from twisted.web import resource, server

from meta.dashboard import facts
from meta.dashboard.health import readiness
from meta.dashboard.metrics import CONTENT_TYPE, BrokerMetrics
from meta.errors import MetaError

log = logging.getLogger("meta.dashboard")

PORT_KEY = "dashboardHttpPort"
PORT_OFF = -1
NOT_FOUND_TEXT = "I am sorry, i can't find the page."
"""The Java dashboard's 404 text (spec §3.2)."""

TEXT = "text/plain; charset=utf-8"
JSON = "application/json"


class DashboardError(MetaError):
    """The dashboard cannot start (its port is taken or not allowed)."""


@dataclass(frozen=True)
class Reply:
    """One HTTP answer: status code, ``Content-Type`` and body."""

    code: int
    content_type: str
    body: bytes


def text_reply(code: int, text: str) -> Reply:
    return Reply(code, TEXT, text.encode("utf-8"))


def json_reply(value: Any, code: int = 200) -> Reply:
    body = json.dumps(value, indent=1, sort_keys=True).encode("utf-8") + b"\n"
    return Reply(code, JSON, body)


class Dashboard:
    """The dashboard of one broker: its routes, metrics and listening port.

    Args:
        broker: the ``Broker`` (its public state is read at each request).
        reactor: the broker's reactor.
    """

    def __init__(self, broker: Any, reactor: Any) -> None:
        self.broker = broker
        self._reactor = reactor
        self.started_at_s = reactor.seconds()
        self.metrics = BrokerMetrics(broker, reactor.seconds, self.started_at_s)
        broker.store.flusher.on_batch_seconds = self.metrics.fsync.observe
        self.site = server.Site(DashboardResource(self))
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
        try:
            self._port = self._reactor.listenTCP(port, self.site, interface=interface)
        except CannotListenError as error:
            where = f"{interface}:{port}" if interface else f"port {port} (all interfaces)"
            raise DashboardError(
                f"the dashboard cannot listen on {where}: {error.socketError}; "
                f"set [system] {PORT_KEY} to a free port, 0 for any free port, or -1 to turn "
                "the dashboard off"
            ) from error
        return self.port

    def stop(self) -> Any:
        """Stop listening; a Deferred (or None when not listening)."""
        port, self._port = self._port, None
        return port.stopListening() if port is not None else None

    def route(self, method: bytes, path: str) -> Reply:
        """The reply to ``method path`` (path without the query)."""
        if method not in (b"GET", b"HEAD"):
            return text_reply(405, f"{method.decode('latin-1')} is not allowed on {path}\n")
        handler = ROUTES.get(path)
        if handler is not None:
            return handler(self)
        for prefix, prefix_handler in PREFIX_ROUTES:
            if path.startswith(prefix) and len(path) > len(prefix):
                return prefix_handler(self, unquote(path[len(prefix) :]))
        return text_reply(404, NOT_FOUND_TEXT)

    def now_s(self) -> float:
        return self._reactor.seconds()


class DashboardResource(resource.Resource):
    """The one twisted.web resource: every path goes to ``Dashboard.route``."""

    isLeaf = True

    def __init__(self, dashboard: Dashboard) -> None:
        super().__init__()
        self._dashboard = dashboard

    def render(self, request: Any) -> bytes:
        path = request.path.decode("utf-8", "replace")
        try:
            reply = self._dashboard.route(request.method, path)
        except Exception as error:  # a page must not take the broker down: answer 500
            log.exception("dashboard %s failed", path)
            reply = text_reply(500, f"Server error: {error}\n")
        request.setResponseCode(reply.code)
        request.setHeader(b"Content-Type", reply.content_type.encode("ascii"))
        request.setHeader(b"Cache-Control", b"no-store")
        request.setHeader(b"X-Content-Type-Options", b"nosniff")
        return reply.body


def _healthz(dashboard: Dashboard) -> Reply:
    return text_reply(200, "ok\n")


def _readyz(dashboard: Dashboard) -> Reply:
    code, body = readiness(dashboard.broker)
    return Reply(code, TEXT, body)


def _metrics(dashboard: Dashboard) -> Reply:
    return Reply(200, CONTENT_TYPE, dashboard.metrics.render())


def _api_broker(dashboard: Dashboard) -> Reply:
    return json_reply(
        facts.broker_facts(dashboard.broker, dashboard.started_at_s, dashboard.now_s())
    )


def _api_topic(dashboard: Dashboard, topic: str) -> Reply:
    try:
        return json_reply(facts.topic_facts(dashboard.broker, topic))
    except facts.UnknownTopicError as error:
        return json_reply({"error": str(error)}, 404)


ROUTES: dict[str, Callable[[Dashboard], Reply]] = {
    "/healthz": _healthz,
    "/readyz": _readyz,
    "/metrics": _metrics,
    "/api/v1/broker": _api_broker,
    "/api/v1/topics": lambda dashboard: json_reply(facts.topics_facts(dashboard.broker)),
    "/api/v1/partitions": lambda dashboard: json_reply(facts.partitions_facts(dashboard.broker)),
    "/api/v1/replication": lambda dashboard: json_reply(facts.replication_facts(dashboard.broker)),
    "/api/v1/transactions": lambda dashboard: json_reply(
        facts.transactions_facts(dashboard.broker)
    ),
}

PREFIX_ROUTES: tuple[tuple[str, Callable[[Dashboard, str], Reply]], ...] = (
    ("/api/v1/topics/", _api_topic),
)


def start_dashboard(broker: Any, reactor: Any) -> Dashboard | None:
    """Serve ``broker``'s dashboard on ``dashboardHttpPort`` (None when it is ``-1``).

    Raises:
        DashboardError: the port cannot be taken.
    """
    config = broker.config
    if config.dashboard_http_port == PORT_OFF:
        log.info("dashboard off (%s=%d)", PORT_KEY, PORT_OFF)
        return None
    dashboard = Dashboard(broker, reactor)
    interface = config.host_name or ""
    port = dashboard.listen(config.dashboard_http_port, interface)
    log.info(
        "dashboard serving http://%s:%d/ (%s=%d)",
        interface or broker.host,
        port,
        PORT_KEY,
        config.dashboard_http_port,
    )
    return dashboard
