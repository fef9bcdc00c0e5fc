"""Broker and slave configuration: ``server.ini`` and ``async_slave.properties`` -> frozen objects.

This is the ONLY module that reads configuration files. ``load_config`` parses MetaQ's
``server.ini`` shape (``[system]``, ``[zookeeper]``, ``[topic=NAME]``; spec section 5) into a
validated ``BrokerConfig``; ``load_slave_config`` reads ``async_slave.properties`` into a
``SlaveConfig``. Every ini key maps to a field in one explicit table (``SYSTEM_KEYS``,
``ZOOKEEPER_KEYS``, ``TOPIC_KEYS``, ``SLAVE_KEYS``) that also gives its type, default and whether
it is required. Value grammars live in ``meta/config_values.py``.

Rules kept from Java (ini4j + Aviator): keys are case-sensitive; lines are trimmed (so an indented
line is never a continuation); a blank value counts as absent for optional keys; integer values
may be arithmetic (``1024*1024*1024``); an unknown key is an error naming file, section and key
(DECISIONS 6). Java's internal field names (``topics``, ``slaveConfig``, ...) are accepted and
ignored with a warning, as are ``[system]`` names inside ``[zookeeper]``. Every section name is a
topic pattern (``*`` -> ``.*``, nothing else escaped, so ``.`` matches any character); per-topic
settings are looked up by exact name only. Departures: unknown sections are errors (Java ignores
them); duplicate keys and sections are errors; ``maxMessageSize`` is new (DECISIONS 8); relative
paths are resolved against the current working directory at load time; files are read as UTF-8.

Invariants: every object returned is frozen and fully validated; ``BrokerConfig.topics`` keeps
file order; ``checksum`` is the unsigned CRC-32 of the raw file bytes (published to ZooKeeper).
Thread-safety: loading does blocking file I/O (call it before the reactor runs or in a thread);
the returned objects are immutable and safe to share between threads.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from meta import config_values
from meta.config_values import DeletePolicySpec, Source, read_keys, with_defaults
from meta.config_values import KeySpec as _Key
from meta.errors import ConfigError, InvalidTopicError

_log = logging.getLogger(__name__)

TOPIC_NAME_CHARS_MAX = 255
_TOPIC_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,255}")
TOPIC_SECTION_PREFIX = "topic="
FILTER_KEY_PREFIX = "group."


class FlushMode(enum.Enum):
    """How a partition makes appends durable (spec section 4.6, DECISIONS 1-2)."""

    GROUP_COMMIT = "group_commit"  # unflushThreshold <= 0
    THRESHOLD = "threshold"  # unflushThreshold >= 1


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
        return config_values.parse_delete_policy(self.delete_policy)


@dataclass(frozen=True, kw_only=True)
class BrokerConfig:
    """A validated ``server.ini``. Build it with ``load_config``."""

    path: str  # absolute path of the ini file
    checksum: int  # zlib.crc32 of the file bytes (unsigned)
    broker_id: int  # 0..1023
    server_port: int = 8123  # 0 means "any free port" (tests)
    dashboard_http_port: int = 8120
    host_name: str | None = None  # DECISIONS 19: listen/register address when set
    data_path: str  # default ~/meta, expanded, absolute
    data_log_path: str  # default = data_path
    app_class_path: str | None = None  # default <config dir>/../provided when it exists
    num_partitions: int
    unflush_threshold: int
    unflush_interval_ms: int
    segment_bytes_max: int  # maxSegmentSize
    transfer_bytes_max: int  # maxTransferSize
    message_bytes_max: int  # maxMessageSize, default = transfer_bytes_max (DECISIONS 8)
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
    connections_max: int = 4096  # maxConnections (ours)
    idle_connection_timeout_s: int = 600  # idleConnectionTimeoutInSeconds (ours)
    header_timeout_s: int = 30  # headerTimeoutInSeconds (ours)
    topics_max: int = 1000  # maxTopics (ours): topics without an exact section
    accept_publish: bool = True
    accept_subscribe: bool = True
    stat: bool = False
    update_consumer_offsets: bool = False
    load_message_stores_in_parallel: bool = False
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
        """Whether ``topic`` passes DECISIONS 9 and fully matches some section's pattern."""
        try:
            validate_topic_name(topic)
        except InvalidTopicError:
            return False
        return any(pattern.fullmatch(topic) for pattern in self._topic_patterns)

    def data_path_for(self, topic: str) -> str:
        """Root directory of ``topic``'s partition directories."""
        return self.topic_config(topic).data_path

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


