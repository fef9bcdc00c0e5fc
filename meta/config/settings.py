"""The frozen configuration objects: ``BrokerConfig``, ``TopicConfig``, ``ZkConfig`` and
``SlaveConfig``, ``HttpConfig``, ``SamsaConfig``, ``GregorConfig``.

``meta.config.loading`` builds them from the files; everything else only reads them. Also the
topic-name rule (compatibility.md, ``validate_topic_name``), the section-name pattern rule
(``topic_regex``) and ``FlushMode``, how a partition or the journal makes appends durable.

Invariants: every object is frozen and, when built by ``meta.config.loading``, fully validated;
``BrokerConfig.topics`` keeps file order; ``checksum`` is the unsigned CRC-32 of the raw file
bytes (published to ZooKeeper). Immutable, so safe to share between threads.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass, field

from meta.config.grammars import DeletePolicySpec, parse_delete_policy
from meta.config.keys import TOPIC_KEYS
from meta.errors import InvalidTopicError

TOPIC_NAME_CHARS_MAX = 255
_TOPIC_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,255}")
TOPIC_SECTION_PREFIX = "topic="
FILTER_KEY_PREFIX = "group."


class FlushMode(enum.Enum):
    """How appends are made durable: a partition's (``unflushThreshold``, see
    docs/durability.md) and the transaction journal's (``flushTxLogAtCommit``).

    ``GROUP_COMMIT``: a write is answered after the fsync that covers it, and one fsync covers
    every write waiting at that moment (``unflushThreshold <= 0``; ``flushTxLogAtCommit=1``).
    ``THRESHOLD``: a write is answered at once and fsynced once a count or a time threshold is
    reached (``unflushThreshold >= 1`` with ``unflushInterval``; ``flushTxLogAtCommit=2``: once
    a second). ``OS``: answered at once and never fsynced explicitly, the operating system
    writes it back (``flushTxLogAtCommit=0``; the journal only, partitions never use it).
    """

    GROUP_COMMIT = "group_commit"
    THRESHOLD = "threshold"
    OS = "os"


# flushTxLogAtCommit (0, 1 or 2, as in Java) -> the journal's flush mode.
_JOURNAL_FLUSH_MODES = {0: FlushMode.OS, 1: FlushMode.GROUP_COMMIT, 2: FlushMode.THRESHOLD}


def journal_flush_mode(flush_tx_log_at_commit: int) -> FlushMode:
    """The journal's ``FlushMode`` for a ``flushTxLogAtCommit`` value (0, 1 or 2).

    Raises:
        KeyError: any other value (the key table allows only these three).
    """
    return _JOURNAL_FLUSH_MODES[flush_tx_log_at_commit]


@dataclass(frozen=True)
class ZkConfig:
    """The ``[zookeeper]`` section."""

    connect: str  # zk.zkConnect, required (even when disabled, like Java)
    enabled: bool = True  # zk.zkEnable
    root: str = "/meta"  # zk.zkRoot: leading "/" added, one trailing "/" removed ("/" -> "")
    session_timeout_ms: int = 30000
    connection_timeout_ms: int = 30000
    sync_time_ms: int = 5000


@dataclass(frozen=True)
class TopicConfig:
    """One ``[topic=NAME]`` section, or the ``[system]`` defaults for an unlisted topic."""

    name: str  # section name after "topic=" (may contain "*")
    num_partitions: int
    unflush_threshold: int
    unflush_interval_ms: int
    data_path: str  # absolute, expanded
    delete_policy: str  # validated grammar "delete,N[s|m|h]" / "archive,N[s|m|h][,bool]"
    delete_when: str  # Quartz cron text (6 or 7 fields)
    accept_publish: bool
    accept_subscribe: bool
    stat: bool
    filters: tuple[tuple[str, str], ...] = ()  # (group, "pkg.module:callable")

    @property
    def flush_mode(self) -> FlushMode:
        """Group commit when ``unflushThreshold <= 0``, threshold mode otherwise."""
        return FlushMode.GROUP_COMMIT if self.unflush_threshold <= 0 else FlushMode.THRESHOLD

    @property
    def is_pattern(self) -> bool:
        """Whether this section is a wildcard pattern rather than one topic."""
        return "*" in self.name

    @property
    def delete_policy_spec(self) -> DeletePolicySpec:
        """The parsed ``delete_policy``."""
        return parse_delete_policy(self.delete_policy)


@dataclass(frozen=True, kw_only=True)
class BrokerConfig:
    """A validated ``server.ini``. Build it with ``load_config``."""

    path: str  # absolute path of the ini file
    checksum: int  # zlib.crc32 of the file bytes (unsigned)
    broker_id: int  # 0..1023
    server_port: int = 8123  # 0 means "any free port" (tests)
    dashboard_http_port: int = 8120  # -1 turns the dashboard off, 0 picks a free port
    dashboard_admin_token_file: str | None = None  # the operator token of dashboard actions
    host_name: str | None = None  # listen/register address when set (compatibility.md)
    data_path: str  # default ~/meta, expanded, absolute
    data_log_path: str  # default = data_path
    app_class_path: str | None = None  # default <config dir>/../provided when it exists
    num_partitions: int
    unflush_threshold: int
    unflush_interval_ms: int
    segment_bytes_max: int  # maxSegmentSize
    transfer_bytes_max: int  # maxTransferSize
    message_bytes_max: int  # maxMessageSize, default = transfer_bytes_max (compatibility.md)
    get_process_thread_count: int
    put_process_thread_count: int
    delete_policy: str = "delete,168"
    delete_when: str = "0 0 6,18 * * ?"
    quartz_thread_count: int = 5
    max_checkpoints: int = 3
    checkpoint_interval_ms: int = 3600000
    tx_timeout_timer_capacity: int = 30000  # maxTxTimeoutTimerCapacity
    flush_tx_log_at_commit: int = 1  # 0, 1 or 2
    tx_timeout_max_s: int = 60  # maxTxTimeoutInSeconds
    tx_journal_file_bytes: int = 64 * 1024 * 1024  # txJournalFileSize (ours)
    tx_unused_timeout_s: int = 60  # txUnusedTimeoutInSeconds (ours)
    tx_per_connection_max: int = 10000  # maxTxPerConnection (ours)
    xa_per_qualifier_max: int = 10000  # maxXaTxPerQualifier (ours)
    tx_active_timeout_s: int = 300  # txActiveTimeoutInSeconds (ours)
    tx_open_max: int = 100_000  # maxOpenTx (ours)
    tx_open_bytes_max: int = 256 * 1024 * 1024  # maxOpenTxBytes (ours)
    tx_per_address_max: int = 10000  # maxTxPerAddress (ours): per client IP address
    tx_bytes_per_address_max: int = 64 * 1024 * 1024  # maxTxBytesPerAddress (ours)
    connections_max: int = 4096  # maxConnections (ours)
    http_connections_max: int = 1024  # maxHttpConnections (ours): the HTTP protocol port
    dashboard_connections_max: int = 64  # maxDashboardConnections (ours)
    total_connections_max: int = 0  # maxTotalConnections (ours): 0 = the ports' caps only
    idle_connection_timeout_s: int = 600  # idleConnectionTimeoutInSeconds (ours)
    header_timeout_s: int = 30  # headerTimeoutInSeconds (ours)
    queued_reply_bytes_max: int = 32 * 1024 * 1024  # maxQueuedReplyBytes (ours)
    topics_max: int = 1000  # maxTopics (ours): topics without an exact section
    accept_publish: bool = True
    accept_subscribe: bool = True
    stat: bool = False
    update_consumer_offsets: bool = False
    load_message_stores_in_parallel: bool = False
    scrub_bytes_per_s: int = 4 * 1024 * 1024  # scrubBytesPerSecond (ours), 0 = off
    recovery_point_interval_s: int = 60  # recoveryPointIntervalInSeconds (ours)
    zookeeper: ZkConfig
    topics: tuple[TopicConfig, ...]  # in file order
    _exact_topics: dict[str, TopicConfig] = field(init=False, repr=False, compare=False)
    _topic_patterns: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        exact = {topic.name: topic for topic in self.topics if not topic.is_pattern}
        patterns = tuple(re.compile(topic_regex(topic.name)) for topic in self.topics)
        object.__setattr__(self, "_exact_topics", exact)
        object.__setattr__(self, "_topic_patterns", patterns)

    def topic_config(self, topic: str) -> TopicConfig:
        """Return the settings of ``topic``.

        The exact ``[topic=NAME]`` section if one exists; otherwise a ``TopicConfig`` built from
        the ``[system]`` values (Java: a topic accepted through a wildcard uses those). The
        name is not validated here: check ``is_legal_topic`` first.
        """
        exact = self._exact_topics.get(topic)
        if exact is not None:
            return exact
        defaults = {spec.field: getattr(self, spec.field) for spec in TOPIC_KEYS}
        return TopicConfig(name=topic, **defaults)  # type: ignore[arg-type]

    def is_legal_topic(self, topic: str) -> bool:
        """Whether ``topic`` passes the topic-name rule and fully matches some section's pattern."""
        try:
            validate_topic_name(topic)
        except InvalidTopicError:
            return False
        return any(pattern.fullmatch(topic) for pattern in self._topic_patterns)

    def data_path_for(self, topic: str) -> str:
        """Root directory of ``topic``'s partition directories."""
        return self.topic_config(topic).data_path

    @property
    def journal_flush_mode(self) -> FlushMode:
        """The transaction journal's flush mode, from ``flushTxLogAtCommit``."""
        return journal_flush_mode(self.flush_tx_log_at_commit)

    def with_overrides(self, **fields: object) -> BrokerConfig:
        """Return a copy with ``fields`` replaced (``dataclasses.replace``; not re-validated)."""
        return dataclasses.replace(self, **fields)


