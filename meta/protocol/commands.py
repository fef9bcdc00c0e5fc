"""Frozen command and frame objects of the Metamorphosis text protocol.

One class per request (``Put``, ``Get``, ``Offset``, ``Version``, ``Stats``, ``Quit``,
``Transaction``, ``Sync``), per response frame (``Result``, ``Data``), and one decoder event
(``BodyTooLarge``) for a body over the configured limit, which the decoder skips without
buffering (docs/compatibility.md). Field values are exactly what the wire carries; no I/O here.
Immutable (``Put`` by convention, see its docstring), so thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

OPAQUE_DEFAULT = 2147483647
"""Opaque assumed when ``version`` or ``stats`` arrive without one (Java's Integer.MAX_VALUE)."""

LONG_MAX = 9223372036854775807
"""Java's ``Long.MAX_VALUE``, the one definition in ``meta``: a get at this offset asks for the
partition's end."""

TRANSACTION_TYPES = frozenset(
    {
        "BEGIN",
        "END",
        "PREPARE",
        "COMMIT_ONE_PHASE",
        "COMMIT_TWO_PHASE",
        "ROLLBACK",
        "RECOVER",
        "FORGET",
        # metaq-py extensions for the operator tool (Java's JMX heuristic operations); only
        # our brokers accept them, and only from the broker's own host.
        "HEURISTIC_COMMIT",
        "HEURISTIC_ROLLBACK",
    }
)


@dataclass(slots=True)
class Put:
    """``put <topic> <partition> <len> <flag> [<checksum>] [<txKey>] <opaque>`` + body.

    ``checksum`` is None for the forms without one (6 tokens, or the pre-1.4.4 transactional
    7-token form); ``-1`` on the wire also means "not supplied". ``tx_key`` is the raw key text.

    Treat it as immutable. It is not declared frozen: a frozen dataclass costs three times
    as much to build (1.9 against 0.6 microseconds, measured), and a put is built for every
    message on the hottest path (``Transaction`` likewise, twice per transaction).
    """

    topic: str
    partition: int
    data: bytes
    flag: int
    opaque: int
    checksum: int | None = None
    tx_key: str | None = None


@dataclass(frozen=True, slots=True)
class Get:
    """``get <topic> <group> <partition> <offset> <maxSize> <opaque> [<maxWaitMs>]``.

    ``max_wait_ms`` is the long-polling extension (compatibility.md; None: answer at once).
    """

    topic: str
    group: str
    partition: int
    offset: int
    max_size: int
    opaque: int
    max_wait_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Offset:
    """``offset <topic> <group> <partition> <offset> <opaque>``."""

    topic: str
    group: str
    partition: int
    offset: int
    opaque: int


@dataclass(frozen=True, slots=True)
class Version:
    """``version [<opaque>]``: the Java client's heartbeat."""

    opaque: int = OPAQUE_DEFAULT


@dataclass(frozen=True, slots=True)
class Stats:
    """``stats [<item> [<opaque>]]``; an empty item asks for the general stats."""

    item: str = ""
    opaque: int = OPAQUE_DEFAULT


@dataclass(frozen=True, slots=True)
class Quit:
    """``quit``: the broker closes the connection without a reply."""


@dataclass(slots=True)
class Transaction:
    """``transaction <txKey> <sessionId> <type> [<timeout>] [<uniqueQualifier>] <opaque>``.

    ``timeout`` is in seconds; 0 means none and is omitted on the wire when unambiguous.
    Treat it as immutable (not declared frozen for speed, as ``Put``).
    """

    tx_key: str
    session_id: str
    type: str
    opaque: int
    timeout: int = 0
    unique_qualifier: str | None = None


@dataclass(frozen=True, slots=True)
class Sync:
    """``sync <topic> <partition> <len> <flag> <msgId> [<checksum>] <opaque>`` + body."""

    topic: str
    partition: int
    data: bytes
    flag: int
    msg_id: int
    opaque: int
    checksum: int | None = None


@dataclass(frozen=True, slots=True)
class Result:
    """``result <code> <bodyLen> <opaque>`` + body: every reply but a successful get."""

    code: int
    body: bytes
    opaque: int


@dataclass(frozen=True, slots=True)
class Data:
    """``value <len> <opaque>`` + message-set bytes: a successful get reply."""

    data: bytes
    opaque: int


@dataclass(frozen=True, slots=True)
class BodyTooLarge:
    """Decoder event: a put, sync, result or value announced a body over the limit.

    The decoder discards the body as it arrives, so the connection stays usable.
    ``topic`` and ``partition`` are set for put and sync.
    """

    command: str
    length: int
    opaque: int
    topic: str | None = None
    partition: int | None = None


Command = Put | Get | Offset | Version | Stats | Quit | Transaction | Sync | Result | Data