def validate_topic_name(topic: str) -> None:
    """Refuse a topic name that DECISIONS 9 does not allow.

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


# --- The key tables: ini key -> field, kind, default, required, bounds ------------------------

SYSTEM_KEYS: tuple[_Key, ...] = (
    _Key("brokerId", "broker_id", "int", 0, required=True, low=0, high=1023),
    _Key("serverPort", "server_port", "int", 8123, low=0, high=65535),
    _Key("dashboardHttpPort", "dashboard_http_port", "int", 8120, low=1, high=65535),
    _Key("hostName", "host_name", "str"),
    _Key("dataPath", "data_path", "path", "~/meta"),
    _Key("dataLogPath", "data_log_path", "path"),  # default: dataPath
    _Key("appClassPath", "app_class_path", "path"),  # default: <config dir>/../provided
    _Key("numPartitions", "num_partitions", "int", 1, required=True, low=1),
    _Key("unflushThreshold", "unflush_threshold", "int", 1000, required=True),
    _Key("unflushInterval", "unflush_interval_ms", "int", 10000, required=True),
    _Key("maxSegmentSize", "segment_bytes_max", "int", 1073741824, required=True, low=1),
    _Key("maxTransferSize", "transfer_bytes_max", "int", 1048576, required=True, low=1),
    _Key("maxMessageSize", "message_bytes_max", "int", None, low=1),  # default: maxTransferSize
    _Key("getProcessThreadCount", "get_process_thread_count", "int", None, low=1),  # 10 x CPUs
    _Key("putProcessThreadCount", "put_process_thread_count", "int", None, low=1),  # 10 x CPUs
    _Key("deletePolicy", "delete_policy", "delete_policy", "delete,168"),
    _Key("deleteWhen", "delete_when", "cron", "0 0 6,18 * * ?"),
    _Key("quartzThreadCount", "quartz_thread_count", "int", 5, low=1),
    _Key("maxCheckpoints", "max_checkpoints", "int", 3, low=1),
    _Key("checkpointInterval", "checkpoint_interval_ms", "long", 3600000, low=1),
    _Key("maxTxTimeoutTimerCapacity", "tx_timeout_timer_capacity", "int", 30000, low=1),
    _Key("flushTxLogAtCommit", "flush_tx_log_at_commit", "int", 1, low=0, high=2),
    _Key("maxTxTimeoutInSeconds", "tx_timeout_max_s", "int", 60, low=1),
    _Key("txJournalFileSize", "tx_journal_file_bytes", "int", 64 * 1024 * 1024, low=4096),
    _Key("txUnusedTimeoutInSeconds", "tx_unused_timeout_s", "int", 60, low=0),
    _Key("maxTxPerConnection", "tx_per_connection_max", "int", 10000, low=1),
    _Key("maxXaTxPerQualifier", "xa_per_qualifier_max", "int", 10000, low=1),
    _Key("maxConnections", "connections_max", "int", 4096, low=1),
    _Key("idleConnectionTimeoutInSeconds", "idle_connection_timeout_s", "int", 600, low=0),
    _Key("headerTimeoutInSeconds", "header_timeout_s", "int", 30, low=0),
    _Key("maxTopics", "topics_max", "int", 1000, low=0),
    _Key("acceptPublish", "accept_publish", "bool", True),
    _Key("acceptSubscribe", "accept_subscribe", "bool", True),
    _Key("stat", "stat", "bool", False),
    _Key("updateConsumerOffsets", "update_consumer_offsets", "bool", False),
    _Key("loadMessageStoresInParallel", "load_message_stores_in_parallel", "bool", False),
)

ZOOKEEPER_KEYS: tuple[_Key, ...] = (
    _Key("zk.zkEnable", "enabled", "bool", True),
    _Key("zk.zkConnect", "connect", "str", required=True),
    _Key("zk.zkSessionTimeoutMs", "session_timeout_ms", "int", 30000, low=1),
    _Key("zk.zkConnectionTimeoutMs", "connection_timeout_ms", "int", 30000, low=1),
    _Key("zk.zkSyncTimeMs", "sync_time_ms", "int", 5000, low=0),
    _Key("zk.zkRoot", "root", "zk_root", "/meta"),
)

# Defaults of topic keys are the parsed [system] values of the same field name. Keys starting
# with "group." name server-side filters (DECISIONS 12) and are handled outside this table.
TOPIC_KEYS: tuple[_Key, ...] = (
    _Key("numPartitions", "num_partitions", "int", low=1),
    _Key("unflushThreshold", "unflush_threshold", "int"),
    _Key("unflushInterval", "unflush_interval_ms", "int"),
    _Key("dataPath", "data_path", "path"),
    _Key("deletePolicy", "delete_policy", "delete_policy"),
    _Key("deleteWhen", "delete_when", "cron"),
    _Key("acceptPublish", "accept_publish", "bool"),
    _Key("acceptSubscribe", "accept_subscribe", "bool"),
    _Key("stat", "stat", "java_bool"),
)

SLAVE_KEYS: tuple[_Key, ...] = (
    _Key("slaveId", "slave_id", "int", required=True, low=0),
    _Key("slaveGroup", "slave_group", "str"),  # default: meta-slave-group_<slaveId>
    _Key("slaveMaxDelayInMills", "slave_max_delay_ms", "int", 500, low=0),
    _Key("autoSyncMasterConfig", "auto_sync_master_config", "java_bool", False),
)

# Field names of Java's MetaConfig that its key check accepts in [system]; ignored here.
JAVA_INTERNAL_KEYS = frozenset(
    "topics slaveConfig zkConfig topicConfigMap propertyChangeSupport lastModified path "
    "configFileChecksum closedPartitionMap serialVersionUID log".split()
)
_ZOOKEEPER_IGNORED = JAVA_INTERNAL_KEYS | {key.ini for key in SYSTEM_KEYS}
_TOPIC_IGNORED = frozenset(("topic", "filterClassNames"))


# --- Loading --------------------------------------------------------------------------------

_SYSTEM_SECTION = "system"
_ZOOKEEPER_SECTION = "zookeeper"


def load_config(
    path: str,
    overrides: Mapping[str, str] | None = None,
    topic_defaults: BrokerConfig | None = None,
) -> BrokerConfig:
    """Read and validate a ``server.ini``.

    Args:
        path: the ini file; relative paths inside it resolve against the current directory.
        overrides: ``{"system.hostName": "127.0.0.1", "zookeeper.zk.zkConnect": "..."}``,
            applied as if written in the file (``"topic=NAME.key"`` for a topic section).
            They do not change ``checksum``, which covers the file bytes only.
        topic_defaults: for a reload (spec 5.6), the running config: topic keys a section
            leaves blank take its ``[system]`` values, as in Java, not the file's.

    Returns:
        The frozen, validated configuration.

    Raises:
        ConfigError: unreadable file, bad syntax, unknown section or key, missing required
            key, or bad value; the text names file, section, key and value.
    """
    display = os.fspath(path)
    raw, text = _read_file(display)
    sections = config_values.parse_ini_text(display, text)
    overridden = config_values.apply_overrides(display, sections, overrides or {})
    source = Source(display, os.path.abspath(display), frozenset(overridden))
    _check_sections(source, sections)
    system = _system_values(source, sections[_SYSTEM_SECTION])
    zookeeper = _zookeeper_config(source, sections[_ZOOKEEPER_SECTION])
    defaults = system
    if topic_defaults is not None:
        defaults = {key.field: getattr(topic_defaults, key.field) for key in TOPIC_KEYS}
    topics = _topic_configs(source, sections, defaults)
    return BrokerConfig(
        path=source.path, checksum=zlib.crc32(raw), zookeeper=zookeeper, topics=topics, **system
    )


def load_slave_config(path: str) -> SlaveConfig:
    """Read and validate an ``async_slave.properties``.

    The file is read as UTF-8 (Java read it as GBK; the keys are ASCII either way).

    Args:
        path: the properties file.

    Returns:
        The frozen, validated slave configuration.

    Raises:
        ConfigError: unreadable file, duplicate or unknown key, missing ``slaveId``, bad value.
    """
    display = os.fspath(path)
    source = Source(display, os.path.abspath(display))
    items: dict[str, str] = {}
    for key, value, line_number in config_values.parse_properties(_read_file(display)[1]):
        if key in items:
            raise ConfigError(f"{display}: line {line_number}: duplicate key '{key}'")
        items[key] = value
    values = with_defaults(SLAVE_KEYS, read_keys(source, None, items, SLAVE_KEYS))
    if not values["slave_group"]:
        values["slave_group"] = f"meta-slave-group_{values['slave_id']}"
    return SlaveConfig(**values)


def _read_file(display: str) -> tuple[bytes, str]:
    """Read a whole configuration file; return its bytes and its UTF-8 text (BOM allowed)."""
    try:
        raw = read_config_bytes(display)
        return raw, raw.decode("utf-8-sig")
    except OSError as error:
        raise ConfigError(f"{display}: cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{display}: not UTF-8 (bad byte at offset {error.start})") from None


def _check_sections(source: Source, sections: Mapping[str, Mapping[str, str]]) -> None:
    """Require [system], [zookeeper] and a topic section; refuse any other section."""
    for name in sections:
        if name in (_SYSTEM_SECTION, _ZOOKEEPER_SECTION) or name.startswith(TOPIC_SECTION_PREFIX):
            continue
        raise ConfigError(
            f"{source.display}: unknown section [{name}] "
            "(expected [system], [zookeeper] or [topic=NAME])"
        )
    for required in (_SYSTEM_SECTION, _ZOOKEEPER_SECTION):
        if required not in sections:
            raise ConfigError(f"{source.display}: missing section [{required}]")
    if not any(name.startswith(TOPIC_SECTION_PREFIX) for name in sections):
        raise ConfigError(f"{source.display}: no [topic=NAME] section (at least one is required)")


def _system_values(source: Source, items: Mapping[str, str]) -> dict[str, object]:
    """Read [system] and fill the derived defaults; return BrokerConfig keyword arguments."""
    values = with_defaults(
        SYSTEM_KEYS,
        read_keys(source, _SYSTEM_SECTION, items, SYSTEM_KEYS, JAVA_INTERNAL_KEYS),
    )
    threads = 10 * (os.cpu_count() or 1)  # Java: 10 x availableProcessors()
    derived = {
        "data_log_path": values["data_path"],
        "message_bytes_max": values["transfer_bytes_max"],
        "get_process_thread_count": threads,
        "put_process_thread_count": threads,
        "app_class_path": _default_app_class_path(source.path),
    }
    for name, default in derived.items():
        if values[name] is None:
            values[name] = default
    # A record larger than maxTransferSize could be stored but never read back by a get.
    if values["message_bytes_max"] > values["transfer_bytes_max"]:
        raise ConfigError(
            f"{source.where(_SYSTEM_SECTION, 'maxMessageSize')} "
            f"maxMessageSize={values['message_bytes_max']} is larger than "
            f"maxTransferSize={values['transfer_bytes_max']}"
        )
    return values


def _default_app_class_path(config_path: str) -> str | None:
    """Java's default: ``<config dir>/../provided`` when that directory exists."""
    provided = os.path.join(os.path.dirname(os.path.dirname(config_path)), "provided")
    return provided if os.path.isdir(provided) else None


