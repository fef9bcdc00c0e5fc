"""Broker statistics: command counters, realtime counters and the ``stats`` command's text.

What lives here:

* ``BrokerCounters``: the plain counters behind the general stats (``cmd_put``, ``get_miss``...).
* ``RealtimeStats``: Java's ``MetaStatLog``. Events are keyed ``(kind, topic, key)``; each adds 1
  to Count and its value to Value. Output is ``Count=..,Value=..,Value/Count=..,
  Count/Duration=..,Duration=..`` with numbers in Java ``DecimalFormat("#.##")`` (see
  ``format_decimal``).
* ``BrokerView`` / ``PartitionView``: a frozen snapshot of what the broker knows, so that
  ``render_stats(item, view, realtime)`` is a function from values to ``(code, body)``.

Invariants and decisions:

* Counters are never persisted; they start at 0 with the process.
* A reset zeroes counters but keeps every entry, as Java does, so "was this kind ever recorded"
  (``null`` versus a formatted line) survives resets.
* Automatic resets happen on a fixed 30-minute schedule counted from construction, whatever
  ``reset()`` did in between (Java's reset thread sleeps 30 minutes in a loop). They are applied
  lazily, on the next ``record`` or ``format_*`` call, by reading the injected clock: no timers.
* Memory is bounded. Every stats output sums a kind over one topic or over all topics, so only
  those sums are kept: ``record``'s key (group or ``<brokerId>-<partition>``) is folded into its
  topic's total and not stored. At most ``entries_max`` ``(kind, topic)`` totals exist; past that,
  an event for a new topic counts in the kind's total only and the topic reads
  ``Invalid keyTwo:<topic>``. Java keeps every key without bound, and topic names come from
  peers (a get may name anything), hence ours.
* Java prints ``topics`` and ``offsets`` lines in hash-map order; we sort them by
  ``(topic, partition)`` so the output is deterministic.
* Wildcard sections (``[topic=foo*]``) are not topics: the general ``topics`` count, the
  ``*Empty*`` lines and the per-topic ``resultCode`` use exact section names only. Java counts a
  wildcard section name as a configured topic without stores.

Affinity: reactor thread only. Nothing here locks; ``render_stats`` reads the config file
(small, local) synchronously for the ``config`` item.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Protocol

from meta.config import read_config_bytes
from meta.status.facts import COUNTER_NAMES, UNKNOWN_TOPIC_RESULT, exact_topic_names

KINDS = ("put", "get", "offset", "get_miss", "put_failed", "message_size")
"""Realtime event kinds, in the order the ``realtime`` item prints them."""

AUTO_RESET_INTERVAL_S = 30 * 60
"""Realtime counters are zeroed this often (Java ``MetaStatLog.RealTimeStatRestTask``)."""

ENTRIES_MAX = 10_000
"""Default bound on distinct ``(kind, topic)`` totals kept by ``RealtimeStats``."""

HELP_LINES = (
    "*EMPTY* Returns broker info.",
    "help Returns help menu.",
    "topics Returns topics statistics detail info.",
    "offsets Returns partitions detail info.",
    "realtime Returns realtime statistics detail info.",
    "config Returns broker's config file content.",
)

RESULT_OK = 200
RESULT_ERROR = 500

_HUNDREDTH = Decimal("0.01")
_DECIMALS_MAX = 2


@dataclass(slots=True)
class BrokerCounters:
    """Command counters behind the general stats. Reactor thread only.

    ``get_failed`` is kept (Java has it) but never printed. ``put_too_large`` (puts refused
    for their size, compatibility.md) and ``put_too_large_last`` (``<topic>-<partition> <bytes>`` of
    the last one, ``-`` before any) are metaq-py's own, printed by the ``rejected`` item.
    ``http_*`` count the requests of the HTTP protocol (``meta.server.http``), printed by the
    ``http`` item: ``http_requests`` every request (a bad path, method or parameter
    included), and ``http_put``, ``http_get`` and ``http_offset`` the HTTP share of
    ``cmd_put``, ``cmd_get`` and ``cmd_offset`` (Java's plug-in counts its requests with the
    TCP commands): the requests that reached the TCP handler, which counted them there. A
    put refused by the HTTP layer itself (a bad parameter, a body that does not match
    ``length``) is in neither. ``get_moved`` counts the gets answered 301, which
    ``cmd_offset`` includes as Java's does; it is not printed (the metrics use it).
    """

    cmd_put: int = 0
    cmd_get: int = 0
    cmd_offset: int = 0
    tx_begin: int = 0
    tx_xa_begin: int = 0
    tx_commit: int = 0
    tx_rollback: int = 0
    get_miss: int = 0
    get_failed: int = 0
    get_moved: int = 0
    put_failed: int = 0
    put_too_large: int = 0
    put_too_large_last: str = "-"
    http_requests: int = 0
    http_put: int = 0
    http_get: int = 0
    http_offset: int = 0


@dataclass(slots=True)
class _Counter:
    """One ``MetaStatLog.StatCounter``: events seen and the sum of their values."""

    count: int = 0
    value: int = 0


def format_decimal(number: float) -> str:
    """Format ``number`` exactly as Java ``new DecimalFormat("#.##").format(double)`` does.

    Java starts from the shortest decimal that round-trips (``Double.toString``); if it has at
    most two decimals those digits are printed as they are (so ``2**63`` prints
    ``9223372036854776000``). Otherwise it rounds HALF_EVEN to two decimals, deciding ties on
    the exact binary value (JDK 8 and later), so ``2.345`` -> ``2.35`` and ``0.125`` -> ``0.12``.
    No grouping, no trailing zeros, no decimal point for integers. Checked against JDK 17 and 25
    on 40,000 values.

    Args:
        number: a finite float.

    Returns:
        The formatted text.
    """
    shortest = Decimal(repr(number))
    if shortest.as_tuple().exponent >= -_DECIMALS_MAX:
        rounded = shortest
    else:
        rounded = Decimal(number).quantize(_HUNDREDTH, rounding=ROUND_HALF_EVEN)
    return format(rounded.normalize(), "f")


def _format_counter(counter: _Counter, duration_s: int) -> str:
    """Java ``MetaStatLog.formatOutput``: the five ``Name=value`` fields of one counter."""
    # Java converts both longs to double before dividing; do the same to round identically.
    count = float(counter.count)
    value = float(counter.value)
    average = format_decimal(value / count) if counter.count != 0 else "invalid"
    rate = format_decimal(count / duration_s) if duration_s != 0 else "invalid"
    return (
        f"Count={format_decimal(count)},Value={format_decimal(value)},"
        f"Value/Count={average},Count/Duration={rate},Duration={duration_s}"
    )


# --- Realtime counters -------------------------------------------------------------------------


class RealtimeStats:
    """Realtime counters (Java ``MetaStatLog``), summed per kind and per (kind, topic).

    Reactor thread only. The caller decides whether a topic is recorded at all
    (``stat_enabled``).
    """

    def __init__(self, clock: Callable[[], float], entries_max: int = ENTRIES_MAX) -> None:
        """Start with no entries; the first 30-minute period starts now.

        Args:
            clock: returns the current time in seconds (monotonic in production).
            entries_max: bound on distinct ``(kind, topic)`` totals.
        """
        assert entries_max >= 1
        self._clock = clock
        self._entries_max = entries_max
        now_s = clock()
        self._reset_at_s = now_s
        self._auto_reset_at_s = now_s + AUTO_RESET_INTERVAL_S
        self._kinds: dict[str, _Counter] = {}
        self._topics: dict[tuple[str, str], _Counter] = {}

    def record(self, kind: str, topic: str, key: str, value: int = 1) -> None:
        """Count one event: Count += 1 and Value += ``value`` for its kind and topic.

        Args:
            kind: one of ``KINDS``.
            topic: the topic named by the command.
            key: Java's third key (``<brokerId>-<partition>``, the group, or ``*``); no output
                reads it, so it is folded into the topic's total.
            value: 1, or the payload length for message_size.
        """
        assert kind in KINDS, kind
        del key  # Kept in the signature so call sites read like Java's; see the module doc.
        self._now_s()
        counters = [self._kinds.setdefault(kind, _Counter())]
        topic_counter = self._topics.get((kind, topic))
        if topic_counter is None and len(self._topics) < self._entries_max:
            topic_counter = self._topics[(kind, topic)] = _Counter()
        if topic_counter is not None:
            counters.append(topic_counter)
        for counter in counters:
            counter.count += 1
            counter.value += value

    def reset(self) -> None:
        """Zero every counter and restart Duration (``stats reset``). Entries are kept."""
        self._clear(self._now_s())

    def duration_s(self) -> int:
        """Whole seconds since the last reset (0 if the clock went backwards)."""
        return max(0, int(self._now_s() - self._reset_at_s))

    def format_total(self, kind: str) -> str:
        """The ``realtime`` item's text for ``kind``, summed over all topics.

        Returns:
            The formatted counter, or ``null`` if ``kind`` was never recorded.
        """
        duration_s = self.duration_s()
        counter = self._kinds.get(kind)
        if counter is None:
            return "null"
        return _format_counter(counter, duration_s)

    def format_topic(self, kind: str, topic: str) -> str:
        """The per-topic item's text for ``kind``.

        Returns:
            The formatted counter; ``null`` if ``kind`` was never recorded for any topic;
            ``Invalid keyTwo:<topic>`` if it was, but never for this topic.
        """
        duration_s = self.duration_s()
        if kind not in self._kinds:
            return "null"
        counter = self._topics.get((kind, topic))
        if counter is None:
            return f"Invalid keyTwo:{topic}"
        return _format_counter(counter, duration_s)

    def _now_s(self) -> float:
        """Read the clock, applying any automatic reset that fell due since the last call."""
        now_s = self._clock()
        if now_s >= self._auto_reset_at_s:
            periods_late = int((now_s - self._auto_reset_at_s) // AUTO_RESET_INTERVAL_S)
            due_at_s = self._auto_reset_at_s + periods_late * AUTO_RESET_INTERVAL_S
            self._clear(due_at_s)
            self._auto_reset_at_s = due_at_s + AUTO_RESET_INTERVAL_S
        return now_s

    def _clear(self, reset_at_s: float) -> None:
        for counter in (*self._kinds.values(), *self._topics.values()):
            counter.count = 0
            counter.value = 0
        self._reset_at_s = reset_at_s


# --- Which topics record realtime stats --------------------------------------------------------


class _TopicSection(Protocol):
    name: str
    stat: bool
    accept_publish: bool
    accept_subscribe: bool


class StatsConfig(Protocol):
    """What this module reads from ``meta.config.BrokerConfig``."""

    path: str
    checksum: int
    broker_id: int
    topics: Sequence[_TopicSection]

    def topic_config(self, topic: str) -> _TopicSection: ...


@functools.lru_cache(maxsize=1024)
def _section_pattern(section_name: str) -> re.Pattern[str]:
    # Java: "*" -> ".*" and nothing else escaped, matched against the whole topic.
    return re.compile(section_name.replace("*", ".*"))


def stat_enabled(config: StatsConfig, topic: str) -> bool:
    """Whether realtime stats are recorded for ``topic``.

    Java ``StatsManager.isStatTopic``: true when any section whose ``stat`` is true matches
    ``topic`` as a pattern. A section's ``stat`` defaults to ``[system] stat``; a topic that
    matches no section is never recorded.

    Args:
        config: the broker configuration.
        topic: the topic named by the command (any text a peer sent).

    Returns:
        True if events for ``topic`` should be passed to ``RealtimeStats.record``.
    """
    return any(
        section.stat and _section_pattern(section.name).fullmatch(topic) is not None
        for section in config.topics
    )


# --- The snapshot rendered by the stats command ------------------------------------------------


@dataclass(frozen=True)
class PartitionView:
    """One store's numbers: offsets in bytes, counts as the store keeps them."""

    topic: str
    partition: int
    min_offset: int
    max_offset: int
    message_count: int
    byte_count: int


