"""Options of the ``metaq`` Spark source and sink, parsed once into frozen values.

Pure: no Spark, no ZooKeeper, no sockets; every error is an ``OptionError`` whose text names
the option and says what was expected. Option names are case-insensitive, as Spark's are.
An option the source, the stream or the sink does not take is refused, with the nearest
known name when one is close (``startingOffset``: "did you mean startingOffsets?").

Offsets follow Spark's Kafka source: ``earliest``, ``latest``, or JSON
``{"topic": {"B-P": offset}}`` where ``offset`` is a byte offset of a message start, ``-2``
(earliest) or ``-1`` (latest). A partition missing from the JSON takes ``earliest`` for a
start and ``latest`` for an end. Thread-safe: immutable values.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from meta.client.cluster import Partition, validate_group
from meta.config import validate_topic_name
from meta.errors import ClientError, MetaError

EARLIEST = "earliest"
LATEST = "latest"
EARLIEST_IN_JSON = -2
LATEST_IN_JSON = -1
FETCH_BYTES_DEFAULT = 1 << 20
"""Bytes asked per get: a default broker's ``maxTransferSize`` (1 MiB)."""
FETCH_BYTES_MAX = 64 << 20
READ_GROUP_DEFAULT = "metaq-spark"
"""The group named in get requests when ``group`` is not set (broker statistics only)."""
_TOPIC_CHARACTERS = re.compile(r"[A-Za-z0-9_.\-,\s]*")

ZK_OPTIONS = ("zk.connect", "zk.root", "zk.connectionTimeoutMs", "zk.sessionTimeoutMs")
READ_OPTIONS = (
    *ZK_OPTIONS,
    "topic",
    "topics",
    "topicPattern",
    "startingOffsets",
    "endingOffsets",
    "group",
    "maxBytesPerPartition",
    "includeSlaves",
    "failOnDataLoss",
    "fetchBytes",
    "brokerTimeoutMs",
)
"""The options of a batch read, as documented (matched case-insensitively)."""
STREAM_ONLY_OPTIONS = ("maxBytesPerTrigger", "commitToGroup")
STREAM_OPTIONS = tuple(name for name in READ_OPTIONS if name != "endingOffsets") + (
    STREAM_ONLY_OPTIONS
)
"""The options of a streaming read."""
TRANSACTION_OPTIONS = (
    "transactional",
    "transactionalId",
    "rowsPerTransaction",
    "transactionTimeoutMs",
    "maxBranchesPerTask",
)
"""The options of exactly-once writes (``transactional=true``)."""
WRITE_OPTIONS = (*ZK_OPTIONS, "topic", "sendTimeoutMs", "maxInFlight", *TRANSACTION_OPTIONS)
"""The options of a batch write."""
STREAM_WRITE_OPTIONS = (*WRITE_OPTIONS, "checkpointLocation")
"""The options of a streaming write (``checkpointLocation`` is Spark's own)."""
SUGGESTION_CUTOFF = 0.6
"""How alike (``difflib`` ratio) an unknown name must be to a known one to be suggested."""

OffsetSpec = str | Mapping[str, Mapping[Partition, int]]
"""``EARLIEST``, ``LATEST``, or topic -> partition -> offset (``-2``/``-1`` allowed)."""


class OptionError(ClientError):
    """A ``metaq`` source or sink option is missing or malformed."""


@dataclass(frozen=True)
class ZkOptions:
    """Where the cluster's ZooKeeper is."""

    connect: str
    root: str = "/meta"
    connection_timeout_ms: int = 10_000
    session_timeout_ms: int = 30_000


@dataclass(frozen=True)
class ReadOptions:
    """Everything a read plan needs; see the README "Spark" section for the option names."""

    zk: ZkOptions
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    starting: OffsetSpec = EARLIEST
    ending: OffsetSpec = LATEST
    group: str | None = None
    max_bytes_per_partition: int | None = None
    include_slaves: bool = False
    fail_on_data_loss: bool = True
    fetch_bytes: int = FETCH_BYTES_DEFAULT
    broker_timeout_s: float = 10.0
    max_bytes_per_trigger: int | None = None
    commit_to_group: str | None = None

    @property
    def request_group(self) -> str:
        return self.group or READ_GROUP_DEFAULT


@dataclass(frozen=True)
class TransactionOptions:
    """Exactly-once writes (``transactional=true``): see ``meta.spark.transactional_write``.

    ``write_id`` is ``transactionalId``: stable across restarts of a streaming query (it names
    the query's commit record in ZooKeeper), None for a batch write without it (a fresh id
    per write is taken then).
    """

    write_id: str | None = None
    rows_per_transaction: int = 10_000
    branches_per_task_max: int = 16
    timeout_s: int = 60


@dataclass(frozen=True)
class WriteOptions:
    """Everything a writer task needs; ``transaction`` is None for at-least-once writes."""

    zk: ZkOptions
    topic: str | None = None
    send_timeout_s: float = 10.0
    in_flight_max: int = 1000
    transaction: TransactionOptions | None = None


def lowered(options: Mapping[str, str]) -> dict[str, str]:
    """Spark passes a case-insensitive dict; a plain dict is normalised the same way."""
    return {str(key).lower(): value for key, value in dict(options).items()}


