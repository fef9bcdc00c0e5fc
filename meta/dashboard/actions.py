"""The dashboard's two actions: reload the config, skip a group's backlog.

``POST /reload-config`` and ``POST /topics/<t>/groups/<g>/partitions/<p>/skip`` (also under
``/api/v1``) answer the Java dashboard's texts. Each one must pass every gate, in order:

1. the same-origin gates (``is_trusted``): an operator on the broker's host, by the rule
   ``meta.operator_access.is_operator_peer`` shares with the heuristic transaction commands
   (``127.0.0.1``, ``::1``, or the non-loopback address the connection was accepted on); the
   header ``X-MetaQ-Admin: 1``, which a cross-site form cannot set; and a ``Host`` header that
   is an address or ``localhost`` (against DNS rebinding). Else 403.
2. an operator token is configured: ``[system] dashboardAdminTokenFile`` names a file that
   holds it. Unset: the actions are off, and 403 says how to turn them on; set but the file
   is unusable (missing, empty, too short, readable by other users): 503 naming the file and
   what is wrong.
3. the request carries that token, ``Authorization: Bearer <token>``, compared in constant
   time (``hmac.compare_digest``). Else 401.

The token file is read at each action (it is a few bytes), so a new token takes effect at
once; the key itself, as every ``[system]`` key, at the next restart. ``server.ini`` holds
only the file's path, so ``stats config`` and the ``/config`` page never show the token.

Reactor thread only.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import re
import stat
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from twisted.internet import defer

from meta.dashboard.routes import (
    Reply,
    Request,
    is_group_name,
    not_a_group,
    not_found,
    text_reply,
)
from meta.log_limits import PeerWarnings
from meta.operator_access import is_operator_peer

log = logging.getLogger("meta.dashboard")

RELOAD_DONE_TEXT = "Reload config successfully."
ADMIN_HEADER = "X-MetaQ-Admin"
TOKEN_KEY = "dashboardAdminTokenFile"
TOKEN_CHARS_MIN = 16
TOKEN_FILE_BYTES_MAX = 4096
FORBIDDEN_TEXT = (
    f"Forbidden: actions are accepted only from the broker's host (127.0.0.1, ::1 or the "
    f"address the dashboard was reached at) with the header {ADMIN_HEADER}: 1\n"
)
ACTIONS_OFF = (
    "The dashboard's actions are off because no operator token is configured. "
    "To turn them on, write a token of at least "
    f"{TOKEN_CHARS_MIN} characters to a file that only the broker's user can read "
    "(python3 -c 'import secrets; print(secrets.token_hex(32))' > /etc/metaq/dashboard.token; "
    "chmod 600 /etc/metaq/dashboard.token), set "
    f"[system] {TOKEN_KEY}=/etc/metaq/dashboard.token in server.ini and restart the broker; "
    "then enter the token in the dashboard's Operator token field."
)
ACTIONS_OFF_TEXT = f"Forbidden: {ACTIONS_OFF}\n"
UNAUTHORIZED_TEXT = (
    "Unauthorized: this action needs the operator token (the one in the file that "
    f"[system] {TOKEN_KEY} names), sent as Authorization: Bearer <token>; the dashboard "
    "sends the token entered in its Operator token field.\n"
)
SKIP_PATH = re.compile(r"(?:/api/v1)?/topics/([^/]+)/groups/([^/]+)/partitions/(\d+)/skip")
RELOAD_PATHS = ("/reload-config", "/api/v1/reload-config")
BEARER = re.compile(r"Bearer +(\S+) *", re.IGNORECASE)
REFUSALS = PeerWarnings()
"""Refused actions are logged, a few per client host a minute (``PeerWarnings``)."""


class TokenFileError(Exception):
    """The operator token file is unusable; the text names the file and what is wrong."""


def is_trusted(request: Request) -> bool:
    """Whether ``request`` passes the same-origin gates: an operator on the broker's host
    (``is_operator_peer``) with the admin header, sent to an address literal or
    ``localhost`` (a page of another site whose name resolves to 127.0.0.1 would send its
    own name as ``Host``)."""
    if not request.admin_header or not _addressed_directly(request.host_header):
        return False
    return is_operator_peer(request.client_host, request.server_host)


def read_token(path: str) -> bytes:
    """The operator token in ``path``: its first line, without surrounding blanks.

    Raises:
        TokenFileError: the file cannot be read, is a group or world readable or writable,
            is larger than ``TOKEN_FILE_BYTES_MAX``, or holds a token shorter than
            ``TOKEN_CHARS_MIN`` characters or with characters other than printable ASCII.
    """
    where = f"the operator token file {path} ([system] {TOKEN_KEY})"
    try:
        with open(path, "rb") as file:
            mode = os.fstat(file.fileno()).st_mode
            data = file.read(TOKEN_FILE_BYTES_MAX + 1)
    except OSError as error:
        raise TokenFileError(f"cannot read {where}: {error.strerror or error}") from error
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TokenFileError(
            f"{where} can be read or written by other users (mode {stat.filemode(mode)}): "
            f"run chmod 600 {path}"
        )
    if len(data) > TOKEN_FILE_BYTES_MAX:
        raise TokenFileError(f"{where} is larger than {TOKEN_FILE_BYTES_MAX} bytes")
    lines = data.strip().splitlines()
    token = lines[0].strip() if lines else b""
    if len(token) < TOKEN_CHARS_MIN:
        raise TokenFileError(f"{where} holds no token of at least {TOKEN_CHARS_MIN} characters")
    if not all(0x21 <= byte <= 0x7E for byte in token):
        raise TokenFileError(f"{where}: the token must be printable ASCII without blanks")
    return token


def presented_token(authorization: str) -> bytes | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    match = BEARER.fullmatch(authorization)
    return match[1].encode("latin-1") if match else None


class Actions:
    """Runs the actions for one dashboard.

    Args:
        views: the ``ZooKeeperViews`` (the skip writes the group's offset node).
        reload: starts a config reload; returns a Deferred of its outcome, or None when the
            process offers no reload (then the action answers 503).
        token_file: the path ``[system] dashboardAdminTokenFile`` names, or None: then
            every action is refused with ``ACTIONS_OFF_TEXT``.
    """

    def __init__(
        self, views: Any, reload: Callable[[], Any] | None, token_file: str | None = None
    ) -> None:
        self._views = views
        self._reload = reload
        self.token_file = token_file
        self.how_to_enable = ACTIONS_OFF  # the pages' note while no token is configured

    def route(self, request: Request) -> Any:
        """The reply (or a Deferred of one) to a POST."""
        path = request.path
        skip = SKIP_PATH.fullmatch(path)
        if path not in RELOAD_PATHS and skip is None:
            return not_found(path)
        refused = self.refusal(request)
        if refused is not None:
            # A few lines per client host a minute: a page posting in a loop cannot fill it.
            REFUSALS.warn(
                log,
                request.client_host,
                "dashboard action %s from %s refused: %d %s",
                path,
                request.client_host,
                refused.code,
                refused.body.decode(errors="replace").split(":")[0],
            )
            return refused
        if skip is not None:
            topic, group, partition = unquote(skip[1]), unquote(skip[2]), int(skip[3])
            if not is_group_name(group):
                return text_reply(404, not_a_group(group) + "\n")
            log.info("dashboard action: skip %s %s %d", topic, group, partition)
            answer = defer.maybeDeferred(self._views.skip, topic, group, partition)
        elif self._reload is None:
            return text_reply(503, "this process offers no config reload\n")
        else:
            log.info("dashboard action: reload the config")
            answer = defer.maybeDeferred(self._reload)
            answer.addCallback(lambda _outcome: RELOAD_DONE_TEXT)
        answer.addErrback(_failed, path)
        answer.addCallback(lambda text: Reply(200, "text/plain; charset=utf-8", text.encode()))
        return answer

    def refusal(self, request: Request) -> Reply | None:
        """The 403, 503 or 401 that refuses ``request``, or None when it passes every gate
        (see the module docstring)."""
        if not is_trusted(request):
            return text_reply(403, FORBIDDEN_TEXT)
        if self.token_file is None:
            return text_reply(403, ACTIONS_OFF_TEXT)
        try:
            expected = read_token(self.token_file)
        except TokenFileError as error:
            return text_reply(503, f"Unavailable: the dashboard's actions are off: {error}\n")
        presented = presented_token(request.authorization)
        if presented is None or not hmac.compare_digest(presented, expected):
            challenge = (("WWW-Authenticate", 'Bearer realm="metaq-dashboard"'),)
            return Reply(401, "text/plain; charset=utf-8", UNAUTHORIZED_TEXT.encode(), challenge)
        return None


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