@dataclass(frozen=True)
class BrokerView:
    """What ``render_stats`` needs from the broker, taken on the reactor thread."""

    pid: int
    broker_id: int
    port: int
    started_at: float  # seconds, same clock as ``now``
    now: float  # seconds
    version: str
    slave: bool
    curr_connections: int
    threads: int
    counters: BrokerCounters
    config: StatsConfig
    partitions: tuple[PartitionView, ...]
    transactions: tuple[tuple[str, str, int, int], ...] = ()  # ours: (key, state, msgs, bytes)


@dataclass(frozen=True)
class _TopicTotals:
    partitions: int
    message_count: int
    byte_count: int


# --- Rendering ---------------------------------------------------------------------------------


def render_stats(item: str, view: BrokerView, realtime: RealtimeStats) -> tuple[int, bytes]:
    """Answer ``stats <item>``.

    Args:
        item: the item token; empty or whitespace asks for the general stats.
        view: the broker snapshot.
        realtime: the realtime counters; the ``reset`` item zeroes them.

    Returns:
        ``(result code, body)``. The body is ``STATS\\r\\n`` + lines + ``END\\r\\n``, except for
        ``config``, which answers the raw config file (or a 500 error text).
    """
    if item == "config":
        return _read_config_file(view.config.path)
    if not item.strip():
        lines = _general_lines(view)
    elif item == "topics":
        lines = _topics_lines(view)
    elif item == "offsets":
        lines = _offsets_lines(view)
    elif item == "realtime":
        lines = _realtime_lines(realtime)
    elif item == "help":
        lines = list(HELP_LINES)
    elif item == "reset":
        realtime.reset()
        lines = ["reset ok"]
    elif item == "transactions":  # metaq-py's own item, for meta-admin tx list
        lines = [_line(*transaction) for transaction in view.transactions]
    elif item == "rejected":  # metaq-py's own: puts refused for their size (compatibility.md)
        lines = _rejected_lines(view)
    elif item == "http":  # metaq-py's own: requests of the HTTP protocol
        lines = _http_lines(view)
    else:
        lines = _topic_lines(item, view, realtime)
    return RESULT_OK, _stats_body(lines)


