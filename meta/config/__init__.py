"""Broker configuration: ``server.ini`` and the plug-in ``.properties`` files -> frozen objects.

This package is the ONLY place configuration is read (STYLE 14), and this module is its public
face: import from ``meta.config``. Its modules, each one concept:

* ``settings``: the frozen objects (``BrokerConfig``, ``TopicConfig``, ``ZkConfig``,
  ``SlaveConfig``, ``HttpConfig``, ``SamsaConfig``, ``GregorConfig``, ``FlushMode``) and the
  topic-name rule;
* ``loading``: ``load_config``, ``load_slave_config``, ``load_http_config``,
  ``load_samsa_config`` and ``load_gregor_config``, the only code that reads the files;
* ``keys``: the key tables, one explicit map from every ini key to its field, kind and default;
* ``sections``: reading an ini section by its table, with errors that name file, section, key;
* ``grammars``: the value grammars (integer expressions, booleans, ``deletePolicy``, ...);
* ``cron``: Quartz cron expressions (``deleteWhen``) and their next fire time;
* ``properties``: Java ``.properties`` text;
* ``reload``: what a reload changes, computed from the running config and the re-read file.

Layering: this package imports only ``meta.errors``, ``meta.protocol.commands`` (``LONG_MAX``)
and croniter; the store, the server and the slave import it, never the reverse.
"""

from __future__ import annotations

from meta.config.grammars import DeletePolicySpec
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
from meta.config.loading import (
    load_config,
    load_gregor_config,
    load_http_config,
    load_samsa_config,
    load_slave_config,
    read_config_bytes,
)
from meta.config.settings import (
    FILTER_KEY_PREFIX,
    TOPIC_NAME_CHARS_MAX,
    TOPIC_SECTION_PREFIX,
    BrokerConfig,
    FlushMode,
    GregorConfig,
    HttpConfig,
    SamsaConfig,
    SlaveConfig,
    TopicConfig,
    ZkConfig,
    journal_flush_mode,
    topic_regex,
    validate_topic_name,
)

__all__ = [
    "FILTER_KEY_PREFIX",
    "GREGOR_KEYS",
    "HTTP_KEYS",
    "JAVA_INTERNAL_KEYS",
    "SAMSA_KEYS",
    "SLAVE_KEYS",
    "SYSTEM_KEYS",
    "TOPIC_KEYS",
    "TOPIC_NAME_CHARS_MAX",
    "TOPIC_SECTION_PREFIX",
    "ZOOKEEPER_KEYS",
    "BrokerConfig",
    "DeletePolicySpec",
    "FlushMode",
    "GregorConfig",
    "HttpConfig",
    "SamsaConfig",
    "SlaveConfig",
    "TopicConfig",
    "ZkConfig",
    "load_config",
    "load_gregor_config",
    "load_http_config",
    "load_samsa_config",
    "load_slave_config",
    "journal_flush_mode",
    "read_config_bytes",
    "topic_regex",
    "validate_topic_name",
]
