"""What a peer can put into the broker's log: escaped, shortened, and rate-limited per peer.

What lives here:

* ``escape_controls``: control characters (C0, DEL and C1, newline included) written as
  ``\\xNN``, so bytes from a peer (a transaction key, a malformed header) cannot forge log
  lines or drive a terminal;
* ``EscapingFormatter``: a ``logging.Formatter`` that escapes every record's message (not
  the traceback it appends), installed by ``meta.server.main`` on the broker's log;
* ``PeerWarnings``: at most ``burst`` warnings per peer host in each ``window_s``; the rest
  are counted and the count is reported with the peer's next warning. Each argument is cut
  to ``text_chars_max`` characters, so a 4 KiB header makes one short line, not 4 KiB. At
  most ``peers_max`` hosts are remembered (the oldest is forgotten first).
  ``PROTOCOL_WARNINGS`` is the broker's instance for warnings caused by what a peer sent.

Thread affinity: ``escape_controls`` and the formatter are thread-safe; ``PeerWarnings``
belongs to the reactor thread.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

__all__ = ["PROTOCOL_WARNINGS", "EscapingFormatter", "PeerWarnings", "escape_controls"]

_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")


def escape_controls(text: str) -> str:
    """``text`` with every control character written as ``\\xNN``."""
    return _CONTROLS.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


class EscapingFormatter(logging.Formatter):
    """A ``logging.Formatter`` whose messages never carry a raw control character."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        record.message = escape_controls(record.message)
        return super().formatMessage(record)


def shorten(value: object, chars_max: int) -> object:
    """A string cut to ``chars_max`` characters (saying how many were left out); any other
    value as it is."""
    text = value if isinstance(value, str) else None
    if text is None and isinstance(value, BaseException):
        text = str(value)
    if text is None or len(text) <= chars_max:
        return value
    return f"{text[:chars_max]}... ({len(text) - chars_max} more characters)"


class PeerWarnings:
    """Rate-limits the warnings each peer host can cause.

    Args:
        clock: seconds, monotonic (injected by tests).
        burst: warnings logged per host in one window.
        window_s: length of a window.
        peers_max: hosts remembered at once.
        text_chars_max: longest string argument logged.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        burst: int = 5,
        window_s: float = 60.0,
        peers_max: int = 4096,
        text_chars_max: int = 300,
    ) -> None:
        self._clock = clock
        self.burst = burst
        self.window_s = window_s
        self.peers_max = peers_max
        self.text_chars_max = text_chars_max
        # host -> [window start, warnings logged in it, warnings suppressed in it]
        self._peers: dict[str, list] = {}

    def warn(self, logger: logging.Logger, host: str, message: str, *args: object) -> bool:
        """Log ``message % args`` at WARNING unless ``host`` used up its window.

        Returns:
            True when logged, False when suppressed (and counted).
        """
        now = self._clock()
        state = self._peers.get(host)
        note = ""
        if state is None or now - state[0] >= self.window_s:
            if state is not None and state[2]:
                note = f" ({state[2]} more warnings from {host} were suppressed before)"
            state = [now, 0, 0]
            self._peers.pop(host, None)
            self._peers[host] = state
            if len(self._peers) > self.peers_max:
                del self._peers[next(iter(self._peers))]
        if state[1] >= self.burst:
            state[2] += 1
            return False
        state[1] += 1
        if state[1] == self.burst:
            note += f"; further warnings from {host} are suppressed for {self.window_s:g} s"
        shortened = tuple(shorten(arg, self.text_chars_max) for arg in args)
        logger.warning(message + "%s", *shortened, note)
        return True


PROTOCOL_WARNINGS = PeerWarnings()