def _stats_body(lines: Iterable[str]) -> bytes:
    text = "STATS\r\n" + "".join(line + "\r\n" for line in lines) + "END\r\n"
    return text.encode("utf-8")


def _line(*values: object) -> str:
    """Java ``StatsManager.append``: values joined by single spaces, booleans in lower case."""
    return " ".join(_java_text(value) for value in values)


def _java_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _general_lines(view: BrokerView) -> list[str]:
    counters = view.counters
    fields: tuple[tuple[str, object], ...] = (
        ("pid", view.pid),
        ("broker_id", view.broker_id),
        ("port", view.port),
        ("uptime", max(0, int(view.now - view.started_at))),
        ("version", view.version),
        ("slave", view.slave),
        ("curr_connections", view.curr_connections),
        ("threads", view.threads),
        *((name, getattr(counters, name)) for name in COUNTER_NAMES),
        ("total_messages", sum(store.message_count for store in view.partitions)),
        ("topics", _topic_count(view)),
        ("config_checksum", view.config.checksum),
    )
    return [_line(name, value) for name, value in fields]


def _http_lines(view: BrokerView) -> list[str]:
    counters = view.counters
    return [
        _line("http_requests", counters.http_requests),
        _line("http_put", counters.http_put),
        _line("http_get", counters.http_get),
        _line("http_offset", counters.http_offset),
    ]