def _zookeeper_config(source: Source, items: Mapping[str, str]) -> ZkConfig:
    """Read [zookeeper]; [system] key names are accepted and ignored there, as in Java."""
    given = read_keys(source, _ZOOKEEPER_SECTION, items, ZOOKEEPER_KEYS, _ZOOKEEPER_IGNORED)
    return ZkConfig(**with_defaults(ZOOKEEPER_KEYS, given))


def _topic_configs(
    source: Source, sections: Mapping[str, Mapping[str, str]], system: Mapping[str, object]
) -> tuple[TopicConfig, ...]:
    """Read every [topic=NAME] section in file order; refuse two sections for one name."""
    topics: dict[str, TopicConfig] = {}
    for section, items in sections.items():
        if section.startswith(TOPIC_SECTION_PREFIX):
            topic = _topic_config(source, section, items, system)
            if topic.name in topics:
                raise ConfigError(f"{source.display}: duplicate topic section [{section}]")
            topics[topic.name] = topic
    return tuple(topics.values())


def _topic_config(
    source: Source, section: str, items: Mapping[str, str], system: Mapping[str, object]
) -> TopicConfig:
    """Read one topic section; its defaults are the [system] values of the same fields."""
    name = section[len(TOPIC_SECTION_PREFIX) :].strip()
    _check_topic_section_name(source, section, name)
    settings = {key: raw for key, raw in items.items() if not key.startswith(FILTER_KEY_PREFIX)}
    given = read_keys(source, section, settings, TOPIC_KEYS, _TOPIC_IGNORED)
    filters = tuple(
        _filter(source, section, key, raw)
        for key, raw in items.items()
        if key.startswith(FILTER_KEY_PREFIX) and raw.strip()
    )
    values = {spec.field: given.get(spec.field, system[spec.field]) for spec in TOPIC_KEYS}
    topic = TopicConfig(name=name, filters=filters, **values)  # type: ignore[arg-type]
    if topic.is_pattern and (given or filters):
        # Java looks topic settings up by exact name, so a wildcard section's values are unused.
        keys = ", ".join(
            key for key, raw in items.items() if raw.strip() and key not in _TOPIC_IGNORED
        )
        _log.warning(
            "%s: [%s] sets %s, but settings of a wildcard section apply to no topic: topics "
            "accepted through it use the [system] values",
            source.display,
            section,
            keys,
        )
    return topic


