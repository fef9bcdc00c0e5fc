"""The broker's file-descriptor budget: raise ``RLIMIT_NOFILE`` at start-up, warn when low.

What lives here: ``descriptors_needed`` (a pure estimate: one descriptor per configured
partition for its last segment, one per connection the listening ports allow at once
(``connections.connections_allowed``: the text port, the HTTP port when it serves, the
dashboard when it is on), and a reserve for the listening sockets, ZooKeeper, the journal,
logs and the flusher's directory fsyncs) and
``raise_descriptor_limit``, which ``meta.server.main`` calls once before the store opens: it
raises the soft limit to the hard one (a common ``ulimit -n`` is 1024 while the hard limit is
far higher) and logs a WARNING when even that is below the estimate. Running out anyway is
survivable (the store treats EMFILE / ENFILE as transient), but puts then get 500.

Main thread, at start-up only.
"""

from __future__ import annotations

import logging
import resource
from typing import Any

from meta.server.connections import DASHBOARD_OFF, connections_allowed

log = logging.getLogger("meta.server")

# Listening sockets, ZooKeeper, the journal's files, the log, the flusher's
# directory fsyncs, pipes of the reactor and its thread pool, with room to spare.
RESERVED_DESCRIPTORS = 64


def descriptors_needed(config: Any, http: bool = False) -> int:
    """The descriptors ``config`` needs at least: partitions, connections and a reserve.

    A wildcard topic section counts its ``numPartitions`` once (the topics it will create are
    unknown); partitions with several segments hold one descriptor per segment. ``http``:
    the HTTP protocol serves (its port's connections count).
    """
    partitions = sum(topic.num_partitions for topic in config.topics)
    return partitions + connections_allowed(config, http) + RESERVED_DESCRIPTORS


def raise_descriptor_limit(config: Any, limits: Any = resource, http: bool = False) -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; warn when it stays below need.

    Args:
        config: the ``BrokerConfig`` (its topics and connection caps).
        limits: the ``resource`` module (tests pass a stand-in).
        http: the HTTP protocol serves.

    Returns:
        The soft limit in force afterwards.
    """
    soft, hard = limits.getrlimit(limits.RLIMIT_NOFILE)
    if hard != limits.RLIM_INFINITY and soft != limits.RLIM_INFINITY and soft < hard:
        try:
            limits.setrlimit(limits.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as error:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, error)
        else:
            log.info("raised the open-file limit (RLIMIT_NOFILE) from %d to %d", soft, hard)
            soft = hard
    needed = descriptors_needed(config, http)
    if soft != limits.RLIM_INFINITY and soft < needed:
        log.warning(
            "the open-file limit (RLIMIT_NOFILE) is %d, below the %d descriptors the configured "
            "partitions and connections need (%s); raise it (ulimit -n, systemd LimitNOFILE=) "
            "or lower those caps, or puts will get 500 while descriptors run out",
            soft,
            needed,
            _caps(config, http),
        )
    return soft


def _caps(config: Any, http: bool) -> str:
    """The connection caps ``descriptors_needed`` counted, as the keys that set them."""
    caps = [f"maxConnections={config.connections_max}"]
    if http:
        caps.append(f"maxHttpConnections={config.http_connections_max}")
    if config.dashboard_http_port != DASHBOARD_OFF:
        caps.append(f"maxDashboardConnections={config.dashboard_connections_max}")
    if config.total_connections_max > 0:
        caps.append(f"at most maxTotalConnections={config.total_connections_max} in all")
    return ", ".join(caps)
