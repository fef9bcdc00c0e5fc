"""What ``meta-server`` does for the synchronous-replication roles (``meta.sync``).

``offsets_recovered`` runs a samsa master's ``recoverOffset=true`` before the broker is
built (so before it registers in ZooKeeper); ``become_gregor`` makes a built broker a gregor
slave and ``gregor_started`` creates its status-test partition once it serves. Called by
``meta.server.main`` only: blocking before the reactor runs, on the reactor thread after.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from meta.server.broker import Broker

log = logging.getLogger("meta.server")


def offsets_recovered(config: Any) -> bool:
    """``recoverOffset=true`` on a samsa master: remap the consumer offsets in ZooKeeper to
    this broker's data before the broker registers (``meta.sync.recover_offsets``); False
    (logged) when it fails, which fails the start."""
    if not config.zookeeper.enabled:
        log.warning("recoverOffset=true but ZooKeeper is disabled: no offsets to recover")
        return True
    from meta.sync.recover_offsets import recover_at_start

    try:
        recover_at_start(config)
    except Exception as error:
        log.error("broker failed to start: recovering the consumer offsets failed: %r", error)
        return False
    return True


def become_gregor(broker: Broker, reactor: Any, config: Any) -> bool:
    """Make ``broker`` a gregor slave: it takes ``sync`` from the master ``config`` (its
    ``GregorConfig``) names, refuses puts, answers ``stats sync``. False (logged) when the
    master's host does not resolve, which fails the start."""
    from meta.log_limits import PeerWarnings
    from meta.sync.gregor import GregorSlave
    from meta.sync.peers import SyncPeers

    warnings = PeerWarnings()
    sync_log = logging.getLogger("meta.sync")

    def warn(host: str, text: str) -> None:
        warnings.warn(sync_log, host, "%s", text)

    def is_open(connection: Any) -> bool:
        return connection in broker.connections

    try:
        peers = SyncPeers.from_config(config, is_open, warn)
    except OSError as error:
        log.error(
            "broker failed to start: the master %s of gregor_slave.properties does not resolve: %s",
            config.master,
            error,
        )
        return False
    broker.sync = GregorSlave(broker.store.partitions, is_open, reactor.seconds, peers)
    broker.refuses_puts = True
    log.info(
        "synchronous replication: gregor slave (no ZooKeeper registration); sync is accepted "
        "from the master %s (addresses %s)%s",
        config.master,
        ", ".join(sorted(peers.accepted)),
        " with its syncSecret" if config.sync_secret else "",
    )
    return True


def gregor_started(broker: Broker) -> None:
    """Create the status-test partition of a started gregor slave (a samsa master probes it)."""
    from meta.sync.gregor import STATUS_TEST_TOPIC

    broker.partition_for_put(STATUS_TEST_TOPIC, 0)
