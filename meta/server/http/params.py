"""The URL grammar of the HTTP protocol: path and query -> route and command (docs/http.md).

A path is ``/get``, ``/put`` or ``/offset``, optionally followed by ``/<anything>`` (the
``/<brokerId>`` a load balancer routes on; ignored). Parameters come from the query string
only, never from a body (H4). Each value is parsed as Java's ``Integer.parseInt`` /
``Long.parseLong`` would, and a missing or bad one raises ``BadParameter``, whose text names
the parameter (H3). The first value of a repeated parameter counts, as Jetty's
``getParameter`` does.

Pure: no I/O, no Twisted. Thread-safe.
"""

from __future__ import annotations

import re
from typing import NamedTuple
from urllib.parse import parse_qsl

from meta.config import validate_topic_name
from meta.errors import MetaError
from meta.protocol.commands import LONG_MAX, Get, Offset

ROUTES = frozenset({"get", "put", "offset"})
METHODS = {"get": (b"GET", b"HEAD"), "offset": (b"GET", b"HEAD"), "put": (b"POST", b"PUT")}
GROUP_DEFAULT = "-"
"""The consumer group of a get or offset that names none (H3; stats use it)."""

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN = -(2**63)
_INTEGER = re.compile(r"[+-]?[0-9]+")


class BadParameter(MetaError):
    """A request parameter is missing or malformed; the text names it (answered with 400)."""


class PutParameters(NamedTuple):
    """The query of a put: its body is read separately, ``length`` bytes exactly."""

    topic: str
    partition: int
    flag: int
    length: int
    checksum: int | None


def route(path: bytes) -> str | None:
    """``get``, ``put`` or ``offset`` for a path of the protocol; None for any other path."""
    segments = path.split(b"/", 2)
    if len(segments) < 2 or segments[0] != b"":
        return None
    name = segments[1].decode("ascii", "replace")
    return name if name in ROUTES else None


def parse_query(uri: bytes) -> dict[str, str]:
    """The query parameters of a request URI, decoded as UTF-8; the first value counts.

    Raises:
        BadParameter: the query is not UTF-8.
    """
    _, _, query = uri.partition(b"?")
    try:
        text = query.decode("utf-8")
        if "%" in text or "+" in text:
            pairs = parse_qsl(text, keep_blank_values=True, errors="strict")
        else:
            # Nothing to unquote (the usual query): split as ``parse_qsl`` does, ten times
            # faster. A field without "=" has an empty value, and empty fields are skipped.
            pairs = [(*field.split("=", 1), "")[:2] for field in text.split("&") if field]
    except UnicodeDecodeError:
        raise BadParameter("the query string is not UTF-8") from None
    params: dict[str, str] = {}
    for key, value in pairs:
        params.setdefault(key, value)
    return params


def _integer(params: dict[str, str], name: str, low: int, high: int, default=None) -> int:
    value = params.get(name)
    if value is None or value == "":
        if default is not None:
            return default
        raise BadParameter(f"missing parameter {name}")
    if _INTEGER.fullmatch(value) is None:
        raise BadParameter(f"parameter {name} is not a number: {value!r}")
    number = int(value)
    if not low <= number <= high:
        raise BadParameter(f"parameter {name} is out of range [{low}, {high}]: {value}")
    return number


def _topic(params: dict[str, str]) -> str:
    topic = params.get("topic")
    if not topic:
        raise BadParameter("missing parameter topic")
    try:
        validate_topic_name(topic)
    except MetaError as error:
        raise BadParameter(f"parameter topic: {error}") from None
    return topic


def _group(params: dict[str, str]) -> str:
    group = params.get("group") or GROUP_DEFAULT
    if any(character.isspace() for character in group):
        raise BadParameter(f"parameter group must not contain white space: {group!r}")
    return group


def get_command(params: dict[str, str]) -> Get:
    """The ``get`` of a ``/get`` query (``maxwait`` is the get's long polling, in ms).

    Raises:
        BadParameter: a parameter is missing or malformed.
    """
    max_wait_ms = _integer(params, "maxwait", 0, INT_MAX, 0)
    return Get(
        _topic(params),
        _group(params),
        _integer(params, "partition", 0, INT_MAX),
        _integer(params, "offset", LONG_MIN, LONG_MAX),
        _integer(params, "maxsize", 1, INT_MAX),
        0,
        max_wait_ms or None,
    )


def offset_command(params: dict[str, str]) -> Offset:
    """The ``offset`` of an ``/offset`` query.

    Raises:
        BadParameter: a parameter is missing or malformed.
    """
    return Offset(
        _topic(params),
        _group(params),
        _integer(params, "partition", 0, INT_MAX),
        _integer(params, "offset", LONG_MIN, LONG_MAX),
        0,
    )


def put_parameters(params: dict[str, str]) -> PutParameters:
    """The parameters of a ``/put`` query (``partition`` -1 means any partition).

    Raises:
        BadParameter: a parameter is missing or malformed.
    """
    checksum = _integer(params, "checksum", INT_MIN, INT_MAX, -1)
    return PutParameters(
        _topic(params),
        _integer(params, "partition", -1, INT_MAX),
        _integer(params, "flag", INT_MIN, INT_MAX),
        _integer(params, "length", 0, INT_MAX),
        None if checksum == -1 else checksum,
    )
