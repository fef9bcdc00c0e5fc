"""The key tables: every ini key -> its field, kind, default, whether required, and bounds.

``KeySpec`` describes one key and ``convert_value`` turns its raw text into a typed,
range-checked value through the grammar of its kind (``meta.config.grammars``). The tables
``SYSTEM_KEYS``, ``ZOOKEEPER_KEYS``, ``TOPIC_KEYS``, ``SLAVE_KEYS``, ``HTTP_KEYS``,
``SAMSA_KEYS`` and ``GREGOR_KEYS`` are the one explicit map from ``server.ini``,
``async_slave.properties``, ``jettyBroker.properties``, ``samsa_master.properties`` and
``gregor_slave.properties`` keys to the fields of the frozen objects of ``meta.config.settings``.
Pure data and pure functions; thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from meta.config.grammars import (
    JAVA_INT_MAX,
    JAVA_INT_MIN,
    JAVA_LONG_MIN,
    check_cron,
    check_delete_policy,
    parse_bool,
    parse_host_optional_port,
    parse_host_port,
    parse_int_expression,
    parse_java_bool,
    parse_path,
    parse_zk_root,
)
from meta.protocol.commands import LONG_MAX


@dataclass(frozen=True)
class KeySpec:
    """One configuration key: the field it fills, its kind, default and bounds.

    ``default`` None means "absent" for ``str`` and ``path`` kinds, and "derived from other
    values" otherwise (``meta.config.loading`` says from which). ``low`` / ``high`` None mean the
    Java int (``int``) or Java long (``long``) limits.
    """

    ini: str
    field: str
    kind: str  # a key of CONVERTERS
    default: object = None
    required: bool = False
    low: int | None = None
    high: int | None = None


CONVERTERS: dict[str, Callable[[str], object]] = {
    "int": parse_int_expression,
    "long": parse_int_expression,
    "bool": parse_bool,
    "java_bool": parse_java_bool,
    "str": str.strip,
    "path": parse_path,
    "zk_root": parse_zk_root,
    "host_port": parse_host_port,
    "host_optional_port": parse_host_optional_port,
    "delete_policy": check_delete_policy,
    "cron": check_cron,
}
_BOUNDS = {"int": (JAVA_INT_MIN, JAVA_INT_MAX), "long": (JAVA_LONG_MIN, LONG_MAX)}


def convert_value(spec: KeySpec, raw: str) -> object:
    """Convert a non-blank raw value by ``spec.kind`` and check integer bounds.

    Raises:
        ValueError: the value does not parse or is out of range.
    """
    value = CONVERTERS[spec.kind](raw)
    bounds = _BOUNDS.get(spec.kind)
    if bounds is not None:
        low = bounds[0] if spec.low is None else spec.low
        high = bounds[1] if spec.high is None else spec.high
        if not low <= value <= high:
            raise ValueError(f"out of range (must be {low}..{high})")
    return value


_Key = KeySpec  # the short name keeps each table row on one line

SYSTEM_KEYS: tuple[_Key, ...] = (
    _Key("brokerId", "broker_id", "int", 0, required=True, low=0, high=1023),
    _Key("serverPort", "server_port", "int", 8123, low=0, high=65535),
    _Key("dashboardHttpPort", "dashboard_http_port", "int", 8120, low=-1, high=65535),
    _Key("dashboardAdminTokenFile", "dashboard_admin_token_file", "path"),  # unset: no actions
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
    _Key("txActiveTimeoutInSeconds", "tx_active_timeout_s", "int", 300, low=0),
    _Key("maxOpenTx", "tx_open_max", "int", 100_000, low=2),
    _Key("maxOpenTxBytes", "tx_open_bytes_max", "long", 256 * 1024 * 1024, low=2),
    _Key("maxTxPerAddress", "tx_per_address_max", "int", 10000, low=1),
    _Key("maxTxBytesPerAddress", "tx_bytes_per_address_max", "long", 64 * 1024 * 1024, low=1),
    _Key("maxConnections", "connections_max", "int", 4096, low=1),
    _Key("maxHttpConnections", "http_connections_max", "int", 1024, low=1),
    _Key("maxDashboardConnections", "dashboard_connections_max", "int", 64, low=1),
    _Key("maxTotalConnections", "total_connections_max", "int", 0, low=0),
    _Key("idleConnectionTimeoutInSeconds", "idle_connection_timeout_s", "int", 600, low=0),
    _Key("headerTimeoutInSeconds", "header_timeout_s", "int", 30, low=0),
    _Key("maxQueuedReplyBytes", "queued_reply_bytes_max", "long", 64 * 1024 * 1024, low=1),
    _Key("maxTopics", "topics_max", "int", 1000, low=0),
    _Key("acceptPublish", "accept_publish", "bool", True),
    _Key("acceptSubscribe", "accept_subscribe", "bool", True),
    _Key("stat", "stat", "bool", False),
    _Key("updateConsumerOffsets", "update_consumer_offsets", "bool", False),
    _Key("loadMessageStoresInParallel", "load_message_stores_in_parallel", "bool", False),
    _Key("scrubBytesPerSecond", "scrub_bytes_per_s", "long", 4 * 1024 * 1024, low=0),
    _Key("recoveryPointIntervalInSeconds", "recovery_point_interval_s", "int", 60, low=1),
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
# with "group." name server-side filters (compatibility.md) and are handled outside this table.
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

# conf/jettyBroker.properties: the HTTP protocol.
HTTP_KEYS: tuple[_Key, ...] = (_Key("serverPort", "server_port", "int", 8080, low=0, high=65535),)

# conf/samsa_master.properties: a synchronous-replication master. The thread
# counts and recoverParallel are Java's thread-pool sizes: accepted and checked, not used.
# maxSyncsInFlight is this broker's own: the bound of the link's unanswered syncs.
SAMSA_KEYS: tuple[_Key, ...] = (
    _Key("slave", "slave", "host_port", required=True),
    _Key("callbackThreadCount", "callback_thread_count", "int", None, low=1),
    _Key("sendToSlaveTimeoutInMills", "send_to_slave_timeout_ms", "int", 2000, low=1),
    _Key("slaveContinuousFailureThreshold", "slave_failure_threshold", "int", 100, low=1),
    _Key("checkSlaveIntervalInMills", "check_slave_interval_ms", "int", 100, low=1),
    _Key("recoverOffset", "recover_offset", "java_bool", False),
    _Key("maxSyncsInFlight", "syncs_in_flight_max", "int", 10_000, low=1),
    _Key("recoverParallel", "recover_parallel", "java_bool", True),
    _Key("recoverParallelHint", "recover_parallel_hint", "int", None, low=1),
    _Key("syncSecret", "sync_secret", "str"),  # not Java's: meta.sync.peers
)

# conf/gregor_slave.properties: Java's has no keys; these name who may send `sync`.
GREGOR_KEYS: tuple[_Key, ...] = (
    _Key("master", "master", "host_optional_port", required=True),
    _Key("syncSecret", "sync_secret", "str"),
)

# Field names of Java's MetaConfig that its key check accepts in [system]; ignored here.
JAVA_INTERNAL_KEYS = frozenset(
    "topics slaveConfig zkConfig topicConfigMap propertyChangeSupport lastModified path "
    "configFileChecksum closedPartitionMap serialVersionUID log".split()
)
