"""What a config reload changes, computed from the running config and the re-read file.

What lives here: ``reload_outcome`` (compare the two), ``ReloadOutcome`` (added, changed and
removed topics, what waits for a restart), ``NEW_PARTITIONS_ONLY`` (the topic keys whose new
value reaches only partitions created after a reload) and ``ReloadRefused``. A broker applies
an outcome with ``meta.server.reload``; an async slave computes one when it follows its
master's file (``meta.slave.config_sync``). Pure and thread-safe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

from meta.config.keys import SYSTEM_KEYS, TOPIC_KEYS, ZOOKEEPER_KEYS
from meta.config.settings import BrokerConfig
from meta.errors import MetaError

# Topic keys whose new value reaches only partitions created after a reload.
NEW_PARTITIONS_ONLY = tuple(
    key
    for key in TOPIC_KEYS
    if key.field in ("unflush_threshold", "unflush_interval_ms", "data_path")
)


class ReloadRefused(MetaError):
    """A reload was not applied (the broker is stopping, or a new topic ``dataPath`` is
    another broker's); the running config is kept."""


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
