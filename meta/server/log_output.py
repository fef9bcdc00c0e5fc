"""Where and how the broker writes its log: stderr or a file, text or JSON lines.

``meta-server`` options (``meta.server.main`` parses them into a ``LogOutput``):

* ``--log-file PATH``: append to ``PATH`` instead of stderr;
* ``--log-max-bytes N``: rotate ``PATH`` by size (``logging.handlers.RotatingFileHandler``):
  past ``N`` bytes it becomes ``PATH.1`` (``PATH.1`` becomes ``PATH.2`` and so on) and a new
  ``PATH`` starts; ``--log-backups K`` (default 5) rotated files are kept;
* ``--log-reopen``: for an external ``logrotate`` (``logging.handlers.WatchedFileHandler``):
  the file is reopened when it was moved or removed, so logrotate needs no ``copytruncate``;
* ``--log-format json``: one JSON object per line, with ``time`` (UTC, ISO 8601, ms),
  ``level``, ``logger``, ``message`` and, when there is one, ``exception`` (the traceback).

Both formats write every message with its control characters as ``\\xNN``
(``meta.log_limits.escape_controls``): bytes from a peer cannot forge a line. The
JSON format escapes the traceback too, so each record stays one line.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import sys
from dataclasses import dataclass
from datetime import UTC, datetime

from meta.log_limits import EscapingFormatter, escape_controls

__all__ = ["TEXT_FORMAT", "JsonFormatter", "LogOutput"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line, without a raw control character."""

    def format(self, record: logging.LogRecord) -> str:
        moment = datetime.fromtimestamp(record.created, UTC)
        document = {
            "time": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": escape_controls(record.getMessage()),
        }
        if record.exc_info:
            document["exception"] = escape_controls(self.formatException(record.exc_info))
        elif record.exc_text:
            document["exception"] = escape_controls(record.exc_text)
        if record.stack_info:
            document["stack"] = escape_controls(self.formatStack(record.stack_info))
        return json.dumps(document, ensure_ascii=False)


@dataclass(frozen=True)
class LogOutput:
    """The broker log's destination and format.

    Attributes:
        path: the log file; None: stderr.
        max_bytes: rotate ``path`` past this size; 0: never.
        backups: rotated files kept when rotating by size.
        reopen: reopen ``path`` when logrotate moved it (exclusive with ``max_bytes``).
        json: JSON lines instead of text.
    """

    path: str | None = None
    max_bytes: int = 0
    backups: int = 5
    reopen: bool = False
    json: bool = False

    def problem(self) -> str | None:
        """Why this combination cannot work, or None."""
        if self.path is None and (self.max_bytes or self.reopen):
            return "--log-max-bytes and --log-reopen need --log-file"
        if self.max_bytes and self.reopen:
            return "--log-max-bytes and --log-reopen exclude each other (rotate here or outside)"
        if self.max_bytes < 0 or self.backups < 1:
            return "--log-max-bytes must be >= 0 and --log-backups >= 1"
        return None

    def handler(self) -> logging.Handler:
        """A handler writing to the destination, with its formatter set."""
        handler: logging.Handler
        if self.path is None:
            handler = logging.StreamHandler(sys.stderr)
        elif self.max_bytes:
            handler = logging.handlers.RotatingFileHandler(
                self.path, maxBytes=self.max_bytes, backupCount=self.backups, encoding="utf-8"
            )
        elif self.reopen:
            handler = logging.handlers.WatchedFileHandler(self.path, encoding="utf-8")
        else:
            handler = logging.FileHandler(self.path, encoding="utf-8")
        handler.setFormatter(JsonFormatter() if self.json else EscapingFormatter(TEXT_FORMAT))
        return handler