@dataclass(frozen=True)
class SlaveConfig:
    """A validated ``async_slave.properties``."""

    slave_id: int
    slave_group: str  # blank -> "meta-slave-group_<slaveId>"
    slave_max_delay_ms: int = 500  # slaveMaxDelayInMills
    auto_sync_master_config: bool = False


@dataclass(frozen=True)
class HttpConfig:
    """A validated ``jettyBroker.properties``: the HTTP protocol's settings."""

    server_port: int = 8080  # serverPort; 0 picks a free port (logged)


@dataclass(frozen=True)
class SamsaConfig:
    """A validated ``samsa_master.properties``: a synchronous-replication master.

    ``slave`` is the one gregor slave's ``host:port``. ``callback_thread_count``,
    ``recover_parallel`` and ``recover_parallel_hint`` size Java's thread pools; they are
    accepted so Java files load, and have no effect here (None: Java's CPU-based default).
    ``syncs_in_flight_max`` bounds the syncs sent to the slave and not answered yet; a put
    beyond it gets 500 at once.
    """

    slave: str
    callback_thread_count: int | None = None  # callbackThreadCount
    send_to_slave_timeout_ms: int = 2000  # sendToSlaveTimeoutInMills
    slave_failure_threshold: int = 100  # slaveContinuousFailureThreshold
    check_slave_interval_ms: int = 100  # checkSlaveIntervalInMills
    recover_offset: bool = False  # recoverOffset
    syncs_in_flight_max: int = 10_000  # maxSyncsInFlight (not Java's)
    recover_parallel: bool = True  # recoverParallel
    recover_parallel_hint: int | None = None  # recoverParallelHint
    # syncSecret (not Java's): proves this master to a metaq-py gregor slave (meta.sync.peers)
    sync_secret: str | None = field(default=None, repr=False)

    @property
    def slave_address(self) -> tuple[str, int]:
        """``(host, port)`` of ``slave`` (brackets of an IPv6 host removed)."""
        host, _, port = self.slave.rpartition(":")
        return host.strip("[]"), int(port)


