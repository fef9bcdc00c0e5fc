"""Applying a config reload to a running broker: its data-directory locks, its ZooKeeper half
and its log lines.

What lives here: ``lock_data_paths`` (a new topic ``dataPath`` is locked as at start-up),
``reload_registry`` (register the topics again after a reload), ``log_reload`` and the two
log prefixes ``tools/metaServer.sh reload`` looks for. What a reload changes is computed by
``meta.config.reload`` (``reload_outcome``, ``ReloadOutcome``, ``ReloadRefused``, re-exported
here for the broker). ``Broker.reload`` (``meta.server.broker``) applies a reload with these;
the rules for what takes effect are in that module's docstring.

Thread affinity: everything runs on the reactor thread (``lock_data_paths`` makes a few local
system calls per new ``dataPath``; the registry's methods return Deferreds).
"""

from __future__ import annotations

import logging
from typing import Any

from meta.config import BrokerConfig
from meta.config.reload import ReloadOutcome, ReloadRefused, reload_outcome
from meta.errors import StoreError
from meta.store.lock import DataPathLock

__all__ = [
    "RELOAD_DONE",
    "RELOAD_FAILED",
    "ReloadOutcome",
    "ReloadRefused",
    "lock_data_paths",
    "log_reload",
    "reload_outcome",
    "reload_registry",
]

log = logging.getLogger("meta.server")

RELOAD_DONE = "config reload done"
"""Starts the log line of every applied reload (``tools/metaServer.sh reload`` looks for it)."""
RELOAD_FAILED = "config reload failed"
"""Starts the log line of every refused reload (the running configuration is kept)."""


def lock_data_paths(lock: DataPathLock, config: BrokerConfig) -> None:
    """Lock the ``dataPath`` of every topic of ``config`` that ``lock`` does not hold yet,
    before a reload lets those topics take puts: a second broker on it is refused, as at
    start-up.

    Raises:
        ReloadRefused: a new ``dataPath`` is another broker's or cannot be locked; the text
            names it (the running configuration is kept).
    """
    try:
        lock.acquire(topic.data_path for topic in config.topics)
    except StoreError as error:
        raise ReloadRefused(str(error)) from None


async def reload_registry(
    registry: Any, config: BrokerConfig, topics_with_data: set[str]
) -> list[str]:
    """Register configured topics and topics with data again (forced), unregister the other
    registered topics, rewrite the checksum; return what failed, one text each."""
    registry.set_config(config)
    configured = sorted(topic.name for topic in config.topics)
    with_data = sorted(topics_with_data - set(configured))
    problems: list[str] = []
    for topic in configured + with_data:
        try:
            await registry.register_topic(topic, force=True)
        except Exception as error:  # RegistryError or a kazoo error: report, go on.
            problems.append(f"registering topic {topic} failed: {error!r}")
    for topic in sorted(set(registry.registered_topics) - set(configured) - set(with_data)):
        try:
            await registry.unregister_topic(topic)
        except Exception as error:
            problems.append(f"unregistering topic {topic} failed: {error!r}")
    try:
        await registry.update_config_checksum(config.checksum)
    except Exception as error:
        problems.append(f"writing master_config_checksum failed: {error!r}")
    return problems


def log_reload(path: str, outcome: ReloadOutcome) -> None:
    """Log the applied reload: INFO ``config reload done: ...``, or ERROR when ZooKeeper
    could not be updated."""
    summary = outcome.summary(path)
    if not outcome.problems:
        log.info("%s: %s", RELOAD_DONE, summary)
        return
    log.error(
        "%s, but ZooKeeper is not up to date (reload again once it is reachable): %s; %s",
        RELOAD_DONE,
        summary,
        "; ".join(outcome.problems),
    )
