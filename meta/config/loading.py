"""Loading ``server.ini`` and ``async_slave.properties`` into the frozen objects of ``settings``.

This is the ONLY module that reads configuration files. ``load_config`` parses MetaQ's
``server.ini`` shape (``[system]``, ``[zookeeper]``, ``[topic=NAME]``, Java's) into a
validated ``BrokerConfig``; ``load_slave_config`` reads ``async_slave.properties`` into a
``SlaveConfig``. Every ini key maps to a field in one explicit table of ``meta.config.keys``
(``SYSTEM_KEYS``, ``ZOOKEEPER_KEYS``, ``TOPIC_KEYS``, ``SLAVE_KEYS``) that also gives its type,
default and whether it is required. Value grammars live in ``meta.config.grammars``.

Rules kept from Java (ini4j + Aviator): keys are case-sensitive; lines are trimmed (so an indented
line is never a continuation); a blank value counts as absent for optional keys; integer values
may be arithmetic (``1024*1024*1024``); an unknown key is an error naming file, section and key
(compatibility.md). Java's internal field names (``topics``, ``slaveConfig``, ...) are accepted and
ignored with a warning, as are ``[system]`` names inside ``[zookeeper]``. Every section name is a
topic pattern (``*`` -> ``.*``, nothing else escaped, so ``.`` matches any character); per-topic
settings are looked up by exact name only. Departures: unknown sections are errors (Java ignores
them); duplicate keys and sections are errors; ``maxMessageSize`` is new; relative
paths are resolved against the current working directory at load time; files are read as UTF-8.

Invariants: every object returned is frozen and fully validated; ``BrokerConfig.topics`` keeps
file order; ``checksum`` is the unsigned CRC-32 of the raw file bytes (published to ZooKeeper).
Thread-safety: loading does blocking file I/O (call it before the reactor runs or in a thread);
the returned objects are immutable and safe to share between threads.
"""

from __future__ import annotations

import logging
import os
import re
import zlib
from collections.abc import Mapping

from meta.config.grammars import check_filter_target
from meta.config.keys import (
    GREGOR_KEYS,
    HTTP_KEYS,
    JAVA_INTERNAL_KEYS,
    SAMSA_KEYS,
    SLAVE_KEYS,
    SYSTEM_KEYS,
    TOPIC_KEYS,
    ZOOKEEPER_KEYS,
)
from meta.config.properties import parse_properties
from meta.config.sections import Source, apply_overrides, parse_ini_text, read_keys, with_defaults
from meta.config.settings import (
    FILTER_KEY_PREFIX,
    TOPIC_SECTION_PREFIX,
    BrokerConfig,
    GregorConfig,
    HttpConfig,
    SamsaConfig,
    SlaveConfig,
    TopicConfig,
    ZkConfig,
    topic_regex,
    validate_topic_name,
)
from meta.errors import ConfigError, InvalidTopicError

_log = logging.getLogger("meta.config")

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
        topic_defaults: for a reload, the running config: topic keys a section
            leaves blank take its ``[system]`` values, as in Java, not the file's.

    Returns:
        The frozen, validated configuration.

    Raises:
        ConfigError: unreadable file, bad syntax, unknown section or key, missing required
            key, or bad value; the text names file, section, key and value.
    """
    display = os.fspath(path)
    raw, text = _read_file(display)
    sections = parse_ini_text(display, text)
    overridden = apply_overrides(display, sections, overrides or {})
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
    values = _read_properties(path, SLAVE_KEYS)
    if not values["slave_group"]:
        values["slave_group"] = f"meta-slave-group_{values['slave_id']}"
    return SlaveConfig(**values)


def load_http_config(path: str) -> HttpConfig:
    """Read and validate a ``jettyBroker.properties`` (the HTTP protocol).

    Raises:
        ConfigError: unreadable file, duplicate or unknown key, bad value.
    """
    return HttpConfig(**_read_properties(path, HTTP_KEYS))


def load_samsa_config(path: str) -> SamsaConfig:
    """Read and validate a ``samsa_master.properties`` (synchronous replication).

    Raises:
        ConfigError: unreadable file, duplicate or unknown key, a missing ``slave``, a
            ``slave`` that is not one ``host:port``, a number that is not > 0.
    """
    return SamsaConfig(**_read_properties(path, SAMSA_KEYS))


def load_gregor_config(path: str) -> GregorConfig:
    """Read and validate a ``gregor_slave.properties``: any key in it is an error.

    Raises:
        ConfigError: unreadable file, or a key (the file has none in Java either).
    """
    return GregorConfig(**_read_properties(path, GREGOR_KEYS))


def _read_properties(path: str, keys: tuple) -> dict:
    """The values of a properties file read by ``keys``'s table, defaults filled in."""
    display = os.fspath(path)
    source = Source(display, os.path.abspath(display))
    items: dict[str, str] = {}
    for key, value, line_number in parse_properties(_read_file(display)[1]):
        if key in items:
            raise ConfigError(f"{display}: line {line_number}: duplicate key '{key}'")
        items[key] = value
    return with_defaults(keys, read_keys(source, None, items, keys))


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
    _check_address_share(source, values)
    return values


# A per-address transaction cap -> the broker-wide cap it must stay within half of.
_ADDRESS_SHARES = (
    ("maxTxPerAddress", "tx_per_address_max", "maxOpenTx", "tx_open_max"),
    ("maxTxBytesPerAddress", "tx_bytes_per_address_max", "maxOpenTxBytes", "tx_open_bytes_max"),
)


def _check_address_share(source: Source, values: Mapping[str, object]) -> None:
    """One client address may hold at most half of the broker's open transactions (count and
    bytes), so one address can never take them all from the others."""
    for key, field, whole_key, whole_field in _ADDRESS_SHARES:
        share, whole = values[field], values[whole_field]
        if share * 2 > whole:  # type: ignore[operator]
            raise ConfigError(
                f"{source.where(_SYSTEM_SECTION, key)} {key}={share} is more than half of "
                f"{whole_key}={whole}: one client address could take the others' share"
            )


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
    """An exact name must pass the topic-name rule; a wildcard name must compile as a pattern."""
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
        return group, check_filter_target(raw)
    except ValueError as error:
        raise ConfigError(f"{where} {key}={raw.strip()!r}: {error}") from None


def read_config_bytes(path: str) -> bytes:
    """The raw bytes of a config file (also what ``stats config`` serves to slaves)."""
    with open(path, "rb") as file:
        return file.read()