def _check_topic_section_name(source: Source, section: str, name: str) -> None:
    """An exact name must pass DECISIONS 9; a wildcard name must compile as a pattern."""
    if "*" not in name:
        try:
            validate_topic_name(name)
        except InvalidTopicError as error:
            raise ConfigError(f"{source.display}: [{section}] {error}") from None
        return
    try:
        re.compile(topic_regex(name))
    except re.error as error:
        raise ConfigError(
            f"{source.display}: [{section}] topic pattern {name!r} does not compile: {error}"
        ) from None


def _filter(source: Source, section: str, key: str, raw: str) -> tuple[str, str]:
    """Read ``group.<G>=package.module:callable`` into ``(G, target)`` without importing it."""
    group = key[len(FILTER_KEY_PREFIX) :]
    where = source.where(section, key)
    if not group.strip():
        raise ConfigError(f"{where} {key}={raw.strip()!r}: no consumer group after 'group.'")
    try:
        return group, config_values.check_filter_target(raw)
    except ValueError as error:
        raise ConfigError(f"{where} {key}={raw.strip()!r}: {error}") from None


def read_config_bytes(path: str) -> bytes:
    """The raw bytes of a config file (also what ``stats config`` serves to slaves)."""
    with open(path, "rb") as file:
        return file.read()