def _rejected_lines(view: BrokerView) -> list[str]:
    counters = view.counters
    return [
        _line("put_too_large", counters.put_too_large),
        _line("put_too_large_last", counters.put_too_large_last),
        _line("max_message_size", view.config.message_bytes_max),
    ]


def _store_order(store: PartitionView) -> tuple[str, int]:
    return store.topic, store.partition


def _topic_totals(partitions: Iterable[PartitionView]) -> dict[str, _TopicTotals]:
    """Per-topic sums over stores, in topic order."""
    totals: dict[str, _TopicTotals] = {}
    for store in sorted(partitions, key=_store_order):
        before = totals.get(store.topic, _TopicTotals(0, 0, 0))
        totals[store.topic] = _TopicTotals(
            before.partitions + 1,
            before.message_count + store.message_count,
            before.byte_count + store.byte_count,
        )
    return totals


def _topic_count(view: BrokerView) -> int:
    with_stores = {store.topic for store in view.partitions}
    without_stores = set(exact_topic_names(view.config)) - with_stores
    return len(with_stores) + len(without_stores)


def _topics_lines(view: BrokerView) -> list[str]:
    totals = _topic_totals(view.partitions)
    lines = []
    for topic, topic_totals in totals.items():
        section = view.config.topic_config(topic)
        lines.append(
            f"{topic} partitions {topic_totals.partitions}"
            f" message_count {topic_totals.message_count}"
            f" message_bytes {topic_totals.byte_count}"
            f" accept_publish {_java_text(section.accept_publish)}"
            f" accept_subscribe {_java_text(section.accept_subscribe)}"
        )
    for name in exact_topic_names(view.config):
        if name not in totals:
            lines.append(f"{name} *Empty*")
    return lines


