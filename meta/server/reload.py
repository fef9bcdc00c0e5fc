"""What a config reload changed, and its ZooKeeper half (spec §5.6, zk spec §1.3 step 3).

What lives here: ``reload_outcome`` (pure: compare the running config with the re-read file),
``ReloadOutcome``, ``ReloadRefused``, the two log prefixes ``tools/metaServer.sh reload``
looks for, ``reload_registry`` (register the topics again after a reload) and ``log_reload``.
``Broker.reload`` (``meta.server.broker``) applies a reload with these; the rules for what
takes effect are in that module's docstring.

Thread affinity: ``reload_registry`` and ``log_reload`` run on the reactor thread (the
registry's methods return Deferreds); the rest is pure.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection
from typing import Any

from meta.config import SYSTEM_KEYS, TOPIC_KEYS, ZOOKEEPER_KEYS, BrokerConfig
from meta.errors import MetaError

log = logging.getLogger("meta.server")

RELOAD_DONE = "config reload done"
"""Starts the log line of every applied reload (``tools/metaServer.sh reload`` looks for it)."""
RELOAD_FAILED = "config reload failed"
"""Starts the log line of every refused reload (the running configuration is kept)."""
# Topic keys whose new value reaches only partitions created after a reload.
NEW_PARTITIONS_ONLY = tuple(
    key
    for key in TOPIC_KEYS
    if key.field in ("unflush_threshold", "unflush_interval_ms", "data_path")
)


class ReloadRefused(MetaError):
    """A reload was not applied (the broker is stopping); the running config is kept."""


@dataclasses.dataclass(frozen=True)
class ReloadOutcome:
    """What a reload changed.

    Attributes:
        added: topic sections that are new, sorted; ``changed`` and ``removed`` likewise.
        at_restart: what waits for a restart: ``[system]`` and ``[zookeeper]`` keys, and
            flush settings and ``dataPath`` of topics with open partitions, as
            ``"[system] numPartitions changed to 4 (running: 1)"``.
        checksum: the new file's CRC-32.
        problems: ZooKeeper updates that failed, one text each.
    """

    added: tuple[str, ...]
    changed: tuple[str, ...]
    removed: tuple[str, ...]
    at_restart: tuple[str, ...]
    checksum: int
    problems: tuple[str, ...] = ()

    def summary(self, path: str) -> str:
        """``<path> (checksum N); topics added: ...; changed: ...; removed: ...``."""

        def names(topics: tuple[str, ...]) -> str:
            return ", ".join(topics) or "none"

        text = (
            f"{path} (checksum {self.checksum}); topics added: {names(self.added)}; "
            f"changed: {names(self.changed)}; removed: {names(self.removed)}"
        )
        if self.at_restart:
            text += f"; {len(self.at_restart)} change(s) wait for a restart"
        return text


def reload_outcome(
    running: BrokerConfig, reread: BrokerConfig, open_topics: Collection[str] = ()
) -> ReloadOutcome:
    """Compare the running config with the re-read file (pure).

    Args:
        running: the configuration the broker runs with.
        reread: the file as re-read.
        open_topics: topics that have open partitions.
    """
    old = {topic.name: topic for topic in running.topics}
    new = {topic.name: topic for topic in reread.topics}
    changed = tuple(sorted(name for name in new.keys() & old.keys() if new[name] != old[name]))
    compared = [
        ("[system]", SYSTEM_KEYS, running, reread, ""),
        ("[zookeeper]", ZOOKEEPER_KEYS, running.zookeeper, reread.zookeeper, ""),
    ]
    compared += [
        (f"[topic={name}]", NEW_PARTITIONS_ONLY, old[name], new[name], " for open partitions")
        for name in changed
        if name in open_topics
    ]
    at_restart = [
        f"{section} {key.ini} changed to {getattr(after, key.field)} "
        f"(running: {getattr(before, key.field)}){scope}"
        for section, keys, before, after, scope in compared
        for key in keys
        if getattr(before, key.field) != getattr(after, key.field)
    ]
    return ReloadOutcome(
        added=tuple(sorted(new.keys() - old.keys())),
        changed=changed,
        removed=tuple(sorted(old.keys() - new.keys())),
        at_restart=tuple(at_restart),
        checksum=reread.checksum,
    )


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