def parse_zk(options: Mapping[str, str]) -> ZkOptions:
    """Parse ``zk.connect``, ``zk.root``, ``zk.connectionTimeoutMs``, ``zk.sessionTimeoutMs``.

    Raises:
        OptionError: ``zk.connect`` is missing or blank, or a timeout is not a positive int.
    """
    connect = (options.get("zk.connect") or "").strip()
    if not connect:
        raise OptionError(
            "option zk.connect is required: the cluster's ZooKeeper, e.g. "
            '.option("zk.connect", "zk1:2181,zk2:2181")'
        )
    root = options.get("zk.root", "/meta")
    if not root.strip("/ "):
        raise OptionError(f"option zk.root must name a path, got {root!r}")
    return ZkOptions(
        connect,
        root,
        _positive_int(options, "zk.connectionTimeoutMs", 10_000),
        _positive_int(options, "zk.sessionTimeoutMs", 30_000),
    )


def parse_read_options(options: Mapping[str, str]) -> ReadOptions:
    """Parse and validate the options of ``spark.read.format("metaq")``.

    Raises:
        OptionError: a missing, conflicting or malformed option (the text names it).
    """
    check_names(options, READ_OPTIONS, "the metaq source (batch read)")
    return _parse_read(lowered(options))


def _parse_read(options: Mapping[str, str]) -> ReadOptions:
    """``parse_read_options`` once the names are checked (``options`` lowered)."""
    zk = parse_zk(options)
    topics, pattern = _parse_topics(options)
    group = _group(options, "group")
    max_bytes = options.get("maxbytesperpartition")
    max_bytes_per_trigger = options.get("maxbytespertrigger")
    return ReadOptions(
        zk=zk,
        topics=topics,
        topic_pattern=pattern,
        starting=parse_offsets(options.get("startingoffsets", EARLIEST), "startingOffsets"),
        ending=parse_offsets(options.get("endingoffsets", LATEST), "endingOffsets"),
        group=group,
        max_bytes_per_partition=(
            None if max_bytes is None else _positive_int(options, "maxBytesPerPartition", 0)
        ),
        include_slaves=_boolean(options, "includeSlaves", False),
        fail_on_data_loss=_boolean(options, "failOnDataLoss", True),
        fetch_bytes=min(_positive_int(options, "fetchBytes", FETCH_BYTES_DEFAULT), FETCH_BYTES_MAX),
        broker_timeout_s=_positive_int(options, "brokerTimeoutMs", 10_000) / 1000,
        max_bytes_per_trigger=(
            None
            if max_bytes_per_trigger is None
            else _positive_int(options, "maxBytesPerTrigger", 0)
        ),
        commit_to_group=_group(options, "commitToGroup"),
    )


def parse_stream_options(options: Mapping[str, str]) -> ReadOptions:
    """Parse the options of ``spark.readStream.format("metaq")``: the read options without
    ``endingOffsets`` (a stream has no end), plus ``maxBytesPerTrigger`` and ``commitToGroup``.

    Raises:
        OptionError: as ``parse_read_options``, or ``endingOffsets`` is set.
    """
    if "endingoffsets" in lowered(options):
        raise OptionError(
            "option endingOffsets is for batch reads only: a stream reads until it is stopped "
            "(use Trigger.AvailableNow to stop at the data present when it starts)"
        )
    check_names(options, STREAM_OPTIONS, "the metaq source (streaming read)")
    return _parse_read(lowered(options))


def parse_write_options(options: Mapping[str, str], stream: bool = False) -> WriteOptions:
    """Parse and validate the options of ``df.write.format("metaq")`` (or, with ``stream``,
    of ``df.writeStream.format("metaq")``).

    Raises:
        OptionError: an unknown, missing or malformed option.
    """
    if stream:
        check_names(options, STREAM_WRITE_OPTIONS, "the metaq sink (streaming write)")
    else:
        check_names(options, WRITE_OPTIONS, "the metaq sink (batch write)")
    options = lowered(options)
    topic = options.get("topic")
    if topic is not None:
        _check_topic(topic, "topic")
    return WriteOptions(
        zk=parse_zk(options),
        topic=topic,
        send_timeout_s=_positive_int(options, "sendTimeoutMs", 10_000) / 1000,
        in_flight_max=_positive_int(options, "maxInFlight", 1000),
        transaction=_transaction_options(options, topic),
    )


_WRITE_ID = re.compile(r"[A-Za-z0-9_.\-]{1,40}")


