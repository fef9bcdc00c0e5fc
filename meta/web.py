"""Listening with twisted.web: shared by the dashboard and the HTTP protocol.

``listen_site`` listens on ``interface:port`` (all interfaces when ``interface`` is empty, as
the broker's TCP port does without ``hostName``, docs/compatibility.md) and turns a port that cannot
be taken into a ``MetaError`` subclass whose text names the address and what to change.

Reactor thread only.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.error import CannotListenError

from meta.errors import MetaError


def listen_site(
    reactor: Any,
    site: Any,
    port: int,
    interface: str,
    what: str,
    advice: str,
    error: type[MetaError] = MetaError,
) -> Any:
    """Listen on ``interface:port`` with ``site``; return the listening port.

    Args:
        reactor: the broker's reactor.
        site: a ``twisted.web.server.Site``, or a factory wrapping one.
        port: the TCP port, 0 for any free one.
        interface: the address to listen on, empty for all interfaces.
        what: names the listener in the error text (``the dashboard``).
        advice: the end of the error text, saying what to change.
        error: the class of the error raised.

    Raises:
        MetaError: (``error``) the port cannot be taken.
    """
    try:
        return reactor.listenTCP(port, site, interface=interface)
    except CannotListenError as failure:
        where = f"{interface}:{port}" if interface else f"port {port} (all interfaces)"
        raise error(f"{what} cannot listen on {where}: {failure.socketError}; {advice}") from None
