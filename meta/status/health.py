"""``/healthz`` and ``/readyz``.

* ``/healthz``: the process answers, so it is alive: always 200.
* ``/readyz``: 200 once the broker serves (its stores are open and, with ZooKeeper, it is
  registered and its session is connected), 503 before, while ZooKeeper is suspended or lost,
  and while stopping. The body names every reason it is not ready, one per line.

Pure functions of the broker's public state; reactor thread only.
"""

from __future__ import annotations

from typing import Any

READY = "ready"
NOT_SERVING = "stores not open or not registered in ZooKeeper yet (or stopping)"
ZOOKEEPER_DISCONNECTED = "ZooKeeper session not connected"


def not_ready_reasons(broker: Any) -> list[str]:
    """Why ``broker`` is not ready; empty when it is.

    Args:
        broker: a ``meta.server.broker.Broker``.

    Returns:
        Reasons as short sentences, in a stable order.
    """
    reasons = []
    if not broker.serving:
        reasons.append(NOT_SERVING)
    registry = broker.registry
    if registry is not None and broker.serving and not registry.connected:
        reasons.append(ZOOKEEPER_DISCONNECTED)
    return reasons


def readiness(broker: Any) -> tuple[int, bytes]:
    """The ``/readyz`` answer: ``(200, b"ready\\n")`` or ``(503, reasons)``."""
    reasons = not_ready_reasons(broker)
    if not reasons:
        return 200, f"{READY}\n".encode()
    return 503, "".join(f"not ready: {reason}\n" for reason in reasons).encode()