def _offsets_lines(view: BrokerView) -> list[str]:
    # "part" is the wire text, kept although house style spells it "partition".
    return [
        f"{store.topic} part {store.partition}"
        f" min_offset {store.min_offset} max_offset {store.max_offset}"
        for store in sorted(view.partitions, key=_store_order)
    ]


def _realtime_lines(realtime: RealtimeStats) -> list[str]:
    return [_line(f"realtime_{kind}", realtime.format_total(kind)) for kind in KINDS]


def _topic_lines(topic: str, view: BrokerView, realtime: RealtimeStats) -> list[str]:
    """Java's resultCode: 0 = has stores, 1 = unknown, 2 = configured without stores yet."""
    totals = _topic_totals(store for store in view.partitions if store.topic == topic).get(topic)
    if totals is not None:
        result_code = 0
    elif topic in exact_topic_names(view.config):
        result_code = 2
    else:
        result_code = UNKNOWN_TOPIC_RESULT
    totals = totals or _TopicTotals(0, 0, 0)
    lines = [
        topic,
        _line("resultCode", result_code),
        _line("partitions", totals.partitions),
        _line("message_count", totals.message_count),
        _line("bytes", totals.byte_count),
    ]
    for kind in KINDS:
        lines.append(_line(f"topic_realtime_{kind}", realtime.format_topic(kind, topic)))
    return lines


def _read_config_file(path: str) -> tuple[int, bytes]:
    """The ``config`` item: the raw file, or 500 with Java's error text."""
    try:
        return RESULT_OK, read_config_bytes(path)
    except (FileNotFoundError, NotADirectoryError):
        # Java checks File.exists() first; both errors mean "does not exist" there.
        return RESULT_ERROR, f"Config file not found:{path}".encode()
    except OSError as error:
        # Java's IOException text for a file is "<path> (<reason>)".
        reason = error.strerror or str(error)
        return RESULT_ERROR, f"Read config file error:{path} ({reason})".encode()
