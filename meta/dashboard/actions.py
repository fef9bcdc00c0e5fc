"""The dashboard's two actions: reload the config, skip a group's backlog.

``POST /reload-config`` and ``POST /topics/<t>/groups/<g>/partitions/<p>/skip`` (also under
``/api/v1``) answer the Java dashboard's texts. They are accepted only from an operator
on the broker's host, by the rule ``meta.operator_access.is_operator_peer`` shares with the
heuristic transaction commands (``127.0.0.1``, ``::1``, or the non-loopback address the
connection was accepted on), and only with the header ``X-MetaQ-Admin: 1``, which a
cross-site form cannot set, and with a ``Host`` header that is an address or ``localhost``
(against DNS rebinding); anything else gets 403.

Reactor thread only.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from twisted.internet import defer

from meta.dashboard.routes import Reply, Request, not_found, text_reply
from meta.operator_access import is_operator_peer

log = logging.getLogger("meta.dashboard")

RELOAD_DONE_TEXT = "Reload config successfully."
ADMIN_HEADER = "X-MetaQ-Admin"
FORBIDDEN_TEXT = (
    f"Forbidden: actions are accepted only from the broker's host (127.0.0.1, ::1 or the "
    f"address the dashboard was reached at) with the header {ADMIN_HEADER}: 1\n"
)
SKIP_PATH = re.compile(r"(?:/api/v1)?/topics/([^/]+)/groups/([^/]+)/partitions/(\d+)/skip")
RELOAD_PATHS = ("/reload-config", "/api/v1/reload-config")


def is_trusted(request: Request) -> bool:
    """Whether ``request`` may run an action: an operator on the broker's host
    (``is_operator_peer``) with the admin header, sent to an address literal or
    ``localhost`` (a page of another site whose name resolves to 127.0.0.1 would send its
    own name as ``Host``)."""
    if not request.admin_header or not _addressed_directly(request.host_header):
        return False
    return is_operator_peer(request.client_host, request.server_host)


class Actions:
    """Runs the actions for one dashboard.

    Args:
        views: the ``ZooKeeperViews`` (the skip writes the group's offset node).
        reload: starts a config reload; returns a Deferred of its outcome, or None when the
            process offers no reload (then the action answers 503).
    """

    def __init__(self, views: Any, reload: Callable[[], Any] | None) -> None:
        self._views = views
        self._reload = reload

    def route(self, request: Request) -> Any:
        """The reply (or a Deferred of one) to a POST."""
        path = request.path
        skip = SKIP_PATH.fullmatch(path)
        if path not in RELOAD_PATHS and skip is None:
            return not_found(path)
        if not is_trusted(request):
            return text_reply(403, FORBIDDEN_TEXT)
        if skip is not None:
            topic, group, partition = unquote(skip[1]), unquote(skip[2]), int(skip[3])
            answer = defer.maybeDeferred(self._views.skip, topic, group, partition)
        elif self._reload is None:
            return text_reply(503, "this process offers no config reload\n")
        else:
            answer = defer.maybeDeferred(self._reload)
            answer.addCallback(lambda _outcome: RELOAD_DONE_TEXT)
        answer.addErrback(_failed, path)
        answer.addCallback(lambda text: Reply(200, "text/plain; charset=utf-8", text.encode()))
        return answer


def _failed(failure: Any, path: str) -> str:
    """The action's answer is the error's text (as in Java); the log keeps it too."""
    log.error("dashboard action %s failed: %s", path, failure.getErrorMessage())
    return failure.getErrorMessage()


def _addressed_directly(host_header: str) -> bool:
    """``Host`` names an IP address or ``localhost`` (with or without a port)."""
    host = host_header.strip().lower()
    if host.startswith("["):
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    if host == "localhost":
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
