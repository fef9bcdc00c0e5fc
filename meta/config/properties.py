"""Java ``.properties`` text (``async_slave.properties``) -> ``(key, value, line_number)``.

The subset of ``java.util.Properties.load`` that slave files use, with its escapes and line
continuations. Pure; reads no file (``meta.config.loading`` does). Thread-safe.
"""

from __future__ import annotations

import re


def parse_properties(text: str) -> list[tuple[str, str, int]]:
    """Read Java ``.properties`` text into ``(key, value, line_number)`` in file order.

    Supported: ``key=value``, ``key: value`` and ``key value``; ``#`` and ``!`` comment lines;
    blank lines; a line ending in an odd number of backslashes continues on the next line;
    the escapes ``\\t \\n \\r \\f \\uXXXX`` and ``\\<char>``.
    """
    entries = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line_number = index + 1
        logical = lines[index].lstrip()
        index += 1
        if not logical or logical[0] in "#!":
            continue
        while _continues(logical) and index < len(lines):
            logical = logical[:-1] + lines[index].lstrip()
            index += 1
        if _continues(logical):
            logical = logical[:-1]
        key, value = _split_property(logical)
        entries.append((_unescape(key), _unescape(value), line_number))
    return entries


def _continues(line: str) -> bool:
    """Return whether a properties line ends in an odd number of backslashes."""
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split_property(line: str) -> tuple[str, str]:
    """Split a logical properties line at the first unescaped ``=``, ``:`` or white space."""
    position = 0
    while position < len(line) and line[position] not in "=: \t\f":
        position += 2 if line[position] == "\\" else 1
    key = line[:position]
    rest = line[position:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_ESCAPE_RE = re.compile(r"\\(u[0-9A-Fa-f]{4}|.)", re.DOTALL)


def _unescape(text: str) -> str:
    """Undo properties escapes: ``\\uXXXX``, ``\\t`` and friends, ``\\<char>`` -> char."""

    def replace(match: re.Match[str]) -> str:
        escaped = match.group(1)
        if len(escaped) == 5:
            return chr(int(escaped[1:], 16))
        return _ESCAPES.get(escaped, escaped)

    return _ESCAPE_RE.sub(replace, text)