@dataclass(frozen=True)
class GregorConfig:
    """A validated ``gregor_slave.properties``: a synchronous-replication slave.

    Java's file has no keys; here ``master`` (required) names the samsa master whose ``sync``
    the slave takes, as ``host`` or ``host:port``, and ``sync_secret``, when set, is the
    secret that master must prove (``meta.sync.peers``).
    """

    master: str
    sync_secret: str | None = field(default=None, repr=False)


def validate_topic_name(topic: str) -> None:
    """Refuse a topic name that the topic-name rule does not allow.

    Args:
        topic: the name to check.

    Raises:
        InvalidTopicError: not 1..255 of ``[A-Za-z0-9_.-]``, or ``.`` or ``..``.
    """
    if not isinstance(topic, str) or _TOPIC_NAME_RE.fullmatch(topic) is None:
        shown = repr(topic) if len(str(topic)) <= 80 else repr(str(topic)[:80]) + "..."
        if isinstance(topic, str) and not 1 <= len(topic) <= TOPIC_NAME_CHARS_MAX:
            reason = f"must be 1 to {TOPIC_NAME_CHARS_MAX} characters, got {len(topic)}"
        else:
            reason = "only the characters A-Z a-z 0-9 _ . - are allowed"
        raise InvalidTopicError(f"invalid topic name {shown}: {reason}")
    if topic in (".", ".."):
        raise InvalidTopicError(f"invalid topic name {topic!r}: '.' and '..' are not allowed")


def topic_regex(section_name: str) -> str:
    """Java's legality pattern for a section name: ``*`` -> ``.*``, nothing else escaped."""
    return section_name.replace("*", ".*")