def _transaction_options(
    options: Mapping[str, str], topic: str | None
) -> TransactionOptions | None:
    """``transactional`` and its options (None when it is off).

    Raises:
        OptionError: a malformed value, ``transactionalId`` that is not 1 to 40 of
            ``[A-Za-z0-9_.-]``, or no ``topic`` option (a transactional write takes one topic).
    """
    if not _boolean(options, "transactional", False):
        return None
    if topic is None:
        raise OptionError(
            "transactional writes take one topic: set the topic option (a topic column is "
            "not supported with transactional=true)"
        )
    write_id = options.get("transactionalid")
    if write_id is not None and _WRITE_ID.fullmatch(write_id) is None:
        raise OptionError(
            f"option transactionalId must be 1 to 40 of A-Z a-z 0-9 _ . -, got {write_id!r}"
        )
    return TransactionOptions(
        write_id=write_id,
        rows_per_transaction=_positive_int(options, "rowsPerTransaction", 10_000),
        branches_per_task_max=_positive_int(options, "maxBranchesPerTask", 16),
        timeout_s=max(1, _positive_int(options, "transactionTimeoutMs", 60_000) // 1000),
    )


def check_names(options: Mapping[str, str], known: tuple[str, ...], what: str) -> None:
    """Refuse an option name that is not in ``known`` (case-insensitively).

    Raises:
        OptionError: names the first unknown option (as given), the nearest known name when
            one is close, and otherwise every name ``what`` takes.
    """
    by_lowered = {name.lower(): name for name in known}
    for given in dict(options):
        name = str(given)
        if name.lower() in by_lowered:
            continue
        if name.lower() in (stream_only.lower() for stream_only in STREAM_ONLY_OPTIONS):
            raise OptionError(f"option {name} is for streaming reads only (spark.readStream)")
        close = difflib.get_close_matches(name.lower(), by_lowered, 1, SUGGESTION_CUTOFF)
        if close:
            raise OptionError(
                f"unknown option {name} of {what}: did you mean {by_lowered[close[0]]}?"
            )
        raise OptionError(f"unknown option {name} of {what}, which takes: {', '.join(known)}")


def parse_offsets(text: str, name: str) -> OffsetSpec:
    """Parse ``earliest``, ``latest`` or ``{"topic": {"B-P": offset}}``.

    Raises:
        OptionError: anything else; the text quotes the value and the expected forms.
    """
    expected = f'{name} must be earliest, latest or JSON {{"topic": {{"B-P": offset}}}}'
    stripped = text.strip()
    if stripped.lower() in (EARLIEST, LATEST):
        return stripped.lower()
    try:
        document = json.loads(stripped)
    except ValueError as error:
        raise OptionError(f"malformed {name} {text!r}: {expected} ({error})") from None
    if not isinstance(document, dict):
        raise OptionError(f"malformed {name} {text!r}: {expected}")
    parsed: dict[str, dict[Partition, int]] = {}
    for topic, partitions in document.items():
        _check_topic(topic, name)
        if not isinstance(partitions, dict):
            raise OptionError(f"malformed {name} {text!r}: topic {topic!r} must map to an object")
        parsed[topic] = {}
        for key, offset in partitions.items():
            try:
                partition = Partition.parse(key)
            except ClientError:
                raise OptionError(
                    f"malformed {name} {text!r}: {key!r} is not a partition <brokerId>-<n>"
                ) from None
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < -2:
                raise OptionError(
                    f"malformed {name} {text!r}: offset of {topic}/{key} must be an integer "
                    f">= 0, or -2 (earliest) or -1 (latest), got {offset!r}"
                )
            parsed[topic][partition] = offset
    return parsed


def _parse_topics(options: Mapping[str, str]) -> tuple[tuple[str, ...], str | None]:
    """``topic`` (one name), ``topics`` (comma list, or a regex) or ``topicPattern``."""
    given = [name for name in ("topic", "topics", "topicpattern") if options.get(name)]
    if len(given) != 1:
        raise OptionError(
            "exactly one of the options topic, topics and topicPattern is required, got "
            + (", ".join(given) or "none")
        )
    (name,) = given
    value = options[name].strip()
    if name == "topics" and _TOPIC_CHARACTERS.fullmatch(value) is None:
        name = "topicpattern"  # Not a list of names: a regular expression.
    if name == "topicpattern":
        try:
            re.compile(value)
        except re.error as error:
            raise OptionError(f"malformed topic pattern {value!r}: {error}") from None
        return (), value
    topics = tuple(part.strip() for part in value.split(",") if part.strip())
    if not topics or (name == "topic" and len(topics) != 1):
        raise OptionError(f"option {name} must name {'one topic' if name == 'topic' else 'topics'}")
    for topic in topics:
        _check_topic(topic, name)
    return topics, None


def _group(options: Mapping[str, str], name: str) -> str | None:
    group = options.get(name.lower())
    if group is not None:
        try:
            validate_group(group)
        except MetaError as error:
            raise OptionError(f"option {name}: {error}") from None
    return group


def _check_topic(topic: object, name: str) -> None:
    try:
        validate_topic_name(topic)
    except MetaError as error:
        raise OptionError(f"option {name}: {error}") from None


def _positive_int(options: Mapping[str, str], name: str, default: int) -> int:
    text = options.get(name.lower())
    if text is None:
        return default
    try:
        value = int(str(text).strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise OptionError(f"option {name} must be a positive integer, got {text!r}")
    return value


def _boolean(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = options.get(name.lower())
    if text is None:
        return default
    lowered_text = str(text).strip().lower()
    if lowered_text not in ("true", "false"):
        raise OptionError(f"option {name} must be true or false, got {text!r}")
    return lowered_text == "true"
