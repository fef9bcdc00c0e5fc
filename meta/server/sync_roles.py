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


def become_gregor(broker: Broker, reactor: Any) -> None:
    """Make ``broker`` a gregor slave: it takes ``sync``, refuses puts, answers ``stats sync``."""
    from meta.sync.gregor import GregorSlave

    broker.sync = GregorSlave(
        broker.store.partitions,
        lambda connection: connection in broker.connections,
        reactor.seconds,
    )
    broker.refuses_puts = True
    log.info("synchronous replication: gregor slave (no ZooKeeper registration)")


def gregor_started(broker: Broker) -> None:
    """Create the status-test partition of a started gregor slave (a samsa master probes it)."""
    from meta.sync.gregor import STATUS_TEST_TOPIC

    broker.partition_for_put(STATUS_TEST_TOPIC, 0)
